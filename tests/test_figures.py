"""Figures render through vl_convert, and the table formatters write valid Markdown and booktabs."""
from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import pytest

from ema_core import palette
from ema_core.dilution_config import DilutionConfig
from ema_core.dilution import ALL_RATES, analytic_frame, measure_identity, rate_label
from ema_core.figures import SUBTITLE_SIZE, TITLE_SIZE, TITLE_WIDTH, chart_to_png, chart_to_svg, text_width
from ema_core.studies.content.figures import lm_ablation_chart, lm_ablation_frame, lm_curve_chart, lm_curve_frame
from ema_core.studies.dilution.figures import SIR_CLIP_DB, identity_chart, lag_weight_chart, sir_chart
from ema_core.studies.structure.figures import (ROLE_TITLE_WIDTH, probe_control_chart, probe_control_frame, role_accuracy_chart,
                                        role_accuracy_frame)
from ema_core.tables import EMPTY, latex_escape, to_latex_booktabs, to_markdown
from ema_core.rundir import RunDir, run_id_for
from lm_fixture import make_lm_runs
from store import ingest
from store.content import lm_curves, lm_final_stats
from store.dilution import dilution_accuracy
from store.structure import probe_accuracy_stats, probe_control
from structure_fixture import make_structure_runs

ALPHAS = (0.5, 0.1, 0.02)


@pytest.fixture(scope="module")
def analytic():
    # α = 1 puts an infinite SIR at lag 0 and zero weights after it: the edge cases of both charts.
    return analytic_frame(ALPHAS + (1.0,), 12)


@pytest.fixture(scope="module")
def accuracy():
    rows = [(rate_label(a), lag, float(np.exp(-a * lag))) for a in ALPHAS for lag in range(13)]
    rows += [(ALL_RATES, lag, 1.0) for lag in range(13)]
    return pd.DataFrame(rows, columns=["feature", "lag", "accuracy"])


def _spec(chart) -> dict:
    # to_json goes through the strict JSON encoder: a NaN or ±inf left in the data would fail here.
    return json.loads(chart.to_json())


def _colour_scales(spec: dict) -> list[dict]:
    """Every colour scale of a chart, layers, facets and nested layers included."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            scale = node.get("encoding", {}).get("color", {}).get("scale")
            if scale and "domain" in scale:
                found.append(scale)
            for key in ("layer", "spec"):
                if key in node:
                    walk(node[key])
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(spec)
    return found


def _colour_map(spec) -> dict:
    """Series -> colour of a chart's (first) colour scale: its legend, entry by entry."""
    spec = spec if isinstance(spec, dict) else _spec(spec)
    scale = _colour_scales(spec)[0]
    return dict(zip(scale["domain"], scale["range"]))


def test_charts_build_and_share_colours(analytic, accuracy):
    weights, sir, ident = lag_weight_chart(analytic), sir_chart(analytic), identity_chart(accuracy, 1 / 64)
    assert isinstance(weights, alt.Chart) and isinstance(sir, alt.Chart)
    maps = [_colour_map(_spec(c)) for c in (weights, sir, ident)]
    rates = [rate_label(a) for a in ALPHAS]
    for r in rates:
        assert maps[0][r] == maps[1][r] == maps[2][r] == palette.rate_color(float(r[2:]))
    assert list(maps[0]) == [rate_label(1.0)] + rates  # fast to slow, whatever order they came in
    assert ALL_RATES in maps[2] and maps[2][ALL_RATES] not in [maps[2][r] for r in rates]


def test_a_rate_has_one_colour_on_the_page_and_in_the_exported_figure(tmp_path):
    # The page draws a measurement with the rates in the sliders' order; the Export page draws the
    # same rows read back from the store, which returns them sorted by name ("all rates", "α=0.02",
    # "α=0.1", "α=0.5").  A colour given by position made α = 0.5 blue on one and green on the other.
    cfg = DilutionConfig(alphas=(0.5, 0.1, 0.02), vocab=16, dim=8, max_lag=4, n_train=512, n_test=256)
    result = measure_identity(cfg)
    page = identity_chart(result.accuracy, result.chance)

    home = tmp_path / "home"
    config = cfg.model_dump(mode="json")
    rd = RunDir.for_id(run_id_for("dilution", config, cfg.seed), home)
    rd.create("dilution", config, cfg.seed)
    rd.write_status(state="done", started="2026-01-01T00:00:00+00:00")
    rd.write_result({"tables": {"dilution_accuracy": [
        {**row, "chance": result.chance} for row in result.accuracy.to_dict("records")]}})
    assert ingest(home)["errors"] == []
    stored = dilution_accuracy(home=home)
    assert list(dict.fromkeys(stored["feature"])) != list(dict.fromkeys(result.accuracy["feature"]))
    exported = identity_chart(stored[["feature", "lag", "accuracy"]], float(stored["chance"].iloc[0]))

    assert _colour_map(page) == _colour_map(exported)
    assert _colour_map(exported)["α=0.5"] == _colour_map(lag_weight_chart(analytic_frame((0.02, 0.5), 4)))["α=0.5"]
    assert palette.rate_color(0.5) in chart_to_svg(exported)  # the file drawn with it, too


