"""The local runner: jobs as detached worker processes, a fixed number of slots, state in run folders.

Everything the runner knows lives in ``$EMALAB_HOME/runs/<run_id>/`` (see :mod:`ema_core.rundir`), so
any number of runners (the app, a CLI, a restarted app) see the same jobs, and a job outlives the
process that launched it.

    runner = LocalRunner(slots=2)
    run_id = runner.submit("dilution", {"steps": 500}, seed=0, preset="quick")
    runner.wait(run_id, timeout=60)       # → "done"
    runner.list()                          # [{"run_id", "kind", "label", "state", "progress", "eta_s", "run_s", ...}]
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel

from ema_core.config import flatten, short_names
from ema_core.experiments import build_config, get_experiment
from ema_core.rundir import (
    FINAL_STATES,
    RESUMABLE_STATES,
    DamagedRunError,
    RunDir,
    atomic_write,
    current_kind,
    emalab_home,
    iter_run_dirs,
    now_iso,
    pid_alive,
)

ROOT = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()


def validated_config(kind: str, config: BaseModel | dict | None = None, seed: int | None = None,
                     preset: str | None = None) -> BaseModel:
    """The config a job will run: a model of the kind's class, or preset + overrides; ValueError otherwise."""
    exp = get_experiment(kind)
    if isinstance(config, exp.config_cls) and seed in (None, getattr(config, "seed", None)):
        return config  # built (and validated) where it was typed: not checked again before the worker
    if isinstance(config, BaseModel):
        # By name, not isinstance: Streamlit re-imports edited modules while a cached runner keeps
        # the old classes, and the config is rebuilt from its fields below.
        if type(config).__name__ != exp.config_cls.__name__:
            raise ValueError(f"a {kind} job needs a {exp.config_cls.__name__}, got {type(config).__name__}")
        return build_config(kind, overrides=config.model_dump(), seed=seed)
    return build_config(kind, preset=preset, overrides=config or {}, seed=seed)


@functools.lru_cache(maxsize=64)
def _reference_config(kind: str, preset: str | None) -> dict | None:
    # Every run of a kind is compared with one of a few references: built once, not per row and refresh.
    try:
        return build_config(kind, preset=preset).model_dump(mode="json")
    except Exception:  # noqa: BLE001 - a kind or preset the code no longer has: the caller falls back
        return None


def _shown_value(value: Any) -> str:
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    text = str(value)
    return text if len(text) <= 40 else "…" + text[-39:]  # a path's tail is its telling part


def job_label(kind: str, config: dict, preset: str | None) -> dict[str, Any]:
    """What tells a job apart: its kind, its preset, the kind's identity settings (always named, see
    ``Experiment.identity``) and the settings that differ from that preset.

    Returns ``{"label": "lm tiny · model=gpt, corpus=austen", "settings": "model=gpt, corpus=austen",
    "changes": {path: value}}``, settings in the config's own order by their dotted paths
    (``data.corpus``), shown by their own names where no other setting has that name, the seed left
    out (it is shown on its own).  A run without a recorded preset, or with one the code no longer has, is compared
    with the kind's defaults.
    """
    reference = flatten((_reference_config(kind, preset) if preset is not None else None)
                        or _reference_config(kind, None) or {})
    try:
        identity = get_experiment(kind).identity
    except ValueError:  # a kind the code no longer has
        identity = ()
    flat = flatten(config or {})
    order = {name: i for i, name in enumerate(reference)}
    changed = [(name, value) for name, value in flat.items()
               if name != "seed" and (name in identity or name not in reference or reference[name] != value)]
    # The kind's identity settings first, in their declared order; then the others, in the config's.
    rank = {name: i - len(identity) for i, name in enumerate(identity)}
    changes = dict(sorted(changed, key=lambda item: (rank.get(item[0], order.get(item[0], len(order))), item[0])))
    shown = short_names(list(flat))
    settings = ", ".join(f"{shown.get(name, name)}={_shown_value(value)}" for name, value in changes.items())
    label = f"{kind} {preset if preset is not None else '(no preset)'}" + (f" · {settings}" if settings else "")
    return {"label": label, "settings": settings, "changes": changes}


