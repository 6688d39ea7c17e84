"""Altair figures: pure functions from the frames of :mod:`ema_core.dilution` and the store to charts.

The page shows them and the CLI exports them, so nothing here knows about Streamlit.  Every chart
has a fixed size: Streamlit stretches it to the container, and the SVG/PNG exports need a real size
(a "container" width renders at zero outside a browser).
"""
from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd
import vl_convert

from ema_core import palette
from ema_core.dilution import ALL_RATES, rate_label
from ema_core.grammar import ROLES

WIDTH, HEIGHT = 420, 300
SIR_CLIP_DB = 60.0  # α = 1 gives an infinite SIR at lag 0; drawn at the edge of the axis
WEIGHT_FLOOR = 1e-12  # α near 1 drives far lags to 1e-70 and would squash every other curve
# Title text sizes (Vega's defaults).  Widths are estimated from Helvetica's glyph widths (Arial and
# Liberation Sans share them; in thousandths of an em), bold 10 % wider, plus a 5 % margin: a title
# wrapped to fit then never runs past the chart, and no line is broken that would have fitted.
TITLE_SIZE, SUBTITLE_SIZE = 13, 12
_GLYPHS = {191: "'", 222: "ijl", 278: "ft .,;:!I/[]|", 333: "r-()`", 469: "^", 500: "ckvxyzsJ\"", 584: "=+<>~±×−",
           611: "FTZ", 667: "ABEKPSVXY&", 722: "CDHNRUw", 778: "GOQ", 833: "mM", 889: "%", 944: "W"}
_GLYPH_WIDTH = {ch: w / 1000 for w, chars in _GLYPHS.items() for ch in chars}
_DEFAULT_GLYPH = 0.556  # the other letters, digits, and Greek

# Lags and steps are whole numbers: no 0.5 ticks when the range is short, no "1e+3", a thousands
# separator past 999.
LAG_AXIS = alt.Axis(tickMinStep=1, format=",d")
STEP_FORMAT = ",d"
ACCURACY_AXIS = alt.Axis(format=".1f")


def text_width(text: str, size: float, bold: bool = False) -> float:
    """A slightly generous estimate of the drawn width of ``text`` in pixels, in a Helvetica-like sans."""
    ems = sum(_GLYPH_WIDTH.get(ch, _DEFAULT_GLYPH) for ch in text)
    return ems * size * (1.1 if bold else 1.0) * 1.05


def _wrap(text: str, width: float, size: float, bold: bool) -> list[str]:
    """Lines no wider than ``width``: whole clauses ("a; b") where they fit, else word by word."""
    lines: list[str] = []
    clauses = text.split("; ")
    for i, clause in enumerate(clauses):
        clause += ";" if i < len(clauses) - 1 else ""
        if lines and text_width(f"{lines[-1]} {clause}", size, bold) <= width:
            lines[-1] = f"{lines[-1]} {clause}"
        elif text_width(clause, size, bold) <= width:
            lines.append(clause)
        else:
            for word in clause.split(" "):
                if lines and text_width(f"{lines[-1]} {word}", size, bold) <= width:
                    lines[-1] = f"{lines[-1]} {word}"
                else:
                    lines.append(word)
    return lines


def chart_title(text: str, subtitle: str = "", width: float = WIDTH) -> alt.Title:
    """A title and subtitle broken into lines no wider than ``width`` pixels (the plot's width): a
    line longer than the chart would run off its edge once a page narrows it."""
    title = _wrap(text, width, TITLE_SIZE, True)
    sub = _wrap(subtitle, width, SUBTITLE_SIZE, False) if subtitle else []
    kwargs = {"subtitle": sub if len(sub) > 1 else sub[0]} if sub else {}
    return alt.Title(title if len(title) > 1 else title[0], **kwargs)


