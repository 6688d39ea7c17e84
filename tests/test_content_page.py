"""The Content page through AppTest: empty store, launch, real tiny runs of four variants × two seeds
(curves, smoothing, log axes, the final and paper tables, the ablation), two settings at once."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from apptest import ok, open_page

from ema_core.studies.content.findings import VERDICT_K, VERDICT_WORDS, ablation_verdict, headline_verdict
from ema_core.studies.content.gap import GAP_CLAIMS, NOT_RECALL, class_label
from ema_core.studies.content.shared import RECALL, lm_variant_label, ratio_text, verdict_number
from ema_core.lm.token_classes import BANDS, CLASSES
from ema_core.verdicts import VERDICT_WORDS as SHARED_WORDS
from ema_core.verdicts import judge, spread
from ema_core.experiments import build_config
from ema_core.studies.content.figures import smooth_ema
from lm_fixture import make_lm_runs
from ema_core.tables import column_decimals
from store.content import (lm_ablation, lm_curves, lm_eval, lm_final_losses, lm_runs, lm_token_class_pairs,
                           lm_token_classes)
from store.export import mean_std

PAGE = "pages/content.py"
SEEDS = (0, 1, 2)  # the fewest a claim is judged on
N = len(SEEDS)
SPECS = ("gpt", "linear", "softmax_state", "softmax_tokens")
VARIANTS = ["GPT", "SPEN linear", "SPEN softmax attention (state)", "SPEN softmax attention (tokens)"]


def _page() -> AppTest:
    return open_page(PAGE)


def _charts(at: AppTest) -> list[tuple[dict, list[pd.DataFrame]]]:
    """Each chart's spec and its datasets (which travel as Arrow beside the spec)."""
    return [(json.loads(c.proto.spec), [pa.ipc.open_stream(d.data.data).read_all().to_pandas()
                                        for d in c.proto.datasets])
            for c in at.get("vega_lite_chart")]


def _curves(at: AppTest) -> tuple[dict, pd.DataFrame]:
    spec, (data,) = _charts(at)[0]
    return spec, data


def _table(at: AppTest, column: str) -> pd.DataFrame:
    tables = [d.value for d in [*at.dataframe, *at.table] if column in d.value.columns]
    assert len(tables) == 1, [list(d.value.columns) for d in at.table]
    return tables[0].map(lambda v: v.replace("\u00a0", " ") if isinstance(v, str) else v)


def _chart(at: AppTest, title: str) -> tuple[dict, list[pd.DataFrame]]:
    """The one chart whose title starts with ``title``."""
    def text(spec: dict) -> str:
        t = spec.get("title", "")
        t = t.get("text", "") if isinstance(t, dict) else t
        return " ".join(t) if isinstance(t, list) else t

    found = [(spec, data) for spec, data in _charts(at) if text(spec).startswith(title)]
    assert len(found) == 1, [spec.get("title") for spec, _ in _charts(at)]
    return found[0]


def _scale_types(spec: dict, channel: str) -> set:
    return {layer["encoding"][channel].get("scale", {}).get("type", "linear") for layer in spec["layer"]}


@pytest.fixture(scope="module")
def content_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("content") / "home"
    return home, make_lm_runs(home, SPECS, SEEDS)


@pytest.fixture
def runs(content_home, monkeypatch):
    home, run_ids = content_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    return run_ids


# -- the smoothing helper -----------------------------------------------------------------------------

def test_smooth_ema_is_the_plain_recursion():
    v = np.array([4.0, 2.0, 3.0, 1.0])
    assert smooth_ema(v, 0.0).tolist() == v.tolist()
    expected = [4.0]
    for x in v[1:]:
        expected.append(0.9 * expected[-1] + 0.1 * x)
    assert smooth_ema(v, 0.9) == pytest.approx(expected)
    # pandas' ewm(adjust=False) is the same recursion: an outside oracle
    assert smooth_ema(v, 0.6) == pytest.approx(pd.Series(v).ewm(alpha=0.4, adjust=False).mean().to_numpy())
    assert smooth_ema([1.0, float("nan"), 0.0], 0.5)[2] == 0.5 and math.isnan(smooth_ema([1.0, np.nan], 0.5)[1])
    with pytest.raises(ValueError):
        smooth_ema(v, 1.0)


def test_variant_labels():
    assert lm_variant_label("gpt", "linear", "state") == "GPT"
    assert lm_variant_label("spen", "softmax_attention", "tokens") == "SPEN softmax attention (tokens)"
    assert lm_variant_label("gpt", "linear_attention", "sequence") == "GPT (sized to SPEN linear attention (sequence))"
    assert lm_variant_label("spen", float("nan"), None) == "SPEN linear"  # missing fields read as defaults


# -- empty store and launch ---------------------------------------------------------------------------

