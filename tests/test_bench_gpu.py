"""`python -m bench.gpu --dry-run`: the GPU check's whole plan at toy sizes on the CPU, so it cannot rot.

What it measures on a CPU means nothing and is not checked; that every part ran, reported its
figures in the promised keys and kept them in the store is.
"""
import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import store

ROOT = Path(__file__).resolve().parents[1]


def _gpu_check(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.gpu", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200, env={**os.environ, "EMALAB_HOME": str(home)})


def test_the_dry_run_runs_every_part_and_keeps_its_figures(tmp_path):
    proc = _gpu_check(tmp_path, "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout holds exactly one JSON object
    assert report["dry_run"] is True and report["mixers"] == []
    # no part failed: a failure would be an {"error": …} in its place
    assert "error" not in report["tests"] and "error" not in report["scan"], (report["tests"], report["scan"])
    assert report["tests"]["failed"] == 0 and report["tests"]["passed"] + report["tests"]["skipped"] > 0
    for part in ("fp32_fwd", "fp32_fwdbwd", "bf16_fwd", "bf16_fwdbwd"):
        assert report["scan"][f"{part}_GBps"] > 0 and f"{part}_bandwidth_fraction" in report["scan"]
    assert set(report["train"]) == {str(T) for T in report["plan"]["ts"]}
    for T, by_model in report["train"].items():
        assert set(by_model) == {"spen", "gpt"}, by_model
        for fig in by_model.values():
            assert fig["tokens_per_s"] > 0 and math.isfinite(fig["hours_for_8b_tokens"])
            assert {"mfu", "peak_memory_MiB", "model_flops_per_token"} <= set(fig)
    # the GPT counts attention's FLOPs on top of its weights; SPEN only its weights
    one = report["train"][str(report["plan"]["ts"][0])]
    assert one["spen"]["model_flops_per_token"] == 6 * one["spen"]["params"]
    assert one["gpt"]["model_flops_per_token"] > 6 * one["gpt"]["params"]
    assert {"spen_tokens_per_s", "gpt_tokens_per_s", "spen_hours_for_8b_tokens", "gpu_tests_failed"} <= set(
        report["figures"])
    kept = store.bench_figures("gpu-dry-run", home=tmp_path)
    assert set(kept["key"]) == set(report["figures"]), kept
    assert all(kept["command"] == "python -m bench.gpu --dry-run")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_without_a_gpu_the_real_check_says_so_and_writes_nothing(tmp_path, monkeypatch):
    # The check's main in process (its console entry is the dry run's above): SystemExit with a message
    # is what a real process prints on stderr before it exits with status 1.
    from bench.gpu import main

    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited, contextlib.redirect_stdout(out):
        main(["--json"])
    said = exited.value.code
    assert isinstance(said, str) and out.getvalue() == ""  # a message, so a non-zero status, and no report
    assert "no CUDA device" in said and "--dry-run" in said
    assert not (tmp_path / "emalab.duckdb").exists()
