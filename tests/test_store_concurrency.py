"""Many real processes on one store file, and ingests killed with SIGKILL.

The stress test runs, at the same time: 3 workers appending events to their run folders, one
process ingesting in a loop, 2 readers querying like open pages, and one exporter.  No reader or
exporter may ever see an exception, and the store must end with exactly the rows written.

The normal suite runs it for ``SHORT_SECONDS``; the 2-minute version runs only when
``EMALAB_STRESS_SECONDS`` is set: ``make stress`` (``make stress STRESS=600`` for longer).  Either way
the run ends only once every ingester, reader and exporter has made its passes, so a busy machine
makes it longer, never a failure.
"""
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path

import pytest

from ema_core.rundir import RunDir, run_id_for, wait_for
from store.db import check, open_store
from store.ingest import ingest

ROOT = Path(__file__).resolve().parents[1]
SHORT_SECONDS = 12.0
KEYS = ("loss", "acc", "lr")
# Liveness only: how long to wait for something that must happen (a process starting, a pass
# ending) before calling it stuck.  Ten times what a loaded 2-core machine needs; never a speed target.
PATIENCE = 600
ROUNDS = 3  # passes each ingester, reader and exporter must make before the run may end


def _child_env(home: str) -> None:
    os.environ["EMALAB_HOME"] = home
    # The store's own wait for a busy file (30 s by default) is a clock: eight processes on a loaded
    # machine may queue longer.  Here it is liveness only; what is checked is that nothing fails.
    os.environ["EMALAB_STORE_TIMEOUT"] = str(PATIENCE)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _writer(home, idx, ready, stop_at, results):
    """A worker: batches of events, some lines written in two halves as a slow writer would."""
    _child_env(home)
    rng = random.Random(idx)
    config = {"width": 8, "stress": True}
    rd = RunDir.for_id(run_id_for("stress", config, idx))
    rd.create("stress", config, idx)
    rd.write_status(state="running", started="2026-01-01T00:00:00+00:00")
    ready.wait()
    seq = 0
    try:
        while time.time() < stop_at.value:
            if rng.random() < 0.2:
                line = json.dumps({"seq": seq, "step": seq, "metrics": {k: seq * 0.5 for k in KEYS}}) + "\n"
                cut = rng.randrange(1, len(line) - 1)
                with open(rd.events_path, "a") as fh:
                    fh.write(line[:cut])
                    fh.flush()
                    time.sleep(rng.uniform(0.0, 0.05))  # an ingest may see the half line now
                    fh.write(line[cut:])
                seq += 1
            else:
                n = rng.randint(1, 25)
                rd.append_events([{"seq": s, "step": s, "time": time.time(),
                                   "metrics": {k: s * 0.5 for k in KEYS}} for s in range(seq, seq + n)])
                seq += n
            if rng.random() < 0.3:
                rd.write_status(progress=rng.random(), step=seq)
            time.sleep(rng.uniform(0.005, 0.05))
        rd.write_result({"summary": {"events": seq}, "tables": {"probe_accuracy": [
            {"role": "subject", "feature_set": "traces", "split": "test", "accuracy": 0.5 + idx / 10}]}})
        rd.write_status(state="done", ended="2026-01-01T01:00:00+00:00")
        results.put(("writer", idx, seq, None))
    except Exception:  # noqa: BLE001 - reported to the test, which fails on it
        results.put(("writer", idx, seq, traceback.format_exc()))


def _ingester(home, ready, stop, results, progress):
    _child_env(home)
    ready.wait()
    passes, errors = 0, []
    while not stop.is_set():
        try:
            report = ingest()
            errors += [e for e in report["errors"]]
            passes += 1
        except Exception:  # noqa: BLE001
            errors.append(traceback.format_exc())
        progress.value += 1
        time.sleep(random.uniform(0.05, 0.3))
    results.put(("ingester", passes, errors))


