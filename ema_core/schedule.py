"""The learning-rate schedules of EMA Lab's trainers: a linear warm-up, then a decay to a floor.

    >>> [round(warmup_cosine(s, steps=10, warmup=2, floor=0.1), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.55, 0.134]
    >>> [round(warmup_stable_decay(s, steps=10, warmup=2, decay=4, floor=0.1), 3) for s in (0, 1, 5, 6, 8, 10)]
    [0.5, 1.0, 1.0, 1.0, 0.364, 0.1]

Pure functions of the step, returning the fraction of the peak rate: a trainer multiplies its own
rate by it (the language models of :mod:`ema_core.lm.train`, the boundary map's cells in
:mod:`ema_core.studies.boundary.tasks`).  ``warmup_cosine`` is every trainer's default; ``warmup_stable_decay``
holds the peak rate until a short final decay, so that an evaluation made during the plateau is one
of a model still training at its rate, comparable from one step to the next (a cosine's
intermediate points are each at a different rate) — what a curve over training tokens needs.
"""
from __future__ import annotations

import math


def warmup_cosine(step: int, steps: int, warmup: int, floor: float) -> float:
    """The fraction of the peak learning rate at optimiser step ``step`` (0-based) of ``steps``.

    ``(step + 1) / warmup`` during the ``warmup`` steps (the first step already moves), then half a
    cosine from 1 down to ``floor`` at step ``steps`` (and there after it).
    """
    if step < warmup:
        return (step + 1) / warmup
    span = max(1, steps - warmup)
    # π·(step − warmup)/span, in this order: the boundary map's cells were trained (and their figures
    # recorded) with it, and it is bit for bit what they saw.
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(step - warmup, span) / span))


# The registry of schedules a trainer's config names (``TrainConfig.schedule``).
SCHEDULES = ("cosine", "wsd")


def warmup_stable_decay(step: int, steps: int, warmup: int, decay: int, floor: float) -> float:
    """The fraction of the peak rate at step ``step`` (0-based) of ``steps``: warm-up, plateau, then decay.

    ``(step + 1) / warmup`` during the ``warmup`` steps, 1 until the last ``decay`` steps, then
    ``floor + (1 - floor)·(1 - sqrt(p))`` with p the fraction of the decay done, reaching ``floor`` at
    step ``steps`` (and there after it).  The 1 − sqrt shape is the cool-down Hägele et al. (2024) found
    to match a cosine's final loss with a decay of a fifth of the run or less.
    """
    if step < warmup:
        return (step + 1) / warmup
    start = decay_start(steps, warmup, decay)
    if step < start:
        return 1.0
    p = min(step - start, steps - start) / max(1, steps - start)
    return floor + (1 - floor) * (1 - math.sqrt(p))


def decay_start(steps: int, warmup: int, decay: int) -> int:
    """The step (0-based) at which a wsd schedule's decay over its last ``decay`` steps begins: never
    inside the warm-up (a decay longer than what follows the warm-up starts where the warm-up ends)."""
    return max(warmup, steps - decay)


def wsd_decay(steps: int, decay_frac: float) -> int:
    """The steps a wsd schedule decays over: ``decay_frac`` of ``steps``, to the nearest step."""
    return round(decay_frac * steps)


def peak_steps(schedule: str, steps: int, warmup: int, decay_frac: float) -> range:
    """The optimiser steps (0-based) between the warm-up and the decay, all at the peak rate.

    An evaluation after ``done`` steps is one of a model still training at its rate when ``done - 1``
    is among them (every warm-up step done, no decay step taken): the points a curve over training
    tokens can compare.  Empty for a cosine (and so for every run stored before ``schedule`` was a
    setting), whose decay starts where the warm-up ends.

    >>> peak_steps("wsd", steps=5000, warmup=200, decay_frac=0.2), peak_steps("cosine", 5000, 200, 0.2)
    (range(200, 4000), range(200, 200))
    """
    if schedule != "wsd":
        return range(warmup, warmup)
    return range(warmup, decay_start(steps, warmup, wsd_decay(steps, decay_frac)))
