"""The content study's verdicts: the predictor ablation (PAPER.md §3) and where SPEN's gap to the GPT
lives among the token classes of the held-out loss, each judged by the shared rule.

Pure arithmetic on one row per finished run (model, predictor, attn_input, seed, loss; no torch, no
pandas, no store), so that the page, the store and a benchmark judge the same runs the same way.
The names the study shows its variants by are here too, where the store and the page read them
without loading Altair or torch.

Every comparison is a difference Δ = loss(variant) − loss(reference) formed within each seed both
variants hold (runs of one seed draw the same batches in the same order), then averaged over those
seeds; its spread is the sample std of Δ across them (:func:`ema_core.verdicts.paired`).

The token classes (:mod:`ema_core.lm.token_classes`) are read from the store's class sums (tokens and
summed nats per run and class): :func:`class_gaps` (SPEN − its GPT per class, and the share of the
whole gap each class carries), :func:`gap_verdicts` (the pre-registered claims ``GAP_CLAIMS``) and
:func:`variant_class_deltas` (each SPEN variant against SPEN linear per class).  :func:`gap_growth` reads
the periodic evaluations of the same rows: SPEN ÷ GPT against training tokens, fitted on the learning
rate's plateau and extrapolated to the paper's budget, an extrapolation that no rule judges.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Mapping

from ema_core import palette
from ema_core.lm.ngram import BASELINES, COPY_MIX
from ema_core.lm.token_classes import CLASSES, NOT_RECALL as REST_OF_RECALL, SPLITS, position_classes
from ema_core.schedule import peak_steps
from ema_core.tables import number_text
from ema_core.scoreboard import Score, delta_text, outcome, plain
from ema_core.verdicts import (VERDICT_K, VERDICT_MIN_SEEDS, Spread, judge, not_judged, one_sided_p, paired, spread,
                               t_threshold)
from ema_core.verdicts import VERDICT_WORDS as SHARED_WORDS

# -- the variants' names -------------------------------------------------------------------------------

# The labels the charts, the tables and the verdict give the settings of a SPEN run.
PREDICTOR_LABELS = {"linear": "linear", "linear_attention": "linear attention",
                    "softmax_attention": "softmax attention"}
# What an attention predictor reads.
ATTN_INPUT_LABELS = {"state": "current trace state", "sequence": "past trace states", "tokens": "raw tokens (control)"}


def lm_variant_label(model: str | None, predictor: str | None, attn_input: str | None) -> str:
    """``"GPT"``, ``"SPEN linear"``, ``"SPEN softmax attention (tokens)"``; a GPT sized to another
    SPEN than the linear one says which.

    >>> lm_variant_label("gpt", "linear_attention", "sequence")
    'GPT (sized to SPEN linear attention (sequence))'
    """
    def text(v, default: str) -> str:  # a missing field (None, or NaN from a frame) reads as its default
        return default if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    model, predictor, attn_input = text(model, "?"), text(predictor, "linear"), text(attn_input, "state")
    if (model, predictor, attn_input) in palette.LM_VARIANTS:
        return palette.LM_VARIANTS[(model, predictor, attn_input)][0]
    if model == "gpt":
        return f"GPT (sized to {lm_variant_label('spen', predictor, attn_input)})"
    return f"{model.upper()} {PREDICTOR_LABELS.get(predictor, predictor)} ({attn_input})"


# -- the rule ------------------------------------------------------------------------------------------

VERDICT_DECIMALS = 4     # every number of the verdict, in its table and its sentence alike
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
LINEAR = ("linear", "state")  # the reference every state reader is held against


def verdict_number(x: float) -> str:
    """A number of the verdict as its table and its sentence both show it."""
    return number_text(float(x), VERDICT_DECIMALS)


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


Variant = tuple[str, str]  # (predictor, attn_input) of a SPEN


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


# -- where the gap lives: token classes ----------------------------------------------------------------
#
# Rows: the store's ``lm_token_class_pairs`` (one per run, evaluation, step, partition and class: tokens
# and the loss summed in nats, with the run's group_id, seed and the run id of the GPT its final table
# divides it by).  Everything below reads the final evaluation only; sums, never means, are pooled.

PARTITIONS = {s.partition: s.classes for s in SPLITS}  # the store's partition -> its classes, in their order
PARTITION_LABELS = {s.partition: s.label for s in SPLITS}
ALL_TOKENS = "all tokens"  # the row of every class of a partition pooled: the run's whole held-out loss


def class_label(name: str) -> str:
    """``"recall 1–16"``, ``"recall 257+"``, ``"recall 65–256 at 129–256"``, ``"recall, bigram seen 1–9× in
    training"``, ``"first"``, ``"rare"``: how charts and tables name a class."""
    def span(text: str) -> str:
        return text.replace("_plus", "+").replace("_", "–")

    if name == REST_OF_RECALL:
        return "not recall"
    if name.startswith("recall_bigram_"):
        return f"recall, bigram seen {span(name[len('recall_bigram_'):])}× in training"
    if name.startswith("recall_"):
        distance, _, position = name[len("recall_"):].partition("_at_")
        return f"recall {span(distance)}" + (f" at {span(position)}" if position else "")
    return name


