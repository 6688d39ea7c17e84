"""Ingest: the only code that writes the store.

It reads run folders (``ema_core.rundir``) and copies what is new into DuckDB: the run's row (status,
times, summary), the events appended since the byte offset it stopped at last time, and the typed
result tables once ``result.json`` appears.  Everything for one run goes in one transaction with
the new offset, so a kill at any moment leaves the rows and the offset of the previous pass, and
the next pass picks up from there.  Metric rows are keyed by ``(run_id, seq, key)`` and inserted
with ``ON CONFLICT DO NOTHING``: reading an event twice never doubles it.

The write lock is held for one batch of runs at a time (about ``max_hold_s``), so readers get in
between batches when there are many runs.

Every page load ingests, so a pass that finds nothing new must cost next to nothing however many
finished runs the data folder holds: a run whose files and store rows are as a previous pass of this
process left them is passed over on a few ``stat`` calls, without reading or parsing its files.
"""
from __future__ import annotations

import contextlib
import json
import numbers
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import duckdb
import pandas as pd

from ema_core.rundir import RunDir, canonical_json, emalab_home, iter_run_dirs

from . import schema
from .db import open_store, storage_problem

_RUN_COLUMNS = ("kind", "config", "seed", "status", "created_at", "started_at", "ended_at",
                "code_version", "host", "summary", "message")
DAMAGED = "damaged: "  # starts runs.message while a run's result.json cannot be read (see the store's docstring)


class ResultError(ValueError):
    """A result.json whose tables do not have the shape the store expects."""


def _new_report() -> dict:
    return {"runs_seen": 0, "runs_updated": 0, "events": 0, "metric_rows": 0, "bad_lines": 0,
            "skipped_values": 0, "results": 0, "unknown_tables": {}, "errors": []}


def ingest(home: Path | None = None, run_ids: Iterable[str] | None = None, *,
           timeout: float | None = None, max_hold_s: float = 0.5) -> dict:
    """Bring the store up to date with the run folders (all, or those in ``run_ids``).

    Returns a report: runs seen and updated, events and metric rows added, malformed event lines
    skipped, results ingested, unknown result tables (per run) and per-run errors.  A problem with
    one run is reported and does not stop the others; a data folder that cannot be written raises
    ``StorageError``; a store held too long by others raises ``StoreBusy``.
    """
    home = Path(home or emalab_home())
    report = _new_report()
    dirs = list(iter_run_dirs(home))
    if run_ids is not None:
        wanted = {run_ids} if isinstance(run_ids, str) else set(run_ids)
        found = {rd.run_id for rd in dirs}
        report["errors"] += [{"run_id": r, "error": "no such run folder"} for r in sorted(wanted - found)]
        dirs = [rd for rd in dirs if rd.run_id in wanted]
    report["runs_seen"] = len(dirs)
    if not dirs:
        return report
    settled_before = time.time_ns() - _SETTLE_NS
    i = 0
    while i < len(dirs):
        with open_store(readonly=False, home=home, timeout=timeout) as conn:
            # Only touched inside a write session, which is exclusive within the process.
            seen = _SEEN.setdefault(str(home.resolve()), {})
            if run_ids is None and i == 0:
                for gone in seen.keys() - {rd.run_id for rd in dirs}:
                    del seen[gone]
            known = _known_state(conn, [rd.run_id for rd in dirs[i:]])
            held_since = time.monotonic()
            while i < len(dirs):
                rd = dirs[i]
                i += 1
                state = known.get(rd.run_id)
                files = _files_identity(rd)
                if state is not None and seen.get(rd.run_id) == (files, state):
                    continue
                errors = len(report["errors"])
                seen.pop(rd.run_id, None)
                nothing_new = _ingest_run(conn, rd, state, report)
                # Remembered only when the files had stopped changing before this pass began: a
                # file rewritten within the file system's timestamp granularity (and given the inode
                # its predecessor just freed) could otherwise look unchanged.
                if nothing_new and len(report["errors"]) == errors and _settled(files, settled_before):
                    seen[rd.run_id] = (files, state)
                if time.monotonic() - held_since > max_hold_s:
                    break  # let readers in before the next batch
    return report


