"""Every query in store.queries against a store with known contents."""
import math

import pandas as pd
import pytest

from jobs.rundir import RunDir, run_id_for
from store import queries
from store.ingest import ingest, record_bench


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


def make_run(home, kind, config, seed, *, state="done", started=None, metrics=(), tables=None, summary=None):
    rd = RunDir.for_id(run_id_for(kind, config, seed), home)
    rd.create(kind, config, seed)
    rd.append_events([{"seq": i, "step": 100 * i, "metrics": m} for i, m in enumerate(metrics)])
    rd.write_status(state=state, started=started)
    if tables is not None:
        rd.write_result({"summary": summary or {}, "tables": tables})
    return rd.run_id


def probe_rows(acc_subject, acc_object):
    return {"probe_accuracy": [
        {"role": "subject", "feature_set": "traces", "split": "test", "accuracy": acc_subject},
        {"role": "object", "feature_set": "traces", "split": "test", "accuracy": acc_object},
    ]}


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """Two seeds of one probe config, one seed of another, two LM runs, one dilution run.

    Built once per module: the queries below only read it."""
    h = tmp_path_factory.mktemp("queries") / "home"
    ids = {
        "p8s0": make_run(h, "probe", {"width": 8, "lr": 0.1}, 0, started="2026-01-01T00:00:00+00:00",
                         metrics=[{"loss": 2.0, "acc": 0.1}, {"loss": 1.0, "acc": 0.5}, {"loss": 0.5}],
                         tables=probe_rows(0.8, 0.6), summary={"best": 0.8}),
        "p8s1": make_run(h, "probe", {"width": 8, "lr": 0.1}, 1, started="2026-01-02T00:00:00+00:00",
                         metrics=[{"loss": 3.0}, {"loss": 1.5}], tables=probe_rows(0.9, 0.7)),
        "p16s0": make_run(h, "probe", {"width": 16, "lr": 0.1}, 0, started="2026-01-03T00:00:00+00:00",
                          tables=probe_rows(0.95, 0.75)),
        "lm0": make_run(h, "lm", {"d": 32, "seed": 0}, 0, state="running", started="2026-01-04T00:00:00+00:00",
                        metrics=[{"train_loss": 4.0}],
                        tables={"lm_eval": [{"split": "val", "loss": 2.0, "ppl": 7.0, "bpb": 1.0},
                                            {"split": "test", "loss": 2.2, "ppl": 9.0, "bpb": 1.2}]}),
        "lm1": make_run(h, "lm", {"d": 32, "seed": 1}, 1, state="failed", started="2026-01-05T00:00:00+00:00",
                        tables={"lm_eval": [{"split": "val", "loss": 3.0, "ppl": 20.0, "bpb": 2.0}]}),
        "dil": make_run(h, "dilution", {"alphas": [0.5, 0.1]}, 0, started="2026-01-06T00:00:00+00:00",
                        tables={"dilution_accuracy": [
                            {"feature": "word", "lag": 1, "accuracy": 0.9, "chance": 0.01},
                            {"feature": "word", "lag": 4, "accuracy": 0.4, "chance": 0.01},
                            {"feature": "role", "lag": 1, "accuracy": 0.7, "chance": 0.05}]}),
    }
    assert ingest(h)["errors"] == []
    return h, ids


@pytest.fixture
def runs(populated, monkeypatch):
    h, ids = populated
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return ids


def test_list_runs(runs):
    df = queries.list_runs()
    assert list(df["run_id"]) == [runs[k] for k in ("dil", "lm1", "lm0", "p16s0", "p8s1", "p8s0")]  # newest first
    assert list(df.columns) == ["run_id", "kind", "seed", "status", "created_at", "started_at", "ended_at",
                                "code_version", "host", "message", "config", "summary"]
    assert set(queries.list_runs(kind="lm")["run_id"]) == {runs["lm0"], runs["lm1"]}
    assert list(queries.list_runs(status="running")["run_id"]) == [runs["lm0"]]
    assert set(queries.list_runs(status=["running", "failed"])["run_id"]) == {runs["lm0"], runs["lm1"]}
    assert list(queries.list_runs(kind="probe", limit=1)["run_id"]) == [runs["p16s0"]]
    assert list(queries.list_runs(run_ids=[runs["p8s0"]])["run_id"]) == [runs["p8s0"]]
    assert queries.list_runs(kind="nope").empty


