"""Jobs as Ray tasks: the same worker function as the local runner, scheduled by a Ray cluster.

Needs the ``cluster`` extra.  The run folders must be visible to every node at the same path
(one machine, or a shared file system), since workers write nothing but their run folder and the
runner reads nothing else.

    runner = RayRunner("127.0.0.1:6379")   # a cluster started with `ray start --head ...`
    run_id = runner.submit("dilution", preset="quick", seed=0)
    runner.wait(run_id, timeout=120)

Ray schedules tasks itself (one CPU each), so there are no local slots: a submitted run stays
"queued" until Ray starts it.  A worker killed on a node is not retried by Ray (``max_retries=0``):
it shows up as crashed, like a local one, and resumes from its checkpoint when asked.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import Future
from datetime import datetime
from pathlib import Path

from ema_core.messages import error_line
from ema_core.rundir import RunDir, now_iso
from jobs.runner import ROOT, Runner
from jobs.worker import run_job

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _ray():
    try:
        import ray  # the optional 'cluster' extra: only the Ray runner needs it, and may find it missing
    except ImportError as exc:
        raise ImportError("the Ray backend needs the 'cluster' extra: pip install -e '.[cluster]'") from exc
    return ray


def _stay_on_loopback() -> None:
    # On Linux, Ray rewrites a loopback address to the machine's outward IP before connecting, and a
    # head started on loopback only (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head
    # --node-ip-address 127.0.0.1`) does not listen there.  Ray's switch for "single machine, stay on
    # loopback" is that variable, read once when ray is imported: set it first, or after the fact.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"].lower() in ("1", "true")


def _on_ray(fn, *args):
    """A unit of a run, on whichever cluster worker Ray chose: its outcome, and where it ran."""
    ray = _ray()
    return ray.get_runtime_context().get_node_id(), os.getpid(), fn(*args)


class RayCellPool:
    """A run's independent units (the boundary map's cells) as Ray tasks of one CPU each, placed by
    Ray over the whole cluster, not in processes of the node the run itself landed on.

    The pool :func:`ema_core.experiments.cells.run_parallel` expects (see ``LocalCellPool``
    there): ``submit`` returns a :class:`concurrent.futures.Future` of the unit's outcome; ``stop``
    cancels every unit not yet finished (a running one's process is killed; it trains again on
    resume) and ends its future with None; ``shutdown`` writes one line to the run's log saying
    where the units ran.  Every unit is submitted at once and Ray runs as many as the cluster has
    CPUs for (the run's own task keeps one while it waits): ``workers`` is what the caller asked,
    not a cap here.  A unit that raises fails the run with its error, as a local one does."""

    def __init__(self, workers: int, log=lambda line: None):
        ray = _ray()
        self.workers = workers
        self._log = log
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_on_ray)
        self._lock = threading.Lock()
        self._live: dict[object, Future] = {}  # unfinished: Ray's ref → the future handed out
        self._where: set[tuple[str, int]] = set()  # (node, pid) of every unit that finished
        self._done = 0
        self._closed = False

    def submit(self, fn, *args) -> Future:
        ref = self._remote.remote(fn, *args)
        mine: Future = Future()
        mine.set_running_or_notify_cancel()  # in Ray's hands now: only stop() takes it back
        with self._lock:
            self._live[ref] = mine
        ref.future().add_done_callback(lambda f, ref=ref: self._finish(ref, f))
        return mine

    def _finish(self, ref, ray_future) -> None:
        with self._lock:
            mine = self._live.pop(ref, None)
            if mine is None:  # stopped first: its future already said None
                return
            try:
                node, pid, outcome = ray_future.result()
            except BaseException as exc:  # noqa: BLE001 - the unit's error becomes the caller's
                mine.set_exception(exc)
                return
            self._where.add((node, pid))
            self._done += 1
        mine.set_result(outcome)

    def stop(self) -> None:
        ray = _ray()
        with self._lock:
            live, self._live = self._live, {}
        for ref, mine in live.items():
            with contextlib.suppress(Exception):  # it may have ended meanwhile
                ray.cancel(ref, force=True)
            mine.set_result(None)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:  # noqa: ARG002
        if cancel_futures:
            self.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            nodes = len({node for node, _ in self._where})
            self._log(f"{self._done} cells on Ray: {len(self._where)} worker processes on {nodes} "
                      f"node{'s' if nodes != 1 else ''}")


class RayRunner(Runner):
    """The local runner's interface over a Ray cluster joined with ``ray.init(address=...)``."""

    backend = "ray"

    def __init__(self, address: str, home: str | Path | None = None, grace_s: float = 10.0,
                 stale_s: float = 60.0, runtime_env: dict | None = None, num_cpus: float = 1):
        super().__init__(home, grace_s)
        host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
        extra = {}
        if host in LOOPBACK:
            _stay_on_loopback()
            extra["_node_ip_address"] = "127.0.0.1"  # the head's raylet registered itself on loopback
        ray = _ray()
        self.address = address
        self.stale_s = float(stale_s)
        if runtime_env is None:
            # Same machine or shared checkout: workers import this code and write to this data folder.
            runtime_env = {"env_vars": {"PYTHONPATH": str(ROOT), "EMALAB_HOME": str(self.home),
                                        "OMP_WAIT_POLICY": "PASSIVE"}}  # as for local workers
        ray.init(address=address, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env=runtime_env, **extra)
        self._task = ray.remote(num_cpus=num_cpus, max_retries=0)(run_job)
        self._refs: dict[str, tuple[object, str | None]] = {}  # run id → (task, the queueing it serves)

    def start(self, run_id: str) -> bool:
        rd = self._existing(run_id)
        state = self._refresh(rd).get("state")
        if state != "queued":
            raise ValueError(f"run {run_id} is {state}, not queued")
        queued_at = self._refs.get(run_id, (None, None))[1]
        if run_id not in self._refs or queued_at != rd.read_status().get("queued_at"):
            ref = self._task.remote(run_id, str(self.home), self.backend)
            self._refs[run_id] = (ref, rd.read_status().get("queued_at"))
        return True

    def tick(self) -> list[str]:
        with self._lock:
            for run_id in list(self._refs):
                self._refresh(self._rd(run_id))
        return []

    # -- cancel (the protocol is Runner.cancel) -------------------------------------------------
    def _drop_queued(self, run_id: str) -> bool:
        ref, _ = self._refs.pop(run_id, (None, None))
        if ref is not None:
            _ray().cancel(ref)  # still in Ray's queue: drop it (a task already starting sees the flag)
        return True

    def _force_stop(self, rd: RunDir) -> None:
        ref, _ = self._refs.pop(rd.run_id, (None, None))
        if ref is not None:
            _ray().cancel(ref, force=True)  # kills the worker process; it resumes from its newest checkpoint

    def close(self) -> None:
        """Disconnect from the cluster; tasks already running go on there."""
        ray = _ray()
        if ray.is_initialized():
            ray.shutdown()

    def _refresh(self, rd: RunDir) -> dict:
        """The run's status; a task that ended without a final state, or went silent, is marked."""
        st = rd.read_status()
        state = st.get("state")
        if state not in ("queued", "running"):
            return st
        ref, queued_at = self._refs.get(rd.run_id, (None, None))
        if ref is not None:
            ray = _ray()
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                return st
            self._refs.pop(rd.run_id, None)
            st = rd.read_status()  # the task writes its final state before it returns: re-read
            # (a task of an earlier attempt says nothing about a run queued again since)
            if st.get("state") in ("queued", "running") and st.get("queued_at") == queued_at:
                try:
                    ray.get(ref)
                    why = "the task returned without a final state"
                except Exception as exc:  # noqa: BLE001 - Ray wraps every way a task can die
                    why = error_line(exc, "last")  # Ray's message ends with the cause, after the remote traceback
                never_ran = st.get("state") == "queued"
                st = rd.write_status(state="failed" if never_ran else "crashed", ended=now_iso(), eta_s=None,
                                     message=f"Ray task {'failed before it started' if never_ran else 'died'}: {why}")
            return st
        if state == "running" and st.get("backend") == self.backend and self._silent_for(st) > self.stale_s:
            # Not ours to watch (submitted by another driver): the heartbeat is all there is.
            st = rd.write_status(state="crashed", ended=now_iso(), eta_s=None,
                                 message=f"worker silent for over {self.stale_s:g} s (no heartbeat)")
        return st

    @staticmethod
    def _silent_for(st: dict) -> float:
        try:
            beat = datetime.fromisoformat(st.get("heartbeat") or st.get("updated"))
        except (TypeError, ValueError):
            return 0.0
        return (datetime.now(beat.tzinfo) - beat).total_seconds()
