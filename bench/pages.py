"""How long each page takes to load once the store has grown.

    python -m bench.pages [--runs 1000] [--metric-rows 1000000] [--repeats 5] [--home DIR] [--json]

Fills a fresh data folder (a temporary one unless ``--home`` names an empty or new folder) with a
store of ``--runs`` dilution runs and ``--metric-rows`` metric rows, and with the run folders those
rows came from, then loads every page under Streamlit's AppTest:

* cold: a new session after ``st.cache_data`` and ``st.cache_resource`` were cleared: what the first
  visitor after a restart waits for (Python modules are already imported, as on a running server);
* warm: a rerun of that same session, what every widget change costs at least.

Each figure is the median of ``--repeats`` loads.  The target is 1.5 s per page, cold and warm.
Then (unless ``--no-memory``) a real server over the same folder is walked through every page in
Chromium, and its memory reported (:mod:`bench.app_memory`; target under 700 MiB).
The dilution page does not read the store; it is measured all the same, since it is a page.

The store is filled through DuckDB directly (a million JSON events would take minutes to
ingest), but it holds exactly what ingest would have made of the run folders written next to it:
the first ingest afterwards must find nothing to do, and the report says whether it did.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple

import duckdb
import numpy as np
import pandas as pd
import streamlit as st
from streamlit.logger import set_log_level
from streamlit.testing.v1 import AppTest

from bench import app_memory
from bench.machine import machine_info as _machine_info
from ema_core.rundir import run_id_for
from jobs.runner import LocalRunner
from store import grouped, ingest, list_runs, open_store, store_summary
from store.dilution import dilution_accuracy
from store.ingest import forget_seen, run_row

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
TARGET_S = 1.5
KIND = "dilution"
# The dilution sweep's quick preset at 25 lags: its feature sets are the three rates and all together.
FEATURES = ("α=0.5", "α=0.1", "α=0.02", "all rates")
MAX_LAG = 24
SEEDS_PER_CONFIG = 10
# Fields varied between configs (5 x 2 x 5 x 2 = 100 configs): grouping across seeds has work to do.
GRID = [{"stream": {"vocab": v, "dim": d, "window": w}, "train": {"lr": lr}}
        for v in (16, 32, 64, 128, 256) for d in (32, 64) for lr in (0.005, 0.01, 0.02, 0.05, 0.1) for w in (1, 2)]
HOST = "bench-node-1"  # not this machine: a "running" run must not be taken for a dead local worker
RUN_SPACING = timedelta(minutes=40)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _iso(dt: datetime) -> str:
    return dt.isoformat(timespec="milliseconds")


# -- filling a data folder ----------------------------------------------------------------------------

def _state(i: int, n: int) -> str:
    # Mostly finished, as a store that has been used for a while; the newest few still running.
    if i >= n - max(1, n // 200):
        return "running"
    if i % 37 == 5:
        return "failed"
    if i % 53 == 7:
        return "cancelled"
    return "done"


def _metric_layout(rows_per_run: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(step, feature-set index, key) of each metric row of a run: per feature set, losses every
    ``log_every`` steps, then its accuracy at lag 0 and at the last lag (one key per event)."""
    per_set = np.array_split(np.arange(rows_per_run), len(FEATURES))
    steps, sets, keys = [], [], []
    offset = 0
    for s, chunk in enumerate(per_set):
        n = len(chunk)
        n_acc = 2 if n >= 3 else 0
        n_loss = n - n_acc
        steps += [offset + 10 * (j + 1) for j in range(n_loss)] + [offset + 10 * n_loss] * n_acc
        acc_keys = [f"acc_lag0/{FEATURES[s]}", f"acc_lag{MAX_LAG}/{FEATURES[s]}"]
        keys += [f"loss/{FEATURES[s]}"] * n_loss + acc_keys[:n_acc]
        sets += [s] * n
        offset += 10 * max(n_loss, 1)
    return np.asarray(steps, np.int64), np.asarray(sets, np.int64), keys