# Per data folder: run id -> (identity of its files, its store row and ingest state) as of a pass
# that found nothing to ingest.  When both are still the same, ingesting the run again would find
# nothing again, so it is skipped.  Process memory rather than a store column: it only saves reading
# files, and the store's own state is compared every time, so another process's writes, or a store
# replaced by a new file, are never missed.
_SEEN: dict[str, dict[str, tuple]] = {}
_SETTLE_NS = 2_000_000_000  # coarser than any file system's timestamps (FAT's are 2 s)


def forget_seen() -> None:
    """Forget which runs earlier passes of this process found unchanged: the next ingest looks at
    every run folder again, as the first one after a restart does (``bench.pages`` measures that)."""
    _SEEN.clear()


_FILES = ("config.json", "status.json", "events.jsonl", "result.json")  # what _ingest_run reads


def _files_identity(rd: RunDir) -> tuple:
    out = []
    folder = os.fspath(rd.path)
    for name in _FILES:
        try:
            st = os.stat(os.path.join(folder, name))
        except FileNotFoundError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def _settled(files: tuple, before_ns: int) -> bool:
    return all(f is None or max(f[2], f[3]) < before_ns for f in files)


def _known_state(conn: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, tuple]:
    rows = conn.execute(
        f"""SELECT r.run_id, {', '.join('r.' + c for c in _RUN_COLUMNS)},
                   s.events_offset, s.result_ingested, s.bad_lines
            FROM runs r LEFT JOIN ingest_state s USING (run_id)
            WHERE r.run_id IN (SELECT unnest(?::VARCHAR[]))""",
        [run_ids],
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


# -- one run ------------------------------------------------------------------------------------------

def _ingest_run(conn: duckdb.DuckDBPyConnection, rd: RunDir, known: tuple | None, report: dict) -> bool:
    """Bring one run up to date; True when the store already held everything its folder has."""
    cfg, problem = _read_config(rd)
    if problem is not None:
        return _report_error(report, rd, problem)
    status = rd.read_status()
    result, damage = _read_result(rd)
    if damage is not None:
        _report_error(report, rd, damage)  # and carry on: the rest of the run still goes in
    known_row, offset, result_done, bad_total = _split_known(known)
    row = _new_run_row(cfg, status, result, known_row, damage)
    events, offset, new_offset, bad = _new_events(rd, offset)
    # Building even an empty frame costs a millisecond or two: most runs have no new events.
    metrics, bad_events, skipped = _metric_frame(rd.run_id, events) if events else (None, 0, 0)
    bad += bad_events
    tables, ingest_result = _pending_result(rd, result, result_done, report)
    if row == known_row and new_offset == offset and not ingest_result and known is not None:
        return True
    try:
        added = _write_run(conn, rd.run_id, row if row != known_row else None, metrics, tables,
                           (new_offset, result_done or ingest_result, bad_total + bad))
    except duckdb.Error as exc:
        return _report_error(report, rd, _rolled_back(conn, rd, exc))
    _tally(report, runs_updated=1, events=len(events), metric_rows=int(added), bad_lines=bad,
           skipped_values=skipped, results=int(ingest_result))
    return False


def _report_error(report: dict, rd: RunDir, msg: str) -> bool:
    """Add one run's problem to the report; False, so a phase that gives up can return it."""
    report["errors"].append({"run_id": rd.run_id, "error": msg})
    return False


def _read_config(rd: RunDir) -> tuple[dict | None, str | None]:
    """The run's config.json, or why it cannot be ingested (unreadable, no kind, another run's)."""
    # Each experiment declares its config's older shapes, which read_config reads a run folder's in.
    import ema_core.experiments  # noqa: F401  torch and the experiments (4 s): not on `import store`

    try:
        cfg = rd.read_config()
        if not cfg.get("kind"):
            raise ValueError(f"{rd.config_path} is damaged: its 'kind' is empty")
    except ValueError as exc:  # the reader's message names the file and what is wrong
        return None, str(exc)
    except OSError as exc:
        return None, f"config.json cannot be read: {exc}"
    if cfg.get("run_id", rd.run_id) != rd.run_id:
        return None, f"config.json names run {cfg.get('run_id')!r}, but its folder is {rd.run_id!r}"
    return cfg, None


def _read_result(rd: RunDir) -> tuple[dict | None, str | None]:
    """The run's result.json (None while there is none), or None and why it is damaged."""
    try:
        return rd.read_result(), None
    except (OSError, ValueError) as exc:
        # Written atomically, so a damaged file means something else wrote it: say so, retry next pass.
        return None, str(exc) if isinstance(exc, ValueError) else f"{rd.result_path} cannot be read: {exc}"


def _split_known(known: tuple | None) -> tuple[tuple | None, int, bool, int]:
    """The store's runs row, events offset, result-ingested flag and bad-line count for a run."""
    known_row = known[:len(_RUN_COLUMNS)] if known else None
    offset, result_done, bad_total = (known[len(_RUN_COLUMNS):] if known else (None, None, None))
    return known_row, offset or 0, bool(result_done), bad_total or 0


def _new_run_row(cfg: dict, status: dict, result: dict | None, known_row: tuple | None,
                 damage: str | None) -> tuple:
    """The runs row to store: the folder's, or while result.json is damaged, the last good summary."""
    row = _run_row(cfg, status, result)
    if damage is None:
        return row
    # The last good summary stays (a damaged file is no evidence the run changed); the message
    # marks the run damaged until a readable result.json is back.
    kept = {"summary": known_row[_RUN_COLUMNS.index("summary")] if known_row else None,
            "message": DAMAGED + damage}
    return tuple(kept.get(name, value) for name, value in zip(_RUN_COLUMNS, row))


def _new_events(rd: RunDir, offset: int) -> tuple[list[dict], int, int, int]:
    """Events appended since ``offset``: the events, the offset read from, the new offset, bad lines."""
    try:
        size = rd.events_path.stat().st_size
    except FileNotFoundError:
        size = 0
    if size < offset:
        offset = 0  # the events file was replaced: read it again (rows already in are not doubled)
    if size > offset:
        events, new_offset, bad = rd.read_events(offset)
    else:
        events, new_offset, bad = [], offset, 0
    return events, offset, new_offset, bad


def _pending_result(rd: RunDir, result: dict | None, result_done: bool,
                    report: dict) -> tuple[dict[str, pd.DataFrame], bool]:
    """The result tables still to store, and whether the result is to be marked ingested."""
    if result is None or result_done:
        return {}, False
    try:
        tables, unknown = _result_tables(rd.run_id, result)
    except ResultError as exc:
        _report_error(report, rd, str(exc))
        return {}, False
    if unknown:
        report["unknown_tables"][rd.run_id] = unknown
    return tables, True


def _write_run(conn: duckdb.DuckDBPyConnection, run_id: str, row: tuple | None,
               metrics: pd.DataFrame | None, tables: dict[str, pd.DataFrame], state: tuple) -> int:
    """One transaction: the runs row (when changed), new metrics, result tables, ingest state; rows added."""
    conn.execute("BEGIN TRANSACTION")
    if row is not None:
        _upsert_run(conn, run_id, row)
    added = _insert_metrics(conn, metrics) if metrics is not None and len(metrics) else 0
    for name, frame in tables.items():
        _replace_result_rows(conn, name, run_id, frame)
    conn.execute(
        """INSERT INTO ingest_state VALUES (?, ?, ?, ?)
           ON CONFLICT (run_id) DO UPDATE SET events_offset = excluded.events_offset,
               result_ingested = excluded.result_ingested, bad_lines = excluded.bad_lines""",
        [run_id, *state],
    )
    conn.execute("COMMIT")
    return added


def _insert_metrics(conn: duckdb.DuckDBPyConnection, metrics: pd.DataFrame) -> int:
    """Insert the metric rows not already stored; how many went in."""
    conn.register("_new_metrics", metrics)
    try:
        # DuckDB reads a pandas NaN as NULL; the flag keeps a diverged loss (NaN) apart from
        # a value that was never logged (null).
        return conn.execute(
            "INSERT INTO metrics SELECT run_id, seq, step, key, "
            "CASE WHEN is_nan THEN 'NaN'::DOUBLE ELSE value END FROM _new_metrics ON CONFLICT DO NOTHING"
        ).fetchone()[0]
    finally:
        conn.unregister("_new_metrics")


def _rolled_back(conn: duckdb.DuckDBPyConnection, rd: RunDir, exc: duckdb.Error) -> str:
    """Roll back a failed write; re-raise when the store file is in trouble, else say what failed."""
    with contextlib.suppress(duckdb.Error):
        conn.execute("ROLLBACK")
    if isinstance(exc, duckdb.IOException) or storage_problem(exc, rd.path):
        raise exc  # the file itself is in trouble: stop, the session turns it into a clear error
    return f"not ingested ({type(exc).__name__}): {exc}"


def _tally(report: dict, **counts: int) -> None:
    """Add one updated run's counts to the report's totals."""
    for key, n in counts.items():
        report[key] += n


def _ts(value: Any) -> datetime | None:
    """An ISO time (or epoch seconds) as a naive UTC datetime; anything else as unknown."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return datetime.fromtimestamp(float(value), timezone.utc).replace(tzinfo=None)
        dt = datetime.fromisoformat(str(value))
    except (ValueError, OverflowError, OSError):
        return None
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt


def run_row(cfg: dict, status: dict, result: dict | None) -> dict[str, Any]:
    """The ``runs`` row (column: value, besides run_id) ingest makes of a run's config, status and result.

    For whoever fills a store without ingesting (``bench.pages`` writes a million metric rows
    straight into DuckDB): its rows then equal ingest's, and the first ingest finds nothing to do.
    """
    return dict(zip(_RUN_COLUMNS, _run_row(cfg, status, result)))


def _run_row(cfg: dict, status: dict, result: dict | None) -> tuple:
    summary = result.get("summary") if result else None
    seed = cfg.get("seed")
    return (
        str(cfg["kind"]),
        canonical_json(cfg.get("config")),
        int(seed) if isinstance(seed, numbers.Integral) else None,
        status.get("state") or "queued",
        _ts(cfg.get("created")),
        _ts(status.get("started")),
        _ts(status.get("ended")),
        cfg.get("code_version"),
        cfg.get("host"),
        canonical_json(summary) if summary is not None else None,
        status.get("message"),
    )


def _upsert_run(conn: duckdb.DuckDBPyConnection, run_id: str, row: tuple) -> None:
    cols = ", ".join(_RUN_COLUMNS)
    updates = ", ".join(f"{c} = excluded.{c}" for c in _RUN_COLUMNS)
    conn.execute(
        f"INSERT INTO runs (run_id, {cols}) VALUES ({', '.join('?' * (len(_RUN_COLUMNS) + 1))}) "
        f"ON CONFLICT (run_id) DO UPDATE SET {updates}",
        [run_id, *row],
    )


def _metric_frame(run_id: str, events: list[dict]) -> tuple[pd.DataFrame, int, int]:
    """Rows for the metrics table, the number of malformed events, and values skipped."""
    rows: dict[tuple[int, str], tuple] = {}
    bad = skipped = 0
    for event in events:
        seq, step, values = event.get("seq"), event.get("step"), event.get("metrics", {})
        if (not isinstance(seq, int) or isinstance(seq, bool) or seq < 0
                or (step is not None and (not isinstance(step, int) or isinstance(step, bool)))
                or not isinstance(values, dict)):
            bad += 1
            continue
        for key, value in values.items():
            if value is None:
                v = None
            elif isinstance(value, numbers.Real) and not isinstance(value, bool):
                v = float(value)
            else:
                skipped += 1  # a string or a list is not a metric; the rest of the event still counts
                continue
            # The first occurrence wins, as it does against rows already in the store.
            rows.setdefault((seq, key), (run_id, seq, step, key, v, v is not None and v != v))
    frame = pd.DataFrame(list(rows.values()), columns=["run_id", "seq", "step", "key", "value", "is_nan"])
    frame = frame.astype({"run_id": object, "seq": "int64", "step": "Int64", "key": object, "value": "float64",
                          "is_nan": bool})
    return frame, bad, skipped


def _result_tables(run_id: str, result: dict) -> tuple[dict[str, pd.DataFrame], list[str]]:
    tables = result.get("tables") or {}
    if not isinstance(tables, dict):
        raise ResultError(f"result.json of {run_id}: 'tables' must be an object of name: [rows]")
    frames, unknown = {}, []
    for name, rows in tables.items():
        spec = schema.result_tables().get(name)
        if spec is None:
            unknown.append(name)
            continue
        frames[name] = _validate_rows(run_id, name, spec, rows)
    return frames, sorted(unknown)


def _validate_rows(run_id: str, name: str, spec: tuple[schema.Column, ...], rows: Any) -> pd.DataFrame:
    where = f"result.json of {run_id}: tables.{name}"
    if not isinstance(rows, list):
        raise ResultError(f"{where} must be a list of rows")
    names = [c.name for c in spec]
    out, seen = [], set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ResultError(f"{where}[{i}] must be an object with {names}")
        extra = sorted(set(row) - set(names))
        if extra:
            raise ResultError(f"{where}[{i}] has unknown column(s) {extra}; expected {names}")
        values = []
        for col in spec:
            v = row.get(col.name)
            if v is None:
                if col.key:
                    raise ResultError(f"{where}[{i}] lacks {col.name!r}, part of the table's key")
                values.append(None)
                continue
            values.append(_coerce(v, col, f"{where}[{i}].{col.name}"))
        key = tuple(v for v, c in zip(values, spec) if c.key)
        if key in seen:
            raise ResultError(f"{where}[{i}] repeats the key {dict(zip([c.name for c in spec if c.key], key))}")
        seen.add(key)
        out.append(values)
    dtypes = {c.name: {str: object, int: "Int64", float: "Float64"}[c.type] for c in spec}
    return pd.DataFrame(out, columns=names, dtype=object).astype(dtypes)


def _coerce(v: Any, col: schema.Column, where: str) -> Any:
    if col.type is str:
        if not isinstance(v, str):
            raise ResultError(f"{where} must be text, got {v!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ResultError(f"{where} must be a number, got {v!r}")
    if col.type is int:
        if isinstance(v, float) and not v.is_integer():
            raise ResultError(f"{where} must be a whole number, got {v!r}")
        return int(v)
    return float(v)


def _replace_result_rows(conn: duckdb.DuckDBPyConnection, name: str, run_id: str, frame: pd.DataFrame) -> None:
    tables = schema.result_tables()
    if name not in tables:  # only the allow-list's names ever reach the SQL text
        raise ResultError(f"unknown result table {name!r}")
    cols = ", ".join(c.name for c in tables[name])
    conn.execute(f"DELETE FROM {name} WHERE run_id = ?", [run_id])
    if not len(frame):
        return
    conn.register("_new_rows", frame)
    try:
        conn.execute(f"INSERT INTO {name} (run_id, {cols}) SELECT ?, {cols} FROM _new_rows", [run_id])
    finally:
        conn.unregister("_new_rows")


# -- benchmarks ---------------------------------------------------------------------------------------

def record_bench(bench: str, figures: dict[str, float], *, machine: dict | None = None,
                 command: str | None = None, measured_at: datetime | None = None,
                 home: Path | None = None, timeout: float | None = None) -> int:
    """Store one benchmark run's figures (``{key: value}``) with the machine and command."""
    if not bench or not isinstance(bench, str):
        raise ValueError("bench must be a non-empty name")
    rows = []
    for key, value in figures.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"benchmark figure {key!r} must be a number, got {value!r}")
        rows.append((key, float(value)))
    when = _ts(measured_at.isoformat()) if measured_at else datetime.now(timezone.utc).replace(tzinfo=None)
    machine_json = json.dumps(machine, sort_keys=True) if machine is not None else None
    with open_store(readonly=False, home=home, timeout=timeout) as conn:
        conn.execute("BEGIN TRANSACTION")
        conn.executemany("INSERT INTO bench_figures VALUES (?, ?, ?, ?, ?, ?)",
                         [[bench, k, v, when, machine_json, command] for k, v in rows])
        conn.execute("COMMIT")
    return len(rows)
