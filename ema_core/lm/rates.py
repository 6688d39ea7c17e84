"""Each language model's learning rate where a preset asks for ``train.lr=auto``.

Chosen on a dev slice of the training text (the last 65,536 training tokens; never the held-out
text) by ``bench/lm_lr.py`` at the quick budget (size tiny, 300 steps, warm-up 30), lowest mean dev
loss over seeds 0 and 1 (docs/benchmarks.md).  By size, since that is what the sweep fixed; a size
not here keeps TrainConfig's rate.  A module of its own, importing nothing, because the store reads it
too (a run at its model's chosen rate compares with the other model at its own).
"""
from __future__ import annotations

AUTO_LR: dict[str, dict[str, float]] = {"tiny": {"spen": 1e-2, "gpt": 3e-3}}
AUTO = "auto"
