"""The content study's queries (PAPER.md §3): language-model runs, their evaluation, training curves and
the predictor ablation, SPEN beside the same-size GPT."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ema_core.config import nest
from ema_core.lm.ngram import BASELINES, COPY_MIX
from ema_core.lm.token_classes import SPLITS
from ema_core.studies.content import KIND
from ema_core.studies.content.findings import HEADLINE_VARIANT, ablation_verdict, headline_verdict, scores
from ema_core.studies.content.gap import gap_verdicts

from . import export
from .queries import (RUN_FILTER, RunIds, RunTable, across_runs, config_without_seed, id_list, query_frame,
                      register_run_table)
from .scoreboard import Judged, best_group

# A variant is (model, predictor, attn_input) read from the config: a GPT keeps the predictor and
# attention input of the SPEN it was sized to.  Runs are *comparable* when their configs agree once
# the variant, the seed and the settings that cannot change a number are set aside.

LM_VARIANT_FIELDS = ("model", "predictor", "attn_input", "seed", "device", "threads", "train.log_every",
                     "train.checkpoint_every")
# A JSON merge patch (RFC 7396) that deletes those fields: what is left is the comparable config.  The
# patch is nested as the config is (a merge patch recurses: {"train": {"log_every": null}} deletes
# train.log_every and keeps the rest of train).
# data.doc_sep came later than the runs of older code, whose stored configs lack it: for Austen it
# changes nothing (one document per novel whatever it says), so it is left out there; elsewhere a
# missing one reads as what the older code did (a .txt file was one document: "none").  It is
# dropped with the rest, then put back last, so that its place in the text (which the group's hash
# reads) is the same whether the run stored it or not.
_LM_DOC_SEP = """CASE WHEN r.config->'data'->>'corpus' = 'austen' THEN '{}'::JSON
                      ELSE json_object('data', json_object('doc_sep', coalesce(r.config->'data'->>'doc_sep', 'none')))
                 END"""
# train.lr is compared as the config says it: "auto" (each model at the rate chosen for it, recorded
# in the run's summary) groups SPEN with the GPT at its own rate; a number groups with that number.
_LM_COMPARABLE = f"json_merge_patch(json_merge_patch(r.config, $drop), {_LM_DOC_SEP})::VARCHAR"


def _drop_patch(paths) -> str:
    return json.dumps(nest(dict.fromkeys(paths)))  # {"train": {"log_every": null}, …}


_LM_DROP = _drop_patch((*LM_VARIANT_FIELDS, "data.doc_sep"))
# A family is a group less its number of steps: wsd runs of one family that differ only in length share
# their plateau, and each one's final evaluation is an annealed point of the family's growth curve.
_LM_STEPS_DROP = _drop_patch(("train.steps",))
_LM_FAMILY = f"left(md5(json_merge_patch(({_LM_COMPARABLE})::JSON, '{_LM_STEPS_DROP}')::VARCHAR), 8)"
# The order the class rows come in: partitions as SPLITS lists them, each one's classes in their own order
# (not the alphabet's), keyed "partition/class" since two partitions share the name "not_recall".
_CLASS_ORDER = {"partitions": [s.partition for s in SPLITS],
                "classes": [f"{s.partition}/{c}" for s in SPLITS for c in s.classes]}
# Evaluations likewise: the curve's, the final, then each baseline's as a run writes them.
_EVALUATION_ORDER = {"evaluations": ["periodic", "final", *BASELINES, COPY_MIX]}
_LM_ORDER = ("list_position(['gpt', 'spen'], {p}model), list_position(['linear', 'linear_attention', "
             "'softmax_attention'], {p}predictor), list_position(['state', 'sequence', 'tokens'], {p}attn_input)")
_LM_RUNS = f"""SELECT r.run_id, r.seed, r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                      r.config->>'attn_input' AS attn_input, {_LM_COMPARABLE} AS comparable,
                      (r.summary->>'params')::BIGINT AS params
               FROM runs r WHERE r.kind = '{KIND}' AND {RUN_FILTER.format(col='r.run_id')}"""

# The peak rate a run trained at: the summary's record (a run at train.lr=auto resolves it and says
# so there), else the config's number (runs made before the record).
_LM_LR = "coalesce((r.summary->>'lr')::DOUBLE, try_cast(r.config->'train'->>'lr' AS DOUBLE))"

# Training tokens per optimiser step: the summary's count over the run's steps (every process of a DDP
# run counts), else batch × seq_len (a run with no summary yet).
_LM_TOKENS_PER_STEP = """coalesce((r.summary->>'tokens')::DOUBLE / (r.config->'train'->>'steps')::DOUBLE,
                                  (r.config->'train'->>'batch')::DOUBLE * (r.config->'train'->>'seq_len')::DOUBLE)"""

# What an lm_eval row measured, read from its run (see lm_eval_labelled): shown beside every row
# exported, and equal across the seeds of a config.
LM_LABELS = ("model", "predictor", "attn_input", "size", "corpus", "params", "lr")


def lm_eval(run_ids: RunIds = None, split: str | None = None, *, home: Path | None = None) -> pd.DataFrame:
    """Language-model evaluation: run_id, seed, split, loss, ppl, bpb."""
    return query_frame(
        f"""SELECT t.run_id, r.seed, t.split, t.loss, t.ppl, t.bpb
            FROM lm_eval t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')} AND ($split::VARCHAR IS NULL OR t.split = $split)
            ORDER BY t.run_id, t.split""",
        {"ids": id_list(run_ids), "split": split}, home,
    )


def lm_eval_labelled(run_ids: RunIds = None, split: str | None = None, *,
                     home: Path | None = None) -> pd.DataFrame:
    """:func:`lm_eval` with what each row measured, read from the run's config and summary: run_id,
    seed, model, predictor, attn_input, size, corpus (the summary's name, else the config's), params,
    lr (the peak rate it trained at, as :func:`lm_runs` reads it), split, loss, ppl, bpb.  A GPT's predictor and attention input are those of the SPEN it was sized to."""
    return query_frame(
        f"""SELECT t.run_id, r.seed, r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                   r.config->>'attn_input' AS attn_input, r.config->>'size' AS size,
                   coalesce(r.summary->>'corpus', r.config->'data'->>'corpus') AS corpus,
                   (r.summary->>'params')::BIGINT AS params, {_LM_LR} AS lr, t.split, t.loss, t.ppl, t.bpb
            FROM lm_eval t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')} AND ($split::VARCHAR IS NULL OR t.split = $split)
            ORDER BY {_LM_ORDER.format(p='')}, size, corpus, r.seed, t.run_id, t.split""",
        {"ids": id_list(run_ids), "split": split}, home,
    )


