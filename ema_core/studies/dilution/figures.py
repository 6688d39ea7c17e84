"""The trace-dilution study's charts (PAPER.md §1): lag weights, signal-to-interference and measured
identity, from the frames of :mod:`ema_core.dilution`, one colour per rate.

A rate is coloured by value (:func:`ema_core.palette.rate_color`), except where a chart is told which
slider each rate comes from (``roles``, :func:`rate_roles`): the explorer's traces are "the fast, the
medium and the slow trace", and keep their colour while their α moves."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import altair as alt
import pandas as pd

from ema_core import palette
from ema_core.dilution import ALL_RATES, rate_label
from ema_core.figures import (ACCURACY_AXIS, COUNT_FORMAT, HEIGHT, WIDTH, chart_title, color_scale, legend,
                              reference_rule, with_layout)

SIR_CLIP_DB = 60.0  # α = 1 gives an infinite SIR at lag 0; drawn at the edge of the axis
WEIGHT_FLOOR = 1e-12  # α near 1 drives far lags to 1e-70 and would squash every other curve
LAG_AXIS = alt.Axis(tickMinStep=1, format=COUNT_FORMAT)


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


def rate_roles(alphas: Sequence[float], roles: Sequence[str] = palette.RATE_ROLES) -> dict[str, str]:
    """Rate label -> the slider it comes from (``roles``, in the sliders' order); two sliders on one rate
    draw it once, as the first of them."""
    out: dict[str, str] = {}
    for alpha, role in zip(alphas, roles):
        out.setdefault(rate_label(float(alpha)), role)
    return out


def feature_color(label: str, roles: Mapping[str, str] | None = None) -> str:
    """The colour of a rate label (its slider's, where ``roles`` names one, else its value's), of
    ``ALL_RATES``, or the palette's colour for anything else."""
    if label == ALL_RATES:
        return palette.ALL_RATES_COLOR
    if roles and label in roles:
        return palette.rate_role_color(roles[label])
    alpha = rate_alpha(label)
    return palette.OTHER_COLOR if alpha is None else palette.rate_color(alpha)


def _rate_color(field: str, labels, title: str, roles: Mapping[str, str] | None = None) -> alt.Color:
    """Colour by rate, each rate its own colour, in :func:`rate_order`; the legend below the plot."""
    order = rate_order(labels)
    return alt.Color(f"{field}:N", scale=color_scale(order, lambda label: feature_color(label, roles)), sort=order,
                     title=title, legend=legend(order, symbolType="stroke", symbolStrokeWidth=3))


def lag_weight_chart(analytic_df: pd.DataFrame, roles: Mapping[str, str] | None = None) -> alt.Chart:
    """Weight α(1−α)^k of the token at lag k, one line per rate, log y axis."""
    color = _rate_color("rate", analytic_df["rate"], "rate", roles)
    # Log axis: zero weights (α = 1 past lag 0) have no place on it, nor do vanishing ones.
    df = analytic_df.loc[analytic_df["weight"] >= WEIGHT_FLOOR, ["rate", "alpha", "lag", "weight"]]
    # Ticks and grid at whole decades only (at most ~7): Vega's default log grid draws every
    # multiple of every decade, a dense mesh over a 10-decade axis.
    lo = math.floor(math.log10(df["weight"].min())) if len(df) else -1
    step = max(1, math.ceil(-lo / 6))
    decades = [10.0**e for e in range(0, lo - 1, -step)]
    return with_layout(
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
            color=color,
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


def sir_chart(analytic_df: pd.DataFrame, roles: Mapping[str, str] | None = None) -> alt.Chart:
    """Signal-to-interference ratio of the token at lag k, in dB, clipped to ±``SIR_CLIP_DB``."""
    color = _rate_color("rate", analytic_df["rate"], "rate", roles)
    df = analytic_df[["rate", "alpha", "lag", "sir_db"]].copy()
    # ±inf cannot go into the chart's JSON; the tooltip keeps the true value as text.
    df["sir_db_shown"] = df["sir_db"].clip(-SIR_CLIP_DB, SIR_CLIP_DB)
    df["sir_text"] = [_db_text(v) for v in df["sir_db"]]
    df = df.drop(columns="sir_db")
    return with_layout(
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
            color=color,
            tooltip=[
                alt.Tooltip("rate:N"),
                alt.Tooltip("lag:Q"),
                alt.Tooltip("sir_text:N", title="SIR"),
            ],
        )
    )


DECODER_SUBTITLES = {"linear": "linear decoder, scored on held-out steps",
                     "peel": "peel decoder (knows the table, no training), scored on held-out steps"}
HORIZON_KINDS = ("analytic k*", "measured")  # dashed, solid
HORIZON_DASHES = ([5, 3], [1, 0])


def horizon_frame(limits: pd.DataFrame, max_lag: int) -> pd.DataFrame:
    """The horizons to draw: for each feature set whose analytic k* lies on the lag axis, k* and the
    measured horizon beside it (the latter where it too is on the axis).  Long format: feature, lag,
    kind, text.  A k* past the axis is not drawn (the page's text gives it): nothing of it would show.
    A pair of horizons another set already has is drawn once, in the first set's colour."""
    # All rates often reads its fastest trace's horizons exactly: drawn once, in the rate's colour.
    rows = horizon_rows(limits, max_lag, "k*", HORIZON_KINDS, lambda r: r.feature)
    return pd.DataFrame(rows, columns=["feature", "lag", "kind", "text"])


def horizon_rows(limits: pd.DataFrame, axis_end: float, symbol: str, kinds: Sequence[str],
                 series: Callable[[Any], str]) -> list[tuple[str, float, str, str]]:
    """(series, position, kind, text) of each line's horizons that lie on an axis 0..``axis_end``: its
    analytic ``symbol`` (``kinds[0]``) where that is on the axis, and beside it its measured horizon
    (``kinds[1]``) where that is too.  ``series(row)`` names a row of ``limits`` (analytic_horizon,
    measured_horizon, ...); a pair of horizons an earlier row already has is drawn once, in its colour."""
    rows, drawn = [], set()
    for r in limits.itertuples():
        if not 0.0 <= r.analytic_horizon <= axis_end or (r.analytic_horizon, r.measured_horizon) in drawn:
            continue
        drawn.add((r.analytic_horizon, r.measured_horizon))
        text = f"{symbol} ≈ {r.analytic_horizon:.1f}; measured {r.measured_horizon}"
        rows.append((series(r), float(r.analytic_horizon), kinds[0], text))
        if r.measured_horizon <= axis_end:
            rows.append((series(r), float(r.measured_horizon), kinds[1], text))
    return rows


def identity_chart(acc_df: pd.DataFrame, chance: float, decoder: str | None = None,
                   horizons: pd.DataFrame | None = None, roles: Mapping[str, str] | None = None) -> alt.LayerChart:
    """Measured accuracy of naming the token at lag k, one line per feature set, and chance.

    ``horizons`` (:func:`horizon_frame`) adds, in each feature set's colour, a dashed rule at its
    analytic horizon k* and a solid one at its measured horizon (the first lag below ½ accuracy).
    """
    color = _rate_color("feature", acc_df["feature"], "decoder reads", roles)
    lines = (
        alt.Chart(acc_df[["feature", "lag", "accuracy"]])
        .mark_line(point=True)
        .encode(
            x=alt.X("lag:Q", title="lag k (steps)", axis=LAG_AXIS),
            y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="accuracy (held out)"),
            color=color,
            tooltip=[
                alt.Tooltip("feature:N", title="decoder reads"),
                alt.Tooltip("lag:Q"),
                alt.Tooltip("accuracy:Q", format=".3f"),
            ],
        )
    )
    rule = reference_rule("chance", chance, f"chance 1/V = {chance:.4g}", palette.REFERENCE_COLOR)
    layers = [lines, rule]
    if horizons is not None and len(horizons):
        layers.append(
            alt.Chart(horizons)
            .mark_rule(strokeWidth=1.5)
            .encode(
                x="lag:Q",
                color=color,  # the very scale of the lines: one legend, one colour per set
                strokeDash=alt.StrokeDash("kind:N", title="horizon",
                                          scale=alt.Scale(domain=list(HORIZON_KINDS), range=list(HORIZON_DASHES)),
                                          legend=legend(HORIZON_KINDS, symbolType="stroke", symbolStrokeWidth=2)),
                tooltip=[alt.Tooltip("feature:N", title="decoder reads"), alt.Tooltip("kind:N", title="horizon"),
                         alt.Tooltip("text:N", title="horizons")],
            )
        )
    chart = alt.layer(*layers)
    if len(layers) > 2:  # the chance line's dash and the horizons' dashes are two legends
        chart = chart.resolve_scale(strokeDash="independent")
    return with_layout(chart.properties(
        width=WIDTH,
        height=HEIGHT,
        title=chart_title("Measured identity at lag k", DECODER_SUBTITLES.get(decoder, "scored on held-out steps")),
    ))


def run_figures(rows: pd.DataFrame) -> list[tuple[str, alt.TopLevelMixin]]:
    """The figures of one run's exported ``dilution_accuracy`` rows, each with its file stem."""
    return [("identity_accuracy", identity_chart(rows[["feature", "lag", "accuracy"]], float(rows["chance"].iloc[0])))]

