"""The queries every study shares, and the machinery each study's queries are built from.

Runs, metrics, benchmark figures, the store's counts, and the labelling and grouping across seeds
of any run table.  What one study asks lives in that study's file of ``store/``, which registers its
run tables here (:func:`register_run_table`) when ``store`` is imported, so that this file names no
study.

User values reach DuckDB only as parameters (``$name``); the few identifiers spliced into SQL text
come from fixed tables (the schema's, or a study's registered ones).  Each function opens a short
read-only connection (see ``store.db``), so a page never holds the file; a store that does not
exist yet reads as empty, with the right columns.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

import pandas as pd

from ema_core.config import flatten
from ema_core.protocol import ResultTable
from ema_core.rundir import canonical_json

from . import schema
from .db import open_store

RunIds = Iterable[str] | str | None
# A run filter on column ``col``, bound to ``$ids`` (:func:`id_list`): NULL means every run; a list
# (possibly empty) means exactly those.
RUN_FILTER = "($ids::VARCHAR[] IS NULL OR {col} IN (SELECT unnest($ids::VARCHAR[])))"


def id_list(run_ids: RunIds) -> list[str] | None:
    """The ``$ids`` parameter of :data:`RUN_FILTER` for a run selection."""
    if run_ids is None:
        return None
    if isinstance(run_ids, str):
        return [run_ids]
    return [str(r) for r in run_ids]


def query_frame(sql: str, params: dict[str, Any], home: Path | None = None) -> pd.DataFrame:
    """The rows of one parameterised query, read on a short read-only connection."""
    with open_store(readonly=True, home=home) as conn:
        return conn.execute(sql, params).df()


def across_runs(per_run: str, keys: str) -> str:
    """SQL for mean, sample std (null with one run), n and seeds of ``value`` per ``keys``, over a
    per-run query with columns seed, ``keys`` and value; null and non-finite values are left out."""
    # Derived values are formed within a run (a ratio, a difference) and only then averaged, so
    # that the spread is the spread across seeds of the quantity itself.
    return f"""SELECT {keys}, count(value) AS n, array_to_string(list_sort(list(seed)), ',') AS seeds,
                      avg(value) AS value_mean, stddev_samp(value) AS value_std
               FROM ({per_run}) WHERE value IS NOT NULL AND isfinite(value)
               GROUP BY {keys} ORDER BY {keys}"""


# -- runs ---------------------------------------------------------------------------------------------

def list_runs(kind: str | None = None, status: str | Iterable[str] | None = None, limit: int | None = 500,
              *, run_ids: RunIds = None, home: Path | None = None) -> pd.DataFrame:
    """Runs, newest first: run_id, kind, seed, status, times, code_version, host, message, config, summary."""
    statuses = [status] if isinstance(status, str) else (list(status) if status is not None else None)
    return query_frame(
        f"""SELECT run_id, kind, seed, status, created_at, started_at, ended_at, code_version, host,
                   message, config, summary
            FROM runs
            WHERE ($kind::VARCHAR IS NULL OR kind = $kind)
              AND ($statuses::VARCHAR[] IS NULL OR status IN (SELECT unnest($statuses::VARCHAR[])))
              AND {RUN_FILTER.format(col='run_id')}
            ORDER BY coalesce(started_at, created_at) DESC NULLS LAST, run_id
            LIMIT $limit""",
        {"kind": kind, "statuses": statuses, "ids": id_list(run_ids),
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
            # Table names from the schema, never from the caller.
            name: conn.execute(f"SELECT count(*) FROM {name} WHERE run_id = $id", {"id": run_id}).fetchone()[0]
            for name in schema.result_tables()
        }
    return detail


# -- metrics ------------------------------------------------------------------------------------------

def metric_keys(run_ids: RunIds = None, *, home: Path | None = None) -> list[str]:
    """The metric keys logged by these runs (all runs when None), sorted."""
    df = query_frame(f"SELECT DISTINCT key FROM metrics WHERE {RUN_FILTER.format(col='run_id')} ORDER BY key",
                     {"ids": id_list(run_ids)}, home)
    return df["key"].tolist()


def metric_series(run_ids: RunIds, key: str, *, home: Path | None = None) -> pd.DataFrame:
    """One metric over time: run_id, seq, step, value, one row per step.

    A run resumed from a checkpoint logs again the steps between that checkpoint and the crash
    (with new seq numbers); the newest logging of a step is the one the run's final state came
    from, so it wins.
    """
    return query_frame(
        f"""SELECT run_id, seq, step, value FROM metrics
            WHERE key = $key AND {RUN_FILTER.format(col='run_id')}
            QUALIFY row_number() OVER (PARTITION BY run_id, step ORDER BY seq DESC) = 1
            ORDER BY run_id, step""",
        {"key": key, "ids": id_list(run_ids)}, home,
    )


def final_metrics(run_ids: RunIds = None, keys: Iterable[str] | None = None, *,
                  home: Path | None = None) -> pd.DataFrame:
    """The last logged value of each key per run: run_id, seed, key, step, value."""
    return query_frame(
        f"""SELECT m.run_id, r.seed, m.key, arg_max(m.step, m.seq) AS step, arg_max(m.value, m.seq) AS value
            FROM metrics m JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='m.run_id')}
              AND ($keys::VARCHAR[] IS NULL OR m.key IN (SELECT unnest($keys::VARCHAR[])))
            GROUP BY m.run_id, r.seed, m.key
            ORDER BY m.run_id, m.key""",
        {"ids": id_list(run_ids), "keys": None if keys is None else list(keys)}, home,
    )


def bench_figures(bench: str | None = None, latest: bool = True, *, home: Path | None = None) -> pd.DataFrame:
    """Benchmark figures: bench, key, value, measured_at, machine, command (newest first).

    ``latest`` keeps only the newest measurement of each (bench, key)."""
    return query_frame(
        """SELECT bench, key, value, measured_at, machine, command FROM bench_figures
           WHERE ($bench::VARCHAR IS NULL OR bench = $bench)
           QUALIFY NOT $latest OR row_number() OVER (PARTITION BY bench, key ORDER BY measured_at DESC) = 1
           ORDER BY measured_at DESC, bench, key""",
        {"bench": bench, "latest": bool(latest)}, home,
    )


# -- overview -----------------------------------------------------------------------------------------

def store_summary(*, home: Path | None = None) -> dict:
    """Counts for a dashboard: runs, runs per (kind, status), metric rows, rows per result table."""
    with open_store(readonly=True, home=home) as conn:
        by_kind = conn.execute(
            "SELECT kind, status, count(*) AS runs FROM runs GROUP BY kind, status ORDER BY kind, status").df()
        metric_rows = conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
        results = {name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
                   for name in (*schema.result_tables(), "bench_figures")}
    return {"runs": int(by_kind["runs"].sum()) if len(by_kind) else 0, "by_kind_status": by_kind,
            "metric_rows": int(metric_rows), "results": results}


# -- mean ± std across seeds --------------------------------------------------------------------------

class RunTable(NamedTuple):
    """A table with one row per measurement of a run, as exported and as grouped across seeds."""
    rows: Callable[..., pd.DataFrame]  # (run_ids, *, home) -> its rows, run_id and seed first
    keys: tuple[str, ...]    # what a row measures (besides the run), kept as columns
    values: tuple[str, ...]  # what is averaged across seeds
    labels: tuple[str, ...] = ()  # what the run was (from its config), always shown; equal across seeds
    # True where one run holds several seeds and each row carries its own ``seed``: grouping then
    # spreads over the rows' seeds (within a run and across runs), counts those seeds as ``n`` and
    # says in ``runs`` how many runs they came from.  False: ``seed`` is the run's, one per run.
    seeds_in_rows: bool = False
    # True where the rows come in the order their keys are read in (the study's order, which the
    # alphabet would break: "k=16" before "k=2"): the grouped rows keep that order of the keys.
    ordered: bool = False


# The run tables that can be labelled (:func:`labelled`) and grouped across seeds (:func:`grouped`),
# by name: the final metrics here, each study's own tables from its file in store/.
GROUPABLE: dict[str, RunTable] = {}


def register_run_table(name: str, table: RunTable) -> None:
    """Declare a run table under the name that exports and :func:`grouped` know it by."""
    if name in GROUPABLE:
        raise ValueError(f"run table {name!r} is declared twice")
    GROUPABLE[name] = table


def declared_rows(table: ResultTable) -> Callable[..., pd.DataFrame]:
    """The reader of a result table a study declares (``Study.tables``): its rows with run_id and seed
    first (a row's own seed where the table keys on one, its run's otherwise), by key and run."""
    cols = [c.name for c in table.columns if c.name != "seed"]
    seed = "t.seed" if "seed" in table.keys else "r.seed"
    order = ", ".join([f"t.{k}" for k in table.keys] + ["t.run_id"])
    sql = f"""SELECT t.run_id, {seed} AS seed, {', '.join(f't.{c}' for c in cols)}
              FROM {table.name} t JOIN runs r USING (run_id)
              WHERE {RUN_FILTER.format(col='t.run_id')} ORDER BY {order}"""

    def rows(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
        return query_frame(sql, {"ids": id_list(run_ids)}, home)

    return rows


def register_declared(table: ResultTable) -> None:
    """Declare a study's result table to grouping (and, by the caller, to export)."""
    register_run_table(table.name, RunTable(declared_rows(table), tuple(k for k in table.keys if k != "seed"),
                                            table.values, seeds_in_rows="seed" in table.keys))