def age_s(iso: str | None, now: datetime | None = None) -> float | None:
    """Seconds since an ISO time stamp of a run folder, or None when it cannot be read."""
    try:
        then = datetime.fromisoformat(str(iso))
    except (TypeError, ValueError):
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    return max(0.0, ((now or datetime.now(timezone.utc)) - then).total_seconds())


def run_time_s(started: str | None, ended: str | None) -> float | None:
    """Seconds from a run's start to its end (its last attempt's: a resumed run starts again), or None
    while either is unknown (a run still going, a folder from before either was written)."""
    try:
        end = datetime.fromisoformat(str(ended))
    except (TypeError, ValueError):
        return None
    return age_s(started, end if end.tzinfo is not None else end.replace(tzinfo=timezone.utc))


def eta_text(eta_s: float | None, settled: bool) -> str:
    """``about 3 min left`` once the worker sees a steady pace, ``roughly 3 min left`` while the pace still
    changes (jobs.worker's estimator); "" when there is no estimate yet."""
    if eta_s is None:
        return ""
    return f"{'about' if settled else 'roughly'} {format_duration(eta_s)} left"


def format_duration(seconds: float | None) -> str:
    """``45 s``, ``3 min 20 s``, ``25 min``, ``2 h 5 min``, ``3 d 4 h``: an age or an ETA, for people."""
    if seconds is None:
        return ""
    s = int(round(max(0.0, float(seconds))))
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 10:
        return f"{m} min {s} s" if s else f"{m} min"
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def job_summary(rd: RunDir, status: dict | None = None) -> dict[str, Any]:
    """One row of a job list: what a page or the CLI shows."""
    record = rd.read_config()
    st = rd.read_status() if status is None else status
    # Runs made before config.json recorded the preset noted it in their first status, if anywhere.
    preset = record["preset"] if "preset" in record else st.get("preset")
    return {
        **job_label(record["kind"], record.get("config") or {}, preset),
        "run_id": rd.run_id,
        "kind": record["kind"],
        "seed": record["seed"],
        "config": record.get("config"),
        "created": record.get("created"),
        "age_s": age_s(record.get("created")),
        "state": st.get("state", "queued"),
        "progress": float(st.get("progress") or 0.0),
        "eta_s": st.get("eta_s"),
        "eta_settled": bool(st.get("eta_settled")),  # False: the pace is still changing (jobs.worker)
        "step": st.get("step"),
        "latest": st.get("latest") or {},
        "message": st.get("message"),
        "started": st.get("started"),
        "ended": st.get("ended"),
        "run_s": run_time_s(st.get("started"), st.get("ended")),
        "heartbeat": st.get("heartbeat"),
        "backend": st.get("backend"),
        "attempts": st.get("attempts", 0),
        "preset": preset,
    }


def existing_run(kind: str, config: BaseModel | dict | None = None, seed: int | None = None,
                 preset: str | None = None, home: Path | None = None) -> tuple[str, str | None]:
    """The run id these settings map to, and that run's state (None when they never ran).

    Run ids are derived from the config and seed, so a launch can tell beforehand that it would
    run nothing new: a done run is reused as it is (see :meth:`Runner.submit`).
    """
    kind = current_kind(kind)
    cfg = validated_config(kind, config, seed, preset).model_dump(mode="json")
    rd = RunDir.for_settings(kind, cfg, int(cfg["seed"]), home)
    return rd.run_id, (rd.read_status().get("state", "queued") if rd.exists() else None)