def test_a_series_absent_from_the_data_has_no_legend_entry_and_keeps_its_colour(accuracy):
    full = _colour_map(identity_chart(accuracy, 1 / 64))
    only = _colour_map(identity_chart(accuracy[accuracy["feature"] == "α=0.1"], 1 / 64))
    assert only == {"α=0.1": full["α=0.1"]}
    # A rate no table knows gets a colour from its value alone: the same wherever it is drawn.
    odd = [rate_label(0.37), rate_label(0.004)]
    a = _colour_map(lag_weight_chart(analytic_frame((0.37, 0.004), 3)))
    b = _colour_map(lag_weight_chart(analytic_frame((0.004, 0.5, 0.37), 3)))
    assert [a[r] for r in odd] == [b[r] for r in odd] and a[odd[0]] != a[odd[1]]


@pytest.fixture(scope="module")
def lm_store(tmp_path_factory):
    """Finished lm runs of four variants × two seeds in a store (synthetic rows: instant)."""
    home = tmp_path_factory.mktemp("figures_lm") / "home"
    specs = ("gpt", "linear", "softmax_state", "softmax_tokens")
    return home, make_lm_runs(home, specs, (0, 1), real=False, overrides=dict(steps=1000, eval_every=100))


def test_a_variant_has_one_colour_on_every_content_chart(lm_store, monkeypatch):
    home, runs = lm_store
    monkeypatch.setenv("EMALAB_HOME", str(home))
    curves = _colour_map(lm_curve_chart(lm_curve_frame(lm_curves(runs))))
    stats = lm_final_stats(runs)
    ablation = lm_ablation_chart(lm_ablation_frame(stats), 4.0)
    points = _colour_map(ablation)
    assert points and all(curves[v] == c for v, c in points.items())
    assert set(points) == {"SPEN linear", "SPEN softmax attention (state)", "SPEN softmax attention (tokens)"}
    # What no run read (past trace states) is neither in the legend nor on the axis.
    spec = json.dumps(_spec(ablation))
    assert "past trace states" not in spec
    # Fewer variants: the same colours, and only theirs in the legend.
    two = _colour_map(lm_curve_chart(lm_curve_frame(lm_curves(runs[4:8]))))
    assert two == {v: curves[v] for v in two} and len(two) == 2


def test_structure_charts_take_the_palette(tmp_path):
    home = tmp_path / "home"
    runs = make_structure_runs(home, (0, 1))
    stats = probe_accuracy_stats(runs, home=home)
    roles = role_accuracy_frame(stats, "test")
    full = _colour_map(role_accuracy_chart(roles))
    assert full == {"SPCN instantaneous": palette.PROBE_COLORS["instantaneous"],
                    "SPCN traces": palette.PROBE_COLORS["traces"], "n-gram window": palette.PROBE_COLORS["ngram"],
                    "BiGRU": palette.PROBE_COLORS["bigru"]}
    assert _colour_map(role_accuracy_chart(roles[roles["model"] == "BiGRU"])) == {"BiGRU": full["BiGRU"]}
    control = probe_control_frame(probe_control(runs, home=home))
    ctrl = _colour_map(probe_control_chart(control[control["condition"] != "untrained SPCN"]))
    assert ctrl == {"real task": palette.CONDITION_COLORS["trained"],
                    "control: word": palette.CONDITION_COLORS["control"],
                    "control: word × previous category": palette.CONDITION_COLORS["control_prev"],
                    "control: word × position": palette.CONDITION_COLORS["control_pos"]}


