"""The content study's headline claims, each judged by the shared rule: SPEN, the EMA-only language
model, against the same-size GPT (PAPER.md §3: C4 perplexity 260 against 33), and the predictor ablation
(swapping SPEN's predictor for attention on the trace state changes nothing); and :func:`scores`, every
claim of the study as the scoreboard's lines, these two and then where the gap lives
(:mod:`ema_core.studies.content.gap`).

Pure arithmetic on one row per finished run (model, predictor, attn_input, seed, loss; no torch, no
pandas, no store), so that the page, the store and a benchmark judge the same runs the same way.

Every comparison is a difference Δ = loss(variant) − loss(reference) formed within each seed both
variants hold (runs of one seed draw the same batches in the same order), then averaged over those
seeds; its spread is the sample std of Δ across them (:func:`ema_core.verdicts.paired`).

How the gap grows with tokens and size is in :mod:`ema_core.studies.content.growth` (an extrapolation,
judged by no rule); what the three share, in :mod:`ema_core.studies.content.shared`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

from ema_core.scoreboard import Score, delta_text, outcome, plain
from ema_core.studies.content.gap import GapVerdict, gap_scores
from ema_core.studies.content.shared import (GAP_WORDS, LINEAR, PAPER_GPT_PPL, PAPER_RATIO, PAPER_SPEN_PPL, Key,
                                             Variant, _number, lm_variant_label, ratio_text, verdict_number)
from ema_core.verdicts import (VERDICT_K, VERDICT_MIN_SEEDS, Spread, judge, not_judged, paired, spread,
                               t_threshold, verdict_word)
from ema_core.verdicts import VERDICT_WORDS as SHARED_WORDS

# -- the headline: SPEN against the same-size GPT ------------------------------------------------------
#
# The paper's first content claim, judged like every other: the EMA-only model is worse than attention at
# the same size.  Δ = loss(SPEN linear) − loss(GPT), paired by (settings, seed): the GPT of a seed sees the
# same batches in the same order.  A perplexity ratio is exp(Δ), so "SPEN ÷ GPT > 1" is "Δ > 0".

HEADLINE_VARIANT = ("spen", "linear", "state")  # the SPEN the paper reports (its predictor ablation's reference)
HEADLINE_WHAT = ("The EMA-only SPEN is worse than the same-size GPT (final validation loss, SPEN linear − GPT, "
                 "paired by seed, > 0; perplexity ÷ GPT = exp Δ)")
HEADLINE_PAPER = f"perplexity {PAPER_SPEN_PPL} vs {PAPER_GPT_PPL} (÷ {PAPER_RATIO:.1f})"
HEADLINE_RULE = (
    "**The rule.** Δ = SPEN linear's final validation loss − the GPT's of the same settings and seed (both draw the "
    "same batches in the same order), then averaged over the seeds; SPEN ÷ GPT perplexity is exp Δ. "
    f"**Reproduced** (SPEN is worse): Δ > {VERDICT_K:g} × the sample std of Δ across the seeds; **not reproduced** "
    f"(SPEN is better): Δ < −{VERDICT_K:g} × that std; **inconclusive** in between; **not judged** below "
    f"{VERDICT_MIN_SEEDS} seeds. The paper's ratio (÷ {PAPER_RATIO:.1f}) is at 130M parameters after 8B tokens: "
    "the rule judges the direction here, and the section on growth follows the size of the gap over training."
)


@dataclass(frozen=True)
class HeadlineVerdict:
    delta: Spread   # per seed: loss(SPEN linear) − loss(GPT), nats/token
    verdict: str    # a key of GAP_WORDS ("not_measured": no seed holds both)

    @property
    def ratio(self) -> float:
        """SPEN ÷ GPT perplexity at the mean Δ (exp of the mean log ratio: the geometric mean over seeds)."""
        return math.exp(self.delta.mean) if self.delta.n else math.nan

    @property
    def word(self) -> str:
        return verdict_word(self.verdict, self.delta.n, GAP_WORDS)

    @property
    def sentence(self) -> str:
        d = self.delta
        if d.n == 0:
            return f"{HEADLINE_WHAT}: not measured by these runs — no seed holds both SPEN linear and its GPT."
        if d.n < VERDICT_MIN_SEEDS:
            return (f"{HEADLINE_WHAT}: Δ = {verdict_number(d.mean)} nats/token (÷ {ratio_text(self.ratio)}) — "
                    f"{self.word}.")
        return (f"{HEADLINE_WHAT}: Δ = {verdict_number(d.mean)} nats/token (÷ {ratio_text(self.ratio)}), std "
                f"{verdict_number(d.std)} across {d.n} seeds (threshold {VERDICT_K:g} × std = "
                f"{verdict_number(VERDICT_K * d.std)}; paired t = {d.t:.2f} against {t_threshold(d.n):.2f}) — "
                f"{self.word}.")


def headline_verdict(runs: Iterable[Mapping]) -> HeadlineVerdict:
    """SPEN linear against its GPT, judged by the shared rule, from one row per finished run (the store's
    ``lm_final_losses``: model, predictor, attn_input, seed, loss, group_id).  A GPT pairs with the SPEN
    of its settings and seed; a GPT sized to another SPEN variant carries that variant's predictor and
    is not paired with SPEN linear."""
    held: dict[tuple[str, str, str], dict[Key, list[float]]] = {}
    for r in runs:
        loss = _number(r.get("loss"))
        if loss is None or r.get("seed") is None:
            continue
        variant = (r.get("model"), r.get("predictor"), r.get("attn_input"))
        held.setdefault(variant, {}).setdefault((r.get("group_id"), int(r["seed"])), []).append(loss)
    mean = {v: {k: math.fsum(ls) / len(ls) for k, ls in by.items()} for v, by in held.items()}
    d = paired(mean.get(HEADLINE_VARIANT, {}), mean.get(("gpt", *HEADLINE_VARIANT[1:]), {}))
    return HeadlineVerdict(d, judge(d) if d.n else "not_measured")


# -- the predictor ablation: the rule ------------------------------------------------------------------

VERDICT_RULE = (
    "**The rule.** Two variants are compared *paired by seed*: Δ = the variant's final validation loss − "
    "its reference's, formed within each seed both hold (runs of one seed draw the same batches in the same "
    "order), then averaged over those seeds. They differ *beyond the seeds' spread* when |mean Δ| > "
    f"{VERDICT_K:g} × the sample standard deviation of Δ across the seeds paired; that needs at least "
    f"{VERDICT_MIN_SEEDS} seeds paired. The paper claims that SPEN's attention predictors reading the current "
    "trace state do what the linear predictor does. **Reproduced**: every such attention predictor is within "
    "the spread of SPEN linear, *and* the power check passes: the raw-token control (attention over the raw "
    "past tokens, no EMA bottleneck) is better than the best state reader beyond the spread, so this budget "
    "can show a predictor's effect when there is one. **Not reproduced**: a state-reading attention predictor "
    "differs from SPEN linear beyond the spread. **Inconclusive at this budget**: the power check pairs fewer "
    "seeds than that, or the control is as flat as the EMA variants (the ablation has no power), or there is no "
    f"control to tell. **Not judged**: a state reader and SPEN linear share fewer than {VERDICT_MIN_SEEDS} "
    "seeds. Readers of past trace *states* are shown beside the rule, not in it: an EMA sequence can be "
    "undone, so a gain there would not contradict the paper."
)
VERDICT_WORDS = {**SHARED_WORDS, "inconclusive": "inconclusive at this budget", "untested": "not tested by these runs"}


@dataclass(frozen=True)
class Comparison:
    """One pair the rule reads: Δ = loss(variant) − loss(reference), paired by seed."""

    role: str          # "claim", "power check" or "beside the rule"
    variant: str       # labels (lm_variant_label)
    reference: str
    delta: Spread      # mean Δ (nats/token; negative: the variant is better), its std, the seeds paired

    @property
    def threshold(self) -> float:
        return VERDICT_K * self.delta.std

    @property
    def beyond(self) -> bool | None:
        """|mean Δ| > the threshold, strictly (None: too few seeds paired).  Variants equal on every
        seed (Δ = 0, no spread) are the same, which is what the claim asks, not "beyond"."""
        return self.delta.beyond


@dataclass(frozen=True)
class AblationVerdict:
    verdict: str                         # a key of VERDICT_WORDS
    sentence: str                        # the finding, computed from the numbers in ``comparisons``
    comparisons: tuple[Comparison, ...]  # claims, then the power check, then those beside the rule

    @property
    def word(self) -> str:
        if self.verdict == "not_judged":  # "not judged: 2 seeds", the fewest a claim comparison paired
            thin = [c.delta.n for c in self.comparisons if c.role == "claim" and c.beyond is None]
            return not_judged(min(thin, default=self.claim_seeds))
        return VERDICT_WORDS[self.verdict]

    @property
    def claim_seeds(self) -> int:
        """The fewest seeds any claim comparison paired (0 when there is none)."""
        return min((c.delta.n for c in self.comparisons if c.role == "claim"), default=0)


def _losses(runs: Iterable[Mapping]) -> dict[Variant, dict[Hashable, float]]:
    """Each SPEN variant's final loss by (settings, seed); two runs of one key are averaged."""
    held: dict[Variant, dict[Hashable, list[float]]] = {}
    for r in runs:
        predictor, attn_input, loss = r.get("predictor"), r.get("attn_input"), r.get("loss")
        if r.get("model") != "spen" or not isinstance(predictor, str) or not isinstance(attn_input, str):
            continue  # the GPT is not in the ablation; an unreadable config is not judged
        if loss is None or not math.isfinite(float(loss)):
            continue
        # Runs of different settings never pair, even at one seed: the key holds both.
        key = (r.get("group_id"), int(r["seed"]))
        held.setdefault((predictor, attn_input), {}).setdefault(key, []).append(float(loss))
    return {v: {k: math.fsum(ls) / len(ls) for k, ls in by_key.items()} for v, by_key in held.items()}


