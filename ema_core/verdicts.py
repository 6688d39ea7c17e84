"""The one rule every page judges a paper claim by: a paired difference against the seeds' spread.

Pure arithmetic (no torch, no pandas, no store), read by each study's findings:

A difference Δ is formed within each seed (the same data, the same batch order), then averaged
over the seeds (:func:`paired`, or :func:`spread` of per-seed differences formed elsewhere); its
spread (:class:`Spread`) is the sample std of Δ across those seeds.  Every study judges by it:
structure, boundary, and content's predictor ablation (whose variants pair on the seeds both hold).

Δ is *beyond the seeds' spread* when |mean Δ| > ``VERDICT_K`` × that std (strictly), and a claim
is judged only on ``VERDICT_MIN_SEEDS`` seeds or more; a claim "Δ > 0" is then reproduced, not
reproduced, or inconclusive (:func:`judge`), and below that it is "not judged: n seeds"
(verdict ``"not_judged"``, worded by :func:`not_judged`).

**The rule is a test.**  With s the sample std of the n per-seed Δ, the one-sample (paired) t
statistic of mean Δ against 0 is t = mean Δ / (s / √n), so |mean Δ| > K·s is |t| > K·√n at n − 1
degrees of freedom (:func:`t_threshold`, :func:`one_sided_p`).  "Reproduced" rejects Δ ≤ 0 (t >
K·√n), "not reproduced" rejects Δ ≥ 0 (t < −K·√n), each one-sided; at the minimum of 3 seeds that
is t > 2√3 ≈ 3.46 at 2 degrees of freedom, a one-sided level of ≈ 0.037 (:data:`RULE_AS_TEST`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

VERDICT_K = 2.0        # "beyond the seeds' spread": |mean Δ| > VERDICT_K × the std of Δ (strictly)
# A claim is judged on 3 seeds or more: with 2, the rule is a t test at one degree of freedom
# (t > 2√2 ≈ 2.83, one-sided p ≈ 0.11), which a reviewer would not take as a verdict.
VERDICT_MIN_SEEDS = 3
VERDICT_WORDS = {"reproduced": "reproduced", "not_reproduced": "not reproduced", "inconclusive": "inconclusive",
                 "not_judged": "not judged"}  # a claim's own sentence says "not judged: n seeds" (not_judged)
# A sanity check (it holds by construction or checks the harness) is said to hold or fail, not to reproduce.
SANITY_WORDS = {"reproduced": "holds", "not_reproduced": "fails", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class Spread:
    """A per-seed quantity across seeds: its mean, sample std (NaN with one seed) and seeds."""

    mean: float
    std: float
    n: int

    @property
    def judged(self) -> bool:
        """Enough seeds, and finite numbers, for the rule to say anything (VERDICT_MIN_SEEDS)."""
        return self.n >= VERDICT_MIN_SEEDS and math.isfinite(self.std) and math.isfinite(self.mean)

    @property
    def beyond(self) -> bool | None:
        """|mean| > VERDICT_K × std, strictly (None: not judged, fewer than VERDICT_MIN_SEEDS seeds).

        Strict, so that seeds agreeing exactly on Δ = 0 (mean 0, std 0) are not "beyond": the test
        rejects neither Δ ≤ 0 nor Δ ≥ 0 there."""
        if not self.judged:
            return None
        return abs(self.mean) > VERDICT_K * self.std

    @property
    def t(self) -> float:
        """The paired t statistic, mean / (std / √n): ±inf where every seed agrees on a non-zero Δ,
        NaN with fewer than two seeds or Δ = 0 on every seed."""
        if self.n < 2 or not (math.isfinite(self.std) and math.isfinite(self.mean)):
            return math.nan
        if self.std == 0:
            return math.nan if self.mean == 0 else math.copysign(math.inf, self.mean)
        return self.mean / (self.std / math.sqrt(self.n))

    def shifted(self, level: float) -> "Spread":
        """The spread of (value − level): the same std and seeds."""
        return Spread(self.mean - level, self.std, self.n)


def records(rows: Iterable[Mapping]) -> Iterable[Mapping]:
    """A study's rows as mappings: a DataFrame's records (iterating one gives its column names), or the
    rows as they are (a list of dicts); the findings take either without importing pandas."""
    to_dict = getattr(rows, "to_dict", None)
    return to_dict("records") if callable(to_dict) else rows


def finite(v) -> float | None:
    """``v`` as a float, or None where it is missing, not a number or not finite (a cell left out)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


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
    """The verdict of the claim "Δ > 0": a key of VERDICT_WORDS.  Reproduced: Δ > 0 beyond the
    spread (the paired test rejects Δ ≤ 0); not reproduced: Δ < 0 beyond it (rejects Δ ≥ 0);
    inconclusive: within it; not judged: fewer than VERDICT_MIN_SEEDS seeds."""
    beyond = delta.beyond
    if beyond is None:
        return "not_judged"
    if not beyond:
        return "inconclusive"
    return "reproduced" if delta.mean > 0 else "not_reproduced"


