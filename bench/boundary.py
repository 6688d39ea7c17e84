"""The boundary map's cost: each mixer's training step, and what a second worker process buys.

    python -m bench.boundary [--preset quick] [--cells 8] [--json]

Measured in one run, on this machine, at the preset's shapes (sequence length, batch, width, depth):

* per mixer, the median time of a training step of the study's model on one thread (the thread
  every cell runs on), and its ratio to ``ema``'s;
* one slice of the preset's grid (``--cells`` cells, the first of each mixer in turn) run with
  ``workers=1`` and then ``workers=2``: the seconds of each and their ratio, and a check that both
  gave the same rows;
* the preset's whole-grid estimate with 1 worker (steps per cell × the mixers' step times) and
  with 2 (that, scaled by the slice's measured ratio), whatever the preset's own ``workers``.

The whole quick map itself is ``emalab run boundary --preset quick --json`` (its ``seconds``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bench.machine import machine_info
from ema_core.boundary import make_data
from ema_core.experiments import NullReporter, build_config
from ema_core.experiments.boundary import cells, difficulties, one_thread
from ema_core.experiments.boundary import run as run_grid
from ema_core.mixers.model import MixerNet


def step_times(cfg, repeats: int = 12) -> dict[str, float]:
    """Median seconds of one training step per mixer, on the agreement task's shapes, one thread."""
    d = next(x for x in difficulties(cfg) if x.task != "mqar")
    data = make_data(d, cfg.data, cfg.seed, "train")
    out = {}
    with one_thread():
        for mixer in cfg.mixers:
            model = MixerNet.from_settings(mixer, cfg.model, data.vocab, data.n_classes, seed=0)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            batch = data.tokens[: cfg.train.batch], data.targets[: cfg.train.batch]
            times = []
            for i in range(repeats + 2):  # two warm-up steps
                t0 = time.perf_counter()
                loss = torch.nn.functional.cross_entropy(model(batch[0]).flatten(0, 1), batch[1].flatten(),
                                                         ignore_index=-100)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if i >= 2:
                    times.append(time.perf_counter() - t0)
            out[mixer] = statistics.median(times)
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
    steps = step_times(cfg)

    grid = cells(cfg)
    by_mixer = {m: [i for i, c in enumerate(grid) if c[0] == m] for m in cfg.mixers}
    pick = []
    while len(pick) < min(a.cells, len(grid)):
        for m in cfg.mixers:
            if by_mixer[m] and len(pick) < a.cells:
                pick.append(by_mixer[m].pop(0))
    # The slice as its own grid: the picked cells' mixers and difficulties, the preset's budget.
    mixers = tuple(dict.fromkeys(grid[i][0] for i in pick))
    slice_cfg = cfg.model_copy(update={"mixers": mixers, "tasks": ("agree_content",), "distances": cfg.distances[:1]})
    if a.steps:
        slice_cfg = slice_cfg.model_copy(update={"train": slice_cfg.train.model_copy(update={"steps": a.steps})})
    timed = {}
    rows = {}
    for workers in (1, 2):
        t0 = time.perf_counter()
        result = run_grid(slice_cfg.model_copy(update={"workers": workers}), NullReporter())
        timed[workers] = time.perf_counter() - t0
        rows[workers] = result["tables"]["boundary_accuracy"]
    per_cell_steps = cfg.train.steps * (1 + cfg.train.choose_at * (len(cfg.train.lrs) - 1))
    n_by_mixer = {m: sum(1 for c in grid if c[0] == m) for m in cfg.mixers}
    serial_estimate = sum(n_by_mixer[m] * per_cell_steps * steps[m] for m in cfg.mixers)
    report = {
        "preset": a.preset, "cells": len(grid), "slice_cells": len(rows[1]),
        "step_ms": {m: round(1000 * s, 2) for m, s in steps.items()},
        "step_ratio_to_ema": {m: round(s / steps["ema"], 2) for m, s in steps.items()} if "ema" in steps else {},
        "slice_seconds": {str(w): round(t, 1) for w, t in timed.items()},
        "speedup_2_workers": round(timed[1] / timed[2], 2),
        "same_rows": rows[1] == rows[2],
        # The second is the measured 2-worker ratio, whatever the preset's workers (the full preset's is 1).
        "estimate_minutes": {"workers=1": round(serial_estimate / 60, 1),
                             "workers=2": round(serial_estimate / 60 * timed[2] / timed[1], 1)},
        "machine": machine,
    }
    if a.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(f"boundary map, preset {a.preset}: {len(grid)} cells, {cfg.train.steps} steps each "
              f"(×{len(cfg.train.lrs)} rates for the first {cfg.train.choose_at:g})")
        for m, s in steps.items():
            print(f"  {m:18s} {1000 * s:8.2f} ms/step  ({report['step_ratio_to_ema'].get(m, float('nan')):.2f}× ema)")
        print(f"slice of {len(rows[1])} cells: 1 worker {timed[1]:.1f} s, 2 workers {timed[2]:.1f} s → "
              f"{report['speedup_2_workers']:.2f}× (same rows: {report['same_rows']})")
        print(f"whole grid, estimated: {report['estimate_minutes']}")
        print(f"machine: {machine['cpu']}, {machine['cores_usable']} usable cores, load {machine['loadavg_start']}")
    return 0 if report["same_rows"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