def lm_token_classes(run_ids: RunIds = None, evaluation: str | None = None, *,
                     home: Path | None = None) -> pd.DataFrame:
    """The held-out loss split by token at every evaluation (:mod:`ema_core.lm.token_classes`), labelled
    as :func:`lm_eval_labelled`: run_id, seed, model, predictor, attn_input, size, corpus, params, lr,
    evaluation ("periodic": the validation curve's; "final": the run's last evaluation, at its last
    step), step, partition ("class": recall by distance, first, other; "band": training frequency),
    class, tokens, loss (summed in nats), loss_per_token (nats per token; null for a class with no
    tokens).  Empty for runs stored before the split.

    Variants in the Content page's order, then seed and run; each run's evaluations in step order,
    the final last; classes, then bands, each in their own order (not the alphabet's).
    """
    return query_frame(
        f"""SELECT t.run_id, r.seed, r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                   r.config->>'attn_input' AS attn_input, r.config->>'size' AS size,
                   coalesce(r.summary->>'corpus', r.config->'data'->>'corpus') AS corpus,
                   (r.summary->>'params')::BIGINT AS params, {_LM_LR} AS lr, t.evaluation, t.step, t.partition,
                   t.class, t.tokens, t.loss, t.loss / nullif(t.tokens, 0) AS loss_per_token
            FROM lm_token_classes t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')}
              AND ($evaluation::VARCHAR IS NULL OR t.evaluation = $evaluation)
            ORDER BY {_LM_ORDER.format(p='')}, size, corpus, r.seed, t.run_id,
                     list_position($evaluations::VARCHAR[], t.evaluation) NULLS LAST, t.evaluation, t.step,
                     list_position($partitions::VARCHAR[], t.partition) NULLS LAST, t.partition,
                     list_position($classes::VARCHAR[], t.partition || '/' || t.class) NULLS LAST, t.class""",
        {"ids": id_list(run_ids), "evaluation": evaluation, **_CLASS_ORDER, **_EVALUATION_ORDER}, home,
    )