# The pre-registered rule of where the gap should live (fixed before any run was read; a test holds them
# to the classes of ema_core.lm.token_classes, so a change there cannot silently move them).
RECALL = ("recall_1_16", "recall_17_64", "recall_65_256", "recall_257_plus")  # every distance
NOT_RECALL = ("first", "other")
FAR_RECALL = ("recall_65_256", "recall_257_plus")  # more than 64 tokens back
NEAR_RECALL = ("recall_1_16",)
# Position-matched: the same buckets, only at positions where a far recall can occur (past 64 tokens).
MATCHED_FROM = 65
FAR_RECALL_MATCHED = position_classes(FAR_RECALL, MATCHED_FROM)
NEAR_RECALL_MATCHED = position_classes(NEAR_RECALL, MATCHED_FROM)
RARE_BIGRAM_RECALL = ("recall_bigram_0", "recall_bigram_1_9")  # a bigram seen fewer than 10 times in training
COMMON_BIGRAM_RECALL = ("recall_bigram_10_plus",)
# The paper's argument (a fixed-decay trace loses which token came when), as zoology measures it
# (arXiv 2312.04927: 82 % of the gap between attention-free models and attention sits on recall tokens).
GAP_PREDICTION = "the gap concentrates on recall tokens and grows with their distance"


@dataclass(frozen=True)
class GapClaim:
    key: str
    what: str                 # the claim in words, with the Δ it is judged by
    paper: str                # the part of GAP_PREDICTION it tests
    more: tuple[str, ...]     # classes pooled (Σ loss / Σ tokens) whose gap per token should be larger
    less: tuple[str, ...]     # classes pooled it is held against
    needs: str                # the tokens a seed must hold for Δ, for the sentence when none does
    partition: str = "class"  # the store's partition both pools are classes of
    # An evaluation whose gap is subtracted from the final one's in each pool: the claim is then about the
    # part of the gap that evaluation closes (COPY_MIX: what a free copy mechanism buys).
    closed_by: str | None = None


