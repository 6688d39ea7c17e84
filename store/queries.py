"""Every query the pages and exports use, each one parameterised and tested.

User values reach DuckDB only as parameters (``$name``); the few identifiers spliced into SQL text
come from the fixed tables below.  Each function opens a short read-only connection (see
``store.db``), so a page never holds the file; a store that does not exist yet reads as empty, with
the right columns.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import pandas as pd

from ema_core.rundir import canonical_json

from .db import open_store

RunIds = Iterable[str] | str | None
# A run filter: NULL means every run; a list (possibly empty) means exactly those.
_RUN_FILTER = "($ids::VARCHAR[] IS NULL OR {col} IN (SELECT unnest($ids::VARCHAR[])))"


def _ids(run_ids: RunIds) -> list[str] | None:
    if run_ids is None:
        return None
    if isinstance(run_ids, str):
        return [run_ids]
    return [str(r) for r in run_ids]


def _frame(sql: str, params: dict[str, Any], home: Path | None = None) -> pd.DataFrame:
    with open_store(readonly=True, home=home) as conn:
        return conn.execute(sql, params).df()


# -- runs ---------------------------------------------------------------------------------------------

def list_runs(kind: str | None = None, status: str | Iterable[str] | None = None, limit: int | None = 500,
              *, run_ids: RunIds = None, home: Path | None = None) -> pd.DataFrame:
    """Runs, newest first: run_id, kind, seed, status, times, code_version, host, message, config, summary."""
    statuses = [status] if isinstance(status, str) else (list(status) if status is not None else None)
    return _frame(
        f"""SELECT run_id, kind, seed, status, created_at, started_at, ended_at, code_version, host,
                   message, config, summary
            FROM runs
            WHERE ($kind::VARCHAR IS NULL OR kind = $kind)
              AND ($statuses::VARCHAR[] IS NULL OR status IN (SELECT unnest($statuses::VARCHAR[])))
              AND {_RUN_FILTER.format(col='run_id')}
            ORDER BY coalesce(started_at, created_at) DESC NULLS LAST, run_id
            LIMIT $limit""",
        {"kind": kind, "statuses": statuses, "ids": _ids(run_ids),
         "limit": None if limit is None else int(limit)},
        home,
    )


def run_detail(run_id: str, *, home: Path | None = None) -> dict | None:
    """One run: its row with config and summary parsed, ingest state, metric keys and result row counts."""
    with open_store(readonly=True, home=home) as conn:
        cur = conn.execute(
            """SELECT r.*, s.events_offset, s.result_ingested, s.bad_lines
               FROM runs r LEFT JOIN ingest_state s USING (run_id) WHERE r.run_id = $id""",
            {"id": run_id},
        )
        row = cur.fetchone()
        if row is None:
            return None
        detail = dict(zip([d[0] for d in cur.description], row))
        detail["config"] = json.loads(detail["config"]) if detail["config"] is not None else None
        detail["summary"] = json.loads(detail["summary"]) if detail["summary"] is not None else None
        detail["metric_keys"] = [r[0] for r in conn.execute(
            "SELECT DISTINCT key FROM metrics WHERE run_id = $id ORDER BY key", {"id": run_id}).fetchall()]
        detail["metric_rows"] = conn.execute(
            "SELECT count(*) FROM metrics WHERE run_id = $id", {"id": run_id}).fetchone()[0]
        detail["result_rows"] = {
            # Table names from the fixed list below, never from the caller.
            name: conn.execute(f"SELECT count(*) FROM {name} WHERE run_id = $id", {"id": run_id}).fetchone()[0]
            for name in RESULT_QUERIES
        }
    return detail


# -- metrics ------------------------------------------------------------------------------------------

def metric_keys(run_ids: RunIds = None, *, home: Path | None = None) -> list[str]:
    """The metric keys logged by these runs (all runs when None), sorted."""
    df = _frame(f"SELECT DISTINCT key FROM metrics WHERE {_RUN_FILTER.format(col='run_id')} ORDER BY key",
                {"ids": _ids(run_ids)}, home)
    return df["key"].tolist()


def metric_series(run_ids: RunIds, key: str, *, home: Path | None = None) -> pd.DataFrame:
    """One metric over time: run_id, seq, step, value, one row per step.

    A run resumed from a checkpoint logs again the steps between that checkpoint and the crash
    (with new seq numbers); the newest logging of a step is the one the run's final state came
    from, so it wins.
    """
    return _frame(
        f"""SELECT run_id, seq, step, value FROM metrics
            WHERE key = $key AND {_RUN_FILTER.format(col='run_id')}
            QUALIFY row_number() OVER (PARTITION BY run_id, step ORDER BY seq DESC) = 1
            ORDER BY run_id, step""",
        {"key": key, "ids": _ids(run_ids)}, home,
    )


def final_metrics(run_ids: RunIds = None, keys: Iterable[str] | None = None, *,
                  home: Path | None = None) -> pd.DataFrame:
    """The last logged value of each key per run: run_id, seed, key, step, value."""
    return _frame(
        f"""SELECT m.run_id, r.seed, m.key, arg_max(m.step, m.seq) AS step, arg_max(m.value, m.seq) AS value
            FROM metrics m JOIN runs r USING (run_id)
            WHERE {_RUN_FILTER.format(col='m.run_id')}
              AND ($keys::VARCHAR[] IS NULL OR m.key IN (SELECT unnest($keys::VARCHAR[])))
            GROUP BY m.run_id, r.seed, m.key
            ORDER BY m.run_id, m.key""",
        {"ids": _ids(run_ids), "keys": None if keys is None else list(keys)}, home,
    )


# -- typed results ------------------------------------------------------------------------------------

def dilution_accuracy(run_ids: RunIds = None, feature: str | None = None, *,
                      home: Path | None = None) -> pd.DataFrame:
    """Identity decoding accuracy per feature and lag: run_id, seed, feature, lag, accuracy, chance."""
    return _frame(
        f"""SELECT t.run_id, r.seed, t.feature, t.lag, t.accuracy, t.chance
            FROM dilution_accuracy t JOIN runs r USING (run_id)
            WHERE {_RUN_FILTER.format(col='t.run_id')} AND ($feature::VARCHAR IS NULL OR t.feature = $feature)
            ORDER BY t.run_id, t.feature, t.lag""",
        {"ids": _ids(run_ids), "feature": feature}, home,
    )


def probe_accuracy(run_ids: RunIds = None, role: str | None = None, feature_set: str | None = None,
                   split: str | None = None, *, home: Path | None = None) -> pd.DataFrame:
    """Probe accuracy: run_id, seed, role, feature_set, split, accuracy."""
    return _frame(
        f"""SELECT t.run_id, r.seed, t.role, t.feature_set, t.split, t.accuracy
            FROM probe_accuracy t JOIN runs r USING (run_id)
            WHERE {_RUN_FILTER.format(col='t.run_id')}
              AND ($role::VARCHAR IS NULL OR t.role = $role)
              AND ($feature_set::VARCHAR IS NULL OR t.feature_set = $feature_set)
              AND ($split::VARCHAR IS NULL OR t.split = $split)
            ORDER BY t.run_id, t.feature_set, t.role, t.split""",
        {"ids": _ids(run_ids), "role": role, "feature_set": feature_set, "split": split}, home,
    )


def lm_eval(run_ids: RunIds = None, split: str | None = None, *, home: Path | None = None) -> pd.DataFrame:
    """Language-model evaluation: run_id, seed, split, loss, ppl, bpb."""
    return _frame(
        f"""SELECT t.run_id, r.seed, t.split, t.loss, t.ppl, t.bpb
            FROM lm_eval t JOIN runs r USING (run_id)
            WHERE {_RUN_FILTER.format(col='t.run_id')} AND ($split::VARCHAR IS NULL OR t.split = $split)
            ORDER BY t.run_id, t.split""",
        {"ids": _ids(run_ids), "split": split}, home,
    )


def lm_eval_labelled(run_ids: RunIds = None, split: str | None = None, *,
                     home: Path | None = None) -> pd.DataFrame:
    """:func:`lm_eval` with what each row measured, read from the run's config and summary: run_id,
    seed, model, predictor, attn_input, size, corpus (the summary's name, else the config's), params,
    split, loss, ppl, bpb.  A GPT's predictor and attention input are those of the SPEN it was sized to."""
    return _frame(
        f"""SELECT t.run_id, r.seed, r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                   r.config->>'attn_input' AS attn_input, r.config->>'size' AS size,
                   coalesce(r.summary->>'corpus', r.config->>'corpus') AS corpus,
                   (r.summary->>'params')::BIGINT AS params, t.split, t.loss, t.ppl, t.bpb
            FROM lm_eval t JOIN runs r USING (run_id)
            WHERE {_RUN_FILTER.format(col='t.run_id')} AND ($split::VARCHAR IS NULL OR t.split = $split)
            ORDER BY {_LM_ORDER.format(p='')}, size, corpus, r.seed, t.run_id, t.split""",
        {"ids": _ids(run_ids), "split": split}, home,
    )