def test_empty_store_shows_an_empty_state_and_the_launch_section(empty_home):
    at = _page()
    assert at.title[0].value == "Content"
    assert "SPEN" in at.markdown[0].value and "GPT" in at.markdown[0].value
    assert any("No finished language-model runs" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == [] and len(at.dataframe) == len(at.table) == 0
    assert any(s.value == "Launch" for s in at.subheader)


def test_launch_submits_one_run_per_variant_and_seed(empty_home, registered):
    at = _page()
    assert at.selectbox(key="content_preset").options == ["quick", "tiny", "long", "fresh", "fresh_micro", "small", "paper"]
    assert at.multiselect(key="content_variants").value == VARIANTS
    at.multiselect(key="content_variants").set_value(["GPT", "SPEN linear attention (sequence)"])
    at.selectbox(key="content_preset").set_value("tiny")
    at.number_input(key="content_n_seeds").set_value(2)
    at.number_input(key="content_first_seed").set_value(5)
    next(b for b in at.button if b.label == "Launch").click()
    ok(at.run())
    expected = [("content", build_config("content", preset="tiny", seed=s, overrides=variant).model_dump(), "tiny")
                for variant in (dict(model="gpt", predictor="linear", attn_input="state"),
                                dict(model="spen", predictor="linear_attention", attn_input="sequence"))
                for s in (5, 6)]
    assert registered == expected
    assert expected[2][1]["model"] == "spen" and expected[2][1]["train"]["steps"] == 1200  # the tiny preset's budget
    assert any("content-x-s5, content-x-s6, content-x-s5, content-x-s6" in s.value for s in at.success)


def test_launch_with_no_variant_warns(empty_home, registered):
    at = _page()
    at.multiselect(key="content_variants").set_value([])
    next(b for b in at.button if b.label == "Launch").click()
    ok(at.run())
    assert registered == [] and any("at least one variant" in w.value for w in at.warning)


# -- real tiny runs ----------------------------------------------------------------------------------

def test_curves_draw_one_mean_line_per_variant(runs):
    at = _page()
    assert at.multiselect(key="content_runs").value == runs  # every variant and seed, in variant order
    assert any("12 run(s) · 4 variant(s) · seeds 0, 1, 2" in c.value for c in at.caption)
    # The quick preset's train.lr=auto: one group, and the rate each model recorded having trained at.
    auto = next(c.value for c in at.caption if "`train.lr = auto`" in c.value)
    assert "GPT 0.003; SPEN 0.01" in auto
    # ... and where those rates came from: tiny's table, chosen at the quick budget, not these runs' few steps.
    assert "From the `tiny` rate table: rates chosen on dev at other settings" in auto and "train.steps 300 there" in auto
    spec, data = _curves(at)
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "line"]  # faint seeds, then means
    means = data[data["line"] == "mean"]
    assert list(dict.fromkeys(means["variant"])) == VARIANTS and (means["n"] == N).all()
    assert set(data.loc[data["line"] != "mean", "line"]) == set(runs)
    # The mean line is the mean across seeds of the store's validation losses (no smoothing).
    raw = lm_curves(runs[N:2 * N], "val/loss")
    expected = raw.groupby("step")["value"].mean()
    got = means[means["variant"] == "SPEN linear"].set_index("step")["value"]
    assert got.to_dict() == pytest.approx(expected.to_dict())
    assert list(expected.index) == [2, 4, 6]
    assert spec["layer"][1]["encoding"]["x"]["field"] == "step"


def test_smoothing_changes_the_plotted_values(runs):
    at = _page()
    assert at.radio(key="content_smoothing").options == ["none", "EMA 0.6", "EMA 0.9"]
    before = _curves(at)[1]
    at.radio(key="content_smoothing").set_value("EMA 0.9")
    ok(at.run())
    spec, after = _curves(at)
    assert "EMA 0.9" in json.dumps(spec["title"])
    pick = (after["line"] == runs[N])
    raw = lm_curves(runs[N], "val/loss")["value"].to_numpy()
    assert after.loc[pick, "value"].to_numpy() == pytest.approx(smooth_ema(raw, 0.9))
    assert before.loc[before["line"] == runs[N], "value"].to_numpy() == pytest.approx(raw)
    # The first point starts the average; the later ones move.
    b, a = (f[f["line"] == "mean"].reset_index(drop=True) for f in (before, after))
    first = b.groupby("variant")["step"].transform("min") == b["step"]
    assert a.loc[first, "value"].to_numpy() == pytest.approx(b.loc[first, "value"].to_numpy())
    assert not np.allclose(a.loc[~first, "value"], b.loc[~first, "value"])


def test_log_axes_and_tokens_switch_the_scales(runs):
    at = _page()
    spec = _curves(at)[0]
    assert _scale_types(spec, "x") == {"linear"} and _scale_types(spec, "y") == {"linear"}
    at.toggle(key="content_log_y").set_value(True)
    ok(at.run())
    spec = _curves(at)[0]
    assert _scale_types(spec, "y") == {"log"} and _scale_types(spec, "x") == {"linear"}
    assert json.dumps(spec["title"]).endswith('log y"}')
    at.toggle(key="content_log_x").set_value(True)
    at.radio(key="content_x").set_value("tokens")
    at.selectbox(key="content_metric").set_value("val/bpb")
    ok(at.run())
    spec, data = _curves(at)
    assert _scale_types(spec, "x") == {"log"}
    assert {layer["encoding"]["x"]["field"] for layer in spec["layer"]} == {"tokens"}
    assert "bits per byte" in spec["layer"][0]["encoding"]["y"]["title"]
    tokens_per_step = lm_runs(runs[0])["tokens_per_step"].iloc[0]
    assert tokens_per_step == 2 * 32
    assert (data["tokens"] == data["step"] * tokens_per_step).all()
    at.toggle(key="content_seeds").set_value(False)
    ok(at.run())
    spec, data = _curves(at)
    assert len(spec["layer"]) == 1


