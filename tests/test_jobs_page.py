"""The Jobs page as a run list: each kind's headline, the cards of finished runs, the run table with its
filters, notes and tags, the config diff, and the page state kept in the URL (AppTest, a real store)."""
import os

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from apptest import APP, TIMEOUT
from ema_core.experiments import REGISTRY, NullReporter, build_config, headline
from ema_core.rundir import RunDir
from finished_run import write_finished_run
from store import EXPORT_TABLES, run_notes
from structure_fixture import make_structure_runs, synthetic_result


@pytest.fixture
def home(empty_home):
    return empty_home


# -- each kind's headline -----------------------------------------------------------------------------

def test_every_kind_declares_a_headline_and_none_is_said_without_a_summary():
    for kind, exp in REGISTRY.items():
        assert exp.headline.__module__ == exp.run.__module__  # its own, beside its run
        assert headline(kind, {}) == "" and headline(kind, None) == ""
    assert headline("retired_kind", {"val_loss": 1.0}) == ""


def test_the_dilution_headline_names_each_rates_horizon_from_a_real_run():
    cfg = build_config("dilution", preset="quick", overrides=dict(alphas="0.5,0.1", vocab=16, dim=16, max_lag=4,
                                                                  n_train=512, n_test=256, steps=40), seed=0)
    summary = REGISTRY["dilution"].run(cfg, NullReporter())["summary"]
    horizons = {k.split("/", 1)[1]: v for k, v in summary.items() if k.startswith("horizon/")}
    assert {"α=0.5", "α=0.1"} <= set(horizons)
    assert headline("dilution", summary) == "horizon (lags): " + " · ".join(f"{n} {h}" for n, h in horizons.items())
    # A run stored before horizons were measured still says something: its lag-0 accuracy.
    assert headline("dilution", {"acc_lag0/α=0.5": 0.98765, "chance": 0.0625}) == "lag-0 accuracy: α=0.5 0.988"


def test_the_structure_headline_sets_the_traces_probe_beside_the_bigru():
    summary = synthetic_result(0)["summary"]
    within, novel = summary["within"], summary["transfer"]
    assert headline("structure", summary) == (
        f"SPCN traces {within['traces']:.3f} within, {novel['traces']:.3f} novel"
        f" · BiGRU {within['bigru']:.3f} within, {novel['bigru']:.3f} novel")
    assert headline("structure", {"within": {"bigru": 0.5}}) == "BiGRU 0.500 within"
    assert headline("structure", {"grammar": {"words": 147}}) == ""


def test_the_boundary_headline_names_its_best_and_worst_mixer():
    from ema_core.studies.boundary.experiment import summarise

    cfg = build_config("boundary", preset="quick")
    row = dict(chance=0.5, state_floats=64)
    rows = [dict(row, mixer="ema", task="lag", difficulty=k, accuracy=acc) for k, acc in (("k=8", 0.6), ("k=16", 0.5))]
    rows += [dict(row, mixer="softmax", task="lag", difficulty=k, accuracy=1.0) for k in ("k=8", "k=16")]
    assert headline("boundary", summarise(cfg, rows, 10.0)) == ("4 cells · mean accuracy: best softmax 1.000, "
                                                                "worst ema 0.550")


def test_the_language_model_headlines_say_the_model_and_its_loss():
    # The keys ema_core.studies.content.experiment and lm_eval write into a summary.
    lm = {"model": "spen", "predictor": "linear", "attn_input": None, "val_loss": 4.12345, "val_bpb": 1.5,
          "size": "tiny"}
    assert headline("content", lm) == "spen/linear · val loss 4.123 nats/token · 1.500 bits/byte"
    assert headline("content", {"model": "gpt", "predictor": None}) == "gpt"
    ev = {"model": "gpt", "predictor": None, "corpus": "austen", "split": "val", "val_loss": 4.2,
          "source_val_loss": 4.0}
    assert headline("lm_eval", ev) == "gpt on austen/val · loss 4.200 nats/token (own held-out text 4.000)"
    assert headline("lm_eval", {**ev, "source_val_loss": None}) == "gpt on austen/val · loss 4.200 nats/token"


# -- the page -----------------------------------------------------------------------------------------

