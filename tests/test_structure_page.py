"""The Structure page through AppTest: empty store, several seeds, the split switch, the paper table, launch."""
from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from apptest import ok, open_page

from ema_core.experiments import build_config
from ema_core.rundir import RunDir
from ema_core.studies.structure.findings import VERDICT_WORDS, claim_measures, claim_verdicts, judge, spread
from store.structure import probe_accuracy
from store.export import mean_std
from structure_fixture import make_structure_runs, split_roles

MODELS = {"SPCN instantaneous", "SPCN traces", "n-gram window", "BiGRU"}
CONDITIONS = {"real task", "untrained SPCN", "control: word", "control: word × previous category",
              "control: word × position"}

PAGE = "pages/structure.py"
SEEDS = (0, 1, 2)


def _page() -> AppTest:
    return open_page(PAGE)


def _charts(at: AppTest) -> list[tuple[dict, pd.DataFrame]]:
    """Each chart's spec and its data (which travels as Arrow beside the spec)."""
    out = []
    for c in at.get("vega_lite_chart"):
        data = pa.ipc.open_stream(c.proto.datasets[0].data.data).read_all().to_pandas()
        out.append((json.loads(c.proto.spec), data))
    return out


def _table(at: AppTest, column: str) -> pd.DataFrame:
    tables = [d.value for d in [*at.dataframe, *at.table] if column in d.value.columns]
    assert len(tables) == 1, [list(d.value.columns) for d in at.dataframe]
    return tables[0]


@pytest.fixture(scope="module")
def structure_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("structure") / "home"
    return home, make_structure_runs(home, SEEDS)


@pytest.fixture
def runs(structure_home, monkeypatch):
    home, run_ids = structure_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    return run_ids




