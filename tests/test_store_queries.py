"""Every query of the store (store.queries and each study's file) against a store with known contents."""
import math

import pandas as pd
import pytest

from ema_core.rundir import RunDir, run_id_for
from store import content, dilution, queries, structure
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
        "lm0": make_run(h, "content", {"d": 32, "seed": 0}, 0, state="running", started="2026-01-04T00:00:00+00:00",
                        metrics=[{"train_loss": 4.0}],
                        tables={"lm_eval": [{"split": "val", "loss": 2.0, "ppl": 7.0, "bpb": 1.0},
                                            {"split": "test", "loss": 2.2, "ppl": 9.0, "bpb": 1.2}]}),
        "lm1": make_run(h, "content", {"d": 32, "seed": 1}, 1, state="failed", started="2026-01-05T00:00:00+00:00",
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
    assert set(queries.list_runs(kind="content")["run_id"]) == {runs["lm0"], runs["lm1"]}
    assert list(queries.list_runs(status="running")["run_id"]) == [runs["lm0"]]
    assert set(queries.list_runs(status=["running", "failed"])["run_id"]) == {runs["lm0"], runs["lm1"]}
    assert list(queries.list_runs(kind="probe", limit=1)["run_id"]) == [runs["p16s0"]]
    assert list(queries.list_runs(run_ids=[runs["p8s0"]])["run_id"]) == [runs["p8s0"]]
    assert queries.list_runs(kind="nope").empty


def test_user_values_never_become_sql(runs):
    assert queries.list_runs(kind="probe' OR '1'='1").empty
    assert queries.metric_series(["x' OR '1'='1"], "loss").empty
    assert structure.probe_accuracy(role="subject'; DROP TABLE runs; --").empty
    assert len(queries.list_runs()) == 6


def test_run_detail(runs):
    d = queries.run_detail(runs["p8s0"])
    assert d["kind"] == "probe" and d["seed"] == 0 and d["status"] == "done"
    assert d["config"] == {"width": 8, "lr": 0.1} and d["summary"] == {"best": 0.8}
    assert d["metric_keys"] == ["acc", "loss"] and d["metric_rows"] == 5
    assert d["result_rows"] == {"dilution_accuracy": 0, "probe_accuracy": 2, "lm_eval": 0, "boundary_accuracy": 0,
                                 "boundary_dev_curve": 0, "boundary_recall_state": 0, "lm_token_classes": 0,
                                 "depth_results": 0, "depth_weights": 0, "depth_weight_steps": 0,
                                 "depth_remix": 0}
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
    df = structure.probe_accuracy([runs["p8s0"]])
    assert list(df.columns) == ["run_id", "seed", "role", "feature_set", "split", "accuracy"]
    assert df[["role", "accuracy"]].values.tolist() == [["object", 0.6], ["subject", 0.8]]
    assert len(structure.probe_accuracy()) == 6
    assert sorted(structure.probe_accuracy(role="subject")["accuracy"]) == [0.8, 0.9, 0.95]
    assert structure.probe_accuracy(split="train").empty

    lm = content.lm_eval()
    assert list(lm.columns) == ["run_id", "seed", "split", "loss", "ppl", "bpb"]
    assert len(lm) == 3 and sorted(content.lm_eval(split="val")["loss"]) == [2.0, 3.0]

    dil = dilution.dilution_accuracy()
    assert list(dil.columns) == ["run_id", "seed", "feature", "lag", "accuracy", "chance"]
    assert dil[["feature", "lag", "accuracy"]].values.tolist() == [["role", 1, 0.7], ["word", 1, 0.9], ["word", 4, 0.4]]
    assert list(dilution.dilution_accuracy(feature="word")["lag"]) == [1, 4]


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
    assert s["results"] == {"dilution_accuracy": 3, "probe_accuracy": 6, "lm_eval": 3, "boundary_accuracy": 0,
                            "boundary_dev_curve": 0, "boundary_recall_state": 0, "lm_token_classes": 0,
                            "depth_results": 0, "depth_weights": 0, "depth_weight_steps": 0, "depth_remix": 0,
                            "bench_figures": 0}
    by = {(r.kind, r.status): r.runs for r in s["by_kind_status"].itertuples()}
    assert by == {("dilution", "done"): 1, ("content", "failed"): 1, ("content", "running"): 1, ("probe", "done"): 3}


def test_empty_store_gives_empty_frames_with_columns(home):
    assert list(structure.probe_accuracy().columns) == ["run_id", "seed", "role", "feature_set", "split", "accuracy"]
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
    from ema_core.rundir import RunDir
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
    df = structure.probe_accuracy_stats(ids, home=h)
    assert list(df.columns) == ["role", "feature_set", "split", "n", "seeds", "accuracy_mean", "accuracy_std"]
    row = df[(df.role == "overall") & (df.feature_set == "traces") & (df.split == "test")].iloc[0]
    assert row["n"] == 2 and row["seeds"] == "0,1"
    assert row["accuracy_mean"] == pytest.approx(0.93) and row["accuracy_std"] == pytest.approx(math.sqrt(2) * 0.03)
    assert set(structure.probe_accuracy_stats(ids, split="deep", home=h)["role"]) == {"overall"}
    one = structure.probe_accuracy_stats(ids[:1], split="novel", home=h)
    assert (one["n"] == 1).all() and one["accuracy_std"].isna().all() and (one["seeds"] == "0").all()
    assert structure.probe_accuracy_stats([], home=h).empty


def test_structure_headlines_form_ratios_per_seed(structure_runs):
    h, ids = structure_runs
    df = structure.structure_headlines(ids, ["agent_det", "patient_det"], home=h).set_index("measure")
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
    other = structure.structure_headlines(ids, ["agent_det"], spcn="both", home=h)
    assert set(other["measure"]) == {"within_instantaneous", "within_traces", "novel_agent_det_bigru"}


def test_structure_queries_skip_missing_accuracies(tmp_path):
    h = tmp_path / "home"
    rows = [{"role": "overall", "feature_set": "traces", "split": "deep", "accuracy": float("nan")},
            {"role": "agent_det", "feature_set": "traces", "split": "deep", "accuracy": None},
            {"role": "end", "feature_set": "traces", "split": "deep", "accuracy": 0.5}]
    run_id = make_run(h, "structure", {"seed": 0}, 0, tables={"probe_accuracy": rows})
    assert ingest(h)["errors"] == []
    assert structure.probe_accuracy_stats(run_id, home=h)["role"].tolist() == ["end"]
    assert structure.structure_headlines(run_id, ["agent_det"], home=h).empty


def test_probe_control_selectivity_per_seed(structure_runs):
    h, ids = structure_runs
    df = structure.probe_control(ids, home=h)
    assert list(df.columns) == ["feature_set", "measure", "n", "seeds", "value_mean", "value_std"]
    # instantaneous and bigru have no control or untrained counterpart: not control rows
    assert set(df["feature_set"]) == {"traces"}
    v = df.set_index("measure")["value_mean"]
    assert v["trained"] == pytest.approx(0.93) and v["control"] == pytest.approx(0.35)
    assert v["untrained"] == pytest.approx(0.6)
    assert v["selectivity"] == pytest.approx(((0.96 - 0.3) + (0.90 - 0.4)) / 2)
    assert v["training_gain"] == pytest.approx(((0.96 - 0.7) + (0.90 - 0.5)) / 2)
    assert structure.probe_control(ids, split="novel", home=h).set_index("measure")["value_mean"]["untrained"] == 0.0


def test_structure_queries_on_an_empty_store(home):
    assert structure.probe_accuracy_stats().empty
    assert list(structure.structure_headlines(structural_roles=["agent_det"]).columns) == [
        "measure", "n", "seeds", "value_mean", "value_std"]
    assert structure.probe_control().empty


def test_config_id_ignores_the_seed():
    a = queries.config_id("structure", {"n": 1, "seed": 0})
    assert a == queries.config_id("structure", {"n": 1, "seed": 7}) and len(a) == 8
    assert a != queries.config_id("structure", {"n": 2, "seed": 0})
    assert a != queries.config_id("probe", {"n": 1, "seed": 0})


# -- the content experiment ---------------------------------------------------------------------------

def _lm_run(h, seed, model, predictor, attn_input, loss, ppl, bpb, params, steps=4, curve=(), lr=None, used=None):
    config = {"model": model, "predictor": predictor, "attn_input": attn_input, "size": "tiny", "corpus": "austen",
              "val_doc": "persuasion", "steps": steps, "batch": 2, "seq_len": 8, "vocab_size": 512,
              "device": "cpu", "threads": seed + 1, "seed": seed}  # threads: a setting that changes no number
    if lr is not None:
        config["train"] = {"warmup": 2, "lr": lr}
    summary = {"model": model, "params": params, "tokens": 16 * steps, "val_loss": loss, "val_ppl": ppl,
               "val_bpb": bpb, "corpus": "austen", "vocab_size": 500, "tokens_per_s": 100.0, "seconds": 1.0,
               "matched_to": "spen/linear/state" if model == "gpt" else None}
    if used is not None:  # the rate a run at train.lr=auto records having trained at
        summary.update(lr=used, lr_auto=True)
    rd = RunDir.for_id(run_id_for("content", config, seed), h)
    rd.create("content", config, seed)
    events = [{"seq": i, "step": step, "metrics": {"val/loss": v, "train/loss": v + 1}}
              for i, (step, v) in enumerate(curve)]
    rd.append_events(events)
    rd.write_status(state="done", started=f"2026-02-0{1 + (steps > 4)}T00:00:00+00:00")
    rows = [{"split": "val", "loss": loss, "ppl": ppl, "bpb": bpb}]
    rd.write_result({"summary": summary, "tables": {"lm_eval": rows}})
    return rd.run_id


@pytest.fixture(scope="module")
def lm_store(tmp_path_factory):
    """Two seeds of GPT, SPEN linear, SPEN softmax attention (state) and its raw-token control; one
    GPT sized to the softmax SPEN (seed 0 only); one SPEN of a longer run that has no GPT."""
    h = tmp_path_factory.mktemp("content") / "home"
    ids = {}
    for seed, d in ((0, 0.0), (1, 0.2)):
        # The GPT logs step 2 twice (a resumed run): its newest value counts.
        ids[f"gpt{seed}"] = _lm_run(h, seed, "gpt", "linear", "state", 2.0 + d, 10 + 2 * (seed), 1.0 + d / 2, 1000,
                                    curve=[(1, 3.0), (2, 9.9), (2, 2.5 + d), (4, 2.0 + d)])
        ids[f"lin{seed}"] = _lm_run(h, seed, "spen", "linear", "state", 3.0 + d, 80 + 10 * seed, 2.0 + d, 990,
                                    curve=[(1, 4.0), (2, 3.5), (4, 3.0 + d)])
        ids[f"soft{seed}"] = _lm_run(h, seed, "spen", "softmax_attention", "state", 3.1, 85, 2.1, 1100)
        ids[f"tok{seed}"] = _lm_run(h, seed, "spen", "softmax_attention", "tokens", 2.5 + d, 40 + 10 * seed, 1.5, 1100)
    ids["gpt_soft0"] = _lm_run(h, 0, "gpt", "softmax_attention", "state", 2.1, 17, 1.05, 1100)
    ids["long0"] = _lm_run(h, 0, "spen", "linear", "state", 2.9, 70, 1.9, 990, steps=8)
    assert ingest(h)["errors"] == []
    return h, ids


def test_lm_runs_flatten_config_and_summary(lm_store):
    h, ids = lm_store
    df = content.lm_runs(home=h)
    assert len(df) == 10 and df["run_id"].iloc[0] == ids["long0"]  # newest first
    row = df.set_index("run_id").loc[ids["lin1"]]
    assert (row["model"], row["predictor"], row["attn_input"], row["size"], row["corpus"]) == (
        "spen", "linear", "state", "tiny", "austen")
    assert (row["steps"], row["params"], row["tokens"], row["tokens_per_step"]) == (4, 990, 64, 16.0)
    assert row["vocab_size"] == 500  # the tokenizer's, from the summary
    assert row["val_ppl"] == 90 and row["seed"] == 1
    # Runs that differ in variant, seed and threads share a group; a longer run is another.
    groups = df.set_index("run_id")["group_id"]
    assert groups[ids["gpt0"]] == groups[ids["tok1"]] == groups[ids["gpt_soft0"]] != groups[ids["long0"]]
    assert '"seed"' not in row["comparable"] and '"model"' not in row["comparable"] and '"steps":4' in row["comparable"]
    assert content.lm_runs(ids["gpt0"], home=h)["run_id"].tolist() == [ids["gpt0"]]
    assert content.lm_runs(status="running", home=h).empty
    assert content.lm_runs(home=h / "nothing").empty


def test_runs_at_train_lr_auto_compare_and_each_shows_the_rate_it_recorded(tmp_path):
    h = tmp_path / "home"
    ids = {"gpt": _lm_run(h, 0, "gpt", "linear", "state", 2.0, 10, 1.0, 1000, lr="auto", used=3e-3),
           "spen": _lm_run(h, 0, "spen", "linear", "state", 3.0, 80, 2.0, 990, lr="auto", used=1e-2),
           # the same variant and seed at a rate set by hand: not a seed of the above
           "spen_set": _lm_run(h, 0, "spen", "linear", "state", 3.5, 90, 2.2, 990, lr=3e-3),
           # both models at one rate set by hand: they compare with each other
           "spen_1e-3": _lm_run(h, 0, "spen", "linear", "state", 3.6, 91, 2.3, 990, lr=1e-3),
           "gpt_1e-3": _lm_run(h, 0, "gpt", "linear", "state", 2.6, 13, 1.3, 1000, lr=1e-3),
           # a run stored before "auto" was kept holds the number it trained at: it groups as that number
           # (with a GPT at 1e-2 too, never with the runs at "auto")
           "spen_older": _lm_run(h, 1, "spen", "linear", "state", 3.1, 81, 2.1, 990, lr=1e-2),
           "gpt_older": _lm_run(h, 1, "gpt", "linear", "state", 2.1, 11, 1.1, 1000, lr=3e-3)}
    assert ingest(h)["errors"] == []
    runs = content.lm_runs(home=h).set_index("run_id")
    groups = runs["group_id"]
    assert groups[ids["gpt"]] == groups[ids["spen"]]
    assert groups[ids["spen_set"]] not in (groups[ids["spen"]], groups[ids["gpt_1e-3"]])
    assert groups[ids["spen_1e-3"]] == groups[ids["gpt_1e-3"]] != groups[ids["spen"]]
    assert groups[ids["spen_older"]] not in (groups[ids["spen"]], groups[ids["gpt_older"]])
    assert '"lr":"auto"' in runs.loc[ids["spen"], "comparable"]
    # The rate each trained at: the recorded one for "auto", the config's number otherwise.
    assert runs.loc[[ids["gpt"], ids["spen"], ids["spen_set"], ids["spen_older"]], "lr"].tolist() == [
        3e-3, 1e-2, 3e-3, 1e-2]
    # Within the "auto" group SPEN pairs with the GPT at its own rate.
    stats = content.lm_final_stats([ids["gpt"], ids["spen"]], home=h).set_index("model")
    assert stats.loc["spen", "pairs"] == 1 and stats.loc["spen", "ppl_ratio_mean"] == pytest.approx(8.0)


def test_lm_final_losses_are_the_verdicts_rows(lm_store):
    h, ids = lm_store
    df = content.lm_final_losses(home=h)
    assert list(df.columns) == ["run_id", "group_id", "model", "predictor", "attn_input", "seed", "loss"]
    row = df.set_index("run_id").loc[ids["tok1"]]
    assert (row["model"], row["predictor"], row["attn_input"], row["seed"], row["loss"]) == (
        "spen", "softmax_attention", "tokens", 1, pytest.approx(2.7))
    groups = df.set_index("run_id")["group_id"]
    assert groups[ids["lin0"]] == groups[ids["gpt1"]] != groups[ids["long0"]]  # as lm_runs groups them
    assert groups.to_dict() == content.lm_runs(home=h).set_index("run_id")["group_id"].to_dict()
    assert content.lm_final_losses(ids["gpt0"], split="test", home=h).empty


def test_lm_curves_count_tokens_and_keep_the_newest_logging(lm_store):
    h, ids = lm_store
    df = content.lm_curves([ids["gpt0"], ids["gpt1"], ids["lin0"]], home=h)
    assert list(df.columns) == ["run_id", "seed", "model", "predictor", "attn_input", "step", "tokens", "value"]
    assert df["model"].tolist()[:3] == ["gpt"] * 3  # GPT first
    gpt0 = df[df["run_id"] == ids["gpt0"]]
    assert gpt0["step"].tolist() == [1, 2, 4] and gpt0["value"].tolist() == [3.0, 2.5, 2.0]
    assert gpt0["tokens"].tolist() == [16.0, 32.0, 64.0]
    assert set(content.lm_curves(ids["lin0"], "train/loss", home=h)["value"]) == {5.0, 4.5, 4.0}
    assert content.lm_curves([], home=h).empty


def test_lm_final_stats_pair_each_spen_with_its_gpt(lm_store):
    h, ids = lm_store
    picked = [v for k, v in ids.items() if k != "long0"]
    df = content.lm_final_stats(picked, home=h)
    assert [tuple(r) for r in df[["model", "predictor", "attn_input"]].itertuples(index=False)] == [
        ("gpt", "linear", "state"), ("gpt", "softmax_attention", "state"), ("spen", "linear", "state"),
        ("spen", "softmax_attention", "state"), ("spen", "softmax_attention", "tokens")]
    df = df.set_index(["model", "predictor", "attn_input"])
    gpt = df.loc[("gpt", "linear", "state")]
    assert (gpt["n"], gpt["seeds"], gpt["params"]) == (2, "0,1", 1000)
    assert gpt["ppl_mean"] == pytest.approx(11) and gpt["ppl_std"] == pytest.approx(math.sqrt(2))
    assert gpt["pairs"] == 0 and pd.isna(gpt["ppl_ratio_mean"])
    lin = df.loc[("spen", "linear", "state")]
    # Per seed, then averaged: 80/10 and 90/12, with the GPT of the same seed.
    assert lin["pairs"] == 2 and lin["ppl_ratio_mean"] == pytest.approx((8 + 7.5) / 2)
    assert lin["ppl_ratio_std"] == pytest.approx(0.5 / math.sqrt(2))
    assert lin["bpb_ratio_mean"] == pytest.approx((2.0 / 1.0 + 2.2 / 1.1) / 2)
    assert lin["loss_mean"] == pytest.approx(3.1) and lin["loss_std"] == pytest.approx(math.sqrt(2) * 0.1)
    # Seed 0 has a GPT sized to the softmax SPEN: it is preferred; seed 1 falls back to the linear one's.
    soft = df.loc[("spen", "softmax_attention", "state")]
    assert soft["ppl_ratio_mean"] == pytest.approx((85 / 17 + 85 / 12) / 2)
    # A run without a GPT of its config and seed has no ratio.
    alone = content.lm_final_stats([ids["long0"], ids["gpt0"]], home=h).set_index("model").loc["spen"]
    assert alone["n"] == 1 and alone["pairs"] == 0 and pd.isna(alone["ppl_ratio_mean"]) and pd.isna(alone["loss_std"])
    assert content.lm_final_stats(picked, split="test", home=h).empty


def test_lm_ablation_spreads_per_seed(lm_store):
    h, ids = lm_store
    picked = [v for k, v in ids.items() if k != "long0"]
    df = content.lm_ablation(picked, home=h)
    assert list(df.columns) == ["measure", "n", "seeds", "value_mean", "value_std"]
    df = df.set_index("measure")
    # state readers: linear 3.0 / 3.2, softmax 3.1 / 3.1 → spreads 0.1 and 0.1
    assert df.loc["spread_state", "value_mean"] == pytest.approx(0.1) and df.loc["spread_state", "n"] == 2
    assert df.loc["spread_state", "value_std"] == pytest.approx(0.0, abs=1e-12)
    # best state reader − control: 3.0 − 2.5 and 3.1 − 2.7
    assert df.loc["tokens_gain", "value_mean"] == pytest.approx(0.45)
    assert "spread_sequence" not in df.index and "sequence_gain" not in df.index  # no sequence readers
    # pooled: linear's variance 0.02, softmax's 0 → sqrt(0.01)
    noise = df.loc["noise_state"]
    assert noise["value_mean"] == pytest.approx(0.1) and noise["n"] == 2 and noise["seeds"] == "0,1"
    one = content.lm_ablation([ids["lin0"], ids["soft0"]], home=h).set_index("measure")
    assert set(one.index) == {"spread_state"} and pd.isna(one.loc["spread_state", "value_std"])
    assert content.lm_ablation([ids["gpt0"]], home=h).empty


def test_lm_queries_on_an_empty_store(home):
    assert content.lm_runs().empty and content.lm_curves(None).empty
    assert list(content.lm_final_stats().columns)[:4] == ["model", "predictor", "attn_input", "n"]
    assert content.lm_ablation().empty
