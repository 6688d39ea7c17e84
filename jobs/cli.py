"""`emalab`: run experiments, manage jobs, export tables, look after the store, run benchmarks.

Every command takes ``--json`` and then prints exactly one JSON object on stdout.  Bad arguments
or config values print one line naming the field and what is allowed, exit with status 2, and
write nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, NoReturn, Sequence

EXIT_USAGE = 2
EXIT_FAILED = 1


class UsageError(Exception):
    """A bad argument or config value: one line, exit 2, nothing written."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + message
        raise UsageError(message)


def _parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def _emit(obj: Any, as_json: bool, text: str | None = None) -> None:
    if as_json:
        print(json.dumps(obj, sort_keys=True, default=str))
    elif text is not None:
        print(text)


# --- run ------------------------------------------------------------------------------------------


def cmd_run(args) -> int:
    from jobs.registry import build_config
    from jobs.runner import LocalRunner

    try:
        config = build_config(args.kind, preset=args.preset, overrides=_parse_sets(args.set), seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    runner = LocalRunner(slots=args.slots)
    run_id = runner.submit(args.kind, config, preset=args.preset)
    if args.background:
        st = runner.status(run_id)
        _emit({"run_id": run_id, "kind": args.kind, "state": st.get("state"), "background": True}, args.json,
              f"{run_id} {st.get('state')} (follow with: emalab jobs show {run_id})")
        return 0
    state = _follow(runner, run_id, quiet=args.json)
    return _finish_run(runner, run_id, state, args)


def _follow(runner, run_id: str, quiet: bool) -> str:
    """Wait for the job with a progress bar on stderr; Ctrl-C cancels it."""
    from tqdm import tqdm

    bar = tqdm(total=1000, desc=run_id, unit="‰", disable=quiet, file=sys.stderr, leave=False)
    try:
        while True:
            runner.tick()
            st = runner.status(run_id)
            bar.n = int(1000 * float(st.get("progress") or 0.0))
            bar.set_postfix_str(st.get("message") or st.get("state", ""), refresh=False)
            bar.refresh()
            if st.get("state") in ("done", "failed", "cancelled", "crashed"):
                return st["state"]
            time.sleep(0.2)
    except KeyboardInterrupt:
        runner.cancel(run_id)
        return "cancelled"
    finally:
        bar.close()


def _finish_run(runner, run_id: str, state: str, args) -> int:
    from jobs.rundir import RunDir
    from store import ingest

    ingest(run_ids=[run_id])
    rd = RunDir.for_id(run_id)
    status, config = rd.read_status(), rd.read_config()
    result = rd.read_result() or {}
    out = {
        "run_id": run_id, "kind": config["kind"], "seed": config["seed"], "state": state,
        "preset": args.preset, "config": config["config"], "summary": result.get("summary", {}),
        "message": status.get("message"),
    }
    out.update(result.get("summary", {}))
    text = f"{run_id}: {state}" + (f" — {status.get('message')}" if status.get("message") else "")
    if result.get("summary"):
        text += "\n" + "\n".join(f"  {k}: {v}" for k, v in result["summary"].items())
    _emit(out, args.json, text)
    return 0 if state == "done" else EXIT_FAILED


# --- jobs -----------------------------------------------------------------------------------------


def cmd_jobs(args) -> int:
    from jobs.runner import LocalRunner

    runner = LocalRunner(slots=args.slots)
    if args.action == "list":
        rows = runner.list()
        lines = [f"{r['run_id']:<40} {r['state']:<10} {100 * float(r.get('progress') or 0):5.1f}%" for r in rows]
        _emit({"jobs": rows}, args.json, "\n".join(lines) or "no jobs")
        return 0
    if not args.run_id:
        raise UsageError(f"jobs {args.action} needs a run id")
    _known(args.run_id)
    if args.action == "show":
        from jobs.rundir import RunDir

        rd = RunDir.for_id(args.run_id)
        info = {"run_id": args.run_id, "job": runner.status(args.run_id), "config": rd.read_config(),
                "summary": (rd.read_result() or {}).get("summary")}
        _emit(info, args.json, json.dumps(info, indent=2, default=str))
    elif args.action == "cancel":
        runner.cancel(args.run_id)
        _emit({"run_id": args.run_id, "state": runner.status(args.run_id).get("state")}, args.json, f"{args.run_id}: cancel requested")
    elif args.action == "resume":
        try:
            runner.resume(args.run_id)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        _emit({"run_id": args.run_id, "state": runner.status(args.run_id).get("state")}, args.json, f"{args.run_id}: resumed")
    elif args.action == "logs":
        text = runner.logs(args.run_id, tail=args.tail)
        _emit({"run_id": args.run_id, "log": text}, args.json, text)
    return 0


def _known(run_id: str) -> None:
    from jobs.rundir import RunDir

    try:
        ok = RunDir.for_id(run_id).exists()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if not ok:
        raise UsageError(f"no run with id {run_id!r} (see: emalab jobs list)")


# --- export, store, bench -----------------------------------------------------------------------


def cmd_export(args) -> int:
    from store import EXPORT_TABLES, export_table, ingest

    if args.table not in EXPORT_TABLES:
        raise UsageError(f"--table must be one of {', '.join(sorted(EXPORT_TABLES))}, got {args.table!r}")
    for run_id in args.runs or ():
        _known(run_id)
    ingest()
    try:
        path = export_table(args.table, args.format, run_ids=args.runs or None, grouped=args.grouped, out=args.out)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    _emit({"table": args.table, "format": args.format, "path": str(path)}, args.json, str(path))
    return 0


def cmd_store(args) -> int:
    from store import check, migrate_store

    report = migrate_store() if args.action == "migrate" else check()
    _emit(report, args.json, json.dumps(report, indent=2, default=str))
    return 0


def cmd_bench(args) -> int:
    import importlib

    module = {"scan": "bench.scan", "dilution-page": "bench.dilution_page"}[args.name]
    argv = (["--quick"] if args.quick else []) + (["--json"] if args.json else [])
    return importlib.import_module(module).main(argv) or 0


# --- entry point --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from jobs.registry import REGISTRY

    p = _Parser(prog="emalab", description="EMA Lab: experiments, jobs, exports and the store.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run an experiment (foreground with a progress bar, or --background)")
    run.add_argument("kind", choices=sorted(REGISTRY))
    run.add_argument("--preset")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--seed", type=int)
    run.add_argument("--background", action="store_true")
    run.add_argument("--slots", type=int, default=2)
    run.add_argument("--json", action="store_true")
    run.set_defaults(fn=cmd_run)

    jobs = sub.add_parser("jobs", help="list, show, cancel, resume and read the logs of jobs")
    jobs.add_argument("action", choices=["list", "show", "cancel", "resume", "logs"])
    jobs.add_argument("run_id", nargs="?")
    jobs.add_argument("--tail", type=int, default=200)
    jobs.add_argument("--slots", type=int, default=2)
    jobs.add_argument("--json", action="store_true")
    jobs.set_defaults(fn=cmd_jobs)

    exp = sub.add_parser("export", help="export a result table as CSV, LaTeX (booktabs) or Markdown")
    exp.add_argument("--table", required=True)
    exp.add_argument("--format", required=True, choices=["csv", "latex", "markdown"])
    exp.add_argument("--runs", nargs="*")
    exp.add_argument("--grouped", action="store_true", help="equal configs across seeds as mean ± std")
    exp.add_argument("--out")
    exp.add_argument("--json", action="store_true")
    exp.set_defaults(fn=cmd_export)

    store = sub.add_parser("store", help="migrate or check the store")
    store.add_argument("action", choices=["migrate", "check"])
    store.add_argument("--json", action="store_true")
    store.set_defaults(fn=cmd_store)

    bench = sub.add_parser("bench", help="run a benchmark")
    bench.add_argument("name", choices=["scan", "dilution-page"])
    bench.add_argument("--quick", action="store_true")
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(fn=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from jobs.rundir import StorageError
    from store import StoreError

    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "slots", 1) < 1:
            raise UsageError(f"--slots must be at least 1, got {args.slots}")
        return args.fn(args)
    except UsageError as exc:
        print(f"emalab: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StorageError, StoreError) as exc:  # busy, newer or foreign store, full/read-only folder
        print(f"emalab: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
