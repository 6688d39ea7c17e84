"""The depth study's charts and the frames they draw (PAPER.md, the depth axis), one colour per rule
(:data:`ema_core.palette.DEPTH_RULE_COLORS`): the explorer's, then the trained comparison's.

The explorer's charts come in pairs: the stack of writes read at its distance L − j from the top, and
beside it the time axis's EMA trace read at lag k, on the same axes (x from 0 to L, the same y) and
by the same metric, so the two forms of dilution are compared at a glance.  The trace keeps the
colour of its rate (:func:`ema_core.palette.rate_color`), as on the Trace dilution page.
"""
from __future__ import annotations

import math
from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd

from ema_core import learning_rates, palette
from ema_core.depth import ALL_RULES, RULE_LABELS
from ema_core.studies.depth import learning_rates as rate_tables
from ema_core.studies.depth.findings import blocks, by_budget, claim_verdicts, trained_deep
from ema_core.dilution import rate_label
from ema_core.figures import (ACCURACY_AXIS, COLUMN_WIDTH, COUNT_FORMAT, HAS_STD, HEIGHT, LEGEND_SIZE, PAGE_WIDTH,
                              WIDTH, chart_title, color_scale, facet_grid, legend, reference_rule, value_format,
                              with_layout)
from ema_core.studies.dilution.figures import (HORIZON_DASHES, HORIZON_KINDS, SIR_CLIP_DB, WEIGHT_FLOOR, feature_color,
                                               horizon_rows)

# -- the explorer --------------------------------------------------------------------------------------

EXPLORER_DISTANCE_TITLE = "distance from the top L − j (layers)"
EXPLORER_LAG_TITLE = "lag k (steps)"
EXPLORER_HORIZON_KINDS = ("analytic d*", "measured")  # dashed, solid: as the time axis draws k* and its measured one
EXPLORER_DECODER_SUBTITLES = {"linear": "linear decoder, scored on held-out stacks",
                              "peel": "peel decoder (knows the codes and weights, no training), held-out stacks"}
_LABEL_RULE = {label: rule for rule, label in RULE_LABELS.items()}


# The time axis's trace where it shares a chart with the rules: "EMA trace α=0.2", in its rate's colour.
EXPLORER_TRACE_PREFIX = "EMA trace "


def explorer_trace_label(alpha: float) -> str:
    return EXPLORER_TRACE_PREFIX + rate_label(alpha)


def explorer_series_color(label: str) -> str:
    """The colour of a series of the explorer: a rule's (by its label or name), else a trace's by its rate
    (``α=…``, or ``EMA trace α=…``)."""
    rule = _LABEL_RULE.get(label, label)
    if rule in palette.DEPTH_RULE_COLORS:
        return palette.DEPTH_RULE_COLORS[rule]
    return feature_color(label.removeprefix(EXPLORER_TRACE_PREFIX))


def explorer_rule_order(labels) -> list[str]:
    """Rule labels in ALL_RULES' order, then any other series (the trace), in whatever order the
    rows came."""
    labels = list(dict.fromkeys(labels))
    rules = [RULE_LABELS[r] for r in ALL_RULES if RULE_LABELS[r] in labels]
    return rules + [lab for lab in labels if lab not in rules]


def _color(field: str, labels, title: str) -> alt.Color:
    order = explorer_rule_order(labels)
    return alt.Color(f"{field}:N", scale=color_scale(order, explorer_series_color), sort=order, title=title,
                     legend=legend(order, symbolType="stroke", symbolStrokeWidth=3))


def _x(field: str, title: str, layers: int) -> alt.X:
    # The same domain on both sides of a pair, 0..L whatever the data: the same axes.
    return alt.X(f"{field}:Q", title=title, scale=alt.Scale(domain=[0, layers], nice=False),
                 axis=alt.Axis(tickMinStep=1, format=COUNT_FORMAT))


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the rule's label in ``series`` (what the legend shows)."""
    return df.assign(series=df["rule"].map(RULE_LABELS))


def _time_series(df: pd.DataFrame, field: str) -> pd.DataFrame:
    return df.rename(columns={field: "series"})


def _decades(weights: Sequence[float]) -> tuple[list[float], list[float]]:
    """(domain, tick values) of a log axis over ``weights``: whole decades, at most about seven ticks."""
    lo = math.floor(math.log10(min(weights))) if len(weights) else -1
    hi = max(0, math.ceil(math.log10(max(weights)))) if len(weights) else 0
    step = max(1, math.ceil((hi - lo) / 6))
    return [10.0**lo, 10.0**hi], [10.0**e for e in range(hi, lo - 1, -step)]


