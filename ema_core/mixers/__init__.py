"""Context mixers: the hierarchy the boundary study compares, from a fixed window to softmax attention.

The contract is in :mod:`ema_core.mixers.base` (causal (B, T, D) → (B, T, D), a float64 reference
loop beside the fast path, the state size).  ``MIXERS`` is the one list of them: the study, the
page and the exports read it.

Bring your own mixer: a module with a :class:`~ema_core.mixers.base.Mixer` subclass (``scan``,
``reference``, ``state_floats``; its constructor takes ``(d, seed)``) and one line in ``MIXERS``;
``tests/test_mixers.py`` then checks it against its reference, for gradients and for exact
causality, with every other mixer.
"""
from __future__ import annotations

from ema_core.mixers.attention import Softmax, Window
from ema_core.mixers.base import Mixer
from ema_core.mixers.ema import EMA, EMA3, EMA3Seq
from ema_core.mixers.recurrent import DecayLinearAttention, DiagDecay, GatedLinearAttention

# In the order of the paper's hierarchy: no memory beyond a window, fixed-decay EMA, its sequence,
# learned decay, fixed-decay linear attention, data-dependent decay, softmax attention.
MIXERS: dict[str, type[Mixer]] = {
    "window_k": Window,
    "ema": EMA,
    "ema3": EMA3,
    "ema3_seq": EMA3Seq,
    "diag_decay": DiagDecay,
    "decay_linear_attn": DecayLinearAttention,
    "gated_linear_attn": GatedLinearAttention,
    "softmax": Softmax,
}


def build_mixer(name: str, d: int, seed: int = 0, **options) -> Mixer:
    """The mixer ``name`` of width ``d``, initialised from ``seed``; ``options`` go to its constructor."""
    if name not in MIXERS:
        raise ValueError(f"unknown mixer {name!r}; mixers: {', '.join(MIXERS)}")
    return MIXERS[name](d, seed=seed, **options)


__all__ = ["MIXERS", "Mixer", "build_mixer"]