def test_final_table_holds_the_store_numbers(runs):
    at = _page()
    table = _table(at, "perplexity ÷ GPT").set_index("variant")
    assert list(table.index) == VARIANTS and (table["seeds"] == N).all()
    ev = lm_eval(runs, split="val").set_index("run_id")
    lin = ev.loc[runs[N:2 * N]]
    assert table.loc["SPEN linear", "perplexity"] == mean_std(lin["ppl"].mean(), lin["ppl"].std(ddof=1), 1)
    assert table.loc["SPEN linear", "bits per byte"] == mean_std(lin["bpb"].mean(), lin["bpb"].std(ddof=1))
    # Per seed: SPEN ÷ the GPT of the same seed.
    ratio = lin["ppl"].to_numpy() / ev.loc[runs[0:N], "ppl"].to_numpy()
    assert table.loc["SPEN linear", "perplexity ÷ GPT"] == mean_std(ratio.mean(), ratio.std(ddof=1), 2)
    assert table.loc["GPT", "perplexity ÷ GPT"] == ""
    assert table.loc["GPT", "params"] == lm_runs(runs[0])["params"].iloc[0]
    assert any("held out whole" in c.value and "FineWeb-Edu" in c.value for c in at.caption)


def test_the_paper_table_holds_260_and_33_beside_ours(runs):
    at = _page()
    table = _table(at, "paper").set_index("measure")
    assert list(table.columns) == ["paper", "ours", "seeds", "source", "ours measured as"]
    final = _table(at, "perplexity ÷ GPT").set_index("variant")
    assert table.loc["SPEN perplexity", "paper"] == "260"
    assert table.loc["SPEN perplexity", "ours"] == final.loc["SPEN linear", "perplexity"]
    assert table.loc["GPT perplexity", "paper"] == "33 (GPT-2 Small)"
    assert table.loc["GPT perplexity", "ours"] == final.loc["GPT", "perplexity"]
    ratio = table.loc["Perplexity, SPEN ÷ GPT"]
    assert ratio["paper"].startswith("7.9") and "8×" in ratio["paper"]
    assert ratio["ours"] == final.loc["SPEN linear", "perplexity ÷ GPT"] and ratio["seeds"] == N
    assert table.loc["Bits per byte, SPEN ÷ GPT", "ours"] == final.loc["SPEN linear", "bits per byte ÷ GPT"]
    claim = table.loc["Predictor ablation: attention predictors reading the state against SPEN linear"]
    assert claim["paper"] == "identical" and claim["seeds"] == N
    verdict = ablation_verdict(lm_final_losses(runs).to_dict("records"))
    assert claim["ours"] == verdict.word  # a verdict by the rule, not a bare number
    assert "power check" in " ".join(table.index)
    assert table.loc["SPEN Wikipedia perplexity", "source"] == "[U]"
    assert table.loc["SPEN Wikipedia perplexity", "ours"] == ""


def test_the_ablation_chart_and_tables(runs):
    at = _page()
    spec, datasets = _chart(at, "Predictor ablation")
    points = next(d for d in datasets if "predictor" in d.columns)
    assert set(zip(points["predictor"], points["attn_input"])) == {
        ("linear", "current trace state"), ("softmax attention", "current trace state"),
        ("softmax attention", "raw tokens (control)")}
    assert (points["n"] == N).all() and points["std"].notna().all()
    assert any("loss" in d.columns and d["label"].iloc[0].startswith("GPT") for d in datasets)  # the reference
    grid = _table(at, "raw tokens (control)").set_index("predictor")
    ev = lm_eval(runs, split="val").set_index("run_id")["loss"]
    tokens = ev.loc[runs[3 * N:4 * N]]
    assert grid.loc["softmax attention", "raw tokens (control)"] == mean_std(tokens.mean(), tokens.std(ddof=1))
    assert grid.loc["linear", "raw tokens (control)"] == ""  # the linear predictor reads the state only
    spread = _table(at, "nats/token").set_index("measure")
    per_seed = [abs(ev[runs[N + s]] - ev[runs[2 * N + s]]) for s in SEEDS]
    # One number of decimals for the whole column (every measure of lm_ablation), from its largest mean.
    assert spread.iloc[0]["nats/token"] == mean_std(np.mean(per_seed), np.std(per_seed, ddof=1),
                                                    column_decimals(lm_ablation(runs)["value_mean"]))
    at.toggle(key="content_gpt_line").set_value(False)
    ok(at.run())
    assert len(_chart(at, "Predictor ablation")[1]) == 1  # no GPT reference: the points' data only


def test_every_chart_and_table_has_its_downloads(runs):
    at = _page()
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("SVG") == labels.count("PNG") == 4  # curves, the gap, a class over training, ablation
    # final, paper, the gap, the gap per predictor, its verdict, grid, spread, verdict
    assert labels.count("CSV") == labels.count("Markdown") == labels.count("LaTeX") == 8


def _lines(at: AppTest) -> list[str]:
    """Every line of the page's Markdown (a verdict's full sentence is one "- " line in its expander)."""
    return [line for m in at.markdown for line in m.value.splitlines()]


