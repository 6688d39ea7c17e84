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
from depth_fixture import make_depth_runs, tiny_run

from ema_core import palette
from ema_core.depth import RULE_LABELS, RULES
from ema_core.studies.depth.findings import (CLAIMS, PREDICTED_ORDER, SANITY_CHECKS, VERDICT_RULE, by_budget, claim_verdicts,
                                     claims_and_checks, depth_statement, measured_order, trained_deep)
from ema_core.experiments import build_config
from ema_core.studies.depth.figures import DEPTH_METRICS
from ema_core.studies.depth.findings import scores as depth_scores
from finished_run import write_finished_run
from pages._verdicts import badge
from store import ingest
from store.depth import depth_remix, depth_results, depth_weight_steps, depth_weights
from store.export import mean_std

PAGE = "pages/depth.py"
METRIC_TITLES = {m: f"{axis[0].upper()}{axis[1:]} against depth" for m, (axis, _) in DEPTH_METRICS.items()}
# The page's charts against depth, in its order: the loss, then the probes (the claims' two, the checks' two).
PAGE_METRICS = ("val_loss", "val_bpb", "probe_early_resid", "probe_prev", "probe_token", "probe_early")
# Every chart the page draws over a run that holds everything: those, the weights map, the weights as they
# train, the spread of the weights, the budget axis.
CHARTS = len(PAGE_METRICS) + 4


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
    """Series -> colour of the chart's colour scale (its legend, entry by entry); a facet's, of its panels'."""
    spec = spec.get("spec", spec)
    for layer in spec.get("layer", [spec]):
        scale = layer.get("encoding", {}).get("color", {}).get("scale")
        if scale and "domain" in scale:
            return dict(zip(scale["domain"], scale["range"]))
    raise AssertionError("no colour scale")


def _chart(at: AppTest, title: str) -> tuple[dict, pd.DataFrame]:
    """The one chart whose title holds ``title``."""
    found = [c for c in _charts(at) if title in _title(c[0])]
    assert len(found) == 1, [_title(spec) for spec, _ in _charts(at)]
    return found[0]


def _table(at: AppTest, column: str) -> pd.DataFrame:
    """The one table shown with the column ``column``."""
    found = [d.value for d in at.dataframe if column in d.value.columns]
    assert len(found) == 1, [list(d.value.columns) for d in at.dataframe]
    return found[0]


def _text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


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


LONG_STEPS = 48  # the second budget's: 8× the tiny run's 6 steps, as the long preset is 8× the quick one


@pytest.fixture(scope="module")
def budgets_home(tmp_path_factory):
    """Two budgets in one store: the real tiny run, and beside it the same run's rows relabelled as trained on
    8× the tokens (a config of 48 steps at the quick table's rates, as the long preset's), with the fixed sum's
    deepest loss put above its shallowest, so that this budget's deep models are "not yet trained".  Its run
    ids: (the tiny budget's, the long one's)."""
    home = tmp_path_factory.mktemp("depth_budgets") / "home"
    short = make_depth_runs(home, (0,))
    cfg, events, result = tiny_run(0)
    cfg["train"]["steps"] = LONG_STEPS
    # As the long preset records its rates: the quick table's, read at this budget on purpose.
    cfg["train"]["lr"], cfg["rates_from"] = "auto", "quick"
    result["summary"].update(rate_table="quick", rates_matched=False)
    tables = result["tables"]
    shallow = {r["seed"]: r["val_loss"] for r in tables["depth_results"] if r["rule"] == "sum" and r["depth"] == 1}
    for r in tables["depth_results"]:
        r["tokens"] *= LONG_STEPS // 6
        if r["rule"] == "sum" and r["depth"] == 2:
            r["val_loss"] = shallow[r["seed"]] + 0.5
    for m in tables["depth_remix"]:
        if m["depth"] == 2:  # the remix keeps its gain over the frozen sum it starts from
            moved = shallow[m["seed"]] + 0.5 - m["base_loss"]
            m["base_loss"], m["val_loss"] = m["base_loss"] + moved, m["val_loss"] + moved
    # Started after the tiny run ended: the newest, whatever the two run ids (a tie in start time would
    # fall back on the ids' order, which moves with every config field).
    long = write_finished_run(home, "depth", cfg, 0, events, result, started="2026-01-01T00:01:30+00:00",
                              ended="2026-01-01T00:02:00+00:00")
    report = ingest(home, [long])
    assert report["errors"] == [], report["errors"]
    return home, (short[0], long)


