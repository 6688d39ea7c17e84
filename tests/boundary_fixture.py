"""Finished runs of the boundary experiment for page and browser tests, as a finished job leaves them.

``make_boundary_runs(home, seeds)`` runs the experiment itself (``REGISTRY["boundary"]``, in-process,
at ``TINY`` sizes: a couple of seconds per run once the scans are compiled), writes one run folder
per first seed (config.json, events, status "done", result.json) and ingests them with
``store.ingest``.  A run holds ``seeds`` seeds of its own (TINY: two), so one run already has a
spread for the verdicts.  The numbers mean little at these sizes; the rows' shape is real.
"""
from __future__ import annotations

from pathlib import Path

from finished_run import write_finished_run
from store import ingest

KIND = "boundary"
MIXERS = ("window_k", "ema", "softmax")
# Every task, a near and a far distance (k = 8 lies past the window's reach of 6 and is the
# findings' "at a distance"), two MQAR sizes, two seeds per run.
TINY = {"mixers": ",".join(MIXERS), "distances": "1,8", "mqar_pairs": "2,4", "mqar_len": "16",
        "data.seq_len": 16, "data.n_train": 32, "data.n_dev": 16, "data.n_test": 16, "train.steps": 3,
        "train.lrs": "0.01", "model.d": 16, "seeds": 2}


def _real_run(seed: int, overrides: dict | None) -> tuple[dict, list[tuple[int, dict]], dict]:
    from ema_core.experiments import NullReporter, build_config, get_experiment

    cfg = build_config(KIND, overrides={**TINY, **(overrides or {})}, seed=seed)
    reporter = NullReporter()
    result = get_experiment(KIND).run(cfg, reporter)
    return cfg.model_dump(mode="json"), reporter.events, result


def make_boundary_runs(home: Path, seeds=(0,), overrides: dict | None = None) -> list[str]:
    """Finished, ingested boundary runs of one config, one per first seed; their run ids in seed order."""
    run_ids = []
    for seed in seeds:
        cfg, events, result = _real_run(int(seed), overrides)
        run_ids.append(write_finished_run(home, KIND, cfg, seed, events, result))
    report = ingest(home, run_ids)
    assert report["errors"] == [], report["errors"]
    return run_ids