def test_the_headline_is_judged_by_the_rule(runs):
    at = _page()
    v = headline_verdict(lm_final_losses(runs).to_dict("records"))
    assert v.delta.n == N
    line = next(m.value for m in at.markdown if "-badge[" in m.value and "same-size GPT" in m.value)
    assert f"{v.word}]" in line and f"perplexity ÷ GPT {ratio_text(v.ratio)}" in line
    assert f"- {v.sentence}" in _lines(at)
    assert any(m.value.startswith("**The rule.** Δ = SPEN linear's final validation loss") for m in at.markdown)


def test_the_verdict_is_the_rule_applied_to_the_numbers_shown(runs):
    at = _page()
    assert any(m.value.startswith("**The rule.**") and "paired by seed" in m.value
               and f"{VERDICT_K:g} × the sample standard deviation of Δ" in m.value
               and "raw-token control" in m.value and "no power" in m.value for m in at.markdown)
    shown = _table(at, "beyond the spread")
    # Recomputed here from the store's per-run losses, by the rule as the page states it: Δ within
    # each seed, then its mean and sample std across the seeds.
    ev = lm_eval(runs, split="val").set_index("run_id")["loss"]
    linear, state, tokens = (ev.loc[runs[i:i + N]].to_numpy() for i in (N, 2 * N, 3 * N))

    def judged(a, b):
        d = a - b  # the runs are in seed order: seed 0, 1, 2
        return d.mean(), VERDICT_K * d.std(ddof=1), bool(abs(d.mean()) > VERDICT_K * d.std(ddof=1))

    d_claim, t_claim, beyond_claim = judged(state, linear)
    best_state = min((linear, state), key=lambda s: s.mean())
    d_power, t_power, beyond_power = judged(tokens, best_state)
    claim, power = shown.iloc[0], shown.iloc[1]
    assert (claim["comparison"], claim["variant"], claim["against"]) == (
        "claim", "SPEN softmax attention (state)", "SPEN linear")
    assert claim["Δ loss (nats/token)"] == verdict_number(d_claim) and claim["threshold"] == verdict_number(t_claim)
    assert claim["beyond the spread"] == ("yes" if beyond_claim else "no") and claim["seeds paired"] == N
    assert (power["comparison"], power["variant"]) == ("power check", "SPEN softmax attention (tokens)")
    assert power["Δ loss (nats/token)"] == verdict_number(d_power)
    if beyond_claim:
        word = "not reproduced"
    elif beyond_power and d_power < 0:
        word = "reproduced"
    else:
        word = "inconclusive at this budget"
    # One line with the verdict's badge; the full sentence beside the rule, in the expander.
    assert any("-badge[" in m.value and f"{word}]" in m.value and "Swapping SPEN's predictor" in m.value
               for m in at.markdown)
    sentence = next(line for line in _lines(at) if line.lower().startswith(f"- {word}"))
    # The sentence quotes the numbers of the table (the control's gain as a positive number of nats).
    quoted = verdict_number(d_claim if beyond_claim else -d_power if word == "reproduced" else d_power)
    assert quoted in sentence and verdict_number(t_claim if beyond_claim else t_power) in sentence


# -- where the gap lives: token classes ----------------------------------------------------------------

def _final_classes(runs: list[str], partition: str) -> dict[str, pd.DataFrame]:
    """Each variant's final class rows from the store's own export query, indexed by (seed, class)."""
    df = lm_token_classes(runs, "final")
    df = df[df["partition"] == partition]
    return {spec: df[df["run_id"].isin(runs[i * N:(i + 1) * N])].set_index(["seed", "class"])
            for i, spec in enumerate(SPECS)}


def _cell(values, digits: int) -> str:
    v = pd.Series(values, dtype=float).dropna()
    return mean_std(v.mean(), v.std(ddof=1), digits) if len(v) else ""


@pytest.mark.parametrize("partition, names, label", [("class", CLASSES, "token class"),
                                                     ("band", BANDS, "training-frequency band")])
