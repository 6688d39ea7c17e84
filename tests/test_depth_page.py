"""The Depth dilution page through AppTest: empty store, launch, real tiny runs drawn and judged, exports, the URL."""
from __future__ import annotations

import io
import json

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from apptest import APP, TIMEOUT, ok, open_page
from depth_fixture import make_depth_runs

from ema_core import palette
from ema_core.depth import RULE_LABELS, RULES
from ema_core.depth_findings import (CLAIMS, PREDICTED_ORDER, VERDICT_RULE, claim_verdicts, claims_and_checks,
                                     depth_statement, measured_order)
from ema_core.experiments import build_config
from ema_core.experiments.depth import PRESET_RULES
from ema_core.figures.depth import DEPTH_METRICS
from ema_core.scoreboard import depth_scores
from pages._verdicts import badge
from store.depth import depth_results, depth_weights
from store.export import mean_std

PAGE = "pages/depth.py"
METRIC_TITLES = {m: f"{axis[0].upper()}{axis[1:]} against depth" for m, (axis, _) in DEPTH_METRICS.items()}


def _page(query: dict[str, str] | None = None) -> AppTest:
    """The page, its URL holding ``query`` (as a shared link or a reload would)."""
    if not query:
        return open_page(PAGE)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    ok(at.run())
    return ok(at.switch_page(PAGE).run())


def _charts(at: AppTest) -> list[tuple[dict, pd.DataFrame]]:
    """Each chart's spec and its data, every dataset stacked (they travel as Arrow beside the spec)."""
    out = []
    for c in at.get("vega_lite_chart"):
        frames = [pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in c.proto.datasets]
        out.append((json.loads(c.proto.spec), pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()))
    return out


def _title(spec: dict) -> str:
    """The chart's title and subtitle as one text (their lines wrapped to the chart's width, rejoined)."""
    title = spec.get("title") or {}
    lines = [title] if isinstance(title, str) else [title.get("text", []), title.get("subtitle", [])]
    return " ".join(part for line in lines for part in ([line] if isinstance(line, str) else line))


def _colour_scale(spec: dict) -> dict[str, str]:
    """Series -> colour of the chart's rule colour scale (its legend, entry by entry)."""
    for layer in spec.get("layer", [spec]):
        scale = layer.get("encoding", {}).get("color", {}).get("scale")
        if scale and "domain" in scale:
            return dict(zip(scale["domain"], scale["range"]))
    raise AssertionError("no colour scale")


def _marks(spec: dict) -> list[str]:
    return [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]


def _verdict_lines(at: AppTest) -> list[str]:
    """Every verdict's one line, in the page's order (the claims, then the sanity check)."""
    return [m.value for m in at.markdown if "-badge[" in m.value]


def _expected_lines(verdicts) -> list[str]:
    return [f"{badge(s)} {s.line}" for s in depth_scores(verdicts)]