def _line(df: pd.DataFrame, x: alt.X, y: alt.Y, color: alt.Color, title: alt.Title | None, tooltip: list) -> alt.Chart:
    chart = alt.Chart(df, width=WIDTH, height=HEIGHT).mark_line(point=True).encode(x=x, y=y, color=color,
                                                                                    tooltip=tooltip)
    return chart if title is None else chart.properties(title=title)


def _depth_and_time(d: pd.DataFrame, t: pd.DataFrame, layers: int, y: alt.Y, value: alt.Tooltip,
                    depth_title: alt.Title, time_title: alt.Title) -> tuple[alt.Chart, alt.Chart]:
    """(depth, time): ``d`` by distance, one line per rule, beside ``t`` by lag, one line per trace, on the
    same axes (0..``layers`` and ``y``); each point's tooltip names its line, its x and ``value``."""
    depth = _line(d, _x("distance", EXPLORER_DISTANCE_TITLE, layers), y, _color("series", d["series"], "rule"),
                  depth_title, [alt.Tooltip("series:N", title="rule"), alt.Tooltip("distance:Q"), value])
    time = _line(t, _x("lag", EXPLORER_LAG_TITLE, layers), y, _color("series", t["series"], "trace"),
                 time_title, [alt.Tooltip("series:N", title="trace"), alt.Tooltip("lag:Q"), value])
    return with_layout(depth), with_layout(time)


def explorer_weight_charts(depth_df: pd.DataFrame, time_df: pd.DataFrame, layers: int) -> tuple[alt.Chart, alt.Chart]:
    """(depth, time): the weight a_j of layer j's write in the stream read for it, by distance, one line per
    rule; beside it the trace's α(1−α)^k by lag.  Log y, the same decades on both.

    ``depth_df``: rule, distance, weight (:func:`ema_core.depth.explorer.analytic_frame`); ``time_df``:
    rate, lag, weight (:func:`ema_core.dilution.analytic_frame`)."""
    d = _labelled(depth_df.loc[depth_df["weight"] >= WEIGHT_FLOOR, ["rule", "distance", "weight"]])
    t = _time_series(time_df.loc[time_df["weight"] >= WEIGHT_FLOOR, ["rate", "lag", "weight"]], "rate")
    domain, ticks = _decades([*d["weight"], *t["weight"]])
    y = alt.Y("weight:Q", scale=alt.Scale(type="log", domain=domain), axis=alt.Axis(values=ticks, format=".0e"),
              title="weight (log scale)")
    return _depth_and_time(d, t, layers, y, alt.Tooltip("weight:Q", format=".3e"),
                           chart_title("Weight of layer j's write in the stream",
                                       f"a_j = c_j·g_j / Σ c_i·g_i, read from the top (below {WEIGHT_FLOOR:g} "
                                       "not drawn)"),
                           chart_title("Time axis: weight at lag k",
                                       "α(1−α)^k of the token at lag k in the EMA trace, α = 1 − γ"))


def _sir_frame(df: pd.DataFrame) -> pd.DataFrame:
    # ±inf cannot go into the chart's JSON; the tooltip keeps the true value as text.
    out = df.assign(sir_db_shown=df["sir_db"].clip(-SIR_CLIP_DB, SIR_CLIP_DB))
    out["sir_text"] = [("+∞ dB" if v > 0 else "−∞ dB") if math.isinf(v) else f"{v:.1f} dB" for v in df["sir_db"]]
    return out.drop(columns=["sir_db", "sir"], errors="ignore")


_SIR_Y = alt.Y("sir_db_shown:Q", scale=alt.Scale(domain=[-SIR_CLIP_DB, SIR_CLIP_DB], clamp=True),
               axis=alt.Axis(format="d"), title=f"SIR (dB, clipped to ±{SIR_CLIP_DB:g})")


def explorer_sir_charts(depth_df: pd.DataFrame, time_df: pd.DataFrame, layers: int) -> tuple[alt.Chart, alt.Chart]:
    """(depth, time): the signal-to-interference of layer j's write by distance, one line per rule; beside it
    the trace's at lag k.  dB, clipped to ±SIR_CLIP_DB on both."""
    d = _sir_frame(_labelled(depth_df[["rule", "distance", "sir", "sir_db"]]))
    t = _sir_frame(_time_series(time_df[["rate", "lag", "sir", "sir_db"]], "rate"))
    return _depth_and_time(d, t, layers, _SIR_Y, alt.Tooltip("sir_text:N", title="SIR"),
                           chart_title("Signal-to-interference of layer j's write",
                                       "a_j² against the rest of the stream's energy Σ a_i² − a_j²"),
                           chart_title("Time axis: SIR at lag k",
                                       "w_k² against the rest of the trace's energy α/(2−α)"))


