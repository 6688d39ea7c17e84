"""bench.boundary runs end to end on a small slice: its report's shape, and that workers change no row."""
from __future__ import annotations

import json

from bench.boundary import main
from ema_core.mixers import MIXER_NAMES


def test_the_boundary_bench_reports_step_times_and_the_workers_ratio(capsys):
    assert main(["--cells", "2", "--steps", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["step_ms"]) == set(MIXER_NAMES) and all(v > 0 for v in report["step_ms"].values())
    assert report["step_ratio_to_ema"]["ema"] == 1.0
    assert report["slice_cells"] == 2 and report["same_rows"] is True
    assert report["speedup_2_workers"] > 0 and set(report["slice_seconds"]) == {"1", "2"}
    assert report["cells"] > report["slice_cells"] and report["machine"]["cores"] >= 1
    assert set(report["estimate_minutes"]) == {"workers=1", "workers=2"}
