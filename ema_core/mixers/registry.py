"""The mixers' classes by name, ``MIXERS``, in the order of :data:`ema_core.mixers.MIXER_NAMES`.

    >>> mixer = build_mixer("window_k", d=32, seed=0, k=4)
    >>> net_options = mixer_options("window_k", cfg.model)   # {"k": cfg.model.window}: what it declares

Each class says its own name (:attr:`Mixer.name`) and the model settings its constructor takes
(:attr:`Mixer.settings`), so code that builds a mixer never asks which one it is.  ``MIXERS`` is
built against the list of names: a name without a class here, or a class whose name is not there,
stops this import with a message that says which.
"""
from __future__ import annotations

from typing import Any

from ema_core.mixers import MIXER_NAMES
from ema_core.mixers.attention import Softmax, Window
from ema_core.mixers.base import Mixer
from ema_core.mixers.delta import DeltaNet
from ema_core.mixers.ema import EMA, EMA3, EMA3Seq
from ema_core.mixers.recurrent import DecayLinearAttention, DiagDecay, GatedLinearAttention, LinearAttention

# Every mixer class, in any order (MIXER_NAMES gives the order).
CLASSES: tuple[type[Mixer], ...] = (
    Window,
    EMA,
    EMA3,
    EMA3Seq,
    DiagDecay,
    LinearAttention,
    DecayLinearAttention,
    GatedLinearAttention,
    DeltaNet,
    Softmax,
)


def by_name(classes: tuple[type[Mixer], ...], names: tuple[str, ...]) -> dict[str, type[Mixer]]:
    """``classes`` keyed by their names, in the order of ``names``; each name must have one class, and
    each class a name of ``names``."""
    found = {cls.name: cls for cls in classes}
    if len(found) != len(classes):
        raise ValueError(f"two mixer classes share a name: {sorted(cls.name for cls in classes)}")
    no_class = [n for n in names if n not in found]
    unlisted = [n for n in found if n not in names]
    if no_class or unlisted:
        raise ValueError("the mixers' names (ema_core/mixers/__init__.py, MIXER_NAMES) and classes "
                         "(ema_core/mixers/registry.py, CLASSES) differ: "
                         + "; ".join([*(f"{n!r} has no class" for n in no_class),
                                      *(f"{n!r} is not in MIXER_NAMES" for n in unlisted)]))
    return {n: found[n] for n in names}


MIXERS: dict[str, type[Mixer]] = by_name(CLASSES, MIXER_NAMES)


def mixer_class(name: str) -> type[Mixer]:
    if name not in MIXERS:
        raise ValueError(f"unknown mixer {name!r}; mixers: {', '.join(MIXERS)}")
    return MIXERS[name]


def build_mixer(name: str, d: int, seed: int = 0, **options: Any) -> Mixer:
    """The mixer ``name`` of width ``d``, initialised from ``seed``; ``options`` go to its constructor."""
    return mixer_class(name)(d, seed=seed, **options)


def mixer_options(name: str, settings: Any) -> dict[str, Any]:
    """The constructor options of mixer ``name``: each model setting its class declares
    (:attr:`Mixer.settings`), read from ``settings`` (a config with those fields)."""
    return {arg: getattr(settings, setting) for arg, setting in mixer_class(name).settings.items()}


__all__ = ["CLASSES", "MIXERS", "Mixer", "build_mixer", "by_name", "mixer_class", "mixer_options"]