def lm_runs(run_ids: RunIds = None, status: str | Iterable[str] | None = None, *,
            home: Path | None = None) -> pd.DataFrame:
    """Language-model runs with config and summary fields flattened, newest first.

    Columns: run_id, seed, status, started, model, predictor, attn_input, size, corpus (the
    summary's name, else the config's), val_doc, steps, batch, seq_len, lr (the peak rate it trained
    at: the summary's record, which a run at ``train.lr=auto`` holds; else the config's number),
    vocab_size (the tokenizer's, else the config's), params, tokens (training tokens), tokens_per_step, val_loss,
    val_ppl, val_bpb, tokens_per_s, seconds, matched_to, group_id (a short hash of the comparable
    config: runs with the same group_id differ only in variant and seed), comparable (that config as
    JSON text), config.
    """
    statuses = [status] if isinstance(status, str) else (list(status) if status is not None else None)
    return query_frame(
        f"""SELECT r.run_id, r.seed, r.status, coalesce(r.started_at, r.created_at) AS started,
                   r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                   r.config->>'attn_input' AS attn_input, r.config->>'size' AS size,
                   coalesce(r.summary->>'corpus', r.config->'data'->>'corpus') AS corpus, r.config->'data'->>'val_doc' AS val_doc,
                   (r.config->'train'->>'steps')::BIGINT AS steps, (r.config->'train'->>'batch')::BIGINT AS batch,
                   (r.config->'train'->>'seq_len')::BIGINT AS seq_len,
                   {_LM_LR} AS lr,
                   coalesce((r.summary->>'vocab_size')::BIGINT, (r.config->'data'->>'vocab_size')::BIGINT) AS vocab_size,
                   (r.summary->>'params')::BIGINT AS params, (r.summary->>'tokens')::BIGINT AS tokens,
                   coalesce((r.summary->>'tokens')::DOUBLE / (r.config->'train'->>'steps')::DOUBLE,
                            (r.config->'train'->>'batch')::DOUBLE * (r.config->'train'->>'seq_len')::DOUBLE) AS tokens_per_step,
                   (r.summary->>'val_loss')::DOUBLE AS val_loss, (r.summary->>'val_ppl')::DOUBLE AS val_ppl,
                   (r.summary->>'val_bpb')::DOUBLE AS val_bpb, (r.summary->>'tokens_per_s')::DOUBLE AS tokens_per_s,
                   (r.summary->>'seconds')::DOUBLE AS seconds, r.summary->>'matched_to' AS matched_to,
                   left(md5({_LM_COMPARABLE}), 8) AS group_id, {_LM_COMPARABLE} AS comparable,
                   r.config::VARCHAR AS config
            FROM runs r
            WHERE r.kind = '{KIND}' AND {RUN_FILTER.format(col='r.run_id')}
              AND ($statuses::VARCHAR[] IS NULL OR r.status IN (SELECT unnest($statuses::VARCHAR[])))
            ORDER BY started DESC NULLS LAST, {_LM_ORDER.format(p='')}, r.seed, r.run_id""",
        {"ids": id_list(run_ids), "statuses": statuses, "drop": _LM_DROP}, home,
    )


def lm_curves(run_ids: RunIds, key: str = "val/loss", *, home: Path | None = None) -> pd.DataFrame:
    """One metric of language-model runs over training: run_id, seed, model, predictor, attn_input,
    step (optimiser steps), tokens (training tokens seen by then), value.

    Tokens per step come from the summary (tokens ÷ steps: every process of a DDP run counts), or,
    for a run with no summary yet, from batch × seq_len.  A step logged twice (a resumed run) keeps
    its newest value, as in :func:`metric_series`.
    """
    return query_frame(
        f"""SELECT m.run_id, r.seed, r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                   r.config->>'attn_input' AS attn_input, m.step,
                   m.step * {_LM_TOKENS_PER_STEP} AS tokens,
                   m.value
            FROM metrics m JOIN runs r USING (run_id)
            WHERE m.key = $key AND r.kind = '{KIND}' AND {RUN_FILTER.format(col='m.run_id')}
            QUALIFY row_number() OVER (PARTITION BY m.run_id, m.step ORDER BY m.seq DESC) = 1
            ORDER BY {_LM_ORDER.format(p='')}, r.seed, m.run_id, m.step""",
        {"key": key, "ids": id_list(run_ids)}, home,
    )


