"""The content study's charts (PAPER.md §3): validation curves, where SPEN's gap to the GPT lives among
the token classes, how it grows with training tokens (an extrapolation to the paper's budget), and the
predictor ablation of the language models, from the frames of the store's language-model queries.  Each
variant (model, predictor, attention input) has the label and colour :data:`ema_core.palette.LM_VARIANTS`
gives it."""
from __future__ import annotations

import math
from typing import Iterable

import altair as alt
import numpy as np
import pandas as pd

from ema_core import palette
from ema_core.studies.content.gap import GapSplit, VariantClassDelta, class_label
from ema_core.studies.content.growth import GROWTH_MODEL, PLATEAU, GapGrowth, passes_text, tokens_text
from ema_core.studies.content.shared import (ALL_TOKENS, ATTN_INPUT_LABELS, PAPER_PARAMS, PREDICTOR_LABELS,
                                             lm_variant_label)
from ema_core.figures import (COUNT_FORMAT, HAS_STD, HEIGHT, WIDTH, chart_title, color_scale, label_colors, legend,
                              reference_rule, value_format, with_layout)

CURVE_WIDTH = WIDTH + 180  # the curves take a page's whole width
WORD_LINES = "split(datum.label, ' ')"  # an axis label one word per line
# Curve smoothing: the weight w of s_t = w·s_{t−1} + (1 − w)·v_t (0: none).
SMOOTHING = {"none": 0.0, "EMA 0.6": 0.6, "EMA 0.9": 0.9}


def _variant_scale(labels) -> alt.Scale:
    """Colours of the variants present, in the canonical order of ``LM_VARIANTS``."""
    known = {label: color for label, color in palette.LM_VARIANTS.values()}
    present = set(labels)
    domain = [label for label, _ in palette.LM_VARIANTS.values() if label in present]
    domain += sorted(present - set(domain))
    return color_scale(domain, lambda v: known.get(v, palette.OTHER_COLOR))


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
    """The curve chart's rows from the store's ``lm_curves``: every run smoothed (weight ``weight``
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
                   subtitle: str = "", title: str = "Validation curves") -> alt.LayerChart:
    """One line per variant (the mean across seeds), each seed's own line faint behind it."""
    if x not in ("step", "tokens"):
        raise ValueError(f"x must be 'step' or 'tokens', got {x!r}")
    scale = _variant_scale(frame["variant"])
    x_enc = alt.X(f"{x}:Q", title="optimiser step" if x == "step" else "training tokens",
                  # nice=False: a log axis would otherwise round out to whole decades and squash the curves.
                  scale=alt.Scale(type="log", nice=False) if log_x else alt.Scale(zero=False),
                  # Steps as integers with a thousands separator ("~g" wrote 1e+2); tokens in SI (1.5M).
                  axis=alt.Axis(format="~s" if x == "tokens" else COUNT_FORMAT, tickMinStep=1))
    # The log note goes into the subtitle: a longer y title outgrows the plot's height, and Vega then
    # lifts the chart title out of the drawn area.  One tick format on the whole axis (a log axis
    # otherwise writes "5" beside "4.9").
    y_enc = alt.Y("value:Q", title=y_title, axis=alt.Axis(titleLimit=HEIGHT, format=value_format(frame["value"])),
                  scale=alt.Scale(type="log", nice=False) if log_y else alt.Scale(zero=False))
    color = alt.Color("variant:N", scale=scale, sort=scale.domain, title="variant",
                      # Stroke symbols at full opacity: the faint seed lines would otherwise set them.
                      # Every label in full ("GPT (sized to SPEN softmax attention (sequence))"), below
                      # the plot: the same chart is drawn in half a column too.
                      legend=legend(scale.domain, symbolType="stroke", symbolStrokeWidth=3, symbolOpacity=1))
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
    return with_layout(alt.layer(*layers, data=frame).properties(
        width=CURVE_WIDTH, height=HEIGHT, title=chart_title(title, sub)))