def test_the_gap_table_and_chart_hold_the_store_numbers_per_seed(runs, partition, names, label):
    at = _page()
    assert any(s.value == "Where the gap lives: token classes" for s in at.subheader)
    at.radio(key="content_partition").set_value(partition)
    ok(at.run())
    table = _table(at, "share of the gap (%)").set_index(label)
    assert list(table.index) == [class_label(n) for n in names] + ["all tokens"]
    # Recomputed from lm_token_classes: SPEN linear against the GPT of the same seed, one seed at a time.
    rows = _final_classes(runs, partition)
    spen, gpt = rows["linear"], rows["gpt"]
    gaps, shares = {n: [] for n in names}, {n: [] for n in names}
    for seed in SEEDS:
        weighted = {}
        for n in names:
            t = spen.loc[(seed, n), "tokens"]
            assert t == gpt.loc[(seed, n), "tokens"]  # one held-out text
            gap = spen.loc[(seed, n), "loss"] / t - gpt.loc[(seed, n), "loss"] / t if t else None
            gaps[n].append(gap)
            weighted[n] = t * gap if t else 0.0
        for n in names:
            shares[n].append(weighted[n] / sum(weighted.values()))
        assert sum(shares[n][-1] for n in names) == pytest.approx(1.0)  # every seed's shares add up
    for n in names:
        row = table.loc[class_label(n)]
        assert row["gap: SPEN − GPT (nats/token)"] == _cell(gaps[n], 3), n
        assert row["share of the gap (%)"] == _cell([100 * x for x in shares[n]], 1), n
        assert row["SPEN linear (nats/token)"] == _cell(spen.xs(n, level="class")["loss_per_token"], 3)
        assert row["GPT (nats/token)"] == _cell(gpt.xs(n, level="class")["loss_per_token"], 3)
        assert row["tokens"] == spen.loc[(0, n), "tokens"] and row["seeds"] == (N if spen.loc[(0, n), "tokens"] else 0)
    # The n-gram baselines beside the models, from the GPT runs' own rows on the same windows, pooled.
    for baseline in ("bigram", "cache"):
        df = lm_token_classes(runs[:N], baseline)
        df = df[df["partition"] == partition].groupby("class")[["tokens", "loss"]].sum()
        column = table[f"{baseline} baseline (nats/token)"]
        for n in names:
            t = df.loc[n, "tokens"]
            assert column[class_label(n)] == (f"{df.loc[n, 'loss'] / t:.3f}" if t else ""), (baseline, n)
        assert column["all tokens"] == f"{df['loss'].sum() / df['tokens'].sum():.3f}"
    whole = table.loc["all tokens"]
    total = {s: spen.xs(s, level="seed")["loss"].sum() / spen.xs(s, level="seed")["tokens"].sum()
             - gpt.xs(s, level="seed")["loss"].sum() / gpt.xs(s, level="seed")["tokens"].sum() for s in SEEDS}
    assert whole["gap: SPEN − GPT (nats/token)"] == _cell(list(total.values()), 3)
    assert whole["share of the gap (%)"] == "100.0"
    # The whole gap is the final losses' difference (the classes add up to the loss).
    ev = lm_eval(runs, split="val").set_index("run_id")["loss"]
    assert list(total.values()) == pytest.approx([ev[runs[N + i]] - ev[runs[i]] for i in range(N)], abs=1e-6)
    # The chart plots the same means, one point per class, and the pooled gap as its reference.
    spec, datasets = _chart(at, "Where the gap lives")
    points = next(d for d in datasets if "gap_mean" in d.columns and "class" in d.columns)
    assert list(points["class"]) == [class_label(n) for n in names]
    expected = [pd.Series(gaps[n], dtype=float).mean() for n in names]
    assert points["gap_mean"].tolist() == pytest.approx(expected, nan_ok=True)
    assert any("label" in d.columns and d["label"].iloc[0].startswith("all tokens") for d in datasets)
    assert any("a negative gap means SPEN is better" in c.value for c in at.caption)


def test_the_class_curves_are_the_periodic_losses_per_token(runs):
    at = _page()
    box = at.selectbox(key="content_class_class")
    assert box.options == [class_label(n) for n in CLASSES] and box.value == "recall_1_16"
    box.set_value("other")
    ok(at.run())
    spec, (data,) = _chart(at, "Over training: other tokens")
    means = data[data["line"] == "mean"]
    assert list(dict.fromkeys(means["variant"])) == VARIANTS and (means["n"] == N).all()
    periodic = lm_token_classes(runs, "periodic")
    for i, variant in enumerate(VARIANTS):
        mine = periodic[periodic["run_id"].isin(runs[i * N:(i + 1) * N]) & (periodic["class"] == "other")]
        expected = mine.groupby("step")["loss_per_token"].mean()
        got = means[means["variant"] == variant].set_index("step")["value"]
        assert got.to_dict() == pytest.approx(expected.to_dict()) and list(expected.index) == [2, 4, 6]
    # The validation curves' x axis: training tokens, as lm_curves counts them.
    at.radio(key="content_x").set_value("tokens")
    ok(at.run())
    spec, (data,) = _chart(at, "Over training: other tokens")
    assert {layer["encoding"]["x"]["field"] for layer in spec["layer"]} == {"tokens"}
    assert (data["tokens"] == data["step"] * 2 * 32).all()
    # A class with no tokens at any validation step (32-token windows hold no recall 65 back): said, not drawn.
    at.selectbox(key="content_class_class").set_value("recall_65_256")
    ok(at.run())
    assert any("No recall 65–256 tokens" in i.value for i in at.info)
    assert not [s for s, _ in _charts(at) if "Over training" in json.dumps(s.get("title", ""))]


def test_every_predictor_against_spen_linear_per_class(runs):
    at = _page()
    grid = _table(at, "all tokens").set_index("variant")
    assert list(grid.index) == VARIANTS[2:] and (grid["seeds"] == N).all()
    rows = _final_classes(runs, "class")
    lin, tok = rows["linear"], rows["softmax_tokens"]
    for n in CLASSES:
        d = [tok.loc[(s, n), "loss_per_token"] - lin.loc[(s, n), "loss_per_token"] for s in SEEDS]
        assert grid.loc["SPEN softmax attention (tokens)", class_label(n)] == _cell(d, 4), n
    overall = [tok.xs(s, level="seed")["loss"].sum() / tok.xs(s, level="seed")["tokens"].sum()
               - lin.xs(s, level="seed")["loss"].sum() / lin.xs(s, level="seed")["tokens"].sum() for s in SEEDS]
    assert grid.loc["SPEN softmax attention (tokens)", "all tokens"] == _cell(overall, 4)