GAP_CLAIMS: tuple[GapClaim, ...] = (
    GapClaim("concentrates", "The gap concentrates on recall tokens (gap per token on recall tokens, every "
             "distance pooled − on first and other tokens pooled, > 0)", "the gap concentrates on recall tokens",
             RECALL, NOT_RECALL,
             "both recall tokens and first or other tokens"),
    GapClaim("grows_with_distance", "The gap grows with the recall distance (gap per token on recall tokens more "
             "than 64 back − on recall tokens 1–16 back, > 0)", "and grows with their distance",
             FAR_RECALL, NEAR_RECALL,
             "recall tokens both more than 64 back (evaluation windows longer than 65 tokens: train.seq_len) and "
             "1–16 back"),
    GapClaim("grows_with_distance_matched", "The gap grows with the recall distance at matched positions (gap per "
             f"token on recall tokens more than 64 back − on recall tokens 1–16 back, both at position ≥ "
             f"{MATCHED_FROM}, > 0)", "and grows with their distance",
             FAR_RECALL_MATCHED, NEAR_RECALL_MATCHED,
             f"recall tokens both more than 64 back and 1–16 back at position ≥ {MATCHED_FROM}",
             partition="recall_by_position"),
    GapClaim("rare_bigram", "The gap is larger on recall tokens whose bigram is rare in training (gap per token on "
             "recall tokens whose bigram occurs fewer than 10 times in the training split − on those whose bigram "
             "occurs 10 or more times, > 0)", "the gap concentrates on recall tokens (those the training text "
             "cannot supply)",
             RARE_BIGRAM_RECALL, COMMON_BIGRAM_RECALL,
             "recall tokens with both a rare and a common training bigram (runs stored before the split have none)",
             partition="recall_by_bigram_count"),
    GapClaim("copy_closes_recall", "A free copy mechanism closes more of the gap on recall tokens than on the rest "
             "(gap closed per token, final − with the window's bigrams mixed into both models, on recall tokens "
             "− on first and other tokens, > 0)", "a trace that loses which token came when (what copying restores)",
             RECALL, NOT_RECALL,
             "both recall and other tokens in both models' copy-mix evaluation (runs stored before it have none)",
             closed_by=COPY_MIX),
)
GAP_RULE = (
    "**The rule.** The gap of a class is SPEN's loss per token on it − the GPT's, formed within each seed (the GPT "
    "of the same seed and settings, as in the final table), on the final evaluation; a pool of classes sums their "
    "losses and tokens first. Each claim's Δ is one seed's gap per token on one pool − on another, judged as every "
    f"claim here: beyond the seeds' spread when |mean Δ| > {VERDICT_K:g} × the sample std of Δ across the seeds, "
    f"on at least {VERDICT_MIN_SEEDS} seeds. **Reproduced**: Δ > 0 beyond the spread; **not reproduced**: Δ < 0 "
    "beyond it; **inconclusive**: within it; **not measured**: no seed holds tokens of both pools."
)
GAP_WORDS = {**SHARED_WORDS, "not_measured": "not measured"}


def _number(v) -> float | None:
    """A finite float, else None (a frame's NaN, a missing value)."""
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


Sums = dict[tuple[str, str], list[float]]  # (partition, class) -> [tokens, summed nats]
Key = tuple[Hashable, int]                 # (group_id, seed): the runs one seed pairs


@dataclass(frozen=True)
class _Final:
    run: dict[str, dict]   # run id -> its labels (model, predictor, attn_input, group_id, seed, gpt_run_id)
    sums: dict[str, Sums]  # run id -> its final class sums (or, for one step of the periodic ones, that step's)


@dataclass(frozen=True)
class _Evaluations:
    run: dict[str, dict]                # run id -> its labels, and its schedule's peak steps ("peak")
    sums: dict[str, dict[int, Sums]]    # run id -> step -> class sums
    seen: dict[str, dict[int, float]]   # run id -> step -> training tokens seen by then (None: not known)

    def at(self, step: int) -> _Final:
        """The runs evaluated at ``step``, with that evaluation's sums: what the final readers pair."""
        held = {r: by[step] for r, by in self.sums.items() if step in by}
        return _Final({r: m for r, m in self.run.items() if r in held}, held)


def _evaluations(rows: Iterable[Mapping], evaluation: str) -> _Evaluations:
    """The rows of one kind of evaluation ("final" or "periodic"), summed per run, step and class: the one
    parser every reader of the class rows goes through."""
    run: dict[str, dict] = {}
    sums: dict[str, dict[int, Sums]] = {}
    seen: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.get("evaluation") != evaluation or _number(r.get("seed")) is None:
            continue
        tokens, loss = _number(r.get("tokens")), _number(r.get("loss"))
        if tokens is None or (loss is None and tokens > 0):
            continue  # an unreadable row is left out, never read as zero nats
        gpt = r.get("gpt_run_id")
        run.setdefault(r["run_id"], {"model": r.get("model"), "predictor": r.get("predictor"),
                                     "attn_input": r.get("attn_input"), "group_id": r.get("group_id"),
                                     "seed": int(r["seed"]), "gpt_run_id": gpt if isinstance(gpt, str) else None,
                                     "peak": _peak(r), "train_tokens": _number(r.get("train_tokens")),
                                     # the group less its length (rows stored without one: the group itself)
                                     "family": r.get("family_id") or r.get("group_id"),
                                     "steps": _number(r.get("steps")), "size": r.get("size"),
                                     "corpus": r.get("corpus"), "params": _number(r.get("params"))})
        step = _number(r.get("step"))
        step = int(step) if step is not None else -1
        s = sums.setdefault(r["run_id"], {}).setdefault(step, {}).setdefault(
            (r.get("partition"), r.get("class")), [0.0, 0.0])
        s[0] += tokens
        s[1] += loss or 0.0
        seen.setdefault(r["run_id"], {})[step] = _number(r.get("tokens_seen"))
    return _Evaluations(run, sums, seen)


