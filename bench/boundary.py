"""The boundary map's cost: each mixer's training step, what a second worker process buys, the whole map.

    python -m bench.boundary [--preset quick] [--cells 8] [--json]

Measured in one run, on this machine, at the preset's shapes (width, depth, conv, batch):

* per mixer, the median time of a training step of the study's model on one thread (the thread
  every cell runs on) at the agreement tasks' length, and its ratio to ``ema``'s; then at every
  other shape the grid trains (MQAR's lengths and vocabulary, recall against state's widths) and the
  time of one dev evaluation at each;
* one slice of the preset's grid (``--cells`` cells, the first of each mixer in turn) run with
  ``workers=1`` and then ``workers=2``: the seconds of each and their ratio, and a check that both
  gave the same rows;
* the preset's whole map, estimated cell by cell with 1 worker (each rate's steps up to the choice,
  the kept rate's to the end, every dev evaluation, the cell's data, its exclusion floor) and with 2
  (that, scaled by the slice's measured ratio), whatever the preset's own ``workers``.

The whole quick map itself is ``emalab run boundary --preset quick --json`` (its ``seconds``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bench.machine import machine_info
from ema_core.studies.boundary.tasks import accuracy, exclusion_floor, make_data
from ema_core.experiments import NullReporter, build_config
from ema_core.studies.boundary.experiment import cell_steps, cells, eval_steps
from ema_core.cells import one_thread
from ema_core.studies.boundary.experiment import run as run_grid
from ema_core.mixers.model import MixerNet


def _shape(cfg, cell) -> tuple:
    """What a step's time depends on: the mixer, the sequence length, the task's vocabulary and classes
    (MQAR's are larger), the width."""
    return cell.mixer, cell.difficulty.task == "mqar", cell.difficulty.seq_len, cell.width


def step_time(cfg, cell, repeats: int = 12) -> tuple[float, float]:
    """Median seconds of one training step of ``cell``'s model, and of one dev evaluation, on one thread."""
    data = make_data(cell.difficulty, cfg.data.model_copy(update={"n_train": 64}), cfg.seed, "train")
    dev = make_data(cell.difficulty, cfg.data, cfg.seed, "dev")
    body = cfg.model.model_copy(update={"d": cell.width})
    with one_thread():
        model = MixerNet.from_settings(cell.mixer, body, data.vocab, data.n_classes, seed=0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = data.tokens[: cfg.train.batch], data.targets[: cfg.train.batch]
        times = []
        for i in range(repeats + 2):  # two warm-up steps
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        accuracy(model, dev)
        evaluation = time.perf_counter() - t0
    return statistics.median(times), evaluation


def cell_cost(cfg, d) -> tuple[int, int]:
    """Training steps and dev evaluations of one cell: every rate to the choice, the kept one to the end
    (one rate, from the rate table, where ``train.lr_choice`` is table)."""
    train, total = cfg.train, cell_steps(cfg, d)
    if train.lr_choice == "table":
        return total, len(eval_steps(0, total, train.eval_every))
    choose = max(1, round(train.choose_at * total))
    steps = len(train.lrs) * choose + (total - choose)
    evals = len(train.lrs) * len(eval_steps(0, choose, train.eval_every)) + len(eval_steps(choose, total,
                                                                                           train.eval_every))
    return steps, evals


def fixed_costs(cfg, grid) -> dict:
    """Seconds a cell spends besides training, by difficulty: its three splits' data (every cell draws
    them) and the exclusion floor (once per difficulty and seed in each worker)."""
    out = {}
    for cell in grid:
        d = cell.difficulty
        if d in out:
            continue
        t0 = time.perf_counter()
        for split in ("train", "dev", "test"):
            make_data(d, cfg.data, cell.seed, split)
        data = time.perf_counter() - t0
        t0 = time.perf_counter()
        exclusion_floor(d, cfg.data, cell.seed)
        out[d] = (data, time.perf_counter() - t0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.boundary", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--cells", type=int, default=8, help="cells of the grid slice timed with 1 and 2 workers")
    ap.add_argument("--steps", type=int, default=None, help="steps per cell in the slice (default: the preset's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    cfg = build_config("boundary", preset=a.preset)
    machine = machine_info()
    grid = cells(cfg)
    shapes = {}
    for cell in grid:
        if _shape(cfg, cell) not in shapes:
            shapes[_shape(cfg, cell)] = step_time(cfg, cell)
    steps = {m: shapes[_shape(cfg, next(c for c in grid if c.mixer == m and c.difficulty.task != "mqar"))][0]
             for m in cfg.mixers} if any(c.difficulty.task != "mqar" for c in grid) else {}
    fixed = fixed_costs(cfg, grid)
    per_task = {task: cell_cost(cfg, d) for task, d in {c.difficulty.task: c.difficulty for c in grid}.items()}
    seeds_seen: set = set()
    serial_estimate = 0.0
    for cell in grid:
        step, evaluation = shapes[_shape(cfg, cell)]
        data, floor = fixed[cell.difficulty]
        n_steps, n_evals = per_task[cell.difficulty.task]
        serial_estimate += n_steps * step + (n_evals + 1) * evaluation + data
        if (cell.difficulty, cell.seed) not in seeds_seen:  # one floor per difficulty and seed
            seeds_seen.add((cell.difficulty, cell.seed))
            serial_estimate += floor

    by_mixer = {m: [i for i, c in enumerate(grid) if c.mixer == m] for m in cfg.mixers}
    pick = []
    while len(pick) < min(a.cells, len(grid)):
        for m in cfg.mixers:
            if by_mixer[m] and len(pick) < a.cells:
                pick.append(by_mixer[m].pop(0))
    # The slice as its own grid: the picked cells' mixers and difficulties, the preset's budget.
    mixers = tuple(dict.fromkeys(grid[i].mixer for i in pick))
    # one task of the preset's own besides MQAR (its rate table has rates for those)
    first = next((t for t in cfg.tasks if t != "mqar"), "agree_content4")
    slice_cfg = cfg.model_copy(update={"mixers": mixers, "tasks": (first,), "distances": cfg.distances[:1],
                                       "redundancy": cfg.redundancy[:1], "recall_widths": ()})
    if a.steps:
        slice_cfg = slice_cfg.model_copy(update={"train": slice_cfg.train.model_copy(update={"steps": a.steps})})
    timed = {}
    rows = {}
    for workers in (1, 2):
        t0 = time.perf_counter()
        result = run_grid(slice_cfg.model_copy(update={"workers": workers}), NullReporter())
        timed[workers] = time.perf_counter() - t0
        rows[workers] = result["tables"]
    report = {
        "preset": a.preset, "cells": len(grid), "slice_cells": len(rows[1]["boundary_accuracy"]),
        "step_ms": {m: round(1000 * s, 2) for m, s in steps.items()},
        "step_ratio_to_ema": {m: round(s / steps["ema"], 2) for m, s in steps.items()} if "ema" in steps else {},
        # Every shape the grid trains: mixer, MQAR or not, length, width → (step, one dev evaluation).
        "shape_ms": {f"{m}/{'mqar' if q else 'agree'}/T={T}/d={w}": [round(1000 * s, 2), round(1000 * e, 2)]
                     for (m, q, T, w), (s, e) in shapes.items()},
        # Per task: a cell's training steps (all its rates) and dev evaluations.
        "cell_steps": {t: n for t, (n, _) in per_task.items()}, "cell_evals": {t: e for t, (_, e) in per_task.items()},
        "slice_seconds": {str(w): round(t, 1) for w, t in timed.items()},
        "speedup_2_workers": round(timed[1] / timed[2], 2),
        "same_rows": rows[1] == rows[2],
        # The second is the measured 2-worker ratio, whatever the preset's workers (the full preset's is 1).
        "estimate_seconds": {"workers=1": round(serial_estimate),
                             "workers=2": round(serial_estimate * timed[2] / timed[1])},
        "machine": machine,
    }
    if a.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(f"boundary map, preset {a.preset}: {len(grid)} cells; training steps per cell (all "
              f"{len(cfg.train.lrs)} rates, chosen at {cfg.train.choose_at:g} of the steps): {report['cell_steps']}")
        for m, s in steps.items():
            print(f"  {m:18s} {1000 * s:8.2f} ms/step  ({report['step_ratio_to_ema'].get(m, float('nan')):.2f}× ema)")
        print(f"slice of {report['slice_cells']} cells: 1 worker {timed[1]:.1f} s, 2 workers {timed[2]:.1f} s → "
              f"{report['speedup_2_workers']:.2f}× (same rows: {report['same_rows']})")
        print(f"whole map, estimated seconds: {report['estimate_seconds']}")
        print(f"machine: {machine['cpu']}, {machine['cores_usable']} usable cores, load {machine['loadavg_start']}")
    return 0 if report["same_rows"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