# -- no runs yet: the invitation to launch ------------------------------------------------------------------

def test_empty_store_shows_an_empty_state_and_the_launch_section(empty_home):
    at = _page()
    assert at.title[0].value == "Depth dilution"
    assert "fixed sum <" in at.markdown[0].value and "DenseFormer" in at.markdown[0].value
    assert any("No finished depth comparison runs" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == [] and len(at.dataframe) == 0
    assert any(s.value == "Launch" for s in at.subheader)
    # Every rule on offer and picked by default: every preset runs all four.
    assert at.multiselect(key="depth_rules").options == [RULE_LABELS[r] for r in RULES]
    assert at.multiselect(key="depth_rules").value == list(RULES)
    # Each preset's grid, tokens and seeds as its config has them (the note is read from it).
    text = _text(at)
    for preset in ("quick", "long", "full"):
        cfg = build_config("depth", preset=preset)
        tokens = cfg.train.steps * cfg.train.batch * cfg.train.seq_len
        assert f"`{preset}`: 4, 8 and 16 blocks, {tokens:,} training tokens per model, {cfg.seeds} seed(s)" in text
    assert "307,200 training tokens per model, 1 seed(s), about 10 minutes a seed on two CPU cores" in text
    assert "2,457,600 training tokens per model, 1 seed(s), about an hour a seed on two CPU cores" in text


def test_launch_submits_one_run_of_the_rules_and_seeds_picked(empty_home, registered):
    at = _page()
    assert at.selectbox(key="depth_preset").options == ["quick", "long", "full"]  # the shortest first
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

def test_a_real_run_draws_every_metric_against_depth_from_the_store(runs):
    at = _page()
    assert at.multiselect(key="depth_runs").value == runs
    assert any("1 run(s) · seeds 0, 1, 2" in c.value and "standard deviation" in c.value for c in at.caption)
    assert len(_charts(at)) == CHARTS
    assert "depth_budget" not in [r.key for r in at.radio]  # one budget: nothing to pick
    rows = depth_results(runs)
    colours = {RULE_LABELS[r]: palette.DEPTH_RULE_COLORS[r] for r in RULES}
    for metric in (*PAGE_METRICS, "mix_entropy"):
        spec, data = _chart(at, METRIC_TITLES[metric])
        assert "mean over 3 seeds;" in _title(spec) and "± one std;" in _title(spec)
        # One series per rule, each in its rule's colour; the fixed sum has no mixing weights to spread.
        mixing = metric == "mix_entropy"
        assert _colour_scale(spec) == {k: v for k, v in colours.items() if not (mixing and k == RULE_LABELS["sum"])}
        assert _marks(spec) == ["errorbar", "line", "point"]  # three seeds: a spread to draw
        trained = data[data["when"] == "trained"]
        assert set(trained["rule"]) == set(RULES) - ({"sum"} if mixing else set()) and set(trained["depth"]) == {1, 2}
        # Each point is the store's mean over seeds of its cell, with its std and seed count.
        for r in trained.itertuples():
            cell = rows.loc[(rows["rule"] == r.rule) & (rows["depth"] == r.depth), metric]
            assert r.mean == pytest.approx(cell.mean()) and r.std == pytest.approx(cell.std(ddof=1)) and r.n == 3
        # The probes carry their value at initialisation (dashed), the baseline; the loss and the spread none.
        assert set(data["when"]) == ({"trained", "at init"} if metric.startswith("probe_") else {"trained"})
        if metric.startswith("probe_"):
            for r in data[data["when"] == "at init"].itertuples():
                cell = rows.loc[(rows["rule"] == r.rule) & (rows["depth"] == r.depth), f"{metric}_init"]
                assert r.mean == pytest.approx(cell.mean())
    for what, col in (("token", "probe_token_chance"), ("previous-token", "probe_prev_chance")):
        chance = rows[col].mean()
        assert any(f"The {what} probe's chance (the commonest of its tokens) is {chance:.3f}" in c.value
                   for c in at.caption)
    assert "**0** puts all the weight on one output, **1** spreads it evenly over all of them" in _text(at)


def test_the_rates_each_rule_and_depth_trained_at_are_shown_with_where_they_came_from(runs):
    at = _page()
    rates = _table(at, "2 blocks")
    assert list(rates.columns) == ["rule", "1 block", "2 blocks"] and list(rates["rule"]) == list(RULES)
    rows = depth_results(runs)
    for r in rows.itertuples():
        label = "1 block" if r.depth == 1 else "2 blocks"
        assert rates.loc[rates["rule"] == r.rule, label].item() == f"{r.lr:.3g}"
    # The tiny run sets its rate in the config: said so, with the number (no table was read).
    lr = rows["lr"].iloc[0]
    assert any(f"Set in the config: train.lr = {lr:g}, the same for every cell" in c.value
               for c in at.caption)
    # The results table keeps the rate beside each cell too.
    assert "lr" in _table(at, "val_loss").columns


def test_the_weights_map_is_the_stores_mean_and_follows_its_radio_and_the_url(runs):
    at = _page()
    radio = at.radio(key="depth_map_depth")
    assert radio.options == ["1", "2"] and radio.value == "2"  # the deepest: where the rules differ most
    assert "depth_map_depth" not in at.query_params  # the default: the URL says only what was chosen
    spec, cells = _chart(at, "Depth weights at")
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
    spec, cells = _chart(at, "Depth weights at")
    assert "Depth weights at 1 block," in _title(spec) and set(cells["layer"]) == {1}
    # A reload of that URL opens on the same depth.
    at = _page({"depth_map_depth": "1"})
    assert at.radio(key="depth_map_depth").value == "1"
    assert "Depth weights at 1 block," in _title(_chart(at, "Depth weights at")[0])


def _stored_steps(run_ids, rule: str, depth: int) -> pd.Series:
    steps = depth_weight_steps(run_ids)
    part = steps[(steps["rule"] == rule) & (steps["depth"] == depth)]
    return part.groupby(["layer", "source", "step"])["weight"].mean().sort_index()


def test_the_weights_as_they_train_are_the_stores_mean_per_rule_and_depth_and_follow_the_url(runs):
    at = _page()
    radio = at.radio(key="depth_traj_rule")
    # Every rule with weights to move (the fixed sum has none), selection by default.
    assert radio.options == [RULE_LABELS[r] for r in ("static", "dynamic", "select")] and radio.value == "select"
    spec, data = _chart(at, "as they train")
    assert "Input-dependent selection: its weights as they train, at 2 blocks" in _title(spec)
    assert "mean over 3 seeds" in _title(spec)
    stored = _stored_steps(runs, "select", 2)
    shown = data.set_index(["layer", "source", "step"])["weight"].sort_index()
    assert list(shown.index) == list(stored.index) and shown.to_numpy() == pytest.approx(stored.to_numpy())
    assert set(data["step"]) == {0, 3, 6} and set(data["layer"]) == {1, 2}  # initialisation, then each evaluation
    assert data.loc[data["source"] == 0, "source_label"].eq("0: the embedding").all()
    # A panel per block's stream; each output in its place on the palette's ordered ramp, the embedding darkest.
    assert spec["facet"]["field"] == "layer"
    assert _colour_scale(spec) == {"0: the embedding": palette.RAMP_COLORS[0], "block 1": palette.RAMP_COLORS[32],
                                   "block 2": palette.RAMP_COLORS[64]}
    # Another rule and depth: the chart and the URL follow.
    at.radio(key="depth_traj_rule").set_value("static")
    at.radio(key="depth_map_depth").set_value("1")
    ok(at.run())
    assert at.query_params["depth_traj_rule"] == "static" and at.query_params["depth_map_depth"] == "1"
    spec, data = _chart(at, "as they train")
    assert "Static learned weights (DenseFormer): its weights as they train, at 1 block" in _title(spec)
    stored = _stored_steps(runs, "static", 1)
    assert data.set_index(["layer", "source", "step"])["weight"].sort_index().to_numpy() == pytest.approx(
        stored.to_numpy())
    # A reload of that URL opens on the same rule; a rule the page does not offer (sum) falls back.
    at = _page({"depth_traj_rule": "dynamic"})
    assert at.radio(key="depth_traj_rule").value == "dynamic"
    at = _page({"depth_traj_rule": "sum"})
    assert at.radio(key="depth_traj_rule").value == "select" and "depth_traj_rule" not in at.query_params


def test_the_remix_table_sets_what_a_read_recovers_beside_the_jointly_trained_gain(runs, downloads):
    at = _page()
    assert any(s.value == "The remix test" for s in at.subheader)
    table = _table(at, "remix_gain")
    assert list(table.columns) == ["depth", "rule", "seeds", "joint_gain", "remix_gain", "share"]
    rows, remix = depth_results(runs), depth_remix(runs)
    assert [(int(d), r) for d, r in zip(table["depth"], table["rule"])] == [
        (d, r) for d in (1, 2) for r in ("static", "dynamic")]
    loss = rows.set_index(["rule", "depth", "seed"])["val_loss"]
    for row in table.itertuples():
        fitted = remix[(remix["rule"] == row.rule) & (remix["depth"] == row.depth)]
        recovered = fitted["base_loss"] - fitted["val_loss"]
        joint = pd.Series([loss[("sum", row.depth, s)] - loss[(row.rule, row.depth, s)] for s in fitted["seed"]])
        assert row.seeds == 3
        assert row.remix_gain.replace("\u00a0", " ") == mean_std(recovered.mean(), recovered.std(ddof=1), 4)
        assert row.joint_gain.replace("\u00a0", " ") == mean_std(joint.mean(), joint.std(ddof=1), 4)
        assert row.share == (f"{recovered.mean() / joint.mean():.0%}" if joint.mean() > 0 else "—")
    text = _text(at)
    assert "If the remix recovers most of the gap, the information was still in the stream" in text
    assert "the gap comes from training the body with the rule" in text
    name, csv = _file(at, downloads, "depth_remix_dl_csv")
    assert name == "depth_remix.csv" and pd.read_csv(io.StringIO(csv)).shape == table.shape


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
    assert len(_charts(at)) == CHARTS
    at = _page({"depth_map_depth": "two"})
    assert at.radio(key="depth_map_depth").value == "2"


def test_the_page_sets_the_papers_order_beside_the_measured_one_and_judges_each_claim(runs):
    at = _page()
    assert any(s.value == "The paper's order and the measured one" for s in at.subheader)
    text = _text(at)
    # The paper's order in tiers: it does not order its two input-dependent forms, so they share the third.
    assert "**The paper's order**, worst first\n\n1. fixed sum (pre-norm residual)\n2. static learned weights " \
           "(DenseFormer)\n3. static + input-dependent increment and input-dependent selection (not ordered by " \
           "the paper)" in text
    assert len(PREDICTED_ORDER) == 3
    rows, remix = depth_results(runs), depth_remix(runs)
    assert "**Measured at 2 blocks**" in text
    for i, (rule, loss) in enumerate(measured_order(rows, 2), 1):
        assert f"{i}. {RULE_LABELS[rule]} — {loss:.4f}" in text
    assert f"**Where the two axes meet.** {depth_statement(rows)}" in text
    assert "from 1 block to 2 blocks" in depth_statement(rows)
    # Every claim (the remix's among them: judged on the remix rows), then the sanity checks, on one line
    # each: its verdict as a badge, what was expected and measured; the full sentence beside the rule.
    claims, checks = claims_and_checks(claim_verdicts(rows, remix))
    assert len(claims) == len(CLAIMS) == 8 and len(checks) == len(SANITY_CHECKS) == 2
    assert {"remix_short_of_static", "remix_short_of_dynamic", "sum_loses_prev_token"} <= {v.claim.key for v in claims}
    assert all(v.measured for v in claims if v.claim.key.startswith("remix_"))  # the remix rows reached the claims
    assert _verdict_lines(at) == _expected_lines(claims) + _expected_lines(checks)
    assert VERDICT_RULE in text
    for s in depth_scores(claims + checks):
        assert f"- {s.detail}" in text and s.detail.startswith(s.claim)
    # Three seeds: judged, so no claim says "not judged", and no box says so either.
    assert not any("not judged" in v.word for v in claims + checks)
    assert not any("not judged" in i.value for i in at.info)
    # The claims before the checks, said apart from them.
    said = [m.value for m in at.markdown]
    claims_at = next(i for i, m in enumerate(said) if m.startswith("**The paper's claims**"))
    check_at = next(i for i, m in enumerate(said) if m.startswith("**Sanity checks**"))
    lines_at = [i for i, m in enumerate(said) if "-badge[" in m]
    assert claims_at < lines_at[0] and lines_at[-3] < check_at < lines_at[-2]


def test_the_table_and_its_downloads_hold_the_stores_numbers(runs, downloads):
    at = _page()
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("SVG") == labels.count("PNG") == CHARTS  # every chart
    assert labels.count("CSV") == labels.count("Markdown") == labels.count("LaTeX") == 2  # the results, the remix
    table = _table(at, "val_loss")
    assert list(table.columns[:5]) == ["rule", "depth", "seeds", "params", "lr"]
    assert list(table["rule"]) == [r for r in RULES for _ in (1, 2)]  # the paper's order, then depth
    assert {"probe_early_resid", "probe_prev", "probe_prev_init", "mix_entropy"} <= set(table.columns)
    rows = depth_results(runs)
    cell = rows[(rows["rule"] == "select") & (rows["depth"] == 2)]
    row = table[(table["rule"] == "select") & (table["depth"] == 2)].iloc[0]
    for col in ("val_loss", "probe_early_init", "probe_early_resid", "probe_prev", "mix_entropy"):
        assert row[col].replace("\u00a0", " ") == mean_std(cell[col].mean(), cell[col].std(ddof=1), 4), col
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
    name, svg = _file(at, downloads, "depth_traj_chart_svg")
    assert name == "depth_weight_steps.svg" and svg.lstrip().startswith("<svg") and "as they train" in svg


def test_no_run_picked_says_so(runs):
    at = _page()
    at.multiselect(key="depth_runs").set_value([])
    ok(at.run())
    assert any("Pick at least one run" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == []
    assert any(s.value == "Launch" for s in at.subheader)


# -- the budget axis ------------------------------------------------------------------------------------------

def _budget_rows(table: pd.DataFrame, rows: pd.DataFrame) -> None:
    """Each row of the budget table against the findings on the store's rows of its budget."""
    budgets = by_budget(rows)
    assert list(table["tokens per model"]) == list(budgets)  # smallest first
    for row, (tokens, (held, _)) in zip(table.to_dict("records"), budgets.items()):
        deep = trained_deep(held)
        gap = next(v for v in claim_verdicts(held) if v.claim.key == "gap_grows_with_depth")
        assert (row["shallowest"], row["deepest"]) == (deep["shallow"], deep["deep"])
        assert row["sum at shallowest"] == pytest.approx(deep["shallow_loss"])
        assert row["sum at deepest"] == pytest.approx(deep["deep_loss"])
        assert row["deepest beats shallowest"] == ("yes" if deep["beats"] else "no")
        assert row["gap grows with depth"] == gap.word
        assert row["seeds"] == len({r["seed"] for r in held}) == 3


def test_the_budget_axis_judges_each_budget_of_every_finished_run(runs):
    at = _page()
    assert any(s.value == "The budget axis" for s in at.subheader)
    table = _table(at, "tokens per model")
    rows = depth_results(runs)
    assert len(table) == 1 and table["tokens per model"].item() == rows["tokens"].iloc[0]
    _budget_rows(table, rows)
    assert ("At budgets where the fixed sum's deepest model does not beat its shallowest, \"the gap grows with "
            "depth\" is not judged: deep models not yet trained.") in _text(at)
    spec, data = _chart(at, "Held-out loss against depth at each budget")
    means = rows.groupby(["rule", "depth"])["val_loss"].mean()
    assert len(data) == len(means)
    for r in data.itertuples():
        assert r.mean == pytest.approx(means[(r.rule, r.depth)])


def test_two_budgets_are_never_pooled_and_each_is_judged_apart(budgets_home, monkeypatch):
    home, (short, long) = budgets_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = _page()
    # The budget axis reads every finished run, whichever are picked (by default the config with the most runs, the newest of those tied).
    assert at.multiselect(key="depth_runs").value == [long]
    table = _table(at, "tokens per model")
    every = depth_results([short, long])
    assert list(table["tokens per model"]) == [192, 192 * LONG_STEPS // 6]
    _budget_rows(table, every)
    # The long budget's fixed sum got worse with depth: its gap claim is not judged, and the page says why.
    assert list(table["deepest beats shallowest"]) == ["yes", "no"]
    assert table["gap grows with depth"].iloc[1] == "not judged: deep models not yet trained"
    spec, data = _chart(at, "Held-out loss against depth at each budget")
    assert spec["facet"]["field"] == "budget" and set(data["budget"]) == {"192 tokens per model",
                                                                          "1,536 tokens per model"}
    # Both runs picked: a budget to pick for the charts, the longest by default, and the claims at each apart.
    at.multiselect(key="depth_runs").set_value([short, long])
    ok(at.run())
    radio = at.radio(key="depth_budget")
    assert radio.options == ["192 tokens per model", "1,536 tokens per model"] and radio.value == "1536"
    rows = depth_results(long)
    spec, data = _chart(at, METRIC_TITLES["val_loss"])
    trained = data[data["when"] == "trained"]
    for r in trained.itertuples():  # the long budget's cells alone
        assert r.mean == pytest.approx(rows.loc[(rows["rule"] == r.rule) & (rows["depth"] == r.depth),
                                                "val_loss"].mean())
    # The long budget's rates: another budget's table, and the page says it was read on purpose.
    assert any("From the `quick` rate table: rates chosen on dev at other settings (300 cosine steps of 8 × 128 tokens), read "
               "here on purpose" in c.value
               for c in at.caption)
    text = _text(at)
    assert "#### At 192 tokens per model" in text and "#### At 1,536 tokens per model" in text
    expected = []
    for run in (short, long):
        claims, checks = claims_and_checks(claim_verdicts(depth_results(run), depth_remix(run)))
        expected += _expected_lines(claims) + _expected_lines(checks)
    assert _verdict_lines(at) == expected
    assert any("not judged: deep models not yet trained" in line for line in expected)
    # The other budget: the charts follow, and the URL says so.
    at.radio(key="depth_budget").set_value("192")
    ok(at.run())
    assert at.query_params["depth_budget"] == "192"
    assert any("Set in the config: train.lr = 0.003" in c.value for c in at.caption)
    assert not any("read here on purpose" in c.value for c in at.caption)
    short_rows = depth_results(short)
    spec, data = _chart(at, METRIC_TITLES["val_loss"])
    for r in data[data["when"] == "trained"].itertuples():
        assert r.mean == pytest.approx(short_rows.loc[(short_rows["rule"] == r.rule)
                                                      & (short_rows["depth"] == r.depth), "val_loss"].mean())


# -- one seed: drawn, never judged ---------------------------------------------------------------------------

def test_below_three_seeds_no_claim_is_judged(thin_home, monkeypatch):
    home, run_ids = thin_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = _page()
    assert any("1 run(s) · seeds 0 ·" in c.value and "no error bars" in c.value for c in at.caption)
    assert any("hold 1 seed(s)" in i.value and 'not judged: 1 seed"' in i.value for i in at.info)
    rows = depth_results(run_ids)
    verdicts = claim_verdicts(rows, depth_remix(run_ids))
    assert all(v.word == "not judged: 1 seed" for v in verdicts)
    lines = _verdict_lines(at)
    assert lines == _expected_lines(verdicts) and len(lines) == len(CLAIMS) + len(SANITY_CHECKS)
    assert all(":gray-badge[" in line and "not judged: 1 seed" in line and "1 seed of the 3 the rule needs" in line
               for line in lines)
    text = _text(at)
    assert f"**Where the two axes meet.** {depth_statement(rows)}" in text and "not judged: 1 seed" in text
    # One seed: the points, no error bars (nor a layer for them), and no "± one std" said.
    assert len(_charts(at)) == CHARTS
    for metric in (*PAGE_METRICS, "mix_entropy"):
        spec, _ = _chart(at, METRIC_TITLES[metric])
        assert _marks(spec) == ["line", "point"] and "± one std" not in _title(spec)
        assert "mean over 1 seed;" in _title(spec)


NEW_COLUMNS = ("probe_early_resid", "probe_early_resid_init", "probe_prev", "probe_prev_init", "probe_prev_chance",
               "mix_entropy")


def test_runs_stored_before_the_weights_remix_and_new_probes_still_draw_and_say_so(tmp_path, monkeypatch):
    from store.db import open_store

    home = tmp_path / "home"
    run_ids = make_depth_runs(home, (0,), overrides={"seeds": 1})
    monkeypatch.setenv("EMALAB_HOME", str(home))
    # As a run stored before its weights, its remix and the new probes were: their tables empty, their columns null.
    with open_store(readonly=False, home=home) as conn:
        for table in ("depth_weights", "depth_weight_steps", "depth_remix"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute("UPDATE depth_results SET " + ", ".join(f"{c} = NULL" for c in NEW_COLUMNS))
    assert depth_weights(run_ids).empty and depth_weight_steps(run_ids).empty and depth_remix(run_ids).empty
    at = _page()
    infos = [i.value for i in at.info]
    assert any("hold no depth weights" in i for i in infos) and any("hold no remix" in i for i in infos)
    for metric in ("probe_early_resid", "probe_prev", "mix_entropy"):
        assert f"These runs hold no {DEPTH_METRICS[metric][0]}: they were stored before it was measured." in infos
    # No map, no weights as they train, none of the three new measures: the loss, the old probes, the budgets.
    assert len(_charts(at)) == CHARTS - 5 and not at.get("radio")
    assert not any("previous-token probe's chance" in c.value for c in at.caption)
    lines = _verdict_lines(at)
    assert lines == _expected_lines(claim_verdicts(depth_results(run_ids)))


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
