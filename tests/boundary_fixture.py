"""Finished runs of the boundary experiment for page and browser tests, as a finished job leaves them.

``make_boundary_runs(home, seeds)`` runs the experiment itself (``REGISTRY["boundary"]``, in-process,
at ``TINY`` sizes: a couple of seconds per run once the scans are compiled), writes one run folder
per first seed (config.json, events, status "done", result.json) and ingests them with
``store.ingest``.  Each (first seed, overrides) trains once per test run (tests/runcache.py).  A run holds ``seeds`` seeds of its own (TINY: three, the fewest a claim is judged
on), so one run is already judged.  The numbers mean little at these sizes; the rows' shape is real:
every cell with its exclusion floor and width, every rate's dev curve, and MQAR recall at two widths.
"""
from __future__ import annotations

from pathlib import Path

from finished_run import real_run, write_and_ingest

KIND = "boundary"
MIXERS = ("window_k", "ema", "softmax")
# Every task, a near and a far distance (k = 8 lies past the reach of a 2-wide window behind a
# width-3 conv, 2 · (1 + 2) = 6: the findings' "at a distance"), the agreement tasks in the independent
# stream and in the templates (ρ 0 and 1), two MQAR sizes, recall at two widths, three seeds per run
# (the fewest a claim is judged on).
TINY = {"mixers": ",".join(MIXERS), "distances": "1,8", "redundancy": "0,1", "mqar_pairs": "2,4", "mqar_len": "16",
        "data.seq_len": 16, "data.n_train": 32, "data.n_dev": 16, "data.n_test": 16, "train.steps": 3,
        "train.lrs": "0.01", "model.d": 16, "model.window": 2, "recall_widths": "8,16", "seeds": 3}


def _real_run(seed: int, overrides: dict | None) -> tuple[dict, list[tuple[int, dict]], dict]:
    return real_run(KIND, {**TINY, **(overrides or {})}, seed, [seed, overrides or {}])[:3]


def make_boundary_runs(home: Path, seeds=(0,), overrides: dict | None = None) -> list[str]:
    """Finished, ingested boundary runs of one config, one per first seed; their run ids in seed order."""
    return write_and_ingest(home, KIND, [(seed, (*_real_run(int(seed), overrides), {})) for seed in seeds])