def _reader(home, idx, ready, stop, results, progress):
    """What an open page does: list runs, draw a metric, show counts and a grouped table."""
    _child_env(home)
    from store import queries

    ready.wait()
    n, errors, max_rows = 0, [], 0
    while not stop.is_set():
        try:
            runs = queries.list_runs(kind="stress")
            ids = list(runs["run_id"])
            series = queries.metric_series(ids, "loss")
            queries.metric_keys(ids)
            summary = queries.store_summary()
            if ids:
                queries.run_detail(ids[idx % len(ids)])
            queries.grouped("metrics_final", ids)
            max_rows = max(max_rows, summary["metric_rows"], len(series))
            n += 1
        except Exception:  # noqa: BLE001 - any exception here would reach a user
            errors.append(traceback.format_exc())
        progress.value += bool(max_rows)  # passes that had rows to read
        time.sleep(random.uniform(0.0, 0.03))
    results.put(("reader", n, errors, max_rows))


def _exporter(home, ready, stop, results, progress):
    _child_env(home)
    from store.export import export_table

    ready.wait()
    n, errors = 0, []
    formats = ["csv", "latex", "markdown"]
    while not stop.is_set():
        try:
            export_table("metrics_final", formats[n % 3], grouped=bool(n % 2))
            export_table("runs", "csv", out="all-runs.csv")
            n += 1
        except Exception:  # noqa: BLE001
            errors.append(traceback.format_exc())
        progress.value += 1
        time.sleep(random.uniform(0.0, 0.1))
    results.put(("exporter", n, errors))