def bench_figures(bench: str | None = None, latest: bool = True, *, home: Path | None = None) -> pd.DataFrame:
    """Benchmark figures: bench, key, value, measured_at, machine, command (newest first).

    ``latest`` keeps only the newest measurement of each (bench, key)."""
    return _frame(
        """SELECT bench, key, value, measured_at, machine, command FROM bench_figures
           WHERE ($bench::VARCHAR IS NULL OR bench = $bench)
           QUALIFY NOT $latest OR row_number() OVER (PARTITION BY bench, key ORDER BY measured_at DESC) = 1
           ORDER BY measured_at DESC, bench, key""",
        {"bench": bench, "latest": bool(latest)}, home,
    )


# -- the structure experiment (PAPER.md §2) -----------------------------------------------------------
# Feature sets of a structure run: SPCN features read by a linear probe ("instantaneous", "traces",
# "both"), the supervised "bigru", the same probes on an untrained SPCN ("untrained/<set>") and on
# the control task of Hewitt & Liang ("control/<set>", role "overall", split "test" only).

def probe_accuracy_stats(run_ids: RunIds = None, split: str | None = None, *,
                         home: Path | None = None) -> pd.DataFrame:
    """Probe accuracy across runs: role, feature_set, split, n, seeds, accuracy_mean, accuracy_std.

    ``n`` counts the runs with a value; the standard deviation is the sample one (ddof 1), null
    with one run.  A (role, feature_set, split) that no run scored has no row.
    """
    return _frame(
        f"""SELECT t.role, t.feature_set, t.split, count(t.accuracy) AS n,
                   array_to_string(list_sort(list(r.seed) FILTER (WHERE t.accuracy IS NOT NULL)), ',') AS seeds,
                   avg(t.accuracy) AS accuracy_mean, stddev_samp(t.accuracy) AS accuracy_std
            FROM probe_accuracy t JOIN runs r USING (run_id)
            WHERE {_RUN_FILTER.format(col='t.run_id')} AND ($split::VARCHAR IS NULL OR t.split = $split)
              AND t.accuracy IS NOT NULL AND NOT isnan(t.accuracy)
            GROUP BY t.role, t.feature_set, t.split
            ORDER BY t.split, t.feature_set, t.role""",
        {"ids": _ids(run_ids), "split": split}, home,
    )