# Each run's final evaluation of one split (a loss that is not finite left out).
_LM_FINAL_ROWS = f"""
    base AS ({_LM_RUNS}),
    ev AS (SELECT b.*, e.loss, e.ppl, e.bpb FROM base b JOIN lm_eval e USING (run_id)
           WHERE e.split = $split AND isfinite(e.loss))"""
# Each SPEN run beside the GPT of the same seed and comparable config: the GPT sized to this very
# SPEN when there is one, else the GPT sized to the linear SPEN (the launch form's GPT).
_LM_EVAL_ROWS = f"""{_LM_FINAL_ROWS},
    pair AS (SELECT s.run_id, g.run_id AS gpt_run_id, g.loss AS gpt_loss, g.ppl AS gpt_ppl, g.bpb AS gpt_bpb
             FROM ev s JOIN ev g ON g.model = 'gpt' AND g.seed = s.seed AND g.comparable = s.comparable
             WHERE s.model = 'spen'
             QUALIFY row_number() OVER (
                 PARTITION BY s.run_id
                 ORDER BY (g.predictor = s.predictor AND g.attn_input = s.attn_input) DESC,
                          (g.predictor = 'linear' AND g.attn_input = 'state') DESC, g.run_id) = 1),
    per_run AS (SELECT ev.*, pair.gpt_run_id, ev.ppl / pair.gpt_ppl AS ppl_ratio, ev.bpb / pair.gpt_bpb AS bpb_ratio
                FROM ev LEFT JOIN pair USING (run_id))"""


def lm_final_stats(run_ids: RunIds = None, split: str = "val", *, home: Path | None = None) -> pd.DataFrame:
    """The final evaluation per variant across seeds.

    Columns: model, predictor, attn_input, n (runs), seeds, params (mean over the runs), then
    loss, ppl, bpb and, for SPEN variants, ppl_ratio and bpb_ratio (SPEN ÷ its GPT of the same
    seed and comparable config, formed per seed), each as ``<v>_mean`` and ``<v>_std`` (sample
    std, null with one run); pairs counts the seeds that had a GPT to divide by.  GPT first, then
    SPEN linear, linear attention, softmax attention; state, sequence, tokens.
    """
    sql = f"""
        WITH {_LM_EVAL_ROWS}
        SELECT model, predictor, attn_input, count(*) AS n,
               array_to_string(list_sort(list(seed)), ',') AS seeds,
               CAST(round(avg(params)) AS BIGINT) AS params,
               avg(loss) AS loss_mean, stddev_samp(loss) AS loss_std,
               avg(ppl) AS ppl_mean, stddev_samp(ppl) AS ppl_std,
               avg(bpb) AS bpb_mean, stddev_samp(bpb) AS bpb_std,
               count(ppl_ratio) AS pairs,
               avg(ppl_ratio) AS ppl_ratio_mean, stddev_samp(ppl_ratio) AS ppl_ratio_std,
               avg(bpb_ratio) AS bpb_ratio_mean, stddev_samp(bpb_ratio) AS bpb_ratio_std
        FROM per_run
        GROUP BY model, predictor, attn_input
        ORDER BY {_LM_ORDER.format(p='')}"""
    return query_frame(sql, {"ids": id_list(run_ids), "split": split, "drop": _LM_DROP}, home)


