"""The structure study's queries (PAPER.md §2): probe accuracy of SPCN features against the BiGRU,
with its headline numbers and the probes' controls."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from ema_core.studies.structure import KIND
from ema_core.studies.structure.findings import (NGRAM_BASELINE, SPCN_HEADLINE, STRUCTURAL_ROLES, scores,
                                                 structure_verdicts)

from . import export
from .queries import RUN_FILTER, RunIds, RunTable, across_runs, id_list, list_runs, query_frame, register_run_table
from .scoreboard import Judged, judge_best, run_seeds

# Feature sets of a structure run: SPCN features read by a linear probe ("instantaneous", "traces",
# "both"), the n-gram window baseline ("ngram1", "ngram2", "ngram" = the last 1, 2, 3 word identities
# and the position, no EMA), the supervised "bigru", the word-identity baseline "word_majority", the
# same probes on an untrained SPCN ("untrained/<set>") and on the control tasks ("control/<set>":
# labels keyed on the word type, Hewitt & Liang; "control_prev/<set>": on word × the previous word's
# category; "control_pos/<set>": on word × position; role "overall", split "test" only).  Splits:
# test, novel, deep (scored) and dev, novel_dev (the tuning splits, recorded as what settings were
# chosen on).


def probe_accuracy(run_ids: RunIds = None, role: str | None = None, feature_set: str | None = None,
                   split: str | None = None, *, home: Path | None = None) -> pd.DataFrame:
    """Probe accuracy: run_id, seed, role, feature_set, split, accuracy."""
    return query_frame(
        f"""SELECT t.run_id, r.seed, t.role, t.feature_set, t.split, t.accuracy
            FROM probe_accuracy t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')}
              AND ($role::VARCHAR IS NULL OR t.role = $role)
              AND ($feature_set::VARCHAR IS NULL OR t.feature_set = $feature_set)
              AND ($split::VARCHAR IS NULL OR t.split = $split)
            ORDER BY t.run_id, t.feature_set, t.role, t.split""",
        {"ids": id_list(run_ids), "role": role, "feature_set": feature_set, "split": split}, home,
    )


def probe_accuracy_stats(run_ids: RunIds = None, split: str | None = None, *,
                         home: Path | None = None) -> pd.DataFrame:
    """Probe accuracy across runs: role, feature_set, split, n, seeds, accuracy_mean, accuracy_std.

    ``n`` counts the runs with a value; the standard deviation is the sample one (ddof 1), null
    with one run.  A (role, feature_set, split) that no run scored has no row.
    """
    return query_frame(
        f"""SELECT t.role, t.feature_set, t.split, count(t.accuracy) AS n,
                   array_to_string(list_sort(list(r.seed) FILTER (WHERE t.accuracy IS NOT NULL)), ',') AS seeds,
                   avg(t.accuracy) AS accuracy_mean, stddev_samp(t.accuracy) AS accuracy_std
            FROM probe_accuracy t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')} AND ($split::VARCHAR IS NULL OR t.split = $split)
              AND t.accuracy IS NOT NULL AND NOT isnan(t.accuracy)
            GROUP BY t.role, t.feature_set, t.split
            ORDER BY t.split, t.feature_set, t.role""",
        {"ids": id_list(run_ids), "split": split}, home,
    )


_PROBE_ROWS = f"""SELECT t.run_id, r.seed, t.role, t.feature_set, t.split, t.accuracy
                  FROM probe_accuracy t JOIN runs r USING (run_id)
                  WHERE {RUN_FILTER.format(col='t.run_id')} AND t.accuracy IS NOT NULL AND NOT isnan(t.accuracy)"""


def structure_headlines(run_ids: RunIds = None, structural_roles: Iterable[str] = (), spcn: str = "traces",
                        ngram: str = "ngram", *, home: Path | None = None) -> pd.DataFrame:
    """The structure study's headline numbers, per run then across runs.

    Columns: measure, n, seeds, value_mean, value_std.  Measures (SPCN = the probe on feature set
    ``spcn``; "overall" is token accuracy over the split):
    within_instantaneous, within_traces   overall accuracy on the test split
    spcn_over_bigru                       SPCN overall / BiGRU overall, test split
    structural_spcn, structural_bigru,    mean accuracy over the ``structural_roles`` that both
    structural_gap                        scored on the test split, and SPCN − BiGRU
    novel_structural_spcn, _bigru, _gap   the same on the novel-vocabulary split
    novel_agent_det_spcn, _bigru, _ngram  agent_det accuracy on the novel-vocabulary split
    novel_agent_det_gap                   SPCN − BiGRU there, per run
    spcn_minus_instantaneous              SPCN − instantaneous overall, test split, per run
    within_ngram                          the n-gram window (feature set ``ngram``), overall, test split
    novel_overall_spcn, _bigru, _ngram, deep_overall_spcn, _bigru, _ngram
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
            UNION ALL SELECT seed, 'within_ngram', accuracy FROM o WHERE split = 'test' AND feature_set = $ngram
            UNION ALL SELECT a.seed, 'spcn_minus_instantaneous', a.accuracy - b.accuracy
                FROM o a JOIN o b ON a.run_id = b.run_id AND a.split = b.split
                WHERE a.split = 'test' AND a.feature_set = $spcn AND b.feature_set = 'instantaneous'
            UNION ALL SELECT a.seed, 'novel_agent_det_gap', a.accuracy - b.accuracy
                FROM p a JOIN p b ON a.run_id = b.run_id AND a.split = b.split AND a.role = b.role
                WHERE a.split = 'novel' AND a.role = 'agent_det' AND a.feature_set = $spcn AND b.feature_set = 'bigru'
            UNION ALL SELECT a.seed, 'spcn_over_bigru', a.accuracy / b.accuracy
                FROM o a JOIN o b ON a.run_id = b.run_id AND a.split = b.split
                WHERE a.split = 'test' AND a.feature_set = $spcn AND b.feature_set = 'bigru' AND b.accuracy > 0
            UNION ALL SELECT seed, m || 'spcn', spcn FROM s
            UNION ALL SELECT seed, m || 'bigru', bigru FROM s
            UNION ALL SELECT seed, m || 'gap', spcn - bigru FROM s
            UNION ALL SELECT seed, CASE WHEN role = 'agent_det' THEN 'novel_agent_det_' ELSE split || '_overall_' END
                                   || CASE WHEN feature_set = 'bigru' THEN 'bigru'
                                           WHEN feature_set = $ngram THEN 'ngram' ELSE 'spcn' END, accuracy
                FROM p WHERE feature_set IN ($spcn, 'bigru', $ngram)
                  AND ((split = 'novel' AND role IN ('agent_det', 'overall')) OR (split = 'deep' AND role = 'overall'))
        )
        {across_runs("SELECT * FROM per_run", "measure")}"""
    return query_frame(sql, {"ids": id_list(run_ids), "structural": [str(r) for r in structural_roles], "spcn": spcn,
                             "ngram": ngram}, home)


def probe_control(run_ids: RunIds = None, split: str = "test", *, home: Path | None = None) -> pd.DataFrame:
    """Probe controls per feature set, per run then across runs (overall accuracy on ``split``).

    Columns: feature_set, measure, n, seeds, value_mean, value_std.  Measures: trained (the probe
    on the features themselves: the trained SPCN's, or the n-gram window's), untrained (the same
    probe on an untrained SPCN), control, control_prev, control_pos (the probe trained on a
    control task: labels keyed on the word type, Hewitt & Liang 2019; on word × the previous word's
    category; on word × position), selectivity, selectivity_prev, selectivity_pos (trained − the
    control) and training_gain (trained − untrained).  The feature sets are those with a control or
    an untrained counterpart.
    """
    sql = f"""
        WITH o AS (SELECT * FROM ({_PROBE_ROWS}) WHERE role = 'overall' AND split = $split),
        v AS (SELECT run_id, seed, accuracy,
                     CASE WHEN feature_set LIKE '%/%' THEN split_part(feature_set, '/', 1) ELSE 'trained' END
                         AS measure,
                     CASE WHEN feature_set LIKE '%/%' THEN split_part(feature_set, '/', 2)
                          ELSE feature_set END AS base
              FROM o),
        w0 AS (SELECT * FROM v WHERE measure IN ('trained', 'untrained', 'control', 'control_prev', 'control_pos')),
        bases AS (SELECT DISTINCT base FROM w0 WHERE measure <> 'trained'),
        w AS (SELECT w0.* FROM w0 JOIN bases USING (base)),
        per_run AS (
            SELECT seed, base AS feature_set, measure, accuracy AS value FROM w
            UNION ALL SELECT a.seed, a.base,
                             CASE b.measure WHEN 'untrained' THEN 'training_gain'
                                            ELSE replace(b.measure, 'control', 'selectivity') END,
                             a.accuracy - b.accuracy
                FROM w a JOIN w b ON a.run_id = b.run_id AND a.base = b.base
                WHERE a.measure = 'trained' AND b.measure <> 'trained'
        )
        {across_runs("SELECT * FROM per_run", "feature_set, measure")}"""
    return query_frame(sql, {"ids": id_list(run_ids), "split": split}, home)


register_run_table("probe_accuracy", RunTable(probe_accuracy, ("feature_set", "role", "split"), ("accuracy",)))
export.register_table("probe_accuracy", "probe accuracy per role, feature set and split")


def judged(home: Path | None = None) -> Judged:
    """The structure study's claims on the Overview's scoreboard, judged on its best group of finished runs."""
    def scores_of(ids: list[str], configs: dict) -> list:
        headlines = structure_headlines(ids, STRUCTURAL_ROLES, SPCN_HEADLINE, NGRAM_BASELINE, home=home)
        overall = probe_accuracy(ids, role="overall", home=home)
        return scores(structure_verdicts(headlines.to_dict("records"), overall.to_dict("records")).claims)

    runs = list_runs(kind=KIND, status="done", limit=None, home=home)
    return judge_best("structure", runs, run_seeds(runs), scores_of)
