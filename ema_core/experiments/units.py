"""The unit of every summary value and logged metric, declared once for the CLI and the pages.

Keys stay as the experiments write them (old run folders and the store keep working); a unit is
shown beside the value instead.  Patterns are ``fnmatch`` patterns over the key, first match wins,
so per-feature-set keys (``final_loss/α=0.5``) share one entry.

    >>> unit_of("final_loss/α=0.5")
    'nats, summed over lags'
    >>> with_unit("val_loss", 4.1234567)
    '4.123 nats/token'
"""
from __future__ import annotations

import math
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

UNITS: dict[str, str] = {
    # dilution: the decoder's loss is the sum over lags of each lag's mean cross-entropy
    "final_loss/*": "nats, summed over lags",
    "loss/*": "nats, summed over lags",
    "acc_lag*": "fraction correct",
    "horizon/*": "lags",
    "analytic_horizon/*": "lags",
    "sigma/*": "trace units, per coordinate",
    "chance": "fraction correct",
    # language models: natural-log cross-entropy per token
    "val_loss": "nats/token",
    "val/loss": "nats/token",
    "train/loss": "nats/token",
    "val_ppl": "exp(nats/token)",
    "val/ppl": "exp(nats/token)",
    "val_bpb": "bits/byte",
    "val/bpb": "bits/byte",
    "tokens_per_s": "tokens/s",
    "tokens": "tokens",
    "val_tokens": "tokens",
    "source_val_loss": "nats/token",
    "train_overlap": "fraction of the characters evaluated",
    "params": "parameters",
    # structure: probe and BiGRU accuracies over words
    "within": "fraction correct",
    "transfer": "fraction correct",
    "deep": "fraction correct",
    "structural_roles*": "fraction correct",
    "agent_det_transfer": "fraction correct",
    "word_majority": "fraction correct",
    "untrained": "fraction correct",
    "selectivity": "accuracy minus control accuracy",
    "selectivity_*": "accuracy minus control accuracy",
    "learning_gain": "accuracy difference (trained − untrained)",
    "traces_minus_ngram": "accuracy difference",
    "dev": "fraction correct",
    "novel_dev": "fraction correct",
    "probe_penalty": "ridge α (logistic: C)",
    "spcn_over_bigru": "ratio",
    "prediction_error_*": "squared error per token",
    "spcn/pred_error": "squared error per token",
    "probe/dev_acc/*": "fraction correct",
    "bigru/dev_acc": "fraction correct",
    "bigru/loss": "nats/word",
    "bigru/dev_loss": "nats/word",
    "bigru_epochs": "epochs",
    # depth: per cell, logged as val_loss/<rule>/<depth> (the summary's map nests the same)
    "val_loss/*": "nats/token",
    "probe_token/*": "fraction correct",
    "probe_early/*": "R² of block 1's write",
    "param_gap": "fraction of the parameters",
    "seconds": "s",
}


@lru_cache(maxsize=4096)
def unit_of(key: str) -> str | None:
    """The unit of a summary or metric key, or None for a count, a name or a setting."""
    return next((unit for pattern, unit in UNITS.items() if fnmatchcase(key, pattern)), None)


def units_for(keys: Any) -> dict[str, str]:
    """``{key: unit}`` for the keys that have one (what ``--json`` output carries beside a summary)."""
    return {k: u for k in keys if (u := unit_of(str(k))) is not None}


def with_unit(key: str, value: Any) -> str:
    """The value as text, with its unit: ``4.123 nats/token``; a nested value is shown as it is."""
    if isinstance(value, float) and math.isfinite(value):
        text = f"{value:.4g}"
    else:
        text = str(value)
    unit = unit_of(str(key))
    return f"{text} {unit}" if unit and value is not None else text