def strength(delta: Spread) -> float:
    """How far Δ is from the rule's threshold: |mean Δ| / (VERDICT_K × std), so 1 is the edge of the
    seeds' spread, above 1 beyond it.  NaN where the rule does not judge (fewer than VERDICT_MIN_SEEDS
    seeds); +inf where every seed agrees on a non-zero Δ.  A label alone hides whether an
    "inconclusive" Δ was 0.9 of its threshold or 0.01 of it; this number says.

    >>> round(strength(Spread(0.3, 0.05, 3)), 2), strength(Spread(0.3, 0.0, 3)), strength(Spread(0.1, 0.1, 2))
    (3.0, inf, nan)
    """
    if not delta.judged:
        return math.nan
    if delta.std == 0:
        return math.inf if delta.mean != 0 else 0.0
    return abs(delta.mean) / (VERDICT_K * delta.std)


def not_judged(n: int) -> str:
    """What a claim on fewer than VERDICT_MIN_SEEDS seeds says instead of a verdict's reason.

    >>> not_judged(1), not_judged(2)
    ('not judged: 1 seed', 'not judged: 2 seeds')
    """
    return f"not judged: {n} seed{'' if n == 1 else 's'}"


def verdict_word(verdict: str, n: int, words: Mapping[str, str]) -> str:
    """A claim's verdict in a word or two: ``words[verdict]`` (a study's wording of :func:`judge`'s
    verdicts), or on fewer than VERDICT_MIN_SEEDS of its ``n`` seeds, :func:`not_judged`'s.

    >>> verdict_word("not_judged", 2, VERDICT_WORDS), verdict_word("not_reproduced", 5, VERDICT_WORDS)
    ('not judged: 2 seeds', 'not reproduced')
    """
    return not_judged(n) if verdict == "not_judged" else words[verdict]


# -- the rule as a test --------------------------------------------------------------------------------

def t_threshold(n: int) -> float:
    """The paired t statistic the rule asks for at ``n`` seeds: |t| > VERDICT_K · √n."""
    return VERDICT_K * math.sqrt(n)


def one_sided_p(t: float, df: int) -> float:
    """P(T > t) for Student's t at ``df`` (a whole number ≥ 1) degrees of freedom, in closed form
    (the finite series of the t distribution for whole df; no scipy in ema_core).

    >>> round(one_sided_p(2 * 3 ** 0.5, 2), 4)
    0.0371
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"df: {df} is not a whole number ≥ 1")
    df = int(df)
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    # A = P(|T| < |t|), the series of Abramowitz & Stegun 26.7.3/26.7.4.
    if df % 2:
        term, total = c, c if df > 1 else 0.0
        for i in range(3, df - 1, 2):
            term *= c * c * (i - 1) / i
            total += term
        inside = 2.0 / math.pi * (theta + s * total)
    else:
        term = total = 1.0
        for i in range(2, df - 1, 2):
            term *= c * c * (i - 1) / i
            total += term
        inside = s * total
    upper = (1.0 - inside) / 2.0
    return upper if t >= 0 else 1.0 - upper


def rule_as_test(n: int = VERDICT_MIN_SEEDS) -> str:
    """The rule at ``n`` seeds as the test it is: the t it asks for, its degrees of freedom and level.

    >>> rule_as_test(3)
    't > 3.46 at 2 degrees of freedom, a one-sided level of 0.037'
    """
    t = t_threshold(n)
    return f"t > {t:.2f} at {n - 1} degrees of freedom, a one-sided level of {one_sided_p(t, n - 1):.3f}"


RULE_AS_TEST = (
    "**The rule as a test.** Δ is formed within each seed, so |mean Δ| > "
    f"{VERDICT_K:g} × its sample std across n seeds is a one-sample (paired) t test of mean Δ against 0, "
    f"|t| > {VERDICT_K:g}·√n: at {VERDICT_MIN_SEEDS} seeds {rule_as_test(VERDICT_MIN_SEEDS)}; at "
    + "; at ".join(f"{n}, {rule_as_test(n)}" for n in (VERDICT_MIN_SEEDS + 1, VERDICT_MIN_SEEDS + 2))
    + ". **Reproduced** rejects \"Δ ≤ 0\" at that level, **not reproduced** rejects \"Δ ≥ 0\", "
    f"**inconclusive** rejects neither. Below {VERDICT_MIN_SEEDS} seeds a claim is not judged."
)