def _across_runs(per_run: str, keys: str) -> str:
    # Derived values are formed within a run (a ratio, a difference) and only then averaged, so
    # that the spread is the spread across seeds of the quantity itself.
    return f"""SELECT {keys}, count(value) AS n, array_to_string(list_sort(list(seed)), ',') AS seeds,
                      avg(value) AS value_mean, stddev_samp(value) AS value_std
               FROM ({per_run}) WHERE value IS NOT NULL AND isfinite(value)
               GROUP BY {keys} ORDER BY {keys}"""


_PROBE_ROWS = f"""SELECT t.run_id, r.seed, t.role, t.feature_set, t.split, t.accuracy
                  FROM probe_accuracy t JOIN runs r USING (run_id)
                  WHERE {_RUN_FILTER.format(col='t.run_id')} AND t.accuracy IS NOT NULL AND NOT isnan(t.accuracy)"""


def structure_headlines(run_ids: RunIds = None, structural_roles: Iterable[str] = (), spcn: str = "traces", *,
                        home: Path | None = None) -> pd.DataFrame:
    """The structure study's headline numbers, per run then across runs.

    Columns: measure, n, seeds, value_mean, value_std.  Measures (SPCN = the probe on feature set
    ``spcn``; "overall" is token accuracy over the split):
    within_instantaneous, within_traces   overall accuracy on the test split
    spcn_over_bigru                       SPCN overall / BiGRU overall, test split
    structural_spcn, structural_bigru,    mean accuracy over the ``structural_roles`` that both
    structural_gap                        scored on the test split, and SPCN − BiGRU
    novel_structural_spcn, _bigru, _gap   the same on the novel-vocabulary split
    novel_agent_det_spcn, _bigru          agent_det accuracy on the novel-vocabulary split
    novel_overall_spcn, novel_overall_bigru, deep_overall_spcn, deep_overall_bigru
    A measure that no run provides has no row.
    """
    sql = f"""
        WITH p AS ({_PROBE_ROWS}),
        o AS (SELECT * FROM p WHERE role = 'overall'),
        s AS (SELECT a.run_id, a.seed, CASE a.split WHEN 'test' THEN 'structural_' ELSE 'novel_structural_' END AS m,
                     avg(a.accuracy) AS spcn, avg(b.accuracy) AS bigru
              FROM p a JOIN p b ON a.run_id = b.run_id AND a.role = b.role AND a.split = b.split
              WHERE a.split IN ('test', 'novel') AND a.feature_set = $spcn AND b.feature_set = 'bigru'
                AND a.role IN (SELECT unnest($structural::VARCHAR[]))
              GROUP BY a.run_id, a.seed, a.split),
        per_run AS (
            SELECT seed, 'within_instantaneous' AS measure, accuracy AS value
                FROM o WHERE split = 'test' AND feature_set = 'instantaneous'
            UNION ALL SELECT seed, 'within_traces', accuracy FROM o WHERE split = 'test' AND feature_set = 'traces'
            UNION ALL SELECT a.seed, 'spcn_over_bigru', a.accuracy / b.accuracy
                FROM o a JOIN o b ON a.run_id = b.run_id AND a.split = b.split
                WHERE a.split = 'test' AND a.feature_set = $spcn AND b.feature_set = 'bigru' AND b.accuracy > 0
            UNION ALL SELECT seed, m || 'spcn', spcn FROM s
            UNION ALL SELECT seed, m || 'bigru', bigru FROM s
            UNION ALL SELECT seed, m || 'gap', spcn - bigru FROM s
            UNION ALL SELECT seed, CASE WHEN role = 'agent_det' THEN 'novel_agent_det_' ELSE split || '_overall_' END
                                   || CASE WHEN feature_set = 'bigru' THEN 'bigru' ELSE 'spcn' END, accuracy
                FROM p WHERE feature_set IN ($spcn, 'bigru')
                  AND ((split = 'novel' AND role IN ('agent_det', 'overall')) OR (split = 'deep' AND role = 'overall'))
        )
        {_across_runs("SELECT * FROM per_run", "measure")}"""
    return _frame(sql, {"ids": _ids(run_ids), "structural": [str(r) for r in structural_roles], "spcn": spcn}, home)


