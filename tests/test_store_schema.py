"""The store file: migrations, refusing files that are not ours (untouched), locking, check()."""
import hashlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from ema_core.rundir import RunDir
from store import db, schema
from store.db import (ForeignStoreError, NotAStoreError, StoreBusy, StoreVersionError, check, migrate,
                      migrate_store, open_store, store_path)
from store.ingest import ingest
from store.queries import list_runs, store_summary

ROOT = Path(__file__).resolve().parents[1]
# Liveness only: how long a wait for something that must happen may last before the test gives up.
PATIENCE = 600
ALL_TABLES = {"emalab_meta", "schema_migrations", "runs", "metrics", "ingest_state", "dilution_accuracy",
              "probe_accuracy", "lm_eval", "bench_figures", "boundary_accuracy", "boundary_dev_curve",
              "boundary_recall_state", "lm_token_classes", "run_notes", "depth_results", "depth_weights",
              "depth_weight_steps", "depth_remix"}
RELEASED = [(1, "m001_initial"), (2, "m002_boundary"), (3, "m003_boundary_curves"), (4, "m004_lm_token_classes"),
            (5, "m005_run_notes"), (6, "m006_depth"), (7, "m007_boundary_redundancy"), (8, "m008_depth_controls"),
            (9, "m009_content_kind")]
NEXT = len(RELEASED) + 1  # the version a test's own migration takes


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


def tables(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, str]:
    # Every file but our own lock file: no byte of the store changes, and no .wal appears.
    return {p.name: digest(p) for p in folder.iterdir() if p.is_file() and p.suffix != ".lock"}


def test_store_path_follows_emalab_home(home):
    assert store_path() == home / "emalab.duckdb"
    assert store_path(Path("/elsewhere")) == Path("/elsewhere/emalab.duckdb")


def test_first_write_creates_every_table_and_records_the_migration(home):
    with open_store(readonly=False) as conn:
        assert tables(conn) == ALL_TABLES
        assert conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall() == RELEASED
        assert conn.execute("SELECT value FROM emalab_meta WHERE key = 'app'").fetchone() == ("emalab",)
    assert schema.SCHEMA_VERSION == schema.MIGRATIONS[-1].version == len(RELEASED)
    versions = [m.version for m in schema.MIGRATIONS]
    assert versions == sorted(versions) == list(range(1, len(versions) + 1))


def test_reopening_is_idempotent(home):
    for _ in range(3):
        with open_store(readonly=False) as conn:
            assert migrate(conn) == []
    with open_store(readonly=True) as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (len(RELEASED),)


def _m_next():
    return schema.Migration(NEXT, "m_next_test_bookmarks", (
        "CREATE TABLE run_bookmarks (run_id VARCHAR PRIMARY KEY, note VARCHAR)",
        "ALTER TABLE runs ADD COLUMN tag VARCHAR",
    ))


def test_an_older_file_is_migrated_on_open(home, monkeypatch):
    with open_store(readonly=False) as conn:
        conn.execute("INSERT INTO runs (run_id, kind, status) VALUES ('r1', 'k', 'done')")
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, _m_next()))
    # A reader finds the file behind the code and upgrades it before reading.
    with open_store(readonly=True) as conn:
        assert "run_bookmarks" in tables(conn)
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (NEXT,)
        assert conn.execute("SELECT run_id, tag FROM runs").fetchall() == [("r1", None)]
    assert check()["schema_version"] == NEXT


def test_migrate_store_reports_what_it_applied(home, monkeypatch):
    assert migrate_store() == {"path": str(store_path()), "applied": [name for _, name in RELEASED],
                               "schema_version": len(RELEASED)}
    assert migrate_store()["applied"] == []
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, _m_next()))
    assert migrate_store()["applied"] == ["m_next_test_bookmarks"]


def test_a_version_4_store_gains_run_notes_and_keeps_its_rows(home, monkeypatch):
    from store.notes import run_notes, set_note

    with monkeypatch.context() as release_4:
        # The store as the release before notes wrote it.
        release_4.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:4])
        with open_store(readonly=False) as conn:
            conn.execute("INSERT INTO runs (run_id, kind, status) VALUES ('r1', 'k', 'done')")
            assert "run_notes" not in tables(conn)
    with open_store(readonly=True) as conn:  # today's code upgrades it on open
        assert conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall() == RELEASED
        assert conn.execute("SELECT run_id, status FROM runs").fetchall() == [("r1", "done")]
        assert conn.execute("SELECT count(*) FROM run_notes").fetchone() == (0,)
    set_note("r1", "kept across the upgrade", "old")
    assert run_notes()[["run_id", "note"]].values.tolist() == [["r1", "kept across the upgrade"]]
    assert check()["ok"]