def token_class_curves(rows: pd.DataFrame, name: str) -> pd.DataFrame:
    """One class's loss per token over training, from the store's ``lm_token_class_pairs``, in the shape of
    its ``lm_curves`` (run_id, seed, model, predictor, attn_input, step, tokens, value), so that
    :func:`lm_curve_frame` and :func:`lm_curve_chart` draw it as they draw the validation curves.  A step
    at which the class had no tokens has no value (NaN), not 0/0."""
    cols = ["run_id", "seed", "model", "predictor", "attn_input", "step", "tokens", "value"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    part = rows[(rows["evaluation"] == "periodic") & (rows["class"] == name)]
    return part.assign(tokens=part["tokens_seen"], value=part["loss_per_token"].astype(float))[cols].reset_index(
        drop=True)


def class_gap_frame(split: GapSplit, copied: GapSplit | None = None) -> pd.DataFrame:
    """The rows of :func:`class_gap_chart` and the page's table from :func:`ema_core.studies.content.gap.class_gaps`:
    one per class of the partition, then ALL_TOKENS (every class pooled).

    Columns: class (its label), name (the store's), tokens, token_share (of the partition's tokens), spen,
    gpt, gap (nats/token) and share (of the whole gap, a fraction) each as ``<v>_mean`` and ``<v>_std``
    across seeds, n (seeds with a gap there), then one column per n-gram baseline the runs hold (its loss
    per token on the same windows; NaN for a class with no tokens), then, with ``copied`` (the same split of
    the copy-mix evaluation), ``copy_gap_mean`` and ``copy_gap_std``: the gap once both models copy.
    """
    after = {c.name: c.gap for c in (*copied.classes, copied.overall)} if copied is not None else {}
    rows = []
    for c in (*split.classes, split.overall):
        row = {"class": c.label, "name": c.name, "tokens": c.tokens, "token_share": c.token_share}
        for what in ("spen", "gpt", "gap", "share"):
            sp = getattr(c, what)
            row[f"{what}_mean"], row[f"{what}_std"] = sp.mean, sp.std
        row["n"] = c.gap.n
        for name, losses in split.baselines.items():
            v = losses.get(c.name)
            row[name] = math.nan if v is None else v
        if copied is not None:
            gap = after.get(c.name)
            row["copy_gap_mean"], row["copy_gap_std"] = (gap.mean, gap.std) if gap is not None else (math.nan,) * 2
        rows.append(row)
    return pd.DataFrame(rows)


def class_gap_chart(frame: pd.DataFrame, variant: str, partition_label: str = "token class") -> alt.LayerChart:
    """SPEN's loss per token minus the GPT's per class, mean ± std across seeds, in the SPEN variant's colour,
    with the gap over every token pooled as a dashed reference.  Below 0: SPEN is the better one there."""
    known = {label: color for label, color in palette.LM_VARIANTS.values()}
    color = known.get(variant, palette.OTHER_COLOR)
    classes = frame[frame["name"] != ALL_TOKENS]
    data = classes.assign(lo=classes["gap_mean"] - classes["gap_std"], hi=classes["gap_mean"] + classes["gap_std"],
                          share_pct=100 * classes["share_mean"], share_pct_std=100 * classes["share_std"])
    overall = frame.loc[frame["name"] == ALL_TOKENS, "gap_mean"]
    whole = float(overall.iloc[0]) if len(overall) and math.isfinite(float(overall.iloc[0])) else None
    shown = [0.0, *data["gap_mean"], *data["lo"], *data["hi"]] + ([whole] if whole is not None else [])
    # Labels word by word on lines of their own ("recall" over "1–16"): on one line, neighbours in half a
    # column overlap, and Vega then hides every other one.
    base = alt.Chart().encode(x=alt.X("class:N", sort=list(classes["class"]), title=partition_label,
                                      axis=alt.Axis(labelAngle=0, labelLimit=0, labelExpr=WORD_LINES)))
    points = base.mark_point(filled=True, size=90, opacity=1, color=color).encode(
        y=alt.Y("gap_mean:Q", title=f"{variant} − GPT (nats/token)", scale=alt.Scale(zero=True),
                axis=alt.Axis(format=value_format(shown), titleLimit=HEIGHT)),
        tooltip=[alt.Tooltip("class:N"), alt.Tooltip("tokens:Q", format=",.0f"),
                 alt.Tooltip("gap_mean:Q", format=".4f", title="gap (mean)"),
                 alt.Tooltip("gap_std:Q", format=".4f", title="gap std (seeds)"),
                 alt.Tooltip("share_pct:Q", format=".1f", title="share of the gap (%)"),
                 alt.Tooltip("share_pct_std:Q", format=".1f", title="share std (%)"),
                 alt.Tooltip("spen_mean:Q", format=".4f", title="SPEN (nats/token)"),
                 alt.Tooltip("gpt_mean:Q", format=".4f", title="GPT (nats/token)"),
                 alt.Tooltip("n:Q", title="seeds")],
    )
    # A std needs two seeds, and an empty class has no gap at all: neither draws a bar.
    errors = base.transform_filter("isValid(datum.gap_std) && isFinite(datum.gap_std)").mark_rule(
        strokeWidth=2, color=color).encode(y="lo:Q", y2="hi:Q")
    layers = [alt.layer(errors, points, data=data)]
    if whole is not None:
        layers.append(reference_rule("gap_mean", whole, f"{ALL_TOKENS} {whole:+.3f}", palette.REFERENCE_COLOR))
    return with_layout(alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Where the gap lives", f"per {partition_label}, final evaluation, mean ± std across seeds; "
                                                 "below 0: SPEN better there; dashed: every token pooled")))