def test_the_role_chart_fits_a_page_and_its_legend_names_every_probe(tmp_path):
    # The role chart is faceted, so a page cannot narrow it: its bars thin out until every split fits.
    from ema_core.figures import PAGE_WIDTH

    home = tmp_path / "home"
    stats = probe_accuracy_stats(make_structure_runs(home, (0, 1)), home=home)
    for split in ("test", "novel", "deep"):
        svg = chart_to_svg(role_accuracy_chart(role_accuracy_frame(stats, split), split))
        assert float(re.search(r'<svg[^>]* width="([\d.]+)"', svg).group(1)) <= PAGE_WIDTH, split
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
        assert "…" not in svg and {"SPCN instantaneous", "SPCN traces", "n-gram window", "BiGRU"} <= set(texts)


def test_step_axes_are_whole_numbers_with_separators(lm_store, monkeypatch):
    home, runs = lm_store
    monkeypatch.setenv("EMALAB_HOME", str(home))
    frame = lm_curve_frame(lm_curves(runs))
    for log_x in (False, True):
        svg = chart_to_svg(lm_curve_chart(frame, log_x=log_x, log_y=log_x))
        labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
        assert not any("e+" in t for t in labels), labels
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", chart_to_svg(lm_curve_chart(frame)))
    assert "1,000" in labels
    # The loss axis: the same number of decimals on every tick.
    spec = _spec(lm_curve_chart(frame, log_y=True))
    assert spec["layer"][-1]["encoding"]["y"]["axis"]["format"] == ",.1f"


def test_log_weight_axis_writes_every_decade_alike(analytic):
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", chart_to_svg(lag_weight_chart(analytic)))
    decades = [t for t in labels if "e" in t and t[0].isdigit()]
    assert decades and all(re.fullmatch(r"1e[+-]\d+", t) for t in decades), decades
    assert "0.000001" not in labels


def _measure(text: str, size: int, bold: bool) -> float:
    """The drawn width of ``text``, with Liberation Sans (Arial's metrics) where installed."""
    from pathlib import Path

    font = Path("/usr/share/fonts/truetype/liberation") / f"LiberationSans-{'Bold' if bold else 'Regular'}.ttf"
    if font.exists():
        from PIL import ImageFont

        return ImageFont.truetype(str(font), size).getlength(text)
    return text_width(text, size, bold)


def _lines(text) -> list[str]:
    return [text] if isinstance(text, str) else list(text or [])


def test_titles_fit_their_charts_and_nothing_is_cut(analytic, accuracy, lm_store, monkeypatch, tmp_path):
    home, runs = lm_store
    monkeypatch.setenv("EMALAB_HOME", str(home))
    frame = lm_curve_frame(lm_curves(runs), 0.6)
    structure = make_structure_runs(tmp_path / "s", (0, 1))
    stats = probe_accuracy_stats(structure, home=tmp_path / "s")
    deep = role_accuracy_frame(stats, "deep")
    # A single view is wrapped for the narrowest column a page draws it in (TITLE_WIDTH of plot).
    charts = [
        (lag_weight_chart(analytic), TITLE_WIDTH), (sir_chart(analytic), TITLE_WIDTH),
        (identity_chart(accuracy, 1 / 64), TITLE_WIDTH),
        (probe_control_chart(probe_control_frame(probe_control(structure, home=tmp_path / "s"))), TITLE_WIDTH),
        # One role only: the facets are narrower than any title.
        (role_accuracy_chart(deep[deep["role"] == "overall"], "deep embedding"), ROLE_TITLE_WIDTH),
        (lm_curve_chart(frame, log_x=True, log_y=True, subtitle="mean across seeds; faint: each seed; "
                        "smoothed: EMA 0.6; and a note long enough to need a second line of its own"), TITLE_WIDTH),
        (lm_ablation_chart(lm_ablation_frame(lm_final_stats(runs)), 4.0), TITLE_WIDTH),
    ]
    for chart, width in charts:
        title = _spec(chart)["title"]
        lines = [(t, TITLE_SIZE, True) for t in _lines(title["text"])]
        lines += [(t, SUBTITLE_SIZE, False) for t in _lines(title.get("subtitle"))]
        for text, size, bold in lines:
            assert _measure(text, size, bold) <= width, (text, width)
        svg = chart_to_svg(chart)
        assert "…" not in svg  # Vega's mark of a label cut at its limit
    long = charts[5][0]
    assert len(_lines(_spec(long)["title"]["subtitle"])) == 3  # whole clauses per line where they fit


