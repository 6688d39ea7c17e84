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

import os
import sys
from datetime import datetime
from pathlib import Path

from ema_core.messages import error_line
from ema_core.rundir import RunDir, now_iso
from jobs.ray_cells import import_ray
from jobs.runner import ROOT, Runner
from jobs.worker import run_job

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _stay_on_loopback() -> None:
    # On Linux, Ray rewrites a loopback address to the machine's outward IP before connecting, and a
    # head started on loopback only (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head
    # --node-ip-address 127.0.0.1`) does not listen there.  Ray's switch for "single machine, stay on
    # loopback" is that variable, read once when ray is imported: set it first, or after the fact.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"].lower() in ("1", "true")


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
        ray = import_ray()
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
            import_ray().cancel(ref)  # still in Ray's queue: drop it (a task already starting sees the flag)
        return True

    def _force_stop(self, rd: RunDir) -> None:
        ref, _ = self._refs.pop(rd.run_id, (None, None))
        if ref is not None:
            import_ray().cancel(ref, force=True)  # kills the worker process; it resumes from its newest checkpoint

    def close(self) -> None:
        """Disconnect from the cluster; tasks already running go on there."""
        ray = import_ray()
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
            ray = import_ray()
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
