"""The structure experiment over seeds: the figures behind docs/benchmarks.md.

    python -m bench.structure [--preset paper] [--seeds 0-4] [--set key=value ...] [--json]

Runs the ``structure`` kind in this process for each seed (the same code a job runs) and prints
each headline figure as mean ± std across seeds, with the per-seed values.  ``--set`` changes a
setting for every seed (an ablation: ``--set context_gain=0``).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

from ema_core.experiments import REGISTRY, NullReporter, build_config

# (label, path into the summary): the rows of the printed table, the paper's comparisons first.
FIGURES = (
    ("within: instantaneous", ("within", "instantaneous")),
    ("within: traces", ("within", "traces")),
    ("within: both", ("within", "both")),
    ("within: BiGRU", ("within", "bigru")),
    ("within: word identity (majority role)", ("word_majority",)),
    ("SPCN traces / BiGRU (within)", ("spcn_over_bigru",)),
    ("structural roles within: SPCN", ("structural_roles_within", "spcn")),
    ("structural roles within: BiGRU", ("structural_roles_within", "bigru")),
    ("novel: traces", ("transfer", "traces")),
    ("novel: both", ("transfer", "both")),
    ("novel: BiGRU", ("transfer", "bigru")),
    ("novel structural roles: SPCN", ("structural_roles", "spcn")),
    ("novel structural roles: BiGRU", ("structural_roles", "bigru")),
    ("novel agent_det: SPCN", ("agent_det_transfer", "spcn")),
    ("novel agent_det: BiGRU", ("agent_det_transfer", "bigru")),
    ("deep: traces", ("deep", "traces")),
    ("deep: both", ("deep", "both")),
    ("deep: BiGRU", ("deep", "bigru")),
    ("untrained SPCN within: instantaneous", ("untrained", "instantaneous")),
    ("untrained SPCN within: traces", ("untrained", "traces")),
    ("selectivity: traces", ("selectivity", "traces")),
    ("prediction error: untrained", ("prediction_error_untrained",)),
    ("prediction error: trained", ("prediction_error_trained",)),
    ("seconds per seed", ("seconds",)),
)


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def _get(summary: dict, path: tuple[str, ...]):
    for key in path:
        summary = summary.get(key) if isinstance(summary, dict) else None
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.structure", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2,7")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    overrides = dict(s.split("=", 1) for s in args.set)
    summaries = []
    for seed in _seeds(args.seeds):
        cfg = build_config("structure", preset=args.preset, overrides=overrides, seed=seed)
        t0 = time.perf_counter()
        summaries.append(REGISTRY["structure"].run(cfg, NullReporter())["summary"])
        print(f"seed {seed}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = []
    for label, path in FIGURES:
        vals = [_get(s, path) for s in summaries]
        vals = [float(v) for v in vals if v is not None]
        if vals:
            rows.append({"figure": label, "mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
                         "per_seed": vals})
    report = {"preset": args.preset, "seeds": _seeds(args.seeds), "set": overrides, "machine": platform.platform(),
              "figures": rows}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"structure --preset {args.preset} seeds {args.seeds} {overrides or ''}")
        for r in rows:
            print(f"  {r['figure']:40s} {r['mean']:.3f} ± {r['std']:.3f}   " + " ".join(f"{v:.3f}" for v in r["per_seed"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