def explorer_depth_sweep_chart(sweep_df: pd.DataFrame, layers: int, alpha: float) -> alt.LayerChart:
    """The SIR of the embedding's write (layer 0, at distance L) as the stack deepens, one line per rule, and
    the time axis's token at lag L of the trace of rate ``alpha`` (``series == "time"``); a rule at this L.

    ``sweep_df``: :func:`ema_core.depth.explorer.embedding_sir_frame`."""
    trace = explorer_trace_label(alpha)
    df = sweep_df.assign(series=sweep_df["series"].map(lambda s: trace if s == "time" else RULE_LABELS[s]))
    df = _sir_frame(df)
    top = int(df["layers"].max())
    lines = _line(df, _x("layers", "depth L (layers) · lag L (steps) for the trace", top), _SIR_Y,
                  _color("series", df["series"], "reads"), None,
                  [alt.Tooltip("series:N", title="reads"), alt.Tooltip("layers:Q", title="L"),
                   alt.Tooltip("sir_text:N", title="SIR")])
    here = f"this page's L = {layers}"
    mark = (alt.Chart(pd.DataFrame({"layers": [layers], "label": [here]}))
            .mark_rule(color=palette.REFERENCE_COLOR, strokeWidth=1.5)
            .encode(x="layers:Q",
                    strokeDash=alt.StrokeDash("label:N", scale=alt.Scale(domain=[here], range=[[6, 4]]),
                                              legend=legend([here], title=None, symbolType="stroke", symbolSize=400,
                                                            symbolStrokeWidth=2)),
                    tooltip=[alt.Tooltip("label:N", title="reference")]))
    return with_layout(alt.layer(lines, mark).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Layer 0's write as the stack deepens",
                          "SIR of layer 0 in a stack of L layers; the trace's token at lag L beside it")))


def explorer_horizon_frame(limits: pd.DataFrame, layers: int) -> pd.DataFrame:
    """The depth horizons to draw: for each rule whose analytic d* lies on the distance axis, d* and the
    measured horizon beside it (the latter where it too is on the axis).  Long format: series, distance,
    kind, text (the time axis's horizon_frame, of layers).  A pair another rule already has is drawn once."""
    rows = horizon_rows(limits, layers, "d*", EXPLORER_HORIZON_KINDS, lambda r: RULE_LABELS[r.rule])
    return pd.DataFrame(rows, columns=["series", "distance", "kind", "text"])


def _identity(acc: pd.DataFrame, x_field: str, x_title: str, layers: int, chance: float, color_title: str,
              horizons: pd.DataFrame | None, kinds: Sequence[str], title: alt.Title) -> alt.LayerChart:
    color = _color("series", acc["series"], color_title)
    lines = (alt.Chart(acc[["series", x_field, "accuracy"]]).mark_line(point=True).encode(
        x=_x(x_field, x_title, layers),
        y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="accuracy (held out)"),
        color=color,
        tooltip=[alt.Tooltip("series:N", title=color_title), alt.Tooltip(f"{x_field}:Q"),
                 alt.Tooltip("accuracy:Q", format=".3f")]))
    layers_ = [lines, reference_rule("chance", chance, f"chance 1/V = {chance:.4g}", palette.REFERENCE_COLOR)]
    if horizons is not None and len(horizons):
        layers_.append(alt.Chart(horizons).mark_rule(strokeWidth=1.5).encode(
            x=f"{x_field}:Q",
            color=color,  # the lines' very scale: one legend, one colour per series
            strokeDash=alt.StrokeDash("kind:N", title="horizon", scale=alt.Scale(domain=list(kinds),
                                                                                 range=list(HORIZON_DASHES)),
                                      legend=legend(kinds, symbolType="stroke", symbolStrokeWidth=2)),
            tooltip=[alt.Tooltip("series:N", title=color_title), alt.Tooltip("kind:N", title="horizon"),
                     alt.Tooltip("text:N", title="horizons")]))
    chart = alt.layer(*layers_)
    if len(layers_) > 2:  # the chance line's dash and the horizons' dashes are two legends
        chart = chart.resolve_scale(strokeDash="independent")
    return with_layout(chart.properties(width=WIDTH, height=HEIGHT, title=title))


