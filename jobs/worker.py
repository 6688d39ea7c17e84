"""The one worker function, run by both backends: a spawned process (local) or a Ray task.

``run_job(run_id)`` reads the run folder's config, runs the experiment with a reporter that
writes to the same folder (status, events, checkpoints, log), and leaves the final state there:
done (with result.json), cancelled or failed (resumable from the newest checkpoint).  It never
opens the store.

    python -m jobs.worker RUN_ID      # what the local runner spawns; output goes to log.txt
"""
from __future__ import annotations

import bisect
import contextlib
import fcntl
import math
import os
import re
import signal
import socket
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path

from pydantic import ValidationError

from ema_core.config import config_error
from ema_core.messages import error_line
from ema_core.protocol import Cancelled
from ema_core.rundir import RunDir, now_iso
from jobs.ray_cells import RayCellPool

# The experiments (torch, sklearn, ...) are imported only once this worker holds the run's lock:
# a spare worker, started while the first was still importing, then exits in a fraction of a second.
# What is imported above is light on purpose (no torch): keep it so.

STATUS_INTERVAL_S = 0.2  # a fast loop reports every step; the status file is rewritten at most this often
HEARTBEAT_S = 5.0  # liveness for runners that cannot see the worker's pid (Ray on another node)
# The ETA: the first samples of an attempt and the first tenth of its remaining work are warm-up
# (imports, data preparation, caches, the first slow steps) and say little about the pace.  From
# there the pace is measured over the latter half of the progress made since the warm-up ended (at
# least two spans of it, where a few coarse steps would make it jumpy), so that it follows a pace
# that changes (a slower phase, a neighbour on the machine) without forgetting all it measured; an
# estimate is given from the first sample at which the progress since the warm-up spans
# ``ETA_SPAN``, and at every sample after.  It is *settled* while the finish times projected over
# the last span of progress agree, and rough while they do not.
#
# It used to be withheld until they agreed, and a run whose progress comes in coarse, uneven steps
# could go most of its length without one: the boundary map reports a step per cell, its cells differ
# in length (the longest are handed out first, so its pace in cells quickens as it goes) and finish
# in bunches of `workers`, and a shared machine's load moves every cell's time.  One quick map went
# 44 minutes (82 %) with no ETA, and others showed one only between samples that happened to agree.
# The stretch is measured in progress, not in samples: a fast loop reports many times a second, and
# estimates a second apart always agree.
ETA_WARMUP_SAMPLES = 5
ETA_WARMUP_FRACTION = 0.1
ETA_SPAN = 0.05  # of the whole run
ETA_TOLERANCE = 0.1  # of the projected duration, measured from the end of the warm-up


class EtaEstimator:
    """Seconds left, from measured progress after the warm-up; None until the pace is measured.

    Fed ``(seconds since the attempt began, fraction done)`` samples, it knows no clock, so a test
    can replay any sequence.  The pace is the progress made over the latter half of the progress
    since the warm-up ended (at least twice ``span``) over the time it took, and the ETA is that
    pace applied to the work left, given from the first sample at which the progress since the
    warm-up spans ``span``.  ``settled`` says whether the finish times projected over the last
    ``span`` of progress lie within ``tolerance`` of the projected duration of each other (the pace
    holds); while they do not, the ETA is a rough one.
    """

    def __init__(self, warmup_samples: int = ETA_WARMUP_SAMPLES, warmup_fraction: float = ETA_WARMUP_FRACTION,
                 span: float = ETA_SPAN, tolerance: float = ETA_TOLERANCE):
        self.warmup_samples = warmup_samples
        self.warmup_fraction = warmup_fraction
        self.span = span
        self.tolerance = tolerance
        self.samples = 0
        self.first: tuple[float, float] | None = None
        self.origin: tuple[float, float] | None = None  # where the warm-up ended
        # (fraction, seconds) where progress first reached each further tenth of a span since the
        # origin: where the pace's window begins (at most 10 / span of them, 200 for the whole run).
        self.reached: list[tuple[float, float]] = []
        self.recent: deque[tuple[float, float]] = deque()  # (fraction, projected finish), about 10 per span
        self.eta: float | None = None
        self.settled = False

    def update(self, t: float, fraction: float) -> float | None:
        self.samples += 1
        if self.first is None:
            self.first = (t, fraction)
        if self.origin is None:
            t_first, f_first = self.first
            if self.samples > self.warmup_samples and fraction - f_first >= self.warmup_fraction * (1.0 - f_first):
                self.origin = (t, fraction)
                self.reached.append((fraction, t))
            return None
        t0, f0 = self.origin
        if fraction <= f0 or t <= t0:
            return self.eta  # nothing measurable since the origin: the last estimate, if any, stands
        if fraction - self.reached[-1][0] >= self.span / 10:
            self.reached.append((fraction, t))
        # The window's start: the last point reached at or before half-way from the origin, or two spans
        # back where that is further (the origin itself, early on).
        i = bisect.bisect_right(self.reached, (fraction - max(2 * self.span, (fraction - f0) / 2), math.inf)) - 1
        f_w, t_w = self.reached[max(i, 0)]
        if fraction <= f_w or t <= t_w:
            return self.eta
        eta = (t - t_w) / (fraction - f_w) * (1.0 - fraction)
        finish = t + eta
        if not self.recent or fraction - self.recent[-1][0] >= self.span / 10:
            self.recent.append((fraction, finish))
        while len(self.recent) > 1 and self.recent[1][0] <= fraction - self.span:
            self.recent.popleft()  # the oldest kept projection is the last one at or before the span's start
        if fraction - f0 < self.span:
            return None
        finishes = [x for _, x in self.recent] + [finish]
        self.settled = max(finishes) - min(finishes) <= self.tolerance * (statistics.median(finishes) - t0)
        self.eta = eta
        return eta


