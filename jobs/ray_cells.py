"""A run's independent units (the boundary map's cells) as Ray tasks: the pool a worker offers its
experiment when the run came from Ray (``jobs.worker``), and the one import of ``ray`` both it and
the Ray runner (``jobs.ray_backend``) go through.

Apart from the runner so that the arrow points one way: the runner schedules the worker's
``run_job`` as a Ray task, and the worker needs only this pool, never the runner.  ``ray`` itself is
imported when a pool or a runner is made (it may be missing).
"""
from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future


def import_ray():
    """The ``ray`` package, or an ImportError that says which extra installs it."""
    try:
        import ray  # the optional 'cluster' extra: only a Ray runner or pool needs it, and may find it missing
    except ImportError as exc:
        raise ImportError("the Ray backend needs the 'cluster' extra: pip install -e '.[cluster]'") from exc
    return ray


def _on_ray(fn, *args):
    """A unit of a run, on whichever cluster worker Ray chose: its outcome, and where it ran."""
    ray = import_ray()
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
        ray = import_ray()
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
        ray = import_ray()
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
