"""Ingest: run folders in, rows out, exactly once, whatever state the folder is in."""
import importlib
import json
import tempfile
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ema_core.rundir import RunDir, StorageError, run_id_for
from store import db
from store.db import open_store
from store.ingest import ingest, record_bench


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


def make_run(kind="probe", config=None, seed=0, n_events=0, keys=("loss", "acc")) -> RunDir:
    config = {"width": 8} if config is None else config
    rd = RunDir.for_id(run_id_for(kind, config, seed))
    rd.create(kind, config, seed)
    events(rd, 0, n_events, keys)
    return rd


def events(rd: RunDir, start: int, stop: int, keys=("loss", "acc")) -> None:
    rd.append_events([{"seq": i, "step": 10 * i, "time": 0.0, "metrics": {k: i + 0.5 for k in keys}}
                      for i in range(start, stop)])


def q(sql, *params):
    with open_store(readonly=True) as conn:
        return conn.execute(sql, list(params)).fetchall()


def test_a_run_folder_becomes_rows(home):
    rd = make_run(config={"width": 8, "lr": 0.1}, seed=3, n_events=4)
    rd.write_status(state="done", started="2026-03-01T10:00:00+02:00", ended="2026-03-01T10:05:00.250+02:00",
                    message="finished")
    rd.write_result({"summary": {"acc": 0.9}, "tables": {
        "probe_accuracy": [{"role": "subject", "feature_set": "traces", "split": "test", "accuracy": 0.75},
                           {"role": "object", "feature_set": "traces", "split": "test", "accuracy": 0.5}],
        "lm_eval": [{"split": "val", "loss": 2.0, "ppl": 7.389, "bpb": 1.1}],
        "dilution_accuracy": [{"feature": "word", "lag": 2, "accuracy": 0.6, "chance": 0.1}],
    }})
    report = ingest()
    assert report["runs_seen"] == report["runs_updated"] == 1
    assert report["events"] == 4 and report["metric_rows"] == 8 and report["results"] == 1
    assert report["errors"] == [] and report["unknown_tables"] == {}

    cfg = rd.read_config()
    (row,) = q("SELECT run_id, kind, config, seed, status, created_at, started_at, ended_at, code_version, host, "
               "summary, message FROM runs")
    assert row[:5] == (rd.run_id, "probe", '{"lr":0.1,"width":8}', 3, "done")
    assert row[5] == datetime.fromisoformat(cfg["created"]).replace(tzinfo=None)  # written in UTC
    assert row[6:8] == (datetime(2026, 3, 1, 8, 0), datetime(2026, 3, 1, 8, 5, 0, 250000))  # UTC
    assert row[8:10] == (cfg["code_version"], cfg["host"])
    assert json.loads(row[10]) == {"acc": 0.9} and row[11] == "finished"

    assert q("SELECT seq, step, key, value FROM metrics WHERE seq = 2 ORDER BY key") == [
        (2, 20, "acc", 2.5), (2, 20, "loss", 2.5)]
    assert q("SELECT role, accuracy FROM probe_accuracy ORDER BY role") == [("object", 0.5), ("subject", 0.75)]
    assert q("SELECT split, loss, ppl, bpb FROM lm_eval") == [("val", 2.0, 7.389, 1.1)]
    assert q("SELECT feature, lag, accuracy, chance FROM dilution_accuracy") == [("word", 2, 0.6, 0.1)]
    assert q("SELECT events_offset, result_ingested, bad_lines FROM ingest_state") == [
        (rd.events_path.stat().st_size, True, 0)]


def test_ingesting_twice_adds_nothing(home):
    rd = make_run(n_events=5)
    rd.write_result({"summary": {}, "tables": {"lm_eval": [{"split": "val", "loss": 1.0, "ppl": 2.7, "bpb": 0.5}]}})
    ingest()
    again = ingest()
    assert again["runs_updated"] == 0 and again["metric_rows"] == 0 and again["results"] == 0
    assert q("SELECT count(*) FROM metrics") == [(10,)]
    assert q("SELECT count(*) FROM lm_eval") == [(1,)]


def test_new_events_and_status_changes_are_picked_up(home):
    rd = make_run(n_events=3)
    rd.write_status(state="running", started="2026-03-01T10:00:00+00:00")
    ingest()
    events(rd, 3, 7)
    rd.write_status(state="failed", message="out of memory")
    report = ingest()
    assert report["events"] == 4 and report["metric_rows"] == 8
    assert q("SELECT count(*), max(seq) FROM metrics") == [(14, 6)]
    assert q("SELECT status, message FROM runs") == [("failed", "out of memory")]


def test_an_unterminated_last_line_waits_until_it_is_complete(home):
    rd = make_run(n_events=2)
    line = json.dumps({"seq": 2, "step": 20, "metrics": {"loss": 9.0}})
    with open(rd.events_path, "a") as fh:
        fh.write(line[:15])  # a worker killed mid-write, or still writing
    ingest()
    assert q("SELECT count(*) FROM metrics") == [(4,)]
    assert q("SELECT bad_lines FROM ingest_state") == [(0,)]
    with open(rd.events_path, "a") as fh:
        fh.write(line[15:] + "\n")
    ingest()
    assert q("SELECT value FROM metrics WHERE seq = 2") == [(9.0,)]