def estimate_eta(samples) -> float | None:
    """The ETA after a whole sequence of ``(seconds, fraction)`` samples (see :class:`EtaEstimator`)."""
    estimator = EtaEstimator()
    for t, fraction in samples:
        estimator.update(float(t), float(fraction))
    return estimator.eta


def phase_of(message: str) -> str:
    """What a progress message says about the phase: ``PHASE: detail`` names it; otherwise the
    message with its numbers blanked (``step 10/300 · loss 4.2`` is one phase, not one per step)."""
    head, sep, _ = message.partition(": ")
    return head if sep else re.sub(r"\d[\d,.]*", "#", message)


class RunDirReporter:
    """The experiment's :class:`~ema_core.experiments.Reporter`, backed by a run folder."""

    def __init__(self, rd: RunDir, min_interval: float = STATUS_INTERVAL_S):
        self.rd = rd
        self.min_interval = min_interval
        _seal_events(rd)
        self.seq = rd.next_seq()  # a resumed run continues the sequence: ingest stays idempotent
        self.lock = threading.Lock()  # status.json is read-modify-write; the heartbeat thread writes too
        self.pending: list[dict] = []
        self.latest: dict[str, float] = dict(rd.read_status().get("latest") or {})  # kept across a resume
        self.step: int | None = None
        self.fraction = 0.0
        self.message: str | None = None
        self.t0 = time.monotonic()
        self.eta_estimator = EtaEstimator()  # per attempt: a resumed run measures its pace anew
        self.phase: str | None = None
        self.last_write = 0.0

    # -- Reporter ----------------------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, float]) -> None:
        metrics = {str(k): float(v) for k, v in metrics.items()}
        self.pending.append({"seq": self.seq, "step": int(step), "time": now_iso(), "metrics": metrics})
        self.seq += 1
        self.latest.update(metrics)
        self.step = int(step)
        self._maybe_flush()

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.fraction = min(max(float(fraction), 0.0), 1.0)
        if message is not None:
            self.message = message
            phase = phase_of(message)
            if phase != self.phase:
                self.phase = phase
                _append_log(self.rd, f"[{now_iso()}] {100 * self.fraction:5.1f}% {message}")
        self._maybe_flush()

    def should_stop(self) -> bool:
        return self.rd.cancel_requested()

    def save_checkpoint(self, step: int, state: dict) -> None:
        # Events up to the checkpoint go out first: after a crash the resumed run re-logs exactly
        # the steps after its checkpoint, so none is lost (some may appear twice, with new seqs).
        self.flush()
        self.rd.save_checkpoint(step, state)
        _append_log(self.rd, f"[{now_iso()}] {100 * self.fraction:5.1f}% checkpoint at step {step}")

    def load_checkpoint(self) -> tuple[int, dict] | None:
        passed_over: list[str] = []
        found = self.rd.latest_checkpoint(passed_over)
        if found is not None and passed_over:
            note = " ".join(f"resuming from checkpoint step {found[0]}, the newest that loads; passed over: "
                            f"{'; '.join(passed_over)}".split())  # torch's reasons may span lines
            _append_log(self.rd, f"[{now_iso()}] {note}")
            # Goes out with the next flush, ahead of the resumed attempt's metrics.
            self.pending.append({"seq": self.seq, "step": int(found[0]), "time": now_iso(), "metrics": {},
                                 "message": note})
            self.seq += 1
        return found

    def save_artifact(self, name: str, data: bytes) -> None:
        self.rd.save_artifact(name, data)

    # -- writing -----------------------------------------------------------------------------------
    def _maybe_flush(self) -> None:
        if time.monotonic() - self.last_write >= self.min_interval:
            self.flush()

    def flush(self, **extra) -> None:
        events, self.pending = self.pending, []
        self.rd.append_events(events)
        self.eta_estimator.update(time.monotonic() - self.t0, self.fraction)
        fields = {"progress": self.fraction, "eta_s": self.eta(), "eta_settled": self.eta_estimator.settled,
                  "step": self.step, "latest": dict(self.latest), "message": self.message}
        self.write_status(**{**fields, **extra})

    def write_status(self, **fields) -> None:
        with self.lock:
            self.rd.write_status(heartbeat=now_iso(), **fields)
            self.last_write = time.monotonic()

    def eta(self) -> float | None:
        return self.eta_estimator.eta