def lm_final_losses(run_ids: RunIds = None, split: str = "val", *, home: Path | None = None) -> pd.DataFrame:
    """Each finished run's final loss (nats/token), the rows the ablation's verdict pairs by seed
    (:func:`ema_core.studies.content.findings.ablation_verdict`).

    Columns: run_id, group_id (as :func:`lm_runs`': runs of one group differ only in variant and seed),
    model, predictor, attn_input, seed, loss.  A run whose loss is not finite has no row.
    """
    sql = f"""
        WITH {_LM_FINAL_ROWS}
        SELECT run_id, left(md5(comparable), 8) AS group_id, model, predictor, attn_input, seed, loss
        FROM ev
        ORDER BY {_LM_ORDER.format(p='')}, seed, run_id"""
    return query_frame(sql, {"ids": id_list(run_ids), "split": split, "drop": _LM_DROP}, home)


def lm_token_class_pairs(run_ids: RunIds = None, evaluation: str | None = None, split: str = "val", *,
                         home: Path | None = None) -> pd.DataFrame:
    """The token-class rows of :func:`lm_token_classes` with what pairs them, the rows the Content page's
    token-class section reads (:func:`ema_core.studies.content.gap.class_gaps`).

    Columns: run_id, group_id (as :func:`lm_runs`'), model, predictor, attn_input, seed, gpt_run_id (a
    SPEN run's GPT: the same seed and comparable config, the GPT sized to this SPEN, else to SPEN linear,
    as :func:`lm_final_stats` divides by; null for a GPT and for a SPEN without one among ``run_ids``),
    schedule, warmup, steps, decay_frac (the run's ``train`` settings, which say which evaluations were
    made at the peak rate: :func:`ema_core.schedule.peak_steps`; schedule is null for a run stored before
    it was a setting), evaluation, step, tokens_seen (training tokens by that step, as :func:`lm_curves`
    counts them), train_tokens (the training split's size, null for a run stored before the summary held
    it: tokens_seen ÷ train_tokens is the passes over it), family_id (a short hash of the comparable config
    less train.steps: runs of one family differ only in length), size, corpus, params (the run's parameter
    count), partition, class, tokens, loss (summed nats), loss_per_token (null for a class with no tokens).
    Only runs with a finite final loss on ``split``; empty for runs stored before the split.
    """
    sql = f"""
        WITH {_LM_EVAL_ROWS}
        SELECT p.run_id, left(md5(p.comparable), 8) AS group_id, p.model, p.predictor, p.attn_input, p.seed,
               p.gpt_run_id, r.config->'train'->>'schedule' AS schedule,
               (r.config->'train'->>'warmup')::BIGINT AS warmup, (r.config->'train'->>'steps')::BIGINT AS steps,
               (r.config->'train'->>'decay_frac')::DOUBLE AS decay_frac, t.evaluation, t.step,
               t.step * {_LM_TOKENS_PER_STEP} AS tokens_seen, (r.summary->>'train_tokens')::BIGINT AS train_tokens,
               {_LM_FAMILY} AS family_id,
               r.config->>'size' AS size, r.config->'data'->>'corpus' AS corpus, p.params,
               t.partition, t.class, t.tokens, t.loss, t.loss / nullif(t.tokens, 0) AS loss_per_token
        FROM per_run p JOIN lm_token_classes t USING (run_id) JOIN runs r USING (run_id)
        WHERE ($evaluation::VARCHAR IS NULL OR t.evaluation = $evaluation)
        ORDER BY {_LM_ORDER.format(p='p.')}, p.seed, p.run_id,
                 list_position($evaluations::VARCHAR[], t.evaluation) NULLS LAST, t.evaluation, t.step,
                 list_position($partitions::VARCHAR[], t.partition) NULLS LAST, t.partition,
                 list_position($classes::VARCHAR[], t.partition || '/' || t.class) NULLS LAST, t.class"""
    return query_frame(sql, {"ids": id_list(run_ids), "split": split, "drop": _LM_DROP, "evaluation": evaluation,
                             **_CLASS_ORDER, **_EVALUATION_ORDER}, home)