def _stress(home: Path, seconds: float) -> None:
    ctx = mp.get_context("spawn")
    # Everyone starts together once the spawned interpreters have imported pandas and DuckDB.
    ready, stop, results = ctx.Barrier(8, timeout=PATIENCE), ctx.Event(), ctx.Queue()
    stop_at = ctx.Value("d", 0.0)
    progress = [ctx.Value("i", 0) for _ in range(4)]
    writers = [ctx.Process(target=_writer, args=(str(home), i, ready, stop_at, results)) for i in range(3)]
    others = ([ctx.Process(target=_ingester, args=(str(home), ready, stop, results, progress[0]))]
              + [ctx.Process(target=_reader, args=(str(home), i, ready, stop, results, progress[1 + i]))
                 for i in range(2)]
              + [ctx.Process(target=_exporter, args=(str(home), ready, stop, results, progress[3]))])
    procs = writers + others
    for p in procs:
        p.start()
    try:
        stop_at.value = time.time() + 1e9
        ready.wait()
        stop_at.value = time.time() + seconds
        for p in writers:
            p.join(seconds + PATIENCE)
        # The others go on until each has made its passes (readers: with rows to read), so that a
        # slow machine lengthens the run instead of failing it.
        def passes_made() -> bool:
            assert all(p.is_alive() for p in others), [p.exitcode for p in others]
            return min(v.value for v in progress) >= ROUNDS

        assert wait_for(passes_made, PATIENCE, 0.1), f"passes never made: {[v.value for v in progress]}"
        time.sleep(0.5)  # one more ingest pass after the last events, while readers still read
        stop.set()
        for p in others:
            p.join(PATIENCE)
        got = [results.get(timeout=PATIENCE) for _ in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

    by_role: dict[str, list] = {}
    for item in got:
        by_role.setdefault(item[0], []).append(item[1:])
    writer_errors = [e for _, _, e in by_role["writer"] if e]
    assert writer_errors == []
    (passes, ingest_errors), = by_role["ingester"]
    assert ingest_errors == []
    assert passes >= ROUNDS
    for n, errors, max_rows in by_role["reader"]:
        assert errors == [], errors[0]
        assert n >= ROUNDS and max_rows > 0  # they really read while the store was filling
    (exports, export_errors), = by_role["exporter"]
    assert export_errors == [], export_errors[0]
    assert exports >= ROUNDS

    assert ingest(home)["errors"] == []  # whatever the loop had not seen yet
    written = {run_id_for("stress", {"width": 8, "stress": True}, idx): seq for idx, seq, _ in by_role["writer"]}
    with open_store(readonly=True, home=home) as conn:
        for run_id, n_events in written.items():
            count, distinct, max_seq = conn.execute(
                "SELECT count(*), count(DISTINCT (seq, key)), max(seq) FROM metrics WHERE run_id = ?", [run_id]
            ).fetchone()
            assert count == distinct == n_events * len(KEYS), run_id  # nothing lost, nothing doubled
            assert max_seq == n_events - 1
        assert conn.execute("SELECT count(*) FROM metrics").fetchone()[0] == sum(written.values()) * len(KEYS)
        assert conn.execute("SELECT count(*) FROM runs WHERE status = 'done'").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM probe_accuracy").fetchone()[0] == 3
    assert check(home)["ok"]


def test_app_jobs_and_export_share_the_store(tmp_path):
    _stress(tmp_path / "home", SHORT_SECONDS)


@pytest.mark.skipif(not os.environ.get("EMALAB_STRESS_SECONDS"), reason="set EMALAB_STRESS_SECONDS (e.g. 120)")
def test_app_jobs_and_export_share_the_store_for_minutes(tmp_path):
    _stress(tmp_path / "home", float(os.environ["EMALAB_STRESS_SECONDS"]))


_INGEST_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from store.ingest import ingest
    print("ready", flush=True)
    ingest()
    print("done", flush=True)
""")


def _append(rd: RunDir, start: int, n: int) -> None:
    rd.append_events([{"seq": s, "step": s, "metrics": {"loss": s * 0.25, "acc": 1.0 / (s + 1)}}
                      for s in range(start, start + n)])


def test_sigkill_during_ingest_leaves_a_consistent_store(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    rng = random.Random(7)
    big = RunDir.for_id(run_id_for("big", {"n": 1}, 0))
    big.create("big", {"n": 1}, 0)
    small = RunDir.for_id(run_id_for("big", {"n": 2}, 0))
    small.create("big", {"n": 2}, 0)
    _append(small, 0, 10)
    total, interrupted, rounds, work = 0, 0, 0, None
    while interrupted < 3:  # rounds until three kills have landed inside an ingest
        rounds += 1
        assert rounds <= 20, f"only {interrupted} of {rounds - 2} kills landed while ingest was working"
        _append(big, total, 25_000)  # new work every time, so every child has something to be killed in
        total += 25_000
        proc = subprocess.Popen([sys.executable, "-c", _INGEST_CHILD, str(ROOT)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        if work is None:
            # The first ingest runs to the end and times the work, so that the kills below land
            # inside the next ingests (each has at least as much to do) on a fast or a slow machine.
            assert proc.stdout.readline().strip() == "done"
            work = time.monotonic() - t0
            proc.wait()
        else:
            time.sleep(rng.uniform(0.02, 0.9) * work)
            proc.send_signal(signal.SIGKILL)
            if "done" in proc.communicate()[0]:
                work /= 2  # it finished first (the machine got quicker): aim earlier, and go again
            else:
                interrupted += 1
        # Between kills the store must always open and agree with itself.
        with open_store(readonly=True) as conn:
            rows = conn.execute("SELECT count(*) FROM metrics WHERE run_id = ?", [big.run_id]).fetchone()[0]
            offset = conn.execute("SELECT events_offset FROM ingest_state WHERE run_id = ?", [big.run_id]).fetchone()
        ingested_events = rows // 2
        assert rows % 2 == 0
        if offset is not None:  # offset and rows moved together: the rows are exactly the events before it
            before = big.events_path.read_bytes()[:offset[0]]
            assert before.count(b"\n") == ingested_events and (not before or before.endswith(b"\n"))
        else:
            assert ingested_events == 0
    report = ingest()
    assert report["errors"] == []
    with open_store(readonly=True) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT (seq, key)) FROM metrics WHERE run_id = ?",
                            [big.run_id]).fetchone() == (2 * total, 2 * total)
        assert conn.execute("SELECT count(*) FROM metrics WHERE run_id = ?", [small.run_id]).fetchone() == (20,)
        assert conn.execute("SELECT events_offset FROM ingest_state WHERE run_id = ?", [big.run_id]).fetchone() == (
            big.events_path.stat().st_size,)
    assert check(home)["ok"]