def fill(home: Path, n_runs: int, metric_rows: int) -> dict:
    """Write ``n_runs`` run folders and the store that ingesting them would give; returns counts."""
    rng = np.random.default_rng(20260105)
    # The runs end before now, the newest a day ago, so their files are as old as a used store's.
    now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    t0 = now - timedelta(days=1) - n_runs * RUN_SPACING
    runs_dir = home / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    base_rows, extra = divmod(metric_rows, n_runs)
    layouts: dict[int, tuple] = {}
    written = []
    for i in range(n_runs):
        n_rows = base_rows + (1 if i < extra else 0)
        if n_rows not in layouts:
            layouts[n_rows] = _metric_layout(n_rows)
        written.append(_write_run_folder(runs_dir, i, n_runs, t0 + i * RUN_SPACING, layouts[n_rows], rng))
    tables = _store_frames(written)
    log(f"  run folders written; loading {len(tables['metrics']):,} metric rows into the store …")
    _load_store(home, tables)
    results = tables["dilution_accuracy"]
    return {"runs": n_runs, "metric_rows": int(len(tables["metrics"])),
            "event_lines": sum(len(w.metrics) for w in written),
            "result_rows": 0 if results is None else int(len(results)),
            "states": {s: sum(_state(i, n_runs) == s for i in range(n_runs))
                       for s in ("done", "failed", "cancelled", "running")}}


class _Written(NamedTuple):
    """What one run folder puts in each store table."""
    run: dict
    ingest_state: tuple
    metrics: pd.DataFrame
    result: pd.DataFrame | None