def probe_control(run_ids: RunIds = None, split: str = "test", *, home: Path | None = None) -> pd.DataFrame:
    """Probe controls per SPCN feature set, per run then across runs (overall accuracy on ``split``).

    Columns: feature_set, measure, n, seeds, value_mean, value_std.  Measures: trained (the probe
    on the trained SPCN), untrained (the same probe on an untrained SPCN), control (the probe
    trained on the control task), selectivity (trained − control, Hewitt & Liang 2019) and
    training_gain (trained − untrained).  The feature sets are those with a control or an
    untrained counterpart.
    """
    sql = f"""
        WITH o AS (SELECT * FROM ({_PROBE_ROWS}) WHERE role = 'overall' AND split = $split),
        v AS (SELECT run_id, seed, accuracy,
                     CASE WHEN feature_set LIKE 'untrained/%' THEN 'untrained'
                          WHEN feature_set LIKE 'control/%' THEN 'control' ELSE 'trained' END AS measure,
                     CASE WHEN feature_set LIKE '%/%' THEN split_part(feature_set, '/', 2)
                          ELSE feature_set END AS base
              FROM o),
        bases AS (SELECT DISTINCT base FROM v WHERE measure <> 'trained'),
        w AS (SELECT v.* FROM v JOIN bases USING (base)),
        per_run AS (
            SELECT seed, base AS feature_set, measure, accuracy AS value FROM w
            UNION ALL SELECT a.seed, a.base, CASE b.measure WHEN 'control' THEN 'selectivity' ELSE 'training_gain' END,
                             a.accuracy - b.accuracy
                FROM w a JOIN w b ON a.run_id = b.run_id AND a.base = b.base
                WHERE a.measure = 'trained' AND b.measure <> 'trained'
        )
        {_across_runs("SELECT * FROM per_run", "feature_set, measure")}"""
    return _frame(sql, {"ids": _ids(run_ids), "split": split}, home)