def _jobs_page(query: dict[str, str] | None = None, tab: str | None = None) -> AppTest:
    """The Jobs page, its URL holding ``query``; ``tab``: the tab open (only the open one is drawn)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if tab is not None:
        query = {**(query or {}), "tab": tab}
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    at.switch_page("pages/jobs.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _plain(text: str) -> str:
    return text.replace("\\", "")  # the page escapes Markdown in what it shows as data


@pytest.fixture
def runs(home):
    """Two structure runs of one config (seeds 0, 1), one of another, and a dilution run: all done."""
    base = make_structure_runs(home, (0, 1))
    other = make_structure_runs(home, (0,), {"preset": "test", "n_sentences": 300})[0]
    dilution = write_finished_run(home, "dilution", {"alphas": [0.5], "seed": 0}, 0, [(1, {"acc_lag0/α=0.5": 0.9})],
                                  {"summary": {"horizon/α=0.5": 3}, "tables": {}})
    return {"base": base, "other": other, "dilution": dilution}


def test_a_finished_runs_card_shows_its_state_run_time_headline_and_page(home, runs):
    # A running run beside them, whose worker sees its pace still changing, and a failed one.
    running = RunDir.for_id("structure-000000000000-s9", home)
    running.create("structure", {"preset": "test", "n_sentences": 200, "seed": 9}, 9)
    running.write_status(state="running", pid=os.getpid(), progress=0.5, eta_s=125.0, eta_settled=False,
                         started="2026-01-01T00:00:00+00:00")
    failed = RunDir.for_id("structure-111111111111-s8", home)
    failed.create("structure", {"preset": "test", "n_sentences": 200, "seed": 8}, 8)
    failed.write_status(state="failed", started="2026-01-01T00:00:00+00:00", ended="2026-01-01T00:00:30+00:00",
                        message="ValueError: boom")

    at = _jobs_page()
    heads = [m.value for m in at.markdown if m.value.startswith("**structure") or m.value.startswith("**dilution")]
    assert sum(":green-badge[done]" in h for h in heads) == 4
    assert sum(":blue-badge[running]" in h for h in heads) == 1 and sum(":red-badge[failed]" in h for h in heads) == 1
    bars = {p.proto.text.split("**")[1]: p.proto.text for p in at.get("progress")}
    assert "roughly 2 min 5 s left" in bars[running.run_id]  # rough: the worker says the pace still moves
    captions = [_plain(c.value) for c in at.caption]
    summary = synthetic_result(0)["summary"]
    assert f"ran 1 min (2026-01-01 00:00 → 00:01 UTC) · {headline('structure', summary)}" in captions
    assert "ran 30 s (2026-01-01 00:00 → 00:00 UTC)" in captions  # a failed run ran too
    assert "ran 1 min (2026-01-01 00:00 → 00:01 UTC) · horizon (lags): α=0.5 3" in captions
    links = {(p.proto.label, p.proto.query_string) for p in at.get("page_link")}
    for run_id in (*runs["base"], runs["other"]):  # each opens its page with itself picked
        assert ("Open on Structure", f"structure_runs={run_id}") in links
    assert ("Open on Export", f"export_runs={runs['dilution']}") in links  # picked there too


def _table(at) -> pd.DataFrame:
    return at.dataframe[0].value


def test_the_run_table_filters_by_kind_state_setting_and_tag_and_keeps_notes(home, runs):
    at = _jobs_page(tab="Table")
    assert not at.get("progress")  # only the open tab is drawn: no job card behind the table
    table = _table(at)
    assert sorted(table["run_id"]) == sorted([*runs["base"], runs["other"], runs["dilution"]])
    assert list(table.columns) == ["run_id", "kind", "label", "state", "seed", "created", "run time (min)",
                                   "headline", "note", "tags"]
    row = table.set_index("run_id").loc[runs["dilution"]]
    assert row["kind"] == "dilution" and row["headline"] == "horizon (lags): α=0.5 3" and row["run time (min)"] == 1.0

    at.multiselect(key="kinds").select("structure").run()
    assert sorted(_table(at)["run_id"]) == sorted([*runs["base"], runs["other"]])
    assert at.query_params["kinds"] == "structure"
    at.text_input(key="q").input("n_sentences=300").run()
    assert list(_table(at)["run_id"]) == [runs["other"]]
    at.text_input(key="q").input("").run()
    assert "q" not in at.query_params

    # A note and tags on one run: kept in the store, shown in the table, normalised, filterable.
    at.selectbox(key="note_run").select(runs["base"][0]).run()
    at.text_area(key="note_text").input("the first seed; compare with the 300-sentence run")
    at.text_input(key="note_tags").input(" baseline, seeds ,baseline")
    next(b for b in at.button if b.label == "Save note").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"Saved the note and tags of {runs['base'][0]}" in s.value for s in at.success)
    assert at.text_input(key="note_tags").value == "baseline, seeds"
    stored = run_notes().set_index("run_id")
    assert stored.loc[runs["base"][0], "tags"] == ["baseline", "seeds"]
    row = _table(at).set_index("run_id").loc[runs["base"][0]]
    assert row["note"] == "the first seed; compare with the 300-sentence run" and row["tags"] == "baseline, seeds"
    at.multiselect(key="tags").select("seeds").run()
    assert list(_table(at)["run_id"]) == [runs["base"][0]]

    # Another run picked: its own (empty) note to edit.
    at.selectbox(key="note_run").select(runs["other"]).run()
    assert at.text_area(key="note_text").value == "" and at.text_input(key="note_tags").value == ""


def test_the_config_diff_shows_what_two_runs_do_not_share(home, runs):
    at = _jobs_page(tab="Compare configs")
    at.selectbox(key="run_a").select(runs["other"]).run()
    at.selectbox(key="run_b").select(runs["base"][0]).run()
    diff = at.dataframe[0].value
    assert diff.values.tolist() == [["n_sentences", "300", "200"]]
    at.toggle(key="same").set_value(True).run()
    diff = at.dataframe[0].value.set_index("setting")
    assert diff.loc["kind"].tolist() == ["structure", "structure", True]
    assert diff.loc["preset"].tolist() == ["test", "test", True] and not diff.loc["n_sentences", "same"]
    assert at.query_params["run_a"] == runs["other"] and at.query_params["same"] == "1"
    # Runs of two studies side by side.
    at.selectbox(key="run_b").select(runs["dilution"]).run()
    diff = at.dataframe[0].value.set_index("setting")
    assert diff.loc["kind"].tolist() == ["structure", "dilution", False] and diff.loc["alphas", "run A"] == "—"


def test_a_reload_keeps_the_filters_and_picks_named_in_the_url(home, runs):
    at = _jobs_page({"kinds": "structure,retired_kind", "states": "done", "q": "n_sentences=300"}, tab="Table")
    assert at.multiselect(key="kinds").value == ["structure"]  # what the page no longer offers is dropped
    assert at.multiselect(key="states").value == ["done"] and at.text_input(key="q").value == "n_sentences=300"
    assert list(_table(at)["run_id"]) == [runs["other"]]
    assert at.query_params["kinds"] == "structure"  # the URL says what the page shows
    at = _jobs_page({"run_a": runs["other"], "run_b": "structure-gone-s0", "same": "1"}, tab="Compare configs")
    assert at.selectbox(key="run_a").value == runs["other"] and at.toggle(key="same").value is True
    assert at.selectbox(key="run_b").value != "structure-gone-s0"


def test_a_results_page_picks_the_runs_its_url_names(home, runs):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["structure_runs"] = f"{runs['other']},structure-gone-s0"
    at.run()
    at.switch_page("pages/structure.py").run()
    assert not at.exception, [e.value for e in at.exception]
    picker = at.multiselect(key="structure_runs")
    assert picker.value == [runs["other"]]
    picker.select(runs["base"][1]).run()
    assert at.query_params["structure_runs"] == f"{runs['other']},{runs['base'][1]}"
    # Without a URL the seeds of the config with the most are picked (one config's), and the URL says so.
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page("pages/structure.py").run()
    picked = at.multiselect(key="structure_runs").value
    assert sorted(picked) == sorted(runs["base"])  # two seeds, not the newer config's one
    assert at.query_params["structure_runs"] == ",".join(picked)


def test_the_export_page_opens_the_table_runs_and_grouping_its_url_names(home, runs):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {"export_table": "probe_accuracy", "export_runs": f"{runs['other']},structure-gone-s0",
                       "export_grouped": "1"}.items():
        at.query_params[key] = value
    at.run()
    at.switch_page("pages/export.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="export_table").value == "probe_accuracy"
    assert at.multiselect(key="export_runs").value == [runs["other"]]  # a run that left the store is dropped
    assert at.toggle(key="export_grouped").value is True
    at.selectbox(key="export_table").select("dilution_accuracy").run()
    assert at.query_params["export_table"] == "dilution_accuracy" and at.query_params["export_runs"] == runs["other"]
    at.selectbox(key="export_table").select(next(iter(EXPORT_TABLES))).run()
    assert "export_table" not in at.query_params  # the default table: the URL names only what was chosen
    # A finished dilution run's link opens Export with that run picked.
    from pages._state import RESULT_PAGES

    assert RESULT_PAGES["dilution"].picks == "export_runs"