def lm_family_runs(run_ids: RunIds = None, *, home: Path | None = None) -> list[str]:
    """Every stored lm run of the families of ``run_ids`` (the comparable config less train.steps, as
    :func:`lm_token_class_pairs`' family_id): the runs of other lengths beside the ones picked, whose
    annealed finals are the points of one growth curve.  In run id order."""
    sql = f"""
        WITH fam AS (SELECT r.run_id, {_LM_FAMILY} AS family_id FROM runs r WHERE r.kind = '{KIND}')
        SELECT run_id FROM fam
        WHERE family_id IN (SELECT family_id FROM fam WHERE {RUN_FILTER.format(col='run_id')})
        ORDER BY run_id"""
    return query_frame(sql, {"ids": id_list(run_ids), "drop": _LM_DROP}, home)["run_id"].tolist()


def lm_ablation(run_ids: RunIds = None, split: str = "val", *, home: Path | None = None) -> pd.DataFrame:
    """The predictor ablation's summary numbers, per seed then across seeds (final loss, nats/token).

    Columns: measure, n, seeds, value_mean, value_std.  Within one seed and comparable config:
    spread_state      max − min loss over SPEN predictors that read the current trace state
                      (the linear predictor included; needs two of them)
    spread_sequence   max − min loss over attention predictors that read past trace states
    sequence_gain     best state reader − best sequence reader (positive: the sequence is better)
    tokens_gain       best state reader − best raw-token control (positive: the control is better)
    noise_state       not per seed: the pooled standard deviation across seeds of the state
                      readers' losses, sqrt(mean of their variances), n = the variants pooled
    A measure that the runs cannot form has no row.
    """
    sql = f"""
        WITH {_LM_EVAL_ROWS},
        s AS (SELECT seed, comparable,
                     max(loss) FILTER (WHERE attn_input = 'state') - min(loss) FILTER (WHERE attn_input = 'state')
                         AS spread_state,
                     count(DISTINCT predictor) FILTER (WHERE attn_input = 'state') AS n_state,
                     max(loss) FILTER (WHERE attn_input = 'sequence') - min(loss) FILTER (WHERE attn_input = 'sequence')
                         AS spread_sequence,
                     count(DISTINCT predictor) FILTER (WHERE attn_input = 'sequence') AS n_sequence,
                     min(loss) FILTER (WHERE attn_input = 'state') AS best_state,
                     min(loss) FILTER (WHERE attn_input = 'sequence') AS best_sequence,
                     min(loss) FILTER (WHERE attn_input = 'tokens') AS best_tokens
              FROM per_run WHERE model = 'spen' GROUP BY seed, comparable),
        per_seed AS (
            SELECT seed, 'spread_state' AS measure, spread_state AS value FROM s WHERE n_state >= 2
            UNION ALL SELECT seed, 'spread_sequence', spread_sequence FROM s WHERE n_sequence >= 2
            UNION ALL SELECT seed, 'sequence_gain', best_state - best_sequence FROM s
            UNION ALL SELECT seed, 'tokens_gain', best_state - best_tokens FROM s
        ),
        v AS (SELECT predictor, count(*) AS k, var_samp(loss) AS var, list(seed) AS seeds
              FROM per_run WHERE model = 'spen' AND attn_input = 'state' GROUP BY predictor HAVING count(*) >= 2)
        SELECT * FROM ({across_runs("SELECT * FROM per_seed", "measure")})
        UNION ALL
        SELECT 'noise_state', count(*), array_to_string(list_sort(list_distinct(flatten(list(seeds)))), ','),
               sqrt(avg(var)), NULL
        FROM v HAVING count(*) > 0
        ORDER BY measure"""
    return query_frame(sql, {"ids": id_list(run_ids), "split": split, "drop": _LM_DROP}, home)


register_run_table("lm_eval", RunTable(lm_eval_labelled, ("split",), ("loss", "ppl", "bpb"), LM_LABELS))
export.register_table("lm_eval", "language-model loss, perplexity and bits per byte per split, per model, "
                                 "predictor, attention input, size, corpus and the rate it trained at")
# Keyed by the evaluation and the class (a class's tokens follow from the held-out text, the same for
# every seed: kept as a column, never averaged); ``ordered``: the classes' own order (recall by
# distance, first, other; then the bands) over the alphabet's.
register_run_table("lm_token_classes", RunTable(
    lm_token_classes, ("evaluation", "step", "partition", "class", "tokens"), ("loss", "loss_per_token"), LM_LABELS,
    ordered=True))
