"""The one palette of EMA Lab: the colour of every rate, model, predictor, mixer and reference line.

Every chart on every page and every exported figure takes its colours from here, by key, so a
series looks the same wherever it is drawn.  A colour belongs to what the series *stands for*, never
to its position among the series shown: a chart's colour scale lists only the series present (an
absent one gets no legend entry), each with the colour this module gives it (:func:`scale_range`),
so a filter, a slider or another run never recolours one.

Three families, so that one hue never means two unrelated things:

- **Mechanisms** (how a model keeps its context) take Tableau-10 hues, one family each, on every page:
  a fixed window grey, the fixed-decay EMA traces the cool hues (blue, teal, green), a learned
  recurrence purple, linear attention orange (pink where the input sets how its state changes: the
  gate, and a deeper pink for the delta rule), softmax attention red.  The
  boundary map's mixers, the content study's predictors and the structure study's feature sets are
  the same mechanisms, so they share these hues: softmax attention is the same red on the Boundary
  map and on Content.
- **Rates** (α of a trace, a learning rate) are ordered quantities: a dark-to-light ramp (viridis,
  without its pale end), which no mechanism uses, so a rate never reads as a model.
- **Everything else** (probe-control conditions, pools of tokens, reference lines) takes the hues no
  mechanism uses (gold, brown, greys), named here once.

Tableau hues stay apart for the common kinds of colour blindness and print better in greyscale than
a rainbow; viridis is monotone in lightness, so rates are told apart in greyscale too.
"""
from __future__ import annotations

import math
import zlib
from typing import Callable, Iterable

from ema_core.config import PAPER_ALPHAS
from ema_core.depth import ALL_RULES
from ema_core.mixers import MIXER_NAMES

# -- neutrals ----------------------------------------------------------------------------------------
# The one near-black: the series everything else is read against (the GPT baseline; the decoder that
# reads every rate at once).  Greys below it are references, never series.
BASELINE_COLOR = "#333333"
REFERENCE_COLOR = "#888888"  # reference lines: chance, the recall bar, the paper's point
TEXT_COLOR = "#222222"  # text and error bars drawn on a chart, and text on a light cell
TEXT_ON_DARK = "#ffffff"  # text on a dark cell, and the white gaps between the map's cells
OTHER_COLOR = "#d67195"  # a series this palette does not know (a new variant, a renamed feature set)

# -- mechanisms --------------------------------------------------------------------------------------
# One hue family per way of keeping context.  The structure and content studies' models are drawn in
# the hue of the mechanism they rest on, so each mechanism has one colour on every page.
WINDOW = "#79706e"  # a fixed window, nothing past it: darker than the reference grey, so never read as chance
EMA = "#4c78a8"  # fixed-decay EMA traces read as they are
EMA_LIGHT = "#9ecae9"  # the same network without its traces (SPCN's instantaneous activations)
EMA_DARK = "#2e5a87"  # traces and activations together
EMA_MULTI = "#72b7b2"  # several rates at once
EMA_SEQUENCE = "#54a24b"  # a sequence of trace states
LEARNED = "#b279a2"  # a learned recurrence (a learned decay; the BiGRU)
LINEAR_ATTENTION = ("#f58518", "#ffbf79", "#b5560b")  # on the state; on past states (lighter); on raw tokens (darker)
GATED_ATTENTION = "#ff9da6"  # linear attention with a data-dependent gate: between linear and softmax
# The delta rule: its write erases along the key before adding (an input-set transition, as the gate's,
# but not diagonal), so a deeper pink, darker than OTHER_COLOR's so an unknown series is not read as it.
DELTA_RULE = "#a93a73"
SOFTMAX_ATTENTION = ("#e45756", "#ff9d98", "#a3302f")  # likewise, shade by shade

# The boundary study: the colour of each context mixer, by name, in the hierarchy's order.
# Plain linear attention (no decay) takes the family's lighter shade, the content study's linear attention
# over a sequence of past states: the same mechanism (φ = elu + 1, a normaliser, nothing decays).
_MIXER_HUES = {
    "window_k": WINDOW, "ema": EMA, "ema3": EMA_MULTI, "ema3_seq": EMA_SEQUENCE, "diag_decay": LEARNED,
    "linear_attn": LINEAR_ATTENTION[1], "decay_linear_attn": LINEAR_ATTENTION[0],
    "gated_linear_attn": GATED_ATTENTION, "delta_net": DELTA_RULE, "softmax": SOFTMAX_ATTENTION[0],
}
# A mixer without a hue above (a researcher's own) gets one of these, picked by a checksum of its
# name, so it keeps its colour across charts, pages and server restarts (Python's hash() does not).
# None of them is a mechanism's hue above.
_EXTRA_MIXER_COLORS = ("#9d755d", "#eeca3b", "#d6a5c9", "#8cd17d", "#83bcb6", "#d8b5a5")

