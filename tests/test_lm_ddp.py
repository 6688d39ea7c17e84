"""Multi-process training: torchrun with the gloo backend, two CPU processes, one job."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETS = dict(steps=4, batch=2, seq_len=32, warmup=1, eval_every=2, eval_tokens=256, final_eval_tokens=1024,
            vocab_size=512, threads=1)


def _torchrun(home: Path, *extra: str) -> subprocess.CompletedProcess:
    sets = [a for k, v in SETS.items() for a in ("--set", f"{k}={v}")]
    env = {**os.environ, "EMALAB_HOME": str(home), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", "-m", "jobs.ddp",
         "content", "--preset", "quick", *sets, *extra, "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )


def test_two_gloo_processes_train_one_job(tmp_path):
    home = tmp_path / "home"
    proc = _torchrun(home)
    assert proc.returncode == 0, proc.stderr[-4000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["state"] == "done" and record["ingested"] is True
    assert record["world_size"] == 2
    assert record["tokens"] == SETS["steps"] * SETS["batch"] * SETS["seq_len"] * 2  # both ranks' batches
    assert record["val_loss"] > 0 and record["val_ppl"] > 1
    run = home / "runs" / record["run_id"]
    assert json.loads((run / "status.json").read_text())["state"] == "done"
    assert (run / "artifacts" / "tokenizer.json").exists()

    # The same command again: the run is recognised as done, nothing is trained twice.
    again = _torchrun(home)
    assert again.returncode == 0, again.stderr[-4000:]
    assert json.loads(again.stdout.strip().splitlines()[-1]) == {"run_id": record["run_id"], "state": "done"}


def test_bad_settings_fail_before_any_process_group(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jobs.ddp", "content", "--set", "model=mamba"], cwd=ROOT,
                          env={**os.environ, "EMALAB_HOME": str(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "model: must be one of" in proc.stderr
    assert not (tmp_path / "runs").exists()
