"""A run's independent cells over worker processes: the machinery the boundary map and the depth
comparison share.

A study whose run is a grid of independent cells (each a pure function of its config, seed and
cell) hands them to :func:`run_parallel` with a module-level function that trains one cell.  The
cells go to ``workers`` spawned processes of this machine (:class:`LocalCellPool`), or to a
cluster's workers where the reporter offers a pool (``reporter.cell_pool``: a run started on Ray
spreads its cells there, :class:`jobs.ray_cells.RayCellPool`).  A cell's function polls
:func:`stop_requested` at every step: a cancel stops the running cells, whose outcome is then None
(trained again on resume), and a failing cell stops the others and keeps the finished ones.

Every cell runs on one torch thread (:func:`one_thread`), so a study's numbers depend neither on
``workers`` nor on the machine's cores.
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Annotated, Callable, Iterable, Literal

import torch
from pydantic import AfterValidator, Field

from ema_core.protocol import Cancelled, StoredConfig, check_checkpoint


def _device_present(v: str) -> str:
    # Refused with the config, before a run folder exists, rather than by the run a moment later.
    if v == "cuda" and not torch.cuda.is_available():
        raise ValueError("no CUDA device is visible on this machine; use auto or cpu")
    return v


# A grid study's ``device`` setting (``device: Device = "cpu"``), checked where its config is typed;
# where its cells then train is :func:`cell_device`.
Device = Annotated[Literal["cpu", "cuda", "auto"], AfterValidator(_device_present),
                   Field(description="cpu, cuda, or auto (CUDA when present)")]


def grid_axis(v: tuple) -> tuple:
    """An axis of a grid study's config (its mixers, depths, ...): at least one value, each once, so that
    no cell is trained twice.  The message names no setting and shows no value: config_error puts the
    setting's name before it and the value after it."""
    if not v:
        raise ValueError("none given; name at least one")
    repeated = [x for x in dict.fromkeys(v) if v.count(x) > 1]
    if repeated:
        raise ValueError(f"{', '.join(map(str, repeated))} given more than once; each may appear once")
    return v


def cell_device(setting: str) -> torch.device:
    """Where a cell trains for a ``device`` setting: CUDA for cuda or auto where one is visible, else the CPU."""
    return torch.device("cuda" if setting != "cpu" and torch.cuda.is_available() else "cpu")