def test_weight_chart_is_log_and_drops_zero_weights(analytic):
    spec = _spec(lag_weight_chart(analytic))
    assert spec["encoding"]["y"]["scale"]["type"] == "log"
    values = next(iter(spec["datasets"].values()))
    assert values and all(v["weight"] > 0 for v in values)


def test_sir_chart_clips_infinities(analytic):
    assert np.isinf(analytic["sir_db"]).any()
    spec = _spec(sir_chart(analytic))
    values = next(iter(spec["datasets"].values()))
    shown = [v["sir_db_shown"] for v in values]
    assert all(math.isfinite(s) and abs(s) <= SIR_CLIP_DB for s in shown)
    assert max(shown) == SIR_CLIP_DB
    assert any(v["sir_text"] == "+∞ dB" for v in values)
    assert "clipped" in spec["encoding"]["y"]["title"]


def test_identity_chart_has_chance_rule(accuracy):
    spec = _spec(identity_chart(accuracy, 1 / 64))
    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]
    assert marks == ["line", "rule"]
    dash = spec["layer"][1]["encoding"]["strokeDash"]
    assert dash["scale"]["range"] == [[6, 4]] and dash["scale"]["domain"][0].startswith("chance 1/V")
    data = json.dumps(spec["datasets"])
    assert "chance 1/V" in data and str(1 / 64) in data


def test_chart_to_svg_and_png(analytic, accuracy):
    for chart in (lag_weight_chart(analytic), sir_chart(analytic), identity_chart(accuracy, 0.5)):
        svg = chart_to_svg(chart)
        assert isinstance(svg, str) and svg.lstrip().startswith("<svg")
        png = chart_to_png(chart, scale=1)
        assert isinstance(png, bytes) and png[:4] == b"\x89PNG"
    assert "chance 1/V" in chart_to_svg(identity_chart(accuracy, 0.5))


@pytest.fixture
def table():
    return pd.DataFrame(
        {
            "feature": ["α=0.5", "a_b", "50% & more", "#1 | pipe"],
            "lag": [0, 1, 2, 3],
            "accuracy": [1.0, 0.123456, np.nan, 0.0156],
        }
    )


def test_markdown(table):
    md = to_markdown(table)
    lines = md.strip().splitlines()
    assert lines[0] == "| feature | lag | accuracy |"
    assert lines[1] == "| :--- | ---: | ---: |"
    assert len(lines) == 2 + len(table)
    # One number of decimals for the whole column, from its largest value: 1.000 beside 0.123.
    assert lines[2] == "| α=0.5 | 0 | 1.000 |"
    assert lines[3].endswith("| 0.123 |") and lines[5].endswith("| 0.016 |")
    assert r"#1 \| pipe" in lines[5]  # a bare | would split the cell
    assert lines[4].endswith("|  |")  # NaN is an empty cell


def test_numbers_take_one_format_per_column():
    df = pd.DataFrame({"seed": [12345, 2], "params": [1_234_567, 905_000], "ppl": [148.43, 54.7],
                       "tiny": [2e-5, 1e-4], "loss": [5.0, 4.9876]})
    md = to_markdown(df).splitlines()
    assert md[2] == "| 12345 | 1,234,567 | 148.4 | 2.00e-05 | 5.000 |"  # a seed is a name, not a quantity
    assert md[3] == "| 2 | 905,000 | 54.7 | 1.00e-04 | 4.988 |"
    tex = to_latex_booktabs(df)
    assert "12345 & 1,234,567 & 148.4 & 2.00e-05 & 5.000" in tex
    # A long table of several metrics: one format per metric, not one for the column.
    long = pd.DataFrame({"key": ["loss", "ppl", "loss"], "value": [4.25, 148.43, 5.0]})
    assert to_markdown(long, by="key").splitlines()[2:] == ["| loss | 4.250 |", "| ppl | 148.4 |", "| loss | 5.000 |"]


def test_an_empty_table_says_so():
    df = pd.DataFrame({"run_id": pd.Series([], dtype=object), "accuracy": pd.Series([], dtype=float)})
    assert to_markdown(df, empty=EMPTY).rstrip().endswith(f"*{EMPTY}*")
    tex = to_latex_booktabs(df, caption="c", label="tab:x", empty=EMPTY)
    assert rf"\multicolumn{{2}}{{c}}{{\emph{{{EMPTY}}}}} \\" in tex