# -- the content experiment (PAPER.md §3) -------------------------------------------------------------
# A variant is (model, predictor, attn_input) read from the config: a GPT keeps the predictor and
# attention input of the SPEN it was sized to.  Runs are *comparable* when their configs agree once
# the variant, the seed and the settings that cannot change a number are set aside.

LM_VARIANT_FIELDS = ("model", "predictor", "attn_input", "seed", "device", "threads", "log_every", "checkpoint_every")
# A JSON merge patch (RFC 7396) that deletes those fields: what is left is the comparable config.
_LM_COMPARABLE = "json_merge_patch(r.config, $drop)::VARCHAR"
_LM_DROP = json.dumps({k: None for k in LM_VARIANT_FIELDS})
_LM_ORDER = ("list_position(['gpt', 'spen'], {p}model), list_position(['linear', 'linear_attention', "
             "'softmax_attention'], {p}predictor), list_position(['state', 'sequence', 'tokens'], {p}attn_input)")
_LM_RUNS = f"""SELECT r.run_id, r.seed, r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                      r.config->>'attn_input' AS attn_input, {_LM_COMPARABLE} AS comparable,
                      (r.summary->>'params')::BIGINT AS params
               FROM runs r WHERE r.kind = 'lm' AND {_RUN_FILTER.format(col='r.run_id')}"""


def lm_runs(run_ids: RunIds = None, status: str | Iterable[str] | None = None, *,
            home: Path | None = None) -> pd.DataFrame:
    """Language-model runs with config and summary fields flattened, newest first.

    Columns: run_id, seed, status, started, model, predictor, attn_input, size, corpus (the
    summary's name, else the config's), val_doc, steps, batch, seq_len, vocab_size (the
    tokenizer's, else the config's), params, tokens (training tokens), tokens_per_step, val_loss,
    val_ppl, val_bpb, tokens_per_s, seconds, matched_to, group_id (a short hash of the comparable
    config: runs with the same group_id differ only in variant and seed), comparable (that config as
    JSON text), config.
    """
    statuses = [status] if isinstance(status, str) else (list(status) if status is not None else None)
    return _frame(
        f"""SELECT r.run_id, r.seed, r.status, coalesce(r.started_at, r.created_at) AS started,
                   r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                   r.config->>'attn_input' AS attn_input, r.config->>'size' AS size,
                   coalesce(r.summary->>'corpus', r.config->>'corpus') AS corpus, r.config->>'val_doc' AS val_doc,
                   (r.config->>'steps')::BIGINT AS steps, (r.config->>'batch')::BIGINT AS batch,
                   (r.config->>'seq_len')::BIGINT AS seq_len,
                   coalesce((r.summary->>'vocab_size')::BIGINT, (r.config->>'vocab_size')::BIGINT) AS vocab_size,
                   (r.summary->>'params')::BIGINT AS params, (r.summary->>'tokens')::BIGINT AS tokens,
                   coalesce((r.summary->>'tokens')::DOUBLE / (r.config->>'steps')::DOUBLE,
                            (r.config->>'batch')::DOUBLE * (r.config->>'seq_len')::DOUBLE) AS tokens_per_step,
                   (r.summary->>'val_loss')::DOUBLE AS val_loss, (r.summary->>'val_ppl')::DOUBLE AS val_ppl,
                   (r.summary->>'val_bpb')::DOUBLE AS val_bpb, (r.summary->>'tokens_per_s')::DOUBLE AS tokens_per_s,
                   (r.summary->>'seconds')::DOUBLE AS seconds, r.summary->>'matched_to' AS matched_to,
                   left(md5({_LM_COMPARABLE}), 8) AS group_id, {_LM_COMPARABLE} AS comparable,
                   r.config::VARCHAR AS config
            FROM runs r
            WHERE r.kind = 'lm' AND {_RUN_FILTER.format(col='r.run_id')}
              AND ($statuses::VARCHAR[] IS NULL OR r.status IN (SELECT unnest($statuses::VARCHAR[])))
            ORDER BY started DESC NULLS LAST, {_LM_ORDER.format(p='')}, r.seed, r.run_id""",
        {"ids": _ids(run_ids), "statuses": statuses, "drop": _LM_DROP}, home,
    )


