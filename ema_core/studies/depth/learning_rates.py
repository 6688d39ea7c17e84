"""The depth comparison's learning rates: one per (rule, depth), chosen on dev at one budget.

Made by ``python -m bench.depth_lr`` (every rule at every depth of the quick grid, each rate on a ladder
of √2 steps trained to the end and scored on a dev slice cut from the end of the *training* text at
dev seed 0; a winner on the edge of what was tried extends the ladder by a rung; docs/benchmarks.md).
A depth changes where a stack trains stably (the deepest fixed sum cannot rescale its writes, a learned
mix can), so a rate chosen at 8 blocks is not reused at 4 or 16.

A table holds for the settings it was chosen at (``tuned_for``, every one binding, and a model or data
setting it does not record differs too): a config whose ``train.lr`` is "auto" reads the table whose
settings it matches, and is refused when none does, or when that table has no rate for one of its
(rule, depth) cells, rather than trained at some other rate (:func:`ema_core.learning_rates.resolve`).
``rates_from`` names a table to read at another budget on purpose (the long preset reads the quick
one's: choosing at 8× the tokens would cost 8× the sweep); the run records which table it read and
whether it matched.
"""
from __future__ import annotations

from ema_core.learning_rates import RateTable

SWEEP = "python -m bench.depth_lr"

# The quick budget: 300 steps of 8 × 128 tokens, warm-up 100, cosine to 0.1 × the peak, d = 128, Austen at
# a 4,096-token vocabulary.  Rates from bench.depth_lr's report (docs/benchmarks.md, The depth
# comparison's rates per depth).  ``tuned_for`` records every setting a cell's best rate depends on: the
# body, the data, the budget and the schedule (seeds, workers, the device, the probes and which cells
# run do not count).
TABLES: tuple[RateTable, ...] = (
    RateTable(
        name="quick", cell=("rule", "depth"), sweep=SWEEP, unrecorded=("model.", "data."),
        budget="300 cosine steps of 8 × 128 tokens",
        source=f"{SWEEP} --seeds 0, then --check-seeds 1 --prior (the search's report)",
        tuned_for={
            "data.corpus": "austen", "data.val_doc": "persuasion", "data.val_fraction": 0.05, "data.max_docs": None,
            "data.max_chars": None, "data.doc_sep": "blank", "data.tokenizer": "bpe", "data.vocab_size": 4096,
            "model.d_model": 128, "model.n_heads": 4, "model.d_ff": 512, "model.norm": "layernorm",
            "model.dropout": 0.0,
            "train.steps": 300, "train.batch": 8, "train.seq_len": 128, "train.warmup": 100,
            "train.schedule": "cosine", "train.min_lr_frac": 0.1, "train.weight_decay": 0.1, "train.beta2": 0.95,
            "train.grad_clip": 1.0,
        },
        rates={
            "sum|4": 0.004, "sum|8": 0.004, "sum|16": 0.004,
            "static|4": 0.004, "static|8": 0.00283, "static|16": 0.004,
            "dynamic|4": 0.004, "dynamic|8": 0.004, "dynamic|16": 0.001,
            "select|4": 0.004, "select|8": 0.00566, "select|16": 0.00566,
        },
    ),
)