def test_latex_booktabs(table):
    tex = to_latex_booktabs(table)
    for rule in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert tex.count(rule) == 1
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
    assert r"\begin{tabular}{lrr}" in tex
    assert r"a\_b" in tex and r"50\% \& more" in tex and r"\#1" in tex
    assert r"$\alpha$=0.5" in tex
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == len(table) and all(line.endswith(r"\\") for line in body)
    # Unescaped specials would break the document: none may be left outside their escapes.
    stripped = tex.replace(r"\_", "").replace(r"\%", "").replace(r"\&", "").replace(r"\#", "")
    body_text = stripped.split(r"\midrule")[1]
    assert "_" not in body_text and "%" not in body_text and "#" not in body_text
    assert body_text.count("&") == 2 * len(table)  # only the column separators


def test_latex_float_and_escaping_of_caption():
    tex = to_latex_booktabs(pd.DataFrame({"x": [1]}), caption="rate_1 at 5%", label="tab:x_y")
    assert tex.startswith(r"\begin{table}") and tex.rstrip().endswith(r"\end{table}")
    assert r"\caption{rate\_1 at 5\%}" in tex
    assert r"\label{tab:x_y}" in tex
    assert latex_escape(r"a\b{c}~^") == r"a\textbackslash{}b\{c\}\textasciitilde{}\textasciicircum{}"


def _ema_core_imports(path: Path) -> set[str]:
    """The ``ema_core`` modules a source file imports (``from ema_core import x`` counts as ``ema_core.x``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.startswith("ema_core.")}


def _is_chart(module: str) -> bool:
    parts = module.split(".")
    return module.startswith("ema_core.figures") or (parts[:2] == ["ema_core", "studies"] and parts[-1] == "figures")


def test_charts_sit_beside_the_science_not_inside_it():
    """Science never imports the charts, and the shared chart module names no study: a study's
    charts are its folder's ``figures.py``, and nothing but charts imports a chart module."""
    root = Path(__file__).resolve().parent.parent / "ema_core"
    figures = root / "figures"
    charts = [figures / "__init__.py", *sorted((root / "studies").glob("*/figures.py"))]
    assert len(charts) > 1
    science = [p for p in root.rglob("*.py") if p not in charts]
    assert science and not [
        p.relative_to(root) for p in science if any(_is_chart(n) for n in _ema_core_imports(p))]
    assert _ema_core_imports(figures / "__init__.py") <= {"ema_core.palette"}


def test_the_content_labels_cover_exactly_the_registries_choices():
    # Labels are declared with the study's findings, the choices once in the registries that build the
    # models: a predictor or input added there without a label here would be shown by its bare name.
    from ema_core.studies.content.shared import ATTN_INPUT_LABELS, PREDICTOR_LABELS
    from ema_core.lm.predictors import ATTN_INPUTS, PREDICTORS

    assert set(PREDICTOR_LABELS) == set(PREDICTORS) and set(ATTN_INPUT_LABELS) == set(ATTN_INPUTS)


# -- the depth study's trained comparison ---------------------------------------------------------------

def _depth_rows(rules=("sum", "static", "select"), depths=(2, 4, 8), seeds=(0, 1, 2)) -> pd.DataFrame:
    """``depth_results`` rows as the store returns them (synthetic: the charts read only these columns)."""
    rows = []
    for i, rule in enumerate(rules):
        for depth in depths:
            for seed in seeds:
                rows.append(dict(run_id="depth-x-s0", seed=seed, rule=rule, depth=depth,
                                 val_loss=5.0 - 0.1 * i + 0.01 * seed, val_bpb=7.0 - 0.1 * i,
                                 probe_token=0.5 + 0.01 * seed, probe_token_chance=0.2, probe_token_init=0.6,
                                 probe_early=0.8 / depth + 0.01 * seed, probe_early_init=0.7))
    return pd.DataFrame(rows)


def _depth_weight_rows(rules=("sum", "static", "select"), depths=(2, 4), seeds=(0, 1)) -> pd.DataFrame:
    """``depth_weights`` rows: for each stream after block i, a weight on every output j ≤ i."""
    rows = []
    for rule in rules:
        for depth in depths:
            for seed in seeds:
                for layer in range(1, depth + 1):
                    for source in range(layer + 1):
                        w = float(source == layer) if rule == "sum" else (1 + source + seed) / (layer + 1) ** 2
                        rows.append(dict(run_id="depth-x-s0", seed=seed, rule=rule, depth=depth, layer=layer,
                                         source=source, weight=w))
    return pd.DataFrame(rows)


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def _marks(spec: dict) -> list[str]:
    return [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in _layers(spec)]


