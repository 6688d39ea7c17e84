"""Dilution in depth: what a residual stream keeps of each layer's write, by how it adds them up.

The paper's second axis.  In time, an EMA trace adds every token with a fixed weight; in depth, a
pre-norm residual stream adds every layer's write with weight 1.  The rules compared here, declared
once (the explorer, the trained comparison, the store, the page and the palette read these names):

* ``sum``    — the standard pre-norm residual: the stream after block i is the block's output, the
  sum of the embedding and every write so far, each with weight 1 (fixed accumulation);
* ``decay``  — fixed decay over depth (the explorer only): each earlier write shrinks by γ per layer,
  the depth counterpart of an EMA trace;
* ``static`` — DenseFormer's depth-weighted average (arXiv 2402.02622): after block i, the stream is
  a learned, input-independent weighting of the embedding and every block output so far;
* ``dynamic`` — ``static``'s weights plus an unnormalised, zero-initialised increment per token read
  from the current block's output (MUDDFormer's static-plus-dynamic form in its simplest shape): it
  differs from ``static`` only in reading the token;
* ``select`` — an input-dependent mix over the same outputs: a per-token softmax over them whose
  logits are read from the current block's output (a convex variant of the same).

This package holds the science (``residual``: the trained models' rules, each with a float64
reference; ``explorer``: the analytic and measured stack of writes).  Nothing here imports the
store, the job runner or Streamlit.
"""
from __future__ import annotations

from typing import Literal, get_args

# The rules a model is trained with, in the paper's predicted order (worst first; the paper does not
# order its two input-dependent forms, dynamic and select, against each other).
Rule = Literal["sum", "static", "dynamic", "select"]
RULES: tuple[str, ...] = get_args(Rule)
# The explorer adds fixed decay over depth: analytic, no training needed to see it.
ExplorerRule = Literal["sum", "decay", "static", "select"]
EXPLORER_RULES: tuple[str, ...] = get_args(ExplorerRule)
RULE_LABELS: dict[str, str] = {
    "sum": "fixed sum (pre-norm residual)",
    "decay": "fixed decay over depth",
    "static": "static learned weights (DenseFormer)",
    "dynamic": "static + input-dependent increment",
    "select": "input-dependent selection",
}
# Every rule either part names (the trained ones and the explorer's), in the order charts list them.
ALL_RULES: tuple[str, ...] = tuple(RULE_LABELS)