def _peak(r: Mapping) -> range | None:
    """The optimiser steps the run trained at its peak rate, from its ``train`` settings; None when the row
    does not hold them."""
    steps, warmup, frac = _number(r.get("steps")), _number(r.get("warmup")), _number(r.get("decay_frac"))
    if steps is None or warmup is None:
        return None
    schedule = r.get("schedule")
    # A run stored before the schedule was a setting trained on the one schedule there was, a cosine.
    schedule = schedule if isinstance(schedule, str) else "cosine"
    return peak_steps(schedule, int(steps), int(warmup), frac if frac is not None else 0.0)


def _finals(rows: Iterable[Mapping], evaluation: str = "final") -> _Final:
    """Each run's one evaluation of the kind ``evaluation``: its final, or an n-gram baseline's on the final
    evaluation's windows ("bigram", "cache")."""
    ev = _evaluations(rows, evaluation)
    sums: dict[str, Sums] = {}
    for run_id, by_step in ev.sums.items():
        for step_sums in by_step.values():  # one final evaluation a run (at its last step)
            _add(sums.setdefault(run_id, {}), step_sums)
    return _Final(ev.run, sums)


def _add(into: Sums, sums: Sums) -> None:
    for k, (t, l) in sums.items():
        s = into.setdefault(k, [0.0, 0.0])
        s[0] += t
        s[1] += l


def _per_token(sums: Sums, partition: str, names: Iterable[str]) -> float | None:
    """Σ nats / Σ tokens over ``names`` (a pool); None when the pool holds no token."""
    tokens = math.fsum(sums.get((partition, n), (0.0, 0.0))[0] for n in names)
    loss = math.fsum(sums.get((partition, n), (0.0, 0.0))[1] for n in names)
    return loss / tokens if tokens > 0 else None


def _spen_variants(f: _Final) -> list[Variant]:
    """The SPEN variants present, in the page's order (LM_VARIANTS), then any other."""
    present = {(m["predictor"], m["attn_input"]) for m in f.run.values()
               if m["model"] == "spen" and isinstance(m["predictor"], str) and isinstance(m["attn_input"], str)}
    known = [(p, a) for (model, p, a) in palette.LM_VARIANTS if model == "spen" and (p, a) in present]
    return known + sorted(present - set(known))


def _with_gpt(f: _Final, variant: Variant) -> dict[Key, tuple[Sums, Sums]]:
    """(group, seed) -> (the SPEN variant's sums, its GPT's), over the SPEN runs the store paired with a
    GPT whose rows are here.  Two runs of one key (a setting that changes no number) add up on both sides."""
    out: dict[Key, tuple[Sums, Sums]] = {}
    for run_id, m in f.run.items():
        gpt = m["gpt_run_id"]
        if m["model"] != "spen" or (m["predictor"], m["attn_input"]) != variant or gpt not in f.sums:
            continue
        spen_sums, gpt_sums = out.setdefault((m["group_id"], m["seed"]), ({}, {}))
        _add(spen_sums, f.sums[run_id])
        _add(gpt_sums, f.sums[gpt])
    return out


def _of_variant(f: _Final, variant: Variant) -> dict[Key, Sums]:
    out: dict[Key, Sums] = {}
    for run_id, m in f.run.items():
        if m["model"] == "spen" and (m["predictor"], m["attn_input"]) == variant:
            _add(out.setdefault((m["group_id"], m["seed"]), {}), f.sums[run_id])
    return out


def gap_variant(rows: Iterable[Mapping]) -> Variant | None:
    """The SPEN variant whose gap to the GPT the section shows and judges: SPEN linear (the paper's SPEN,
    as the paper table reads it) when a run of it has its GPT here, else the first SPEN variant that has."""
    f = _finals(rows)
    paired_variants = [v for v in _spen_variants(f) if _with_gpt(f, v)]
    return LINEAR if LINEAR in paired_variants else (paired_variants[0] if paired_variants else None)