def test_the_depth_metric_chart_has_one_series_per_rule_in_its_rules_colour():
    from ema_core.depth import RULE_LABELS
    from ema_core.studies.depth.figures import depth_frame, depth_metric_chart

    every = _colour_map(depth_metric_chart(depth_frame(_depth_rows()), "val_loss"))
    assert every == {RULE_LABELS[r]: palette.DEPTH_RULE_COLORS[r] for r in ("sum", "static", "select")}
    assert list(every) == [RULE_LABELS[r] for r in ("sum", "static", "select")]  # the paper's order, worst first
    assert len(set(every.values())) == 3
    # Fewer rules: only theirs in the legend, each in the colour it had among all.
    two = _colour_map(depth_metric_chart(depth_frame(_depth_rows(("select", "sum"))), "probe_early"))
    assert two == {RULE_LABELS["sum"]: every[RULE_LABELS["sum"]], RULE_LABELS["select"]: every[RULE_LABELS["select"]]}
    # A rule the palette does not know is drawn, in the colour of the unknown, never in a rule's.
    odd = _colour_map(depth_metric_chart(depth_frame(_depth_rows(("sum", "gated"))), "val_loss"))
    assert odd == {RULE_LABELS["sum"]: palette.DEPTH_RULE_COLORS["sum"], "gated": palette.OTHER_COLOR}


def test_the_depth_metric_chart_draws_error_bars_only_with_several_seeds():
    from ema_core.studies.depth.figures import depth_frame, depth_metric_chart

    three = _spec(depth_metric_chart(depth_frame(_depth_rows()), "val_loss"))
    assert _marks(three) == ["errorbar", "line", "point"]
    assert "± one std" in json.dumps(three["title"], ensure_ascii=False)
    one = _spec(depth_metric_chart(depth_frame(_depth_rows(seeds=(0,))), "val_loss"))
    assert _marks(one) == ["line", "point"]  # one seed has no spread: no bar, nor a layer for none
    assert "± one std" not in json.dumps(one["title"], ensure_ascii=False)
    assert "mean over 1 seed;" in json.dumps(one["title"])


def test_the_depth_metric_chart_keeps_the_true_depth_and_a_dashed_baseline():
    from ema_core.studies.depth.figures import WHEN_DASHES, depth_frame, depth_metric_chart

    spec = _spec(depth_metric_chart(depth_frame(_depth_rows()), "probe_token"))
    values = next(iter(spec["datasets"].values()))
    # Rules are set a little apart along depth; the axis names only the depths run, the tooltip the true one.
    at4 = sorted((v["rule"], v["depth_drawn"]) for v in values if v["depth"] == 4 and v["when"] == "trained")
    assert len({d for _, d in at4}) == 3 and all(3.5 < d < 4.5 for _, d in at4)
    line = next(layer for layer in _layers(spec) if _marks({"layer": [layer]}) == ["line"])
    assert line["encoding"]["x"]["axis"]["values"] == [2, 4, 8]
    assert {"field": "depth", "title": "blocks", "type": "quantitative"} in line["encoding"]["tooltip"]
    dash = line["encoding"]["strokeDash"]
    assert dash["scale"] == {"domain": ["trained", "at init"],
                             "range": [WHEN_DASHES["trained"], WHEN_DASHES["at init"]]}
    assert dash["legend"]["symbolType"] == "stroke"  # the legend shows the dash, not a dot
    # One depth only: a log axis of some width about it, not a domain of zero width.
    single = _spec(depth_metric_chart(depth_frame(_depth_rows(depths=(4,))), "val_loss"))
    x = next(layer for layer in _layers(single) if "x" in layer.get("encoding", {}))["encoding"]["x"]
    lo, hi = x["scale"]["domain"]
    assert lo < 4 < hi
    assert "<svg" in chart_to_svg(depth_metric_chart(depth_frame(_depth_rows(depths=(4,))), "val_loss"))


def _weight_cells(chart) -> list[dict]:
    spec = _spec(chart)
    return [v for values in spec["datasets"].values() for v in values]


