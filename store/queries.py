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

from jobs.rundir import canonical_json

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


RESULT_QUERIES = {"dilution_accuracy": dilution_accuracy, "probe_accuracy": probe_accuracy, "lm_eval": lm_eval}
GROUPABLE = {
    "dilution_accuracy": GroupSpec(("feature", "lag"), ("accuracy", "chance")),
    "probe_accuracy": GroupSpec(("feature_set", "role", "split"), ("accuracy",)),
    "lm_eval": GroupSpec(("split",), ("loss", "ppl", "bpb")),
    "metrics_final": GroupSpec(("key",), ("value",)),
}
_GROUP_SOURCES = {**RESULT_QUERIES, "metrics_final": final_metrics}


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
        fields[gid] = {"kind": kind, **_flatten(cfg)}
    # Only the fields that tell the groups apart are worth a column; the rest is the same everywhere.
    names = sorted({k for f in fields.values() for k in f} - {"kind"})
    varying = [k for k in names if len({canonical_json(f.get(k)) for f in fields.values()}) > 1]
    taken = {"config_id", "kind", "n", "seeds", *spec.keys} | {f"{v}_{s}" for v in spec.values for s in ("mean", "std")}
    label = {k: (f"config.{k}" if k in taken else k) for k in varying}

    out_cols = (["config_id", "kind", *label.values(), *spec.keys, "n", "seeds"]
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
    agg.insert(1, "kind", agg["config_id"].map(lambda g: fields[g]["kind"]))
    for pos, (field, col) in enumerate(label.items()):
        values = agg["config_id"].map(lambda g, k=field: fields[g].get(k))
        agg.insert(2 + pos, col, values.map(lambda v: v if isinstance(v, (str, int, float, bool)) or v is None
                                            else canonical_json(v)))
    return agg[out_cols].sort_values(["kind", "config_id", *spec.keys], kind="stable", ignore_index=True)