def seed_span(config: dict) -> int:
    """How many seeds one run covers: its ``seeds`` setting where the kind has one (the boundary map
    runs seed, seed + 1, … in one run), else 1."""
    span = config.get("seeds", 1)
    return span if isinstance(span, int) and span >= 1 else 1


def next_free_seed(runs: Iterable[tuple[str, BaseModel | dict]], home: Path | None = None) -> int:
    """The smallest seed above every seed of ``runs`` (kind, config) whose run would share no seed with
    a run of theirs: none at that seed yet, and, for a run covering n seeds, none within n − 1 of it
    (a 3-seed run at 0 covers 0–2, so the next is 3, and one at 4 would overlap a run at 3 to 5)."""
    configs = [(current_kind(kind), validated_config(kind, config).model_dump(mode="json")) for kind, config in runs]
    if not configs:
        raise ValueError("next_free_seed needs at least one (kind, config)")
    seed = max(int(cfg["seed"]) + seed_span(cfg) for _, cfg in configs)

    def taken(s: int) -> bool:
        return any(RunDir.for_settings(kind, {**cfg, "seed": t}, t, home).exists()
                   for kind, cfg in configs for t in range(max(s - seed_span(cfg) + 1, 0), s + seed_span(cfg)))

    while taken(seed):
        seed += 1
    return seed


# The keys of job_summary's rows: a damaged run's row has them all, unknown ones None.
_ROW_KEYS = ("label", "settings", "changes", "run_id", "kind", "seed", "config", "created", "age_s", "state",
             "progress", "eta_s", "eta_settled", "step", "latest", "message", "started", "ended", "run_s",
             "heartbeat", "backend", "attempts", "preset")


def damaged_row(rd: RunDir, problem: DamagedRunError | str) -> dict[str, Any]:
    """The list row of a run whose config.json cannot be read: state "damaged", the problem as message.

    It stands in the list so that one bad folder neither hides the other runs nor itself.
    """
    return {**dict.fromkeys(_ROW_KEYS), "run_id": rd.run_id, "state": "damaged", "message": str(problem)}


def read_log(rd: RunDir, tail: int = 200) -> str:
    try:
        with open(rd.log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256 * 1024))  # the tail of a long log, not all of it
            text = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    lines = text.splitlines()
    return "\n".join(lines[-tail:] if tail else lines)


