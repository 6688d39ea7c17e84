"""When the boundary map's learning rate is chosen, and which one: every rate of every cell trained to the end.

    python -m bench.boundary_rates [--preset quick] [--seed 20 …] [--workers 2] [--set KEY=VALUE …] [--json]

For each cell of the preset's grid at one seed (a dev seed: never one a claim is confirmed on), every
rate of ``train.lrs`` trains to the end; each is scored on dev half way and at the end, and on test
at the end.  It prints:

* **half way against the end** (the issue's question): per task, how often the rate best on dev half
  way (the preset's ``choose_at`` 0.5) differs from the rate best on dev at the end, and the test
  accuracy that costs (end choice − half-way choice, mean and worst over the task's cells);
* **the rate table**: per (mixer, task), and per width on MQAR, the rate whose end-of-training dev
  accuracy, averaged over the cells it covers (every ρ and distance), is best: what
  ``train.lr_choice=table`` reads (:mod:`ema_core.studies.boundary.learning_rates`), to copy there with
  the command, the seed and the commit it ran at.

Given several dev seeds (``--seed 21 22 23``), a cell's score at a rate is its *worst* seed's dev
accuracy: a task learned in a sharp transition (softmax on MQAR) is held to its bar at every seed, and
a rate that misses one seed is worse than one that is a little slower on all.

Test accuracy is reported, never used to choose: the table is made on dev alone.
"""
from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from bench.machine import machine_info
from bench.report import show
from ema_core.studies.boundary.tasks import Trainer, accuracy, make_data, task_seed
from ema_core.learning_rates import settings_at
from ema_core.studies.boundary.learning_rates import TUNED_PATHS
from ema_core.experiments import build_config
from ema_core.studies.boundary.experiment import cell_steps, cells
from ema_core.cells import one_thread
from ema_core.mixers.model import MixerNet


def every_rate(cfg, mixer: str, d, seed: int, width: int) -> dict:
    """One cell, every rate to the end, as run_cell would train each (same data, weights and batches)."""
    steps = cell_steps(cfg, d)
    half = max(1, round(0.5 * steps))
    body = cfg.model.model_copy(update={"d": width})
    with one_thread():
        train, dev, test = (make_data(d, cfg.data, seed, split) for split in ("train", "dev", "test"))
        init = task_seed(seed, "model", mixer, d.task, d.label) % 2**31
        out = []
        for lr in cfg.train.lrs:
            model = MixerNet.from_settings(mixer, body, train.vocab, train.n_classes, seed=init)
            tr = Trainer(model, train, steps=steps, batch=cfg.train.batch, lr=lr, warmup=cfg.train.warmup,
                         seed=task_seed(seed, "batches", mixer, d.task, d.label))
            tr.advance(half)
            dev_half = accuracy(tr.model, dev)
            tr.advance(steps)
            out.append({"lr": lr, "dev_half": dev_half, "dev_end": accuracy(tr.model, dev),
                        "test_end": accuracy(tr.model, test)})
    return {"mixer": mixer, "task": d.task, "difficulty": d.label, "width": width, "seed": seed, "rates": out}


def best(rates: list[dict], key: str) -> dict:
    """The rate best on ``key``, a tie to the grid's first (as run_cell chooses)."""
    return max(enumerate(rates), key=lambda ir: (ir[1][key], -ir[0]))[1]


def table_key(cell: dict, body_width: int) -> str:
    """(mixer, task) for the tasks at the body's width, (mixer, task, width) for MQAR's widths."""
    return (f"{cell['mixer']}|{cell['task']}|{cell['width']}" if cell["task"] == "mqar"
            else f"{cell['mixer']}|{cell['task']}")


def print_report(r: dict) -> None:
    print(f"boundary rates, preset {r['preset']}, seeds {r['seeds']}: {r['cells']} cells, every rate to the end, "
          f"{r['seconds']:.0f} s")
    for task, h in r["half_way"].items():
        print(f"  {task:16s} half-way choice ≠ end choice in {h['differ']}/{h['cells']} cells; test cost "
              f"mean {h['mean_cost']:+.4f}, worst {h['worst_cost']:+.4f}")
    print("rate table (chosen on dev at the end):")
    for key, lr in sorted(r["table"].items()):
        print(f"  {key}: {lr:g}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.boundary_rates", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--seed", type=int, nargs="+", default=[20],
                    help="dev seeds (never ones a claim is confirmed on); with several, a cell scores its worst seed")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting over the preset's")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in a.set)
    cfgs = [build_config("boundary", preset=a.preset, seed=seed, overrides={**overrides, "seeds": 1})
            for seed in a.seed]
    cfg = cfgs[0]
    grid = [c for one in cfgs for c in cells(one)]
    # The longest first, so that no worker is left alone with one at the end.
    order = sorted(grid, key=lambda c: -cell_steps(cfg, c.difficulty) * c.difficulty.seq_len)
    t0 = time.perf_counter()
    jobs = list(zip(*[(cfg, c.mixer, c.difficulty, c.seed, c.width) for c in order]))
    if a.workers > 1:
        with ProcessPoolExecutor(a.workers, mp_context=get_context("spawn")) as pool:
            results = list(pool.map(every_rate, *jobs))
    else:  # in this process: nothing spawned
        results = list(map(every_rate, *jobs))
    seconds = time.perf_counter() - t0

    by_task: dict[str, dict] = {}
    for r in results:
        half, end = best(r["rates"], "dev_half"), best(r["rates"], "dev_end")
        t = by_task.setdefault(r["task"], {"cells": 0, "differ": 0, "costs": []})
        t["cells"] += 1
        t["differ"] += half["lr"] != end["lr"]
        t["costs"].append(end["test_end"] - half["test_end"])
    half_way = {task: {"cells": t["cells"], "differ": t["differ"], "mean_cost": sum(t["costs"]) / len(t["costs"]),
                       "worst_cost": max(t["costs"])} for task, t in by_task.items()}

    # key -> rate -> cell (its difficulty and width) -> the dev accuracy at the end of each seed
    seen: dict[str, dict[float, dict[tuple, list[float]]]] = {}
    for r in results:
        for x in r["rates"]:
            (seen.setdefault(table_key(r, cfg.model.d), {}).setdefault(x["lr"], {})
             .setdefault((r["difficulty"], r["width"]), []).append(x["dev_end"]))
    sums = {key: {lr: [min(seeds) for seeds in by_cell.values()] for lr, by_cell in per_rate.items()}
            for key, per_rate in seen.items()}
    table = {}
    for key, per_rate in sums.items():
        means = {lr: sum(v) / len(v) for lr, v in per_rate.items()}
        table[key] = max(cfg.train.lrs, key=lambda lr: (means[lr], -cfg.train.lrs.index(lr)))
    report = {"preset": a.preset, "seeds": a.seed, "cells": len(results), "seconds": round(seconds),
              "half_way": half_way, "table": table,
              "tuned_for": settings_at(cfg.model_dump(mode="json"), TUNED_PATHS),
              "cells_detail": results, "machine": machine_info()}
    show(report, a.json, print_report, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
