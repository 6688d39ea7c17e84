"""A finished run folder as a job leaves it (config, events, result, status "done"), for the fixtures."""
from __future__ import annotations

import os
from pathlib import Path

from ema_core.rundir import RunDir, run_id_for


def write_finished_run(home: Path, kind: str, cfg: dict, seed: int, events: list[tuple[int, dict]],
                       result: dict) -> str:
    """Write the run folder of a ``kind`` run that ran ``cfg`` at ``seed`` to ``result``; its run id."""
    rd = RunDir.for_id(run_id_for(kind, cfg, int(seed)), home)
    rd.create(kind, cfg, int(seed))
    # this live process's pid, as a worker writes its own: a runner watching the same home would
    # otherwise take a "running" folder without a live worker for crashed (tests/lm_fixture.py)
    rd.write_status(state="running", started="2026-01-01T00:00:00+00:00", progress=0.0, pid=os.getpid())
    rd.append_events([{"seq": i, "step": step, "metrics": m} for i, (step, m) in enumerate(events)])
    rd.write_result(result)
    rd.write_status(state="done", ended="2026-01-01T00:01:00+00:00", progress=1.0)
    return rd.run_id