class Runner:
    """What every backend shares: submit, list, status, logs, wait and resume over run folders.

    A backend supplies ``start`` (launch a queued run), ``tick`` (housekeeping), ``cancel`` and
    ``_refresh`` (a run's status with a dead worker marked crashed).
    """

    backend = "none"

    def __init__(self, home: str | Path | None = None, grace_s: float = 10.0):
        self.home = Path(home) if home is not None else emalab_home()
        self.grace_s = float(grace_s)
        self._lock = threading.RLock()

    # -- to be supplied --------------------------------------------------------------------------
    def start(self, run_id: str) -> bool:
        raise NotImplementedError

    def tick(self) -> list[str]:
        return []

    def _drop_queued(self, run_id: str) -> bool:
        """Withdraw a queued run that nothing has started yet; False if a worker may be starting it."""
        raise NotImplementedError

    def _force_stop(self, rd: RunDir) -> None:
        """Stop a worker that ignored the cancel flag for ``grace_s``."""
        raise NotImplementedError

    def _refresh(self, rd: RunDir) -> dict:
        return rd.read_status()

    def close(self) -> None:
        pass

    # -- shared ------------------------------------------------------------------------------------
    def cancel(self, run_id: str, wait: bool = True) -> str:
        """Ask the run to stop at its next step (it checkpoints first); returns its state.

        A queued run nobody started is cancelled at once.  With ``wait``, a worker that has not
        stopped within ``grace_s`` is stopped by force (it resumes from its newest periodic
        checkpoint); without, the backend's :meth:`tick` escalates later where it can.
        """
        rd = self._existing(run_id)
        with self._lock:
            state = self._refresh(rd).get("state")
            if state in FINAL_STATES:
                return state
            rd.request_cancel()
            if state == "queued" and self._drop_queued(run_id):
                rd.write_status(state="cancelled", ended=now_iso(), message="cancelled before it started")
                return "cancelled"
        if not wait:
            return state
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            self.tick_quietly()
            state = self._refresh(rd).get("state")
            if state in FINAL_STATES:
                return state
            time.sleep(0.05)
        self._force_stop(rd)
        if rd.read_status().get("state") in ("running", "queued"):
            rd.write_status(state="cancelled", ended=now_iso(), eta_s=None,
                            message="stopped by the runner: the worker ignored the cancel request")
        return self._refresh(rd).get("state")

    def tick_quietly(self) -> None:
        """Housekeeping while waiting (reaping exited workers); nothing by default."""

    def submit(self, kind: str, config: BaseModel | dict | None = None, seed: int | None = None,
               preset: str | None = None) -> str:
        """Validate, create the run folder and start it (or queue it); returns the run id.

        The id is derived from (kind, config, seed): the same job submitted twice is the same run.
        A finished or running one is left alone; a failed, cancelled or crashed one is resumed.
        """
        kind = current_kind(kind)
        cfg = validated_config(kind, config, seed, preset)
        config_json = cfg.model_dump(mode="json")
        seed = int(config_json["seed"])
        rd = RunDir.for_settings(kind, config_json, seed, self.home)
        run_id = rd.run_id
        fresh = not rd.exists()
        rd.create(kind, config_json, seed, preset=preset)
        if fresh:
            rd.write_status(queued_at=now_iso(), attempts=0)
        state = self._refresh(rd).get("state")
        if state in RESUMABLE_STATES:
            self.resume(run_id)
        elif state == "queued":
            self.start(run_id)
        return run_id

    def poll(self) -> list[str]:
        """Housekeeping a page calls now and then: start queued runs, mark dead ones."""
        return self.tick()

    def list(self) -> list[dict[str, Any]]:
        """Every run, newest first, with dead workers marked crashed."""
        with self._lock:
            rows = []
            for rd in iter_run_dirs(self.home):
                try:
                    rows.append(job_summary(rd, self._refresh(rd)))
                except DamagedRunError as exc:
                    rows.append(damaged_row(rd, exc))
        return sorted(rows, key=lambda r: str(r["created"] or ""), reverse=True)

    def status(self, run_id: str) -> dict[str, Any]:
        rd = self._existing(run_id)
        return job_summary(rd, self._refresh(rd))

    def show(self, run_id: str) -> dict[str, Any]:
        """Everything about one run: its list row, config, checkpoints and result."""
        rd = self._existing(run_id)
        record = rd.read_config()
        return {**job_summary(rd, self._refresh(rd)), "config": record["config"],
                "code_version": record.get("code_version"), "host": record.get("host"),
                "checkpoints": [step for step, _ in rd.checkpoints()], "result": rd.read_result(),
                "path": str(rd.path)}

    def logs(self, run_id: str, tail: int = 200) -> str:
        return read_log(self._existing(run_id), tail)

    def result(self, run_id: str) -> dict | None:
        return self._existing(run_id).read_result()

    def wait(self, run_id: str, timeout: float | None = None, interval: float = 0.1) -> str:
        """Block until the run reaches a final state (starting queued runs meanwhile); returns it."""
        rd = self._existing(run_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.tick()
            state = self._refresh(rd).get("state")
            if state in FINAL_STATES:
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} still {state} after {timeout:g} s")
            time.sleep(interval)

    def resume(self, run_id: str) -> str:
        """Queue a failed, cancelled or crashed run again; it continues from its newest checkpoint."""
        rd = self._existing(run_id)
        with self._lock:
            state = self._refresh(rd).get("state")
            if state not in RESUMABLE_STATES:
                raise ValueError(f"run {run_id} is {state}; only {', '.join(RESUMABLE_STATES)} runs can be resumed")
            rd.clear_cancel()
            rd.write_status(state="queued", queued_at=now_iso(), ended=None, eta_s=None, pid=None,
                            message="resume requested")
        self.start(run_id)
        return run_id

    def _rd(self, run_id: str) -> RunDir:
        return RunDir.for_id(run_id, self.home)

    def _existing(self, run_id: str) -> RunDir:
        rd = self._rd(run_id)
        if not rd.exists():
            raise ValueError(f"no run {run_id!r} in {rd.path.parent}")
        return rd