def explorer_identity_charts(depth_acc: pd.DataFrame, time_acc: pd.DataFrame, chance: float, layers: int,
                             decoder: str | None = None, depth_horizons: pd.DataFrame | None = None,
                             time_horizons: pd.DataFrame | None = None) -> tuple[alt.LayerChart, alt.LayerChart]:
    """(depth, time): measured accuracy of naming layer j's token by distance, one line per rule, and of the
    trace's token at lag k; chance on both, and each side's horizons (dashed d*/k*, solid measured).

    ``depth_acc``: rule, distance, accuracy (:class:`ema_core.depth.explorer.DepthResult`); ``time_acc``:
    feature, lag, accuracy (the time axis's IdentityResult); the horizons from
    :func:`explorer_horizon_frame` and :func:`ema_core.studies.dilution.figures.horizon_frame`."""
    sub = EXPLORER_DECODER_SUBTITLES.get(decoder, "scored on held-out stacks")
    d = _labelled(depth_acc[["rule", "distance", "accuracy"]])
    t = _time_series(time_acc[["feature", "lag", "accuracy"]], "feature")
    th = None if time_horizons is None else _time_series(time_horizons, "feature")
    depth = _identity(d, "distance", EXPLORER_DISTANCE_TITLE, layers, chance, "rule", depth_horizons,
                      EXPLORER_HORIZON_KINDS, chart_title("Measured identity of layer j's write", sub))
    time = _identity(t, "lag", EXPLORER_LAG_TITLE, layers, chance, "trace", th, HORIZON_KINDS,
                     chart_title("Time axis: identity at lag k", sub.replace("stacks", "steps")))
    return depth, time


# -- the trained comparison --------------------------------------------------------------------------
# Charts of the depth kind's tables (store.depth: depth_results, depth_weights, depth_weight_steps,
# depth_remix): held-out loss and the probes against depth per rule, the learned depth weights as
# DenseFormer draws them and as they train, the rates trained at, the remix test beside the jointly
# trained gain, and the budget axis (each budget judged apart, by ema_core.studies.depth.findings).

DEPTH_METRICS: dict[str, tuple[str, str]] = {
    # column: (axis title, what it is)
    "val_loss": ("held-out loss (nats/token)", "the final evaluation on the held-out novel"),
    "val_bpb": ("bits per byte", "the held-out loss per UTF-8 byte: comparable across tokenizers"),
    "probe_token": ("input token read from the last stream", "accuracy of a ridge probe among the most frequent "
                                                              "tokens"),
    "probe_early": ("block 1's write read from the last stream (R²)", "a ridge regression onto every coordinate"),
    "probe_early_resid": ("block 1's own write in the last stream (R²)",
                          "its write less what the embedding x₀ explains, by a ridge regression"),
    "probe_prev": ("previous token read from the last stream", "accuracy of a ridge probe of the previous token "
                                                               "among the most frequent tokens"),
    "mix_entropy": ("spread of the mixing weights", "0: all weight on one output, 1: even over every output; the "
                                                    "fixed sum has none"),
}
# The rules are set a little apart along depth (a fraction of an octave each, in the paper's order), as
# the boundary map's crossing chart sets its mixers apart: rules that share one body often end within a
# hair of each other, and their points and error bars would be drawn one over the other.  The tooltip
# keeps the true depth.
DODGE_OCTAVES = 0.04
# Room beyond the shallowest and the deepest depth: a point on the edge of a log axis is drawn half
# outside, and a single depth would make a log domain of zero width.
DEPTH_MARGIN_OCTAVES = 0.25
# A trained line solid, the same model at initialisation dashed.
WHEN_DASHES = {"trained": [1, 0], "at init": [5, 4]}


def _rules_present(names) -> list[str]:
    present = set(names)
    return [r for r in ALL_RULES if r in present] + sorted(present - set(ALL_RULES))


def _rule_color(rules: list[str], width: float = COLUMN_WIDTH) -> alt.Color:
    labels = [RULE_LABELS.get(r, r) for r in rules]
    colors = {RULE_LABELS.get(r, r): palette.DEPTH_RULE_COLORS.get(r, palette.OTHER_COLOR) for r in rules}
    return alt.Color("rule_label:N", title=None, sort=labels,
                     scale=color_scale(labels, lambda v: colors.get(v, palette.OTHER_COLOR)),
                     legend=legend(labels, width=width))


def depth_frame(rows: pd.DataFrame, metrics=tuple(DEPTH_METRICS), init: bool = True) -> pd.DataFrame:
    """Mean, std and seeds of each metric per (rule, depth), long: rule, rule_label, depth, metric,
    when ("trained", or "at init" for the probes' baseline), mean, std, n."""
    out = []
    for metric in metrics:
        for when, col in (("trained", metric), ("at init", f"{metric}_init")):
            if col not in rows or (when == "at init" and not init):
                continue
            g = (rows.assign(v=pd.to_numeric(rows[col], errors="coerce")).dropna(subset=["v"])
                 .groupby(["rule", "depth"])["v"].agg(["mean", "std", "count"]).reset_index())
            out.append(g.rename(columns={"count": "n"}).assign(metric=metric, when=when))
    if not out:
        return pd.DataFrame(columns=["rule", "rule_label", "depth", "metric", "when", "mean", "std", "n"])
    frame = pd.concat(out, ignore_index=True)
    frame["rule_label"] = frame["rule"].map(lambda r: RULE_LABELS.get(r, r))
    return frame


