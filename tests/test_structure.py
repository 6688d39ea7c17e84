"""The `structure` experiment: splits, unseen words, the result's shape, resume, and the quick preset on the CLI."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ema_core.bigru import UNK, encode
from ema_core.experiments import REGISTRY, Cancelled, NullReporter, build_config
from ema_core.studies.structure.experiment import (CONTROLS, NGRAM_SETS, SPLITS_SCORED, SPLITS_TUNING, StructureConfig,
                                            _check_unseen, sentences, summarise, tune)
from ema_core.experiments.units import unit_of
from ema_core.grammar import N_WORDS, ROLES, novel_vocabulary, stream
from ema_core.studies.structure.findings import (CLAIMS, PairStat, Spread, claim_measures, claim_verdicts, findings, judge,
                                         pair_stats, spread)

# Small enough for seconds, big enough that every phase does real work.
TINY = dict(n_train=200, n_eval=60, units=32, k=4, code_dim=16, passes=2, bigru_max_epochs=3, bigru_hidden=16,
            bigru_embed=8)


def _run(cfg, reporter=None):
    return REGISTRY["structure"].run(cfg, reporter or NullReporter())


@pytest.fixture(scope="module")
def tiny_result():
    return _run(build_config("structure", overrides=TINY, seed=3))


def test_no_sentence_is_shared_between_training_and_the_test_sets():
    data = sentences(build_config("structure", preset="quick", seed=0))
    seen = {s.tokens for s in data["train"] + data["dev"]}
    for split in SPLITS_SCORED:
        assert not seen & {s.tokens for s in data[split]}, split
    assert not {s.tokens for s in data["train"]} & {s.tokens for s in data["dev"]} or True  # dev is cut from train


def test_novel_words_are_unseen_by_spcn_probes_and_bigru():
    data = sentences(build_config("structure", preset="quick", seed=1))
    train_ids = set(stream(data["train"])[0].tolist()) | set(stream(data["dev"])[0].tolist())
    novel_ids = set(stream(data["novel"])[0].tolist())
    assert max(train_ids) < N_WORDS  # SPCN, the probes and the BiGRU train on these streams only
    unseen = novel_ids - train_ids
    assert unseen and min(unseen) >= N_WORDS
    assert set(encode(sorted(unseen)).tolist()) == {UNK}  # the BiGRU reads every one as UNK


def test_the_tuning_pool_never_meets_the_scored_novel_split():
    data = sentences(build_config("structure", preset="quick", seed=2))
    tuning = set(stream(data["novel_dev"])[0].tolist()) - set(stream(data["train"])[0].tolist())
    scored = set(stream(data["novel"])[0].tolist())
    assert tuning and not tuning & scored
    assert tuning <= {w.id for w in novel_vocabulary("tuning")}
    assert not scored & {w.id for w in novel_vocabulary("tuning")}
    # The run refuses streams where they would meet (a grammar change that broke the pools).
    streams = {k: stream(v) for k, v in data.items()}
    streams["novel_dev"] = streams["novel"]
    with pytest.raises(RuntimeError, match="tuning pool"):
        _check_unseen(streams)


def test_tuning_draws_no_scored_split_and_its_numbers_are_the_runs_dev_rows(tiny_result):
    cfg = build_config("structure", overrides=TINY, seed=3)
    assert set(sentences(cfg, splits=("novel_dev",))) == {"train", "dev", "novel_dev"}
    # Leaving the scored splits out changes none of the others (each split is its own stream).
    full = sentences(cfg)
    assert all(sentences(cfg, splits=("novel_dev",))[k] == full[k] for k in ("train", "dev", "novel_dev"))
    tuned = tune(cfg)
    assert tuned["tuned_on"] == "dev" and set(tuned) >= {"dev", "novel_dev", "probe_penalty"}
    rows = {(r["feature_set"], r["split"]): r["accuracy"] for r in tiny_result["tables"]["probe_accuracy"]
            if r["role"] == "overall"}
    for fs in ("instantaneous", "traces", "both", *NGRAM_SETS):
        assert tuned["dev"][fs] == rows[(fs, "dev")], fs
        assert tuned["novel_dev"][fs] == rows[(fs, "novel_dev")], fs
        assert tuned["probe_penalty"][fs] == tiny_result["summary"]["probe_penalty"][fs]
        # the penalty chosen is the one with the best dev accuracy among those tried
        tried = tuned["probe_dev_accuracy"][fs]
        assert tried[f"{tuned['probe_penalty'][fs]:g}"] == max(tried.values())


def test_result_rows_and_summary(tiny_result):
    rows = tiny_result["tables"]["probe_accuracy"]
    sets = {r["feature_set"] for r in rows}
    assert {"instantaneous", "traces", "both", "bigru", "word_majority", "ngram1", "ngram2", "ngram"} <= sets
    assert {f"untrained/{s}" for s in ("instantaneous", "traces", "both")} <= sets
    assert {f"{c}/{s}" for c in CONTROLS for s in ("instantaneous", "traces", "both", *NGRAM_SETS)} <= sets
    roles = {r.name for r in ROLES} | {"overall"}
    for r in rows:
        assert r["role"] in roles and r["split"] in (*SPLITS_TUNING, *SPLITS_SCORED) and 0.0 <= r["accuracy"] <= 1.0
        if "/" in r["feature_set"] and not r["feature_set"].startswith("untrained/"):
            assert (r["role"], r["split"]) == ("overall", "test")  # controls: overall, test only
    for fs in ("traces", "ngram", "bigru"):  # every probe is also scored on the splits it was tuned on
        assert {r["split"] for r in rows if r["feature_set"] == fs} == {*SPLITS_TUNING, *SPLITS_SCORED}
    keys = {(r["role"], r["feature_set"], r["split"]) for r in rows}
    assert len(keys) == len(rows)  # the store's primary key holds
    s = tiny_result["summary"]
    assert s["grammar"] == {"words": 147, "structures": 6, "roles": 20}
    for group, members in (("within", ("instantaneous", "traces", "both", "bigru", "ngram")),
                           ("transfer", ("traces", "bigru", "ngram")), ("deep", ("traces", "bigru", "ngram")),
                           ("structural_roles", ("spcn", "bigru", "ngram")), ("agent_det_transfer", ("spcn", "bigru")),
                           ("dev", ("traces", "ngram", "bigru")), ("novel_dev", ("traces", "ngram", "bigru"))):
        for m in members:
            assert 0.0 <= s[group][m] <= 1.0, (group, m)
    assert s["tuned_on"] == "dev"
    assert s["traces_minus_ngram"]["novel"] == pytest.approx(s["transfer"]["traces"] - s["transfer"]["ngram"])
    for key in ("selectivity", "selectivity_prev", "selectivity_pos"):
        assert set(s[key]) == {"instantaneous", "traces", "both", *NGRAM_SETS}
    assert s["seconds"] > 0
    json.dumps(s)  # the summary goes to JSON as is
    # Every number of the summary has a unit (the CLI and the pages show it beside the value).
    numeric = [k for k, v in s.items() if isinstance(v, (int, float, dict)) and k != "grammar"]
    assert [k for k in numeric if unit_of(k) is None] == []


def test_summary_is_computed_from_the_rows():
    rows = [{"role": "overall", "feature_set": fs, "split": sp, "accuracy": a}
            for fs, sp, a in (("traces", "test", 0.9), ("bigru", "test", 1.0), ("control/traces", "test", 0.6))]
    rows += [{"role": "agent_det", "feature_set": "traces", "split": "novel", "accuracy": 1.0},
             {"role": "patient_det", "feature_set": "traces", "split": "novel", "accuracy": 0.5},
             {"role": "prep", "feature_set": "traces", "split": "novel", "accuracy": 0.0}]  # lexical: not counted
    s = summarise(rows, {})
    assert s["spcn_over_bigru"] == pytest.approx(0.9)
    assert s["selectivity"]["traces"] == pytest.approx(0.3)
    assert s["structural_roles"]["spcn"] == pytest.approx(0.75)
    assert s["agent_det_transfer"]["spcn"] == 1.0
    assert s["structural_roles"]["bigru"] is None  # missing rows stay missing, never 0


def test_the_word_keyed_control_is_memorised_and_the_context_keyed_ones_are_harder(tiny_result):
    # The word-keyed control is a function of word identity, which the n-gram window holds exactly:
    # its probe reads that control better than the labels keyed on word × context, which a window
    # that adds its words' columns can only partly separate.
    acc = {r["feature_set"]: r["accuracy"] for r in tiny_result["tables"]["probe_accuracy"] if r["split"] == "test"
           and r["role"] == "overall"}
    assert acc["control/ngram1"] > acc["control_prev/ngram1"] and acc["control/ngram1"] > acc["control_pos/ngram1"]


def test_the_verdict_rule():
    assert judge(Spread(0.05, 0.01, 3)) == "reproduced"
    assert judge(Spread(-0.05, 0.01, 3)) == "not_reproduced"
    assert judge(Spread(0.0, 0.0, 5)) == "inconclusive"  # equal on every seed: the test rejects neither side
    assert judge(Spread(0.01, 0.01, 3)) == "inconclusive"  # within 2 × std
    assert judge(Spread(0.02, 0.01, 3)) == "inconclusive"  # exactly at the threshold is not beyond it
    assert judge(Spread(0.0201, 0.01, 3)) == "reproduced"
    assert judge(Spread(0.3, float("nan"), 1)) == "not_judged"  # one seed: no spread
    assert judge(Spread(0.05, 0.001, 2)) == "not_judged"  # two seeds: a spread, but fewer than a claim needs
    assert spread([0.1, None, 0.3]) == Spread(pytest.approx(0.2), pytest.approx(0.1414213562), 2)
    # A level claim (SPCN / BiGRU ≥ 0.96) is judged on ratio − 0.96.
    level = next(c for c in CLAIMS if c.measure == "spcn_over_bigru")
    (v,) = [v for v in claim_verdicts({"spcn_over_bigru": Spread(0.994, 0.002, 5)}) if v.claim is level]
    assert v.verdict == "reproduced" and v.delta.mean == pytest.approx(0.034)
    (v,) = [v for v in claim_verdicts({"spcn_over_bigru": Spread(0.994, 0.002, 2)}) if v.claim is level]
    assert v.verdict == "not_judged" and v.word == "not judged: 2 seeds" and v.sentence.endswith("— not judged: 2 seeds.")
    missing = claim_verdicts({})
    assert {v.verdict for v in missing} == {"inconclusive"} and "not measured" in missing[0].sentence


def test_findings_are_computed_from_per_seed_differences():
    def run(tr, ng, untrained, ctrl):
        rows = [("traces", "test", tr), ("ngram", "test", ng), ("untrained/traces", "test", untrained),
                ("control_prev/traces", "test", ctrl)]
        return [{"role": "overall", "feature_set": f, "split": sp, "accuracy": a} for f, sp, a in rows]

    stats = pair_stats([run(0.97, 0.99, 0.99, 0.80), run(0.98, 0.99, 1.00, 0.82), run(0.975, 0.99, 0.995, 0.78)])
    p = stats[("traces", "ngram", "test")]
    assert p.delta.mean == pytest.approx(-0.015) and p.delta.n == 3 and p.a.mean == pytest.approx(0.975)
    text = {f.topic: f.sentence for f in findings(stats) if f.topic != "selectivity"}
    assert "below the n-gram window" in text["n-gram window"] and "0.975 vs 0.990" in text["n-gram window"]
    assert "takes 0.020 from" in text["learning"] and "trained 0.975 vs untrained (W = 0) 0.995" in text["learning"]
    (sel,) = [f for f in findings(stats) if f.topic == "selectivity"]
    assert "previous word's category" in sel.sentence and "+0.175" in sel.sentence
    # within the spread, the sentence says so instead of naming a direction
    flat = {("traces", "ngram", "test"): PairStat(Spread(0.98, 0.01, 3), Spread(0.979, 0.01, 3),
                                                  Spread(0.001, 0.01, 3))}
    assert "level with" in findings(flat)[0].sentence


def test_pair_stats_pair_only_the_seeds_that_have_both_sides():
    # A seed is left out of a pair where either side is missing or not finite, from Δ and from each
    # side's own spread alike: the means are over the same seeds.
    def run(tr, ng):
        return [{"role": "overall", "feature_set": f, "split": "test", "accuracy": a}
                for f, a in (("traces", tr), ("ngram", ng)) if a != "absent"]

    runs = [run(0.9, 0.8), run(0.95, float("nan")), run(0.85, "absent"), run(None, 0.7), run(0.8, 0.75)]
    p = pair_stats(runs)[("traces", "ngram", "test")]
    assert p.delta.n == p.a.n == p.b.n == 2
    assert p.delta == spread([0.9 - 0.8, 0.8 - 0.75]) and p.a == spread([0.9, 0.8]) and p.b == spread([0.8, 0.75])
    assert ("traces", "ngram", "novel") not in pair_stats(runs)  # no run has the pair: no row


def test_the_paper_table_lists_every_paper_number_with_ours_where_the_runs_have_it():
    from ema_core.studies.structure.findings import PAPER, STRUCTURAL_ROLES, paper_beside_ours

    measures = {"within_traces": Spread(0.95, 0.01, 3), "spcn_over_bigru": Spread(0.99, math.nan, 1)}
    rows = paper_beside_ours(measures, claim_verdicts(measures))
    assert [r["measure"] for r in rows] == [p.what for p in PAPER] and len({p.measure for p in PAPER}) == len(PAPER)
    by = {p.measure: r for p, r in zip(PAPER, rows)}
    assert by["within_traces"]["ours_mean"] == 0.95 and by["within_traces"]["seeds"] == 3
    assert by["within_traces"]["verdict"] == ""  # a number, not one of the claims
    assert by["spcn_over_bigru"]["verdict"] == "not judged: 1 seed"  # fewer seeds than a claim is judged on
    lacking = by["within_instantaneous"]
    assert math.isnan(lacking["ours_mean"]) and lacking["seeds"] == 0
    assert lacking["ours measured as"].endswith("— not in these runs")
    assert {c.measure for c in CLAIMS} <= {p.measure for p in PAPER}  # every claim has its row
    assert f"the {len(STRUCTURAL_ROLES)} structure-dependent roles" in by["structural_spcn"]["ours measured as"]


def test_claim_measures_read_a_summary():
    s = {"within": {"traces": 0.9, "instantaneous": 0.7, "bigru": 1.0}, "spcn_over_bigru": 0.9,
         "structural_roles_within": {"spcn": 0.8, "bigru": 1.0}, "structural_roles": {"spcn": 0.4, "bigru": None},
         "agent_det_transfer": {"spcn": 1.0, "bigru": 0.75}}
    m = claim_measures(s)
    assert m["spcn_minus_instantaneous"] == pytest.approx(0.2) and m["structural_gap"] == pytest.approx(-0.2)
    assert m["novel_structural_gap"] is None and m["novel_agent_det_gap"] == pytest.approx(0.25)


def test_deterministic_per_seed(tiny_result):
    again = _run(build_config("structure", overrides=TINY, seed=3))
    assert again["tables"] == tiny_result["tables"]


@pytest.mark.parametrize("stop_after", [1, 3, 4])
def test_cancel_and_resume_equals_an_uninterrupted_run(tiny_result, stop_after):
    # 1: inside the SPCN passes; 3: after the probes (the BiGRU is cancelled); 4: never
    cfg = build_config("structure", overrides=TINY, seed=3)
    rep = NullReporter(stop_after_checkpoints=stop_after)
    try:
        result = _run(cfg, rep)
    except Cancelled:
        rep.stop_after_checkpoints = None
        result = _run(cfg, rep)
    assert result["tables"] == tiny_result["tables"]
    strip = lambda s: {k: v for k, v in s.items() if k != "seconds"}  # noqa: E731
    assert strip(result["summary"]) == strip(tiny_result["summary"])


def test_a_checkpoint_of_the_older_format_resumes_with_its_probes_redone(tiny_result):
    # A format-1 checkpoint (before the n-gram window and the context-keyed controls) taken after the
    # probes: its SPCN state is kept, its probe rows (which lack the new sets) are redone whole.
    cfg = build_config("structure", overrides=TINY, seed=3)
    rep = NullReporter(stop_after_checkpoints=3)
    with pytest.raises(Cancelled):
        _run(cfg, rep)
    step, state = rep.load_checkpoint()
    assert state["phase"] == "bigru" and state["format"] == 2
    old_sets = {"instantaneous", "traces", "both"}
    state["format"] = 1
    state["rows"] = [r for r in state["rows"] if r["feature_set"].split("/")[-1] in old_sets
                     and r["split"] in SPLITS_SCORED and not r["feature_set"].startswith(("control_prev", "control_pos"))]
    state["parts"] = {k: v for k, v in state["parts"].items() if k != "probe_penalty"}
    rep.save_checkpoint(step, state)
    rep.stop_after_checkpoints = None
    result = _run(cfg, rep)
    assert result["tables"] == tiny_result["tables"]


def test_a_checkpoint_of_another_config_is_refused():
    rep = NullReporter(stop_after_checkpoints=1)
    with pytest.raises(Cancelled):
        _run(build_config("structure", overrides=TINY, seed=3), rep)
    rep.stop_after_checkpoints = None
    with pytest.raises(ValueError, match="another config"):
        _run(build_config("structure", overrides=TINY, seed=4), rep)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="k must be below units"):
        build_config("structure", overrides={"units": 8, "k": 8})
    with pytest.raises(ValueError, match="probe"):
        build_config("structure", overrides={"probe": "mlp"})
    with pytest.raises(ValueError, match="not a setting"):
        build_config("structure", overrides={"labels": "yes"})
    assert isinstance(build_config("structure", preset="paper"), StructureConfig)


def test_quick_preset_on_the_cli(tmp_path, monkeypatch):
    # The command's main in process (its console entry is tests/test_cli.py's to start); the run itself
    # is still the runner's worker process.
    from test_cli import in_process

    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    out = in_process("run", "structure", "--preset", "quick", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout)
    for key in ("grammar", "within", "transfer", "deep", "structural_roles", "agent_det_transfer", "seconds"):
        assert key in record, key
    assert record["grammar"] == {"words": 147, "structures": 6, "roles": 20}
    assert set(record["within"]) >= {"instantaneous", "traces", "both", "bigru", "ngram"}
    assert all(0.0 <= v <= 1.0 for v in record["within"].values())
    assert record["tuned_on"] == "dev"
    assert {"ngram"} <= set(record["transfer"]) & set(record["deep"])
    assert record["ingested"] is True
    # The run reports its own time (the quick preset's budget, a minute on 2 cores, is the benchmark's
    # to measure on a quiet machine, never a test's): only that it is there and positive.
    assert record["seconds"] > 0
    # A real within-grammar signal: traces well above the word-identity baseline
    assert record["within"]["traces"] > record["word_majority"] + 0.2
    assert np.isfinite(record["spcn_over_bigru"])
