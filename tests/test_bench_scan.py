"""`python -m bench.scan --json` runs end to end and reports every figure.

Timings are not checked here (the targets are for the full benchmark on a quiet machine):
only that the JSON is well formed and every figure is a positive finite number.
"""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _positive_finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def test_bench_scan_quick_json():
    # --T shrinks the numba/lfilter/pandas length and caps the torch and naive-loop lengths.
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scan", "--quick", "--json", "--T", "500"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout holds exactly one JSON object

    for key in ("numba_over_roofline", "lfilter_over_numba", "pandas_over_numba", "naive_over_torch",
                "numba_fresh_over_roofline", "bytes_per_output"):
        assert _positive_finite(report[key]), (key, report[key])
    expected = {"roofline", "numba_reused_out", "numba_fresh_out", "lfilter_3_rates", "pandas_ewm_3_rates",
                "torch_fwd", "torch_fwd_bwd", "naive_loop_fwd_bwd"}
    assert expected <= set(report["ns_per_output"])
    for key, v in report["ns_per_output"].items():
        assert _positive_finite(v), (key, v)
    for key, v in report["copy_bandwidth_GBps"].items():
        assert _positive_finite(v), (key, v)

    machine = report["machine"]
    assert machine["cpu"] and machine["cores"] >= 1
    for key in ("torch", "numba", "numpy", "numba_threads", "torch_threads"):
        assert machine[key]
    assert report["shapes"]["numba_lfilter_pandas"]["T"] == 500
    assert report["shapes"]["naive_torch_loop"]["T"] <= 500

    targets = report["targets"]
    assert {"numba_over_roofline", "lfilter_over_numba", "pandas_over_numba", "naive_over_torch"} <= set(targets)
    for key, t in targets.items():
        assert isinstance(t["pass"], bool) and t["value"] == report[key], key