def test_user_values_never_become_sql(runs):
    assert queries.list_runs(kind="probe' OR '1'='1").empty
    assert queries.metric_series(["x' OR '1'='1"], "loss").empty
    assert queries.probe_accuracy(role="subject'; DROP TABLE runs; --").empty
    assert len(queries.list_runs()) == 6


def test_run_detail(runs):
    d = queries.run_detail(runs["p8s0"])
    assert d["kind"] == "probe" and d["seed"] == 0 and d["status"] == "done"
    assert d["config"] == {"width": 8, "lr": 0.1} and d["summary"] == {"best": 0.8}
    assert d["metric_keys"] == ["acc", "loss"] and d["metric_rows"] == 5
    assert d["result_rows"] == {"dilution_accuracy": 0, "probe_accuracy": 2, "lm_eval": 0}
    assert d["result_ingested"] is True and d["bad_lines"] == 0
    assert queries.run_detail("no-such-run") is None


def test_metric_keys(runs):
    assert queries.metric_keys() == ["acc", "loss", "train_loss"]
    assert queries.metric_keys([runs["p8s1"]]) == ["loss"]
    assert queries.metric_keys(runs["lm0"]) == ["train_loss"]
    assert queries.metric_keys([]) == []


def test_metric_series(runs):
    df = queries.metric_series([runs["p8s0"], runs["p8s1"]], "loss")
    assert list(df.columns) == ["run_id", "seq", "step", "value"]
    one = df[df.run_id == runs["p8s0"]]
    assert list(one["step"]) == [0, 100, 200] and list(one["value"]) == [2.0, 1.0, 0.5]
    assert list(df[df.run_id == runs["p8s1"]]["value"]) == [3.0, 1.5]
    assert list(queries.metric_series([runs["p8s0"]], "acc")["value"]) == [0.1, 0.5]
    assert queries.metric_series([runs["p8s0"]], "nope").empty


def test_final_metrics(runs):
    df = queries.final_metrics([runs["p8s0"]])
    assert df[["key", "step", "value"]].values.tolist() == [["acc", 100, 0.5], ["loss", 200, 0.5]]
    assert list(queries.final_metrics(keys=["train_loss"])["value"]) == [4.0]


def test_result_tables(runs):
    df = queries.probe_accuracy([runs["p8s0"]])
    assert list(df.columns) == ["run_id", "seed", "role", "feature_set", "split", "accuracy"]
    assert df[["role", "accuracy"]].values.tolist() == [["object", 0.6], ["subject", 0.8]]
    assert len(queries.probe_accuracy()) == 6
    assert sorted(queries.probe_accuracy(role="subject")["accuracy"]) == [0.8, 0.9, 0.95]
    assert queries.probe_accuracy(split="train").empty

    lm = queries.lm_eval()
    assert list(lm.columns) == ["run_id", "seed", "split", "loss", "ppl", "bpb"]
    assert len(lm) == 3 and sorted(queries.lm_eval(split="val")["loss"]) == [2.0, 3.0]

    dil = queries.dilution_accuracy()
    assert list(dil.columns) == ["run_id", "seed", "feature", "lag", "accuracy", "chance"]
    assert dil[["feature", "lag", "accuracy"]].values.tolist() == [["role", 1, 0.7], ["word", 1, 0.9], ["word", 4, 0.4]]
    assert list(queries.dilution_accuracy(feature="word")["lag"]) == [1, 4]


def test_bench_figures(home):
    when = pd.Timestamp("2026-01-01").to_pydatetime()
    record_bench("scan", {"numba_ns": 0.30, "torch_ns": 2.0}, machine={"cores": 2}, command="old", measured_at=when)
    record_bench("scan", {"numba_ns": 0.27}, machine={"cores": 2}, command="new")
    latest = queries.bench_figures()
    assert dict(zip(latest["key"], latest["value"])) == {"numba_ns": 0.27, "torch_ns": 2.0}
    assert len(queries.bench_figures(latest=False)) == 3
    assert queries.bench_figures(bench="other").empty