def config_without_seed(config: Any) -> Any:
    """A run's config with its seed removed: runs equal in this differ only by seed."""
    if isinstance(config, dict):
        return {k: v for k, v in config.items() if k != "seed"}
    return config


def config_id(kind: str, config: Any) -> str:
    """A short hash of kind + config without seed: runs with the same id differ only by seed."""
    text = canonical_json({"kind": kind, "config": config_without_seed(config)})
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _flat_config(config: Any) -> dict[str, Any]:
    config = config_without_seed(config)
    return flatten(config) if isinstance(config, dict) else {"config": config}


def _run_fields(run_ids: list[str], home: Path | None) -> dict[str, tuple[str, dict[str, Any]]]:
    """run_id -> (kind, its config without seed, flattened to ``a.b`` keys)."""
    runs = query_frame(f"SELECT run_id, kind, config FROM runs WHERE {RUN_FILTER.format(col='run_id')}",
                       {"ids": run_ids}, home)
    return {r.run_id: (r.kind, _flat_config(json.loads(r.config) if r.config else None))
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


# A setting one run of a config diff does not have (another kind's, or one added since it ran).
ABSENT = "—"


def config_diff(a: tuple[str, Any], b: tuple[str, Any]) -> pd.DataFrame:
    """Two runs' settings side by side, from their (kind, config): columns setting, a, b, same.

    One row per dotted setting of either config (``train.lr``), in the configs' own order (a's, then
    those only b has), after the kind and the seed; a value is shown as text (JSON for a number, a
    list or null), :data:`ABSENT` where that run has no such setting.  ``same`` says whether the two
    agree; a page shows the rows where they do not, and the rest on request.  Settings are compared
    by their dotted path whatever the kinds: runs of two studies still share ``seed`` or ``device``.
    """
    (kind_a, config_a), (kind_b, config_b) = a, b
    flat_a, flat_b = _flat_config(config_a), _flat_config(config_b)
    # One "kind" for both, so that varying_fields compares across studies too (it keeps kinds apart).
    differ = set(varying_fields([("", flat_a), ("", flat_b)]))

    def seed(config: Any) -> Any:
        return config.get("seed", ABSENT) if isinstance(config, dict) else ABSENT

    rows = [("kind", kind_a, kind_b, kind_a == kind_b),
            ("seed", _shown(seed(config_a)), _shown(seed(config_b)), seed(config_a) == seed(config_b))]
    for key in dict.fromkeys([*flat_a, *flat_b]):
        both = key in flat_a and key in flat_b  # a setting one run lacks differs even from null
        rows.append((key, _shown(flat_a[key]) if key in flat_a else ABSENT,
                     _shown(flat_b[key]) if key in flat_b else ABSENT, both and key not in differ))
    return pd.DataFrame(rows, columns=["setting", "a", "b", "same"])


def _shown(v: Any) -> str:
    # Text throughout: a column mixing numbers, lists and names cannot be one Arrow type.
    return v if isinstance(v, str) else canonical_json(v)


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

    The table's own columns (those of a study's table include its ``labels``: what the run was),
    then, after ``seed``, one column per config field that differs between the runs shown
    (``config.<field>`` where the name is taken), and ``kind`` for ``metrics_final``.  Runs that
    differ only by seed add no column: run_id and seed tell them apart.
    """
    if table not in GROUPABLE:
        raise ValueError(f"no labelled rows for {table!r}; tables: {sorted(GROUPABLE)}")
    rows = GROUPABLE[table].rows(run_ids, home=home)
    fields = _run_fields(sorted(rows["run_id"].unique().tolist()), home) if len(rows) else {}
    labels = GROUPABLE[table].labels
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
    ``<value>_mean`` and ``<value>_std`` per value column.  With one seed the std is empty.  A table
    whose rows carry their own seeds (``RunTable.seeds_in_rows``) spreads over those, within a run
    too, and has ``runs`` (the runs they came from) before ``n``.
    """
    if table not in GROUPABLE:
        raise ValueError(f"cannot group {table!r}; groupable tables: {sorted(GROUPABLE)}")
    spec = GROUPABLE[table]
    rows = spec.rows(run_ids, home=home)
    runs = query_frame(
        f"SELECT run_id, kind, config FROM runs WHERE {RUN_FILTER.format(col='run_id')}",
        # unique() first: iterating a hundred thousand Arrow-backed strings in Python takes a while.
        {"ids": sorted(rows["run_id"].unique().tolist())}, home,
    )
    configs = {r.run_id: (r.kind, config_without_seed(json.loads(r.config) if r.config else None))
               for r in runs.itertuples()}
    group_of, fields = {}, {}
    for run_id, (kind, cfg) in configs.items():
        gid = config_id(kind, cfg)
        group_of[run_id] = gid
        fields[gid] = (kind, _flat_config(cfg))
    # Only the fields that tell the groups apart are worth a column; the rest is the same everywhere.
    # The labels are shown anyway, and once.
    varying = [k for k in varying_fields(fields.values()) if k not in spec.labels]
    counts = ["runs", "n"] if spec.seeds_in_rows else ["n"]
    taken = ({"config_id", "kind", "seeds", *counts, *spec.keys, *spec.labels}
             | {f"{v}_{s}" for v in spec.values for s in ("mean", "std")})
    label = {k: (f"config.{k}" if k in taken else k) for k in varying}

    out_cols = (["config_id", "kind", *spec.labels, *label.values(), *spec.keys, *counts, "seeds"]
                + [f"{v}_{s}" for v in spec.values for s in ("mean", "std")])
    if rows.empty:
        return pd.DataFrame(columns=out_cols)
    rows = rows.assign(config_id=rows["run_id"].map(group_of))
    by = ["config_id", *spec.keys]
    if spec.seeds_in_rows:
        # One measurement per seed: a run of three seeds counts three.  A seed that two runs of one
        # config both hold (seed ranges that overlap: seeds 0–2 and 1–3) is one measurement, not two,
        # and its rows are equal (a cell's numbers follow from the config and its seed): the first is
        # kept, so the mean and std see it once.  ``runs`` still counts every run the rows came from.
        runs_of = rows.groupby(by, dropna=False)["run_id"].nunique().rename("runs").reset_index()
        rows = rows.drop_duplicates([*by, "seed"])
        count = {"n": ("seed", "nunique")}
    else:
        count = {"n": ("run_id", "nunique")}
    agg = rows.groupby(by, sort=True, dropna=False).agg(
        **count,
        **{f"{v}_{stat}": (v, stat) for v in spec.values for stat in ("mean", "std")},
    ).reset_index()
    if spec.seeds_in_rows:
        agg = agg.merge(runs_of, on=by, how="left")
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
    # What the runs were (the labels) before the hash: like rows sit together.
    order = ["kind", *spec.labels, "config_id"]
    if not spec.ordered:
        return agg[out_cols].sort_values([*order, *spec.keys], kind="stable", ignore_index=True)
    # Each group's keys ranked, as one tuple, by where they first come in the rows: a value two groups share
    # (the class "not_recall" of two partitions) sits where each of its own rows came.  Missing values
    # are matched as missing (a NaN equals no NaN otherwise) and rank where they come too.
    def key_tuples(frame: pd.DataFrame) -> pd.Series:
        return pd.Series(list(zip(*(frame[k].astype(object).where(frame[k].notna(), None) for k in spec.keys))),
                         index=frame.index)

    seen = pd.unique(key_tuples(rows))
    rank = key_tuples(agg).map(dict(zip(seen, range(len(seen)))))
    return agg.assign(_rank=rank).sort_values([*order, "_rank"], kind="stable", ignore_index=True)[out_cols]


# Every kind of run logs metrics: the one run table that belongs to no study.
register_run_table("metrics_final", RunTable(final_metrics, ("key",), ("value",)))
