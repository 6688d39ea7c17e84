"""Altair figures: pure functions from the frames of :mod:`ema_core.dilution` to charts.

The page shows them and the CLI exports them, so nothing here knows about Streamlit.  Every chart
has a fixed size: Streamlit stretches it to the container, and the SVG/PNG exports need a real size
(a "container" width renders at zero outside a browser).
"""
from __future__ import annotations

import math

import altair as alt
import pandas as pd
import vl_convert

from ema_core.dilution import ALL_RATES

WIDTH, HEIGHT = 420, 300
SIR_CLIP_DB = 60.0  # α = 1 gives an infinite SIR at lag 0; drawn at the edge of the axis
WEIGHT_FLOOR = 1e-12  # α near 1 drives far lags to 1e-70 and would squash every other curve
# One colour per rate, in the order the rates were given, in every chart; "all rates" is dark grey.
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d")
ALL_RATES_COLOR = "#333333"


# Lags are whole steps: no 0.5 ticks when the range is short.
LAG_AXIS = alt.Axis(tickMinStep=1, format="d")


def _rate_scale(labels) -> alt.Scale:
    """The colour scale for rate labels in order of first appearance (plus ``ALL_RATES`` if present)."""
    labels = list(dict.fromkeys(labels))
    rates = [r for r in labels if r != ALL_RATES]
    domain = rates + ([ALL_RATES] if ALL_RATES in labels else [])
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(rates))]
    colours += [ALL_RATES_COLOR] if ALL_RATES in labels else []
    return alt.Scale(domain=domain, range=colours)


def _rate_order(df: pd.DataFrame) -> list[str]:
    # Rates in the order the user gave them (fast, medium, slow), not alphabetically: the legend
    # and the colours then line up across the three charts.
    return list(dict.fromkeys(df["rate"]))


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
        alt.Chart(df, width=WIDTH, height=HEIGHT, title=alt.Title(
            "Weight of the token at lag k",
            subtitle=f"α(1−α)^k, whatever the token (below {WEIGHT_FLOOR:g} not drawn)"))
        .mark_line(point=True)
        .encode(
            x=alt.X("lag:Q", title="lag k (steps)", axis=LAG_AXIS),
            y=alt.Y(
                "weight:Q",
                scale=alt.Scale(type="log"),
                axis=alt.Axis(values=decades, format="~g"),
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
        alt.Chart(df, width=WIDTH, height=HEIGHT, title=alt.Title(
            "Signal-to-interference ratio", subtitle="w_k² against the rest of the trace's energy α/(2−α)"))
        .mark_line(point=True)
        .encode(
            x=alt.X("lag:Q", title="lag k (steps)", axis=LAG_AXIS),
            y=alt.Y(
                "sir_db_shown:Q",
                scale=alt.Scale(domain=[-SIR_CLIP_DB, SIR_CLIP_DB], clamp=True),
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
    order = list(dict.fromkeys(acc_df["feature"]))
    lines = (
        alt.Chart(acc_df[["feature", "lag", "accuracy"]])
        .mark_line(point=True)
        .encode(
            x=alt.X("lag:Q", title="lag k (steps)", axis=LAG_AXIS),
            y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1]), title="accuracy (held out)"),
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
        .mark_rule(color="#888888", strokeWidth=1.5)
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
        title=alt.Title("Measured identity at lag k", subtitle="linear decoder, scored on held-out steps"),
    )


def chart_to_svg(chart: alt.TopLevelMixin) -> str:
    return vl_convert.vegalite_to_svg(chart.to_json())


def chart_to_png(chart: alt.TopLevelMixin, scale: float = 2) -> bytes:
    return vl_convert.vegalite_to_png(chart.to_json(), scale=scale)