def depth_metric_chart(frame: pd.DataFrame, metric: str) -> alt.LayerChart:
    """One metric against depth (log₂), a line per rule (mean over seeds, ± std where there are several);
    the probes' value at initialisation dashed in the rule's colour, the baseline training is read against."""
    axis, what = DEPTH_METRICS[metric]
    data = frame[frame["metric"] == metric]
    rules = _rules_present(data["rule"])
    depths = sorted(int(d) for d in data["depth"].unique())
    offset = {r: DODGE_OCTAVES * (i - (len(rules) - 1) / 2) for i, r in enumerate(rules)}
    margin = DEPTH_MARGIN_OCTAVES + DODGE_OCTAVES * (len(rules) - 1) / 2
    data = data.assign(depth_drawn=[float(d) * 2.0 ** offset[r] for d, r in zip(data["depth"], data["rule"])])
    x = alt.X("depth_drawn:Q", title="blocks (log scale)",
              scale=alt.Scale(type="log", base=2, nice=False,
                              domain=[min(depths) * 2.0 ** -margin, max(depths) * 2.0 ** margin] if depths else None),
              axis=alt.Axis(values=depths, format=COUNT_FORMAT))
    y = alt.Y("mean:Q", title=axis, scale=alt.Scale(zero=False), axis=alt.Axis(format=value_format(data["mean"])))
    color = _rule_color(rules)
    whens = [w for w in WHEN_DASHES if w in set(data["when"])]
    dash = alt.StrokeDash("when:N", title=None, sort=whens,
                          scale=alt.Scale(domain=whens, range=[WHEN_DASHES[w] for w in whens]),
                          # Drawn as a stroke: a dot would not show which line is dashed.
                          legend=legend(whens, symbolType="stroke", symbolSize=400, symbolStrokeWidth=2)
                          if len(whens) > 1 else None)
    tooltip = [alt.Tooltip("rule_label:N", title="rule"), alt.Tooltip("depth:Q", title="blocks"),
               alt.Tooltip("when:N"), alt.Tooltip("mean:Q", format=".4f"),
               alt.Tooltip("std:Q", format=".4f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")]
    base = alt.Chart(data).encode(x=x, color=color)
    layers = []
    spread = pd.to_numeric(data["std"], errors="coerce")
    if np.isfinite(spread).any():  # one seed has no spread: no error bar, nor a layer for none
        layers.append(base.transform_filter(HAS_STD)
                      .transform_calculate(lo="datum.mean - datum.std", hi="datum.mean + datum.std")
                      .mark_errorbar().encode(y=alt.Y("lo:Q", title=axis), y2="hi:Q", detail="when:N"))
    # The points a layer apart from the lines: a line's own points would make the dash legend draw
    # filled symbols with no stroke, so no dash.
    layers += [base.mark_line().encode(y=y, strokeDash=dash, detail="when:N", tooltip=tooltip),
               base.mark_point(filled=True, size=40, opacity=1).encode(y=y, detail="when:N", tooltip=tooltip)]
    n = int(data["n"].max()) if len(data) else 0
    return with_layout(alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title(f"{axis[0].upper()}{axis[1:]} against depth",
                          f"{what}; mean over {n} seed{'s' if n != 1 else ''}"
                          + ("; ± one std" if len(layers) > 2 else "")
                          + ("; rules set a little apart along depth" if len(rules) > 1 else ""))))


# "static learned weights (DenseFormer)" -> ["static learned weights", "(DenseFormer)"]; a label without " (" whole.
_TWO_LINES = ("indexof(datum.value, ' (') > 0 ? [slice(datum.value, 0, indexof(datum.value, ' (')), "
              "slice(datum.value, indexof(datum.value, ' (') + 1)] : datum.value")


def weights_frame(rows: pd.DataFrame, depth: int) -> pd.DataFrame:
    """The depth weights of one depth, mean over seeds: rule, rule_label, layer, source, weight, n."""
    data = rows[rows["depth"] == depth]
    g = data.groupby(["rule", "layer", "source"])["weight"].agg(["mean", "count"]).reset_index()
    g = g.rename(columns={"mean": "weight", "count": "n"})
    g["rule_label"] = g["rule"].map(lambda r: RULE_LABELS.get(r, r))
    return g


