"""The depth comparison's learning rates: one per (rule, depth), chosen on dev at one budget.

Made by ``python -m bench.depth_lr`` (every rule at every depth of the quick grid, each rate on a ladder
of √2 steps trained to the end and scored on a dev slice cut from the end of the *training* text at
dev seed 0; a winner on the edge of what was tried extends the ladder by a rung; docs/benchmarks.md).
A depth changes where a stack trains stably (the deepest fixed sum cannot rescale its writes, a learned
mix can), so a rate chosen at 8 blocks is not reused at 4 or 16.

A table holds for the settings it was chosen at (``tuned_for``): a config whose ``train.lr`` is "auto"
reads the table whose settings it matches, and is refused when none does, or when that table has no
rate for one of its (rule, depth) cells, rather than trained at some other rate.  ``rates_from`` names a
table to read at another budget on purpose (the long preset reads the quick one's: choosing at 8× the
tokens would cost 8× the sweep); the run records which table it read and whether it matched.
"""
from __future__ import annotations

from typing import Any, Mapping

from ema_core.config import flatten

# The quick budget: 300 steps of 8 × 128 tokens, warm-up 100, cosine to 0.1 × the peak, d = 128, Austen at
# a 4,096-token vocabulary.  Rates from bench.depth_lr's report (docs/benchmarks.md, The depth
# comparison's rates per depth).  ``tuned_for`` records every setting a cell's best rate depends on: the
# body, the data, the budget and the schedule (seeds, workers, the device, the probes and which cells
# run do not count).
TABLES: dict[str, dict[str, Any]] = {
    "quick": {
        "tuned_for": {
            "data.corpus": "austen", "data.val_doc": "persuasion", "data.val_fraction": 0.05, "data.max_docs": None,
            "data.max_chars": None, "data.doc_sep": "blank", "data.tokenizer": "bpe", "data.vocab_size": 4096,
            "model.d_model": 128, "model.n_heads": 4, "model.d_ff": 512, "model.norm": "layernorm",
            "model.dropout": 0.0,
            "train.steps": 300, "train.batch": 8, "train.seq_len": 128, "train.warmup": 100,
            "train.schedule": "cosine", "train.min_lr_frac": 0.1, "train.weight_decay": 0.1, "train.beta2": 0.95,
            "train.grad_clip": 1.0,
        },
        "rates": {
            "sum|4": 0.004,
            "sum|8": 0.004,
            "sum|16": 0.004,
            "static|4": 0.004,
            "static|8": 0.00283,
            "static|16": 0.004,
            "dynamic|4": 0.004,
            "dynamic|8": 0.004,
            "dynamic|16": 0.001,
            "select|4": 0.004,
            "select|8": 0.00566,
            "select|16": 0.00566,
        },
        "source": "python -m bench.depth_lr --seeds 0, then --check-seeds 1 --prior (the search's report)",
    },
}


def differences(table: str, config: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{path: (the table's value, the config's)} for every tuned setting where ``config`` (a model_dump)
    differs from ``table``'s.  A model or data setting the table does not record differs too (a body
    it never saw); ``train.decay_frac`` counts only under the wsd schedule, which alone reads it."""
    tuned = TABLES[table]["tuned_for"]
    flat = flatten(dict(config))
    out = {}
    for path, theirs in tuned.items():
        if path == "train.decay_frac" and flat.get("train.schedule") != "wsd":
            continue
        if flat.get(path) != theirs:
            out[path] = (theirs, flat.get(path))
    if flat.get("train.schedule") == "wsd" and "train.decay_frac" not in tuned:
        out["train.decay_frac"] = (None, flat.get("train.decay_frac"))
    out.update({p: (None, v) for p, v in flat.items() if p.startswith(("model.", "data.")) and p not in tuned})
    return out


def matching_table(config: Mapping[str, Any]) -> str | None:
    """The table whose tuned settings ``config`` (a model_dump) matches, or None."""
    return next((name for name in TABLES if not differences(name, config)), None)


def table_rate(table: str, rule: str, depth: int) -> float | None:
    return TABLES[table]["rates"].get(f"{rule}|{depth}")


def resolve(config: Mapping[str, Any], rules, depths, rates_from: str | None) -> tuple[str, dict[tuple[str, int], float]]:
    """(the table read, {(rule, depth): rate}) for a config whose ``train.lr`` is "auto"; a ValueError
    naming what is missing where no table serves it."""
    if rates_from is not None:
        if rates_from not in TABLES:
            raise ValueError(f"rates_from: no rate table named {rates_from!r} (tables: {', '.join(TABLES)})")
        name = rates_from
    else:
        name = matching_table(config)
        if name is None:
            why = "; ".join(f"{t}: " + ", ".join(f"{p} {theirs!r} there, {mine!r} here"
                                                  for p, (theirs, mine) in list(differences(t, config).items())[:4])
                            for t in TABLES)
            raise ValueError(f"train.lr: auto, but no rates were chosen at this budget ({why}); set train.lr to a "
                             "number, or rates_from to a table's name to read its rates here on purpose")
    missing = [f"{r} at {L} blocks" for r in rules for L in depths if table_rate(name, r, L) is None]
    if missing:
        have = sorted({int(k.split("|")[1]) for k in TABLES[name]["rates"]})
        raise ValueError(f"train.lr: auto, but the {name} table has no rate for {', '.join(missing)} (it holds "
                         f"depths {', '.join(map(str, have)) or 'none'}); choose one with python -m bench.depth_lr, or "
                         "set train.lr to a number")
    return name, {(r, L): table_rate(name, r, L) for r in rules for L in depths}