def test_store_summary(runs):
    s = queries.store_summary()
    assert s["runs"] == 6 and s["metric_rows"] == 5 + 2 + 1
    assert s["results"] == {"dilution_accuracy": 3, "probe_accuracy": 6, "lm_eval": 3, "bench_figures": 0}
    by = {(r.kind, r.status): r.runs for r in s["by_kind_status"].itertuples()}
    assert by == {("dilution", "done"): 1, ("lm", "failed"): 1, ("lm", "running"): 1, ("probe", "done"): 3}


def test_empty_store_gives_empty_frames_with_columns(home):
    assert list(queries.probe_accuracy().columns) == ["run_id", "seed", "role", "feature_set", "split", "accuracy"]
    assert queries.metric_keys() == [] and queries.run_detail("x") is None
    g = queries.grouped("lm_eval")
    assert g.empty and "loss_mean" in g.columns
    assert not home.exists()


def test_grouped_mean_and_std_across_seeds(runs):
    g = queries.grouped("probe_accuracy", [runs["p8s0"], runs["p8s1"], runs["p16s0"]])
    # width differs between the two groups and becomes a column; lr is the same everywhere and does not.
    assert list(g.columns) == ["config_id", "kind", "width", "feature_set", "role", "split", "n", "seeds",
                               "accuracy_mean", "accuracy_std"]
    two = g[(g.width == 8) & (g.role == "subject")].iloc[0]
    assert two["n"] == 2 and two["seeds"] == "0,1"
    assert two["accuracy_mean"] == pytest.approx(0.85)
    assert two["accuracy_std"] == pytest.approx(math.sqrt(((0.8 - 0.85) ** 2 + (0.9 - 0.85) ** 2) / 1))  # ddof=1
    obj = g[(g.width == 8) & (g.role == "object")].iloc[0]
    assert obj["accuracy_mean"] == pytest.approx(0.65) and obj["accuracy_std"] == pytest.approx(0.0707107)
    one = g[(g.width == 16) & (g.role == "subject")].iloc[0]
    assert one["n"] == 1 and one["accuracy_mean"] == pytest.approx(0.95) and pd.isna(one["accuracy_std"])
    assert len(g) == 4


def test_grouped_ignores_a_seed_inside_the_config(runs):
    g = queries.grouped("lm_eval")
    val = g[g.split == "val"].iloc[0]
    assert val["n"] == 2 and val["loss_mean"] == pytest.approx(2.5) and val["ppl_mean"] == pytest.approx(13.5)
    assert val["bpb_std"] == pytest.approx(math.sqrt(0.5))
    assert g[g.split == "test"].iloc[0]["n"] == 1


def test_grouped_final_metrics_and_dilution(runs):
    g = queries.grouped("metrics_final", [runs["p8s0"], runs["p8s1"]])
    loss = g[g.key == "loss"].iloc[0]
    assert loss["n"] == 2 and loss["value_mean"] == pytest.approx(1.0)  # last values 0.5 and 1.5
    d = queries.grouped("dilution_accuracy")
    assert d[["feature", "lag", "n"]].values.tolist() == [["role", 1, 1], ["word", 1, 1], ["word", 4, 1]]


def test_grouped_rejects_unknown_tables(runs):
    with pytest.raises(ValueError, match="cannot group 'runs'"):
        queries.grouped("runs")


def test_metric_series_keeps_the_newest_logging_of_a_repeated_step(tmp_path, monkeypatch):
    # a resumed run logs the steps after its last checkpoint again, with new seq numbers
    from jobs.rundir import RunDir
    from store import ingest, metric_series

    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    rd = RunDir.for_id("dilution-resumed-s0")
    rd.create("dilution", {"x": 1}, 0)
    rd.append_events([{"seq": i, "step": s, "metrics": {"loss": v}}
                      for i, (s, v) in enumerate([(1, 3.0), (2, 2.0), (3, 9.9), (2, 2.0), (3, 1.0)])])
    ingest()
    series = metric_series(["dilution-resumed-s0"], "loss")
    assert list(series["step"]) == [1, 2, 3]
    assert list(series["value"]) == [3.0, 2.0, 1.0]