def test_malformed_lines_are_counted_and_skipped(home):
    rd = make_run(n_events=1)
    with open(rd.events_path, "a") as fh:
        fh.write("not json\n")
        fh.write("[1, 2]\n")
        fh.write(json.dumps({"step": 3, "metrics": {"loss": 1.0}}) + "\n")            # no seq
        fh.write(json.dumps({"seq": "4", "metrics": {"loss": 1.0}}) + "\n")           # seq as text
        fh.write(json.dumps({"seq": 5, "step": 1.5, "metrics": {"loss": 1.0}}) + "\n")  # fractional step
        fh.write(json.dumps({"seq": 6, "metrics": [1.0]}) + "\n")                     # metrics not an object
        fh.write(json.dumps({"seq": 7, "step": 7, "metrics": {"loss": "high", "acc": 0.25, "gap": None}}) + "\n")
    report = ingest()
    assert report["bad_lines"] == 6 and report["skipped_values"] == 1
    assert q("SELECT bad_lines FROM ingest_state") == [(6,)]
    assert q("SELECT key, value FROM metrics WHERE seq = 7 ORDER BY key") == [("acc", 0.25), ("gap", None)]
    assert ingest()["bad_lines"] == 0  # counted once: the offset moved past them


def test_non_finite_values_are_kept(home):
    rd = make_run()
    with open(rd.events_path, "a") as fh:
        fh.write('{"seq": 0, "step": 0, "metrics": {"loss": NaN, "grad": Infinity}}\n')
    ingest()
    values = dict(q("SELECT key, value FROM metrics"))
    assert values["grad"] == float("inf") and values["loss"] != values["loss"]


def test_a_replaced_events_file_is_read_again_without_doubling(home):
    rd = make_run(n_events=6)
    ingest()
    rd.events_path.unlink()
    events(rd, 0, 2)  # shorter than the stored offset: the file was replaced
    events(rd, 6, 8)
    ingest()
    assert q("SELECT count(*), count(DISTINCT seq) FROM metrics") == [(16, 8)]


def test_a_bad_result_is_reported_and_retried_once_fixed(home):
    rd = make_run(n_events=2)
    rd.write_result({"tables": {"probe_accuracy": [{"role": "subject", "split": "test", "accuracy": 0.5}]}})
    report = ingest()
    assert report["metric_rows"] == 4 and report["results"] == 0  # the events still went in
    (err,) = report["errors"]
    assert err["run_id"] == rd.run_id and "lacks 'feature_set'" in err["error"]
    assert q("SELECT result_ingested FROM ingest_state") == [(False,)]
    rd.write_result({"tables": {"probe_accuracy": [
        {"role": "subject", "feature_set": "raw", "split": "test", "accuracy": 0.5}]}})
    assert ingest()["results"] == 1
    assert q("SELECT feature_set FROM probe_accuracy") == [("raw",)]


@pytest.mark.parametrize("rows, message", [
    ({"lm_eval": [{"split": "val", "loss": "low"}]}, "must be a number"),
    ({"lm_eval": [{"split": "val", "los": 1.0}]}, "unknown column"),
    ({"lm_eval": [{"split": "val"}, {"split": "val"}]}, "repeats the key"),
    ({"dilution_accuracy": [{"feature": "w", "lag": 1.5}]}, "whole number"),
    ({"dilution_accuracy": [{"feature": 3, "lag": 1}]}, "must be text"),
    ({"lm_eval": {"split": "val"}}, "must be a list"),
    ([1, 2], "'tables' must be an object"),
])
def test_result_rows_are_validated(home, rows, message):
    rd = make_run()
    rd.write_result({"tables": rows})
    report = ingest()
    assert message in report["errors"][0]["error"]
    assert q("SELECT count(*) FROM lm_eval") == [(0,)] and q("SELECT count(*) FROM dilution_accuracy") == [(0,)]


def test_unknown_result_tables_are_reported_not_fatal(home):
    rd = make_run()
    rd.write_result({"tables": {"timings": [{"x": 1}], "lm_eval": [{"split": "val", "loss": 1.0}]}})
    report = ingest()
    assert report["unknown_tables"] == {rd.run_id: ["timings"]} and report["errors"] == []
    assert q("SELECT split, loss, ppl FROM lm_eval") == [("val", 1.0, None)]


def test_a_broken_run_folder_does_not_stop_the_others(home):
    good = make_run(seed=1, n_events=1)
    bad = make_run(seed=2, n_events=1)
    bad.config_path.write_text("{ not json")
    report = ingest()
    assert [e["run_id"] for e in report["errors"]] == [bad.run_id]
    assert q("SELECT run_id FROM runs") == [(good.run_id,)]


