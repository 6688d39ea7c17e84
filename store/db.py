"""Opening the store: one DuckDB file, many processes, no lock error ever shown to a user.

DuckDB lets one process hold a file read-write, and then no other process may open it at all, not
even read-only; in one process a read-write and a read-only connection to the same file conflict.
So every connection here is short-lived and taken in this order:

1. an in-process readers-writer lock (threads of one process: the app's sessions, an ingest thread);
2. the cross-process file lock ``emalab.duckdb.lock``: a writer holds it for its whole session, so
   writers queue instead of spinning; a reader takes and drops it before connecting, so that once a
   writer is waiting no new reader slips in ahead of it (otherwise a steady stream of readers could
   keep a writer out for ever);
3. DuckDB's own lock, retried with jittered backoff until the timeout, after which ``StoreBusy``
   says so in words.

Before anything writes, the file is opened read-only and checked, so a file from a newer EMA Lab,
another program's DuckDB file, something that is not DuckDB at all, or a store cut shorter than
the blocks its tables use is refused and left byte-for-byte as it was.  A query that meets damage
DuckDB finds only when it reads a block (a failed checksum) ends in ``DamagedStoreError`` too.
"""
from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb
import filelock

from ema_core.rundir import STATES, StorageError, emalab_home, iter_run_dirs

from . import schema

STORE_FILE = "emalab.duckdb"
DEFAULT_TIMEOUT = 30.0
_BACKOFF_FIRST, _BACKOFF_MAX = 0.005, 0.25


class StoreError(RuntimeError):
    """The store cannot be used as asked; the message says why and what to do."""


class StoreBusy(StoreError):
    """Another process held the store for longer than the timeout."""


class StoreVersionError(StoreError):
    """The file was made by a newer EMA Lab; it is left untouched."""


class ForeignStoreError(StoreError):
    """The file is a DuckDB database, but not an EMA Lab store; it is left untouched."""


class NotAStoreError(StoreError):
    """The file is not a DuckDB database this DuckDB can read; it is left untouched."""


class DamagedStoreError(StoreError):
    """The file is a DuckDB database that cannot be read whole (cut short, corrupted); it is left untouched."""


def store_path(home: Path | None = None) -> Path:
    return Path(home or emalab_home()) / STORE_FILE


def lock_path(home: Path | None = None) -> Path:
    return Path(home or emalab_home()) / (STORE_FILE + ".lock")