def lm_curves(run_ids: RunIds, key: str = "val/loss", *, home: Path | None = None) -> pd.DataFrame:
    """One metric of language-model runs over training: run_id, seed, model, predictor, attn_input,
    step (optimiser steps), tokens (training tokens seen by then), value.

    Tokens per step come from the summary (tokens ÷ steps: every process of a DDP run counts), or,
    for a run with no summary yet, from batch × seq_len.  A step logged twice (a resumed run) keeps
    its newest value, as in :func:`metric_series`.
    """
    return _frame(
        f"""SELECT m.run_id, r.seed, r.config->>'model' AS model, r.config->>'predictor' AS predictor,
                   r.config->>'attn_input' AS attn_input, m.step,
                   m.step * coalesce((r.summary->>'tokens')::DOUBLE / (r.config->>'steps')::DOUBLE,
                                     (r.config->>'batch')::DOUBLE * (r.config->>'seq_len')::DOUBLE) AS tokens,
                   m.value
            FROM metrics m JOIN runs r USING (run_id)
            WHERE m.key = $key AND r.kind = 'lm' AND {_RUN_FILTER.format(col='m.run_id')}
            QUALIFY row_number() OVER (PARTITION BY m.run_id, m.step ORDER BY m.seq DESC) = 1
            ORDER BY {_LM_ORDER.format(p='')}, r.seed, m.run_id, m.step""",
        {"key": key, "ids": _ids(run_ids)}, home,
    )


# Each SPEN run beside the GPT of the same seed and comparable config: the GPT sized to this very
# SPEN when there is one, else the GPT sized to the linear SPEN (the launch form's GPT).
_LM_EVAL_ROWS = f"""
    base AS ({_LM_RUNS}),
    ev AS (SELECT b.*, e.loss, e.ppl, e.bpb FROM base b JOIN lm_eval e USING (run_id)
           WHERE e.split = $split AND isfinite(e.loss)),
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
    return _frame(sql, {"ids": _ids(run_ids), "split": split, "drop": _LM_DROP}, home)


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
        SELECT * FROM ({_across_runs("SELECT * FROM per_seed", "measure")})
        UNION ALL
        SELECT 'noise_state', count(*), array_to_string(list_sort(list_distinct(flatten(list(seeds)))), ','),
               sqrt(avg(var)), NULL
        FROM v HAVING count(*) > 0
        ORDER BY measure"""
    return _frame(sql, {"ids": _ids(run_ids), "split": split, "drop": _LM_DROP}, home)


# -- overview -----------------------------------------------------------------------------------------

def store_summary(*, home: Path | None = None) -> dict:
    """Counts for a dashboard: runs, runs per (kind, status), metric rows, rows per result table."""
    with open_store(readonly=True, home=home) as conn:
        by_kind = conn.execute(
            "SELECT kind, status, count(*) AS runs FROM runs GROUP BY kind, status ORDER BY kind, status").df()
        metric_rows = conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
        results = {name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
                   for name in (*RESULT_QUERIES, "bench_figures")}
    return {"runs": int(by_kind["runs"].sum()) if len(by_kind) else 0, "by_kind_status": by_kind,
            "metric_rows": int(metric_rows), "results": results}