# No hyphen: `emalab export --help` may wrap the line at one.
export.register_table("lm_token_classes", "language models' validation loss split by token class (associative "
                                          "recall by distance, first sight, other) and by training frequency band, "
                                          "at every evaluation: tokens, summed nats, nats per token")


# -- re-evaluations of finished runs (kind lm_eval) beside the runs they evaluated ----------------------------
#
# A re-evaluation's own rows (``lm_eval`` split "reeval:val" | "reeval:all", ``lm_token_classes`` evaluation
# "reeval") say nothing of the model: that is the source run's, named by its config's ``run``.  Its *setting*
# is what was evaluated, the same for SPEN and the GPT when they are compared: its config without the run, the
# seed and what cannot change a number (``device``, ``threads``).

_REEVAL_DROP = json.dumps({"run": None, "seed": None, "device": None, "threads": None})
# Every finished re-evaluation with its source run's variant and its source's GPT (the pair the
# training runs' final table divides by: _LM_EVAL_ROWS's per_run, over every lm run), and the
# re-evaluation of that GPT in the same setting.
_REEVAL_ROWS = f"""{_LM_EVAL_ROWS},
    re AS (SELECT e.run_id, e.config->>'run' AS source_run, coalesce(e.started_at, e.created_at) AS started,
                  json_merge_patch(e.config, $reeval_drop)::VARCHAR AS setting,
                  coalesce(e.summary->>'corpus', e.config->'data'->>'corpus') AS corpus, e.config->>'split' AS split,
                  (e.config->>'eval_tokens')::BIGINT AS eval_tokens, (e.summary->>'val_tokens')::BIGINT AS tokens,
                  (e.summary->>'val_loss')::DOUBLE AS loss, (e.summary->>'val_ppl')::DOUBLE AS ppl,
                  (e.summary->>'val_bpb')::DOUBLE AS bpb, (e.summary->>'train_overlap')::DOUBLE AS train_overlap
           FROM runs e
           WHERE e.kind = 'lm_eval' AND e.status = 'done'
             AND ($reeval_ids::VARCHAR[] IS NULL OR e.run_id IN (SELECT unnest($reeval_ids::VARCHAR[])))),
    src AS (SELECT re.*, p.model, p.predictor, p.attn_input, p.size, p.seed, left(md5(p.comparable), 8) AS group_id,
                   left(md5(re.setting), 8) AS setting_id, p.loss AS source_loss, p.gpt_run_id AS source_gpt
            FROM re JOIN (SELECT per_run.*, r.config->>'size' AS size FROM per_run JOIN runs r USING (run_id)) p
                 ON p.run_id = re.source_run),
    paired AS (SELECT s.*, g.run_id AS gpt_run_id
               FROM src s LEFT JOIN re g ON g.source_run = s.source_gpt AND g.setting = s.setting
               QUALIFY row_number() OVER (PARTITION BY s.run_id ORDER BY g.run_id NULLS LAST) = 1)"""


def _params(run_ids: RunIds, **more) -> dict:
    # $reeval_ids picks the re-evaluations; $ids (the training runs' filter) stays open: every lm run is a
    # possible source, and a source's GPT.
    return {"ids": None, "reeval_ids": id_list(run_ids), "split": "val", "drop": _LM_DROP,
            "reeval_drop": _REEVAL_DROP, **more}