def variant_delta_frame(deltas: Iterable[VariantClassDelta]) -> pd.DataFrame:
    """The rows of the page's per-variant table from :func:`ema_core.studies.content.gap.variant_class_deltas`:
    variant, one ``<class label>_mean``/``_std`` pair per class then ALL_TOKENS (Δ against SPEN linear,
    nats/token), seeds (paired on every token)."""
    rows = []
    for d in deltas:
        row: dict = {"variant": d.variant}
        for name, sp in (*d.by_class, (ALL_TOKENS, d.overall)):
            row[f"{class_label(name)}_mean"], row[f"{class_label(name)}_std"] = sp.mean, sp.std
        row["seeds"] = d.seeds
        rows.append(row)
    return pd.DataFrame(rows)


def lm_ablation_frame(stats: pd.DataFrame) -> pd.DataFrame:
    """The ablation chart's rows from the store's ``lm_final_stats``: SPEN variants only.

    Columns: predictor, attn_input (labels of ``PREDICTOR_LABELS`` and ``ATTN_INPUT_LABELS``), variant,
    n, mean, std (final validation loss, nats/token).  The linear predictor reads the current state.
    """
    spen = stats.loc[stats["model"] == "spen"]
    return pd.DataFrame({
        "predictor": spen["predictor"].map(lambda p: PREDICTOR_LABELS.get(p, p)).to_numpy(),
        "attn_input": spen["attn_input"].map(lambda a: ATTN_INPUT_LABELS.get(a, a)).to_numpy(),
        "variant": [lm_variant_label("spen", p, a) for p, a in zip(spen["predictor"], spen["attn_input"])],
        "n": spen["n"].to_numpy(),
        "mean": spen["loss_mean"].astype(float).to_numpy(),
        "std": spen["loss_std"].astype(float).to_numpy(),
    })