def default_timeout() -> float:
    try:
        return float(os.environ.get("EMALAB_STORE_TIMEOUT", DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


def current_version() -> int:
    # Read at call time so a test can add a migration by replacing ``schema.MIGRATIONS``.
    return schema.MIGRATIONS[-1].version


# -- in-process readers-writer lock -------------------------------------------------------------

class _RWLock:
    """Many readers or one writer; a waiting writer stops new readers (except re-entrant ones)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer: int | None = None
        self._waiting_writers = 0
        self._local = threading.local()

    def _depth(self) -> int:
        return getattr(self._local, "reads", 0)

    def acquire_read(self, deadline: float) -> bool:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                raise StoreError("open_store(readonly=True) inside a write session of the same thread")
            # A thread already reading goes through: waiting for the writer would wait on itself.
            while (self._writer is not None or self._waiting_writers) and not self._depth():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            self._readers += 1
            self._local.reads = self._depth() + 1
            return True

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            self._local.reads = self._depth() - 1
            if not self._readers:
                self._cond.notify_all()

    def acquire_write(self, deadline: float) -> bool:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me or self._depth():
                raise StoreError("open_store(readonly=False) nested inside another session of the same thread")
            self._waiting_writers += 1
            try:
                while self._writer is not None or self._readers:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                self._writer = me
                return True
            finally:
                self._waiting_writers -= 1
                self._cond.notify_all()

    def release_write(self) -> None:
        with self._cond:
            self._writer = None
            self._cond.notify_all()


_LOCAL_LOCK = _RWLock()


# -- DuckDB errors in words -------------------------------------------------------------------------

def _is_lock_conflict(exc: Exception) -> bool:
    if isinstance(exc, duckdb.ConnectionException):
        return True
    msg = str(exc)
    return isinstance(exc, duckdb.IOException) and ("Could not set lock" in msg or "Conflicting lock" in msg)


def storage_problem(exc: Exception, path: Path) -> StorageError | None:
    """A DuckDB error that says the file system refused (full, read-only), in words; None otherwise.

    Shared with :mod:`store.ingest`, which stops on such an error rather than noting it against one run.
    """
    msg = str(exc)
    if "No space left" in msg:
        return StorageError(f"the data folder is full: could not write {path}")
    if any(s in msg for s in ("Read-only file system", "Permission denied", "Operation not permitted")):
        return StorageError(f"the data folder is not writable: could not write {path}")
    return None


def _damaged(path: Path, detail: Exception | str) -> DamagedStoreError:
    detail = str(detail).removeprefix("IO Error: ").replace(f' from file "{path}"', "").replace(f'"{path}"', "the file")
    return DamagedStoreError(f"the store {path} is damaged or unreadable ({detail}); it is left untouched: restore "
                             "it from a backup, or move it away and the next ingest rebuilds it from the run folders")


def _unreadable(exc: Exception, path: Path) -> StoreError | StorageError | None:
    """A DuckDB error met while reading or writing an open store, in words; None for any other error."""
    if not isinstance(exc, duckdb.Error):
        return None
    problem = storage_problem(exc, path)
    if problem is None and (isinstance(exc, duckdb.IOException) or "Corrupt database file" in str(exc)):
        problem = _damaged(path, exc)
    return problem


def _open_error(exc: Exception, path: Path) -> StoreError | StorageError:
    msg = str(exc)
    if "not a valid DuckDB database file" in msg:
        return NotAStoreError(f"{path} is not a DuckDB database (left untouched); move it away, "
                              "or point EMALAB_HOME elsewhere")
    if "version" in msg.lower() and "database file" in msg.lower():
        return NotAStoreError(f"{path} was written by a different DuckDB version than this one "
                              f"({duckdb.__version__}); left untouched: {msg}")
    return _unreadable(exc, path) or StoreError(f"cannot open the store {path}: {msg}")


# DuckDB's file: three 4 KiB headers, then whole blocks; a table's data lies in the blocks its
# segments name.  DuckDB reads a data block only when a query needs it, so a file cut short opens
# and answers the catalogue; only a query that reaches a missing block fails (or a writer appends
# after the gap, and the damage can no longer be seen from the length).
_FILE_HEADERS = 3 * 4096


# Store file → the stamp it had when this process last closed it after writing (whole by then).
_WHOLE: dict[str, tuple[int, int, int] | None] = {}


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _check_whole(conn: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Raise ``DamagedStoreError`` when the file is shorter than the blocks its tables use."""
    try:
        on_disk, block = conn.execute(
            "SELECT d.path, s.block_size FROM duckdb_databases() d JOIN pragma_database_size() s "
            "USING (database_name) WHERE database_name = current_database()").fetchone()
        if on_disk is None:
            return  # the in-memory stand-in for a store not yet initialised
        size = path.stat().st_size
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()]
        last = -1
        for t in tables:
            used = conn.execute("SELECT max(greatest(block_id, coalesce(list_max(additional_block_ids), -1))) "
                                "FROM pragma_storage_info(?)", [t]).fetchone()[0]
            last = max(last, -1 if used is None else int(used))
    except duckdb.Error as exc:
        raise _unreadable(exc, path) or _damaged(path, exc) from exc
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc.strerror or exc}") from exc
    need = _FILE_HEADERS + (last + 1) * block
    if size < need:
        raise _damaged(path, f"cut short: {size} bytes, where its tables' blocks end at byte {need}")
    if (size - _FILE_HEADERS) % block:  # DuckDB writes whole blocks only
        raise _damaged(path, f"cut short: {size} bytes, not a whole number of {block}-byte blocks")


def _busy(path: Path, timeout: float, why: str) -> StoreBusy:
    return StoreBusy(f"the store {path} stayed busy for {timeout:.0f} s ({why}); another EMA Lab process "
                     "is probably writing a lot at once. Try again in a moment, or raise EMALAB_STORE_TIMEOUT.")


