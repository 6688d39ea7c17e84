"""Where SPEN's gap to the GPT lives, among the token classes of the held-out loss
(:mod:`ema_core.lm.token_classes`).

The paper's argument is that a fixed-decay trace loses which token came when; zoology measured as much for
attention-free models (arXiv 2312.04927: 82 % of the gap to attention sits on recall tokens).  If so, the
gap concentrates on recall tokens and grows with their distance (:data:`GAP_PREDICTION`).  The claims that
test it, :data:`GAP_CLAIMS`, were fixed before any run was read, and each is judged by the shared rule
(:func:`gap_verdicts`): recall tokens against the rest, far recall against near (and at matched
positions), recall whose bigram is rare in training against common, and the part of the gap a free copy
mechanism closes on recall against the rest.

Read from the store's class sums (tokens and summed nats per run and class, each SPEN run paired with its
GPT by :mod:`ema_core.studies.content.shared`): :func:`class_gaps` (SPEN − its GPT per class, the share of
the whole gap each class carries, and the n-gram baselines of :mod:`ema_core.lm.ngram` on the same windows
beside them), :func:`variant_class_deltas` (each SPEN variant against SPEN linear per class) and
:func:`gap_scores` (the claims as the scoreboard's lines).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ema_core.lm.ngram import BASELINES, COPY_MIX
from ema_core.lm.token_classes import NOT_RECALL as REST_OF_RECALL, SPLITS, position_classes
from ema_core.scoreboard import Score, delta_text, outcome, plain
from ema_core.studies.content.shared import (ALL_TOKENS, GAP_WORDS, LINEAR, RECALL, Key, Sums, Variant, _Final, _add,
                                             _finals, _per_token, _spen_variants, _with_gpt, gap_variant,
                                             lm_variant_label, verdict_number)
from ema_core.verdicts import (VERDICT_K, VERDICT_MIN_SEEDS, Spread, judge, paired, spread, t_threshold,
                               verdict_word)

# -- the token classes ---------------------------------------------------------------------------------
#
# Everything here reads the final evaluation of the store's class rows (and, for the copy claim, the
# evaluation with the window's bigrams mixed in).

PARTITIONS = {s.partition: s.classes for s in SPLITS}  # the store's partition -> its classes, in their order
PARTITION_LABELS = {s.partition: s.label for s in SPLITS}


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
# to the classes of ema_core.lm.token_classes, so a change there cannot silently move them).  RECALL, every
# distance, is in shared.py: how the gap grows follows it too.
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
        return verdict_word(self.verdict, self.delta.n, GAP_WORDS)

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


def _of_variant(f: _Final, variant: Variant) -> dict[Key, Sums]:
    out: dict[Key, Sums] = {}
    for run_id, m in f.run.items():
        if m["model"] == "spen" and (m["predictor"], m["attn_input"]) == variant:
            _add(out.setdefault((m["group_id"], m["seed"]), {}), f.sums[run_id])
    return out


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


# -- the scoreboard's lines (ema_core.scoreboard.Score) ---------------------------------------------------

# Where the gap lives is not measured in the paper: its argument predicts it, as zoology found it for
# attention-free models (82 % of the gap on recall tokens).
GAP_PAPER = "not measured there; its argument predicts it"


def gap_scores(gaps: Iterable[GapVerdict]) -> list[Score]:
    return [Score("content", v.claim.key, plain(v.claim.what), GAP_PAPER, delta_text(v.delta, 4, "nats/token"), v.delta,
                  outcome(v.verdict, v.delta.n), v.word, v.sentence) for v in gaps]