@pytest.fixture
def downloads(monkeypatch):
    """What each download button would send, by its file id: the page makes files only on click (a
    deferred callable), so the callables are kept here to be called as a click would."""
    made: dict[str, tuple] = {}
    add = MediaFileManager.add_deferred

    def keep(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        file_id = add(self, data_callable, mimetype, coordinates, file_name, **kw)
        made[file_id] = (data_callable, file_name, mimetype)
        return file_id

    monkeypatch.setattr(MediaFileManager, "add_deferred", keep)
    return made


def _file(at: AppTest, made: dict, key: str) -> tuple[str, str | bytes]:
    """(file name, content) of the download button ``key``, made as its click would make it."""
    button = next(b for b in at.get("download_button") if b.proto.id.endswith(f"-{key}"))
    data, name, _ = made[button.proto.deferred_file_id]
    return name, data()


# -- the runs ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def depth_home(tmp_path_factory):
    """One real tiny run of three seeds (the fewest a claim is judged on): every rule at 1 and 2 blocks."""
    home = tmp_path_factory.mktemp("depth") / "home"
    return home, make_depth_runs(home, (0,))


@pytest.fixture
def runs(depth_home, monkeypatch):
    home, run_ids = depth_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    return run_ids


@pytest.fixture(scope="module")
def thin_home(tmp_path_factory):
    """A run of one seed (fewer than a claim is judged on), in a store of its own."""
    home = tmp_path_factory.mktemp("depth_thin") / "home"
    return home, make_depth_runs(home, (0,), overrides={"seeds": 1})


# -- no runs yet: the invitation to launch ------------------------------------------------------------------

def test_empty_store_shows_an_empty_state_and_the_launch_section(empty_home):
    at = _page()
    assert at.title[0].value == "Depth dilution"
    assert "fixed sum <" in at.markdown[0].value and "DenseFormer" in at.markdown[0].value
    assert any("No finished depth comparison runs" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == [] and len(at.dataframe) == 0
    assert any(s.value == "Launch" for s in at.subheader)
    assert at.multiselect(key="depth_rules").options == [RULE_LABELS[r] for r in RULES]
    # the presets' rules by default (dynamic waits for a rate per depth), every rule on offer
    assert at.multiselect(key="depth_rules").value == list(PRESET_RULES) != list(RULES)
    # Each preset's grid, tokens and seeds as its config has them (the note is read from it).
    text = "\n".join(m.value for m in at.markdown)
    for preset in ("quick", "full"):
        cfg = build_config("depth", preset=preset)
        tokens = cfg.train.steps * cfg.train.batch * cfg.train.seq_len
        assert f"`{preset}`: 4, 8 and 16 blocks, {tokens:,} training tokens per model, {cfg.seeds} seed(s)" in text


def test_launch_submits_one_run_of_the_rules_and_seeds_picked(empty_home, registered):
    at = _page()
    assert at.selectbox(key="depth_preset").options == ["quick", "full"]
    at.multiselect(key="depth_rules").set_value(["select", "sum"])  # in the order clicked
    at.number_input(key="depth_seed").set_value(4)
    at.number_input(key="depth_seeds").set_value(3)
    next(b for b in at.button if b.label == "Launch").click()
    ok(at.run())
    expected = build_config("depth", preset="quick", seed=4, overrides={"rules": ["sum", "select"], "seeds": 3})
    assert registered == [("depth", expected.model_dump(), "quick")]
    assert expected.rules == ("sum", "select") and expected.seeds == 3  # the config a worker would run
    assert any("depth-x-s4" in s.value for s in at.success)
    at.multiselect(key="depth_rules").set_value([])
    next(b for b in at.button if b.label == "Launch").click()
    ok(at.run())
    assert len(registered) == 1 and any("at least one rule" in w.value for w in at.warning)


# -- a real run of three seeds ----------------------------------------------------------------------------

def test_a_real_run_draws_the_four_charts_against_depth_from_the_store(runs):
    at = _page()
    assert at.multiselect(key="depth_runs").value == runs
    assert any("1 run(s) · seeds 0, 1, 2" in c.value and "standard deviation" in c.value for c in at.caption)
    charts = _charts(at)
    assert len(charts) == 5  # four metrics against depth, then the weights map
    rows = depth_results(runs)
    colours = {RULE_LABELS[r]: palette.DEPTH_RULE_COLORS[r] for r in RULES}
    for (spec, data), metric in zip(charts, ("val_loss", "val_bpb", "probe_token", "probe_early")):
        assert METRIC_TITLES[metric] in _title(spec)
        assert "mean over 3 seeds;" in _title(spec) and "± one std;" in _title(spec)
        assert _colour_scale(spec) == colours  # one series per rule, each in its rule's colour
        assert _marks(spec) == ["errorbar", "line", "point"]  # three seeds: a spread to draw
        trained = data[data["when"] == "trained"]
        assert set(trained["rule"]) == set(RULES) and set(trained["depth"]) == {1, 2}
        # Each point is the store's mean over seeds of its cell, with its std and seed count.
        for r in trained.itertuples():
            cell = rows.loc[(rows["rule"] == r.rule) & (rows["depth"] == r.depth), metric]
            assert r.mean == pytest.approx(cell.mean()) and r.std == pytest.approx(cell.std(ddof=1)) and r.n == 3
    # The probes carry their value at initialisation (dashed); the loss has none.
    whens = {metric: set(data["when"]) for (_, data), metric in zip(charts, DEPTH_METRICS)}
    assert whens == {"val_loss": {"trained"}, "val_bpb": {"trained"}, "probe_token": {"trained", "at init"},
                     "probe_early": {"trained", "at init"}}
    chance = rows["probe_token_chance"].mean()
    assert any(f"chance (the commonest of its tokens) is {chance:.3f}" in c.value for c in at.caption)


def test_the_weights_map_is_the_stores_mean_and_follows_its_radio_and_the_url(runs):
    at = _page()
    radio = at.radio(key="depth_map_depth")
    assert radio.options == ["1", "2"] and radio.value == "2"  # the deepest: where the rules differ most
    assert "depth_map_depth" not in at.query_params  # the default: the URL says only what was chosen
    spec, cells = _charts(at)[-1]
    assert "Depth weights at 2 blocks" in _title(spec)
    weights = depth_weights(runs)
    stored = weights[weights["depth"] == 2].groupby(["rule", "layer", "source"])["weight"].mean()
    shown = cells.set_index(["rule", "layer", "source"])["weight"]
    assert len(shown) == len(stored) and shown.sort_index().to_numpy() == pytest.approx(stored.sort_index().to_numpy())
    assert (cells["source"] <= cells["layer"]).all()  # lower-triangular: a stream weighs only what came before
    assert set(cells["rule_label"]) == {RULE_LABELS[r] for r in RULES}
    # The fixed sum gives its own output weight 1 and nothing else any.
    fixed = cells[cells["rule"] == "sum"]
    assert (fixed["weight"] == (fixed["source"] == fixed["layer"]).astype(float)).all()
    # Another depth: the map and the URL follow.
    at.radio(key="depth_map_depth").set_value("1")
    ok(at.run())
    assert at.query_params["depth_map_depth"] == "1"
    spec, cells = _charts(at)[-1]
    assert "Depth weights at 1 block," in _title(spec) and set(cells["layer"]) == {1}
    # A reload of that URL opens on the same depth.
    at = _page({"depth_map_depth": "1"})
    assert at.radio(key="depth_map_depth").value == "1"
    assert "Depth weights at 1 block," in _title(_charts(at)[-1][0])


def test_a_picked_run_in_the_url_is_shown_and_bad_url_values_are_ignored(runs):
    at = _page({"depth_runs": f"{runs[0]},depth-gone-s0", "depth_map_depth": "1"})
    assert at.multiselect(key="depth_runs").value == runs  # a run that left the store is dropped
    assert at.query_params["depth_runs"] == runs[0]
    assert at.radio(key="depth_map_depth").value == "1"
    # Values the page does not offer: the default runs and depth, and the URL cleaned of them.
    at = _page({"depth_runs": "depth-gone-s0", "depth_map_depth": "7"})
    assert at.multiselect(key="depth_runs").value == runs
    assert at.radio(key="depth_map_depth").value == "2"
    assert "depth_map_depth" not in at.query_params and at.query_params["depth_runs"] == runs[0]
    assert len(_charts(at)) == 5
    at = _page({"depth_map_depth": "two"})
    assert at.radio(key="depth_map_depth").value == "2"


def test_the_page_sets_the_papers_order_beside_the_measured_one_and_judges_each_claim(runs):
    at = _page()
    assert any(s.value == "The paper's order and the measured one" for s in at.subheader)
    text = "\n".join(m.value for m in at.markdown)
    assert "**The paper's order**, worst first\n\n" + "\n".join(
        f"{i}. {RULE_LABELS[r]}" for i, r in enumerate(PREDICTED_ORDER, 1)) in text
    rows = depth_results(runs)
    assert "**Measured at 2 blocks**" in text
    for i, (rule, loss) in enumerate(measured_order(rows, 2), 1):
        assert f"{i}. {RULE_LABELS[rule]} — {loss:.4f}" in text
    assert f"**Where the two axes meet.** {depth_statement(rows)}" in text
    assert "from 1 block to 2 blocks" in depth_statement(rows)
    # Every claim, then the sanity check, on one line each: its verdict as a badge, what was expected and
    # measured; the full sentence beside the rule in the expander.
    claims, checks = claims_and_checks(claim_verdicts(rows))
    assert len(claims) == len(CLAIMS) == 5 and len(checks) == 1
    assert _verdict_lines(at) == _expected_lines(claims) + _expected_lines(checks)
    assert VERDICT_RULE in text
    for s in depth_scores(claims + checks):
        assert f"- {s.detail}" in text and s.detail.startswith(s.claim)
    # Three seeds: judged, so no claim says "not judged", and no box says so either.
    assert not any("not judged" in v.word for v in claims + checks)
    assert not any("not judged" in i.value for i in at.info)
    # The claims before the check, said apart from them.
    said = [m.value for m in at.markdown]
    claims_at = next(i for i, m in enumerate(said) if m.startswith("**The paper's claims**"))
    check_at = next(i for i, m in enumerate(said) if m.startswith("**Sanity check**"))
    lines_at = [i for i, m in enumerate(said) if "-badge[" in m]
    assert claims_at < lines_at[0] and lines_at[-2] < check_at < lines_at[-1]


def test_the_table_and_its_downloads_hold_the_stores_numbers(runs, downloads):
    at = _page()
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("SVG") == labels.count("PNG") == 5  # four charts against depth, the weights map
    assert labels.count("CSV") == labels.count("Markdown") == labels.count("LaTeX") == 1
    table = next(d.value for d in at.dataframe if "val_loss" in d.value.columns)
    assert list(table.columns[:5]) == ["rule", "depth", "seeds", "params", "lr"]
    assert list(table["rule"]) == [r for r in RULES for _ in (1, 2)]  # the paper's order, then depth
    rows = depth_results(runs)
    cell = rows[(rows["rule"] == "select") & (rows["depth"] == 2)]
    row = table[(table["rule"] == "select") & (table["depth"] == 2)].iloc[0]
    assert row["val_loss"].replace("\u00a0", " ") == mean_std(cell["val_loss"].mean(), cell["val_loss"].std(ddof=1), 4)
    assert row["probe_early_init"].replace("\u00a0", " ") == mean_std(cell["probe_early_init"].mean(),
                                                                        cell["probe_early_init"].std(ddof=1), 4)
    assert row["seeds"] == 3 and row["params"] == cell["params"].iloc[0]
    # The files themselves, made as a click makes them.
    name, csv = _file(at, downloads, "depth_table_dl_csv")
    assert name == "depth_results.csv"
    back = pd.read_csv(io.StringIO(csv))
    assert back.shape == table.shape and list(back.columns) == list(table.columns)
    assert back.loc[(back["rule"] == "select") & (back["depth"] == 2), "val_loss"].item() == mean_std(
        cell["val_loss"].mean(), cell["val_loss"].std(ddof=1), 4)
    name, tex = _file(at, downloads, "depth_table_dl_tex")
    assert name == "depth_results.tex"
    assert "\\toprule" in tex and "$\\pm$" in tex and "\\label{tab:depth-results}" in tex and "val\\_loss" in tex
    name, md = _file(at, downloads, "depth_table_dl_md")
    assert name == "depth_results.md" and md.splitlines()[0].startswith("| rule") and "---" in md.splitlines()[1]
    name, svg = _file(at, downloads, "depth_weights_chart_svg")
    assert name == "depth_weights.svg" and svg.lstrip().startswith("<svg") and "Depth weights at 2 blocks" in svg


def test_no_run_picked_says_so(runs):
    at = _page()
    at.multiselect(key="depth_runs").set_value([])
    ok(at.run())
    assert any("Pick at least one run" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == []
    assert any(s.value == "Launch" for s in at.subheader)


# -- one seed: drawn, never judged ---------------------------------------------------------------------------

def test_below_three_seeds_no_claim_is_judged(thin_home, monkeypatch):
    home, run_ids = thin_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = _page()
    assert any("1 run(s) · seeds 0 ·" in c.value and "no error bars" in c.value for c in at.caption)
    assert any("hold 1 seed(s)" in i.value and 'not judged: 1 seed"' in i.value for i in at.info)
    rows = depth_results(run_ids)
    verdicts = claim_verdicts(rows)
    assert all(v.word == "not judged: 1 seed" for v in verdicts)
    lines = _verdict_lines(at)
    assert lines == _expected_lines(verdicts) and len(lines) == len(CLAIMS) + 1
    assert all(":gray-badge[" in line and "not judged: 1 seed" in line and "1 seed of the 3 the rule needs" in line
               for line in lines)
    text = "\n".join(m.value for m in at.markdown)
    assert f"**Where the two axes meet.** {depth_statement(rows)}" in text and "not judged: 1 seed" in text
    # One seed: the points, no error bars (nor a layer for them), and no "± one std" said.
    charts = _charts(at)
    assert len(charts) == 5
    for spec, _ in charts[:4]:
        assert _marks(spec) == ["line", "point"] and "± one std" not in _title(spec)
        assert "mean over 1 seed;" in _title(spec)


def test_runs_stored_without_weights_still_draw_and_say_so(tmp_path, monkeypatch):
    from store.db import open_store

    home = tmp_path / "home"
    run_ids = make_depth_runs(home, (0,), overrides={"seeds": 1})
    monkeypatch.setenv("EMALAB_HOME", str(home))
    with open_store(readonly=False, home=home) as conn:  # as a run whose weights were never stored
        conn.execute("DELETE FROM depth_weights")
    assert depth_weights(run_ids).empty
    at = _page()
    assert any("hold no depth weights" in i.value for i in at.info)
    assert len(_charts(at)) == 4 and not at.get("radio")


# -- where a depth run is linked from, and its exported figures ---------------------------------------------

def test_a_finished_depth_runs_card_opens_this_page_with_it_picked(runs):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    ok(at.switch_page("pages/jobs.py").run())
    links = {(p.proto.label, p.proto.query_string) for p in at.get("page_link")}
    assert ("Open on Depth dilution", f"depth_runs={runs[0]}") in links
    # This page's own URL path (not the Depth explorer's), with the run picked there.
    assert ("depth", f"depth_runs={runs[0]}") in {(p.proto.page, p.proto.query_string) for p in at.get("page_link")}


def test_the_export_page_draws_a_runs_depth_figures(runs):
    at = open_page("pages/export.py")
    at.selectbox(key="export_table").set_value("depth_results")
    ok(at.run())
    assert any(s.value == "Figure" for s in at.subheader)
    specs = [spec for spec, _ in _charts(at)]
    assert [next(m for m, t in METRIC_TITLES.items() if t in _title(s)) for s in specs] == list(DEPTH_METRICS)
    at.selectbox(key="export_table").set_value("depth_weights")
    ok(at.run())
    specs = [spec for spec, _ in _charts(at)]
    assert len(specs) == 2 and "at 1 block," in _title(specs[0]) and "at 2 blocks" in _title(specs[1])