def _connect(path: Path, readonly: bool, deadline: float, timeout: float) -> duckdb.DuckDBPyConnection:
    delay = _BACKOFF_FIRST
    while True:
        try:
            return duckdb.connect(str(path), read_only=readonly)
        except duckdb.Error as exc:
            if not _is_lock_conflict(exc):
                raise _open_error(exc, path) from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _busy(path, timeout, "DuckDB's file lock is held elsewhere") from exc
            # Jitter keeps several waiting readers from retrying in lockstep.
            time.sleep(min(remaining, delay * random.uniform(0.5, 1.5)))
            delay = min(delay * 2, _BACKOFF_MAX)


# -- what a file holds --------------------------------------------------------------------------------

def _inspect(conn: duckdb.DuckDBPyConnection) -> tuple[str, int]:
    """("empty" | "emalab" | "foreign", recorded schema version)."""
    names = {r[0] for r in conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "UNION SELECT view_name FROM duckdb_views() WHERE database_name = current_database() AND NOT internal"
    ).fetchall()}
    if not names:
        return "empty", 0
    if not {"emalab_meta", "schema_migrations"} <= names:
        return "foreign", 0
    app = conn.execute("SELECT value FROM emalab_meta WHERE key = 'app'").fetchone()
    if not app or app[0] != schema.APP_ID:
        return "foreign", 0
    version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
    return "emalab", int(version)


def _refuse(kind: str, version: int, path: Path | str) -> None:
    if kind == "foreign":
        raise ForeignStoreError(f"{path} is a DuckDB database but not an EMA Lab store (left untouched); "
                                "point EMALAB_HOME at another folder")
    if version > current_version():
        raise StoreVersionError(f"{path} was made by a newer EMA Lab (schema {version} > {current_version()}); "
                                "upgrade, or point EMALAB_HOME elsewhere. The file is left untouched.")


def migrate(conn: duckdb.DuckDBPyConnection, where: Path | str = "the store") -> list[str]:
    """Apply the pending migrations, each in its own transaction; returns the names applied."""
    kind, version = _inspect(conn)
    _refuse(kind, version, where)
    applied = []
    for m in schema.MIGRATIONS:
        if m.version <= version:
            continue
        conn.execute("BEGIN TRANSACTION")
        try:
            for stmt in m.statements:
                conn.execute(stmt)
            conn.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                         [m.version, m.name, datetime.now(timezone.utc).replace(tzinfo=None)])
            conn.execute("COMMIT")
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                conn.execute("ROLLBACK")
            raise StoreError(f"migration {m.name} failed on {where}: {exc}") from exc
        applied.append(m.name)
    return applied + _make_declared(conn, where)