def test_a_failing_migration_rolls_back_whole(home, monkeypatch):
    with open_store(readonly=False):
        pass
    broken = schema.Migration(NEXT, "m_next_broken", ("CREATE TABLE half_done (x INTEGER)", "THIS IS NOT SQL"))
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, broken))
    with pytest.raises(db.StoreError, match="m_next_broken"):
        with open_store(readonly=False):
            pass
    monkeypatch.undo()
    with open_store(readonly=True) as conn:
        assert "half_done" not in tables(conn)
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (len(RELEASED),)


@pytest.mark.parametrize("readonly", [True, False])
def test_a_newer_file_is_refused_and_left_untouched(home, readonly):
    with open_store(readonly=False) as conn:
        conn.execute(f"INSERT INTO schema_migrations VALUES ({NEXT}, 'm{NEXT:03d}_future', now())")
    before = snapshot(home)
    with pytest.raises(StoreVersionError, match=rf"newer EMA Lab \(schema {NEXT} > {len(RELEASED)}\).*EMALAB_HOME"):
        with open_store(readonly=readonly):
            pass
    assert snapshot(home) == before
    with pytest.raises(StoreVersionError):
        list_runs()
    assert snapshot(home) == before


@pytest.mark.parametrize("readonly", [True, False])
def test_a_foreign_duckdb_file_is_refused_and_left_untouched(home, readonly):
    home.mkdir()
    conn = duckdb.connect(str(store_path()))
    conn.execute("CREATE TABLE invoices (id INTEGER, total DOUBLE)")
    conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    conn.close()
    before = snapshot(home)
    with pytest.raises(ForeignStoreError, match="not an EMA Lab store"):
        with open_store(readonly=readonly):
            pass
    RunDir.for_id("r-1").create("k", {}, 0)
    with pytest.raises(ForeignStoreError):
        ingest()
    assert snapshot(home) == before


@pytest.mark.parametrize("content", [b"", b"id,total\n1,9.5\n" * 100])
@pytest.mark.parametrize("readonly", [True, False])
def test_a_file_that_is_not_duckdb_is_refused_and_left_untouched(home, readonly, content):
    home.mkdir()
    store_path().write_bytes(content)
    before = snapshot(home)
    with pytest.raises(NotAStoreError, match="not a DuckDB database"):
        with open_store(readonly=readonly):
            pass
    assert snapshot(home) == before


def test_an_empty_duckdb_file_is_initialised(home):
    home.mkdir()
    duckdb.connect(str(store_path())).close()
    with open_store(readonly=True) as conn:  # reads as empty, without writing
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    with open_store(readonly=False) as conn:
        assert tables(conn) == ALL_TABLES


def test_readers_of_a_missing_store_get_empty_results_and_create_nothing(home):
    assert list_runs().empty
    assert list(list_runs().columns)[:3] == ["run_id", "kind", "seed"]
    assert store_summary()["metric_rows"] == 0
    assert not home.exists()
    report = check()
    assert report["exists"] is False and report["ok"] is True


def test_check_reports_counts_and_orphans(home):
    rd = RunDir.for_id("r-1")
    rd.create("k", {"a": 1}, 0)
    rd.append_events([{"seq": 0, "step": 0, "metrics": {"x": 1.0}}])
    ingest()
    report = check()
    assert report["ok"] and report["schema_version"] == len(RELEASED)
    assert report["tables"]["runs"] == 1 and report["tables"]["metrics"] == 1
    assert report["migrations"][0]["name"] == "m001_initial"
    with open_store(readonly=False) as conn:
        conn.execute("INSERT INTO metrics VALUES ('ghost', 0, 0, 'x', 1.0)")
    report = check()
    assert not report["ok"]
    assert any("metrics belong to no run" in p for p in report["problems"])


def test_check_reports_a_refused_file_instead_of_raising(home):
    home.mkdir()
    store_path().write_text("not a database")
    report = check()
    assert not report["ok"] and "not a DuckDB database" in report["problems"][0]


