"""Each residual rule's learning rate for the depth comparison, scored on a dev slice of the *training* text.

    python -m bench.depth_lr [--preset quick] [--rules sum,static,dynamic,select] [--lrs 1e-3,3e-3,1e-2] [--depth 8]
                             [--seeds 0,1] [--dev-tokens 65536] [--workers 2] [--json]

Each (rule, rate, seed) trains the depth experiment's own cell (:func:`ema_core.experiments.depth.run_cell`:
its model, loop and budget) at one depth, and is scored by its mean loss on a **dev slice**: the last
``--dev-tokens`` tokens of the training stream, cut off before training (:func:`bench.lm_lr.dev_split`),
so neither the held-out novel nor any training window is read to choose.  Every rate of a rule sees
the same initial weights and batches; with several seeds the mean decides, a tie the smaller rate.
The choice is what :data:`ema_core.experiments.depth.AUTO_LR` holds (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from bench.lm_lr import _floats, _ints, dev_split, log
from bench.machine import machine_info
from ema_core.depth import RULES
from ema_core.experiments import NullReporter, build_config
from ema_core.experiments.cells import one_thread, run_parallel

DEFAULT_LRS = (1e-3, 3e-3, 1e-2)


def _cell(cfg, rule: str, depth: int, seed: int, dev_tokens: int) -> dict:
    """One (rule, rate, seed) on the dev slice, in a worker process (module level: it is pickled)."""
    from ema_core.experiments.depth import lm_streams, run_cell
    from ema_core.lm.train import Streams

    full = lm_streams(cfg)
    train, dev = dev_split(full.train, dev_tokens, cfg.train.seq_len)
    # The held-out stream is not passed on: the dev slice takes its place; bytes are counted the same way.
    streams = Streams(train=train, val=dev, val_bytes=full.val_bytes)
    with one_thread():
        return run_cell(cfg, rule, depth, seed, streams=streams, probes=False)["row"]


def sweep(preset: str = "quick", rules=RULES, lrs=DEFAULT_LRS, depth: int = 8, seeds=(0, 1),
          dev_tokens: int = 65_536, workers: int = 2) -> dict:
    jobs, configs = [], []
    for rule in rules:
        for lr in lrs:
            cfg = build_config("depth", preset=preset, overrides={
                "rules": [rule], "depths": [depth], "train.lr": lr,
                # one dev evaluation at the end, over the whole slice; nothing periodic to pay for
                "train.final_eval_tokens": dev_tokens})
            cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"eval_every": cfg.train.steps,
                                                                               "eval_tokens": cfg.train.seq_len})})
            for seed in seeds:
                jobs.append((len(jobs), (cfg, rule, depth, seed, dev_tokens)))
                configs.append((rule, lr, seed))
    rows: list[dict] = []

    def finished(i: int, row: dict) -> None:
        rule, lr, seed = configs[i]
        rows.append({"rule": rule, "lr": lr, "seed": seed, "dev_loss": row["val_loss"], "dev_bpb": row["val_bpb"],
                     "seconds": round(row["seconds"], 1)})
        log(f"{rule:6s} lr {lr:.0e} seed {seed}: dev loss {row['val_loss']:.4f} ({row['seconds']:.0f} s)")

    # The longest rules first is no matter here: every job is one depth.
    run_parallel(jobs, workers, NullReporter(), lambda i, row: finished(i, row), _cell)
    rows.sort(key=lambda r: (rules.index(r["rule"]), r["lr"], r["seed"]))
    choice = {}
    for rule in rules:
        by_lr: dict[float, list[float]] = {}
        for r in rows:
            if r["rule"] == rule:
                by_lr.setdefault(r["lr"], []).append(r["dev_loss"])
        lr, losses = min(by_lr.items(), key=lambda kv: (float(np.mean(kv[1])), kv[0]))
        choice[rule] = {"lr": lr, "dev_loss": float(np.mean(losses)), "seeds": len(losses)}
    base = build_config("depth", preset=preset)
    return {"preset": preset, "depth": depth, "steps": base.train.steps, "batch": base.train.batch,
            "seq_len": base.train.seq_len, "warmup": base.train.warmup, "dev_tokens": dev_tokens,
            "held_out_read": False, "rows": rows, "choice": choice, "machine": machine_info()}


def print_report(r: dict) -> None:
    print(f"depth learning-rate sweep: preset {r['preset']}, {r['depth']} blocks, {r['steps']} steps of "
          f"{r['batch']}×{r['seq_len']} tokens (warm-up {r['warmup']}); dev slice = the last {r['dev_tokens']:,} "
          "training tokens (the held-out text unread)")
    print(f"{'rule':7s} {'lr':>8s} {'seed':>5s} {'dev loss':>9s} {'dev bpb':>8s} {'s':>7s}")
    for row in r["rows"]:
        print(f"{row['rule']:7s} {row['lr']:8.0e} {row['seed']:5d} {row['dev_loss']:9.4f} {row['dev_bpb']:8.4f} "
              f"{row['seconds']:7.1f}")
    for rule, c in r["choice"].items():
        print(f"choice for {rule}: lr {c['lr']:g} (dev loss {c['dev_loss']:.4f}, {c['seeds']} seed(s))")
    m = r["machine"]
    print(f"machine: {m['cpu']}, {m['cores_usable']} usable cores, torch {m['torch']}, load {m['loadavg_start']} "
          "before the run")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.depth_lr", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="quick", help="the depth run preset whose budget is swept (default: quick)")
    p.add_argument("--rules", default=",".join(RULES), help="comma-separated residual rules")
    p.add_argument("--lrs", type=_floats, default=list(DEFAULT_LRS), help="peak learning rates, comma-separated")
    p.add_argument("--depth", type=int, default=8, help="blocks of the models swept")
    p.add_argument("--seeds", type=_ints, default=[0, 1], help="seeds, comma-separated (the mean decides)")
    p.add_argument("--dev-tokens", type=int, default=65_536, help="tokens cut from the end of the training stream")
    p.add_argument("--workers", type=int, default=2, help="trainings at once (processes, one thread each)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    a = p.parse_args(argv)
    rules = tuple(x.strip() for x in a.rules.split(",") if x.strip())
    report = sweep(a.preset, rules, tuple(a.lrs), a.depth, tuple(a.seeds), a.dev_tokens, a.workers)
    if a.json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