# -- the structure experiment -------------------------------------------------------------------------

def _structure_rows(inst, traces, bigru, det_traces, det_bigru, control, untrained):
    """probe_accuracy rows of one structure run with the numbers the tests below check."""
    rows = [
        {"role": "overall", "feature_set": "instantaneous", "split": "test", "accuracy": inst},
        {"role": "overall", "feature_set": "traces", "split": "test", "accuracy": traces},
        {"role": "overall", "feature_set": "bigru", "split": "test", "accuracy": bigru},
        {"role": "agent_det", "feature_set": "traces", "split": "test", "accuracy": det_traces},
        {"role": "agent_det", "feature_set": "bigru", "split": "test", "accuracy": det_bigru},
        # scored by SPCN alone: left out of the SPCN-vs-BiGRU mean over structure-dependent roles
        {"role": "patient_det", "feature_set": "traces", "split": "test", "accuracy": 0.1},
        {"role": "prep", "feature_set": "traces", "split": "test", "accuracy": 0.99},  # lexical
        {"role": "prep", "feature_set": "bigru", "split": "test", "accuracy": 0.2},
        {"role": "agent_det", "feature_set": "traces", "split": "novel", "accuracy": 1.0},
        {"role": "agent_det", "feature_set": "bigru", "split": "novel", "accuracy": det_bigru - 0.1},
        {"role": "overall", "feature_set": "traces", "split": "deep", "accuracy": traces - 0.1},
        {"role": "overall", "feature_set": "control/traces", "split": "test", "accuracy": control},
        {"role": "overall", "feature_set": "untrained/traces", "split": "test", "accuracy": untrained},
        {"role": "overall", "feature_set": "untrained/traces", "split": "novel", "accuracy": 0.0},
    ]
    return {"probe_accuracy": rows}


@pytest.fixture(scope="module")
def structure_runs(tmp_path_factory):
    h = tmp_path_factory.mktemp("structure") / "home"
    cfg = {"n_sentences": 100}
    ids = [
        make_run(h, "structure", {**cfg, "seed": 0}, 0, tables=_structure_rows(0.8, 0.96, 1.0, 0.9, 0.8, 0.3, 0.7)),
        make_run(h, "structure", {**cfg, "seed": 1}, 1, tables=_structure_rows(0.7, 0.90, 0.9, 0.7, 0.8, 0.4, 0.5)),
    ]
    assert ingest(h)["errors"] == []
    return h, ids


def test_probe_accuracy_stats_across_seeds(structure_runs):
    h, ids = structure_runs
    df = queries.probe_accuracy_stats(ids, home=h)
    assert list(df.columns) == ["role", "feature_set", "split", "n", "seeds", "accuracy_mean", "accuracy_std"]
    row = df[(df.role == "overall") & (df.feature_set == "traces") & (df.split == "test")].iloc[0]
    assert row["n"] == 2 and row["seeds"] == "0,1"
    assert row["accuracy_mean"] == pytest.approx(0.93) and row["accuracy_std"] == pytest.approx(math.sqrt(2) * 0.03)
    assert set(queries.probe_accuracy_stats(ids, split="deep", home=h)["role"]) == {"overall"}
    one = queries.probe_accuracy_stats(ids[:1], split="novel", home=h)
    assert (one["n"] == 1).all() and one["accuracy_std"].isna().all() and (one["seeds"] == "0").all()
    assert queries.probe_accuracy_stats([], home=h).empty