def ablation_verdict(runs: Iterable[Mapping]) -> AblationVerdict:
    """The predictor ablation judged by :data:`VERDICT_RULE` from one row per finished run (the store's
    ``lm_final_losses``: model, predictor, attn_input, seed, loss and the group_id of its settings; SPEN
    rows are read, the GPT's ignored).

    ``comparisons`` holds one :class:`Comparison` per pair judged: "claim" (an attention predictor
    reading the state against SPEN linear), "power check" (the best raw-token control against the
    best state reader, each the lowest mean loss of its kind) and "beside the rule" (a reader of past
    trace states against SPEN linear).
    """
    losses = _losses(runs)
    out: list[Comparison] = []

    def compare(role: str, key: Variant, ref: Variant) -> Comparison:
        c = Comparison(role, lm_variant_label("spen", *key), lm_variant_label("spen", *ref),
                       paired(losses[key], losses[ref]))
        out.append(c)
        return c

    def mean_loss(key: Variant) -> float:
        return spread(losses[key].values()).mean

    claim = [compare("claim", k, LINEAR) for k in sorted(losses) if k[1] == "state" and k != LINEAR
             and LINEAR in losses]
    state_keys = [k for k in losses if k[1] == "state"]
    tokens_keys = [k for k in losses if k[1] == "tokens"]
    power = None
    if state_keys and tokens_keys:
        power = compare("power check", min(tokens_keys, key=mean_loss), min(state_keys, key=mean_loss))
    for k in sorted(losses):
        if k[1] == "sequence" and LINEAR in losses:
            compare("beside the rule", k, LINEAR)
    return AblationVerdict(*_judged(claim, power, LINEAR in losses), tuple(out))