def _seal_events(rd: RunDir) -> None:
    # A worker killed mid-append can leave an unterminated last line.  Readers skip it, but the next
    # append would glue the first new event onto it and lose that too: end the fragment first.
    try:
        with open(rd.events_path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            cut = fh.read(1) != b"\n"
    except OSError:  # no file yet, or an empty one
        return
    if cut:
        with open(rd.events_path, "ab") as fh:
            fh.write(b"\n")


def _heartbeat(reporter: RunDirReporter, stop: threading.Event) -> None:
    # A long phase without progress calls (building the stream) still shows the worker alive.
    while not stop.wait(HEARTBEAT_S):
        with contextlib.suppress(Exception):
            if time.monotonic() - reporter.last_write >= HEARTBEAT_S:
                reporter.write_status()


def _append_log(rd: RunDir, text: str) -> None:
    # Written by the worker itself, so a Ray task's traceback lands in the run folder too.
    with contextlib.suppress(OSError), open(rd.log_path, "a", encoding="utf-8") as fh:
        fh.write(text if text.endswith("\n") else text + "\n")


@contextlib.contextmanager
def _exclusive(rd: RunDir):
    """Hold the run's worker lock, or yield False when another live worker holds it.

    Two runners (the app and a CLI) may start the same queued run at the same moment; the lock
    lets exactly one worker through.  The kernel drops it when the process dies, even by kill -9.
    """
    rd.path.mkdir(parents=True, exist_ok=True)
    fh = open(rd.path / "worker.lock", "a")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        fh.close()


def run_job(run_id: str, home: str | Path | None = None, backend: str = "local") -> str:
    """Run (or resume) one job to its end; returns the final state written to status.json."""
    rd = RunDir.for_id(run_id, Path(home) if home is not None else None)
    if not rd.exists():
        raise FileNotFoundError(f"no run folder for {run_id}")
    with _exclusive(rd) as mine:
        if not mine:
            return rd.read_status().get("state", "running")
        status = rd.read_status()
        if status.get("state") != "queued":
            # Only a queued run starts (submit and resume queue it).  A spare worker that got the
            # lock after the real one finished must not run a done run again, nor restart a
            # cancelled one before anyone asked for a resume.
            return status.get("state", "queued")
        return _run_locked(rd, backend, int(status.get("attempts", 0)) + 1)


def _run_locked(rd: RunDir, backend: str, attempt: int) -> str:
    from ema_core.experiments import get_experiment  # torch and the rest (1.2 s+): see the note at the top

    record = rd.read_config()
    reporter = RunDirReporter(rd)
    if backend == "ray":
        # On a cluster, a run's independent units (the boundary map's cells) go to the cluster's
        # workers, not to processes beside this one on its node.
        reporter.cell_pool = lambda workers: RayCellPool(workers, log=lambda line: _append_log(rd, line))
    reporter.write_status(state="running", pid=os.getpid(), host=socket.gethostname(), backend=backend,
                          started=now_iso(), ended=None, eta_s=None, eta_settled=False, message="starting",
                          attempts=attempt)
    _append_log(rd, f"[{now_iso()}] {record['kind']} run {rd.run_id}: attempt {attempt} on {backend}, pid {os.getpid()}")
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(reporter, stop), daemon=True).start()
    try:
        exp = get_experiment(record["kind"])
        cfg = exp.config_cls.model_validate(record["config"])
        result = exp.run(cfg, reporter)
        rd.write_result(result)
        reporter.fraction, reporter.message = 1.0, "done"
        reporter.flush(state="done", ended=now_iso(), eta_s=0.0)
        state = "done"
    except Cancelled as exc:
        reporter.message = str(exc)
        reporter.flush(state="cancelled", ended=now_iso(), eta_s=None)
        state = "cancelled"
    except BaseException as exc:  # noqa: BLE001 - every failure must reach status.json
        with contextlib.suppress(Exception):
            reporter.flush()  # events logged before the failure are kept
        _append_log(rd, traceback.format_exc())
        reporter.write_status(state="failed", ended=now_iso(), eta_s=None, message=_failure(exc))
        if not isinstance(exc, Exception):
            raise  # KeyboardInterrupt, SystemExit: recorded, then let them end the process
        state = "failed"
    finally:
        stop.set()
    _append_log(rd, f"[{now_iso()}] {state}")
    return state


def _failure(exc: BaseException) -> str:
    """The failed run's status message: one line."""
    if isinstance(exc, ValidationError):  # a stored config the current code no longer accepts
        return f"invalid config: {config_error(exc)}"
    return error_line(exc)


def _terminate(signum, frame):  # noqa: ARG001
    # The runner's last resort after the cancel flag was ignored: end as cancelled, not failed.
    raise Cancelled(-1, "terminated by the runner after a cancel request")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jobs.worker RUN_ID", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    state = run_job(args[0])
    # Non-zero only for a failure: the runner takes a non-zero exit before "running" as a crash.
    return 1 if state == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