def test_structure_headlines_form_ratios_per_seed(structure_runs):
    h, ids = structure_runs
    df = queries.structure_headlines(ids, ["agent_det", "patient_det"], home=h).set_index("measure")
    assert list(df.columns) == ["n", "seeds", "value_mean", "value_std"]
    assert df.loc["within_instantaneous", "value_mean"] == pytest.approx(0.75)
    assert df.loc["within_traces", "value_mean"] == pytest.approx(0.93)
    # 0.96 / 1.0 and 0.90 / 0.9: the mean of the ratios, not the ratio of the means (0.93 / 0.95)
    assert df.loc["spcn_over_bigru", "value_mean"] == pytest.approx(0.98)
    assert df.loc["spcn_over_bigru", "value_std"] == pytest.approx(math.sqrt(2) * 0.02)
    # Only agent_det was scored by both: patient_det (SPCN alone) and prep (lexical) stay out.
    assert df.loc["structural_spcn", "value_mean"] == pytest.approx(0.8)
    assert df.loc["structural_bigru", "value_mean"] == pytest.approx(0.8)
    assert df.loc["structural_gap", "value_mean"] == pytest.approx(0.0)
    assert df.loc["structural_gap", "value_std"] == pytest.approx(math.sqrt(2) * 0.1)
    # On novel vocabulary: SPCN 1.0 on agent_det in both seeds, the BiGRU 0.7 (0.8 − 0.1).
    assert df.loc["novel_structural_spcn", "value_mean"] == pytest.approx(1.0)
    assert df.loc["novel_structural_gap", "value_mean"] == pytest.approx(0.3)
    assert df.loc["novel_agent_det_spcn", "value_mean"] == pytest.approx(1.0)
    assert df.loc["novel_agent_det_bigru", "value_mean"] == pytest.approx(0.7)
    assert df.loc["deep_overall_spcn", "value_mean"] == pytest.approx(0.83)
    assert "deep_overall_bigru" not in df.index and "novel_overall_spcn" not in df.index  # not in these runs
    assert (df["n"] == 2).all() and (df["seeds"] == "0,1").all()
    # The SPCN of the comparison is a parameter; a feature set with no rows gives no SPCN measures.
    other = queries.structure_headlines(ids, ["agent_det"], spcn="both", home=h)
    assert set(other["measure"]) == {"within_instantaneous", "within_traces", "novel_agent_det_bigru"}


def test_structure_queries_skip_missing_accuracies(tmp_path):
    h = tmp_path / "home"
    rows = [{"role": "overall", "feature_set": "traces", "split": "deep", "accuracy": float("nan")},
            {"role": "agent_det", "feature_set": "traces", "split": "deep", "accuracy": None},
            {"role": "end", "feature_set": "traces", "split": "deep", "accuracy": 0.5}]
    run_id = make_run(h, "structure", {"seed": 0}, 0, tables={"probe_accuracy": rows})
    assert ingest(h)["errors"] == []
    assert queries.probe_accuracy_stats(run_id, home=h)["role"].tolist() == ["end"]
    assert queries.structure_headlines(run_id, ["agent_det"], home=h).empty


def test_probe_control_selectivity_per_seed(structure_runs):
    h, ids = structure_runs
    df = queries.probe_control(ids, home=h)
    assert list(df.columns) == ["feature_set", "measure", "n", "seeds", "value_mean", "value_std"]
    # instantaneous and bigru have no control or untrained counterpart: not control rows
    assert set(df["feature_set"]) == {"traces"}
    v = df.set_index("measure")["value_mean"]
    assert v["trained"] == pytest.approx(0.93) and v["control"] == pytest.approx(0.35)
    assert v["untrained"] == pytest.approx(0.6)
    assert v["selectivity"] == pytest.approx(((0.96 - 0.3) + (0.90 - 0.4)) / 2)
    assert v["training_gain"] == pytest.approx(((0.96 - 0.7) + (0.90 - 0.5)) / 2)
    assert queries.probe_control(ids, split="novel", home=h).set_index("measure")["value_mean"]["untrained"] == 0.0


def test_structure_queries_on_an_empty_store(home):
    assert queries.probe_accuracy_stats().empty
    assert list(queries.structure_headlines(structural_roles=["agent_det"]).columns) == [
        "measure", "n", "seeds", "value_mean", "value_std"]
    assert queries.probe_control().empty


def test_config_id_ignores_the_seed():
    a = queries.config_id("structure", {"n": 1, "seed": 0})
    assert a == queries.config_id("structure", {"n": 1, "seed": 7}) and len(a) == 8
    assert a != queries.config_id("structure", {"n": 2, "seed": 0})
    assert a != queries.config_id("probe", {"n": 1, "seed": 0})