def _judged(claim: list[Comparison], power: Comparison | None, has_linear: bool) -> tuple[str, str]:
    """The verdict and its sentence from the claim comparisons and the power check."""
    n = verdict_number
    if not claim:
        missing = "an attention predictor reading the current state" if has_linear else "SPEN linear"
        return "untested", ("Not tested by these runs: the rule compares SPEN's attention predictors reading the "
                            f"current state with SPEN linear, and {missing} is missing.")
    differ = [c for c in claim if c.beyond]
    if differ:
        c = max(differ, key=lambda c: abs(c.delta.mean))
        return "not_reproduced", (
            f"Not reproduced: {c.variant} differs from SPEN linear by Δ = {n(c.delta.mean)} nats/token, beyond "
            f"{VERDICT_K:g} × the std of Δ across seeds ({n(c.threshold)}; {c.delta.n} seeds paired): the "
            "predictor is not irrelevant at this budget.")
    thin = [c for c in claim if c.beyond is None]
    if thin:
        c = min(thin, key=lambda c: c.delta.n)
        return "not_judged", (
            f"{not_judged(c.delta.n).capitalize()} paired — {c.variant} and SPEN linear share {c.delta.n} seed(s); "
            f"the rule judges on at least {VERDICT_MIN_SEEDS} seeds paired.")
    widest = max(claim, key=lambda c: abs(c.delta.mean) / c.threshold if c.threshold > 0 else 0.0)
    within = (f"every attention predictor reading the state is within the seeds' spread of SPEN linear "
              f"(largest: {widest.variant}, Δ = {n(widest.delta.mean)} against {n(widest.threshold)})")
    if power is None:
        return "inconclusive", (
            f"Inconclusive at this budget: {within}, but there is no raw-token control among these runs, so "
            "nothing shows that this budget could have told the predictors apart.")
    if power.beyond is None:
        return "inconclusive", (
            f"Inconclusive at this budget: {within}, but the power check pairs {power.delta.n} seed(s); it needs "
            f"at least {VERDICT_MIN_SEEDS}.")
    # The power claim is "the control is better": Δ' = loss(state reader) − loss(control) > 0.
    if judge(Spread(-power.delta.mean, power.delta.std, power.delta.n)) == "reproduced":
        return "reproduced", (
            f"Reproduced: {within}, while the raw-token control, {power.variant}, is better than the best "
            f"state reader ({power.reference}) by {n(-power.delta.mean)} nats/token, beyond "
            f"{n(power.threshold)}: the budget can show a predictor's effect, and the state readers show none.")
    how = "as flat as the EMA variants" if not power.beyond else "worse than the best state reader"
    return "inconclusive", (
        f"Inconclusive at this budget: {within}, but the raw-token control, {power.variant}, is {how} "
        f"(Δ = {n(power.delta.mean)} against {n(power.threshold)}): the ablation has no power at this budget, "
        "so its flatness says nothing about the predictors.")


