"""Each language model's learning rate where a config asks for ``train.lr=auto``.

Chosen on a dev slice of the training text (the last 65,536 training tokens; never the held-out
text) by ``bench/lm_lr.py``, lowest dev loss (docs/benchmarks.md): at tiny on Austen at the quick
budget (300 steps, warm-up 30, mean over seeds 0 and 1); at micro on the free-prose corpus at its
own fresh budget (the ``fresh_micro`` preset: 1,728 wsd steps, warm-up 70, seed 0), rates 1e-3 to
3e-2.  By size, since that is what each sweep fixed.  The
config keeps "auto" (so SPEN and the GPT, each at its own rate, are one comparable setting); the run
trains at :func:`resolve_lr`'s number and records it in its summary.  A (model, size) with no chosen
rate is refused when the config is built rather than trained at some other rate.
"""
from __future__ import annotations

from typing import Literal

Auto = Literal["auto"]
AUTO: Auto = "auto"
AUTO_LR: dict[str, dict[str, float]] = {"micro": {"spen": 3e-3, "gpt": 3e-3}, "tiny": {"spen": 1e-2, "gpt": 3e-3}}


def resolve_lr(model: str, size: str, lr: float | str) -> float:
    """The peak rate a run trains at: ``lr`` itself, or for "auto" the rate chosen for ``model`` at ``size``.

    >>> resolve_lr("gpt", "tiny", "auto"), resolve_lr("gpt", "paper", 6e-4)
    (0.003, 0.0006)
    """
    if lr != AUTO:
        return float(lr)
    chosen = AUTO_LR.get(size, {})
    if model not in chosen:
        where = "; ".join(f"size {s}: {', '.join(by_model)}" for s, by_model in AUTO_LR.items())
        raise ValueError(f"train.lr: auto, but no rate was chosen for model {model} at size {size} (rates are chosen for "
                         f"{where}); set train.lr to a number")
    return chosen[model]
