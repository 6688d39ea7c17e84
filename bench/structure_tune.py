"""Choose SPCN's context gain γ on dev numbers only: the sweep behind the presets' ``spcn.context_gain``.

    python -m bench.structure_tune [--preset quick] [--seeds 0-2] [--grid 0,1,2,4,8,16,32] [--set key=value ...] [--json]

For each γ and seed it calls ``ema_core.studies.structure.experiment.tune``, which draws the training
sentences, dev (the last fifth of them) and novel_dev (sentences whose open-class words come from
the *tuning pool*, ids 273..398, never those of the scored novel split) and nothing else: no test,
novel or deep sentence is drawn, so none can steer the choice.  SPCN trains on train, each probe's
penalty is chosen on dev, and the probes are scored on dev and novel_dev.

The rule, fixed before the sweep: the chosen γ maximises, averaged over the seeds, the mean of the
trace probe's dev accuracy (within the grammar) and its novel_dev accuracy (new words) — the two
things γ trades against each other; a tie goes to the smaller γ (nearer the untrained code).  The
report prints every γ's dev numbers (and the probes' penalties), and the choice.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

from bench.structure import seed_list
from ema_core.experiments import build_config
from ema_core.studies.structure.experiment import NGRAM_BASELINE, SPCN_HEADLINE, tune

RULE = ("γ maximising the seeds' mean of ½ (dev accuracy + novel_dev accuracy) of the trace probe; "
        "a tie goes to the smaller γ")


def objective(result: dict) -> float:
    """The rule's score of one seed's tuning result."""
    return 0.5 * (result["dev"][SPCN_HEADLINE] + result["novel_dev"][SPCN_HEADLINE])


def choose(by_gain: dict[float, list[dict]]) -> float:
    """The γ of RULE from {γ: [tune() result per seed]}."""
    scores = {g: float(np.mean([objective(r) for r in rs])) for g, rs in by_gain.items()}
    best = max(scores.values())
    return min(g for g, v in scores.items() if v == best)


def _stat(vals: list[float]) -> dict:
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
            "per_seed": vals}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.structure_tune", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--seeds", default="0-2", help="e.g. 0-2 or 0,2,7")
    ap.add_argument("--grid", default="0,1,2,4,8,16,32", help="context gains γ to try")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    overrides = dict(s.split("=", 1) for s in args.set)
    gains = [float(g) for g in args.grid.split(",")]
    by_gain: dict[float, list[dict]] = {}
    for g in gains:
        for seed in seed_list(args.seeds):
            cfg = build_config("structure", preset=args.preset, overrides={**overrides, "spcn.context_gain": g},
                               seed=seed)
            t0 = time.perf_counter()
            by_gain.setdefault(g, []).append(tune(cfg))
            print(f"γ = {g:g}, seed {seed}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = []
    for g, rs in by_gain.items():
        rows.append({
            "context_gain": g,
            "objective": _stat([objective(r) for r in rs]),
            **{f"{split}/{fs}": _stat([r[split][fs] for r in rs])
               for split in ("dev", "novel_dev") for fs in ("instantaneous", SPCN_HEADLINE, "both", NGRAM_BASELINE)},
            f"novel_dev_structural/{SPCN_HEADLINE}": _stat([r["novel_dev_structural"][SPCN_HEADLINE] for r in rs]),
            "probe_penalty": [r["probe_penalty"] for r in rs],
            "probe_dev_accuracy": [r["probe_dev_accuracy"] for r in rs],
        })
    chosen = choose(by_gain)
    report = {"preset": args.preset, "seeds": seed_list(args.seeds), "set": overrides, "grid": gains, "rule": RULE,
              "chosen_context_gain": chosen, "tuned_on": "dev", "machine": platform.platform(), "rows": rows}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"structure_tune --preset {args.preset} seeds {args.seeds} {overrides or ''}  (dev numbers only)")
        cols = ("objective", f"dev/{SPCN_HEADLINE}", f"novel_dev/{SPCN_HEADLINE}",
                f"novel_dev_structural/{SPCN_HEADLINE}", "dev/instantaneous", f"dev/{NGRAM_BASELINE}",
                f"novel_dev/{NGRAM_BASELINE}")
        print("  γ      " + "  ".join(f"{c:>24s}" for c in cols))
        for r in rows:
            print(f"  {r['context_gain']:<6g} " + "  ".join(
                f"{r[c]['mean']:>15.3f} ± {r[c]['std']:.3f}" for c in cols))
        print(f"rule: {RULE}\nchosen γ = {chosen:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
