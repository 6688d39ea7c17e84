"""Altair figures: what every chart shares, whichever study draws it.

Each study's charts live in a module of their own in this package: pure functions from the frames
of the science modules and the store to charts.  This module holds what they have in common (sizes,
titles, axis formats, colour scales over :mod:`ema_core.palette`, reference lines, the SVG/PNG
export) and names no study, so a new study adds a module here without touching the others.

The pages show the charts and export them (SVG/PNG); nothing here knows about Streamlit, so any
other caller can export them too.  Every chart has a fixed size: Streamlit stretches it to the
container, and the SVG/PNG exports need a real size (a "container" width renders at zero outside a
browser).
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import altair as alt
import numpy as np
import pandas as pd
import vl_convert

from ema_core import palette

WIDTH, HEIGHT = 420, 300
# Title text sizes (Vega's defaults).  Widths are estimated from Helvetica's glyph widths (Arial and
# Liberation Sans share them; in thousandths of an em), bold 10 % wider, plus a 5 % margin: a title
# wrapped to fit then never runs past the chart, and no line is broken that would have fitted.
TITLE_SIZE, SUBTITLE_SIZE = 13, 12
_GLYPHS = {191: "'", 222: "ijl", 278: "ft .,;:!I/[]|", 333: "r-()`", 469: "^", 500: "ckvxyzsJ\"", 584: "=+<>~±×−",
           611: "FTZ", 667: "ABEKPSVXY&", 722: "CDHNRUw", 778: "GOQ", 833: "mM", 889: "%", 944: "W"}
_GLYPH_WIDTH = {ch: w / 1000 for w, chars in _GLYPHS.items() for ch in chars}
_DEFAULT_GLYPH = 0.556  # the other letters, digits, and Greek

# Counts (lags, steps) are whole numbers: no 0.5 ticks when the range is short, no "1e+3", a
# thousands separator past 999.
COUNT_FORMAT = ",d"
ACCURACY_AXIS = alt.Axis(format=".1f")
# Error bars are drawn only where a spread exists: one seed has no std (Vega reads NaN as null).
HAS_STD = "isValid(datum.std) && isFinite(datum.std)"


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


def color_scale(domain: Iterable[str], color_of: Callable[[str], str]) -> alt.Scale:
    """The colour scale of the series in ``domain`` (only those shown), each in the palette's colour
    for it (``color_of``), whichever others are shown."""
    domain = list(domain)
    return alt.Scale(domain=domain, range=palette.scale_range(domain, color_of))


def label_colors(labels: dict[str, str], colors: dict[str, str]) -> dict[str, str]:
    """Label -> colour for a chart that shows ``labels`` (key -> label) in ``colors`` (key -> colour)."""
    return {label: colors.get(key, palette.OTHER_COLOR) for key, label in labels.items()}


def reference_rule(field: str, value: float, label: str, color: str) -> alt.Chart:
    """A dashed horizontal line at ``value`` (the column ``field``), labelled ``label``.

    The line is labelled through a legend of its own: curves that settle onto it would hide a text
    label drawn on the plot.
    """
    return (
        alt.Chart(pd.DataFrame({field: [value], "label": [label]}))
        .mark_rule(color=color, strokeWidth=1.5)
        .encode(
            y=f"{field}:Q",
            strokeDash=alt.StrokeDash(
                "label:N", scale=alt.Scale(domain=[label], range=[[6, 4]]),
                legend=alt.Legend(title=None, symbolType="stroke", symbolSize=400, symbolStrokeWidth=2)),
            tooltip=[alt.Tooltip("label:N", title="reference")],
        )
    )


def chart_to_svg(chart: alt.TopLevelMixin) -> str:
    return vl_convert.vegalite_to_svg(chart.to_json())


def chart_to_png(chart: alt.TopLevelMixin, scale: float = 2) -> bytes:
    return vl_convert.vegalite_to_png(chart.to_json(), scale=scale)