def test_only_the_named_runs_are_ingested(home):
    a, b = make_run(seed=1, n_events=1), make_run(seed=2, n_events=1)
    report = ingest(run_ids=[b.run_id, "nope"])
    assert report["errors"] == [{"run_id": "nope", "error": "no such run folder"}]
    assert q("SELECT run_id FROM runs") == [(b.run_id,)]
    ingest(run_ids=a.run_id)  # one id as a plain string
    assert sorted(q("SELECT run_id FROM runs")) == sorted([(a.run_id,), (b.run_id,)])


def test_many_runs_are_ingested_in_batches(home, monkeypatch):
    runs = [make_run(seed=s, n_events=2) for s in range(6)]
    opened = []
    real = db.open_store

    def counting(*args, **kwargs):
        opened.append(kwargs.get("readonly", args[0] if args else True))
        return real(*args, **kwargs)

    monkeypatch.setattr(importlib.import_module("store.ingest"), "open_store", counting)
    report = ingest(max_hold_s=0.0)  # release the lock after every run
    assert report["runs_updated"] == 6 and opened == [False] * 6
    assert q("SELECT count(*) FROM metrics") == [(6 * 2 * 2,)]
    assert len(runs) == 6


def test_no_run_folders_means_no_store_file(home):
    assert ingest()["runs_seen"] == 0
    assert not db.store_path().exists()


class _FullDisk:
    """A connection whose metric inserts fail as DuckDB fails on a full disk."""

    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql, *args):
        if sql.lstrip().startswith("INSERT INTO metrics"):
            raise duckdb.IOException('IO Error: Could not write file "emalab.duckdb.wal": No space left on device')
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_full_disk_mid_ingest_is_a_clear_error_and_changes_nothing(home, monkeypatch):
    rd = make_run(n_events=2)
    ingest()
    events(rd, 2, 5)
    rd.write_status(state="done")
    real_connect = duckdb.connect
    with monkeypatch.context() as patch:
        patch.setattr(db.duckdb, "connect",
                      lambda path, read_only=False: (real_connect(path, read_only=True) if read_only
                                                     else _FullDisk(real_connect(path))))
        with pytest.raises(StorageError, match="data folder is full"):
            ingest()
    # The run's transaction rolled back whole: old status, old offset, old rows.
    assert q("SELECT status FROM runs") == [("queued",)]
    assert q("SELECT count(*) FROM metrics") == [(4,)]
    assert ingest()["metric_rows"] == 6
    assert q("SELECT count(*), max(seq) FROM metrics") == [(10, 4)]


def test_an_unwritable_data_folder_is_a_clear_error(home, tmp_path, monkeypatch):
    make_run(n_events=1)
    lock = db.lock_path()
    lock.mkdir()  # the lock file cannot be created, as in a read-only folder (root ignores chmod)
    with pytest.raises(StorageError, match="not writable"):
        ingest()
    assert not db.store_path().exists()


def test_benchmark_figures_are_recorded(home):
    n = record_bench("scan", {"numba_ns": 0.27, "roofline_ns": 0.21}, machine={"cpu": "x86_64", "cores": 2},
                     command="python -m bench.scan")
    assert n == 2
    rows = q("SELECT bench, key, value, machine, command FROM bench_figures ORDER BY key")
    assert rows[0][:3] == ("scan", "numba_ns", 0.27)
    assert json.loads(rows[0][3]) == {"cores": 2, "cpu": "x86_64"} and rows[0][4] == "python -m bench.scan"
    with pytest.raises(ValueError, match="must be a number"):
        record_bench("scan", {"x": "fast"})


@settings(max_examples=12, deadline=None)
@given(
    values=st.lists(st.dictionaries(st.sampled_from(["loss", "acc", "lr"]),
                                    st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=3),
                    min_size=1, max_size=30),
    cuts=st.lists(st.floats(0, 1), max_size=3),
)
def test_ingesting_a_growing_file_in_any_pieces_equals_ingesting_it_once(values, cuts):
    """However the bytes arrive (lines cut anywhere), the store ends with each event exactly once."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        rd = RunDir.for_id("r-1", home)
        rd.create("k", {}, 0)
        data = "".join(json.dumps({"seq": i, "step": i, "metrics": m}) + "\n" for i, m in enumerate(values)).encode()
        points = sorted({int(c * len(data)) for c in cuts} | {len(data)})
        done = 0
        for p in points:
            with open(rd.events_path, "ab") as fh:
                fh.write(data[done:p])
            done = p
            ingest(home)
        with open_store(readonly=True, home=home) as conn:
            got = conn.execute("SELECT seq, key, value FROM metrics ORDER BY seq, key").fetchall()
            assert conn.execute("SELECT bad_lines FROM ingest_state").fetchone() == (0,)
    want = sorted((i, k, float(v)) for i, m in enumerate(values) for k, v in m.items())
    assert got == want
