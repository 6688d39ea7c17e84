"""What the content study's sub-studies share: the headline and the predictor ablation
(:mod:`ema_core.studies.content.findings`), where the gap lives (:mod:`ema_core.studies.content.gap`)
and how it grows (:mod:`ema_core.studies.content.growth`).

That is the names the study shows its variants by, the paper's numbers, how a verdict writes its numbers
and its words, and the one reading of the store's class rows that pairs each SPEN run with its GPT, by
seed, as the final table does.  Each is declared once, here, so that the three judge and say the same
runs alike.

Pure arithmetic on the store's rows (no torch, no pandas, no store): the store and the page read the
names here without loading Altair or torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

from ema_core import palette
from ema_core.schedule import peak_steps
from ema_core.tables import number_text
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


Variant = tuple[str, str]  # (predictor, attn_input) of a SPEN
LINEAR = ("linear", "state")  # SPEN linear: the paper's SPEN, the reference every state reader is held against


# -- the paper's numbers -------------------------------------------------------------------------------

# The paper's numbers (PAPER.md §3): C4 perplexity 260 against GPT-2 Small's 33, at 130M parameters after
# 8B training tokens of FineWeb-Edu.
PAPER_SPEN_PPL, PAPER_GPT_PPL = 260, 33
PAPER_RATIO = PAPER_SPEN_PPL / PAPER_GPT_PPL  # 7.9
PAPER_TOKENS, PAPER_PARAMS = 8e9, 130e6


def ratio_text(r: float) -> str:
    """A perplexity ratio as the statements and the tables write it: two decimals (``"1.59"``)."""
    return f"{r:,.2f}" if r < 1000 else f"{r:,.0f}"


# -- how a verdict writes its numbers and words ----------------------------------------------------------

VERDICT_DECIMALS = 4     # every number of the verdict, in its table and its sentence alike


def verdict_number(x: float) -> str:
    """A number of the verdict as its table and its sentence both show it."""
    return number_text(float(x), VERDICT_DECIMALS)


# The words of a claim that a run may not measure at all (no seed holds both sides): the headline's and
# the gap's.
GAP_WORDS = {**SHARED_WORDS, "not_measured": "not measured"}


# -- the class rows -------------------------------------------------------------------------------------
#
# Rows: the store's ``lm_token_class_pairs`` (one per run, evaluation, step, partition and class: tokens
# and the loss summed in nats, with the run's group_id, seed and the run id of the GPT its final table
# divides it by).  Where the gap lives reads the final evaluation; how it grows, the periodic ones; sums,
# never means, are pooled.

ALL_TOKENS = "all tokens"  # the row of every class of a partition pooled: the run's whole held-out loss
# The recall classes, every distance: the pool the gap's claims hold against the rest, and growth follows.
RECALL = ("recall_1_16", "recall_17_64", "recall_65_256", "recall_257_plus")


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


def gap_variant(rows: Iterable[Mapping]) -> Variant | None:
    """The SPEN variant whose gap to the GPT the section shows and judges: SPEN linear (the paper's SPEN,
    as the paper table reads it) when a run of it has its GPT here, else the first SPEN variant that has."""
    f = _finals(rows)
    paired_variants = [v for v in _spen_variants(f) if _with_gpt(f, v)]
    return LINEAR if LINEAR in paired_variants else (paired_variants[0] if paired_variants else None)
