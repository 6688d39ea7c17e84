"""The one palette of EMA Lab: the colour of every rate, model, predictor and reference line.

Every chart on every page and every exported figure takes its colours from here, so α = 0.5 or
"SPEN linear" looks the same wherever it is drawn.  A colour belongs to the series itself, never to
its position among the series shown: a chart's colour scale lists only the series present (an absent
one gets no legend entry), each with the colour this module gives it (:func:`scale_range`).

Colours are Tableau-10 hues (Vega's default categorical scheme), which stay apart for the common
kinds of colour blindness and in greyscale print better than a rainbow.
"""
from __future__ import annotations

import math
import zlib
from typing import Callable, Iterable

from ema_core.mixers import MIXER_NAMES

# -- rates (α of an EMA trace) -----------------------------------------------------------------------
# The paper's three rates first (fast, medium, slow: blue, orange, green), then the rest of the
# dilution sweep's grid and α = 1 (no memory).
RATE_COLORS: dict[float, str] = {
    0.5: "#4c78a8", 0.1: "#f58518", 0.02: "#54a24b",
    0.3: "#e45756", 0.2: "#72b7b2", 0.05: "#b279a2", 0.01: "#eeca3b", 1.0: "#9d755d",
}
ALL_RATES_COLOR = "#333333"  # the decoder that reads every rate at once
# Any other rate (the explorer's sliders reach every α in [0.001, 1]) gets a colour from its value:
# a dark-to-light ramp over log α, so two rates far apart are told apart and one rate is always the
# same colour.  (Viridis, without its pale yellow end, which vanishes on white.)
_RAMP = ("#440154", "#482878", "#3e4a89", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b")
_RAMP_LOG10 = (-3.0, 0.0)


def rate_color(alpha: float) -> str:
    """The colour of the rate ``alpha``: fixed for the paper's and the sweep's rates, else from the ramp."""
    a = float(alpha)
    for known, color in RATE_COLORS.items():
        if math.isclose(a, known, rel_tol=1e-9):
            return color
    lo, hi = _RAMP_LOG10
    t = (min(max(math.log10(a), lo), hi) - lo) / (hi - lo) if a > 0 else 0.0
    return _RAMP[round(t * (len(_RAMP) - 1))]


# -- models and baselines ----------------------------------------------------------------------------
# The structure study: what a probe reads (the store's feature sets), and the probe-control conditions.
PROBE_COLORS: dict[str, str] = {
    "instantaneous": "#9ecae9", "traces": "#4c78a8", "both": "#72b7b2", "bigru": "#f58518",
    "ngram": "#54a24b",  # the n-gram window baseline (no EMA)
}
CONDITION_COLORS: dict[str, str] = {"trained": "#4c78a8", "untrained": "#bab0ac", "control": "#e45756",
                                    "control_prev": "#ff9d98", "control_pos": "#b279a2"}
# The content study: (model, predictor, attention input).  A GPT carries the predictor and input of
# the SPEN it was sized to (the launch form's GPT is sized to SPEN linear).  An attention predictor
# reading past trace states is the lighter shade of the same predictor reading the current state.
GPT_COLOR = "#333333"
# Each variant's label and colour, in the order the pages list them.
LM_VARIANTS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("gpt", "linear", "state"): ("GPT", GPT_COLOR),
    ("spen", "linear", "state"): ("SPEN linear", "#4c78a8"),
    ("spen", "linear_attention", "state"): ("SPEN linear attention (state)", "#f58518"),
    ("spen", "linear_attention", "sequence"): ("SPEN linear attention (sequence)", "#ffbf79"),
    ("spen", "linear_attention", "tokens"): ("SPEN linear attention (tokens)", "#e45756"),
    ("spen", "softmax_attention", "state"): ("SPEN softmax attention (state)", "#54a24b"),
    ("spen", "softmax_attention", "sequence"): ("SPEN softmax attention (sequence)", "#9be28f"),
    ("spen", "softmax_attention", "tokens"): ("SPEN softmax attention (tokens)", "#b279a2"),
}
# The pools of held-out tokens SPEN's gap to the GPT is followed in over training (the keys of
# content_findings.GROWTH_POOLS): every token in SPEN linear's blue, recall tokens apart from it.
TOKEN_POOL_COLORS: dict[str, str] = {"all": "#4c78a8", "recall": "#f58518"}
OTHER_COLOR = "#9d755d"  # a series this palette does not know (a new variant, a renamed feature set)
REFERENCE_COLOR = "#888888"  # reference lines: chance

# The boundary study: the colour of each context mixer, by name.  The window (no memory past its
# width) is the floor every other mixer is read against: a warm grey, darker than the chance lines'
# neutral grey so the two never read as one.  The EMA family takes the cool hues, the learned and
# data-dependent recurrences the warm ones, softmax attention red.
_MIXER_HUES = {
    "window_k": "#79706e", "ema": "#4c78a8", "ema3": "#72b7b2", "ema3_seq": "#54a24b",
    "diag_decay": "#b279a2", "decay_linear_attn": "#f58518", "gated_linear_attn": "#ff9da6",
    "softmax": "#e45756",
}
# A mixer without a hue above (a researcher's own) gets one of these, picked by a checksum of its
# name, so it keeps its colour across charts, pages and server restarts (Python's hash() does not).
_EXTRA_MIXER_COLORS = ("#9d755d", "#eeca3b", "#9ecae9", "#ffbf79", "#8cd17d", "#d6a5c9")
# The boundary map's heat scale over accuracy above chance (0 at chance, 1 perfect, below 0 worse than
# chance): red below, a pale neutral at chance, blue toward perfect.
ABOVE_CHANCE_COLORS = ("#e45756", "#f2f2f2", "#4c78a8")


def lm_variant_color(model: str, predictor: str, attn_input: str) -> str:
    return LM_VARIANTS.get((model, predictor, attn_input), ("", OTHER_COLOR))[1]


def mixer_color(name: str) -> str:
    """The colour of the context mixer ``name``: fixed for the built-in ones, stable for any other."""
    if name in _MIXER_HUES:
        return _MIXER_HUES[name]
    return _EXTRA_MIXER_COLORS[zlib.crc32(str(name).encode()) % len(_EXTRA_MIXER_COLORS)]


# Every mixer of ema_core.mixers.MIXER_NAMES with its colour, in the hierarchy's order: keyed from the
# one list of names, so it holds exactly the mixers there are.
MIXER_COLORS: dict[str, str] = {name: mixer_color(name) for name in MIXER_NAMES}


def scale_range(domain: Iterable[str], color_of: Callable[[str], str]) -> list[str]:
    """The colours of ``domain``'s series, each its own whatever else is shown."""
    return [color_of(name) for name in domain]