@dataclass(frozen=True)
class ClassGap:
    """One class of a partition (or ALL_TOKENS, every class pooled), SPEN beside its GPT across seeds."""

    name: str           # the store's class name, or ALL_TOKENS
    tokens: float       # tokens scored (the same held-out text on every seed: mean over the seeds)
    token_share: float  # of all tokens of the partition (NaN when it holds none)
    spen: Spread        # SPEN's loss per token (nats)
    gpt: Spread         # the GPT's
    gap: Spread         # SPEN − GPT within each seed (negative: SPEN is better there)
    share: Spread       # tokens · gap / Σ over the partition's classes of tokens · gap, per seed

    @property
    def label(self) -> str:
        return class_label(self.name)


@dataclass(frozen=True)
class GapSplit:
    variant: str                    # the SPEN's label (lm_variant_label)
    partition: str                  # "class" or "band"
    classes: tuple[ClassGap, ...]   # the partition's classes in their order
    overall: ClassGap               # every class pooled (its share is 1 wherever one is defined)
    # The n-gram baselines (ema_core.lm.ngram) on the same windows: baseline -> class name (or ALL_TOKENS)
    # -> loss per token, pooled over the seeds' GPT runs (None: no tokens); empty for runs stored before them.
    baselines: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)

    @property
    def seeds(self) -> int:
        return self.overall.gap.n


def class_gaps(rows: Iterable[Mapping], partition: str = "class", variant: Variant | None = None,
               evaluation: str = "final") -> GapSplit | None:
    """Where the gap between a SPEN variant (default :func:`gap_variant`) and its GPT lives, per class of
    ``partition`` on the final evaluation: each model's loss per token, the gap, and the share of the whole
    gap each class carries, each formed within a seed (group_id, seed) and then across seeds.

    share_c = tokens_c · gap_c / Σ_c tokens_c · gap_c, which sums to 1 over a partition because the class
    sums add up to the whole loss.  A class with no tokens has no loss per token and no gap (None, left out
    of the spread) and carries a share of 0; a seed whose whole gap is exactly 0 has no shares.  None when
    no SPEN run of the variant has its GPT among the rows with this partition's classes.
    ``evaluation`` COPY_MIX reads both models with the window's bigrams mixed in instead of the final
    evaluation (the baselines stay empty there: they stand beside the final gap).
    """
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
    names = PARTITIONS[partition]
    rows = list(rows)
    f = _finals(rows, evaluation)
    variant = variant if variant is not None else gap_variant(rows)
    pairs = _with_gpt(f, variant) if variant is not None else {}
    if not pairs:
        return None
    per: dict[str, dict[str, list]] = {n: {k: [] for k in ("tokens", "spen", "gpt", "gap", "share")}
                                       for n in (*names, ALL_TOKENS)}
    for spen_sums, gpt_sums in pairs.values():
        if not any(k[0] == partition for k in spen_sums):
            continue  # a run without this partition's rows is not a seed of it (no zeros counted)
        weighted: dict[str, float] = {}
        for n in names:
            tokens = spen_sums.get((partition, n), (0.0, 0.0))[0]
            s, g = _per_token(spen_sums, partition, (n,)), _per_token(gpt_sums, partition, (n,))
            gap = s - g if s is not None and g is not None else None
            per[n]["tokens"].append(tokens)
            per[n]["spen"].append(s)
            per[n]["gpt"].append(g)
            per[n]["gap"].append(gap)
            if tokens == 0:
                weighted[n] = 0.0  # an empty class carries nothing
            elif gap is not None:
                weighted[n] = tokens * gap
        whole = math.fsum(weighted.values())
        for n in names:
            per[n]["share"].append(weighted[n] / whole if n in weighted and whole != 0 else None)
        s, g = _per_token(spen_sums, partition, names), _per_token(gpt_sums, partition, names)
        per[ALL_TOKENS]["tokens"].append(math.fsum(spen_sums.get((partition, n), (0.0, 0.0))[0] for n in names))
        per[ALL_TOKENS]["spen"].append(s)
        per[ALL_TOKENS]["gpt"].append(g)
        per[ALL_TOKENS]["gap"].append(s - g if s is not None and g is not None else None)
        per[ALL_TOKENS]["share"].append(1.0 if whole != 0 else None)
    if not per[ALL_TOKENS]["tokens"]:
        return None  # no SPEN with its GPT holds this partition
    total = spread(per[ALL_TOKENS]["tokens"]).mean

    def row(n: str) -> ClassGap:
        p = per[n]
        tokens = spread(p["tokens"]).mean
        return ClassGap(n, tokens, tokens / total if total > 0 else math.nan, spread(p["spen"]), spread(p["gpt"]),
                        spread(p["gap"]), spread(p["share"]))

    return GapSplit(lm_variant_label("spen", *variant), partition, tuple(row(n) for n in names), row(ALL_TOKENS),
                    _baselines(rows, f, variant, partition) if evaluation == "final" else {})