def lm_reevaluations(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """Finished re-evaluations, newest first, with what they evaluated and whose model.

    Columns: run_id, source_run, model, predictor, attn_input, size, seed (the source run's: a GPT's
    predictor and attention input are those of the SPEN it was sized to), group_id (the source's
    comparable settings, as :func:`store.content.lm_runs`'), setting_id (a short hash of what was
    evaluated: corpus, split, tokens; equal for a SPEN and a GPT evaluated alike), corpus, split,
    eval_tokens (0: all), tokens (scored), loss, ppl, bpb, source_loss (the source's own final loss on its
    held-out text), train_overlap (share of the text evaluated found whole in the source's training
    split), gpt_run_id (a SPEN's: the re-evaluation in the same setting of the GPT its final table pairs it
    with; null for a GPT and where there is none), started.  A re-evaluation whose source is not in the
    store (or has no final loss) has no row.
    """
    sql = f"""
        WITH {_REEVAL_ROWS}
        SELECT run_id, source_run, model, predictor, attn_input, size, seed, group_id, setting_id, corpus, split,
               eval_tokens, tokens, loss, ppl, bpb, source_loss, train_overlap, gpt_run_id, started
        FROM paired
        ORDER BY started DESC NULLS LAST, corpus, {_LM_ORDER.format(p='')}, seed, run_id"""
    return query_frame(sql, _params(run_ids), home)


def lm_reeval_class_pairs(setting_id: str | None = None, run_ids: RunIds = None, *,
                          home: Path | None = None) -> pd.DataFrame:
    """The token-class rows of re-evaluations, shaped as :func:`store.content.lm_token_class_pairs`' (what
    :func:`ema_core.studies.content.gap.class_gaps` reads), for one setting (``setting_id`` of
    :func:`lm_reevaluations`) or all.

    Columns: run_id (the re-evaluation), group_id, model, predictor, attn_input, seed (its source's),
    gpt_run_id (as :func:`lm_reevaluations`'), setting_id, corpus, split, evaluation ("final": the one
    evaluation of a re-evaluation, named as ``class_gaps`` reads a run's last), step (the source's last),
    partition, class, tokens, loss (summed nats), loss_per_token.  Read one setting at a time: the gap of
    two texts is not one quantity.
    """
    sql = f"""
        WITH {_REEVAL_ROWS}
        SELECT p.run_id, p.group_id, p.model, p.predictor, p.attn_input, p.seed, p.gpt_run_id, p.setting_id,
               p.corpus, p.split, 'final' AS evaluation, t.step, t.partition, t.class, t.tokens, t.loss,
               t.loss / nullif(t.tokens, 0) AS loss_per_token
        FROM paired p JOIN lm_token_classes t ON t.run_id = p.run_id AND t.evaluation = 'reeval'
        WHERE ($setting::VARCHAR IS NULL OR p.setting_id = $setting)
        ORDER BY p.corpus, p.setting_id, {_LM_ORDER.format(p='p.')}, p.seed, p.run_id,
                 list_position($partitions::VARCHAR[], t.partition) NULLS LAST, t.partition,
                 list_position($classes::VARCHAR[], t.partition || '/' || t.class) NULLS LAST, t.class"""
    return query_frame(sql, _params(run_ids, setting=setting_id, **_CLASS_ORDER), home)


def judged(home: Path | None = None) -> Judged:
    """The content study's claims on the Overview's scoreboard, judged on its best group of finished runs."""
    runs = lm_runs(status="done", home=home)
    if runs.empty:
        return Judged("content", (), ())
    finals = lm_final_losses(list(runs["run_id"]), home=home)
    # A group's seeds are those at which SPEN linear and its GPT both finished: the headline's pairs.
    spen, gpt = HEADLINE_VARIANT, ("gpt", *HEADLINE_VARIANT[1:])
    groups: dict[str, dict[str, Any]] = {}
    for g in dict.fromkeys(runs["group_id"]):  # newest first
        part = finals[finals["group_id"] == g]
        held = {v: {int(s) for s in part.loc[(part["model"] == v[0]) & (part["predictor"] == v[1])
                                             & (part["attn_input"] == v[2]), "seed"]} for v in (spen, gpt)}
        groups[g] = {"runs": list(runs.loc[runs["group_id"] == g, "run_id"]), "seeds": held[spen] & held[gpt]}
    best = best_group(groups)
    ids = groups[best]["runs"]
    picked = finals[finals["group_id"] == best].to_dict("records")
    part = runs[runs["group_id"] == best]
    # One config per variant (model, predictor, attention input), the newest run's.
    variants = part.drop_duplicates(["model", "predictor", "attn_input"])
    configs = tuple(config_without_seed(json.loads(c)) for c in variants["config"])
    judged_scores = scores(headline_verdict(picked), ablation_verdict(picked),
                           gap_verdicts(lm_token_class_pairs(ids, home=home).to_dict("records")))
    return Judged("content", tuple(ids), tuple(sorted(groups[best]["seeds"])), best, configs, 1, judged_scores)