# The depth study's rules (ema_core.depth.ALL_RULES), in the hue of the mechanism each is: a fixed
# sum is fixed accumulation, the depth twin of an EMA trace (the EMA blue); fixed decay over depth a
# cooler EMA hue; DenseFormer's static weights are learned (the learned purple); input-dependent
# selection is what softmax attention does (its red); static weights moved per token by an unnormalised
# increment are a data-dependent gate over a fixed form (the gated attention's pink).
_DEPTH_RULE_HUES = {"sum": EMA, "decay": EMA_MULTI, "static": LEARNED, "dynamic": GATED_ATTENTION,
                    "select": SOFTMAX_ATTENTION[0]}
# Keyed from the one list of rules, so it holds exactly the rules there are.
DEPTH_RULE_COLORS: dict[str, str] = {rule: _DEPTH_RULE_HUES[rule] for rule in ALL_RULES}

# The structure study: what a probe reads (the store's feature sets).  SPCN's traces are EMA traces,
# the n-gram window is a fixed window, the BiGRU a learned recurrence.
PROBE_COLORS: dict[str, str] = {
    "instantaneous": EMA_LIGHT, "traces": EMA, "both": EMA_DARK, "ngram": WINDOW, "bigru": LEARNED,
}
# The probe-control conditions are no mechanism: gold for the real task, a grey for the untrained
# network (nothing learned), browns for the three control tasks (random labels, near chance).
CONDITION_COLORS: dict[str, str] = {"trained": "#b79a20", "untrained": "#bab0ac", "control": "#9d755d",
                                    "control_prev": "#d8b5a5", "control_pos": "#5e4534"}

# The content study: (model, predictor, attention input) -> (label, colour), in the order the pages
# list them.  SPEN linear reads its EMA traces alone (the EMA blue); an attention predictor takes the
# hue of the boundary map's mixer of the same mechanism, lighter when it reads past trace states,
# darker when it reads raw tokens (the control).  A GPT carries the predictor and input of the SPEN it
# was sized to (the launch form's GPT is sized to SPEN linear).
GPT_COLOR = BASELINE_COLOR
LM_VARIANTS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("gpt", "linear", "state"): ("GPT", GPT_COLOR),
    ("spen", "linear", "state"): ("SPEN linear", EMA),
    ("spen", "linear_attention", "state"): ("SPEN linear attention (state)", LINEAR_ATTENTION[0]),
    ("spen", "linear_attention", "sequence"): ("SPEN linear attention (sequence)", LINEAR_ATTENTION[1]),
    ("spen", "linear_attention", "tokens"): ("SPEN linear attention (tokens)", LINEAR_ATTENTION[2]),
    ("spen", "softmax_attention", "state"): ("SPEN softmax attention (state)", SOFTMAX_ATTENTION[0]),
    ("spen", "softmax_attention", "sequence"): ("SPEN softmax attention (sequence)", SOFTMAX_ATTENTION[1]),
    ("spen", "softmax_attention", "tokens"): ("SPEN softmax attention (tokens)", SOFTMAX_ATTENTION[2]),
}
# The pools of held-out tokens SPEN's gap to the GPT is followed in over training (the keys of
# studies/content/growth.GROWTH_POOLS): every token in SPEN linear's blue (the gap of the model itself),
# recall tokens in gold, a hue no model on the page has.
TOKEN_POOL_COLORS: dict[str, str] = {"all": EMA, "recall": "#b79a20"}

# The boundary map's heat scale over accuracy above max(chance, floor): brown below (worse than
# chance), a pale neutral at it, dark teal toward perfect (ColorBrewer BrBG's ends, safe for colour
# blindness).  Neither end is a mixer's hue, so a cell never reads as softmax or as EMA.
ABOVE_CHANCE_COLORS = ("#a6611a", "#f2f2f2", "#018571")
ABOVE_CHANCE_DARK = 0.7  # above this value a cell is dark enough to take TEXT_ON_DARK