def _write_run_folder(runs_dir: Path, i: int, n_runs: int, created: datetime, layout: tuple,
                      rng: np.random.Generator) -> _Written:
    """Write run ``i``'s folder (config, events, status, log, result) and return its store rows."""
    steps, sets, keys = layout
    grid, seed, config = _run_config(i, keys)
    run_id = run_id_for(KIND, config, seed)
    started = created + timedelta(seconds=5)
    ended = started + timedelta(seconds=300)
    state = _state(i, n_runs)
    rd = runs_dir / run_id
    rd.mkdir()
    record = {"run_id": run_id, "kind": KIND, "config": config, "seed": seed, "created": _iso(created),
              "code_version": "f564755c0ffe", "host": HOST}
    (rd / "config.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    chance = 1.0 / grid["stream"]["vocab"]
    values = _metric_values(rng, chance, steps, sets, keys)
    n_bytes, metrics = _write_events(rd, run_id, started, steps, keys, values)
    status = _status(i, state, created, started, ended, config["train"]["steps"], steps, keys, values)
    (rd / "status.json").write_text(json.dumps(status, sort_keys=True))
    (rd / "log.txt").write_text("".join(f"[{FEATURES[s]}] step {t} loss {v:.4f}\n"
                                        for s, t, v in zip(sets[-40:], steps[-40:], values[-40:])))
    result, result_frame = _write_result(rd, run_id, rng, chance) if state == "done" else (None, None)
    if state != "running":
        stamp = ended.timestamp()
        for f in rd.iterdir():
            os.utime(f, (stamp, stamp))
    # The run's row exactly as ingest computes it from these files.
    return _Written({"run_id": run_id, **run_row(record, status, result)},
                    (run_id, n_bytes, result is not None, 0), metrics, result_frame)


def _run_config(i: int, keys: list[str]) -> tuple[dict, int, dict]:
    """Run ``i``'s grid point, seed and full config (its steps from the number of loss rows)."""
    grid = GRID[(i // SEEDS_PER_CONFIG) % len(GRID)]
    seed = i % SEEDS_PER_CONFIG + SEEDS_PER_CONFIG * (i // (SEEDS_PER_CONFIG * len(GRID)))
    loss_events = max(1, sum(k.startswith("loss/") for k in keys) // len(FEATURES))
    config = {"alphas": [0.5, 0.1, 0.02], "include_all": True, "seed": seed,
              "stream": {"max_lag": MAX_LAG, "n_train": 4096, "n_test": 1024, **grid["stream"]},
              "train": {"steps": 10 * loss_events, "batch": 256, "log_every": 10, "checkpoint_every": 50,
                        **grid["train"]}}
    return grid, seed, config


def _metric_values(rng: np.random.Generator, chance: float, steps: np.ndarray, sets: np.ndarray,
                   keys: list[str]) -> np.ndarray:
    """Metric values: a loss that falls with noise, accuracies that fall with the rate's memory."""
    values = np.empty(len(keys))
    is_loss = np.array([k.startswith("loss/") for k in keys])
    values[is_loss] = (3.0 + rng.random()) * np.exp(-steps[is_loss] / (400.0 + 100 * sets[is_loss])) \
        + 0.05 * rng.random(int(is_loss.sum()))
    values[~is_loss] = np.clip(0.9 - 0.1 * sets[~is_loss] + 0.02 * rng.standard_normal(int((~is_loss).sum())),
                               chance, 1.0)
    return values


def _write_events(rd: Path, run_id: str, started: datetime, steps: np.ndarray, keys: list[str],
                  values: np.ndarray) -> tuple[int, pd.DataFrame]:
    """Write events.jsonl, one metric per event; its size in bytes and the metrics rows it gives."""
    seq = np.arange(len(keys))
    times = np.datetime_as_string(np.datetime64(started.replace(tzinfo=None), "ms")
                                  + (seq * 300).astype("timedelta64[ms]"), unit="ms")
    # canonical_json's spelling (sorted keys, no spaces, UTF-8), as the worker appends events.
    text = "".join(f'{{"metrics":{{"{k}":{v!r}}},"seq":{s},"step":{t},"time":"{ts}+00:00"}}\n'
                   for k, v, s, t, ts in zip(keys, values.tolist(), seq.tolist(), steps.tolist(), times))
    data = text.encode("utf-8")
    (rd / "events.jsonl").write_bytes(data)
    return len(data), pd.DataFrame({"seq": seq, "step": steps, "key": keys, "value": values}).assign(run_id=run_id)


def _status(i: int, state: str, created: datetime, started: datetime, ended: datetime, total_steps: int,
            steps: np.ndarray, keys: list[str], values: np.ndarray) -> dict:
    """status.json as the worker leaves it in ``state``."""
    latest = {k: float(v) for k, v in zip(keys[-4:], values[-4:].tolist())}
    status = {"attempts": 1, "backend": "local", "heartbeat": _iso(ended if state != "running" else started),
              "host": HOST, "latest": latest, "pid": 40000 + i, "preset": None,
              "queued_at": _iso(created), "started": _iso(started), "state": state,
              "step": int(steps[-1]), "updated": _iso(ended)}
    if state == "running":
        status |= {"progress": 0.6, "eta_s": 120.0, "message": f"{FEATURES[2]}: step 150/{total_steps}"}
    else:
        status |= {"ended": _iso(ended), "eta_s": None}
        if state == "done":
            status |= {"progress": 1.0, "message": "done"}
        elif state == "failed":
            status |= {"progress": 0.4, "message": "RuntimeError: the loss diverged (nan) at step 240"}
        else:
            status |= {"progress": 0.3, "message": "cancelled at step 180"}
    return status


def _write_result(rd: Path, run_id: str, rng: np.random.Generator, chance: float) -> tuple[dict, pd.DataFrame]:
    """Write a finished run's result.json; the result and its dilution_accuracy rows."""
    lags = np.arange(MAX_LAG + 1)
    rows = []
    for f, name in enumerate(FEATURES):
        memory = (2.0, 8.0, 30.0, 40.0)[f]
        acc = np.clip(chance + (0.95 - chance) * np.exp(-lags / memory)
                      + 0.01 * rng.standard_normal(len(lags)), 0.0, 1.0)
        rows += [{"feature": name, "lag": int(k), "accuracy": float(a), "chance": chance}
                 for k, a in zip(lags, acc)]
    summary = {"chance": chance, "feature_sets": ", ".join(FEATURES), "seconds": 300.0}
    for name in FEATURES:
        mine = [r for r in rows if r["feature"] == name]
        summary[f"acc_lag0/{name}"] = mine[0]["accuracy"]
        summary[f"acc_lag{MAX_LAG}/{name}"] = mine[-1]["accuracy"]
    result = {"summary": summary, "tables": {"dilution_accuracy": rows}}
    (rd / "result.json").write_text(json.dumps(result, sort_keys=True))
    return result, pd.DataFrame(rows).assign(run_id=run_id)


def _store_frames(written: list[_Written]) -> dict[str, pd.DataFrame | None]:
    """The store's tables (name: rows, None when there are none) from every run folder's rows."""
    results = [w.result for w in written if w.result is not None]
    return {
        "runs": pd.DataFrame([w.run for w in written], dtype=object),
        "ingest_state": pd.DataFrame([w.ingest_state for w in written],
                                     columns=["run_id", "events_offset", "result_ingested", "bad_lines"]),
        "metrics": pd.concat([w.metrics for w in written],
                             ignore_index=True)[["run_id", "seq", "step", "key", "value"]],
        "dilution_accuracy": (pd.concat(results, ignore_index=True)[["run_id", "feature", "lag", "accuracy", "chance"]]
                              if results else None),
    }


def _load_store(home: Path, tables: dict[str, pd.DataFrame | None]) -> None:
    """Create the store and insert the tables in one transaction."""
    with open_store(readonly=False, home=home) as conn:  # creates and migrates the file
        conn.execute("BEGIN TRANSACTION")
        for name, frame in tables.items():
            if frame is None:
                continue
            conn.register("_bench_rows", frame)
            cols = ", ".join(frame.columns)
            conn.execute(f"INSERT INTO {name} ({cols}) SELECT {cols} FROM _bench_rows")
            conn.unregister("_bench_rows")
        conn.execute("COMMIT")


# -- measuring the pages ------------------------------------------------------------------------------

# name: (page to switch to, or None for the default page; session state set before it loads)
PAGES: dict[str, tuple[str | None, dict]] = {
    "overview": (None, {}),
    # The first load after the server (re)started: ingest has not yet seen any run folder.
    "overview_after_restart": (None, {}),
    "dilution": ("pages/dilution.py", {}),
    "structure": ("pages/structure.py", {}),
    "content": ("pages/content.py", {}),
    "jobs": ("pages/jobs.py", {}),
    # The run table: every run the data folder holds, with its headline, notes and the settings filter.
    "jobs_table": ("pages/jobs.py", {"tab": "Table"}),
    "export": ("pages/export.py", {}),
    "export_dilution_accuracy": ("pages/export.py", {"export_table": "dilution_accuracy"}),
    "export_dilution_accuracy_grouped": ("pages/export.py", {"export_table": "dilution_accuracy",
                                                             "export_grouped": True}),
}


def _clear_caches() -> None:
    # Outside a script run Streamlit warns that there is no runtime; AppTest resets the level on
    # every run, so it is set again here.
    set_log_level("error")
    st.cache_data.clear()
    st.cache_resource.clear()


def _check(at, name: str) -> None:
    if at.exception:
        raise RuntimeError(f"page {name} failed: {[e.value for e in at.exception]}")


def load_once(name: str) -> tuple[float, float]:
    """(cold, warm) seconds for one load of the page ``name`` in a new AppTest session."""
    path, state = PAGES[name]
    _clear_caches()
    if name == "overview_after_restart":
        forget_seen()
    at = AppTest.from_file(str(APP), default_timeout=300)
    if path is not None:
        at.run()  # the default page opens first, as in a browser; then the caches are emptied again
        _check(at, "overview")
        _clear_caches()
        for key, value in state.items():
            at.session_state[key] = value
        at.switch_page(path)
    t0 = time.perf_counter()
    at.run()
    cold = time.perf_counter() - t0
    _check(at, name)
    t0 = time.perf_counter()
    at.run()
    warm = time.perf_counter() - t0
    _check(at, name)
    return cold, warm


def measure(repeats: int, pages: list[str]) -> dict:
    for name in pages:  # warm-up: imports, numba's compile, DuckDB's first open
        load_once(name)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in pages}
    # Interleaved, so a burst of load from the neighbours hits every page alike.
    for r in range(repeats):
        for name in pages:
            times[name].append(load_once(name))
        log(f"  repeat {r + 1}/{repeats}: " + ", ".join(f"{n} {c:.2f}/{w:.2f}" for n, ((c, w), *_) in
                                                       ((n, times[n][-1:]) for n in pages)))
    out = {}
    for name, pairs in times.items():
        cold = statistics.median(c for c, _ in pairs)
        warm = statistics.median(w for _, w in pairs)
        out[name] = {"cold_s": round(cold, 3), "warm_s": round(warm, 3),
                     "cold_max_s": round(max(c for c, _ in pairs), 3), "pass": max(cold, warm) <= TARGET_S}
    return out


def diagnostics(home: Path) -> dict:
    """What the pages spend their time on, call by call, on the filled store (best of 3)."""
    runner = LocalRunner(home=home)

    def ingest_unremembered():
        forget_seen()
        ingest(home)

    calls = {
        "ingest_noop": lambda: ingest(home),
        "ingest_noop_after_restart": ingest_unremembered,
        "runner_list": runner.list,
        "store_summary": lambda: store_summary(home=home),
        "list_runs_all": lambda: list_runs(limit=None, home=home),
        "dilution_accuracy_all": lambda: dilution_accuracy(home=home),
        "grouped_dilution_accuracy": lambda: grouped("dilution_accuracy", home=home),
    }
    out = {}
    for name, fn in calls.items():
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out[name + "_s"] = round(best, 4)
    return out


def machine_info() -> dict:
    return _machine_info(streamlit=st.__version__, duckdb=duckdb.__version__, pandas=pd.__version__)


def main(argv: list[str] | None = None) -> int:
    """Fill a data folder, measure every page on it, and print the report."""
    args, home, tmp = _parse_args(argv)
    os.environ["EMALAB_HOME"] = str(home)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # the pages import their helpers as pages._ui
    machine = machine_info()
    try:
        run = _run(home, args)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    report = _report(run, args, argv, machine)
    if args.json:
        print(json.dumps(report))
    else:
        _print_report(report, run.fill_s)
    return 0


def _parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Path, str | None]:
    """The options, the data folder to fill, and the temporary folder to remove afterwards (if any)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000, help="runs in the store (default 1000)")
    ap.add_argument("--metric-rows", type=int, default=1_000_000, help="metric rows in all (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=5, help="loads per page; the medians are reported")
    ap.add_argument("--home", type=Path, help="data folder to fill (must be empty or new; kept afterwards)")
    ap.add_argument("--pages", nargs="+", choices=list(PAGES), default=list(PAGES), help="pages to measure")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-memory", dest="memory", action="store_false",
                    help="skip the walk through every page in Chromium that measures the app's memory")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.metric_rows < args.runs:
        ap.error("need at least one run and at least one metric row per run")
    if args.home is None:
        tmp = tempfile.mkdtemp(prefix="emalab-bench-pages-")
        return args, Path(tmp), tmp
    home = args.home.resolve()
    if home.exists() and any(home.iterdir()):
        ap.error(f"--home {home} is not empty; the benchmark fills a fresh data folder")
    return args, home, None


class _Run(NamedTuple):
    """What one benchmark run measured."""
    counts: dict
    fill_s: float
    consistent: bool
    diag: dict
    pages: dict
    memory: dict | None


def _run(home: Path, args: argparse.Namespace) -> _Run:
    """Fill the data folder, check the first ingest finds nothing, time the calls and the pages."""
    log(f"filling {home} with {args.runs} runs and {args.metric_rows:,} metric rows …")
    t0 = time.perf_counter()
    counts = fill(home, args.runs, args.metric_rows)
    fill_s = time.perf_counter() - t0
    log(f"  filled in {fill_s:.1f} s")

    first = ingest(home)  # must find nothing new: the store already holds the run folders
    consistent = first["runs_updated"] == 0 and not first["errors"]
    if not consistent:
        log(f"  warning: the first ingest changed the store: {first['runs_updated']} runs, "
            f"errors {first['errors'][:3]}")
    diag = diagnostics(home)
    log("  " + ", ".join(f"{k} {v:.3f}" for k, v in diag.items()))
    log(f"loading {len(args.pages)} pages, {args.repeats} repeats each (cold/warm s) …")
    pages = measure(args.repeats, args.pages)
    memory = None
    if args.memory:
        log("walking every page in Chromium for the app's memory …")
        memory = app_memory.walk(home)
        log(f"  {memory['start_mib']} MiB at start, {memory['end_mib']} MiB after the walk")
    return _Run(counts, fill_s, consistent, diag, pages, memory)


def _report(run: _Run, args: argparse.Namespace, argv: list[str] | None, machine: dict) -> dict:
    """The report (``--json`` prints it as is); the load average is read as the run ends."""
    counts = run.counts
    report = {"pages": run.pages, "runs": counts["runs"], "metric_rows": counts["metric_rows"],
              "result_rows": counts["result_rows"], "states": counts["states"],
              "fill_seconds": round(run.fill_s, 2), "first_ingest_was_noop": run.consistent,
              "target_s": TARGET_S, "repeats": args.repeats, "diagnostics": run.diag, "memory": run.memory,
              "machine": machine,
              "command": "python -m bench.pages " + " ".join(argv if argv is not None else sys.argv[1:])}
    report["machine"]["loadavg_end"] = round(os.getloadavg()[0], 2)
    return report


def _print_report(report: dict, fill_s: float) -> None:
    """The report as a table, one page a line."""
    # fill_s unrounded: the report's fill_seconds is rounded to 2 places, and printing that to 1 could differ.
    machine = report["machine"]
    print(f"{report['runs']} runs, {report['metric_rows']:,} metric rows, {report['result_rows']:,} result rows; "
          f"filled in {fill_s:.1f} s; first ingest a no-op: {report['first_ingest_was_noop']}")
    print(f"{'page':36s} {'cold s':>8s} {'warm s':>8s}  target ≤ {TARGET_S} s")
    for name, p in report["pages"].items():
        print(f"{name:36s} {p['cold_s']:8.3f} {p['warm_s']:8.3f}  {'PASS' if p['pass'] else 'FAIL'}")
    print("calls: " + ", ".join(f"{k} {v:.3f}" for k, v in report["diagnostics"].items()))
    if report["memory"] is not None:
        m = report["memory"]
        print(f"app memory: {m['start_mib']} MiB at start, {m['end_mib']} MiB after every page "
              f"(target < {m['target_mib']} MiB): {'PASS' if m['pass'] else 'FAIL'}")
    print(f"load average {machine['loadavg_start']} → {machine['loadavg_end']} on {machine['cores']} CPUs")


if __name__ == "__main__":
    sys.exit(main())
