"""The one learning-rate schedule of EMA Lab's trainers: a linear warm-up, then a cosine decay to a floor.

    >>> [round(warmup_cosine(s, steps=10, warmup=2, floor=0.1), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.55, 0.134]

A pure function of the step, returning the fraction of the peak rate: a trainer multiplies its own
rate by it (the language models of :mod:`ema_core.lm.train`, the boundary map's cells in
:mod:`ema_core.boundary`).
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
