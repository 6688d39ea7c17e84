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

from finished_run import real_run, write_and_ingest

KIND = "depth"
SEEDS = 3  # seeds per run: the fewest the rule judges a claim on, so one run is judged
# Every rule at 1 and 2 blocks, each trained for a few steps: seconds a cell (at one rate: auto's table
# holds the quick budget's depths only).
TINY = {"depths": "1,2", "data.vocab_size": 257, "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 128,
        "train.seq_len": 16, "train.batch": 2, "train.lr": 3e-3, "train.steps": 6, "train.warmup": 1, "train.eval_every": 3,
        "train.eval_tokens": 64, "train.final_eval_tokens": 256, "probe.windows": 6, "probe.classes": 8,
        "seeds": SEEDS}


def tiny_run(seed: int = 0, overrides: dict | None = None) -> tuple[dict, list[tuple[int, dict]], dict]:
    """(config, events, result) of the TINY run at first seed ``seed``: run once, a copy each call."""
    return real_run(KIND, {**TINY, **(overrides or {})}, int(seed), [int(seed), overrides or {}])[:3]


def make_depth_runs(home: Path, seeds=(0,), overrides: dict | None = None) -> list[str]:
    """Finished, ingested depth runs of one config, one per first seed; their run ids in seed order."""
    return write_and_ingest(home, KIND, [(seed, (*tiny_run(int(seed), overrides), {})) for seed in seeds])
