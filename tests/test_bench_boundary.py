"""bench.boundary runs end to end on a small grid: its report's shape, and that workers change no row."""
from __future__ import annotations

import json

from bench.boundary import main
from ema_core.experiments import REGISTRY

# Every mixer but a few, every task, one distance and MQAR size, recall at two widths: seconds.
TINY = {"mixers": ("window_k", "ema", "softmax"), "distances": (1,), "mqar_pairs": (2,), "mqar_len": (16,),
        "recall_widths": (8, 16), "data.seq_len": 16, "data.n_train": 64, "data.n_dev": 16, "data.n_test": 16,
        "data.mqar_vocab": 32, "model.d": 16, "train.steps": 4, "train.mqar_steps": 8, "train.lrs": (0.01, 0.003),
        "train.eval_every": 2}


def test_the_boundary_bench_reports_step_times_and_the_whole_map_s_seconds(capsys, monkeypatch):
    monkeypatch.setitem(REGISTRY["boundary"].presets, "tiny", TINY)
    assert main(["--preset", "tiny", "--cells", "2", "--steps", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["step_ms"]) == {"window_k", "ema", "softmax"} and all(v > 0 for v in report["step_ms"].values())
    assert report["step_ratio_to_ema"]["ema"] == 1.0
    # every shape the grid trains: each mixer on the agreement tasks and MQAR, EMA at its other width
    assert set(report["shape_ms"]) == {f"{m}/{t}/T=16/d=16" for m in ("window_k", "ema", "softmax")
                                       for t in ("agree", "mqar")} | {"ema/mqar/T=16/d=8"}
    assert all(step > 0 and evaluation > 0 for step, evaluation in report["shape_ms"].values())
    # both rates to the end (choose_at 1), each scored at steps 2 and 4; MQAR's twice as long
    assert report["cell_steps"] == {"agree_structure": 2 * 4, "agree_content": 2 * 4, "agree_content4": 2 * 4,
                                    "lag_identity": 2 * 4, "mqar": 2 * 8}
    assert report["cell_evals"] == {"agree_structure": 2 * 2, "agree_content": 2 * 2, "agree_content4": 2 * 2,
                                    "lag_identity": 2 * 2, "mqar": 2 * 4}
    assert report["slice_cells"] == 2 and report["same_rows"] is True
    assert report["speedup_2_workers"] > 0 and set(report["slice_seconds"]) == {"1", "2"}
    assert report["cells"] == 3 * 5 + 1 and report["machine"]["cores"] >= 1
    assert set(report["estimate_seconds"]) == {"workers=1", "workers=2"} and report["estimate_seconds"]["workers=1"] > 0


def test_the_rates_bench_trains_every_rate_to_the_end_and_tables_the_best_worst_seed_on_dev(capsys, monkeypatch):
    from bench.boundary_rates import main as rates

    monkeypatch.setitem(REGISTRY["boundary"].presets, "tiny", TINY)
    assert rates(["--preset", "tiny", "--seed", "20", "21", "--workers", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cells"] == 2 * (3 * 5 + 1) and report["seeds"] == [20, 21]
    for cell in report["cells_detail"]:  # every rate of the grid, scored half way and at the end
        assert [r["lr"] for r in cell["rates"]] == [0.01, 0.003]
        assert all(0 <= r[k] <= 1 for r in cell["rates"] for k in ("dev_half", "dev_end", "test_end"))
    half = report["half_way"]
    assert set(half) == {"agree_structure", "agree_content", "agree_content4", "lag_identity", "mqar"}
    assert all(0 <= h["differ"] <= h["cells"] for h in half.values())
    # one rate per (mixer, task), and per width on MQAR; each the best, over the cells it covers, of the
    # mean of each cell's worst seed's dev accuracy at the end
    assert "ema|mqar|8" in report["table"] and "ema|agree_structure" in report["table"]
    for key, lr in report["table"].items():
        mixer, task, *width = key.split("|")
        mine = [c for c in report["cells_detail"] if c["mixer"] == mixer and c["task"] == task
                and (not width or c["width"] == int(width[0]))]
        worst: dict[float, dict[tuple, float]] = {}
        for c in mine:
            for r in c["rates"]:
                cell = worst.setdefault(r["lr"], {})
                where = (c["difficulty"], c["width"])
                cell[where] = min(cell.get(where, 1.0), r["dev_end"])
        assert {c["seed"] for c in mine} == {20, 21}
        score = {x: sum(by.values()) / len(by) for x, by in worst.items()}
        assert score[lr] == max(score.values())
    assert report["tuned_for"]["train.steps"] == 4 and report["tuned_for"]["model.d"] == 16