def weights_map(frame: pd.DataFrame, depth: int) -> alt.FacetChart:
    """Each rule's weights as DenseFormer draws them: the stream after block i (rows, 1 at the top) × the
    output it weighs (columns, 0 = the embedding); a lower-triangular map, pale at 0."""
    rules = _rules_present(frame["rule"])
    labels = [RULE_LABELS.get(r, r) for r in rules]
    weights = pd.to_numeric(frame["weight"], errors="coerce").to_numpy(dtype=float)
    finite = np.abs(weights[np.isfinite(weights)])
    reach = float(finite.max()) if len(finite) and finite.max() > 0 else 1.0  # symmetric about 0
    columns, width = facet_grid(len(rules), max_columns=3, min_width=150, max_width=260)
    cell = max(6, width // max(depth + 1, 1))
    data = frame.assign(text=[f"{w:.2f}" for w in frame["weight"]])
    # Shared scales: one y axis beside the first column, as facet_grid sizes the row for (an axis beside
    # every facet would widen the map past the page); every rule has the same rows and columns anyway.
    # The columns' title is in the subtitle: under each facet it would be wider than a narrow facet, and
    # widen the map past its column.
    base = alt.Chart().encode(
        x=alt.X("source:O", title=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("layer:O", title="stream after block", sort="ascending"))
    cells = base.mark_rect(stroke=palette.TEXT_ON_DARK, strokeWidth=1).encode(
        color=alt.Color("weight:Q", title="weight",
                        scale=alt.Scale(domain=[-reach, 0, reach], range=list(palette.ABOVE_CHANCE_COLORS)),
                        legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=200,
                                          titleFontSize=LEGEND_SIZE, labelFontSize=LEGEND_SIZE)),
        tooltip=[alt.Tooltip("rule_label:N", title="rule"), alt.Tooltip("layer:O", title="after block"),
                 alt.Tooltip("source:O", title="weighs output"), alt.Tooltip("weight:Q", format=".3f"),
                 alt.Tooltip("n:Q", title="seeds")])
    layers = [cells]
    if depth <= 8:  # the numbers fit in a cell up to 8 blocks
        # Dark cells (either end of the scale) take light text; the threshold is where the scale gets dark.
        on_dark = alt.condition(f"abs(datum.weight) > {palette.ABOVE_CHANCE_DARK * reach!r}",
                                alt.value(palette.TEXT_ON_DARK), alt.value(palette.TEXT_COLOR))
        layers.append(base.mark_text(fontSize=8).encode(text="text:N", color=on_dark))
    chart = alt.layer(*layers, data=data).properties(width=alt.Step(cell), height=alt.Step(cell))
    # A rule's heading on two lines where its label has a parenthesis: on one it is wider than a facet.
    header = alt.Header(labelFontSize=LEGEND_SIZE, labelExpr=_TWO_LINES)
    return with_layout(chart.facet(facet=alt.Facet("rule_label:N", sort=labels, title=None, header=header),
                                   columns=columns)
                       .properties(title=chart_title(
                           f"Depth weights at {depth} block{'' if depth == 1 else 's'}, as DenseFormer draws them",
                           "row i: the stream after block i (what block i + 1, or the head, reads); column j: its "
                           "weight on the output of block j (0: the embedding); sum: 1 on its own output; select: "
                           "the per-token softmax averaged over the probe tokens", PAGE_WIDTH)))


# -- the rates trained at ---------------------------------------------------------------------------------

def rates_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The peak rate each (rule, depth) trained at: a row per rule (the paper's order), a column per depth
    ("4 blocks"), each cell the rate (several joined, where the rows hold more than one)."""
    data = rows.dropna(subset=["lr"])
    if data.empty:
        return pd.DataFrame(columns=["rule"])
    cells = data.groupby(["rule", "depth"])["lr"].agg(lambda v: ", ".join(f"{x:.3g}" for x in sorted(set(v))))
    table = cells.unstack("depth")
    table = table.reindex(_rules_present(table.index))
    table.columns = [blocks(int(L)) for L in table.columns]
    return table.rename_axis("rule").reset_index()


def rate_source(config: dict, summary: dict | None = None) -> str:
    """Where one config's rates came from, in words (:func:`ema_core.learning_rates.rate_source` over this study's tables)."""
    return learning_rates.rate_source(rate_tables.TABLES, config, summary)


# -- the weights as they train ---------------------------------------------------------------------------

def source_label(source: int) -> str:
    """The output a weight is on: the embedding (0) or a block's."""
    return "0: the embedding" if int(source) == 0 else f"block {int(source)}"


def trajectory_frame(steps: pd.DataFrame, rule: str, depth: int) -> pd.DataFrame:
    """One rule's mixing weights at one depth as they train (``depth_weight_steps``), mean over seeds:
    layer, source, source_label, step, weight, std, n."""
    data = steps[(steps["rule"] == rule) & (steps["depth"] == depth)]
    g = (data.groupby(["layer", "source", "step"])["weight"].agg(["mean", "std", "count"]).reset_index()
         .rename(columns={"mean": "weight", "count": "n"}))
    g["source_label"] = g["source"].map(source_label)
    return g


def trajectory_chart(frame: pd.DataFrame, rule: str, depth: int) -> alt.FacetChart:
    """Small multiples, one per block's stream: the weight it gives each earlier output (a line per output,
    0 the embedding) against the training step (0: initialisation), mean over seeds."""
    sources = sorted(int(s) for s in frame["source"].unique())
    labels = [source_label(s) for s in sources]
    colors = {source_label(s): palette.order_color(s, depth) for s in sources}
    panels = max(1, frame["layer"].nunique())
    columns, width = facet_grid(panels, max_columns=4, min_width=120, max_width=260)
    n = int(frame["n"].max()) if len(frame) else 0
    chart = alt.Chart(frame, width=width, height=110).mark_line(point=alt.OverlayMarkDef(size=20)).encode(
        x=alt.X("step:Q", title="training step", axis=alt.Axis(format=COUNT_FORMAT, tickCount=4)),
        y=alt.Y("weight:Q", title="weight", axis=alt.Axis(format=value_format(frame["weight"], ticks=4))),
        color=alt.Color("source_label:N", title="weight on the output of", sort=labels,
                        scale=color_scale(labels, lambda v: colors.get(v, palette.OTHER_COLOR)),
                        legend=legend(labels, width=PAGE_WIDTH)),
        tooltip=[alt.Tooltip("layer:O", title="stream after block"), alt.Tooltip("source_label:N", title="output"),
                 alt.Tooltip("step:Q"), alt.Tooltip("weight:Q", format=".4f"),
                 alt.Tooltip("std:Q", format=".4f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")])
    header = alt.Header(labelFontSize=LEGEND_SIZE, labelExpr="'stream after block ' + datum.value")
    return with_layout(chart.facet(facet=alt.Facet("layer:O", title=None, header=header), columns=columns)
                       .properties(title=chart_title(
                           f"{RULE_LABELS.get(rule, rule)[:1].upper()}{RULE_LABELS.get(rule, rule)[1:]}: its weights "
                           f"as they train, at {blocks(depth)}",
                           f"the weight each block's stream gives every earlier output, at every evaluation (step 0: "
                           f"initialisation); mean over {n} seed{'' if n == 1 else 's'}", PAGE_WIDTH)))


# -- the remix test --------------------------------------------------------------------------------------

REMIX_COLUMNS = ["depth", "rule", "seeds", "joint_gain_mean", "joint_gain_std", "remix_gain_mean", "remix_gain_std",
                 "share"]


def remix_frame(rows: pd.DataFrame, remix: pd.DataFrame) -> pd.DataFrame:
    """Per depth and fitted rule (``depth_remix``): the jointly trained gain, loss(sum) − loss(rule) from
    ``depth_results`` at the same (depth, seed), and the remix's, base_loss − val_loss (the frozen sum's
    held-out loss less the remixed one's), each formed per seed then mean and std over the seeds that
    hold both; ``share``, the remix's mean gain over the joint one's (none where the joint gain is not
    above 0: nothing to recover).  A cell held twice (one seed run twice) is averaged."""
    if remix.empty:
        return pd.DataFrame(columns=REMIX_COLUMNS)
    loss = rows.groupby(["rule", "depth", "seed"])["val_loss"].mean()
    per = pd.DataFrame({
        "rule": remix["rule"], "depth": remix["depth"].astype(int), "seed": remix["seed"].astype(int),
        "remix_gain": remix["base_loss"] - remix["val_loss"],
        "joint_gain": [loss.get(("sum", d, s), np.nan) - loss.get((r, d, s), np.nan)
                       for r, d, s in zip(remix["rule"], remix["depth"], remix["seed"])]})
    per = per.groupby(["rule", "depth", "seed"], as_index=False).mean().dropna(subset=["remix_gain", "joint_gain"])
    g = per.groupby(["depth", "rule"]).agg(seeds=("seed", "count"), joint_gain_mean=("joint_gain", "mean"),
                                           joint_gain_std=("joint_gain", "std"), remix_gain_mean=("remix_gain", "mean"),
                                           remix_gain_std=("remix_gain", "std")).reset_index()
    g["share"] = (g["remix_gain_mean"] / g["joint_gain_mean"]).where(g["joint_gain_mean"] > 0)
    g["rule"] = pd.Categorical(g["rule"], _rules_present(g["rule"]), ordered=True)
    return g.sort_values(["depth", "rule"]).assign(rule=lambda d: d["rule"].astype(str))[REMIX_COLUMNS] \
        .reset_index(drop=True)


# -- the budget axis ---------------------------------------------------------------------------------------

def budget_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per budget (training tokens per model), smallest first: its runs and seeds, the fixed sum's
    mean held-out loss at its shallowest and deepest depth and whether the deepest beats the shallowest
    (:func:`ema_core.studies.depth.findings.trained_deep`), and the word of the claim "the gap grows with depth"
    there."""
    out = []
    for tokens, (held, _) in by_budget(rows).items():
        deep = trained_deep(held)
        gap = next(v for v in claim_verdicts(held) if v.claim.key == "gap_grows_with_depth")
        out.append({"tokens per model": tokens, "runs": len({r["run_id"] for r in held}),
                    "seeds": len({r["seed"] for r in held}),
                    "shallowest": deep["shallow"] if deep else None,
                    "sum at shallowest": deep["shallow_loss"] if deep else None,
                    "deepest": deep["deep"] if deep else None,
                    "sum at deepest": deep["deep_loss"] if deep else None,
                    "deepest beats shallowest": ("yes" if deep["beats"] else "no") if deep else "—",
                    "gap grows with depth": gap.word})
    return pd.DataFrame(out, columns=["tokens per model", "runs", "seeds", "shallowest", "sum at shallowest",
                                      "deepest", "sum at deepest", "deepest beats shallowest",
                                      "gap grows with depth"])


def budget_label(tokens) -> str:
    return "tokens not recorded" if tokens is None or pd.isna(tokens) else f"{int(tokens):,} tokens per model"


def budget_loss_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean held-out loss over seeds per budget, rule and depth: tokens, budget, rule, rule_label, depth,
    mean, std, n."""
    data = rows.dropna(subset=["val_loss"]).assign(tokens=lambda d: d["tokens"].astype("Int64"))
    g = data.groupby(["tokens", "rule", "depth"], dropna=False)["val_loss"].agg(["mean", "std", "count"])
    g = g.rename(columns={"count": "n"}).reset_index()
    g["budget"] = g["tokens"].map(budget_label)
    g["rule_label"] = g["rule"].map(lambda r: RULE_LABELS.get(r, r))
    return g


def budget_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Held-out loss against depth, a line per rule, a panel per budget (smallest first; each its own y:
    a longer budget's losses lie far below a shorter one's)."""
    rules = _rules_present(frame["rule"])
    depths = sorted(int(d) for d in frame["depth"].unique())
    budgets = list(dict.fromkeys(frame.sort_values("tokens")["budget"]))
    # Each panel has a loss axis of its own (facet_grid allows for one beside the first column only).
    axis, gap = 80, 20
    columns = max(1, min(len(budgets), 3, (PAGE_WIDTH + gap) // (160 + axis + gap)))
    width = min(260, (PAGE_WIDTH - columns * axis - (columns - 1) * gap) // columns)
    x = alt.X("depth:Q", title="blocks (log scale)",
              scale=alt.Scale(type="log", base=2, nice=False,
                              domain=[min(depths) * 2.0 ** -DEPTH_MARGIN_OCTAVES,
                                      max(depths) * 2.0 ** DEPTH_MARGIN_OCTAVES] if depths else None),
              axis=alt.Axis(values=depths, format=COUNT_FORMAT))
    chart = alt.Chart(frame, width=width, height=HEIGHT).mark_line(point=True).encode(
        x=x, y=alt.Y("mean:Q", title="held-out loss (nats/token)", scale=alt.Scale(zero=False),
                     axis=alt.Axis(format=max((value_format(g["mean"]) for _, g in frame.groupby("budget")),
                                              key=lambda f: int(f[2:-1]), default=value_format(frame["mean"])))),
        color=_rule_color(rules, PAGE_WIDTH),
        tooltip=[alt.Tooltip("budget:N"), alt.Tooltip("rule_label:N", title="rule"),
                 alt.Tooltip("depth:Q", title="blocks"), alt.Tooltip("mean:Q", format=".4f"),
                 alt.Tooltip("std:Q", format=".4f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")])
    header = alt.Header(labelFontSize=LEGEND_SIZE)
    return with_layout(chart.facet(facet=alt.Facet("budget:N", sort=budgets, title=None, header=header),
                                   columns=columns).resolve_scale(y="independent")
                       .properties(title=chart_title(
                           "Held-out loss against depth at each budget",
                           "every finished run in the store, a panel per budget (training tokens per model); "
                           "mean over seeds, each panel its own loss axis", PAGE_WIDTH)))


def run_figures(rows: pd.DataFrame) -> list[tuple[str, alt.TopLevelMixin]]:
    """The figures of one run's exported ``depth_results`` rows (the Export page's SVG/PNG)."""
    frame = depth_frame(rows)
    return [(f"depth_{m}", depth_metric_chart(frame, m)) for m in DEPTH_METRICS if (frame["metric"] == m).any()]


def weights_figures(rows: pd.DataFrame) -> list[tuple[str, alt.TopLevelMixin]]:
    """The depth-weight maps of one run's exported ``depth_weights`` rows, one per depth."""
    return [(f"depth_weights_{int(L)}", weights_map(weights_frame(rows, int(L)), int(L)))
            for L in sorted(rows["depth"].unique())] if len(rows) else []