def value_format(values, ticks: int = 10) -> str:
    """A d3 format for a value axis: as many decimals as a tick step of about range/``ticks`` needs,
    the same on every tick, and a thousands separator (``",.2f"``)."""
    v = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce"), dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return ",.3~f"
    span = float(v.max() - v.min()) or abs(float(v.max())) or 1.0
    return f",.{max(0, -math.floor(math.log10(span / ticks)))}f"


def rate_alpha(label: str) -> float | None:
    """The α of a rate label (``"α=0.5"`` → 0.5), None for any other feature name."""
    if isinstance(label, str) and label.startswith("α="):
        try:
            alpha = float(label[2:])
        except ValueError:
            return None
        return alpha if rate_label(alpha) == label else None
    return None


def rate_order(labels) -> list[str]:
    """Rate labels fast to slow (α descending), then any other feature, then ``ALL_RATES``: the same
    legend order on the page and in an export, whatever order the rows came in."""
    labels = list(dict.fromkeys(labels))
    rates = sorted((lab for lab in labels if rate_alpha(lab) is not None), key=rate_alpha, reverse=True)
    others = [lab for lab in labels if rate_alpha(lab) is None and lab != ALL_RATES]
    return rates + others + ([ALL_RATES] if ALL_RATES in labels else [])


def feature_color(label: str) -> str:
    """The colour of a rate label, of ``ALL_RATES``, or the palette's colour for anything else."""
    if label == ALL_RATES:
        return palette.ALL_RATES_COLOR
    alpha = rate_alpha(label)
    return palette.OTHER_COLOR if alpha is None else palette.rate_color(alpha)


def _rate_scale(labels) -> alt.Scale:
    """The colour scale of the rates present: each rate's own colour, whichever others are shown."""
    domain = rate_order(labels)
    return alt.Scale(domain=domain, range=palette.scale_range(domain, feature_color))


def _rate_order(df: pd.DataFrame) -> list[str]:
    return rate_order(df["rate"])


def lag_weight_chart(analytic_df: pd.DataFrame) -> alt.Chart:
    """Weight α(1−α)^k of the token at lag k, one line per rate, log y axis."""
    order = _rate_order(analytic_df)
    # Log axis: zero weights (α = 1 past lag 0) have no place on it, nor do vanishing ones.
    df = analytic_df.loc[analytic_df["weight"] >= WEIGHT_FLOOR, ["rate", "alpha", "lag", "weight"]]
    # Ticks and grid at whole decades only (at most ~7): Vega's default log grid draws every
    # multiple of every decade, a dense mesh over a 10-decade axis.
    lo = math.floor(math.log10(df["weight"].min())) if len(df) else -1
    step = max(1, math.ceil(-lo / 6))
    decades = [10.0**e for e in range(0, lo - 1, -step)]
    return (
        alt.Chart(df, width=WIDTH, height=HEIGHT, title=chart_title(
            "Weight of the token at lag k",
            f"α(1−α)^k, whatever the token (below {WEIGHT_FLOOR:g} not drawn)"))
        .mark_line(point=True)
        .encode(
            x=alt.X("lag:Q", title="lag k (steps)", axis=LAG_AXIS),
            y=alt.Y(
                "weight:Q",
                scale=alt.Scale(type="log"),
                # One notation on every tick ("~g" wrote 0.000001 beside 1e-8).
                axis=alt.Axis(values=decades, format=".0e"),
                title="weight (log scale)",
            ),
            color=alt.Color("rate:N", scale=_rate_scale(order), sort=order, title="rate"),
            tooltip=[
                alt.Tooltip("rate:N"),
                alt.Tooltip("lag:Q"),
                alt.Tooltip("weight:Q", format=".3e"),
            ],
        )
    )


def _db_text(x: float) -> str:
    if math.isinf(x):
        return "+∞ dB" if x > 0 else "−∞ dB"
    return f"{x:.1f} dB"


