"""Finished runs of the depth experiment for store, scoreboard and page tests, as a finished job leaves them.

``tiny_run(seed)`` runs the experiment itself (``REGISTRY["depth"]``, in-process, at ``TINY`` sizes from
tests/test_depth.py with three seeds, the fewest a claim is judged on): every rule at two depths, each
cell probed trained and at initialisation.  It runs once per first seed and settings in a test session
(tens of seconds on one core) and is kept: every caller gets its own copy.  ``make_depth_runs(home,
seeds)`` writes one run folder per first seed (config.json, events, status "done", result.json) and
ingests them with ``store.ingest``.  The numbers mean little at these sizes; the rows' shape is real.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import tempfile
from pathlib import Path

from finished_run import write_finished_run
from store import ingest
from test_depth import TINY as DEPTH_TINY

KIND = "depth"
SEEDS = 3  # seeds per run: the fewest the rule judges a claim on, so one run is judged
TINY = {**DEPTH_TINY, "seeds": SEEDS}


@contextlib.contextmanager
def _home(home: Path):
    # The experiment keeps its tokenizer and token streams under $EMALAB_HOME/cache.
    before = os.environ.get("EMALAB_HOME")
    os.environ["EMALAB_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("EMALAB_HOME", None)
        else:
            os.environ["EMALAB_HOME"] = before


@functools.lru_cache(maxsize=None)
def _run(seed: int, overrides: str) -> tuple[dict, list[tuple[int, dict]], dict]:
    from ema_core.experiments import NullReporter, build_config, get_experiment

    cfg = build_config(KIND, overrides={**TINY, **json.loads(overrides)}, seed=seed)
    reporter = NullReporter()
    # A folder of its own for the corpus cache, so that the kept run depends on no test's data folder.
    with tempfile.TemporaryDirectory(prefix="depth_fixture_") as cache, _home(Path(cache)):
        result = get_experiment(KIND).run(cfg, reporter)
    return cfg.model_dump(mode="json"), reporter.events, result


def tiny_run(seed: int = 0, overrides: dict | None = None) -> tuple[dict, list[tuple[int, dict]], dict]:
    """(config, events, result) of the TINY run at first seed ``seed``: run once, a copy each call."""
    return copy.deepcopy(_run(int(seed), json.dumps(overrides or {}, sort_keys=True)))


def make_depth_runs(home: Path, seeds=(0,), overrides: dict | None = None) -> list[str]:
    """Finished, ingested depth runs of one config, one per first seed; their run ids in seed order."""
    run_ids = []
    for seed in seeds:
        cfg, events, result = tiny_run(int(seed), overrides)
        run_ids.append(write_finished_run(home, KIND, cfg, seed, events, result))
    report = ingest(home, run_ids)
    assert report["errors"] == [], report["errors"]
    return run_ids