def _baselines(rows: Iterable[Mapping], f: _Final, variant: Variant, partition: str) -> dict[str, dict]:
    """Each n-gram baseline's loss per token per class, from the baseline rows of the GPT runs the gap pairs
    (every run of a group scores the same windows, so the GPT's rows are the section's)."""
    gpts = {m["gpt_run_id"] for m in f.run.values()
            if m["model"] == "spen" and (m["predictor"], m["attn_input"]) == variant and m["gpt_run_id"] in f.sums}
    rows = list(rows)
    out: dict[str, dict] = {}
    for name in BASELINES:
        b = _finals(rows, name)
        pooled: Sums = {}
        for run_id in gpts & set(b.sums):
            _add(pooled, b.sums[run_id])
        if not any(k[0] == partition for k in pooled):
            continue
        names = PARTITIONS[partition]
        out[name] = {**{n: _per_token(pooled, partition, (n,)) for n in names},
                     ALL_TOKENS: _per_token(pooled, partition, names)}
    return out


@dataclass(frozen=True)
class GapVerdict:
    claim: GapClaim
    variant: str    # the SPEN judged (lm_variant_label)
    delta: Spread   # per seed: the gap per token on claim.more − on claim.less (nats/token)
    verdict: str    # a key of GAP_WORDS

    @property
    def word(self) -> str:
        return not_judged(self.delta.n) if self.verdict == "not_judged" else GAP_WORDS[self.verdict]

    @property
    def threshold(self) -> float:
        return VERDICT_K * self.delta.std

    @property
    def sentence(self) -> str:
        d, what = self.delta, self.claim.what
        if d.n == 0:
            return (f"{what}: not measured by these runs — no seed of {self.variant} with its GPT holds "
                    f"{self.claim.needs}.")
        if d.n < VERDICT_MIN_SEEDS:
            return f"{what}: Δ = {verdict_number(d.mean)} nats/token ({self.variant}) — {self.word}."
        return (f"{what}: Δ = {verdict_number(d.mean)} nats/token ({self.variant}), std {verdict_number(d.std)} "
                f"across {d.n} seeds (threshold {VERDICT_K:g} × std = {verdict_number(self.threshold)}; paired "
                f"t = {d.t:.2f} against {t_threshold(d.n):.2f}) — {self.word}.")


def _gap(spen_sums: Sums, gpt_sums: Sums, partition: str, pool: tuple[str, ...]) -> float | None:
    """SPEN's loss per token on a pool − the GPT's; None where either holds no token of it."""
    s, g = _per_token(spen_sums, partition, pool), _per_token(gpt_sums, partition, pool)
    return s - g if s is not None and g is not None else None


def gap_verdicts(rows: Iterable[Mapping], variant: Variant | None = None) -> list[GapVerdict]:
    """Each of GAP_CLAIMS judged by the shared rule for a SPEN variant (default :func:`gap_variant`)
    against its GPT, from the final evaluation's classes (and, for a claim ``closed_by`` another
    evaluation, that one's); empty when no SPEN run has its GPT here."""
    rows = list(rows)
    f = _finals(rows)
    variant = variant if variant is not None else gap_variant(rows)
    pairs = _with_gpt(f, variant) if variant is not None else {}
    if not pairs:
        return []
    closing = {name: _with_gpt(_finals(rows, name), variant) for name in {c.closed_by for c in GAP_CLAIMS} - {None}}
    out = []
    for c in GAP_CLAIMS:
        deltas = []
        for key, (spen_sums, gpt_sums) in pairs.items():
            gaps = [_gap(spen_sums, gpt_sums, c.partition, pool) for pool in (c.more, c.less)]
            if c.closed_by is not None:
                spen_mix, gpt_mix = closing[c.closed_by].get(key, ({}, {}))
                after = [_gap(spen_mix, gpt_mix, c.partition, pool) for pool in (c.more, c.less)]
                gaps = [g - a if g is not None and a is not None else None for g, a in zip(gaps, after)]
            if None not in gaps:
                deltas.append(gaps[0] - gaps[1])
        d = spread(deltas)
        out.append(GapVerdict(c, lm_variant_label("spen", *variant), d, judge(d) if d.n else "not_measured"))
    return out


