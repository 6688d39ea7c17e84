"""A finished run folder as a job leaves it (config, events, result, status "done"), for the fixtures.

``write_finished_run`` writes one from a result in hand, and ``write_and_ingest`` writes several and
ingests them; ``real_run`` trains one in this process, once per test run (tests/runcache.py), for the
study fixtures' tiny runs; ``run_in_process`` runs the job itself through the worker's own code
(``jobs.worker.run_job``) in this process, so a test that needs a real finished run, and not the
runner's worker process, starts none.
"""
from __future__ import annotations

import os
from pathlib import Path

from ema_core.experiments import NullReporter, build_config, get_experiment
from ema_core.rundir import RunDir, run_id_for
from jobs.runner import validated_config
from jobs.worker import run_job
from runcache import trained
from store import ingest

# What a fixture's run is: (config, events, result, artifacts), as a run folder holds them.
Run = tuple[dict, list[tuple[int, dict]], dict, dict]


def write_finished_run(home: Path, kind: str, cfg: dict, seed: int, events: list[tuple[int, dict]],
                       result: dict, artifacts: dict[str, bytes] | None = None,
                       started: str = "2026-01-01T00:00:00+00:00", ended: str = "2026-01-01T00:01:00+00:00") -> str:
    """Write the run folder of a ``kind`` run that ran ``cfg`` at ``seed`` to ``result`` (and kept
    ``artifacts``, as a real run keeps its tokenizer and model); its run id."""
    rd = RunDir.for_id(run_id_for(kind, cfg, int(seed)), home)
    rd.create(kind, cfg, int(seed))
    # this live process's pid, as a worker writes its own: a runner watching the same home (the app's,
    # in the browser tests) would otherwise take a "running" folder without a live worker for crashed,
    # and overwrite the "done" written next
    rd.write_status(state="running", started=started, progress=0.0, pid=os.getpid())
    rd.append_events([{"seq": i, "step": step, "metrics": m} for i, (step, m) in enumerate(events)])
    rd.write_result(result)
    for name, data in (artifacts or {}).items():
        rd.save_artifact(name, data)
    rd.write_status(state="done", ended=ended, progress=1.0)
    return rd.run_id


def run_in_process(home: Path, kind: str, config: dict | None = None, seed: int | None = None,
                   preset: str | None = None) -> str:
    """Run the job ``kind`` at ``config`` to its end in this process, as a worker would (its run folder,
    events, result, log and checkpoints), and return its run id; the run must end done."""
    cfg = validated_config(kind, config, seed, preset)  # what the runner's submit checks first
    config_json = cfg.model_dump(mode="json")
    rd = RunDir.for_id(run_id_for(kind, config_json, int(config_json["seed"])), Path(home))
    rd.create(kind, config_json, int(config_json["seed"]), preset=preset)
    assert run_job(rd.run_id, home) == "done", rd.log_path.read_text()
    return rd.run_id


def real_run(kind: str, settings: dict, seed: int, key: list, preset: str | None = None) -> Run:
    """The ``kind`` experiment run in this process at ``settings`` (on ``preset``) and first seed ``seed``:
    its config, events, result and artifacts.  Trained once per ``(kind, key)`` in a test run, and every
    caller gets its own copy."""
    def train() -> Run:
        cfg = build_config(kind, preset=preset, overrides=settings, seed=seed)
        reporter = NullReporter()
        result = get_experiment(kind).run(cfg, reporter)
        return cfg.model_dump(mode="json"), reporter.events, result, reporter.artifacts

    return trained(kind, key, train)


def write_and_ingest(home: Path, kind: str, runs: list[tuple[int, Run]], started: str | None = None) -> list[str]:
    """Write a finished run folder for each (seed, run) and ingest them all; their run ids, in order."""
    times = {} if started is None else {"started": started, "ended": started}
    run_ids = [write_finished_run(home, kind, cfg, seed, events, result, artifacts, **times)
               for seed, (cfg, events, result, artifacts) in runs]
    report = ingest(home, run_ids)
    assert report["errors"] == [], report["errors"]
    return run_ids