def test_the_gap_verdict_is_the_shared_rule_on_the_pre_registered_pools(runs):
    at = _page()
    shown = _table(at, "the paper predicts")
    assert list(shown["the paper predicts"]) == [c.paper for c in GAP_CLAIMS]
    assert list(shown["the paper predicts"])[:2] == ["the gap concentrates on recall tokens",
                                                     "and grows with their distance"]
    rows = _final_classes(runs, "class")
    spen, gpt = rows["linear"], rows["gpt"]

    def pooled(frame, seed, names):
        part = frame.xs(seed, level="seed").loc[list(names)]
        return part["loss"].sum() / part["tokens"].sum()

    deltas = [(pooled(spen, s, RECALL) - pooled(gpt, s, RECALL))
              - (pooled(spen, s, NOT_RECALL) - pooled(gpt, s, NOT_RECALL)) for s in SEEDS]
    d = spread(deltas)
    concentrates, grows = shown.iloc[0], shown.iloc[1]
    assert concentrates["Δ (nats/token)"] == verdict_number(d.mean)
    assert concentrates["std of Δ"] == verdict_number(d.std)
    assert concentrates["threshold"] == verdict_number(VERDICT_K * d.std) and concentrates["seeds"] == N
    assert concentrates["verdict"] == SHARED_WORDS[judge(d)]  # the shared rule's own words
    # 32-token windows: no recall token more than 64 back, so the second claim cannot be formed.
    assert spen.xs("recall_65_256", level="class")["tokens"].sum() == 0
    assert grows["verdict"] == "not measured" and grows["seeds"] == 0 and grows["Δ (nats/token)"] == ""
    # The claims that read the newer partitions and the copy mix are measured on these runs too.
    for later in shown.iloc[3:].itertuples():
        assert later.seeds == N, later
    lines = _lines(at)
    assert any(b.startswith("- The gap concentrates on recall tokens") and verdict_number(d.mean) in b
               and b.endswith(f"— {concentrates['verdict']}.") for b in lines)
    assert any(b.startswith("- The gap grows with the recall distance") and "not measured" in b for b in lines)
    assert any(m.value.startswith(":gray-badge[") and "The gap grows with the recall distance" in m.value
               for m in at.markdown)
    assert any(m.value.startswith("**The rule.** The gap of a class") for m in at.markdown)


def test_the_token_class_pairs_name_each_spens_gpt(runs):
    pairs = lm_token_class_pairs(runs, "final")
    by_run = pairs.drop_duplicates("run_id").set_index("run_id")
    for i in range(N):
        assert pd.isna(by_run.loc[runs[i], "gpt_run_id"])  # a GPT has none
        for spec in range(1, len(SPECS)):
            assert by_run.loc[runs[spec * N + i], "gpt_run_id"] == runs[i]  # the GPT of the same seed
    own = lm_token_classes(runs, "final").set_index(["run_id", "partition", "class"])
    got = pairs.set_index(["run_id", "partition", "class"])
    assert got["loss"].to_dict() == own.loc[got.index, "loss"].to_dict()
    assert (got["tokens_seen"] == got["step"] * 2 * 32).all()


