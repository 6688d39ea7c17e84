"""The content study's learning rates: each language model's peak rate where a config says ``train.lr=auto``.

Chosen on a dev slice of the training text (its last 65,536 tokens; never the held-out text) by
``python -m bench.lm_lr``, lowest dev loss (docs/benchmarks.md, Content): at tiny on Austen at the quick
budget (mean over seeds 0 and 1), at micro on the free-prose corpus at its own fresh budget (seed 0).
A rate is per model, and a table per size: the rates bind by size alone, so the longer budgets at tiny
(``long``, ``fresh``) read the quick budget's rates; each run records the table it read and that it was
not chosen at its settings (docs/decisions.md, Learning rate and warm-up).  A size with no table, or a
model a table has no rate for, is refused when the config is built rather than trained at another rate.
The config keeps "auto" (SPEN and the GPT, each at its own rate, are one comparable setting).
"""
from __future__ import annotations

from ema_core.learning_rates import RateTable

SWEEP = "python -m bench.lm_lr"

TABLES: tuple[RateTable, ...] = (
    # The rates were swept at warm-up 30, then the warm-up at these rates (both chose 200 of the 300
    # steps, the quick preset's): no one warm-up is what the rates were chosen at, so none is recorded.
    RateTable(
        name="tiny", cell=("model",), rates={"spen": 1e-2, "gpt": 3e-3},
        tuned_for={"size": "tiny", "data.corpus": "austen", "data.vocab_size": 4096, "train.steps": 300,
                   "train.batch": 8, "train.seq_len": 256, "train.schedule": "cosine"},
        sweep=SWEEP, binding=("size",), budget="300 cosine steps of 8 × 256 tokens on Austen",
        source=f"{SWEEP} --preset quick --models spen,gpt --lrs 1e-3,3e-3,1e-2 --warmups 30 --seeds 0,1"),
    RateTable(
        name="micro", cell=("model",), rates={"spen": 3e-3, "gpt": 3e-3},
        tuned_for={"size": "micro", "data.corpus": "free_prose", "data.vocab_size": 4096, "train.steps": 1728,
                   "train.batch": 8, "train.seq_len": 256, "train.schedule": "wsd", "train.decay_frac": 0.2,
                   "train.warmup": 70},
        sweep=SWEEP, binding=("size",), budget="1,728 wsd steps of 8 × 256 tokens on free prose",
        source=f"{SWEEP} --preset fresh_micro --models spen|gpt --lrs 1e-3,3e-3,1e-2,3e-2 --warmups 70 --seeds 0"),
)