def sir_chart(analytic_df: pd.DataFrame) -> alt.Chart:
    """Signal-to-interference ratio of the token at lag k, in dB, clipped to ±``SIR_CLIP_DB``."""
    order = _rate_order(analytic_df)
    df = analytic_df[["rate", "alpha", "lag", "sir_db"]].copy()
    # ±inf cannot go into the chart's JSON; the tooltip keeps the true value as text.
    df["sir_db_shown"] = df["sir_db"].clip(-SIR_CLIP_DB, SIR_CLIP_DB)
    df["sir_text"] = [_db_text(v) for v in df["sir_db"]]
    df = df.drop(columns="sir_db")
    return (
        alt.Chart(df, width=WIDTH, height=HEIGHT, title=chart_title(
            "Signal-to-interference ratio", "w_k² against the rest of the trace's energy α/(2−α)"))
        .mark_line(point=True)
        .encode(
            x=alt.X("lag:Q", title="lag k (steps)", axis=LAG_AXIS),
            y=alt.Y(
                "sir_db_shown:Q",
                scale=alt.Scale(domain=[-SIR_CLIP_DB, SIR_CLIP_DB], clamp=True),
                axis=alt.Axis(format="d"),
                title=f"SIR (dB, clipped to ±{SIR_CLIP_DB:g})",
            ),
            color=alt.Color("rate:N", scale=_rate_scale(order), sort=order, title="rate"),
            tooltip=[
                alt.Tooltip("rate:N"),
                alt.Tooltip("lag:Q"),
                alt.Tooltip("sir_text:N", title="SIR"),
            ],
        )
    )


def identity_chart(acc_df: pd.DataFrame, chance: float) -> alt.LayerChart:
    """Measured accuracy of naming the token at lag k, one line per feature set, and chance."""
    order = rate_order(acc_df["feature"])
    lines = (
        alt.Chart(acc_df[["feature", "lag", "accuracy"]])
        .mark_line(point=True)
        .encode(
            x=alt.X("lag:Q", title="lag k (steps)", axis=LAG_AXIS),
            y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="accuracy (held out)"),
            color=alt.Color("feature:N", scale=_rate_scale(order), sort=order, title="decoder reads"),
            tooltip=[
                alt.Tooltip("feature:N", title="decoder reads"),
                alt.Tooltip("lag:Q"),
                alt.Tooltip("accuracy:Q", format=".3f"),
            ],
        )
    )
    label = f"chance 1/V = {chance:.4g}"
    # The rule is labelled through a legend of its own: the curves settle onto chance, so a text
    # label on the plot would sit under them.
    rule = (
        alt.Chart(pd.DataFrame({"chance": [chance], "label": [label]}))
        .mark_rule(color=palette.REFERENCE_COLOR, strokeWidth=1.5)
        .encode(
            y="chance:Q",
            strokeDash=alt.StrokeDash(
                "label:N", scale=alt.Scale(domain=[label], range=[[6, 4]]), legend=alt.Legend(title=None, symbolType="stroke", symbolSize=400, symbolStrokeWidth=2)
            ),
            tooltip=[alt.Tooltip("label:N", title="reference")],
        )
    )
    return alt.layer(lines, rule).properties(
        width=WIDTH,
        height=HEIGHT,
        title=chart_title("Measured identity at lag k", "linear decoder, scored on held-out steps"),
    )


# -- structure (PAPER.md §2) ------------------------------------------------------------------------

# What the role chart compares: feature set in the store -> label, in legend order.
ROLE_MODELS = {"instantaneous": "SPCN instantaneous", "traces": "SPCN traces", "bigru": "BiGRU"}
ROLE_GROUPS = ("all tokens", "lexical", "structure-dependent", "other")
# The probe-control chart: measure of store.queries.probe_control -> label, in legend order.
CONTROL_CONDITIONS = {"trained": "trained SPCN", "untrained": "untrained SPCN", "control": "control task"}
# A title over the role facets wraps at this width: the legend on top is about as wide, and a split
# with few roles makes facets narrower than any title.
ROLE_TITLE_WIDTH = 360
ROLE_BAR_STEP = 10  # px per bar: a role of three bars takes about 37 px; all 21 fit side by side in ~900 px