# -- mean ± std across seeds --------------------------------------------------------------------------

class GroupSpec(NamedTuple):
    keys: tuple[str, ...]    # what a row measures (besides the run), kept as columns
    values: tuple[str, ...]  # what is averaged across seeds
    labels: tuple[str, ...] = ()  # what the run was (from its config), always shown; equal across seeds


RESULT_QUERIES = {"dilution_accuracy": dilution_accuracy, "probe_accuracy": probe_accuracy, "lm_eval": lm_eval}
LM_LABELS = ("model", "predictor", "attn_input", "size", "corpus", "params")
GROUPABLE = {
    "dilution_accuracy": GroupSpec(("feature", "lag"), ("accuracy", "chance")),
    "probe_accuracy": GroupSpec(("feature_set", "role", "split"), ("accuracy",)),
    "lm_eval": GroupSpec(("split",), ("loss", "ppl", "bpb"), LM_LABELS),
    "metrics_final": GroupSpec(("key",), ("value",)),
}
# The rows an export of each run table starts from (lm_eval with its labels).
EXPORT_SOURCES = {**RESULT_QUERIES, "lm_eval": lm_eval_labelled, "metrics_final": final_metrics}
_GROUP_SOURCES = EXPORT_SOURCES


def config_without_seed(config: Any) -> Any:
    """A run's config with its seed removed: runs equal in this differ only by seed."""
    if isinstance(config, dict):
        return {k: v for k, v in config.items() if k != "seed"}
    return config


def config_id(kind: str, config: Any) -> str:
    """A short hash of kind + config without seed: runs with the same id differ only by seed."""
    text = canonical_json({"kind": kind, "config": config_without_seed(config)})
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1] or "config": obj}


def _run_fields(run_ids: list[str], home: Path | None) -> dict[str, tuple[str, dict[str, Any]]]:
    """run_id -> (kind, its config without seed, flattened to ``a.b`` keys)."""
    runs = _frame(f"SELECT run_id, kind, config FROM runs WHERE {_RUN_FILTER.format(col='run_id')}",
                  {"ids": run_ids}, home)
    return {r.run_id: (r.kind, _flatten(config_without_seed(json.loads(r.config) if r.config else None)))
            for r in runs.itertuples()}