def _hold_store() -> subprocess.Popen:
    """Another process holding the store read-write, as a careless tool would, until told to let go."""
    code = textwrap.dedent(f"""
        import sys, duckdb
        conn = duckdb.connect({str(store_path())!r})
        print("held", flush=True)
        sys.stdin.readline()  # a line, or the test's end, lets go
        conn.close()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _let_go(proc: subprocess.Popen) -> None:
    proc.stdin.write("let go\n")
    proc.stdin.flush()


class _Clock:
    """The store's clock, stood in for: its waits take no real time, and each is recorded."""

    def __init__(self):
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def __getattr__(self, name):  # anything else: the real one
        return getattr(time, name)


def test_a_held_store_is_waited_for_then_reported_in_words(home, monkeypatch):
    with open_store(readonly=False):
        pass
    proc = _hold_store()
    # On the stand-in clock the store's waiting is counted, not timed: a busy machine cannot change it.
    clock = _Clock()
    monkeypatch.setattr(db, "time", clock)
    try:
        with pytest.raises(StoreBusy, match="busy for 1 s") as info:
            with open_store(readonly=True, timeout=1.0):
                pass
        assert "DuckDB's file lock is held elsewhere" in str(info.value)
        # It tried again and again, backing off, for the whole timeout: neither at once nor longer.
        assert len(clock.slept) >= 3 and sum(clock.slept) == pytest.approx(1.0)
        RunDir.for_id("r-1").create("k", {}, 0)
        clock.slept.clear()
        with pytest.raises(StoreBusy):
            ingest(timeout=0.5)
        assert len(clock.slept) >= 3 and sum(clock.slept) == pytest.approx(0.5)
    finally:
        proc.kill()
        proc.wait()


def test_a_reader_waits_out_a_short_hold(home, monkeypatch):
    with open_store(readonly=False):
        pass
    proc = _hold_store()
    tries = []
    real_connect = duckdb.connect

    def connect(database, *args, **kwargs):
        try:
            conn = real_connect(database, *args, **kwargs)
        except duckdb.Error:
            tries.append("refused")
            if tries.count("refused") == 1:
                _let_go(proc)  # the holder lets go only once the reader has been turned away
            raise
        tries.append("opened")
        return conn

    monkeypatch.setattr(db.duckdb, "connect", connect)
    monkeypatch.setenv("EMALAB_STORE_TIMEOUT", str(PATIENCE))  # the default timeout, as liveness only
    try:
        assert list_runs().empty  # refused while held, then waits and reads: no error
    finally:
        proc.kill()
        proc.wait()
    assert tries[0] == "refused" and tries[-1] == "opened", tries


def test_a_writer_queues_behind_another_writer(home, monkeypatch):
    """The file lock makes a second writer wait for the first instead of failing."""
    import threading

    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from store.db import open_store
        with open_store(readonly=False, home=__import__("pathlib").Path({str(home)!r})) as conn:
            print("writing", flush=True)
            sys.stdin.readline()  # until the test's own writer is waiting for the lock
            conn.execute("INSERT INTO runs (run_id, kind) VALUES ('from-other', 'k')")
    """)
    waiting = threading.Event()

    class FileLock(db.filelock.FileLock):  # says when the second writer starts waiting
        def acquire(self, *args, **kwargs):
            waiting.set()
            return super().acquire(*args, **kwargs)

    got = []

    def second_writer():
        try:
            with open_store(readonly=False, timeout=PATIENCE) as conn:
                got.append(conn.execute("SELECT run_id FROM runs").fetchall())
        except Exception as exc:  # noqa: BLE001 - reported below
            got.append(exc)

    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        monkeypatch.setattr(db.filelock, "FileLock", FileLock)
        writer = threading.Thread(target=second_writer, daemon=True)
        writer.start()
        assert waiting.wait(PATIENCE), "the second writer never reached the lock"
        _let_go(proc)  # the first writer commits only now, while the second one waits
        writer.join(PATIENCE)
        assert not writer.is_alive(), "the second writer never got the store"
        assert proc.wait(PATIENCE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert got == [[("from-other",)]]  # it waited for the first writer's row, instead of failing


def test_threads_of_one_process_share_the_file_safely(home):
    """Read-only and read-write connections in one process conflict in DuckDB; the local lock orders them."""
    import threading

    with open_store(readonly=False):
        pass
    errors = []

    def reader():
        try:
            for _ in range(15):
                list_runs()
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            errors.append(exc)

    def writer():
        try:
            for i in range(8):
                with open_store(readonly=False) as conn:
                    conn.execute("INSERT INTO runs (run_id, kind) VALUES (?, 'k')", [f"t{i}"])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(list_runs()) == 8


def test_nested_sessions_in_one_thread_fail_clearly(home):
    with open_store(readonly=False):
        with pytest.raises(db.StoreError, match="same thread"):
            with open_store(readonly=True):
                pass