# -- the scoreboard's lines (ema_core.scoreboard.Score): the same verdicts, in the board's one shape --

def headline_score(headline: HeadlineVerdict) -> Score:
    d = headline.delta
    return Score("content", "spen_below_gpt", plain(HEADLINE_WHAT), HEADLINE_PAPER,
                 (f"perplexity ÷ GPT {ratio_text(headline.ratio)} ({delta_text(d, 3, 'nats/token')})"
                  if d.n else "not measured"), d, outcome(headline.verdict, d.n), headline.word, headline.sentence)


def ablation_score(ablation: AblationVerdict) -> Score:
    claim = [c for c in ablation.comparisons if c.role == "claim"]
    # The ablation's claim is "no difference": its Δ on the board is the comparison farthest from 0
    # relative to its threshold, the one that decides the verdict.
    widest = max(claim, key=lambda c: abs(c.delta.mean) / c.threshold if c.threshold > 0 else math.inf,
                 default=None)
    d = widest.delta if widest is not None else Spread(math.nan, math.nan, 0)
    return Score(
        "content", "predictor_irrelevant",
        "Swapping SPEN's predictor for attention on the trace state changes nothing",
        "perplexity unchanged across predictors",
        (f"largest {delta_text(d, 4, 'nats/token')} ({widest.variant} − SPEN linear)" if widest is not None and d.n
         else "not measured"),
        d, outcome(ablation.verdict, d.n), ablation.word, ablation.sentence)


def scores(headline: HeadlineVerdict, ablation: AblationVerdict, gaps: Iterable[GapVerdict]) -> list[Score]:
    """The content study's claims in the order its page reads them: SPEN ÷ GPT, the ablation, the gap."""
    return [headline_score(headline), ablation_score(ablation), *gap_scores(gaps)]