def _role_group(role: str) -> str:
    if role == "overall":
        return ROLE_GROUPS[0]
    flags = {r.name: r.lexical for r in ROLES}
    if role not in flags:
        return ROLE_GROUPS[3]
    return ROLE_GROUPS[1] if flags[role] else ROLE_GROUPS[2]


def role_accuracy_frame(stats: pd.DataFrame, split: str) -> pd.DataFrame:
    """The role chart's rows from ``store.queries.probe_accuracy_stats`` for one split.

    Columns: group, role, model, n, mean, std; roles in the grammar's order inside their group
    ("all tokens" first, then lexical, then structure-dependent), models in ``ROLE_MODELS`` order.
    Roles or models a split does not score are simply absent.
    """
    df = stats.loc[(stats["split"] == split) & stats["feature_set"].isin(list(ROLE_MODELS))]
    order = ["overall"] + [r.name for r in ROLES]
    out = pd.DataFrame({
        "group": [_role_group(r) for r in df["role"]],
        "role": df["role"].to_numpy(),
        "model": df["feature_set"].map(ROLE_MODELS).to_numpy(),
        "n": df["n"].to_numpy(),
        "mean": df["accuracy_mean"].astype(float).to_numpy(),
        "std": df["accuracy_std"].astype(float).to_numpy(),
    })
    rank = {name: i for i, name in enumerate(order)}
    out["_g"] = out["group"].map(ROLE_GROUPS.index)
    out["_r"] = out["role"].map(lambda r: rank.get(r, len(rank)))
    out["_m"] = out["model"].map(list(ROLE_MODELS.values()).index)
    return out.sort_values(["_g", "_r", "role", "_m"]).drop(columns=["_g", "_r", "_m"]).reset_index(drop=True)


def _label_colors(labels: dict[str, str], colors: dict[str, str]) -> dict[str, str]:
    """Label -> colour for a chart that shows ``labels`` (key -> label) in ``colors`` (key -> colour)."""
    return {label: colors.get(key, palette.OTHER_COLOR) for key, label in labels.items()}


