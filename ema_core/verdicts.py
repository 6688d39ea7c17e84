"""The one rule every page judges a paper claim by: a difference against the seeds' spread.

Pure arithmetic (no torch, no pandas, no store), read by each study's findings:

A difference Δ is formed within each seed (the same data, the same batch order), then averaged
over the seeds (:func:`paired`, or :func:`spread` of per-seed differences formed elsewhere); its
spread (:class:`Spread`) is the sample std of Δ across those seeds.  Every study judges by it:
structure, boundary, and content's predictor ablation (whose variants pair on the seeds both hold).

Δ is *beyond the seeds' spread* when |Δ| ≥ ``VERDICT_K`` × that std, and a spread needs
``VERDICT_MIN_SEEDS`` seeds; a claim "Δ > 0" is then reproduced, not reproduced, or inconclusive
(:func:`judge`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

VERDICT_K = 2.0        # "beyond the seeds' spread": |mean Δ| ≥ VERDICT_K × the std of Δ
VERDICT_MIN_SEEDS = 2  # a spread needs two seeds
VERDICT_WORDS = {"reproduced": "reproduced", "not_reproduced": "not reproduced", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class Spread:
    """A per-seed quantity across seeds: its mean, sample std (NaN with one seed) and seeds."""

    mean: float
    std: float
    n: int

    @property
    def beyond(self) -> bool | None:
        """|mean| ≥ VERDICT_K × std (None: too few seeds to have a spread)."""
        if self.n < VERDICT_MIN_SEEDS or not math.isfinite(self.std) or not math.isfinite(self.mean):
            return None
        return abs(self.mean) >= VERDICT_K * self.std

    def shifted(self, level: float) -> "Spread":
        """The spread of (value − level): the same std and seeds."""
        return Spread(self.mean - level, self.std, self.n)


def spread(values: Iterable[float | None]) -> Spread:
    """Mean, sample std and count of the finite values (the missing and non-finite are left out)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return Spread(math.nan, math.nan, 0)
    mean = math.fsum(vals) / len(vals)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else math.nan
    return Spread(mean, std, len(vals))


def paired(a: Mapping[Hashable, float | None], b: Mapping[Hashable, float | None]) -> Spread:
    """Δ = a − b formed within each seed both sides hold (a key: a seed, or a seed and a sequence set),
    then its mean and spread across those seeds: the one paired Δ every study judges a claim by.

    A seed only one side holds, or whose value is missing or not finite, is left out, so a variant
    run at more seeds than its reference is compared on the seeds they share.

    >>> d = paired({0: 0.9, 1: 0.8, 2: 0.7}, {0: 0.5, 1: 0.5})
    >>> round(d.mean, 3), d.n
    (0.35, 2)
    """
    def ok(v: float | None) -> bool:
        return v is not None and math.isfinite(float(v))

    return spread(float(a[k]) - float(b[k]) for k in a if k in b and ok(a[k]) and ok(b[k]))


def judge(delta: Spread) -> str:
    """The verdict of the claim "Δ > 0": a key of VERDICT_WORDS (inconclusive within the spread)."""
    beyond = delta.beyond
    if beyond is None or not beyond:
        return "inconclusive"
    return "reproduced" if delta.mean > 0 else "not_reproduced"