# -- rates -------------------------------------------------------------------------------------------
# Viridis without its pale yellow end (it vanishes on white), dark to light.
_RAMP = ("#440154", "#482878", "#3e4a89", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b")
RAMP_STEPS = 64  # a colour is one of 65 points of the ramp: a finite set, and α = 0.500 and 0.501 alike
# α from 0.005 (darkest) to 1 (lightest) on a log scale: the dilution sweep's grid (0.01 … 1) spans
# most of the ramp, so its rates stay apart; slower rates than 0.005 take the dark end.
_ALPHA_LOG10 = (math.log10(0.005), 0.0)
# Learning rates, smallest darkest, from 1e-4 to 1e-1 on a log scale (zoology's grid is 1e-3 … 3e-2).
_LR_LOG10 = (-4.0, -1.0)


def _hex(rgb) -> str:
    return "#" + "".join(f"{round(c):02x}" for c in rgb)


def _ramp_at(t: float) -> str:
    """The ramp's colour at ``t`` in [0, 1], rounded to one of RAMP_STEPS + 1 points, linear in RGB between stops."""
    t = round(min(max(t, 0.0), 1.0) * RAMP_STEPS) / RAMP_STEPS
    x = t * (len(_RAMP) - 1)
    i = min(int(x), len(_RAMP) - 2)
    a, b = (tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in (_RAMP[i], _RAMP[i + 1]))
    return _hex(p + (q - p) * (x - i) for p, q in zip(a, b))


RAMP_COLORS: tuple[str, ...] = tuple(_ramp_at(i / RAMP_STEPS) for i in range(RAMP_STEPS + 1))


def _on_log_ramp(value: float, span: tuple[float, float]) -> str:
    lo, hi = span
    v = float(value)
    t = (math.log10(v) - lo) / (hi - lo) if v > 0 and math.isfinite(v) else 0.0
    return _ramp_at(t)


def order_color(index: int, last: int) -> str:
    """The colour of item ``index`` of 0 … ``last`` in an order (a block's output in depth: the embedding
    darkest, the latest output lightest), on the rates' ramp: an order, drawn as the rates are."""
    return _ramp_at(int(index) / max(int(last), 1))


def rate_color(alpha: float) -> str:
    """The colour of the rate ``alpha`` wherever it is drawn by value (a sweep's rates, an export): its
    place on the ramp, fast (large α) light, slow dark."""
    return _on_log_ramp(alpha, _ALPHA_LOG10)


# The trace-dilution explorer's three sliders.  A slider's trace keeps its colour while its α moves
# (keyed by the slider, not by the value): the colour of the paper's rate it starts from, so at the
# defaults the page and an exported sweep agree.
RATE_ROLES: tuple[str, ...] = ("fast", "medium", "slow")
RATE_ROLE_COLORS: dict[str, str] = {role: rate_color(a) for role, a in zip(RATE_ROLES, PAPER_ALPHAS)}
ALL_RATES_COLOR = BASELINE_COLOR  # the decoder that reads every rate at once: what each rate is read against


def rate_role_color(role: str) -> str:
    return RATE_ROLE_COLORS.get(role, OTHER_COLOR)


def learning_rate_color(lr: float) -> str:
    """The colour of the learning rate ``lr``: its place on the ramp, smallest darkest, by value."""
    return _on_log_ramp(lr, _LR_LOG10)


# -- lookups -----------------------------------------------------------------------------------------

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


# -- page furniture ----------------------------------------------------------------------------------
# The Jobs page's state of a job (a card's badge and bar, the table's state), in Streamlit's named
# colours, and the hues Streamlit gives those names, for what takes a CSS colour.  No chart draws them,
# so they are not among COLORS below.
JOB_STATE_COLORS: dict[str, str] = {"done": "green", "running": "blue", "queued": "gray", "failed": "red",
                                    "crashed": "red", "damaged": "red", "cancelled": "orange"}
STREAMLIT_HEX: dict[str, str] = {"green": "#21c354", "blue": "#1c83e1", "gray": "#a3a8b8", "red": "#ff4b4b",
                                 "orange": "#ffa421"}
# A judged claim's verdict (ema_core.scoreboard.OUTCOMES) as a badge on every page: a Streamlit colour
# name and a Material icon.  Reproduced green, contradicted red, within the spread orange, and grey where
# nothing was judged (too few seeds, or no run measures it): the Jobs page's "done" and "failed" hues.
VERDICT_BADGES: dict[str, tuple[str, str]] = {
    "reproduced": ("green", ":material/check_circle:"), "not_reproduced": ("red", ":material/cancel:"),
    "inconclusive": ("orange", ":material/help:"), "not_judged": ("gray", ":material/hourglass_empty:"),
    "not_measured": ("gray", ":material/remove:")}


# Every colour this module gives out to a chart: a chart that draws any other did not take it from here (the
# palette test walks every chart's spec against it).
COLORS: frozenset[str] = frozenset({
    BASELINE_COLOR, REFERENCE_COLOR, TEXT_COLOR, TEXT_ON_DARK, OTHER_COLOR,
    *_MIXER_HUES.values(), *_EXTRA_MIXER_COLORS, EMA_LIGHT, EMA_DARK, *LINEAR_ATTENTION, *SOFTMAX_ATTENTION,
    *PROBE_COLORS.values(), *CONDITION_COLORS.values(), *(c for _, c in LM_VARIANTS.values()),
    *TOKEN_POOL_COLORS.values(), *ABOVE_CHANCE_COLORS, *RAMP_COLORS, *DEPTH_RULE_COLORS.values(),
})
