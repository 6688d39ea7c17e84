"""Finished runs of the structure experiment for page and query tests, in the store's result format.

``make_structure_runs(home, seeds)`` writes one real run folder per seed (config.json, events,
status "done", result.json) and ingests them with ``store.ingest``, as a finished job would leave
them.  The rows come from :func:`synthetic_result` (instant, with known numbers), or with
``real=True`` from the experiment itself (``REGISTRY["structure"]``, in-process, at ``TINY``
sizes: a few seconds per seed, once per test run, tests/runcache.py): the run folders are the same
either way.

The synthetic rows are test inputs with known answers, never results (no page or export shows
them outside the tests): the page's arithmetic is checked against them.  They are shaped like the
paper's claims (PAPER.md §2) so that every view has something to draw: traces above
instantaneous activations, the BiGRU strong on lexical roles and weaker on structure-dependent
ones, the BiGRU losing agent determiners on novel vocabulary, the probe on the control tasks near
chance, the n-gram window a little below the traces.  The deep split scores only the roles of the
embedded structures, so rows are missing there, as they will be in real runs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ema_core.grammar import EMBEDDED_STRUCTURES, N_STRUCTURES, ROLES, template
from finished_run import real_run, write_and_ingest

KIND = "structure"
# The quick preset shrunk to seconds per seed; the numbers mean little, the result's shape is real.
TINY = dict(n_train=400, n_eval=40, units=64, k=4, passes=1, bigru_max_epochs=2)
SPCN_SETS = ("instantaneous", "traces", "both")
NGRAM_SETS = ("ngram1", "ngram2", "ngram")
CONTROLS = ("control", "control_prev", "control_pos")
# Mean accuracy per (feature set, role kind) before per-seed noise.
LEVELS = {
    ("instantaneous", True): 0.93, ("instantaneous", False): 0.74,
    ("traces", True): 0.97, ("traces", False): 0.95,
    ("both", True): 0.98, ("both", False): 0.96,
    ("ngram1", True): 0.96, ("ngram1", False): 0.70,
    ("ngram2", True): 0.96, ("ngram2", False): 0.80,
    ("ngram", True): 0.96, ("ngram", False): 0.90,
    ("bigru", True): 0.995, ("bigru", False): 0.91,
}
# The control tasks' mean overall accuracy, per control: near chance, the context-keyed ones lower.
CONTROL_LEVELS = {"control": 0.35, "control_prev": 0.25, "control_pos": 0.2}
SPLIT_DROP = {"test": 0.0, "novel": 0.08, "deep": 0.12}


def split_roles() -> dict[str, list[str]]:
    """The roles each split can score: all structures for test and novel, embedded ones for deep."""
    every = sorted({r for s in range(N_STRUCTURES) for _, r in template(s)}, key=[r.name for r in ROLES].index)
    deep = sorted({r for s in EMBEDDED_STRUCTURES for _, r in template(s, 3)}, key=[r.name for r in ROLES].index)
    return {"test": every, "novel": every, "deep": deep}


def synthetic_result(seed: int) -> dict:
    """A result.json body of one structure run: summary plus ``probe_accuracy`` rows."""
    rng = np.random.default_rng(1000 + seed)
    lexical = {r.name: r.lexical for r in ROLES}
    rows = []

    def add(role, feature_set, split, accuracy):
        rows.append({"role": role, "feature_set": feature_set, "split": split,
                     "accuracy": float(np.clip(accuracy, 0.0, 1.0))})

    for split, roles in split_roles().items():
        for fs in (*SPCN_SETS, *NGRAM_SETS, "bigru"):
            drop = SPLIT_DROP[split] * (1.0 if fs == "bigru" else 0.5)
            accs = []
            for role in roles:
                acc = LEVELS[(fs, lexical[role])] - drop + rng.normal(0, 0.01)
                if split == "novel" and role == "agent_det":
                    acc = 1.0 if fs != "bigru" else 0.76 + rng.normal(0, 0.02)
                add(role, fs, split, acc)
                accs.append(rows[-1]["accuracy"])
            add("overall", fs, split, np.mean(accs))
        for fs in SPCN_SETS:  # an untrained SPCN: the frozen projections alone
            for role in roles:
                add(role, f"untrained/{fs}", split, LEVELS[(fs, lexical[role])] - 0.2 + rng.normal(0, 0.02))
            add("overall", f"untrained/{fs}", split, LEVELS[(fs, False)] - 0.2 + rng.normal(0, 0.02))
    for fs in (*SPCN_SETS, *NGRAM_SETS):  # control tasks: random keyed labels, overall on test only
        for control in CONTROLS:
            add("overall", f"{control}/{fs}", "test", CONTROL_LEVELS[control] + rng.normal(0, 0.02))

    def overall(fs, split):
        return next(r["accuracy"] for r in rows if (r["role"], r["feature_set"], r["split"]) == ("overall", fs, split))

    summary = {
        "grammar": {"words": 147, "structures": 6, "roles": 20},
        "within": {fs: overall(fs, "test") for fs in (*SPCN_SETS, "ngram", "bigru")},
        "transfer": {fs: overall(fs, "novel") for fs in ("traces", "ngram", "bigru")},
        "deep": {fs: overall(fs, "deep") for fs in ("traces", "ngram", "bigru")},
        "tuned_on": "dev",
        "seconds": 1.0,
    }
    return {"summary": summary, "tables": {"probe_accuracy": rows}}


def make_structure_runs(home: Path, seeds=(0, 1), config: dict | None = None, *, real: bool = False) -> list[str]:
    """Finished, ingested structure runs of one config, one per seed; their run ids in seed order.

    ``config`` is the synthetic runs' config, or with ``real=True`` overrides of the experiment's
    settings on top of ``TINY``.
    """
    runs = []
    for seed in seeds:
        if real:
            cfg, events, result, _ = real_run(KIND, {**TINY, **(config or {})}, int(seed), [int(seed), config or {}],
                                              preset="quick")
        else:
            cfg = {**(config or {"preset": "test", "n_sentences": 200}), "seed": int(seed)}
            events = [(i, {"spcn/pred_error": 1.0 / (i + 1), "bigru/loss": 2.0 / (i + 1)}) for i in range(5)]
            result = synthetic_result(int(seed))
        runs.append((seed, (cfg, events, result, {})))
    return write_and_ingest(home, KIND, runs)
