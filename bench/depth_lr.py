"""Each residual rule's learning rate at each depth for the depth comparison, scored on a dev slice of the *training* text.

    python -m bench.depth_lr [--preset quick] [--rules sum,static,dynamic,select] [--depths 4,8,16]
                             [--start 2e-3,2.83e-3,4e-3] [--seeds 0] [--check-seeds 1] [--prior REPORT.json]
                             [--dev-tokens 65536] [--workers 2] [--json]

Each (rule, depth, rate, seed) trains the depth experiment's own cell
(:func:`ema_core.studies.depth.experiment.run_cell`: its model, loop and budget) and is scored by its mean loss
on a **dev slice**: the last ``--dev-tokens`` tokens of the training stream, cut off before training
(:func:`bench.lm_lr.dev_split`), so neither the held-out novel nor any training window is read to
choose.  Every rate of a (rule, depth) sees the same initial weights and batches.

The rates lie on a ladder of √2 steps (:func:`ladder`: 1e-3, 1.41e-3, 2e-3, 2.83e-3, 4e-3, …), so
neighbours differ by 1.41× (the issue's bound is 1.5×).  Every (rule, depth) starts at ``--start``;
where its best rate is at an edge of what it tried, the next rung beyond that edge is tried, round
after round, until the best is inside (or ``--rounds`` is spent, which the report flags).  With several
seeds a rate scores its worst seed (a rate that diverges on one seed is not chosen), a tie the smaller
rate.  ``--check-seeds`` trains each (rule, depth)'s best rung and the rung below it on more seeds, and
keeps the one whose worst seed is lower (where that is the lower rung, the next one down is tried, and
so on): the search climbs to the edge of stability on its seed, and a rate there may diverge on the
next.  The choice is what :data:`ema_core.studies.depth.learning_rates.TABLES` holds (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from bench.lm_lr import DEV_COLUMNS, _floats, _ints, dev_split, log
from bench.machine import machine_info
from bench.report import print_rows, show
from ema_core.depth import RULES
from ema_core.experiments import NullReporter, build_config
from ema_core.cells import one_thread, run_parallel
from ema_core.studies.depth.experiment import lm_streams, run_cell
from ema_core.lm.train import Streams

DEFAULT_START = (2e-3, 2.83e-3, 4e-3)
DEFAULT_DEPTHS = (4, 8, 16)


def ladder(k: int) -> float:
    """Rung ``k`` of the rate ladder: 1e-3 · 2^(k/2), to three significant figures (k = 0 is 1e-3)."""
    return float(f"{1e-3 * 2 ** (k / 2):.3g}")


def rung(lr: float) -> int:
    """The ladder rung nearest ``lr`` (a start rate must lie on the ladder: it is checked)."""
    k = round(2 * math.log2(lr / 1e-3))
    if not math.isclose(ladder(k), lr, rel_tol=1e-3):
        raise ValueError(f"--start: {lr:g} is not on the ladder of √2 steps from 1e-3 (nearest: {ladder(k):g})")
    return k


def _cell(cfg, rule: str, depth: int, seed: int, dev_tokens: int) -> dict:
    """One (rule, depth, rate, seed) on the dev slice, in a worker process (module level: it is pickled)."""
    full = lm_streams(cfg)
    train, dev = dev_split(full.train, dev_tokens, cfg.train.seq_len)
    # The held-out stream is not passed on: the dev slice takes its place; bytes are counted the same way.
    streams = Streams(train=train, val=dev, val_bytes=full.val_bytes)
    with one_thread():
        return run_cell(cfg, rule, depth, seed, streams=streams, probes=False)["row"]


def _score(losses: list[float]) -> float:
    """A rate's score: its worst seed's dev loss (NaN, a diverged run, is worst of all)."""
    return max(math.inf if math.isnan(v) else v for v in losses)


def sweep(preset: str = "quick", rules=RULES, depths=DEFAULT_DEPTHS, start=DEFAULT_START, seeds=(0,),
          dev_tokens: int = 65_536, workers: int = 2, rounds: int = 4, check_seeds=(), prior=()) -> dict:
    """The search on ``seeds``, then, with ``check_seeds``, each (rule, depth)'s best rung and the rung below
    it trained on those seeds too, the one whose worst seed is lower kept, and where that is the lower one
    the next rung down tried as well (a best rate on the edge of stability on one seed is not trusted
    alone).  ``prior``: rows of an earlier report of the same
    preset, not trained again."""
    rows: list[dict] = [dict(r) for r in prior]
    tried: dict[tuple[str, int], set[int]] = {(r, L): {rung(lr) for lr in start} for r in rules for L in depths}

    def train(todo: dict[tuple[str, int], set[int]], on_seeds, label: str) -> None:
        have = {(r["rule"], r["depth"], r["rung"], r["seed"]) for r in rows}
        jobs, meta = [], []
        for (rule, L), ks in todo.items():
            for k in sorted(ks):
                cfg = build_config("depth", preset=preset, overrides={
                    "rules": [rule], "depths": [L], "train.lr": ladder(k),
                    # one dev evaluation at the end, over the whole slice; nothing periodic to pay for
                    "train.final_eval_tokens": dev_tokens})
                cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={
                    "eval_every": cfg.train.steps, "eval_tokens": cfg.train.seq_len})})
                for seed in on_seeds:
                    if (rule, L, k, seed) not in have:
                        jobs.append((cfg, rule, L, seed, dev_tokens))
                        meta.append((rule, L, k, seed))
        if not jobs:
            return
        # The deepest first: a long job handed out last would leave the other worker idle.
        order = sorted(range(len(jobs)), key=lambda i: -jobs[i][2])

        def finished(i: int, row: dict) -> None:
            rule, L, k, seed = meta[i]
            rows.append({"rule": rule, "depth": L, "lr": ladder(k), "rung": k, "seed": seed, "round": label,
                         "dev_loss": row["val_loss"], "dev_bpb": row["val_bpb"], "seconds": round(row["seconds"], 1)})
            log(f"{label}: {rule:7s} {L:2d} blocks lr {ladder(k):.3g} seed {seed}: dev loss "
                f"{row['val_loss']:.4f} ({row['seconds']:.0f} s)")

        run_parallel([(i, jobs[i]) for i in order], workers, NullReporter(), finished, _cell)

    for r in rows:  # an earlier report's rungs count as tried
        if (r["rule"], r["depth"]) in tried and r["seed"] in seeds:
            tried[r["rule"], r["depth"]].add(r["rung"])
    todo = {key: set(ks) for key, ks in tried.items()}
    for round_ in range(1, rounds + 1):
        train(todo, seeds, f"round {round_}")
        todo = {}
        for key, ks in tried.items():
            best = _best(rows, *key, seeds)
            step = -1 if best == min(ks) else 1 if best == max(ks) else 0
            if step:
                todo[key] = {best + step}
                ks.add(best + step)
        if not todo:
            break
    searched = {key: _best(rows, *key, seeds) for key in tried}
    every = tuple(seeds) + tuple(s for s in check_seeds if s not in seeds)
    kept = dict(searched)
    if check_seeds:
        # The best rung and the one below on every seed; where the lower one wins, the next rung down is
        # tried too, as the search extends an edge winner, until the worst seed stops improving.
        todo = {key: {k, k - 1} for key, k in searched.items()}
        for round_ in range(1, rounds + 1):
            train(todo, every, "check" if round_ == 1 else f"check {round_}")
            todo = {}
            for (rule, L), k in kept.items():
                ks = {r["rung"] for r in rows if (r["rule"], r["depth"]) == (rule, L)
                      and set(every) <= {x["seed"] for x in rows if (x["rule"], x["depth"], x["rung"])
                                          == (rule, L, r["rung"])}}
                best = min(ks, key=lambda j: (_score(_losses(rows, rule, L, j, every)), j))
                kept[rule, L] = best
                if best == min(ks) and best < searched[rule, L]:
                    todo[rule, L] = {best - 1}
            if not todo:
                break
    choice = {}
    for (rule, L), ks in tried.items():
        k = kept[rule, L]
        scored = {r["rung"] for r in rows if r["rule"] == rule and r["depth"] == L and r["seed"] in seeds}
        choice.setdefault(rule, {})[str(L)] = {
            "lr": ladder(k), "dev_loss": _score(_losses(rows, rule, L, k, every if check_seeds else seeds)),
            "searched": ladder(searched[rule, L]), "inside": min(scored) < searched[rule, L] < max(scored),
            "tried": [ladder(j) for j in sorted(scored)]}
    rows.sort(key=lambda r: (rules.index(r["rule"]) if r["rule"] in rules else len(rules), r["depth"], r["lr"],
                             r["seed"]))
    base = build_config("depth", preset=preset)
    return {"preset": preset, "depths": list(depths), "steps": base.train.steps, "batch": base.train.batch,
            "seq_len": base.train.seq_len, "warmup": base.train.warmup, "dev_tokens": dev_tokens,
            "seeds": list(seeds), "check_seeds": list(check_seeds), "held_out_read": False, "rows": rows,
            "choice": choice, "machine": machine_info()}


def _losses(rows: list[dict], rule: str, depth: int, k: int, seeds) -> list[float]:
    return [r["dev_loss"] for r in rows if (r["rule"], r["depth"], r["rung"]) == (rule, depth, k) and r["seed"] in seeds]


def _best(rows: list[dict], rule: str, depth: int, seeds) -> int:
    """The rung whose worst seed (of ``seeds``) scored lowest for (rule, depth), a tie the smaller rate."""
    by: dict[int, list[float]] = {}
    for r in rows:
        if r["rule"] == rule and r["depth"] == depth and r["seed"] in seeds:
            by.setdefault(r["rung"], []).append(r["dev_loss"])
    return min(by, key=lambda k: (_score(by[k]), k))


def print_report(r: dict) -> None:
    print(f"depth learning-rate sweep: preset {r['preset']}, {r['steps']} steps of {r['batch']}×{r['seq_len']} tokens "
          f"(warm-up {r['warmup']}), seeds {', '.join(map(str, r['seeds']))}; dev slice = the last "
          f"{r['dev_tokens']:,} training tokens (the held-out text unread)")
    print_rows(r["rows"], [("rule", "rule", "8s"), ("depth", "blocks", "6d"), ("lr", "lr", "9.3g"),
                           ("seed", "seed", "5d"), ("round", "round", "5d"), *DEV_COLUMNS])
    for rule, by in r["choice"].items():
        for L, c in by.items():
            flag = "" if c["inside"] else "  (on the edge of what was tried: rounds ran out)"
            checked = (f", best of it and the rung below on seeds {', '.join(map(str, r['seeds'] + r['check_seeds']))}"
                       f" by the worst (searched: {c['searched']:g})" if r["check_seeds"] else "")
            print(f"choice for {rule} at {L} blocks: lr {c['lr']:g} (dev loss {c['dev_loss']:.4f}{checked}){flag}")
    m = r["machine"]
    print(f"machine: {m['cpu']}, {m['cores_usable']} usable cores, torch {m['torch']}, load {m['loadavg_start']} "
          "before the run")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.depth_lr", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="quick", help="the depth run preset whose budget is swept (default: quick)")
    p.add_argument("--rules", default=",".join(RULES), help="comma-separated residual rules")
    p.add_argument("--depths", type=_ints, default=list(DEFAULT_DEPTHS), help="blocks, comma-separated")
    p.add_argument("--start", type=_floats, default=list(DEFAULT_START),
                   help="the rates every (rule, depth) starts at, on the √2 ladder from 1e-3")
    p.add_argument("--seeds", type=_ints, default=[0], help="seeds, comma-separated (a rate scores its worst)")
    p.add_argument("--dev-tokens", type=int, default=65_536, help="tokens cut from the end of the training stream")
    p.add_argument("--workers", type=int, default=2, help="trainings at once (processes, one thread each)")
    p.add_argument("--rounds", type=int, default=4, help="rounds of extending an edge winner by one rung")
    p.add_argument("--check-seeds", type=_ints, default=[], help="seeds the best rung and the one below are also "
                                                                "trained on (the worst seed decides between them)")
    p.add_argument("--prior", default=None, help="an earlier --json report of this preset: its rows are not "
                                                 "trained again")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    a = p.parse_args(argv)
    rules = tuple(x.strip() for x in a.rules.split(",") if x.strip())
    prior = json.loads(Path(a.prior).read_text())["rows"] if a.prior else ()
    report = sweep(a.preset, rules, tuple(a.depths), tuple(a.start), tuple(a.seeds), a.dev_tokens, a.workers,
                   a.rounds, tuple(a.check_seeds), prior)
    show(report, a.json, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