def test_runs_stored_before_the_split_say_so(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    make_lm_runs(home, ("gpt", "linear"), (0,), real=False)  # synthetic rows: no lm_token_classes
    at = _page()
    assert any(s.value == "Where the gap lives: token classes" for s in at.subheader)
    assert any("hold no token classes" in i.value for i in at.info)
    assert not [s for s, _ in _charts(at) if "gap" in json.dumps(s.get("title", ""))]


def _runs(variants, group="g") -> list[dict]:
    """The store's lm_final_losses rows: one per seed of each (predictor, attn_input, losses by seed 0, 1, …),
    and a GPT (not in the ablation) whose losses would change every verdict if it were read."""
    rows = [dict(model="spen", predictor=p, attn_input=a, seed=seed, loss=loss, group_id=group)
            for p, a, losses in variants for seed, loss in enumerate(losses)]
    return rows + [dict(model="gpt", predictor="linear", attn_input="state", seed=s, loss=1.0, group_id=group)
                   for s in range(3)]


LIN = ("linear", "state", [5.00, 5.02, 4.98])


@pytest.mark.parametrize("variants, verdict, words", [
    # state readers within 2 × the std of Δ (Δ = 0.03, −0.01, 0.01), control far better: the flat ablation had power
    ([LIN, ("softmax_attention", "state", [5.03, 5.01, 4.99]), ("softmax_attention", "tokens", [4.50, 4.51, 4.49])],
     "reproduced", ["0.0100 against 0.0400", "by 0.5000 nats/token"]),
    # an attention state reader apart from linear beyond the spread (Δ = −0.10, −0.09, −0.11)
    ([LIN, ("linear_attention", "state", [4.90, 4.93, 4.87]), ("softmax_attention", "tokens", [4.5, 4.5, 4.5])],
     "not_reproduced", ["SPEN linear attention (state) differs", "Δ = -0.1000", "(0.0200; 3 seeds paired)"]),
    # the control as flat as the EMA variants: no power
    ([LIN, ("softmax_attention", "state", [5.01, 5.03, 4.97]), ("softmax_attention", "tokens", [4.99, 5.03, 4.99])],
     "inconclusive", ["as flat as the EMA variants", "no power at this budget"]),
    # the control worse than the state readers beyond the spread: no power shown either
    ([LIN, ("softmax_attention", "state", [5.01, 5.03, 4.97]), ("softmax_attention", "tokens", [5.50, 5.52, 5.48])],
     "inconclusive", ["worse than the best state reader"]),
    # one seed: no spread to compare with; two: fewer than a claim is judged on
    ([("linear", "state", [5.0]), ("softmax_attention", "state", [5.3]), ("softmax_attention", "tokens", [4.0])],
     "not_judged", ["Not judged: 1 seed paired", "share 1 seed(s)", "at least 3 seeds paired"]),
    ([("linear", "state", [5.0, 5.1]), ("softmax_attention", "state", [5.3, 5.4]),
      ("softmax_attention", "tokens", [4.0, 4.1])], "not_judged", ["Not judged: 2 seeds paired", "share 2 seed(s)"]),
    # no control among the runs
    ([LIN, ("softmax_attention", "state", [5.01, 5.03, 4.97])], "inconclusive", ["no raw-token control"]),
    # nothing to compare
    ([LIN, ("softmax_attention", "tokens", [4.5, 4.5, 4.5])], "untested", ["reading the current state is missing"]),
    ([], "untested", ["SPEN linear is missing"]),
])
def test_the_ablation_verdict_rule(variants, verdict, words):
    v = ablation_verdict(_runs(variants))
    assert v.verdict == verdict and v.word.startswith(VERDICT_WORDS[verdict])  # "not judged: 2 seeds"
    assert v.sentence.lower().startswith(v.word)
    for w in words:
        assert w in v.sentence, (w, v.sentence)


def test_the_verdict_pairs_by_seed_within_one_settings_group():
    # Linear at seeds 0–3, softmax at seeds 1–4: paired on seeds 1, 2 and 3 only.  A pooled comparison
    # would see the seed-to-seed swing (±0.5) and call them within the spread; paired, softmax is
    # 0.01 worse on every seed, which is beyond a spread of zero.
    lin = [dict(model="spen", predictor="linear", attn_input="state", seed=s, loss=loss, group_id="g")
           for s, loss in ((0, 9.0), (1, 5.0), (2, 5.5), (3, 6.0))]
    soft = [dict(model="spen", predictor="softmax_attention", attn_input="state", seed=s, loss=loss, group_id="g")
            for s, loss in ((1, 5.01), (2, 5.51), (3, 6.01), (4, 1.0))]
    (claim,) = ablation_verdict(lin + soft).comparisons
    assert claim.delta.n == 3 and claim.delta.mean == pytest.approx(0.01) and claim.beyond
    # The same seed of other settings (another group) never pairs.
    elsewhere = [{**r, "group_id": "h"} for r in soft]
    (claim,) = ablation_verdict(lin + elsewhere).comparisons
    assert claim.delta.n == 0 and claim.beyond is None
    # Two runs of one variant, seed and group (a setting that changes no number, say threads) are averaged.
    twice = lin + soft + [{**soft[0], "loss": 5.03}]
    assert ablation_verdict(twice).comparisons[0].delta.mean == pytest.approx((0.02 + 0.01 + 0.01) / 3)


def test_verdict_comparisons():
    v = ablation_verdict(_runs([LIN, ("softmax_attention", "state", [5.03, 5.01, 4.99]),
                                ("linear_attention", "sequence", [4.70, 4.71, 4.69]),
                                ("softmax_attention", "tokens", [4.50, 4.51, 4.49]),
                                ("linear_attention", "tokens", [4.60, 4.61, 4.59])])).comparisons
    assert [c.role for c in v] == ["claim", "power check", "beside the rule"]
    power = v[1]  # the best control against the best state reader
    assert (power.variant, power.reference) == ("SPEN softmax attention (tokens)", "SPEN linear")
    assert power.delta.mean == pytest.approx(-0.5) and power.threshold == pytest.approx(VERDICT_K * 0.01)
    # a sequence reader's gain is shown, not judged: the verdict stays "reproduced"
    assert v[2].beyond and ablation_verdict(_runs([LIN, ("softmax_attention", "state", [5.03, 5.01, 4.99]),
                                                   ("linear_attention", "sequence", [4.70, 4.71, 4.69]),
                                                   ("softmax_attention", "tokens", [4.50, 4.51, 4.49])])
                                            ).verdict == "reproduced"
    # seeds that agree exactly are not "beyond" each other at Δ = 0
    same = ablation_verdict(_runs([("linear", "state", [5.0] * 3), ("softmax_attention", "state", [5.0] * 3),
                                   ("softmax_attention", "tokens", [4.0] * 3)]))
    assert same.comparisons[0].beyond is False and same.verdict == "reproduced"


def test_one_seed_and_no_pick(runs):
    at = _page()
    at.multiselect(key="content_runs").set_value(runs[::N])  # seed 0 of each variant
    ok(at.run())
    table = _table(at, "perplexity ÷ GPT")
    assert (table["seeds"] == 1).all() and not table["perplexity"].str.contains("±").any()
    gap = _table(at, "the paper predicts")
    assert gap["verdict"].tolist() == ["not judged: 1 seed", "not measured", "not measured", "not judged: 1 seed",
                                       "not judged: 1 seed"]
    assert any(line.startswith("- The gap concentrates") and line.endswith("— not judged: 1 seed.")
               for line in _lines(at))
    at.multiselect(key="content_runs").set_value([])
    ok(at.run())
    assert any("Pick at least one run" in i.value for i in at.info)


def test_two_settings_default_to_the_one_with_more_seeds_and_warn_when_mixed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    older = make_lm_runs(home, ("gpt", "linear"), (0, 1), real=False)
    newer = make_lm_runs(home, ("gpt", "linear", "linear_attention_state"), (0,), real=False,
                         overrides={"steps": 8}, started="2026-02-01T00:00:00+00:00")
    at = _page()
    # Two seeds of two variants, not the newer settings' one seed of three (as the scoreboard picks).
    assert sorted(at.multiselect(key="content_runs").value) == sorted(older)
    assert not any("different settings" in w.value for w in at.warning)
    at.multiselect(key="content_runs").set_value(newer)
    ok(at.run())
    ratio = _table(at, "paper").set_index("measure").loc["Perplexity, SPEN ÷ GPT", "ours"]
    assert "±" not in ratio and ratio != ""
    at.multiselect(key="content_runs").set_value(older + newer)
    ok(at.run())
    assert any("2 different settings" in w.value for w in at.warning)
    # A SPEN is divided by the GPT of its own settings only: both pairs of seed 0 still have one.
    assert _table(at, "perplexity ÷ GPT").set_index("variant").loc["SPEN linear", "seeds"] == 3


def test_overview_links_to_the_content_page(empty_home):
    at = open_page()
    links = {e.proto.label: e.proto.page for e in at.get("page_link")}
    assert links["Tested on: Content"] == "content"


def test_the_charts_export_as_svg_and_png(runs):
    from ema_core.figures import chart_to_png, chart_to_svg
    from ema_core.studies.content.figures import lm_ablation_chart, lm_ablation_frame, lm_curve_chart, lm_curve_frame
    from store.content import lm_final_stats

    curves = lm_curve_chart(lm_curve_frame(lm_curves(runs), 0.6), log_x=True, log_y=True)
    ablation = lm_ablation_chart(lm_ablation_frame(lm_final_stats(runs)), 5.0)
    for chart, text in ((curves, "validation loss"), (ablation, "final validation loss")):
        svg = chart_to_svg(chart)
        assert svg.lstrip().startswith("<svg") and text in svg
        assert chart_to_png(chart, scale=1).startswith(b"\x89PNG")
    assert "SPEN softmax attention (tokens)" in chart_to_svg(curves)
    from ema_core.studies.content.gap import class_gaps
    from ema_core.studies.content.figures import class_gap_chart, class_gap_frame
    split = class_gaps(lm_token_class_pairs(runs).to_dict("records"))
    svg = chart_to_svg(class_gap_chart(class_gap_frame(split), split.variant))
    assert "Where the gap lives" in svg and "recall 1–16" in svg and "SPEN linear − GPT" in svg


def test_a_run_with_an_unexpected_config_does_not_break_the_page(tmp_path, monkeypatch):
    from ema_core.rundir import RunDir, run_id_for
    from store import ingest

    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    rd = RunDir.for_id(run_id_for("content", {"d": 32, "seed": 0}, 0), home)
    rd.create("content", {"d": 32, "seed": 0}, 0)
    rd.append_events([{"seq": 0, "step": 10, "metrics": {"val/loss": 3.0}}])
    rd.write_result({"summary": {}, "tables": {"lm_eval": [{"split": "val", "loss": 3.0, "ppl": 20.0, "bpb": 1.0}]}})
    rd.write_status(state="done")
    assert ingest(home)["errors"] == []
    at = _page()
    assert _curves(at)[1]["variant"].iloc[0] == "? linear (state)"
    assert _table(at, "perplexity ÷ GPT")["perplexity"].tolist() == ["20.0"]


def test_comparable_settings_ignore_logging_and_read_older_configs_without_doc_sep(tmp_path, monkeypatch):
    # Runs that differ only in how often they log or checkpoint pool together; a config from before
    # data.doc_sep existed groups with today's where the setting changes nothing (Austen: one document
    # per novel), and elsewhere reads as what the older code did (a .txt file whole: "none").
    from ema_core.rundir import RunDir, run_id_for
    from store import ingest

    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    today = build_config("content", preset="quick").model_dump(mode="json")

    def run(seed, corpus="austen", drop_doc_sep=False, **changes):
        cfg = json.loads(json.dumps(today))
        cfg["seed"], cfg["data"]["corpus"] = seed, corpus
        for path, value in changes.items():
            group, key = path.split("__")
            cfg[group][key] = value
        if drop_doc_sep:
            del cfg["data"]["doc_sep"]
        rd = RunDir.for_id(run_id_for("content", cfg, seed), home)
        rd.create("content", cfg, seed)
        rd.write_status(state="done")
        return rd.run_id

    ids = {"now": run(0), "older": run(1, drop_doc_sep=True), "logs": run(2, train__log_every=7,
                                                                        train__checkpoint_every=9),
           "txt_older": run(0, "corpus.txt", drop_doc_sep=True), "txt_none": run(1, "corpus.txt", data__doc_sep="none"),
           "txt_blank": run(2, "corpus.txt"), "longer": run(3, train__steps=301)}
    assert ingest(home)["errors"] == []
    group = lm_runs(home=home).set_index("run_id")["group_id"]
    g = {name: group[run_id] for name, run_id in ids.items()}
    assert g["now"] == g["older"] == g["logs"] != g["longer"]
    assert g["txt_older"] == g["txt_none"] != g["txt_blank"]
    assert g["txt_blank"] != g["now"]