@pytest.mark.parametrize("depth", [1, 2, 8, 16])
def test_the_depth_weights_map_is_lower_triangular_and_fits_a_page(depth):
    from ema_core.depth import RULE_LABELS
    from ema_core.figures import PAGE_WIDTH
    from ema_core.studies.depth.figures import weights_frame, weights_map

    rows = _depth_weight_rows(depths=(depth,))
    chart = weights_map(weights_frame(rows, depth), depth)
    cells = _weight_cells(chart)
    # Every rule's triangle whole: block i's stream weighs the embedding and the outputs 1..i, nothing after.
    assert all(c["source"] <= c["layer"] for c in cells)
    assert len(cells) == 3 * depth * (depth + 3) // 2
    assert {c["rule_label"] for c in cells} == {RULE_LABELS[r] for r in ("sum", "static", "select")}
    # The mean over seeds of each cell.
    stored = rows.groupby(["rule", "layer", "source"])["weight"].mean()
    assert all(c["weight"] == pytest.approx(stored[(c["rule"], c["layer"], c["source"])]) for c in cells)
    title = json.dumps(_spec(chart)["title"])
    assert f"at {depth} block{'' if depth == 1 else 's'}," in title
    svg = chart_to_svg(chart)
    assert float(re.search(r'<svg[^>]* width="([\d.]+)"', svg).group(1)) <= PAGE_WIDTH  # a facet is not narrowed
    assert "…" not in svg


def test_the_depth_weights_map_takes_light_text_on_dark_cells_only():
    from ema_core.studies.depth.figures import weights_frame, weights_map

    spec = _spec(weights_map(weights_frame(_depth_weight_rows(depths=(2,)), 2), 2))
    text = next(layer for layer in spec["spec"]["layer"] if _marks({"layer": [layer]}) == ["text"])
    colour = text["encoding"]["color"]
    assert colour["condition"]["value"] == palette.TEXT_ON_DARK and colour["value"] == palette.TEXT_COLOR
    # The threshold is a share of the scale's reach (here the fixed sum's 1), whichever sign the weight has.
    assert colour["condition"]["test"] == f"abs(datum.weight) > {palette.ABOVE_CHANCE_DARK * 1.0!r}"


def test_a_depth_runs_figures_are_named_and_export_to_svg():
    from ema_core.studies.depth.figures import run_figures, weights_figures

    figures = run_figures(_depth_rows())
    assert [name for name, _ in figures] == ["depth_val_loss", "depth_val_bpb", "depth_probe_token",
                                             "depth_probe_early"]
    maps = weights_figures(_depth_weight_rows(depths=(2, 4)))
    assert [name for name, _ in maps] == ["depth_weights_2", "depth_weights_4"]
    for name, chart in figures + maps:
        svg = chart_to_svg(chart)
        assert svg.lstrip().startswith("<svg"), name
    # A table without a metric draws no chart of it; no rows, no figure.
    assert [name for name, _ in run_figures(_depth_rows().drop(columns=["val_bpb"]))][:2] == ["depth_val_loss",
                                                                                            "depth_probe_token"]
    assert run_figures(_depth_rows().iloc[:0]) == [] and weights_figures(_depth_weight_rows().iloc[:0]) == []


def test_every_colour_a_depth_chart_draws_is_the_palettes():
    from ema_core.studies.depth.figures import run_figures, weights_figures
    from test_palette import _colours

    charts = [c for _, c in run_figures(_depth_rows(("sum", "static", "select", "gated")))]
    charts += [c for _, c in weights_figures(_depth_weight_rows())]
    for chart in charts:
        found, _ = _colours(chart)  # also asserts that every colour scale names its own range
        assert found
        stray = [(c, where) for c, where in found if str(c).lower() not in palette.COLORS]
        assert not stray, stray


def test_depth_chart_titles_fit_their_charts():
    from ema_core.figures import PAGE_WIDTH
    from ema_core.studies.depth.figures import run_figures, weights_figures

    charts = [(c, TITLE_WIDTH) for _, c in run_figures(_depth_rows())]
    charts += [(c, PAGE_WIDTH) for _, c in weights_figures(_depth_weight_rows(depths=(16,)))]
    for chart, width in charts:
        title = _spec(chart)["title"]
        lines = [(t, TITLE_SIZE, True) for t in _lines(title["text"])]
        lines += [(t, SUBTITLE_SIZE, False) for t in _lines(title.get("subtitle"))]
        for text, size, bold in lines:
            assert _measure(text, size, bold) <= width, (text, width)