def varying_fields(fields: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    """The config fields that differ between the (kind, flattened config) given, kind by kind (a field
    of another kind's config is no setting of this one), sorted: the settings that tell rows apart."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for kind, flat in fields:
        by_kind.setdefault(kind, []).append(flat)
    out: set[str] = set()
    for flats in by_kind.values():
        for k in {k for f in flats for k in f}:
            if len({canonical_json(f.get(k)) for f in flats}) > 1:
                out.add(k)
    return sorted(out)


def _cell_value(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else canonical_json(v)


def _settings_column(run_ids: pd.Series, per_run: dict[str, Any]) -> pd.Series:
    values = run_ids.map(per_run)
    # Whole numbers stay whole where some runs lack the field (a float column would show 32.0).
    present = [v for v in per_run.values() if v is not None]
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return values.astype("Int64")
    return values.astype(object)


def labelled(table: str, run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """The rows of an export of a run table, each telling what it measured.

    The table's own columns (``lm_eval`` with model, predictor, attention input, size, corpus and
    params), then, after ``seed``, one column per config field that differs between the runs shown
    (``config.<field>`` where the name is taken), and ``kind`` for ``metrics_final``.  Runs that
    differ only by seed add no column: run_id and seed tell them apart.
    """
    if table not in EXPORT_SOURCES:
        raise ValueError(f"no labelled rows for {table!r}; tables: {sorted(EXPORT_SOURCES)}")
    rows = EXPORT_SOURCES[table](run_ids, home=home)
    fields = _run_fields(sorted(rows["run_id"].unique().tolist()), home) if len(rows) else {}
    labels = GROUPABLE[table].labels if table in GROUPABLE else ()
    at = rows.columns.get_loc("seed") + 1
    if table == "metrics_final":
        rows.insert(at, "kind", rows["run_id"].map({r: kind for r, (kind, _) in fields.items()}).astype(object))
        at += 1
    # Mapped per run, not per row: a table may hold a hundred thousand rows.
    for k in [k for k in varying_fields(fields.values()) if k not in labels]:
        name = f"config.{k}" if k in rows.columns or k == "kind" else k
        per_run = {r: _cell_value(flat.get(k)) for r, (_, flat) in fields.items()}
        rows.insert(at, name, _settings_column(rows["run_id"], per_run))
        at += 1
    return rows


def grouped(table: str, run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """Mean, sample standard deviation and count across seeds of runs with equal configs.

    Columns: config_id (a short hash of kind + config without seed), kind, one column per config
    field that differs between the groups shown, the table's key columns, n (seeds), seeds, then
    ``<value>_mean`` and ``<value>_std`` per value column.  With one seed the std is empty.
    """
    if table not in GROUPABLE:
        raise ValueError(f"cannot group {table!r}; groupable tables: {sorted(GROUPABLE)}")
    spec = GROUPABLE[table]
    rows = _GROUP_SOURCES[table](run_ids, home=home)
    runs = _frame(
        f"SELECT run_id, kind, config FROM runs WHERE {_RUN_FILTER.format(col='run_id')}",
        # unique() first: iterating a hundred thousand Arrow-backed strings in Python takes a while.
        {"ids": sorted(rows["run_id"].unique().tolist())}, home,
    )
    configs = {r.run_id: (r.kind, config_without_seed(json.loads(r.config) if r.config else None))
               for r in runs.itertuples()}
    group_of, fields = {}, {}
    for run_id, (kind, cfg) in configs.items():
        gid = config_id(kind, cfg)
        group_of[run_id] = gid
        fields[gid] = (kind, _flatten(cfg))
    # Only the fields that tell the groups apart are worth a column; the rest is the same everywhere.
    # The labels (model, predictor, ...) are shown anyway, and once.
    varying = [k for k in varying_fields(fields.values()) if k not in spec.labels]
    taken = ({"config_id", "kind", "n", "seeds", *spec.keys, *spec.labels}
             | {f"{v}_{s}" for v in spec.values for s in ("mean", "std")})
    label = {k: (f"config.{k}" if k in taken else k) for k in varying}

    out_cols = (["config_id", "kind", *spec.labels, *label.values(), *spec.keys, "n", "seeds"]
                + [f"{v}_{s}" for v in spec.values for s in ("mean", "std")])
    if rows.empty:
        return pd.DataFrame(columns=out_cols)
    rows = rows.assign(config_id=rows["run_id"].map(group_of))
    by = ["config_id", *spec.keys]
    agg = rows.groupby(by, sort=True, dropna=False).agg(
        n=("run_id", "nunique"),
        **{f"{v}_{stat}": (v, stat) for v in spec.values for stat in ("mean", "std")},
    ).reset_index()
    # The seeds of each group as "0,1,2": concatenated by one grouped sum over text, since a Python
    # function per group costs most of a second with a thousand runs (ten thousand groups).
    seeds = rows.dropna(subset=["seed"]).drop_duplicates([*by, "seed"]).sort_values("seed", kind="stable")
    seeds = (seeds.assign(seeds=seeds["seed"].astype("int64").astype(str) + ",")
             .groupby(by, dropna=False)["seeds"].sum().str[:-1].reset_index())
    agg = agg.merge(seeds, on=by, how="left")
    agg["seeds"] = agg["seeds"].fillna("")
    agg.insert(1, "kind", agg["config_id"].map(lambda g: fields[g][0]))
    if spec.labels:  # equal across the seeds of a config: the first run's value
        firsts = rows.groupby("config_id", sort=False)[list(spec.labels)].first()
        agg = agg.merge(firsts, left_on="config_id", right_index=True, how="left")
    for field, col in label.items():
        agg[col] = agg["config_id"].map(lambda g, k=field: _cell_value(fields[g][1].get(k)))
    # What the runs were (model, predictor, ...) before the hash: like rows sit together.
    return agg[out_cols].sort_values(["kind", *spec.labels, "config_id", *spec.keys], kind="stable",
                                     ignore_index=True)
