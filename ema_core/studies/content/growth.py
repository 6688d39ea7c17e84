"""How SPEN's gap to the GPT grows: SPEN ÷ GPT against training tokens, and against model size.

The paper's ratio (perplexity 260 against 33, ÷ 7.9) is at 130M parameters after 8B training tokens, a
budget these runs do not reach: the gap they measure says how large it is at theirs, not how large it
becomes.  So the periodic evaluations of the same runs are paired as the final ones are, the gap is fitted
against the training tokens seen (:data:`GROWTH_MODEL`, on the learning rate's plateau, or through runs
cooled down at several lengths), and only a fit on the first pass over the training text is extended to
the paper's budget, with an interval from the seeds and the residuals (Student's t, :func:`_t_quantile`).
:func:`size_trend` does the same across model sizes at matched tokens per parameter.

Each is an extrapolation, labelled one wherever it is said (:func:`growth_statement`,
:func:`size_statement`), and no rule judges it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

from ema_core.lm.token_classes import CLASSES
from ema_core.studies.content.shared import (ALL_TOKENS, PAPER_PARAMS, PAPER_RATIO, PAPER_TOKENS, RECALL, Variant,
                                             _evaluations, _per_token, _with_gpt, gap_variant, lm_variant_label,
                                             ratio_text)
from ema_core.verdicts import one_sided_p, spread

# -- how the gap grows: SPEN ÷ GPT against training tokens -------------------------------------------------
#
# The periodic evaluations of the same rows, paired as the final ones are (each SPEN run with the GPT the
# store picked for it, at the same step), fitted against the training tokens seen, and extrapolated to the
# paper's budget.  An extrapolation, never a verdict: nothing here goes through the shared rule.

GROWTH_LEVEL = 0.95      # the interval's coverage
# Evaluation steps on the plateau a line is fitted through: a line has 2 parameters, and a third point
# leaves its residuals the one degree of freedom the interval needs.
GROWTH_MIN_POINTS = 3
# The pools the gap is followed in: key -> (label, the classes pooled as Σ nats / Σ tokens).  Every class
# pooled is the evaluation's whole loss; recall pools every distance, as the claim "concentrates" does.
GROWTH_POOLS: dict[str, tuple[str, tuple[str, ...]]] = {"all": (ALL_TOKENS, CLASSES),
                                                        "recall": ("recall tokens", RECALL)}
GROWTH_MODEL = "Δ(t) = a + b·log10 t"  # Δ: SPEN − GPT (nats/token); t: training tokens seen
# Where the learning rate stood when a point was evaluated; a periodic fit goes through the plateau only.
PLATEAU = "plateau"
PHASES = ("warm-up", PLATEAU, "decay", "schedule not known")
# A run's final evaluation after its rate has decayed (the end of a wsd or cosine run): the field's reading
# of a growth curve is one such cool-down per budget, each from the same plateau (docs/decisions.md).
ANNEALED = "annealed"


@dataclass(frozen=True)
class GrowthPoint:
    """One periodic evaluation of one seed: SPEN − its GPT on the pool, at the same step."""

    seed: int
    step: int
    tokens: float   # training tokens seen by then
    delta: float    # nats/token; the perplexity ratio is exp(delta)
    phase: str      # a PHASES entry: only the plateau's points are fitted
    group: Hashable = None  # the settings' family (group_id less the steps): a seed's line is (group, seed)
    passes: float | None = None  # tokens ÷ the training split's size (None: a run stored before it was kept)
    size: str | None = None      # the model size, the corpus and SPEN's parameters (None: not in the rows)
    corpus: str | None = None
    params: float | None = None

    @property
    def first_pass(self) -> bool:
        """Every training token seen at most once by then (False where the split's size is not known)."""
        return self.passes is not None and self.passes <= 1.0

    @property
    def ratio(self) -> float:
        return math.exp(self.delta)


class _LogLine:
    """Δ(x) = a + b·log10 x with its interval and the ratio exp(Δ): what a growth fit (x: training tokens) and a
    size trend (x: parameters) share.  The subclass holds a, b and the interval's arithmetic (:func:`_interval`)."""

    def delta(self, x: float) -> float:
        """The fitted Δ (nats/token) at ``x``."""
        return self.a + self.b * math.log10(x)

    def interval(self, x: float) -> tuple[float, float]:
        """The ``level`` interval of Δ at ``x``: the wider of the fit's prediction interval, from its residuals
        (s·√(1 + 1/n + (x − x̄)²/Sxx), Student's t at n − 2), and, with two seeds or more, the seeds' interval
        (each seed's own line at x, mean ± t·std/√seeds at seeds − 1).  The evaluations of one run are not
        independent (consecutive points share a model), so the residuals alone understate the uncertainty;
        the seeds are the independent draws, and the wider of the two is kept."""
        return _interval(self, math.log10(x), self.delta(x))

    def ratio(self, x: float) -> float:
        return math.exp(self.delta(x))

    def ratio_interval(self, x: float) -> tuple[float, float]:
        lo, hi = self.interval(x)
        return math.exp(lo), math.exp(hi)


@dataclass(frozen=True)
class GapGrowth(_LogLine):
    """The fit of one pool's log perplexity ratio against training tokens, Δ(t) = a + b·log10 t, and its
    extrapolation to ``at`` tokens.  The ratio is exp(Δ): a straight line on log–log axes."""

    variant: str                       # the SPEN (lm_variant_label)
    pool: str                          # a GROWTH_POOLS key
    a: float                           # nats/token at t = 1 token (the intercept: not a prediction)
    b: float                           # nats/token per decade of training tokens
    n_points: int                      # plateau evaluations fitted (seeds × steps)
    n_seeds: int                       # seeds among them
    t_range: tuple[float, float]       # training tokens of the first and last point fitted
    at: float                          # the tokens extrapolated to (the paper's 8B)
    interval_from: str                 # "seeds and residuals", or "residuals (one seed)"
    points: tuple[GrowthPoint, ...]    # every paired periodic evaluation, the unfitted ones too
    # The interval's arithmetic (see interval): the fit's mean log10 t, Σ(x − x̄)², residual std and its
    # degrees of freedom; each seed's own line (a, b) when two seeds or more have one.
    x_mean: float
    sxx: float
    residual_std: float
    dof: int
    seed_lines: tuple[tuple[float, float], ...]
    level: float = GROWTH_LEVEL
    paper: float = PAPER_RATIO          # the paper's SPEN ÷ GPT-2 perplexity, beside the prediction
    first_pass: bool = False            # fitted on first-pass points only (GrowthPoint.first_pass)
    passes_to: float | None = None      # passes over the training split at the last point fitted
    annealed: bool = False              # fitted on runs' annealed final evaluations, not on the plateau's

    @property
    def size(self) -> str | None:
        """The model size the points are of (one per fit: :func:`gap_growth` refuses a mix)."""
        return self.points[0].size if self.points else None

    @property
    def params(self) -> float | None:
        """SPEN's parameter count at that size (None where the rows did not say)."""
        known = [p.params for p in self.points if p.params]
        return math.fsum(known) / len(known) if known else None

    @property
    def extrapolated(self) -> bool:
        """Whether ``at`` lies beyond the last point fitted (a fit through repeated passes never is)."""
        return self.at > self.t_range[1]

    @property
    def label(self) -> str:
        return GROWTH_POOLS[self.pool][0]

    def fits(self, p: GrowthPoint) -> bool:
        """Whether the line went through ``p``: a plateau point (an annealed one for an annealed fit), and on the
        first pass when that was asked."""
        return p.phase == (ANNEALED if self.annealed else PLATEAU) and (p.first_pass or not self.first_pass)

    @property
    def n_steps(self) -> int:
        """Evaluation steps fitted (each holds one point per seed that reached it)."""
        return len({p.step for p in self.points if self.fits(p)})

    @property
    def predicted(self) -> float:
        """The SPEN ÷ GPT perplexity ratio the line gives at ``at`` tokens."""
        return self.ratio(self.at)

    @property
    def predicted_interval(self) -> tuple[float, float]:
        return self.ratio_interval(self.at)

    @property
    def measured_to(self) -> float:
        """The most training tokens of any point measured (fitted or not)."""
        return max(p.tokens for p in self.points)

    @property
    def decades(self) -> float:
        """How far beyond the last point fitted the prediction reaches, in decades of training tokens."""
        return math.log10(self.at / self.t_range[1])


def _interval(fit, x: float, centre: float) -> tuple[float, float]:
    """The ``level`` interval of a fitted line at ``x`` (see :meth:`_LogLine.interval`)."""
    half = _t_quantile(fit.level, fit.dof) * fit.residual_std * math.sqrt(
        1 + 1 / fit.n_points + (x - fit.x_mean) ** 2 / fit.sxx)
    lo, hi = centre - half, centre + half
    if fit.seed_lines:
        own = spread(a + b * x for a, b in fit.seed_lines)
        seed_half = _t_quantile(fit.level, own.n - 1) * own.std / math.sqrt(own.n)
        lo, hi = min(lo, own.mean - seed_half), max(hi, own.mean + seed_half)
    return lo, hi


def _t_quantile(level: float, dof: int) -> float:
    """Student's t quantile of a two-sided ``level`` interval at ``dof`` degrees of freedom, by bisection on
    the closed-form tail of :func:`ema_core.verdicts.one_sided_p` (no scipy in ema_core).

    >>> round(_t_quantile(0.95, 1), 3), round(_t_quantile(0.95, 10), 3)
    (12.706, 2.228)
    """
    tail = (1 - level) / 2
    lo, hi = 0.0, 1.0
    while one_sided_p(hi, dof) > tail:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if one_sided_p(mid, dof) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2


def _line(points: list[tuple[float, float]]) -> tuple[float, float, float, float, float]:
    """Least squares y = a + b·x: (a, b, x̄, Sxx, residual sum of squares)."""
    n = len(points)
    x_mean = math.fsum(x for x, _ in points) / n
    y_mean = math.fsum(y for _, y in points) / n
    sxx = math.fsum((x - x_mean) ** 2 for x, _ in points)
    b = math.fsum((x - x_mean) * (y - y_mean) for x, y in points) / sxx
    a = y_mean - b * x_mean
    return a, b, x_mean, sxx, math.fsum((y - a - b * x) ** 2 for x, y in points)


def _phase(step: int, peak: range | None) -> str:
    # After ``step`` optimiser steps the model has taken steps 0 … step − 1: on the plateau when the last
    # of them is a peak step (every warm-up step done, no decay step taken).
    if peak is None:
        return PHASES[3]
    if step - 1 in peak:
        return PLATEAU
    return "warm-up" if step <= peak.start else "decay"


def growth_points(rows: Iterable[Mapping], pool: str = "all", variant: Variant | None = None, *,
                  annealed: bool = False) -> list[GrowthPoint]:
    """Every periodic evaluation of the SPEN variant (default :func:`gap_variant`) paired with its GPT at the
    same step: Δ = SPEN's loss per token on the pool − the GPT's, per seed (group_id, seed) and step; two runs
    of one key add up on both sides, as in the final table.  In (family, seed, step) order.

    A point's ``group`` is the settings' family (group_id less the number of steps): runs of one family that
    differ only in length train alike up to the shorter one's decay, so one step of one seed is one point,
    the longest run's.  ``annealed`` reads each run's final evaluation instead, where its rate has decayed
    (phase ANNEALED; a final at the plateau's rate is no such point): one point per run length.
    """
    if pool not in GROWTH_POOLS:
        raise ValueError(f"pool must be one of {', '.join(GROWTH_POOLS)}, got {pool!r}")
    names = GROWTH_POOLS[pool][1]
    rows = rows if isinstance(rows, list) else list(rows)  # read twice: the variant, then the evaluations
    variant = variant if variant is not None else gap_variant(rows)
    if variant is None:
        return []
    ev = _evaluations(rows, "final" if annealed else "periodic")
    kept: dict[tuple, tuple[float, GrowthPoint]] = {}  # (family, seed, step) -> (its run's steps, the point)
    for step in sorted({s for by in ev.sums.values() for s in by}):
        for key, (spen_sums, gpt_sums) in _with_gpt(ev.at(step), variant).items():
            s, g = _per_token(spen_sums, "class", names), _per_token(gpt_sums, "class", names)
            # The key's SPEN runs: their tokens seen and schedule (the GPT shares the settings: one group).
            runs = [r for r, m in ev.run.items() if (m["group_id"], m["seed"]) == key and m["model"] == "spen"
                    and (m["predictor"], m["attn_input"]) == variant and step in ev.sums[r]]
            seen = [ev.seen[r][step] for r in runs if (ev.seen[r].get(step) or 0) > 0]
            if s is None or g is None or not seen:
                continue  # no token of the pool, or no count of the training tokens (a log needs one): no point
            m = ev.run[runs[0]]
            phase = _phase(step, m["peak"])
            if annealed:
                if phase != "decay":
                    continue
                phase = ANNEALED
            tokens = math.fsum(seen) / len(seen)
            split = m["train_tokens"]
            point = GrowthPoint(key[1], step, tokens, s - g, phase, m["family"], tokens / split if split else None,
                                m["size"], m["corpus"], m["params"])
            length = m["steps"] or 0.0
            at = (str(m["family"]), key[1], step)
            if at not in kept or length > kept[at][0]:
                kept[at] = (length, point)
    return sorted((p for _, p in kept.values()), key=lambda p: (str(p.group), p.seed, p.step))


def growth_series(rows: Iterable[Mapping]) -> dict[tuple, list[Mapping]]:
    """The rows split by (corpus, size), in the order they come: a growth fit is of one model size on one
    corpus (:func:`gap_growth` refuses a mix).  Rows that do not say (stored before) are one series."""
    out: dict[tuple, list[Mapping]] = {}
    for r in rows:
        out.setdefault((r.get("corpus"), r.get("size")), []).append(r)
    return out


def gap_growth(rows: Iterable[Mapping], pool: str = "all", variant: Variant | None = None,
               at: float | None = PAPER_TOKENS, level: float = GROWTH_LEVEL, *,
               first_pass: bool = False, annealed: bool = False) -> GapGrowth | None:
    """How SPEN's gap to its GPT grows with training: :data:`GROWTH_MODEL` fitted by least squares to the
    plateau's points of :func:`growth_points` (every seed's), and extrapolated to ``at`` training tokens.

    Only the plateau is fitted: the warm-up's points are of a model whose rate is still rising, and the
    decay lowers both losses by an amount that has nothing to do with the tokens seen, so neither lies on
    one curve with the plateau.  None with fewer than GROWTH_MIN_POINTS steps on the plateau (a cosine has
    none: train.schedule=wsd, the long preset).  An extrapolation: the page labels it, no rule judges it.

    ``first_pass`` fits only the points at which no training token had been seen twice: past one pass
    a model can memorise its training text, and a line through repeated passes says nothing of fresh
    tokens at scale.  ``at`` None extrapolates nowhere (``at`` is then the last point fitted): the form
    for a fit through repeated passes, which the page never extends to the paper's budget.

    ``annealed`` fits the runs' annealed final evaluations instead (one per run length of a family, at
    least GROWTH_MIN_POINTS lengths): the field's reading, where every point is a model cooled down.

    The rows must hold one model size on one corpus (:func:`growth_series` splits them): a ValueError
    otherwise, since a line through two sizes' points measures neither.
    """
    points = rows if isinstance(rows, list) else list(rows)
    found = growth_points(points, pool, variant, annealed=annealed)
    series = sorted({(str(p.corpus), str(p.size)) for p in found})
    if len(series) > 1:
        raise ValueError(f"the growth of one size on one corpus is fitted at a time; these rows hold "
                         f"{', '.join(f'{c}/{z}' for c, z in series)} (split them with growth_series)")
    phase = ANNEALED if annealed else PLATEAU
    fitted = [p for p in found if p.phase == phase and (p.first_pass or not first_pass)]
    if len({p.step for p in fitted}) < GROWTH_MIN_POINTS:
        return None
    a, b, x_mean, sxx, ssr = _line([(math.log10(p.tokens), p.delta) for p in fitted])
    dof = len(fitted) - 2
    seeds = sorted({(str(p.group), p.seed) for p in fitted})
    lines = []
    for seed in seeds:
        own = [(math.log10(p.tokens), p.delta) for p in fitted if (str(p.group), p.seed) == seed]
        if len({x for x, _ in own}) >= GROWTH_MIN_POINTS:
            lines.append(_line(own)[:2])
    variant = variant if variant is not None else gap_variant(points)
    return GapGrowth(
        variant=lm_variant_label("spen", *variant), pool=pool, a=a, b=b, n_points=len(fitted), n_seeds=len(seeds),
        t_range=(min(p.tokens for p in fitted), max(p.tokens for p in fitted)),
        at=at if at is not None else max(p.tokens for p in fitted), first_pass=first_pass,
        passes_to=max(p.passes for p in fitted) if all(p.passes is not None for p in fitted) else None,
        interval_from=_interval_from(len(lines), len(seeds)), points=tuple(found),
        x_mean=x_mean, sxx=sxx, residual_std=math.sqrt(ssr / dof), dof=dof,
        seed_lines=tuple(lines) if len(lines) >= 2 else (), level=level, annealed=annealed)


# -- the gap against size, at matched tokens per parameter ----------------------------------------------
#
# Two sizes trained to the same tokens per parameter (the fresh and fresh_micro presets), each cooled
# down at the end: Δ against log10 of the parameters.  Tokens per parameter match when they agree to two
# significant figures.  Extended to the paper's 130M parameters at the *same* tokens per parameter, never
# at the paper's: an extrapolation, labelled, judged by no rule.

@dataclass(frozen=True)
class SizeTrend(_LogLine):
    """Δ(N) = a + b·log10 N through the annealed finals of two sizes or more at one tokens-per-parameter."""

    variant: str
    pool: str
    corpus: str | None
    tokens_per_param: float            # the mean over the points (they agree to two significant figures)
    a: float
    b: float                           # nats/token per decade of parameters
    n_points: int
    n_seeds: int                       # seeds (family, seed) among the points
    points: tuple[GrowthPoint, ...]
    x_mean: float
    sxx: float
    residual_std: float
    dof: int
    seed_lines: tuple[tuple[float, float], ...]
    interval_from: str
    at: float = PAPER_PARAMS
    level: float = GROWTH_LEVEL

    @property
    def label(self) -> str:
        return GROWTH_POOLS[self.pool][0]

    @property
    def sizes(self) -> list[tuple[str, float, float, int]]:
        """(size, SPEN's parameters, the mean Δ over its seeds, seeds) per size, smallest first."""
        by: dict[str, list[GrowthPoint]] = {}
        for p in self.points:
            by.setdefault(str(p.size), []).append(p)
        out = [(size, math.fsum(p.params for p in ps) / len(ps), math.fsum(p.delta for p in ps) / len(ps), len(ps))
               for size, ps in by.items()]
        return sorted(out, key=lambda r: r[1])

    @property
    def decades(self) -> float:
        return math.log10(self.at / max(p.params for p in self.points))


def size_trend(rows: Iterable[Mapping], pool: str = "all", variant: Variant | None = None,
               level: float = GROWTH_LEVEL) -> SizeTrend | None:
    """The gap against model size: the annealed first-pass finals (:func:`growth_points`, ``annealed``) of every
    size on one corpus at one tokens-per-parameter, the one where the most sizes meet (then the most points); None
    when no two sizes meet, or with fewer than three points."""
    rows = rows if isinstance(rows, list) else list(rows)
    variant = variant if variant is not None else gap_variant(rows)
    if variant is None:
        return None
    # On the first pass only, as every fit that is extended: a size that repeats its text memorises it.
    found = [p for p in growth_points(rows, pool, variant, annealed=True) if p.params and p.size and p.first_pass]
    buckets: dict[tuple, list[GrowthPoint]] = {}
    for p in found:
        buckets.setdefault((str(p.corpus), f"{p.tokens / p.params:.2g}"), []).append(p)
    meeting = [ps for ps in buckets.values() if len({p.size for p in ps}) >= 2 and len(ps) >= 3]
    if not meeting:
        return None
    pts = max(meeting, key=lambda ps: (len({p.size for p in ps}), len(ps)))
    a, b, x_mean, sxx, ssr = _line([(math.log10(p.params), p.delta) for p in pts])
    dof = len(pts) - 2
    seeds = sorted({(str(p.group), p.seed) for p in pts})
    by_seed: dict[int, list[tuple[float, float]]] = {}
    for p in pts:  # a seed's own line across sizes: the same seed number at every size
        by_seed.setdefault(p.seed, []).append((math.log10(p.params), p.delta))
    lines = [_line(own)[:2] for own in by_seed.values() if len({x for x, _ in own}) >= 2]
    return SizeTrend(
        variant=lm_variant_label("spen", *variant), pool=pool, corpus=pts[0].corpus,
        tokens_per_param=math.fsum(p.tokens / p.params for p in pts) / len(pts), a=a, b=b, n_points=len(pts),
        n_seeds=len(seeds), points=tuple(sorted(pts, key=lambda p: (p.params, p.seed))), x_mean=x_mean, sxx=sxx,
        residual_std=math.sqrt(ssr / dof), dof=dof, seed_lines=tuple(lines) if len(lines) >= 2 else (),
        interval_from="seeds and residuals" if len(lines) >= 2 else "residuals", level=level)


def size_statement(trends: Iterable[SizeTrend]) -> str:
    """The size comparison in one line: each size's ratio at the matched budget, the slope per decade of
    parameters, and its extension to the paper's parameters at the same tokens per parameter (labelled)."""
    trends = list(trends)
    if not trends:
        return ""
    first = trends[0]
    sizes = ", ".join(f"{ratio_text(math.exp(d))} at {size} ({tokens_text(n)} parameters, "
                      f"{k} seed{'' if k == 1 else 's'})" for size, n, d, k in first.sizes)

    def at_paper(t: SizeTrend) -> str:
        lo, hi = t.ratio_interval(t.at)
        return f"{ratio_text(t.ratio(t.at))} [{ratio_text(lo)}, {ratio_text(hi)}] on {t.label}"

    said = " and ".join(at_paper(t) for t in trends)
    return (f"At {first.tokens_per_param:.2f} training tokens per parameter, each size's run cooled down at the "
            f"end: {first.variant} ÷ GPT perplexity {sizes} (all tokens); Δ moves by {first.b:+.4f} nats/token per "
            f"decade of parameters. Extended to the paper's {tokens_text(first.at)} parameters at the same "
            f"{first.tokens_per_param:.2f} tokens per parameter ({tokens_text(first.at * first.tokens_per_param)} "
            f"tokens; the paper trained at {PAPER_TOKENS / PAPER_PARAMS:.0f}): {said} ({100 * first.level:g} % "
            f"intervals, from the {first.interval_from}) — an extrapolation over {first.decades:.1f} decades from "
            f"{len(first.sizes)} sizes, not a measurement.")


def _interval_from(lines: int, seeds: int) -> str:
    """Where a growth fit's interval comes from: the seeds' own lines need two seeds with enough points."""
    if lines >= 2:
        return "seeds and residuals"
    if seeds == 1:
        return "residuals (one seed)"
    return f"residuals ({lines} of {seeds} seeds with {GROWTH_MIN_POINTS} points of its own)"


def tokens_text(t: float) -> str:
    """``"8.19M"``, ``"8B"``: a count of tokens (or parameters) as the statement writes it."""
    if t >= 1e9:
        return f"{t / 1e9:.3g}B"
    return f"{t / 1e6:.3g}M" if t >= 1e5 else f"{t:,.0f}"


def passes_text(f: GapGrowth) -> str:
    """``"first pass"``, ``"to 11.6 passes"`` or ``"passes not known"``: what the points fitted repeat."""
    if f.passes_to is None:
        return "passes over the training split not known"
    return "first pass" if f.passes_to <= 1 else f"to {f.passes_to:.1f} passes over the training split"


def growth_statement(fits: Iterable[GapGrowth]) -> str:
    """The section's one plain line: what was measured, what the fit says and, for a first-pass fit only,
    what it extrapolates to (labelled an extrapolation, with the paper's number beside it)."""
    fits = list(fits)
    if not fits:
        return ""
    first = fits[0]
    seeds = f"{first.n_seeds} seed{'' if first.n_seeds == 1 else 's'}"
    through = (f"{first.n_points} runs of {first.n_steps} lengths, each evaluated once cooled down" if first.annealed
               else f"{first.n_steps} evaluations on the plateau")
    fit = (f"the fit ({GROWTH_MODEL} through {through}, {tokens_text(first.t_range[0])} to "
           f"{tokens_text(first.t_range[1])} tokens, {passes_text(first)}, {seeds})")
    # Per size: the same 8B tokens are a different budget per parameter at every size.
    size = (f" at size {first.size} ({tokens_text(first.params)} parameters: {tokens_text(first.at)} tokens is "
            f"{first.at / first.params:,.0f} per parameter, the paper's {PAPER_TOKENS / PAPER_PARAMS:.0f})"
            if first.size and first.params else
            f" at {tokens_text(first.at / PAPER_PARAMS)} tokens per parameter of the paper's model")
    if not first.extrapolated:
        said = " and ".join(f"{ratio_text(f.ratio(f.t_range[1]))} on {f.label}" for f in fits)
        return (f"Measured to {tokens_text(first.measured_to)} training tokens; {fit} gives a {first.variant} ÷ GPT "
                f"perplexity ratio of {said} at its last point, moving by {first.b:+.4f} nats/token per decade of "
                "tokens (all tokens). Not extended to the paper's budget: points that repeat the training text "
                "measure memorising it as much as learning, so only a fit on the first pass is extrapolated.")
    said = " and ".join(
        f"{ratio_text(f.predicted)} [{ratio_text(f.predicted_interval[0])}, {ratio_text(f.predicted_interval[1])}]"
        f" on {f.label}" for f in fits)
    return (f"Measured to {tokens_text(first.measured_to)} training tokens; {fit} extrapolated to "
            f"{tokens_text(first.at)} tokens gives a {first.variant} ÷ GPT perplexity ratio of {said} "
            f"({100 * first.level:g} % intervals, from the {first.interval_from}) — an extrapolation over "
            f"{first.decades:.1f} decades{size}, not a measurement; the paper: {first.paper:.1f} (all tokens).")