class LocalRunner(Runner):
    """Jobs as detached ``python -m jobs.worker RUN_ID`` processes, at most ``slots`` at a time."""

    backend = "local"

    def __init__(self, home: str | Path | None = None, slots: int = 2, grace_s: float = 10.0):
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        super().__init__(home, grace_s)
        self.slots = int(slots)
        self._procs: dict[str, subprocess.Popen] = {}
        self._queued_at: dict[str, str | None] = {}  # the queueing each spawned worker was started for
        self._scheduler: threading.Thread | None = None
        self._closed = threading.Event()

    # -- starting --------------------------------------------------------------------------------
    def start(self, run_id: str) -> bool:
        """Start a queued run now if a slot is free (True), else leave it queued for :meth:`tick`."""
        rd = self._existing(run_id)
        state = self._refresh(rd).get("state")
        if state != "queued":
            raise ValueError(f"run {run_id} is {state}, not queued" + ("; use resume" if state in RESUMABLE_STATES else ""))
        started = run_id in self.tick()
        if not started:
            self._ensure_scheduler()
        return started or self._proc_alive(run_id)

    def tick(self) -> list[str]:
        """Reap finished workers, escalate overdue cancels, start queued runs while slots are free."""
        with self._lock:
            self._reap()
            running, queued = set(), []
            for rd in iter_run_dirs(self.home):
                st = self._refresh(rd)
                state = st.get("state")
                mine = st.get("backend") == self.backend and st.get("host", HOST) == HOST
                if state == "running" and mine and self._local_alive(st):
                    running.add(rd.run_id)
                    self._escalate_cancel(rd, st)
                elif state == "queued":
                    if self._proc_alive(rd.run_id) or self._spawned_elsewhere(rd, st):
                        running.add(rd.run_id)  # spawned, not yet marked running by its worker
                    elif rd.cancel_requested():
                        rd.write_status(state="cancelled", ended=now_iso(), message="cancelled before it started")
                    else:
                        queued.append((st.get("queued_at") or st.get("updated") or "", rd))
            started = []
            for _, rd in sorted(queued, key=lambda item: item[0])[: max(0, self.slots - len(running))]:
                self._spawn(rd)
                started.append(rd.run_id)
            return started

    def _spawn(self, rd: RunDir) -> None:
        env = dict(os.environ)
        env["EMALAB_HOME"] = str(self.home)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        # Workers share cores with each other and the app: OpenMP threads that spin while they wait
        # (libgomp's default) starve the other slots (measured: 10x slower with two numba workers).
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        with open(rd.log_path, "ab") as log:
            # Its own session: the worker survives the app's restart (and a Ctrl-C in its terminal).
            self._procs[rd.run_id] = subprocess.Popen(
                [sys.executable, "-m", "jobs.worker", rd.run_id], cwd=ROOT, env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._queued_at[rd.run_id] = queued_at = rd.read_status().get("queued_at")
        atomic_write(rd.spawn_path, json.dumps({"pid": self._procs[rd.run_id].pid, "host": HOST,
                                                "queued_at": queued_at}))

    @staticmethod
    def _spawned_elsewhere(rd: RunDir, st: dict) -> bool:
        """A worker another process started for this very queueing is still alive (it may be importing).

        Without this, every short-lived runner (each ``emalab jobs`` command, each app rerun) saw the
        run still queued while its worker imported torch, and started one more.
        """
        try:
            rec = json.loads(rd.spawn_path.read_text())
        except (OSError, ValueError):
            return False
        return (isinstance(rec, dict) and rec.get("host") == HOST and rec.get("queued_at") == st.get("queued_at")
                and pid_alive(rec.get("pid")))

    def _reap(self) -> None:
        for run_id, proc in list(self._procs.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del self._procs[run_id]
            queued_at = self._queued_at.pop(run_id, None)
            rd = self._rd(run_id)
            st = rd.read_status()
            # A worker that died before it could say so itself (an import error, a kill) - unless
            # the run was queued again since (a resume after this worker's crash).
            if rc != 0 and st.get("state") == "queued" and st.get("queued_at") == queued_at:
                rd.write_status(state="failed", ended=now_iso(), message=f"worker exited with code {rc} before it started; see the log")

    def _ensure_scheduler(self) -> None:
        # Queued runs start when slots free up while this process lives, without anyone polling.
        with self._lock:
            if self._scheduler is not None and self._scheduler.is_alive():
                return
            self._scheduler = threading.Thread(target=self._schedule, name="emalab-scheduler", daemon=True)
            self._scheduler.start()

    def _schedule(self) -> None:
        while not self._closed.wait(0.5):
            with contextlib.suppress(Exception):
                self.tick()
                if not any(self._refresh(rd).get("state") in ("queued", "running") for rd in iter_run_dirs(self.home)):
                    return

    def close(self) -> None:
        """Stop the scheduler thread (running workers go on: they are detached)."""
        self._closed.set()
        if self._scheduler is not None:
            self._scheduler.join(timeout=5)

    # -- cancel (the protocol is Runner.cancel) -------------------------------------------------
    def _drop_queued(self, run_id: str) -> bool:
        return not self._proc_alive(run_id)

    def tick_quietly(self) -> None:
        self._reap()

    def _force_stop(self, rd: RunDir) -> None:
        self._kill(rd, rd.read_status())

    def _escalate_cancel(self, rd: RunDir, st: dict) -> None:
        try:
            asked = rd.cancel_path.stat().st_mtime
        except FileNotFoundError:
            return
        if time.time() - asked > self.grace_s:
            self._kill(rd, st)

    def _kill(self, rd: RunDir, st: dict) -> None:
        pid = st.get("pid") or getattr(self._procs.get(rd.run_id), "pid", None)
        if pid and st.get("host", HOST) == HOST and st.get("backend", self.backend) == self.backend:
            for sig, patience in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)  # the worker leads its own session: its group is just it
                end = time.monotonic() + patience
                while time.monotonic() < end and pid_alive(pid):
                    self._reap()
                    time.sleep(0.05)
                if not pid_alive(pid):
                    break
        self._reap()
        if rd.read_status().get("state") in ("running", "queued"):
            rd.write_status(state="cancelled", ended=now_iso(), eta_s=None,
                            message="stopped by the runner: the worker ignored the cancel request")

    def _proc_alive(self, run_id: str) -> bool:
        proc = self._procs.get(run_id)
        return proc is not None and proc.poll() is None

    @staticmethod
    def _local_alive(st: dict) -> bool:
        return st.get("host", HOST) != HOST or pid_alive(st.get("pid"))

    def _refresh(self, rd: RunDir) -> dict:
        """The run's status, with a worker that died while "running" marked crashed."""
        st = rd.read_status()
        if st.get("state") != "running" or self._local_alive(st):
            return st
        # The worker writes its final state before it exits: re-read, in case it just did.
        st = rd.read_status()
        if st.get("state") == "running" and not self._local_alive(st):
            st = rd.write_status(state="crashed", ended=now_iso(), eta_s=None,
                                 message=f"worker process died (pid {st.get('pid')})")
        return st
