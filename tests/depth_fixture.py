"""Finished runs of the depth experiment for store, scoreboard and page tests, as a finished job leaves them.

``tiny_run(seed)`` runs the experiment itself (``REGISTRY["depth"]``, in-process, at ``TINY`` sizes with
three seeds, the fewest a claim is judged on): every rule at two depths, each
cell probed trained and at initialisation.  It runs once per first seed and settings in a test run
(tests/runcache.py: tens of seconds on one core), and every caller gets its own copy.  ``make_depth_runs(home,
seeds)`` writes one run folder per first seed (config.json, events, status "done", result.json) and
ingests them with ``store.ingest``.  The numbers mean little at these sizes; the rows' shape is real.
"""
from __future__ import annotations

from pathlib import Path

from ema_core.experiments import NullReporter, build_config, get_experiment
from finished_run import write_finished_run
from runcache import trained
from store import ingest

KIND = "depth"
SEEDS = 3  # seeds per run: the fewest the rule judges a claim on, so one run is judged
# Every rule at 1 and 2 blocks, each trained for a few steps: seconds a cell (at one rate: auto's table
# holds the quick budget's depths only).
TINY = {"depths": "1,2", "data.vocab_size": 257, "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 128,
        "train.seq_len": 16, "train.batch": 2, "train.lr": 3e-3, "train.steps": 6, "train.warmup": 1, "train.eval_every": 3,
        "train.eval_tokens": 64, "train.final_eval_tokens": 256, "probe.windows": 6, "probe.classes": 8,
        "seeds": SEEDS}


def _run(seed: int, overrides: dict) -> tuple[dict, list[tuple[int, dict]], dict]:
    def train():
        cfg = build_config(KIND, overrides={**TINY, **overrides}, seed=seed)
        reporter = NullReporter()
        result = get_experiment(KIND).run(cfg, reporter)
        return cfg.model_dump(mode="json"), reporter.events, result

    return trained(KIND, [seed, overrides], train)


def tiny_run(seed: int = 0, overrides: dict | None = None) -> tuple[dict, list[tuple[int, dict]], dict]:
    """(config, events, result) of the TINY run at first seed ``seed``: run once, a copy each call."""
    return _run(int(seed), overrides or {})


def make_depth_runs(home: Path, seeds=(0,), overrides: dict | None = None) -> list[str]:
    """Finished, ingested depth runs of one config, one per first seed; their run ids in seed order."""
    run_ids = []
    for seed in seeds:
        cfg, events, result = tiny_run(int(seed), overrides)
        run_ids.append(write_finished_run(home, KIND, cfg, seed, events, result))
    report = ingest(home, run_ids)
    assert report["errors"] == [], report["errors"]
    return run_ids