def _bars_with_errors(df: pd.DataFrame, x: str, x_title: str | None, offset: str, domain: list[str],
                      colors: dict[str, str], legend_title: str, x_sort: list[str],
                      legend: alt.Legend | None = None, label_angle: int = 0) -> alt.LayerChart:
    """Grouped bars (``x`` by ``offset``) of ``mean`` with mean ± std rules where a std exists."""
    data = df.assign(lo=(df["mean"] - df["std"]).clip(lower=0), hi=(df["mean"] + df["std"]).clip(upper=1))
    base = alt.Chart().encode(
        # Vega hides labels whose axis-aligned boxes overlap; slanted labels a band apart do not
        # touch, but their boxes do, so every label is drawn.
        x=alt.X(f"{x}:N", sort=x_sort, title=x_title,
                axis=alt.Axis(labelAngle=label_angle, labelLimit=140, labelOverlap=not label_angle)),
        xOffset=alt.XOffset(f"{offset}:N", sort=domain, scale=alt.Scale(domain=domain, paddingInner=0.05)),
    )
    bars = base.mark_bar().encode(
        y=alt.Y("mean:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="accuracy (held out)"),
        color=alt.Color(f"{offset}:N", scale=alt.Scale(domain=domain, range=palette.scale_range(
                            domain, lambda name: colors.get(name, palette.OTHER_COLOR))),
                        sort=domain, title=legend_title, legend=legend or alt.Legend()),
        tooltip=[alt.Tooltip(f"{x}:N"), alt.Tooltip(f"{offset}:N"), alt.Tooltip("mean:Q", format=".3f"),
                 alt.Tooltip("std:Q", format=".3f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")],
    )
    # One seed has no spread: its rows have no std and draw no bar (Vega reads NaN as null).
    errors = base.transform_filter("isValid(datum.std) && isFinite(datum.std)").mark_rule(
        color="#222222", strokeWidth=1.5).encode(y="lo:Q", y2="hi:Q")
    return alt.layer(bars, errors, data=data)  # data on the layer: a facet of it needs it there


def role_accuracy_chart(frame: pd.DataFrame, split_label: str = "") -> alt.FacetChart:
    """Per-role probe accuracy: SPCN instantaneous, SPCN traces and BiGRU side by side, mean ± std
    across seeds, roles faceted into all tokens / lexical / structure-dependent."""
    models = [m for m in ROLE_MODELS.values() if m in set(frame["model"])] or list(ROLE_MODELS.values())
    colors = _label_colors(ROLE_MODELS, palette.PROBE_COLORS)
    groups = [g for g in ROLE_GROUPS if g in set(frame["group"])]
    roles = list(dict.fromkeys(frame["role"]))
    # A facet's width follows its number of roles (independent x scales, a fixed step per role).
    # The legend on top: the facets need the page's whole width.
    layer = _bars_with_errors(frame, "role", None, "model", models, colors, "probe reads", roles,
                              legend=alt.Legend(orient="top", direction="horizontal"), label_angle=-45)
    subtitle = "mean ± std across seeds (no bar: one seed)" + (f"; split: {split_label}" if split_label else "")
    # The title spans the facets: about a bar step per bar, or the legend's width when they are few.
    facets_width = len(frame) * ROLE_BAR_STEP + 20 * (len(groups) - 1)
    return (
        layer.properties(width=alt.Step(ROLE_BAR_STEP), height=HEIGHT)
        .facet(column=alt.Column("group:N", sort=groups, title=None,
                                 header=alt.Header(labelFontSize=13, labelFontWeight="bold")))
        .resolve_scale(x="independent")
        .properties(title=chart_title("Grammatical roles read from SPCN and the BiGRU", subtitle,
                                      max(ROLE_TITLE_WIDTH, facets_width)))
    )


def probe_control_frame(control: pd.DataFrame) -> pd.DataFrame:
    """The probe-control chart's rows from ``store.queries.probe_control``.

    Columns: feature_set, condition, n, mean, std, for the measures of ``CONTROL_CONDITIONS``.
    """
    df = control.loc[control["measure"].isin(list(CONTROL_CONDITIONS))]
    out = pd.DataFrame({
        "feature_set": df["feature_set"].to_numpy(),
        "condition": df["measure"].map(CONTROL_CONDITIONS).to_numpy(),
        "n": df["n"].to_numpy(),
        "mean": df["value_mean"].astype(float).to_numpy(),
        "std": df["value_std"].astype(float).to_numpy(),
    })
    sets = [f for f in ROLE_MODELS if f in set(out["feature_set"])] + sorted(set(out["feature_set"]) - set(ROLE_MODELS))
    out["_f"] = out["feature_set"].map(sets.index)
    out["_c"] = out["condition"].map(list(CONTROL_CONDITIONS.values()).index)
    return out.sort_values(["_f", "_c"]).drop(columns=["_f", "_c"]).reset_index(drop=True)


def probe_control_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Overall probe accuracy per SPCN feature set: trained vs untrained SPCN vs the control task."""
    conditions = [c for c in CONTROL_CONDITIONS.values() if c in set(frame["condition"])] \
        or list(CONTROL_CONDITIONS.values())
    colors = _label_colors(CONTROL_CONDITIONS, palette.CONDITION_COLORS)
    sets = list(dict.fromkeys(frame["feature_set"]))
    return _bars_with_errors(frame, "feature_set", "SPCN features", "condition", conditions, colors,
                             "probe on", sets).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Probe controls", "overall accuracy, test split; selectivity = trained − control task"),
    )


# -- content (PAPER.md §3) ---------------------------------------------------------------------------

# Every language-model variant (model, predictor, attention input): its label and colour.
LM_VARIANTS = palette.LM_VARIANTS
PREDICTOR_LABELS = {"linear": "linear", "linear_attention": "linear attention",
                    "softmax_attention": "softmax attention"}
# What an attention predictor reads.
ATTN_INPUTS = {"state": "current trace state", "sequence": "past trace states", "tokens": "raw tokens (control)"}
CURVE_WIDTH = WIDTH + 180  # the curves take a page's whole width
# Curve smoothing: the weight w of s_t = w·s_{t−1} + (1 − w)·v_t (0: none).
SMOOTHING = {"none": 0.0, "EMA 0.6": 0.6, "EMA 0.9": 0.9}


def lm_variant_label(model: str, predictor: str | None, attn_input: str | None) -> str:
    """``"GPT"``, ``"SPEN linear"``, ``"SPEN softmax attention (tokens)"``; a GPT sized to another
    SPEN than the linear one says which."""
    def text(v, default: str) -> str:  # a missing field (None, or NaN from a frame) reads as its default
        return default if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    model, predictor, attn_input = text(model, "?"), text(predictor, "linear"), text(attn_input, "state")
    if (model, predictor, attn_input) in LM_VARIANTS:
        return LM_VARIANTS[(model, predictor, attn_input)][0]
    if model == "gpt":
        return f"GPT (sized to {lm_variant_label('spen', predictor, attn_input)})"
    return f"{model.upper()} {PREDICTOR_LABELS.get(predictor, predictor)} ({attn_input})"


def _variant_scale(labels) -> alt.Scale:
    """Colours of the variants present, in the canonical order of ``LM_VARIANTS``."""
    known = {label: color for label, color in LM_VARIANTS.values()}
    present = set(labels)
    domain = [label for label, _ in LM_VARIANTS.values() if label in present]
    domain += sorted(present - set(domain))
    return alt.Scale(domain=domain, range=palette.scale_range(domain, lambda v: known.get(v, palette.OTHER_COLOR)))


def smooth_ema(values, weight: float) -> np.ndarray:
    """``s_0 = v_0, s_t = w·s_{t−1} + (1 − w)·v_t``: TensorBoard's smoothing, without its debiasing
    (the first point starts the average, so no early bias needs correcting); ``w = 0`` returns the
    values.  NaNs are skipped: they neither show nor move the average.

    >>> smooth_ema([1.0, 0.0, 0.0], 0.5).tolist()
    [1.0, 0.5, 0.25]
    """
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    v = np.asarray(values, dtype=float)
    out = v.copy()
    s = None
    for t, x in enumerate(v):
        if np.isnan(x):
            continue
        s = x if s is None else weight * s + (1.0 - weight) * x
        out[t] = s
    return out


def lm_curve_frame(curves: pd.DataFrame, weight: float = 0.0) -> pd.DataFrame:
    """The curve chart's rows from ``store.queries.lm_curves``: every run smoothed (weight ``weight``
    of :func:`smooth_ema`), then averaged across seeds per variant and step.

    Columns: variant, line ("mean", or the run id of a seed's own line), seed, step, tokens, value,
    std (across seeds, mean rows only), n.  Variants in the order of ``LM_VARIANTS``.
    """
    cols = ["variant", "line", "seed", "step", "tokens", "value", "std", "n"]
    if curves.empty:
        return pd.DataFrame(columns=cols)
    df = curves.sort_values(["run_id", "step"]).copy()
    df["variant"] = [lm_variant_label(*k) for k in zip(df["model"], df["predictor"], df["attn_input"])]
    df["value"] = df.groupby("run_id", sort=False)["value"].transform(lambda v: smooth_ema(v.to_numpy(), weight))
    seeds = df.assign(line=df["run_id"], std=np.nan, n=1)[cols]
    means = (df.groupby(["variant", "step"], sort=False)
             .agg(tokens=("tokens", "mean"), value=("value", "mean"), std=("value", "std"), n=("value", "count"))
             .reset_index().assign(line="mean", seed=np.nan))[cols]
    out = pd.concat([means, seeds], ignore_index=True)
    order = {v: i for i, v in enumerate(_variant_scale(out["variant"]).domain)}
    out["_v"] = out["variant"].map(order)
    out["_l"] = out["line"] != "mean"
    out = out.sort_values(["_l", "_v", "line", "step"], kind="stable")
    return out.drop(columns=["_v", "_l"]).reset_index(drop=True)


def lm_curve_chart(frame: pd.DataFrame, *, x: str = "step", log_x: bool = False, log_y: bool = False,
                   seeds: bool = True, y_title: str = "validation loss (nats/token)",
                   subtitle: str = "") -> alt.LayerChart:
    """One line per variant (the mean across seeds), each seed's own line faint behind it."""
    if x not in ("step", "tokens"):
        raise ValueError(f"x must be 'step' or 'tokens', got {x!r}")
    scale = _variant_scale(frame["variant"])
    x_enc = alt.X(f"{x}:Q", title="optimiser step" if x == "step" else "training tokens",
                  # nice=False: a log axis would otherwise round out to whole decades and squash the curves.
                  scale=alt.Scale(type="log", nice=False) if log_x else alt.Scale(zero=False),
                  # Steps as integers with a thousands separator ("~g" wrote 1e+2); tokens in SI (1.5M).
                  axis=alt.Axis(format="~s" if x == "tokens" else STEP_FORMAT, tickMinStep=1))
    # The log note goes into the subtitle: a longer y title outgrows the plot's height, and Vega then
    # lifts the chart title out of the drawn area.  One tick format on the whole axis (a log axis
    # otherwise writes "5" beside "4.9").
    y_enc = alt.Y("value:Q", title=y_title, axis=alt.Axis(titleLimit=HEIGHT, format=value_format(frame["value"])),
                  scale=alt.Scale(type="log", nice=False) if log_y else alt.Scale(zero=False))
    color = alt.Color("variant:N", scale=scale, sort=scale.domain, title="variant",
                      # Stroke symbols at full opacity: the faint seed lines would otherwise set them.
                      # No label limit: "GPT (sized to SPEN softmax attention (sequence))" in full.
                      legend=alt.Legend(orient="right", labelLimit=0, symbolType="stroke", symbolStrokeWidth=3,
                                        symbolOpacity=1))
    base = alt.Chart().encode(x=x_enc, y=y_enc, color=color)
    mean = base.transform_filter("datum.line === 'mean'").mark_line(point=True, strokeWidth=2.2).encode(
        tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("step:Q"), alt.Tooltip("tokens:Q", format=",.0f"),
                 alt.Tooltip("value:Q", format=".4f", title="mean"),
                 alt.Tooltip("std:Q", format=".4f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")])
    layers = [mean]
    if seeds:
        layers.insert(0, base.transform_filter("datum.line !== 'mean'").mark_line(strokeWidth=1, opacity=0.3)
                      .encode(detail="line:N", tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("seed:Q"),
                                                        alt.Tooltip("step:Q"), alt.Tooltip("value:Q", format=".4f")]))
    sub = subtitle or ("mean across seeds; faint: each seed" if seeds else "mean across seeds")
    logs = [axis for axis, on in (("x", log_x), ("y", log_y)) if on]
    sub += f"; log {' and '.join(logs)}" if logs else ""
    return alt.layer(*layers, data=frame).properties(
        width=CURVE_WIDTH, height=HEIGHT, title=chart_title("Validation curves", sub, CURVE_WIDTH))


