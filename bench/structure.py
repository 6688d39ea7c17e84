"""The structure experiment over seeds: the figures behind docs/benchmarks.md.

    python -m bench.structure [--preset paper] [--seeds 0-4] [--set key=value ...] [--json]

Runs the ``structure`` kind in this process for each seed (the same code a job runs) and prints
each headline figure as mean ± std across seeds, with the per-seed values, then the paper's claims
judged and the findings stated by the rule the Structure page states (``ema_core.studies.structure.findings``).
``--set`` changes a setting for every seed (an ablation: ``--set context_gain=0``).  Settings are
chosen on dev numbers only, by ``python -m bench.structure_tune``; this script reports the scored splits.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

import numpy as np

from ema_core.experiments import REGISTRY, NullReporter, build_config
from ema_core.studies.structure.findings import VERDICT_RULE, claim_measures, claim_verdicts, findings, pair_stats, spread

# (label, path into the summary): the rows of the printed table, the paper's comparisons first.
FIGURES = (
    ("within: instantaneous", ("within", "instantaneous")),
    ("within: traces", ("within", "traces")),
    ("within: both", ("within", "both")),
    ("within: BiGRU", ("within", "bigru")),
    ("within: n-gram window (3 words + position)", ("within", "ngram")),
    ("within: n-gram window (1 word + position)", ("within", "ngram1")),
    ("within: n-gram window (2 words + position)", ("within", "ngram2")),
    ("within: word identity (majority role)", ("word_majority",)),
    ("SPCN traces / BiGRU (within)", ("spcn_over_bigru",)),
    ("structural roles within: SPCN", ("structural_roles_within", "spcn")),
    ("structural roles within: BiGRU", ("structural_roles_within", "bigru")),
    ("novel: traces", ("transfer", "traces")),
    ("novel: both", ("transfer", "both")),
    ("novel: BiGRU", ("transfer", "bigru")),
    ("novel: n-gram window", ("transfer", "ngram")),
    ("novel structural roles: SPCN", ("structural_roles", "spcn")),
    ("novel structural roles: BiGRU", ("structural_roles", "bigru")),
    ("novel agent_det: SPCN", ("agent_det_transfer", "spcn")),
    ("novel agent_det: BiGRU", ("agent_det_transfer", "bigru")),
    ("deep: traces", ("deep", "traces")),
    ("deep: both", ("deep", "both")),
    ("deep: BiGRU", ("deep", "bigru")),
    ("deep: n-gram window", ("deep", "ngram")),
    ("novel structural roles: n-gram window", ("structural_roles", "ngram")),
    ("untrained SPCN within: instantaneous", ("untrained", "instantaneous")),
    ("untrained SPCN within: traces", ("untrained", "traces")),
    ("learning gain (traces − untrained traces): within", ("learning_gain", "test")),
    ("learning gain: novel", ("learning_gain", "novel")),
    ("learning gain: deep", ("learning_gain", "deep")),
    ("traces − n-gram window: within", ("traces_minus_ngram", "test")),
    ("traces − n-gram window: novel", ("traces_minus_ngram", "novel")),
    ("traces − n-gram window: deep", ("traces_minus_ngram", "deep")),
    ("selectivity, word control: traces", ("selectivity", "traces")),
    ("selectivity, word × prev. category control: traces", ("selectivity_prev", "traces")),
    ("selectivity, word × position control: traces", ("selectivity_pos", "traces")),
    ("selectivity, word control: n-gram window", ("selectivity", "ngram")),
    ("selectivity, word × prev. category control: n-gram window", ("selectivity_prev", "ngram")),
    ("selectivity, word × position control: n-gram window", ("selectivity_pos", "ngram")),
    ("dev (tuning): traces", ("dev", "traces")),
    ("dev (tuning): n-gram window", ("dev", "ngram")),
    ("novel_dev (tuning pool): traces", ("novel_dev", "traces")),
    ("novel_dev (tuning pool): BiGRU", ("novel_dev", "bigru")),
    ("prediction error: untrained", ("prediction_error_untrained",)),
    ("prediction error: trained", ("prediction_error_trained",)),
    ("seconds per seed", ("seconds",)),
)


def seed_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None  # JSON has no NaN: one seed has no std


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
    summaries, tables = [], []
    for seed in seed_list(args.seeds):
        cfg = build_config("structure", preset=args.preset, overrides=overrides, seed=seed)
        t0 = time.perf_counter()
        result = REGISTRY["structure"].run(cfg, NullReporter())
        summaries.append(result["summary"])
        tables.append(result["tables"]["probe_accuracy"])
        print(f"seed {seed}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = []
    for label, path in FIGURES:
        vals = [_get(s, path) for s in summaries]
        vals = [float(v) for v in vals if v is not None]
        if vals:
            rows.append({"figure": label, "mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
                         "per_seed": vals})
    # The paper's claims and the findings, by the rule the page states (ema_core.studies.structure.findings).
    measures = [claim_measures(s) for s in summaries]
    claims = claim_verdicts({m: spread(v[m] for v in measures) for m in measures[0]}) if measures else []
    stated = findings(pair_stats(tables))
    report = {"preset": args.preset, "seeds": seed_list(args.seeds), "set": overrides, "machine": platform.platform(),
              "figures": rows, "tuned_on": "dev", "rule": VERDICT_RULE,
              "claims": [{"claim": c.claim.what, "measure": c.claim.measure, "delta_mean": _finite(c.delta.mean),
                          "delta_std": _finite(c.delta.std), "seeds": c.delta.n, "verdict": c.word} for c in claims],
              "findings": [f.sentence for f in stated],
              "probe_penalty": [s.get("probe_penalty") for s in summaries]}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"structure --preset {args.preset} seeds {args.seeds} {overrides or ''}")
        for r in rows:
            print(f"  {r['figure']:58s} {r['mean']:.3f} ± {r['std']:.3f}   " + " ".join(f"{v:.3f}" for v in r["per_seed"]))
        print("claims:")
        for c in claims:
            print(f"  {c.sentence}")
        print("findings:")
        for f in stated:
            print(f"  {f.sentence}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