def lm_ablation_chart(frame: pd.DataFrame, gpt_loss: float | None = None) -> alt.LayerChart:
    """Final validation loss per predictor and attention input, mean ± std across seeds, with the
    GPT's loss as a dashed reference."""
    inputs = list(ATTN_INPUT_LABELS.values())
    present = [i for i in inputs if i in set(frame["attn_input"])] or inputs
    # Coloured by variant, as in the curve chart: a variant has one colour on every chart.
    scale = _variant_scale(frame["variant"])
    data = frame.assign(lo=frame["mean"] - frame["std"], hi=frame["mean"] + frame["std"])
    shown = [*data["mean"], *data["lo"], *data["hi"]] + ([gpt_loss] if gpt_loss is not None else [])
    base = alt.Chart().encode(
        x=alt.X("predictor:N", sort=list(PREDICTOR_LABELS.values()), title="SPEN's predictor",
                axis=alt.Axis(labelAngle=0, labelLimit=0, labelExpr=WORD_LINES)),
        xOffset=alt.XOffset("attn_input:N", sort=present, scale=alt.Scale(domain=present, paddingInner=0.2)),
    )
    color = alt.Color("variant:N", scale=scale, sort=scale.domain, title="SPEN variant", legend=legend(scale.domain))
    points = base.mark_point(filled=True, size=90, opacity=1).encode(
        y=alt.Y("mean:Q", scale=alt.Scale(zero=False), title="final validation loss (nats/token)",
                axis=alt.Axis(format=value_format(shown))),
        color=color,
        tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("mean:Q", format=".4f"),
                 alt.Tooltip("std:Q", format=".4f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")],
    )
    errors = base.transform_filter(HAS_STD).mark_rule(strokeWidth=2).encode(y="lo:Q", y2="hi:Q", color=color)
    layers = [alt.layer(errors, points, data=data)]
    if gpt_loss is not None and math.isfinite(gpt_loss):
        layers.append(reference_rule("loss", gpt_loss, f"GPT {gpt_loss:.3f}", palette.GPT_COLOR))
    return with_layout(alt.layer(*layers).resolve_scale(color="independent", strokeDash="independent").properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Predictor ablation", "mean ± std across seeds; same traces, only the predictor differs")))


# -- how the gap grows ---------------------------------------------------------------------------------

# The fitted line's two segments: solid over the points fitted, dashed beyond them.
FITTED, EXTRAPOLATED = "fit, over the points fitted", "extrapolation"


def growth_frame(fits: Iterable[GapGrowth]) -> pd.DataFrame:
    """The page's table of the fits of :func:`ema_core.studies.content.growth.gap_growth`, one row per pool.

    Columns: tokens (the pool's label), a, b (Δ = a + b·log10 t, nats/token; b per decade of training
    tokens), evaluations (steps fitted), seeds, passes (what the points fitted repeat), fitted_from, fitted_to, measured_to (training tokens),
    ratio_at_end (the line's SPEN ÷ GPT at the last point fitted), at (tokens extrapolated to), ratio_at,
    ratio_lo, ratio_hi (its interval), level, decades (beyond the last point fitted), interval_from, paper.
    """
    rows = []
    for f in fits:
        lo, hi = f.predicted_interval
        rows.append({"tokens": f.label, "a": f.a, "b": f.b, "evaluations": f.n_steps, "seeds": f.n_seeds,
                     "passes": passes_text(f),
                     "fitted_from": f.t_range[0], "fitted_to": f.t_range[1], "measured_to": f.measured_to,
                     "ratio_at_end": f.ratio(f.t_range[1]), "at": f.at, "ratio_at": f.predicted, "ratio_lo": lo,
                     "ratio_hi": hi, "level": f.level, "decades": f.decades, "interval_from": f.interval_from,
                     "paper": f.paper if f.pool == "all" else math.nan})
    return pd.DataFrame(rows)


def _growth_frames(fits: list[GapGrowth], grid: int = 40) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The chart's measured points (each seed, then the mean across seeds per step: exp of the mean Δ) and
    its line (the fit over the points fitted, then extrapolated, with the interval at every token count)."""
    points, lines = [], []
    for f in fits:
        fitted = f.fits
        per_step: dict[int, list] = {}
        for p in f.points:
            line = f"seed {p.seed}" + (f" · settings {p.group}" if p.group is not None else "")
            points.append({"pool": f.label, "line": line, "seed": p.seed, "step": p.step, "tokens": p.tokens,
                           "ratio": p.ratio, "phase": p.phase, "fitted": fitted(p), "n": 1})
            per_step.setdefault(p.step, []).append(p)
        for step, ps in per_step.items():
            delta = math.fsum(p.delta for p in ps) / len(ps)
            points.append({"pool": f.label, "line": "mean", "seed": np.nan, "step": step,
                           "tokens": math.fsum(p.tokens for p in ps) / len(ps), "ratio": math.exp(delta),
                           "phase": ps[0].phase, "fitted": all(fitted(p) for p in ps), "n": len(ps)})
        lo_x, hi_x, at_x = (math.log10(t) for t in (*f.t_range, f.at))
        segments = [(FITTED, np.linspace(lo_x, hi_x, grid))]
        if f.extrapolated:
            segments.append((EXTRAPOLATED, np.linspace(hi_x, at_x, grid)))
        for segment, xs in segments:
            for x in xs:
                t = float(10 ** x)
                lo, hi = f.ratio_interval(t)
                lines.append({"pool": f.label, "segment": segment, "tokens": t, "ratio": f.ratio(t), "lo": lo,
                              "hi": hi})
    return pd.DataFrame(points), pd.DataFrame(lines)


def growth_chart(fits: Iterable[GapGrowth]) -> alt.LayerChart:
    """SPEN ÷ GPT perplexity against training tokens on log–log axes, one colour per pool of tokens: the
    measured points (the mean across seeds; faint: each seed; hollow: warm-up and decay, not fitted), the
    fitted line solid over the points fitted and dashed beyond them to the paper's budget, the interval
    shaded, and the paper's ratio at its budget as a grey diamond.  Labelled an extrapolation."""
    fits = list(fits)
    if not fits:
        raise ValueError("growth_chart needs at least one fit")
    points, lines = _growth_frames(fits)
    colors = label_colors({f.pool: f.label for f in fits}, palette.TOKEN_POOL_COLORS)
    scale = color_scale(list(colors), colors.get)
    extrapolated = fits[0].extrapolated  # the paper's point only beside a line extended to its budget
    paper = pd.DataFrame({"tokens": [fits[0].at], "ratio": [fits[0].paper],
                          "label": [f"paper: {fits[0].paper:.1f} ({tokens_text(PAPER_PARAMS)} parameters, "
                                    f"{tokens_text(fits[0].at)} tokens)"]}).iloc[: int(extrapolated)]
    shown = [*points["ratio"], *lines["lo"], *lines["hi"], *paper["ratio"]]
    # Both axes logarithmic: the fitted line is a power law in t, straight here.  Domains from the data, not
    # rounded out to whole decades (nice=False), so that the points are not squashed into a corner.
    x = alt.X("tokens:Q", title="training tokens",
              scale=alt.Scale(type="log", nice=False, domain=[min(points["tokens"]) / 1.5,
                                                              max(fits[0].at, max(points["tokens"])) * 2.5]),
              # SI prefixes, with a billion written B (as the paper's "8B tokens"), not G.
              axis=alt.Axis(format="~s", labelExpr="replace(datum.label, 'G', 'B')"))
    y_scale = alt.Scale(type="log", nice=False, domain=[min(shown) / 1.1, max(shown) * 1.1])
    y = alt.Y("ratio:Q", title=f"{fits[0].variant} ÷ GPT perplexity", scale=y_scale,
              axis=alt.Axis(titleLimit=HEIGHT, format=".3~g"))
    color = alt.Color("pool:N", scale=scale, sort=list(colors), title="tokens",
                      # Symbols at full opacity: the shaded band would otherwise set them.
                      legend=legend(list(colors), symbolType="circle", symbolOpacity=1))
    band = alt.Chart(lines).mark_area(opacity=0.15).encode(
        x=x, y=alt.Y("lo:Q", scale=y_scale), y2="hi:Q", color=color, detail="segment:N")
    line = alt.Chart(lines).mark_line(strokeWidth=2.2).encode(
        x=x, y=y, color=color,
        strokeDash=alt.StrokeDash("segment:N", scale=alt.Scale(domain=[FITTED, EXTRAPOLATED], range=[[1, 0], [6, 4]]),
                                  title="line", legend=legend([FITTED, EXTRAPOLATED], symbolType="stroke",
                                                              symbolSize=400, symbolStrokeWidth=2)),
        tooltip=[alt.Tooltip("pool:N", title="tokens"), alt.Tooltip("segment:N"),
                 alt.Tooltip("tokens:Q", format=",.0f", title="training tokens"),
                 alt.Tooltip("ratio:Q", format=".3f", title="fitted ratio"), alt.Tooltip("lo:Q", format=".3f"),
                 alt.Tooltip("hi:Q", format=".3f")])
    tip = [alt.Tooltip("pool:N", title="tokens"), alt.Tooltip("line:N"), alt.Tooltip("step:Q", format=","),
           alt.Tooltip("tokens:Q", format=",.0f", title="training tokens"),
           alt.Tooltip("ratio:Q", format=".4f", title="SPEN ÷ GPT"), alt.Tooltip("phase:N"),
           alt.Tooltip("n:Q", title="seeds")]
    base = alt.Chart(points).encode(x=x, y=y, color=color, tooltip=tip)
    seeds = base.transform_filter("datum.line !== 'mean'").mark_point(size=18, opacity=0.3, filled=True)
    fitted = base.transform_filter("datum.line === 'mean' && datum.fitted").mark_point(
        size=55, opacity=1, filled=True)
    unfitted = base.transform_filter("datum.line === 'mean' && !datum.fitted").mark_point(
        size=55, opacity=1, filled=False, strokeWidth=1.5)
    marker = alt.Chart(paper).mark_point(shape="diamond", size=130, filled=True,
                                         color=palette.REFERENCE_COLOR).encode(
        x=x, y=y, tooltip=[alt.Tooltip("label:N", title="the paper")])
    note = alt.Chart(paper).mark_text(align="right", dx=-10, dy=-10, color=palette.REFERENCE_COLOR).encode(
        x=x, y=y, text="label:N")
    which = ("the finals of runs of several lengths, each cooled down" if fits[0].annealed
             else "the first pass's plateau points" if fits[0].first_pass else "the plateau's points")
    sub = (f"{fits[0].variant} ÷ GPT perplexity against training tokens; points measured (mean across seeds; faint: "
           f"each seed; hollow: not fitted); line: {GROWTH_MODEL} through {which} ({passes_text(fits[0])})"
           + (f", dashed beyond them: extrapolated; band: {100 * fits[0].level:g} % interval; diamond: the paper"
              if extrapolated else f"; band: {100 * fits[0].level:g} % interval; not extended beyond the data"))
    title = "How the gap grows — an extrapolation" if extrapolated else "How the gap grows — within the data"
    return with_layout(alt.layer(band, line, seeds, fitted, unfitted, marker, note).resolve_scale(
        color="shared", strokeDash="independent").properties(
        width=CURVE_WIDTH, height=HEIGHT, title=chart_title(title, sub)))
