"""Context mixers: the hierarchy the boundary study compares, from a fixed window to softmax attention.

This module is their one list, by name, and loads nothing heavy: the study's config, the palette,
the store and the pages read ``MIXER_NAMES`` without torch.  The classes are in
:mod:`ema_core.mixers.registry` (``MIXERS``, built against this list: a name without its class, or
a class whose name is not here, stops the import), the contract in :mod:`ema_core.mixers.base`
(causal (B, T, D) → (B, T, D), a float64 reference loop beside the fast path, the state size).

Bring your own mixer (the README's steps, followed by ``tests/test_boundary_byo.py``): a module
with a :class:`~ema_core.mixers.base.Mixer` subclass (``name``, ``scan``, ``reference``,
``state_floats``; its constructor takes ``(d, seed)``, and any model setting it needs besides,
declared in ``settings``), its name in ``MIXER_NAMES`` below, and its class in the registry's
``CLASSES`` with the line that imports it.
"""
from __future__ import annotations

from typing import Literal

# In the order of the paper's hierarchy: no memory beyond a window, fixed-decay EMA, its sequence,
# learned decay, key–value binding without decay, fixed-decay linear attention, data-dependent decay,
# the delta rule (a write that replaces what its key held), softmax attention.
MIXER_NAMES: tuple[str, ...] = (
    "window_k",
    "ema",
    "ema3",
    "ema3_seq",
    "diag_decay",
    "linear_attn",
    "decay_linear_attn",
    "gated_linear_attn",
    "delta_net",
    "softmax",
)
# A setting that names a mixer takes one of these (the boundary config's ``mixers``).
MixerName = Literal[MIXER_NAMES]

__all__ = ["MIXER_NAMES", "MixerName"]