@contextlib.contextmanager
def one_thread():
    """Every cell on one torch thread: a float sum split over threads is added in an order that
    depends on their number, and the results must not depend on ``workers`` or on the machine's cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_cells(cfg, grid: list, reporter, *, kind: str, fmt: int, t_start: float,
              report: Callable[[int, dict, int], None], serial: Callable[[list[int], Callable], bool],
              parallel: Callable[[list[int], Callable], bool]) -> tuple[dict[int, dict], float]:
    """A grid run from where its checkpoint left it: every cell of ``grid`` not done yet, by ``parallel``
    (``cfg.workers`` > 1 and more than one cell to do) or ``serial``, each called with the indices to do
    and the callback that takes a cell's outcome.  ``report(index, outcome, cells done)`` logs a cell as
    it ends; the cells done are checkpointed after each.  Returns (outcome by index, seconds spent over
    every attempt, from ``t_start`` in this one); a stop saves the cells done and raises
    :class:`ema_core.protocol.Cancelled` (the cells cut short start again on resume)."""
    done, before = restore_cells(reporter, kind, cfg, fmt)

    def elapsed() -> float:
        return before + time.perf_counter() - t_start

    def finished(i: int, outcome: dict) -> None:
        done[i] = outcome
        report(i, outcome, len(done))
        if len(done) < len(grid):
            save_cells(reporter, cfg, fmt, done, elapsed())

    todo = [i for i in range(len(grid)) if i not in done]
    if not (parallel if cfg.workers > 1 and len(todo) > 1 else serial)(todo, finished):
        save_cells(reporter, cfg, fmt, done, elapsed())
        raise Cancelled(len(done))
    reporter.progress(1.0, "done")
    return done, elapsed()


def restore_cells(reporter, kind: str, cfg, fmt: int) -> tuple[dict[int, dict], float]:
    """The cells done (by their index in the run's grid) and the seconds spent, from the run's
    checkpoint (none: nothing done); a checkpoint of another config or format is refused."""
    ckpt = reporter.load_checkpoint()
    if ckpt is None:
        return {}, 0.0
    _, state = ckpt
    check_checkpoint(state, what=f"{kind} checkpoint", fmt=fmt, keys=("done", "elapsed"),
                     expect={"config": StoredConfig(kind, cfg)})
    return {int(i): dict(outcome) for i, outcome in state["done"]}, float(state["elapsed"])


def save_cells(reporter, cfg, fmt: int, done: dict[int, dict], elapsed: float) -> None:
    """Checkpoint the cells done: a resume trains only the others."""
    reporter.save_checkpoint(len(done), {"format": fmt, "config": cfg.model_dump_json(),
                                         "done": sorted(done.items()), "elapsed": elapsed})


def run_serial(jobs: Iterable[tuple[int, tuple]], total: int, reporter, finished: Callable[[int, dict], None],
               run_one: Callable[..., dict | None], describe: Callable[[int], str]) -> bool:
    """The cells one after another in this process, on one thread: ``run_one(*args, should_stop=…)`` for
    every ``(index, args)``, ``finished(index, outcome)`` after each; False when a cell was cut short by a
    stop (its outcome None).  ``describe(index)`` names the cell in the progress line."""
    with one_thread():
        for i, args in jobs:
            reporter.progress(i / total, f"cell {i + 1}/{total}: {describe(i)}")
            outcome = run_one(*args, should_stop=reporter.should_stop)
            if outcome is None:
                return False
            finished(i, outcome)
    return True


def run_parallel(jobs: Iterable[tuple[int, tuple]], workers: int, reporter, finished: Callable[[int, dict], None],
                 work: Callable[..., dict | None]) -> bool:
    """Run ``work(*args)`` for every ``(index, args)`` of ``jobs``, in the order given, over ``workers``
    processes (or the reporter's cluster pool); ``finished(index, outcome)`` as each ends.  False when
    the reporter asked to stop first (the cells done are kept, the ones cut short are not reported).
    ``work`` must be a module-level function (it is pickled to the workers)."""
    jobs = list(jobs)
    workers = min(workers, len(jobs))
    cluster = getattr(reporter, "cell_pool", None)
    pool = cluster(workers) if cluster is not None else LocalCellPool(workers)
    futures = {pool.submit(work, *args): i for i, args in jobs}
    seen = set()  # the futures whose outcome was read (a row goes to ``finished`` once)

    def keep(fut) -> None:
        seen.add(fut)
        if (outcome := fut.result()) is not None:  # a cell's exception is the run's
            finished(futures[fut], outcome)

    try:
        pending = set(futures)
        while pending:
            ready, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in ready:
                keep(fut)
            if pending and reporter.should_stop():
                pool.stop()
                for fut in pending:
                    fut.cancel()
                for fut in pending:  # the running cells end at their next step, their outcome None
                    if not fut.cancelled():
                        keep(fut)
                return False
        return True
    except BaseException:
        # A cell failed (or the parent was interrupted): without this the pool's exit would train
        # every queued cell before the error surfaced, hours on a full map, and record none of them.
        # Queued cells are cancelled, running ones stop at their next step, finished ones are kept.
        pool.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        for fut in futures:
            if fut not in seen and not fut.cancelled() and fut.exception() is None:
                with contextlib.suppress(Exception):  # the cell's error is the one to raise
                    keep(fut)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class LocalCellPool:
    """The cells in processes of this machine.  What a pool does for :func:`run_parallel` (a
    cluster's, :class:`jobs.ray_cells.RayCellPool`, does the same): ``submit`` a cell, returning a
    :class:`concurrent.futures.Future` of its outcome; ``stop`` the running cells, whose futures then
    end with None (cut short: trained again on resume); ``shutdown``."""

    def __init__(self, workers: int):
        # Spawned, not forked: the parent may hold torch's thread pools (or a Ray worker's state),
        # which a forked child inherits half-initialised.
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()  # one shared event: each cell checks it at every step
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                         initargs=(self._stop, os.getpid()))

    def submit(self, fn, *args):
        return self._pool.submit(fn, *args)

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


_STOP = None
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def stop_requested() -> bool:
    """In a local pool's worker: whether the run asked its cells to stop (elsewhere: never; a
    cluster's cells are stopped by their pool instead)."""
    return _STOP is not None and _STOP.is_set()


def _worker_init(stop, parent: int) -> None:
    global _STOP
    _STOP = stop
    torch.set_num_threads(1)
    _die_with(parent)


def _die_with(parent: int) -> None:
    """End this worker when the process that started it ends, however it ends.  A parent killed with
    SIGKILL runs no clean-up: its pool's workers would go on training under PID 1, holding their
    memory, and a resume would start a new set beside them.  On Linux the kernel sends the worker
    SIGKILL when its parent dies (PR_SET_PDEATHSIG; the pool is started from the thread that calls
    ``run``, which outlives it); elsewhere a thread watches the parent.  A parent that died before
    this ran is seen by the check that follows.  multiprocessing's resource tracker ends by itself
    once the workers, the last holders of its pipe, are gone."""
    armed = False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)