@dataclass(frozen=True)
class VariantClassDelta:
    """A SPEN variant's loss per token minus SPEN linear's, within each seed, per class and pooled."""

    variant: str                       # lm_variant_label
    by_class: tuple[tuple[str, Spread], ...]  # (class name, Δ), the partition's classes in order
    overall: Spread                    # every class pooled: the whole held-out loss

    @property
    def seeds(self) -> int:
        return self.overall.n


def variant_class_deltas(rows: Iterable[Mapping], partition: str = "class") -> list[VariantClassDelta]:
    """Every SPEN variant other than SPEN linear against SPEN linear (the ablation's reference), per class
    of ``partition`` on the final evaluation: Δ = the variant's loss per token − linear's, formed within each
    (settings, seed) both hold, then across seeds (negative: the variant is better there).  Empty without
    SPEN linear."""
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
    names = PARTITIONS[partition]
    f = _finals(rows)
    reference = _of_variant(f, LINEAR)
    if not reference:
        return []
    out = []
    for v in _spen_variants(f):
        if v == LINEAR:
            continue
        mine = _of_variant(f, v)

        def delta(pool: tuple[str, ...]) -> Spread:
            return paired({k: _per_token(s, partition, pool) for k, s in mine.items()},
                          {k: _per_token(s, partition, pool) for k, s in reference.items()})

        out.append(VariantClassDelta(lm_variant_label("spen", *v), tuple((n, delta((n,))) for n in names),
                                     delta(tuple(names))))
    return out


# -- how the gap grows: SPEN ÷ GPT against training tokens -------------------------------------------------
#
# The periodic evaluations of the same rows, paired as the final ones are (each SPEN run with the GPT the
# store picked for it, at the same step), fitted against the training tokens seen, and extrapolated to the
# paper's budget.  An extrapolation, never a verdict: nothing here goes through the shared rule.

# The paper's numbers (PAPER.md §3): C4 perplexity 260 against GPT-2 Small's 33, at 130M parameters after
# 8B training tokens of FineWeb-Edu.
PAPER_SPEN_PPL, PAPER_GPT_PPL = 260, 33
PAPER_RATIO = PAPER_SPEN_PPL / PAPER_GPT_PPL  # 7.9
PAPER_TOKENS, PAPER_PARAMS = 8e9, 130e6
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


def ratio_text(r: float) -> str:
    """A perplexity ratio as the statement and the fit's table write it: two decimals (``"1.59"``)."""
    return f"{r:,.2f}" if r < 1000 else f"{r:,.0f}"


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
        return not_judged(self.delta.n) if self.verdict == "not_judged" else GAP_WORDS[self.verdict]

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


def gap_scores(gaps: Iterable[GapVerdict]) -> list[Score]:
    return [Score("content", v.claim.key, plain(v.claim.what), GAP_PAPER, delta_text(v.delta, 4, "nats/token"), v.delta,
                  outcome(v.verdict, v.delta.n), v.word, v.sentence) for v in gaps]


def scores(headline: HeadlineVerdict, ablation: AblationVerdict, gaps: Iterable[GapVerdict]) -> list[Score]:
    """The content study's claims in the order its page reads them: SPEN ÷ GPT, the ablation, the gap."""
    return [headline_score(headline), ablation_score(ablation), *gap_scores(gaps)]


# Where the gap lives is not measured in the paper: its argument predicts it, as zoology found it for
# attention-free models (82 % of the gap on recall tokens).
GAP_PAPER = "not measured there; its argument predicts it"