def lm_ablation_frame(stats: pd.DataFrame) -> pd.DataFrame:
    """The ablation chart's rows from ``store.queries.lm_final_stats``: SPEN variants only.

    Columns: predictor, attn_input (labels of ``PREDICTOR_LABELS`` and ``ATTN_INPUTS``), variant,
    n, mean, std (final validation loss, nats/token).  The linear predictor reads the current state.
    """
    spen = stats.loc[stats["model"] == "spen"]
    return pd.DataFrame({
        "predictor": spen["predictor"].map(lambda p: PREDICTOR_LABELS.get(p, p)).to_numpy(),
        "attn_input": spen["attn_input"].map(lambda a: ATTN_INPUTS.get(a, a)).to_numpy(),
        "variant": [lm_variant_label("spen", p, a) for p, a in zip(spen["predictor"], spen["attn_input"])],
        "n": spen["n"].to_numpy(),
        "mean": spen["loss_mean"].astype(float).to_numpy(),
        "std": spen["loss_std"].astype(float).to_numpy(),
    })


def lm_ablation_chart(frame: pd.DataFrame, gpt_loss: float | None = None) -> alt.LayerChart:
    """Final validation loss per predictor and attention input, mean ± std across seeds, with the
    GPT's loss as a dashed reference."""
    inputs = list(ATTN_INPUTS.values())
    present = [i for i in inputs if i in set(frame["attn_input"])] or inputs
    # Coloured by variant, as in the curve chart: a variant has one colour on every chart.
    scale = _variant_scale(frame["variant"])
    data = frame.assign(lo=frame["mean"] - frame["std"], hi=frame["mean"] + frame["std"])
    shown = [*data["mean"], *data["lo"], *data["hi"]] + ([gpt_loss] if gpt_loss is not None else [])
    base = alt.Chart().encode(
        x=alt.X("predictor:N", sort=list(PREDICTOR_LABELS.values()), title="SPEN's predictor",
                axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("attn_input:N", sort=present, scale=alt.Scale(domain=present, paddingInner=0.2)),
    )
    points = base.mark_point(filled=True, size=90, opacity=1).encode(
        y=alt.Y("mean:Q", scale=alt.Scale(zero=False), title="final validation loss (nats/token)",
                axis=alt.Axis(format=value_format(shown))),
        color=alt.Color("variant:N", scale=scale, sort=scale.domain, title="SPEN variant",
                        legend=alt.Legend(orient="right", labelLimit=0)),
        tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("mean:Q", format=".4f"),
                 alt.Tooltip("std:Q", format=".4f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")],
    )
    errors = base.transform_filter("isValid(datum.std) && isFinite(datum.std)").mark_rule(
        strokeWidth=2).encode(y="lo:Q", y2="hi:Q", color="variant:N")
    layers = [alt.layer(errors, points, data=data)]
    if gpt_loss is not None and math.isfinite(gpt_loss):
        label = f"GPT {gpt_loss:.3f}"
        layers.append(
            alt.Chart(pd.DataFrame({"loss": [gpt_loss], "label": [label]}))
            .mark_rule(color=LM_VARIANTS[("gpt", "linear", "state")][1], strokeWidth=1.5)
            .encode(y="loss:Q", strokeDash=alt.StrokeDash(
                "label:N", scale=alt.Scale(domain=[label], range=[[6, 4]]),
                legend=alt.Legend(title=None, symbolType="stroke", symbolSize=400, symbolStrokeWidth=2)),
                tooltip=[alt.Tooltip("label:N", title="reference")]))
    return alt.layer(*layers).resolve_scale(color="independent", strokeDash="independent").properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Predictor ablation", "mean ± std across seeds; same traces, only the predictor differs"))


def chart_to_svg(chart: alt.TopLevelMixin) -> str:
    return vl_convert.vegalite_to_svg(chart.to_json())


def chart_to_png(chart: alt.TopLevelMixin, scale: float = 2) -> bytes:
    return vl_convert.vegalite_to_png(chart.to_json(), scale=scale)
