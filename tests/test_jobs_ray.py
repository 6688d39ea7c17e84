"""The Ray backend against a real Ray head started on loopback, torn down by its process ids."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

try:
    import ray  # noqa: F401
except ImportError:
    pytest.skip("Ray is not installed: the Ray backend needs the 'cluster' extra (pip install -e '.[cluster]')",
                allow_module_level=True)

from ema_core.experiments import REGISTRY, NullReporter, build_config
from ema_core.studies.boundary.experiment import cells
from jobs.ray_backend import RayRunner
from ema_core.rundir import RunDir, wait_for

SHORT = dict(alphas="0.5,0.1", vocab=16, dim=16, max_lag=4, n_train=512, n_test=256, steps=40, batch=32,
             checkpoint_every=20, log_every=10)
LONG = {**SHORT, "steps": 1000, "checkpoint_every": 200, "log_every": 50}
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray's single-machine mode: every server on 127.0.0.1
# Liveness only: how long to wait for something that must happen (the head up, a run's end) before
# calling it stuck.  Ten times what a loaded 2-core machine needs; never a speed target.
PATIENCE = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _procs() -> dict[int, tuple[int, int]]:
    """pid → (ppid, pgid) of every process we can see."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                out[int(entry.name)] = (int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _ours(pgid: int) -> set[int]:
    # The head's daemons share the session `ray start` ran in; its workers start their own
    # process groups, so follow parent links from the daemons too.
    procs = _procs()
    found = {pid for pid, (_, g) in procs.items() if g == pgid}
    grew = True
    while grew:
        kids = {pid for pid, (ppid, _) in procs.items() if ppid in found} - found
        found |= kids
        grew = bool(kids)
    return found


def _stop(pgid: int) -> None:
    pids = _ours(pgid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if wait_for(lambda: not (_ours(pgid) | pids) & set(_procs()), 3, 0.1):  # the GCS ignores SIGTERM
            return
        pids = (_ours(pgid) | pids) & set(_procs())


@pytest.fixture(scope="module")
def ray_head():
    ray_bin = Path(sys.executable).with_name("ray")
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="emalab-ray-")  # short: Ray's socket paths live under it
    env = {**os.environ, **LOOPBACK_ONLY}
    # Three CPUs: a boundary run's own task holds one while its cells take the other two at once.
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "3",
         "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", temp],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = head.communicate(timeout=PATIENCE)
        assert head.returncode == 0, out
        yield f"127.0.0.1:{port}"
    finally:
        _stop(head.pid)  # `ray stop` would end every Ray process on the machine, not just ours
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def runner(ray_head, tmp_path, monkeypatch):
    for key, value in LOOPBACK_ONLY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    r = RayRunner(ray_head, home=tmp_path / "home", grace_s=PATIENCE)  # a cancel is never forced by the clock
    yield r
    r.close()


def test_a_job_runs_as_a_ray_task(runner, tmp_path):
    t0 = time.monotonic()
    run_id = runner.submit("dilution", SHORT, seed=1)
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    rd = RunDir.for_id(run_id, tmp_path / "home")
    status = rd.read_status()
    assert status["backend"] == "ray" and status["progress"] == 1.0
    result = rd.read_result()
    assert len(result["tables"]["dilution_accuracy"]) == 3 * 5
    assert result["summary"]["acc_lag0/α=0.5"] > 0.5
    assert [r["run_id"] for r in runner.list()] == [run_id]
    assert "on ray" in runner.logs(run_id)
    assert runner.submit("dilution", SHORT, seed=1) == run_id  # recognised, not run again
    print(f"\nRay task: {time.monotonic() - t0:.1f} s")


def test_cancel_and_resume_on_ray(runner, tmp_path):
    run_id = runner.submit("dilution", LONG, seed=2)
    rd = RunDir.for_id(run_id, tmp_path / "home")
    assert wait_for(lambda: rd.checkpoints() and rd.read_status().get("state") == "running", PATIENCE, 0.01), \
        f"no checkpoint ever came: {rd.read_status()}"
    assert runner.cancel(run_id) == "cancelled"
    assert rd.read_result() is None
    runner.resume(run_id)
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    assert runner.status(run_id)["attempts"] == 2
    # Cancelled and resumed on Ray, it still equals an uninterrupted run in this process, bit for bit.
    whole = REGISTRY["dilution"].run(build_config("dilution", overrides=LONG, seed=2), NullReporter())
    resumed = rd.read_result()
    assert resumed["tables"] == whole["tables"]
    assert {k: v for k, v in resumed["summary"].items() if k != "seconds"} == \
        {k: v for k, v in whole["summary"].items() if k != "seconds"}


# A whole boundary grid in seconds: two tasks, every kind of cell (agreement, MQAR, recall at a second width).
TINY_MAP = {"mixers": "window_k,ema,softmax", "tasks": "agree_content,mqar", "distances": "1,3", "mqar_pairs": "2",
            "mqar_len": "16", "data.seq_len": 16, "data.n_train": 32, "data.n_dev": 16, "data.n_test": 16,
            "data.mqar_vocab": 32, "train.steps": 6, "train.lrs": "0.01,0.003", "train.choose_at": 0.5,
            "train.eval_every": 2, "model.d": 16, "recall_widths": "8,16", "workers": 2}


def _sorted_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def test_a_boundary_map_on_ray_spreads_its_cells_over_the_cluster_and_matches_a_local_run(ray_head, tmp_path):
    """The README's command: `emalab run boundary --ray HEAD` runs the map's cells as Ray tasks, in
    worker processes other than the run's own, and gives the rows a run on this machine gives."""
    home = tmp_path / "home"
    env = {**os.environ, **LOOPBACK_ONLY, "EMALAB_HOME": str(home)}
    sets = [f"--set={k}={v}" for k, v in TINY_MAP.items()]
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "run", "boundary", "--ray", ray_head, "--json", *sets],
                         env=env, capture_output=True, text=True, timeout=PATIENCE)
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out.stdout)
    assert record["state"] == "done" and record["ingested"], record
    rd = RunDir.for_id(record["run_id"], home)
    status = rd.read_status()
    assert status["backend"] == "ray"
    cfg = build_config("boundary", overrides=TINY_MAP)
    where = re.search(r"(\d+) cells on Ray: (\d+) worker processes on (\d+) node", rd.log_path.read_text())
    assert where, rd.log_path.read_text()
    assert int(where[1]) == len(cells(cfg)) and int(where[2]) >= 2  # spread, not one process per run
    local = REGISTRY["boundary"].run(build_config("boundary", overrides={**TINY_MAP, "workers": 1}), NullReporter())
    on_ray = rd.read_result()["tables"]
    assert set(on_ray) == set(local["tables"])
    for name, rows in local["tables"].items():
        assert rows and _sorted_rows(on_ray[name]) == _sorted_rows(rows), name
