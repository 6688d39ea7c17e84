"""`emalab`: run experiments, manage jobs, export tables, look after the store, run benchmarks.

    emalab run KIND [--preset P] [--set key=value ...] [--seed N] [--background] [--json]
    emalab jobs list|show|cancel|resume|logs [RUN_ID] [--json]
    emalab export --table NAME --format FORMAT [--runs ID ...] [--grouped] [--out FILE] [--json]
    emalab store migrate|check [--json]
    emalab bench scan|dilution-page [--quick] [--json]
    emalab learning-rates [--study NAME] [--json]

With ``--json`` a command prints exactly one JSON object on stdout and nothing else (progress and
warnings go to stderr), so its output can be piped into another program.  Bad arguments or config
values print one line ``emalab: error: ...`` naming the field and what it allows, exit with
status 2, and write nothing: every argument is checked before a run folder, the store or an
export is touched.  A store or data folder that cannot be used prints one line and exits with 1.

``run`` with settings and a seed that already ran to the end runs nothing: it says so, with the
run id and the next free seed, and exits 0 (``--json``: the stored result, ``"reused": true``).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import math
import os
import sys
import time
from typing import Any, Callable, NoReturn, Sequence

from tqdm import tqdm

from ema_core.experiments import REGISTRY, build_config
from ema_core.experiments.units import units_for, with_unit
from ema_core.messages import error_line, one_line
from ema_core.rundir import RESUMABLE_STATES, DamagedRunError, RunDir, StorageError, current_kind
from ema_core.studies import STUDIES
from jobs.ray_backend import RayRunner
from jobs.runner import LocalRunner, eta_text, existing_run, format_duration, next_free_seed

# The store (pandas and DuckDB, 0.4 s to import on top of the rest) is imported by the commands that
# open it, through _store, not here: `jobs` never does, and `run --background` only queues.  Everything
# above comes with the registry anyway (torch, 1.2 s), which every command needs to know the kinds;
# the Ray runner's module is light (ray itself is imported when a runner joins a cluster).

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
POLL_S = 0.2


class UsageError(Exception):
    """A bad argument or config value: one line, exit 2, nothing written."""


class _Parser(argparse.ArgumentParser):
    # Called before the help is printed: see format_help.
    late_help: Callable[[], None] | None = None

    def error(self, message: str) -> NoReturn:  # one line, not usage + message
        raise UsageError(message)

    def format_help(self) -> str:
        # A list that comes from a registry the command loads only when it runs (the store's tables
        # and formats) is filled in when the help is printed, so other commands need not load it.
        if self.late_help is not None:
            self.late_help()
        return super().format_help()


# --- output ---------------------------------------------------------------------------------------


def jsonable(obj: Any) -> Any:
    """``obj`` as strict JSON values; shared with ``jobs.ddp``, which prints the same records."""
    # Strict JSON: NaN and infinities (a diverged loss) become null rather than invalid tokens.
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


def _emit(obj: Any, as_json: bool, text: str | None = None) -> None:
    if as_json:
        print(json.dumps(jsonable(obj), sort_keys=True, allow_nan=False))
    elif text is not None:
        print(text)


# Messages are escaped rather than joined: an argument may hold a line break, and the line must say
# exactly what was typed, on the one line a script reads.
def _warn(message: str) -> None:
    print(f"emalab: warning: {one_line(message, 'escape')}", file=sys.stderr)


# --- run ------------------------------------------------------------------------------------------


def parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` arguments as overrides; shared with ``jobs.ddp``, which takes the same."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE (a setting of the experiment), got {pair!r}")
        out[key.strip()] = value
    return out


def cmd_run(args) -> int:
    # Validated here, before the runner creates the run folder: a bad value writes nothing.
    try:
        config = build_config(args.kind, preset=args.preset, overrides=parse_sets(args.set), seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.ray and args.background:
        # A Ray task lives as long as the driver that submitted it: this command is that driver.
        raise UsageError("--ray runs in the foreground (the run lives as long as this command); drop --background")
    runner = _ray_runner(args.ray) if args.ray else LocalRunner(slots=args.slots)
    try:
        return _run_with(runner, args, config)
    finally:
        if args.ray:
            runner.close()


def _store():
    """The ``store`` package, for the commands that open the store (see the note at the top)."""
    import store  # start-up: pandas and DuckDB (0.4 s), paid only by the commands that open the store

    return store


def _ray_runner(address: str):
    try:
        return RayRunner(address)
    except ImportError as exc:
        raise UsageError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - Ray's ways of not connecting are many; say which in one line
        raise UsageError(f"--ray {address}: could not join the cluster: {error_line(exc)}") from exc


def _run_with(runner, args, config) -> int:
    run_id, before = existing_run(args.kind, config, home=runner.home)
    # A done run of the same settings and seed is reused (its numbers would come out the same); a
    # failed, cancelled or crashed one is resumed by submit, a queued or running one followed.
    reused = before == "done"
    next_seed = next_free_seed([(args.kind, config)], home=runner.home)
    if not reused:
        if before in RESUMABLE_STATES:
            print(f"emalab: {run_id} was {before}: resuming it from its newest checkpoint", file=sys.stderr)
        elif before is not None:
            print(f"emalab: {run_id} is already {before}: following it", file=sys.stderr)
        run_id = runner.submit(args.kind, config, preset=args.preset)
    if args.background and not reused:
        record = _run_record(runner, run_id, args.preset, background=True, reused=False, next_seed=next_seed)
        hint = ("queued: it starts when a slot frees up (any `emalab jobs` command or the app starts it)"
                if record["state"] == "queued" else f"follow with: emalab jobs show {run_id}")
        _emit(record, args.json, f"{run_id} {record['state']} ({hint})")
        return EXIT_OK
    if not reused:
        _follow(runner, run_id, quiet=args.json)
    store = _store()  # only once there is something to ingest

    ingest_error = None
    try:
        store.ingest(run_ids=[run_id])
    except (store.StoreError, StorageError) as exc:  # the run itself is fine, and reported below
        ingest_error = str(exc)
        _warn(f"the run finished but could not be added to the store: {exc}")
    record = _run_record(runner, run_id, args.preset, background=args.background, reused=reused, next_seed=next_seed)
    record["ingested"] = ingest_error is None
    text = f"{run_id}: {record['state']}"
    if reused:
        text += (f" (already done: these settings and seed ran before, nothing ran now; "
                 f"rerun with --seed {next_seed} for a new run)")
    elif record.get("message") not in (None, record["state"]):
        text += f" ({record['message']})"
    if record["summary"]:
        text += "\n" + "\n".join(f"  {k}: {with_unit(k, v)}" for k, v in record["summary"].items())
    _emit(record, args.json, text)
    return EXIT_OK if record["state"] == "done" and ingest_error is None else EXIT_FAILED


def _run_record(runner, run_id: str, preset: str | None, background: bool, reused: bool, next_seed: int) -> dict:
    """The object `run --json` prints: stable keys, then the summary's keys where they do not clash.

    ``reused``: the run had already finished and nothing ran now; ``next_seed``: the first seed of
    these settings that has no run yet; ``units``: the unit of each summary value that has one.
    """
    rd = RunDir.for_id(run_id, runner.home)
    st = runner.status(run_id)
    config = rd.read_config()
    summary = (rd.read_result() or {}).get("summary") or {}
    stable = {
        "run_id": run_id, "kind": config["kind"], "seed": config["seed"], "state": st.get("state"),
        "preset": preset, "config": config["config"], "progress": st.get("progress"),
        "message": st.get("message"), "background": background, "summary": summary,
        "path": str(rd.path), "reused": reused, "next_seed": next_seed, "units": units_for(summary),
        "label": st.get("label"),
    }
    return {**summary, **stable}


def _follow(runner, run_id: str, quiet: bool) -> str:
    """Wait for the job with a progress bar on stderr; Ctrl-C cancels it (it checkpoints first)."""
    # The time left is the worker's ETA (measured after its warm-up, shown once stable), not tqdm's
    # own guess, which counts the queue and the imports as progress made slowly.
    bar = tqdm(total=1000, desc=run_id, unit="‰", disable=quiet, file=sys.stderr, leave=False,
               bar_format="{desc} {percentage:3.0f}%|{bar}| {elapsed}{postfix}")
    try:
        while True:
            runner.tick()
            st = runner.status(run_id)
            bar.n = int(1000 * float(st.get("progress") or 0.0))
            eta = st.get("eta_s") if st.get("state") == "running" else None
            bar.set_postfix_str((st.get("message") or st.get("state", ""))
                                + (f" · {eta_text(eta, bool(st.get('eta_settled')))}" if eta is not None else ""),
                                refresh=False)
            bar.refresh()
            if st.get("state") in ("done", "failed", "cancelled", "crashed"):
                return st["state"]
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        bar.close()
        print(f"emalab: cancelling {run_id} …", file=sys.stderr)
        return runner.cancel(run_id)
    finally:
        bar.close()


# --- jobs -----------------------------------------------------------------------------------------


def cmd_jobs(args) -> int:
    if args.tail < 0:
        raise UsageError(f"--tail must be 0 (everything) or a positive number of lines, got {args.tail}")
    if args.action == "list":
        if args.run_id is not None:
            raise UsageError("jobs list takes no run id (use: emalab jobs show RUN_ID)")
    elif not args.run_id:
        raise UsageError(f"jobs {args.action} needs a run id (see: emalab jobs list)")
    else:
        _known(args.run_id)
    runner = LocalRunner(slots=args.slots)
    if args.action in ("list", "show"):
        # A queued run has no process waiting to start it once the CLI that queued it has exited:
        # looking at the jobs starts those that fit in the free slots, as the app's Jobs page does.
        runner.tick()
    if args.action == "list":
        rows = runner.list()
        _emit({"jobs": rows, "count": len(rows)}, args.json, _job_table(rows) if rows else "no jobs")
        return EXIT_OK
    run_id = args.run_id
    if args.action == "show":
        info = runner.show(run_id)
        info["summary"] = (info.get("result") or {}).get("summary")
        info["units"] = units_for(info["summary"] or {})
        brief = {k: info[k] for k in ("run_id", "kind", "label", "preset", "seed", "state", "progress", "eta_s",
                                      "step", "message", "started", "ended", "attempts", "checkpoints", "config",
                                      "summary", "units", "path")}
        _emit(info, args.json, json.dumps(jsonable(brief), indent=2, ensure_ascii=False))
    elif args.action == "cancel":
        state = runner.cancel(run_id)
        _emit({"run_id": run_id, "action": "cancel", "state": state}, args.json, f"{run_id}: {state}")
    elif args.action == "resume":
        try:
            runner.resume(run_id)
        except ValueError as exc:  # not in a resumable state: nothing was changed
            raise UsageError(str(exc)) from exc
        state = runner.status(run_id).get("state")
        _emit({"run_id": run_id, "action": "resume", "state": state}, args.json,
              f"{run_id}: resumed ({state}); follow with: emalab jobs show {run_id}")
    elif args.action == "logs":
        text = runner.logs(run_id, tail=args.tail)
        _emit({"run_id": run_id, "log": text, "tail": args.tail}, args.json, text)
    return EXIT_OK


JOB_COLUMNS = ("RUN ID", "KIND", "PRESET", "SEED", "STATE", "PROGRESS", "AGE", "SETTINGS", "NOTE")
_RIGHT = {"SEED", "PROGRESS"}


def _job_table(rows: list[dict]) -> str:
    """`jobs list` in words: a header, then one aligned line per job (a damaged run's row too).

    SETTINGS are those that differ from the preset (the runner's label); NOTE is the job's message
    where it says more than its state.
    """
    def cells(r: dict) -> list[str]:
        progress = r.get("progress")
        note = r.get("message")
        return [str(r.get("run_id") or "?"), str(r.get("kind") or "-"),
                "-" if r.get("preset") is None else str(r["preset"]),
                "-" if r.get("seed") is None else str(r["seed"]), str(r.get("state") or "?"),
                f"{100 * float(progress):.1f}%" if isinstance(progress, (int, float)) else "-",
                format_duration(r.get("age_s")) or "-", r.get("settings") or "-",
                one_line(note, "escape") if note and note not in (r.get("state"), "done") else ""]

    table = [list(JOB_COLUMNS)] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(JOB_COLUMNS))]
    return "\n".join(
        "  ".join(cell.rjust(w) if name in _RIGHT else cell.ljust(w)
                  for name, cell, w in zip(JOB_COLUMNS, line, widths)).rstrip()
        for line in table)


def _known(run_id: str) -> None:
    try:
        ok = RunDir.for_id(run_id).exists()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:  # a name the file system cannot hold (too long, a NUL byte)
        raise UsageError(f"run id {run_id!r} is not a usable name: {exc.strerror or exc}") from exc
    if not ok:
        raise UsageError(f"no run with id {run_id!r} (see: emalab jobs list)")


# --- export ---------------------------------------------------------------------------------------


def cmd_export(args) -> int:
    store = _store()
    ex = store.export

    # Everything is checked before the store is brought up to date: a bad argument leaves no store
    # file, no export folder and no export behind.
    if args.table not in ex.EXPORT_TABLES:
        raise UsageError(f"--table must be one of {', '.join(ex.EXPORT_TABLES)}, got {args.table!r}")
    if args.format not in ex.FORMATS:
        raise UsageError(f"--format must be one of {', '.join(ex.FORMATS)}, got {args.format!r}")
    if args.grouped and args.table not in store.GROUPABLE:
        raise UsageError(f"--grouped: table {args.table!r} cannot be grouped across seeds; "
                         f"groupable: {', '.join(store.GROUPABLE)}")
    if args.runs is not None and args.table == "bench_figures":
        raise UsageError("--runs: table 'bench_figures' is not per run; leave --runs out")
    for run_id in args.runs or ():
        _known(run_id)
    stem = args.table + ("-grouped" if args.grouped else "")
    try:
        ex.export_path(args.out, args.format, stem)
    except ValueError as exc:
        raise UsageError(f"--out: {exc}") from exc
    except OSError as exc:
        raise UsageError(f"--out: {args.out!r} is not a usable file name: {exc.strerror or exc}") from exc

    report = store.ingest()
    for err in report.get("errors") or ():
        _warn(f"run {err.get('run_id')}: {err.get('error')}")
    try:
        path, rows = ex.write_export(args.table, args.format, run_ids=args.runs or None, grouped=args.grouped,
                                     out=args.out)
    except ValueError as exc:  # the target changed under us (a link swapped in): nothing written
        raise UsageError(f"--out: {exc}") from exc
    # An empty table is still written (a header, and "empty: no rows" in Markdown and LaTeX), and said:
    # on stdout after the path, or with --json in the object and on stderr.
    if not rows and args.json:
        _warn(f"{args.table}: {ex.EMPTY}")
    _emit({"table": args.table, "format": args.format, "grouped": args.grouped, "runs": args.runs or None,
           "path": str(path), "rows": rows, "empty": not rows, "size_bytes": path.stat().st_size}, args.json,
          f"{path} ({ex.EMPTY})" if not rows else str(path))
    return EXIT_OK


# --- store ----------------------------------------------------------------------------------------


def cmd_store(args) -> int:
    store = _store()

    if args.action == "migrate":
        report = store.migrate_store()
        report["ok"] = True
        text = (f"{report['path']}: schema {report['schema_version']}"
                + (f"; applied {', '.join(report['applied'])}" if report["applied"] else "; up to date"))
        _emit(report, args.json, text)
        return EXIT_OK
    report = store.check()
    if report.get("error") and not args.json:
        # Not a report on a store but a store that cannot be used: one line, as every command says it.
        print(f"emalab: {one_line(report['error'], 'escape')}", file=sys.stderr)
        return EXIT_FAILED
    if not report["exists"]:
        text = f"{report['path']}: no store yet (it is created by the first ingest, or by: emalab store migrate)"
    else:
        text = "\n".join([f"{report['path']}: schema {report['schema_version']} "
                          f"(code {report['code_schema_version']}), {report.get('size_bytes', 0)} bytes",
                          *(f"  {t}: {n} rows" for t, n in report["tables"].items()),
                          *(f"  problem: {p}" for p in report["problems"]),
                          "ok" if report["ok"] else "NOT ok"])
    _emit(report, args.json, text)
    return EXIT_OK if report["ok"] else EXIT_FAILED


# --- bench ----------------------------------------------------------------------------------------

BENCHES = {"scan": ("bench.scan", "scan"), "dilution-page": ("bench.dilution_page", "dilution_page")}
# Settings, verdicts and constants rather than measurements.
_NOT_FIGURES = {"machine", "shapes", "targets", "quick", "seconds", "cpus", "load_average_1m", "meets_target",
                "target_ms", "bytes_per_output"}


def cmd_bench(args) -> int:
    if args.quick and args.name != "scan":
        raise UsageError(f"--quick applies to bench scan only; {args.name} has a single size")
    if args.T is not None and args.name != "scan":
        raise UsageError("--T applies to bench scan only")
    if args.T is not None and args.T < 2:
        raise UsageError(f"--T must be at least 2, got {args.T}")
    module_name, bench = BENCHES[args.name]
    argv = ["--json"] + (["--quick"] if args.quick else []) + (["--T", str(args.T)] if args.T else [])
    # The benchmark prints its JSON on stdout; caught here so that stdout carries exactly one
    # object (the report and what was recorded), and any stray output goes to stderr.
    buf = io.StringIO()
    module = importlib.import_module(module_name)  # only the benchmark asked for: each imports its own tools
    with contextlib.redirect_stdout(buf):
        rc = module.main(argv) or 0
    report, stray = _last_json_object(buf.getvalue())
    if stray.strip():
        sys.stderr.write(stray if stray.endswith("\n") else stray + "\n")
    if rc or report is None:
        print(f"emalab: bench {args.name} failed (exit status {rc or 'ok, but no report'})", file=sys.stderr)
        return EXIT_FAILED
    report["bench"] = bench
    report["recorded_figures"] = _record(bench, report, args)
    if args.json:
        _emit(report, True)
    elif args.name == "scan":
        module.print_table(report)
    else:
        print("\n".join(f"{k}: {v}" for k, v in report.items() if k not in ("bench", "recorded_figures")))
    return EXIT_OK


def _last_json_object(text: str) -> tuple[dict | None, str]:
    """(the last JSON object that ends the text, everything before it)."""
    decoder = json.JSONDecoder()
    starts = [i for i, c in enumerate(text) if c == "{" and (i == 0 or text[i - 1] == "\n")]
    for i in reversed(starts):
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(obj, dict) and not text[end:].strip():
            return obj, text[:i]
    return None, text


def _figures(obj: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in obj.items():
        if not prefix and key in _NOT_FIGURES:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_figures(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def _record(bench: str, report: dict, args) -> int:
    # The store's bench_figures table (and its export) shows the newest figure of every key with
    # the machine and the command: a benchmark run from here is recorded there.
    store = _store()
    machine = report.get("machine") if isinstance(report.get("machine"), dict) else {}
    for key in ("cpus", "load_average_1m"):
        if key in report:
            machine = {**machine, key: report[key]}
    command = " ".join(["emalab", "bench", args.name] + (["--quick"] if args.quick else [])
                       + (["--T", str(args.T)] if args.T else []))
    try:
        return store.record_bench(bench, _figures(report), machine=machine or None, command=command)
    except (store.StoreError, StorageError) as exc:  # the figures are still printed
        _warn(f"the figures could not be recorded in the store: {exc}")
        return 0


# --- learning rates -------------------------------------------------------------------------------

# The studies that choose learning rates on dev, each with its tables (ema_core.learning_rates): what
# `auto` reads.
RATED = tuple(name for name, study in STUDIES.items() if study.learning_rates)


def cmd_learning_rates(args) -> int:
    tables = {name: STUDIES[name].rate_tables() for name in ([args.study] if args.study else RATED)}
    report = {"studies": {name: [dataclasses.asdict(t) for t in ts] for name, ts in tables.items()}}
    lines = []
    for name, ts in tables.items():
        for t in ts:
            binds = "every setting it records" if t.binding is None else ", ".join(t.binding)
            lines += [f"{name} / {t.name}: a rate per {' × '.join(t.cell)}, {len(t.rates)} rates, chosen on dev at "
                      f"{t.budget}", f"  read by auto where a config shares: {binds}"
                      + (f" (and no unrecorded {', '.join(t.unrecorded)} setting)" if t.unrecorded else ""),
                      f"  a cell without a rate: {'refused' if t.missing == 'refuse' else 'chosen on dev in the cell'}",
                      f"  chosen by: {t.source}",
                      *(f"  {key}: {rate:g}" for key, rate in t.rates.items())]
    _emit(report, args.json, "\n".join(lines))
    return EXIT_OK


# --- entry point --------------------------------------------------------------------------------


def _export_help(table: argparse.Action, fmt: argparse.Action) -> None:
    """`emalab export --help`'s lists, from the store's registries (every table a study registers)."""
    ex = _store().export  # only when this help is printed

    table.help = "one of: " + "; ".join(f"{name} ({t.description})" for name, t in ex.EXPORT_TABLES.items())
    fmt.help = "one of: " + "; ".join(f"{name}: {f.label}" for name, f in ex.FORMATS.items())


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="emalab", description="EMA Lab: experiments, jobs, exports, the store and benchmarks.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    run = sub.add_parser("run", help="run an experiment (in the foreground with a progress bar, or --background)")
    # A kind's older name (a command written before a rename, as docs/benchmarks.md records some) runs
    # today's kind; the help lists today's names only.
    run.add_argument("kind", type=current_kind, choices=sorted(REGISTRY))
    run.add_argument("--preset", help="a named set of settings ("
                     + "; ".join(f"{k}: {', '.join(REGISTRY[k].presets)}" for k in sorted(REGISTRY)) + ")")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="one setting by its path, e.g. --set train.lr=3e-3 --set alphas=0.5,0.1 (repeatable; "
                          "a setting's own name will do where no other has it: --set lr=3e-3)")
    run.add_argument("--seed", type=int)
    run.add_argument("--background", action="store_true", help="start the job and return at once")
    run.add_argument("--slots", type=int, default=2, help="jobs that may run at once (default 2)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--ray", metavar="ADDRESS", help="run it on a Ray cluster (HEAD:PORT; the 'cluster' extra): "
                                                      "a boundary map spreads its cells over the cluster's workers")
    run.set_defaults(fn=cmd_run)

    jobs = sub.add_parser("jobs", help="list, show, cancel, resume and read the logs of jobs")
    jobs.add_argument("action", choices=["list", "show", "cancel", "resume", "logs"])
    jobs.add_argument("run_id", nargs="?")
    jobs.add_argument("--tail", type=int, default=200, help="log lines to show (0: all)")
    jobs.add_argument("--slots", type=int, default=2, help="jobs that may run at once (default 2)")
    jobs.add_argument("--json", action="store_true", help="print one JSON object")
    jobs.set_defaults(fn=cmd_jobs)

    exp = sub.add_parser("export", help="export a result table from the store (emalab export --help: the tables and "
                                        "formats)")
    table = exp.add_argument("--table", required=True, metavar="NAME")
    fmt = exp.add_argument("--format", required=True, metavar="FORMAT")
    exp.late_help = lambda: _export_help(table, fmt)
    exp.add_argument("--runs", nargs="*", metavar="RUN_ID", help="only these runs (default: all)")
    exp.add_argument("--grouped", action="store_true", help="equal configs across seeds as mean ± std")
    exp.add_argument("--out", help="file name inside $EMALAB_HOME/exports (default: TABLE.EXT)")
    exp.add_argument("--json", action="store_true", help="print one JSON object")
    exp.set_defaults(fn=cmd_export)

    store = sub.add_parser("store", help="migrate or check the store")
    store.add_argument("action", choices=["migrate", "check"])
    store.add_argument("--json", action="store_true", help="print one JSON object")
    store.set_defaults(fn=cmd_store)

    bench = sub.add_parser("bench", help="run a benchmark and record its figures in the store")
    bench.add_argument("name", choices=sorted(BENCHES))
    bench.add_argument("--quick", action="store_true", help="scan: a shorter stream, fewer repeats")
    bench.add_argument("--T", type=int, default=None, help=argparse.SUPPRESS)  # tiny scans for tests
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.set_defaults(fn=cmd_bench)

    rates = sub.add_parser("learning-rates", help="the learning rates chosen on dev that train.lr=auto reads, per study")
    rates.add_argument("--study", choices=RATED, help="one study's tables (default: every study's)")
    rates.add_argument("--json", action="store_true", help="print one JSON object")
    rates.set_defaults(fn=cmd_learning_rates)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "slots", 1) < 1:
            raise UsageError(f"--slots must be at least 1, got {args.slots}")
        return args.fn(args)
    except UsageError as exc:
        print(f"emalab: error: {one_line(exc, 'escape')}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`emalab jobs list | head`): stop quietly, and keep Python's exit-time
        # flush of stdout from raising a second time.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        # Busy, newer, foreign or damaged store, full or read-only folder, a damaged run file.  The
        # store's module (and pandas behind it) is looked up rather than imported: commands that
        # never open the store start faster, and a StoreError can only come from a command that imported it.
        store_db = sys.modules.get("store.db")
        known = (StorageError, DamagedRunError) + ((store_db.StoreError,) if store_db is not None else ())
        if not isinstance(exc, known):
            raise
        print(f"emalab: {one_line(exc, 'escape')}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("emalab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # --help: argparse printed it and asks to exit; a caller gets a code
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)


if __name__ == "__main__":
    sys.exit(main())