def _declared_missing(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether a study declares a result table this store does not hold yet (made by :func:`migrate`)."""
    declared = set(schema.declared_tables())
    # Every read session asks: no query at all where no study declares a table (today's studies).
    return bool(declared) and bool(declared - _tables(conn))


def _tables(conn: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()}


def _make_declared(conn: duckdb.DuckDBPyConnection, where: Path | str) -> list[str]:
    """Make the result tables the studies declare and the store lacks, after the migrations (a study's
    table needs no migration of its own); a stored one whose columns are not its declaration's is
    refused in one line, and nothing is changed."""
    have = _tables(conn)
    made = []
    for name, table in schema.declared_tables().items():
        want = ["run_id", *(c.name for c in table.columns)]
        if name in have:
            got = [r[0] for r in conn.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
                "AND table_name = ? ORDER BY column_index", [name]).fetchall()]
            if got != want:
                raise StoreError(f"{where}: the table {name} holds columns {', '.join(got)}, but its study declares "
                                 f"{', '.join(want)}; a stored table changes by a numbered migration in store/schema.py")
            continue
        conn.execute(schema.declared_statement(table))
        made.append(f"declared {name}")
    return made


def _empty_store() -> duckdb.DuckDBPyConnection:
    # Readers of a store that does not exist yet get the real schema with no rows, so every query
    # returns an empty frame with the right columns, and no file is created by reading.
    conn = duckdb.connect(":memory:")
    migrate(conn, ":memory:")
    return conn


# -- sessions -----------------------------------------------------------------------------------------

def _gate(home: Path, deadline: float, timeout: float) -> None:
    """Wait while a writer holds or waits for the store; a no-op where no lock file can be made."""
    lock = filelock.FileLock(str(lock_path(home)), thread_local=False)
    try:
        lock.acquire(timeout=max(deadline - time.monotonic(), 0.0))
    except filelock.Timeout as exc:
        raise _busy(store_path(home), timeout, "a writer held it") from exc
    except OSError:
        return  # a read-only data folder: nobody can be writing, DuckDB's lock still guards us
    lock.release()


def _open_for_reading(home: Path, deadline: float, timeout: float) -> tuple[duckdb.DuckDBPyConnection | None, bool]:
    """(connection, False), or (None, True) when the file is older and must be migrated first."""
    path = store_path(home)
    if not path.exists():
        return _empty_store(), False
    _gate(home, deadline, timeout)
    try:
        conn = _connect(path, True, deadline, timeout)
    except StoreError:
        if path.exists():
            raise
        return _empty_store(), False  # removed under us: as if it had never been there
    try:
        kind, version = _inspect(conn)
        _refuse(kind, version, path)
    except BaseException as exc:
        conn.close()
        problem = _unreadable(exc, path)
        if problem is None:
            raise
        raise problem from exc
    if kind == "empty" or version < current_version() or _declared_missing(conn):
        conn.close()
        return (_empty_store(), False) if kind == "empty" else (None, True)
    return conn, False


@contextlib.contextmanager
def _read_session(home: Path, deadline: float, timeout: float) -> Iterator[duckdb.DuckDBPyConnection]:
    path = store_path(home)
    for _ in range(2):
        if not _LOCAL_LOCK.acquire_read(deadline):
            raise _busy(path, timeout, "a writer in this process held it")
        try:
            conn, stale = _open_for_reading(home, deadline, timeout)
            if not stale:
                try:
                    yield conn
                except duckdb.Error as exc:
                    # A query that reaches a block the file no longer holds: said as such, in one line.
                    problem = _unreadable(exc, path)
                    if problem is None:
                        raise
                    raise problem from exc
                finally:
                    conn.close()
                return
        finally:
            _LOCAL_LOCK.release_read()
        # An older file: upgrade it in a short write session, then read again.
        with _write_session(home, deadline, timeout):
            pass
    raise StoreError(f"{path} could not be brought to schema {current_version()}")


@contextlib.contextmanager
def _write_session(home: Path, deadline: float, timeout: float,
                   applied: list[str] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    path = store_path(home)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"the data folder cannot be created: {home}: {exc.strerror or exc}") from exc
    if not _LOCAL_LOCK.acquire_write(deadline):
        raise _busy(path, timeout, "another thread of this process held it")
    try:
        lock = filelock.FileLock(str(lock_path(home)), thread_local=False)
        try:
            lock.acquire(timeout=max(deadline - time.monotonic(), 0.0))
        except filelock.Timeout as exc:
            raise _busy(path, timeout, "another writer held it") from exc
        except OSError as exc:
            raise StorageError(f"the data folder is not writable: could not create {lock_path(home)}: "
                               f"{exc.strerror or exc}") from exc
        try:
            if path.exists():
                # Checked read-only first: a file we must refuse is never opened for writing.
                probe = _connect(path, True, deadline, timeout)
                try:
                    _refuse(*_inspect(probe), path)
                    # A writer would append after a gap and hide it.  The file this process left
                    # whole, unchanged since (same inode, size and time), is not measured again:
                    # the app ingests on every page load.
                    if _WHOLE.get(str(path)) != _stamp(path):
                        _check_whole(probe, path)
                except duckdb.Error as exc:
                    raise _unreadable(exc, path) or StoreError(f"cannot read the store {path}: {exc}") from exc
                finally:
                    probe.close()
            conn = _connect(path, False, deadline, timeout)
            try:
                names = migrate(conn, path)
                if applied is not None:
                    applied.extend(names)
                yield conn
            except BaseException as exc:
                # The first error is the one to report, not a second one from closing.
                with contextlib.suppress(duckdb.Error):
                    conn.close()
                problem = _unreadable(exc, path)
                if problem is None:
                    raise
                raise problem from exc
            try:
                conn.close()  # checkpoints the write-ahead log into the file
            except duckdb.Error as exc:
                raise _unreadable(exc, path) or StoreError(f"closing {path} failed: {exc}") from exc
            _WHOLE[str(path)] = _stamp(path)
        finally:
            lock.release()
    finally:
        _LOCAL_LOCK.release_write()


@contextlib.contextmanager
def open_store(readonly: bool = True, home: Path | None = None,
               timeout: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived connection to ``$EMALAB_HOME/emalab.duckdb``; closed when the block ends.

    ``readonly=True``: a missing (or never-initialised) store reads as an empty one, in memory; an
    older file is migrated first.  ``readonly=False``: creates and migrates the file as needed; use
    it only from ``store.ingest``.  Raises ``StoreBusy`` after ``timeout`` seconds (default
    ``$EMALAB_STORE_TIMEOUT`` or 30) of waiting, ``StoreVersionError``/``ForeignStoreError``/
    ``NotAStoreError`` for a file that is not ours to use, ``DamagedStoreError`` for one that cannot
    be read whole, and ``StorageError`` when the data folder cannot be written.
    """
    home = Path(home or emalab_home())
    timeout = default_timeout() if timeout is None else float(timeout)
    deadline = time.monotonic() + timeout
    session = _read_session if readonly else _write_session
    with session(home, deadline, timeout) as conn:
        yield conn


def migrate_store(home: Path | None = None, timeout: float | None = None) -> dict:
    """Create or upgrade the store file now; a report of what was applied."""
    home = Path(home or emalab_home())
    timeout = default_timeout() if timeout is None else float(timeout)
    applied: list[str] = []
    with _write_session(home, time.monotonic() + timeout, timeout, applied) as conn:
        version = schema_version(conn)
    return {"path": str(store_path(home)), "applied": applied, "schema_version": version}


def schema_version(conn: duckdb.DuckDBPyConnection) -> int:
    return _inspect(conn)[1]


def check(home: Path | None = None, timeout: float | None = None) -> dict:
    """A report on the store: version, tables with row counts, and integrity problems found."""
    home = Path(home or emalab_home())
    path = store_path(home)
    report: dict = {"path": str(path), "exists": path.exists(), "code_schema_version": current_version(),
                    "schema_version": None, "migrations": [], "tables": {}, "problems": []}
    if not path.exists():
        report["ok"] = True
        return report
    report["size_bytes"] = path.stat().st_size
    try:
        with open_store(readonly=True, home=home, timeout=timeout) as conn:
            _check_whole(conn, path)
            report["schema_version"] = schema_version(conn)
            report["migrations"] = [
                {"version": v, "name": n, "applied_at": a.isoformat() if a else None}
                for v, n, a in conn.execute(
                    "SELECT version, name, applied_at FROM schema_migrations ORDER BY version").fetchall()
            ]
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY table_name"
            ).fetchall()]
            for t in tables:
                # Names come from the catalogue, not from a user; quoted all the same.
                report["tables"][t] = conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
            report["problems"] = _integrity(conn, home)
    except (StoreError, StorageError) as exc:
        # The store cannot be used at all (not the integrity problems above): the one thing to say.
        report["problems"].append(str(exc))
        report["error"] = str(exc)
    report["ok"] = not report["problems"]
    return report


def _integrity(conn: duckdb.DuckDBPyConnection, home: Path) -> list[str]:
    problems = []
    for table in ("metrics", "ingest_state", *schema.result_tables()):
        n = conn.execute(f"SELECT count(*) FROM {table} t WHERE NOT EXISTS "
                         "(SELECT 1 FROM runs r WHERE r.run_id = t.run_id)").fetchone()[0]
        if n:
            problems.append(f"{n} row(s) of {table} belong to no run")
    n = conn.execute("SELECT count(*) FROM runs WHERE status IS NULL OR status NOT IN (SELECT unnest(?::VARCHAR[]))",
                     [list(STATES)]).fetchone()[0]
    if n:
        problems.append(f"{n} run(s) have an unknown status")
    offsets = dict(conn.execute("SELECT run_id, events_offset FROM ingest_state").fetchall())
    for rd in iter_run_dirs(home):
        off = offsets.get(rd.run_id)
        try:
            size = rd.events_path.stat().st_size
        except FileNotFoundError:
            size = 0
        if off is not None and off > size:
            problems.append(f"run {rd.run_id}: ingested up to byte {off} but events.jsonl has {size} bytes "
                            "(the file was replaced; the next ingest reads it again)")
    return problems