def test_empty_store_shows_an_empty_state_and_the_launch_section(empty_home):
    at = _page()
    assert at.title[0].value == "Structure"
    assert "SPCN" in at.markdown[0].value
    assert any("No finished structure runs" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == [] and len(at.dataframe) == len(at.table) == 0
    assert any(s.value == "Launch" for s in at.subheader)


def test_launch_submits_one_run_per_seed(empty_home, registered):
    at = _page()
    assert at.selectbox(key="structure_preset").options == ["quick", "paper"]
    at.number_input(key="structure_n_seeds").set_value(2)
    at.number_input(key="structure_first_seed").set_value(5)
    next(b for b in at.button if b.label == "Launch").click()
    ok(at.run())
    assert registered == [("structure", build_config("structure", preset="quick", seed=s).model_dump(), "quick")
                          for s in (5, 6)]
    assert any("structure-x-s5, structure-x-s6" in s.value for s in at.success)


def test_runs_of_several_seeds_draw_bars_with_error_bars(runs):
    at = _page()
    assert at.multiselect(key="structure_runs").value == runs  # every seed of the config with the most
    assert any("3 run(s) · seeds 0, 1, 2" in c.value for c in at.caption)
    (roles_spec, roles), (control_spec, control) = _charts(at)
    assert roles_spec["facet"]["column"]["field"] == "group"
    assert [layer["mark"]["type"] for layer in roles_spec["spec"]["layer"]] == ["bar", "rule"]
    assert set(roles["model"]) == MODELS
    assert list(dict.fromkeys(roles["group"])) == ["all tokens", "lexical", "structure-dependent"]
    assert set(roles["role"]) == {"overall", *split_roles()["test"]}
    assert (roles["n"] == 3).all() and roles["std"].notna().all()  # three seeds: a spread everywhere
    # The bars are the store's numbers: mean and sample std across seeds of one (role, probe).
    raw = probe_accuracy(runs, role="agent_det", feature_set="bigru", split="test")["accuracy"]
    row = roles[(roles["role"] == "agent_det") & (roles["model"] == "BiGRU")].iloc[0]
    assert row["mean"] == pytest.approx(raw.mean()) and row["std"] == pytest.approx(raw.std(ddof=1))
    assert set(control["condition"]) == CONDITIONS
    assert list(dict.fromkeys(control["feature_set"])) == ["instantaneous", "traces", "both", "ngram1", "ngram2",
                                                            "ngram"]
    assert "Probe controls" in json.dumps(control_spec["title"])


def test_the_split_switch_changes_the_chart(runs):
    at = _page()
    radio = at.radio(key="structure_split")
    assert radio.options == ["within grammar (test)", "novel vocabulary", "deep embedding"]
    assert radio.value == "test"
    radio.set_value("deep")
    ok(at.run())
    spec, roles = _charts(at)[0]
    assert "deep embedding" in json.dumps(spec["title"])
    # The deep split holds the embedded structures only: its gaps are absent, not zero.
    assert set(roles["role"]) == {"overall", *split_roles()["deep"]}
    assert "prep" not in set(roles["role"]) and len(roles) == len(MODELS) * (len(split_roles()["deep"]) + 1)
    at.radio(key="structure_split").set_value("novel")
    ok(at.run())
    roles = _charts(at)[0][1]
    agent_det = roles[roles["role"] == "agent_det"].set_index("model")["mean"]
    assert agent_det["SPCN traces"] == pytest.approx(1.0) and agent_det["BiGRU"] < 0.8


def test_the_paper_table_holds_the_papers_numbers_beside_ours(runs):
    at = _page()
    table = _table(at, "paper").set_index("measure")
    assert list(table.columns) == ["paper", "ours", "seeds", "verdict", "source", "ours measured as"]
    table["ours"] = table["ours"].str.replace("\u00a0", " ")  # shown with no-break spaces

    def ours(feature_set, split="test", role="overall"):
        acc = probe_accuracy(runs, role=role, feature_set=feature_set, split=split)["accuracy"]
        return mean_std(acc.mean(), acc.std(ddof=1))

    inst = table.loc["Within grammar: probe on instantaneous activations"]
    assert (inst["paper"], inst["source"], inst["ours"], inst["seeds"]) == ("0.795", "[S]", ours("instantaneous"), 3)
    assert table.loc["Within grammar: probe on traces", "paper"] == "0.960"
    assert table.loc["Within grammar: probe on traces", "ours"] == ours("traces")
    assert table.loc["Novel vocabulary, agent determiners: SPCN", "paper"] == "1.000"
    # Every seed scores 1 exactly: the value alone, not "± 0.000".
    assert table.loc["Novel vocabulary, agent determiners: SPCN", "ours"] == "1.000"
    assert table.loc["Novel vocabulary, agent determiners: BiGRU", "paper"] == "0.759"
    assert table.loc["Novel vocabulary, agent determiners: BiGRU", "ours"] == ours("bigru", "novel", "agent_det")
    # A ratio is formed per seed, then averaged.
    t = probe_accuracy(runs, role="overall", feature_set="traces", split="test").set_index("run_id")["accuracy"]
    b = probe_accuracy(runs, role="overall", feature_set="bigru", split="test").set_index("run_id")["accuracy"]
    ratio = t / b
    assert table.loc["SPCN / BiGRU, overall", "ours"] == mean_std(ratio.mean(), ratio.std(ddof=1))
    assert table.loc["SPCN / BiGRU, overall", "paper"] == "≈ 0.96"
    assert table.loc["Structure-dependent roles: SPCN − BiGRU", "paper"] == "positive"
    assert "[U]" in table.loc["Deep embedding: SPCN overall", "source"]
    assert (table["seeds"] == 3).all()
    assert table.loc["Within grammar: n-gram window (no EMA)", "ours"] == ours("ngram")
    # A verdict is the stated rule applied to the per-seed differences; levels are not judged.
    inst = probe_accuracy(runs, role="overall", feature_set="instantaneous", split="test").set_index("run_id")
    delta = t - inst["accuracy"]
    assert table.loc["Within grammar: traces − instantaneous", "ours"] == mean_std(delta.mean(), delta.std(ddof=1))
    assert table.loc["Within grammar: traces − instantaneous", "verdict"] == VERDICT_WORDS[judge(spread(delta))]
    assert table.loc["Within grammar: traces − instantaneous", "verdict"] == "reproduced"
    assert table.loc["Novel vocabulary, agent determiners: SPCN − BiGRU", "verdict"] == "reproduced"
    assert table.loc["Within grammar: probe on traces", "verdict"] == ""  # a level, not a claim


def test_the_page_states_what_the_numbers_show(runs):
    at = _page()
    assert any(s.value == "What these runs show" for s in at.subheader)
    text = "\n".join(m.value for m in at.markdown)
    assert "**The rule.**" in text and "2 × the sample standard deviation" in text

    def overall(feature_set, split="test"):
        return probe_accuracy(runs, role="overall", feature_set=feature_set, split=split).set_index("run_id")["accuracy"]

    # The sentences carry the measured values: traces against the n-gram window on each split ...
    for split, words in (("test", "Within the grammar"), ("novel", "On novel words"), ("deep", "On deep embedding")):
        tr, ng = overall("traces", split), overall("ngram", split)
        d = tr - ng
        sentence = next(line for line in text.splitlines() if line.startswith(f"- {words}, the trace probe"))
        assert f"{tr.mean():.3f} vs {ng.mean():.3f}" in sentence and f"{d.mean():+.3f} ± {d.std(ddof=1):.3f}" in sentence
        assert ("above" if d.mean() > 0 else "below") in sentence or "level with" in sentence
    # ... the learning gain, and the selectivity under each control.
    gain = overall("traces") - overall("untrained/traces")
    assert f"{gain.mean():+.3f} ± {gain.std(ddof=1):.3f}" in text
    for control, keyed in (("control", "word-keyed"), ("control_prev", "previous word's category"),
                           ("control_pos", "position in the sentence")):
        sel = overall("traces") - overall(f"{control}/traces")
        line = next(line for line in text.splitlines() if line.startswith("- Control") and keyed in line)
        assert f"{sel.mean():+.3f} ± {sel.std(ddof=1):.3f}" in line
    # Each claim's verdict on one line (a badge of its colour first), its full sentence beside the rule.
    lines = [m.value for m in at.markdown if "-badge[" in m.value]
    assert len(lines) == 5 and all("reproduced" in b or "inconclusive" in b for b in lines)
    assert all("Paper:" in b and "Here:" in b and "× the threshold, 3 seeds" in b for b in lines)
    assert sum(line.startswith("- ") and "Δ =" in line and "threshold" in line for line in text.splitlines()) == 5


def test_the_probe_control_table_shows_selectivity(runs):
    at = _page()
    table = _table(at, "selectivity (word)")
    assert list(table["features"]) == ["instantaneous", "traces", "both", "ngram1", "ngram2", "ngram"]
    def overall(feature_set):
        return probe_accuracy(runs, role="overall", feature_set=feature_set, split="test").set_index("run_id")["accuracy"]

    for fs in ("traces", "ngram"):
        row = table[table["features"] == fs].iloc[0]
        for control, column in (("control", "selectivity (word)"), ("control_prev", "selectivity (word × prev. category)"),
                                ("control_pos", "selectivity (word × position)")):
            sel = overall(fs) - overall(f"{control}/{fs}")
            assert row[column].replace("\u00a0", " ") == mean_std(sel.mean(), sel.std(ddof=1))
    assert table.loc[table["features"] == "ngram", "untrained SPCN"].iloc[0] == ""  # the window has no untrained form


def test_every_chart_and_table_has_its_downloads(runs):
    at = _page()
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("SVG") == 2 and labels.count("PNG") == 2  # roles, probe controls
    assert labels.count("CSV") == labels.count("Markdown") == labels.count("LaTeX") == 3  # roles, paper, controls


def test_one_seed_draws_no_error_bars(runs):
    at = _page()
    at.multiselect(key="structure_runs").set_value(runs[:1])
    ok(at.run())
    roles = _charts(at)[0][1]
    assert (roles["n"] == 1).all() and roles["std"].isna().all()
    table = _table(at, "paper")
    assert not table["ours"].str.contains("±").any() and (table["seeds"] == 1).all()
    # One seed: no claim is judged (fewer than 3 seeds), and the table, the boxes and the sentences say so.
    assert set(table["verdict"]) == {"", "not judged: 1 seed"}
    assert any("not judged: 1 seed" in m.value for m in at.markdown)
    lines = [m.value for m in at.markdown if "-badge[" in m.value]
    assert len(lines) == 5 and all(line.startswith(":gray-badge[") and "not judged: 1 seed" in line for line in lines)
    assert all("1 seed of the 3 the rule needs" in line for line in lines)
    at.multiselect(key="structure_runs").set_value([])
    ok(at.run())
    assert any("Pick at least one run" in i.value for i in at.info)


def test_runs_of_two_configs_default_to_the_newest_and_warn_when_mixed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    older = make_structure_runs(home, (0, 1), config={"preset": "test", "n_sentences": 100})
    newer = make_structure_runs(home, (0, 1), config={"preset": "test", "n_sentences": 300})
    # Make the second pair the newest by start time, as a later launch would be.
    for rid in newer:
        status = home / "runs" / rid / "status.json"
        status.write_text(json.dumps({**json.loads(status.read_text()), "started": "2026-02-01T00:00:00+00:00"}))
    from store import ingest

    ingest(home)
    at = _page()
    assert sorted(at.multiselect(key="structure_runs").value) == sorted(newer)
    assert not at.warning
    at.multiselect(key="structure_runs").set_value(older + newer)
    ok(at.run())
    assert any("2 different configs" in w.value for w in at.warning)


def test_overview_links_to_the_structure_page(empty_home):
    at = open_page()
    links = {e.proto.label: e.proto.page for e in at.get("page_link")}
    assert links["Tested on: Structure"] == "structure"


def test_the_page_draws_runs_of_the_real_experiment(tmp_path, monkeypatch):
    # Two seeds of the experiment itself at tiny sizes: the page reads whatever it really writes.
    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    run_ids = make_structure_runs(home, (0, 1), real=True)
    at = _page()
    assert at.multiselect(key="structure_runs").value == run_ids
    (_, roles), (_, control) = _charts(at)
    assert set(roles["model"]) == MODELS and (roles["n"] == 2).all()
    assert set(control["condition"]) == CONDITIONS
    table = _table(at, "paper").set_index("measure")
    assert table.loc["Within grammar: probe on traces", "seeds"] == 2
    assert table.loc["Novel vocabulary, agent determiners: BiGRU", "seeds"] == 2
    # The page's verdicts (the store's per-run SQL) equal bench/structure.py's (the runs' summaries).
    summaries = [RunDir.for_id(r, home).read_result()["summary"] for r in run_ids]
    assert all(s["tuned_on"] == "dev" for s in summaries)
    measures = [claim_measures(s) for s in summaries]
    from_summaries = claim_verdicts({m: spread(v[m] for v in measures) for m in measures[0]})
    claims = {c.claim.what: c for c in from_summaries}
    rows = table.reset_index()
    for what, measure in (("Within grammar: traces − instantaneous", "spcn_minus_instantaneous"),
                          ("Structure-dependent roles: SPCN − BiGRU", "structural_gap"),
                          ("Novel vocabulary, agent determiners: SPCN − BiGRU", "novel_agent_det_gap")):
        c = next(c for c in from_summaries if c.claim.measure == measure)
        assert rows.set_index("measure").loc[what, "verdict"] == c.word, what
    assert len(claims) == 5
    at.radio(key="structure_split").set_value("deep")
    ok(at.run())
    assert "pobj_det" not in set(_charts(at)[0][1]["role"])


def test_the_charts_export_as_svg_and_png(runs):
    from ema_core.figures import chart_to_png, chart_to_svg
    from ema_core.studies.structure.figures import (probe_control_chart, probe_control_frame, role_accuracy_chart,
                                            role_accuracy_frame)
    from store.structure import probe_accuracy_stats, probe_control

    roles = role_accuracy_chart(role_accuracy_frame(probe_accuracy_stats(runs), "deep"), "deep embedding")
    control = probe_control_chart(probe_control_frame(probe_control(runs)))
    for chart in (roles, control):
        svg = chart_to_svg(chart)
        assert svg.lstrip().startswith("<svg") and "accuracy (held out)" in svg
        assert chart_to_png(chart, scale=1).startswith(b"\x89PNG")
    assert "emb_patient_noun" in chart_to_svg(roles) and "pobj_det" not in chart_to_svg(roles)
