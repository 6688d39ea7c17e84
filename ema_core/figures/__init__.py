"""Altair figures: what every chart shares, whichever study draws it.

Each study's charts live in a module of their own in this package: pure functions from the frames
of the science modules and the store to charts.  This module holds what they have in common (sizes,
titles, axis formats, colour scales over :mod:`ema_core.palette`, reference lines, the SVG/PNG
export) and names no study, so a new study adds a module here without touching the others.

The pages show the charts and export them (SVG/PNG); nothing here knows about Streamlit, so any
other caller can export them too.  Every chart has a fixed size, the size of its export (a
"container" width renders at zero outside a browser); a page stretches a single view to its column
(Streamlit fits it, axes and legends included), but not a facet or a concatenation, which keeps the
size given here.  So the layout is decided here, once, for the narrowest place a chart is drawn:

- a single view may land in half a page's column (about ``COLUMN_WIDTH`` px at a 1100 px window):
  its title is wrapped and its legend laid out (below the plot, in as many columns as fit) for that
  width, so that nothing is cut when it is narrowed;
- a faceted chart is sized from its number of panels to fit ``PAGE_WIDTH`` (a 1100 px window's
  content column), legend and labels included.
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
# The widest a chart that a page cannot stretch may be, everything included: the content column of a
# 1100 px window is about 640 px wide (the sidebar open), and a facet is not narrowed to it.
PAGE_WIDTH = 600
# The narrowest a single view is drawn: half the content column of a 1100 px window, about 310 px in
# all.  Below its legend and beside its y axis, its plot keeps about TITLE_WIDTH px, and Vega cuts a
# title line longer than the plot with an ellipsis.
COLUMN_WIDTH = 300
TITLE_WIDTH = 240
# Title and legend text sizes, set on every chart (the app's theme would otherwise enlarge them past
# the widths estimated here).  Widths are estimated from Helvetica's glyph widths (Arial and
# Liberation Sans share them; in thousandths of an em), bold 10 % wider, plus a 5 % margin: a title
# wrapped to fit then never runs past the chart, and no line is broken that would have fitted.
TITLE_SIZE, SUBTITLE_SIZE, LEGEND_SIZE = 13, 11, 11
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


def chart_title(text: str, subtitle: str = "", width: float = TITLE_WIDTH) -> alt.Title:
    """A title and subtitle broken into lines no wider than ``width`` pixels (the plot's width where
    the chart is drawn narrowest): a longer line would be cut once a page narrows the chart."""
    title = _wrap(text, width, TITLE_SIZE, True)
    sub = _wrap(subtitle, width, SUBTITLE_SIZE, False) if subtitle else []
    kwargs = {"subtitle": sub if len(sub) > 1 else sub[0]} if sub else {}
    return alt.Title(title if len(title) > 1 else title[0], **kwargs)


# A legend entry beside its neighbours: the symbol and its gap, the label, the space between columns.
_ENTRY_PAD = 34


def legend_columns(labels: Iterable[str], width: float = COLUMN_WIDTH) -> int:
    """How many columns of ``labels`` fit side by side in ``width`` px (each column as wide as the widest
    label), at least one: a legend below a plot laid out so that every entry shows."""
    widths = [text_width(str(label), LEGEND_SIZE) + _ENTRY_PAD for label in labels] or [0.0]
    return max(1, min(len(widths), int(width // max(widths))))


def legend(labels: Iterable[str] = (), *, width: float = COLUMN_WIDTH, orient: str = "bottom",
           **kwargs) -> alt.Legend:
    """A legend that shows every entry whole: no label limit, and below (or above) the plot in as many
    columns as fit ``width`` (the chart's narrowest), so that it never widens the chart past its column.
    ``orient="right"`` keeps one column beside the plot (a chart drawn at a page's whole width only)."""
    labels = list(labels)
    layout = {"columns": legend_columns(labels, width)} if orient in ("top", "bottom") and labels else {}
    return alt.Legend(orient=orient, labelLimit=0, titleLimit=0, labelFontSize=LEGEND_SIZE,
                      titleFontSize=LEGEND_SIZE, **layout, **kwargs)


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


def facet_grid(panels: int, *, max_columns: int, min_width: int, max_width: int, axis: int = 70,
               gap: int = 20) -> tuple[int, int]:
    """(columns, px per panel) of ``panels`` facets wrapped into rows that fit PAGE_WIDTH, ``axis`` px of
    y axis beside the first column and ``gap`` px between columns: as many columns as fit at
    ``min_width`` (up to ``max_columns``), each panel as wide as the row then allows (up to ``max_width``)."""
    columns = max(1, min(panels, max_columns))
    while columns > 1 and axis + columns * min_width + (columns - 1) * gap > PAGE_WIDTH:
        columns -= 1
    width = (PAGE_WIDTH - axis - (columns - 1) * gap) // columns
    return columns, int(max(min(width, max_width), min(min_width, width)))


# Several legends below (or above) a plot stack one under another from its left edge: side by side
# they would widen a narrow chart past its column (Vega lays them out in a row by default).  Vega-Lite
# types this setting as an expression only, so it goes in as one (an object literal).
_LEGEND_LAYOUT = alt.ExprRef(expr="{top: {direction: 'vertical', anchor: 'start'}, "
                                  "bottom: {direction: 'vertical', anchor: 'start'}}")


def with_layout(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    """``chart`` with the layout every chart shares; the builders' last step.

    Its titles take the sizes they were wrapped for; its legends stack (above).  A single view (a chart or a layer) fits its width, axes and legends
    included, and takes the height its legends need beneath a plot of the height given: "fit" (what
    a page would otherwise ask for) keeps the whole height fixed, and a legend below the plot then
    squashes it.  A facet keeps its size ("fit" does not apply to it)."""
    # The title sizes the lines were wrapped for (chart_title), whatever the page's theme would give.
    chart = chart.configure_legend(layout=_LEGEND_LAYOUT).configure_title(fontSize=TITLE_SIZE,
                                                                           subtitleFontSize=SUBTITLE_SIZE)
    if isinstance(chart, (alt.Chart, alt.LayerChart)):
        chart = chart.properties(autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    return chart


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
                legend=legend([label], title=None, symbolType="stroke", symbolSize=400, symbolStrokeWidth=2)),
            tooltip=[alt.Tooltip("label:N", title="reference")],
        )
    )


def chart_to_svg(chart: alt.TopLevelMixin) -> str:
    return vl_convert.vegalite_to_svg(chart.to_json())


def chart_to_png(chart: alt.TopLevelMixin, scale: float = 2) -> bytes:
    return vl_convert.vegalite_to_png(chart.to_json(), scale=scale)
