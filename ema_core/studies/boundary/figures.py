"""The boundary study's charts: every context mixer on every task, from the rows of ``boundary_accuracy``.

Four views of one grid (mixer × task × difficulty × seed): the map (accuracy above max(chance,
exclusion floor), cell by cell), the crossing (structure against content as the distance grows, in
the independent stream), the redundancy dial (structure and its floor as the context repeats more
of it) and MQAR recall against the state a mixer keeps; beside them, from their own tables, recall against
state size at several widths (``boundary_recall_state``) and every rate's dev curve
(``boundary_dev_curve``).  Each mixer has its palette colour (:func:`ema_core.palette.mixer_color`) on
every chart; mixers are listed in ``ema_core.mixers.MIXER_NAMES`` order (any other, say of an
older run, after them).  Every number is a mean over seeds; error bars are the sample std where
there are several.
"""
from __future__ import annotations

import math

import altair as alt
import pandas as pd

from ema_core import palette
from ema_core.studies.boundary.findings import (DEFAULT_WINDOW_REACH, FLOOR_MIXER, RECALL_LEVEL, ZOOLOGY_RECALL,
                                       ZOOLOGY_SETTING, above_floor, baseline, level_of, normalised, recall_frontier,
                                       redundancy_of)
from ema_core.figures import (ACCURACY_AXIS, COUNT_FORMAT, HAS_STD, HEIGHT, LEGEND_SIZE, PAGE_WIDTH, WIDTH,
                              chart_title, color_scale, facet_grid, legend, with_layout)
from ema_core.mixers import MIXER_NAMES

# Task -> label, in the order the map shows them; a task not listed keeps its own name, after these.
TASK_LABELS = {"agree_structure": "agreement: structure", "agree_content": "agreement: content",
               "agree_content4": "agreement: content ×4", "mqar": "MQAR recall", "lag_identity": "lag identity"}
# The variants of the agreement task the crossing chart sets against each other, and their dashes:
# the same sequences, the same positions scored; only what must be remembered differs.
CROSSING = {"agree_structure": ("structure (category)", [1, 0]), "agree_content": ("content (identity, 2-way)", [6, 4]),
            "agree_content4": ("content (identity, 4-way)", [2, 2])}
# px per cell of the map, at most: "0.97" fits, a task of two distances is as wide as its two-line
# heading ("agreement:" over "structure").  A map of many columns takes smaller cells, down to
# CELL_MIN ("0.97" still fits), and past that wraps its tasks onto more rows, so that it fits
# PAGE_WIDTH (a facet is not narrowed to its column): the full preset's 23 columns take two rows.
CELL, CELL_MIN = 38, 24
_MAP_AXIS, _MAP_GAP = 135, 20  # the mixers' names beside the first facet; the gap between facets
MAP_HEADING = 120  # px a task's two-line heading takes ("agreement:" over "content ×4"), at least
MQAR_COLUMNS = 4  # MQAR sizes per row of facets at most (the full preset has 11)
# The crossing chart sets mixers slightly apart along k (a fraction of an octave each, in the
# hierarchy's order, all of them within DODGE_SPAN of the true k), so that two mixers with the same
# accuracy (ema3_seq and softmax, both perfect) both show; the tooltip keeps the true k.
DODGE_OCTAVES, DODGE_SPAN = 0.05, 0.18  # under a fifth of an octave either side
GROUP = ["mixer", "task", "difficulty", "level", "seq_len"]
DEFINED = "isValid(datum.above) && isFinite(datum.above)"  # a cell's accuracy above its base exists


def mixer_order(names) -> list[str]:
    """The mixers of ``names`` in ``MIXER_NAMES`` order (the paper's hierarchy), then any other, by name."""
    names = set(names)
    return [m for m in MIXER_NAMES if m in names] + sorted(names - set(MIXER_NAMES))


def task_order(names) -> list[str]:
    names = set(names)
    return [t for t in TASK_LABELS if t in names] + sorted(names - set(TASK_LABELS))


def task_label(task: str) -> str:
    return TASK_LABELS.get(task, task)


def _above(accuracy, chance, floor=None) -> float:
    """Accuracy above max(chance, exclusion floor) (:func:`above_floor`; chance alone where the floor is
    missing); NaN where it is undefined (a task no model can miss)."""
    try:
        v = float(above_floor(float(accuracy), float(chance), floor))
    except (ValueError, ZeroDivisionError, TypeError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def boundary_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The charts' rows: one per (mixer, task, difficulty), over the seeds of ``rows``.

    Columns: mixer, task, difficulty, level, seq_len, n (seeds), mean and std (test accuracy),
    chance and chance_std (chance is measured on each seed's data), floor and floor_std (the
    exclusion floor over seeds; NaN where the rows have none: runs stored before it), base (max(chance, floor), or
    chance), above and above_std (accuracy above that base, formed per seed, then averaged),
    state_floats (and seq_len: nullable integers, empty where the rows have none; a missing level is
    read from the difficulty).  Mixers in :func:`mixer_order`,
    tasks in :func:`task_order`, difficulties by level within a task (MQAR by length, then pairs).
    Rows with no accuracy are left out.
    """
    cols = [*GROUP, "n", "mean", "std", "chance", "chance_std", "floor", "floor_std", "base", "above", "above_std",
            "state_floats", "redundancy"]
    if rows is None or not len(rows):
        return pd.DataFrame(columns=cols)
    df = rows.loc[pd.to_numeric(rows["accuracy"], errors="coerce").notna()].copy()
    df["accuracy"] = df["accuracy"].astype(float)
    df["chance"] = df["chance"].astype(float)
    # Rows of a run stored before the exclusion floor was measured have none: set against chance.
    df["floor"] = pd.to_numeric(df["exclusion_floor"], errors="coerce") if "exclusion_floor" in df else math.nan
    df["base"] = [baseline(c, f) for c, f in zip(df["chance"], df["floor"])]
    df["above"] = [_above(a, c, f) for a, c, f in zip(df["accuracy"], df["chance"], df["floor"])]
    # level and state_floats may be null in the store: a row without a level takes the number its
    # difficulty names (as the findings read it), one without a state shows it empty.
    df["level"] = [level_of(v, str(d)) for v, d in zip(df["level"], df["difficulty"])]
    df["state_floats"] = pd.to_numeric(df["state_floats"], errors="coerce")
    # A seed two picked runs both hold (overlapping seed ranges) is one measurement: its rows are
    # averaged first (equal for runs of one config), so n, mean and std see it once.
    if "seed" in df:
        df = (df.groupby([*GROUP, "seed"], sort=False, dropna=False)
              .agg(accuracy=("accuracy", "mean"), chance=("chance", "mean"), floor=("floor", "mean"),
                   base=("base", "mean"), above=("above", "mean"), state_floats=("state_floats", "max"))
              .reset_index())
    out = (df.groupby(GROUP, sort=False, dropna=False)
           .agg(n=("accuracy", "count"), mean=("accuracy", "mean"), std=("accuracy", "std"),
                chance=("chance", "mean"), chance_std=("chance", "std"), floor=("floor", "mean"),
                floor_std=("floor", "std"), base=("base", "mean"), above=("above", "mean"), above_std=("above", "std"),
                state_floats=("state_floats", "max"))
           .reset_index())
    mixers, tasks = mixer_order(out["mixer"]), task_order(out["task"])
    out["_m"] = out["mixer"].map(mixers.index)
    out["_t"] = out["task"].map(tasks.index)
    out = out.sort_values(["_m", "_t", "seq_len", "level", "difficulty"]).drop(columns=["_m", "_t"])
    out["level"] = out["level"].astype(int)
    out["seq_len"] = pd.to_numeric(out["seq_len"], errors="coerce").astype("Int64")  # nullable too
    out["state_floats"] = out["state_floats"].round().astype("Int64")
    # ρ as the difficulty names it (an agreement cell's label carries it; other tasks and runs stored
    # before the dial have none)
    out["redundancy"] = [redundancy_of(None, str(d)) for d in out["difficulty"]]
    out["redundancy"] = pd.to_numeric(out["redundancy"], errors="coerce")
    return out[cols].reset_index(drop=True)


def _frame(frame: pd.DataFrame) -> pd.DataFrame:
    # A chart takes boundary_frame's rows, or the table's own (one per seed), which it averages first.
    return frame if "mean" in frame.columns else boundary_frame(frame)


def difficulty_order(frame: pd.DataFrame) -> list[str]:
    """Every difficulty of ``frame``, task by task, by length, redundancy (an agreement task's ρ, the
    independent stream first) then level (k, or MQAR's pairs)."""
    tasks = task_order(frame["task"])
    keyed = frame[["task", "seq_len", "level", "difficulty"]].drop_duplicates()
    keyed = keyed.assign(_t=keyed["task"].map(tasks.index),
                         _r=[redundancy_of(None, str(d)) or 0.0 for d in keyed["difficulty"]])
    keyed = keyed.sort_values(["_t", "seq_len", "_r", "level", "difficulty"])
    return list(dict.fromkeys(keyed["difficulty"]))


def _mixer_color(mixers: list[str], width: float | None = None) -> alt.Color:
    """Colour by mixer; the legend below the plot, every mixer shown (in columns that fit ``width``)."""
    kwargs = {} if width is None else {"width": width}
    return alt.Color("mixer:N", scale=color_scale(mixers, palette.mixer_color), sort=mixers, title="mixer",
                     legend=legend(mixers, **kwargs))


def map_layout(columns_per_task: list[int]) -> tuple[int, int]:
    """(px per cell, tasks per row) of a map whose tasks have ``columns_per_task`` difficulties: the
    largest cell up to CELL at which every row fits PAGE_WIDTH, on as few rows as CELL_MIN allows.  With
    the tasks wrapped, each column of the grid is as wide as its widest task; a task is never narrower
    than its heading (MAP_HEADING px), which a task of few columns would otherwise push past the page."""
    n = max(len(columns_per_task), 1)
    for per_row in range(n, 0, -1):
        rows = [columns_per_task[i:i + per_row] for i in range(0, len(columns_per_task), per_row)] or [[1]]
        widest = [max(r[j] for r in rows if j < len(r)) for j in range(per_row)]
        room = PAGE_WIDTH - _MAP_AXIS - _MAP_GAP * (per_row - 1)
        for cell in range(CELL, CELL_MIN - 1, -1):
            if sum(max(w * cell, MAP_HEADING) for w in widest) <= room:
                return cell, per_row
        if per_row == 1:
            return CELL_MIN, 1
    return CELL_MIN, 1


def _seeds_note(frame: pd.DataFrame, bars: bool = True) -> str:
    """How many seeds each point averages, and what its error bar is (``bars``: the chart draws them)."""
    n = sorted(set(int(v) for v in frame["n"])) if len(frame) else []
    if not n:
        return "no seeds"
    if n == [1]:
        return "one seed" + (" (no error bars)" if bars else "")
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}–{n[-1]}"
    return f"mean ± std across {seeds} seeds" if bars else f"mean over {seeds} seeds"


# -- the map -------------------------------------------------------------------------------------------

def heat_map(frame: pd.DataFrame) -> alt.FacetChart:
    """Mixers (rows) × each task's difficulties (columns), coloured by accuracy above max(chance,
    exclusion floor) (0 = what a model that never sees position t − k gets, 1 = perfect), each cell's
    text its test accuracy over its floor ("f" and the floor, where the rows hold one); one facet per task."""
    frame = _frame(frame)
    mixers, tasks = mixer_order(frame["mixer"]), task_order(frame["task"])
    labels = [task_label(t) for t in tasks]
    floor = pd.to_numeric(frame["floor"], errors="coerce") if "floor" in frame else pd.Series(math.nan, frame.index)
    data = frame.assign(
        task_label=frame["task"].map(task_label),
        text=[f"{v:.2f}" for v in frame["mean"]],
        floor=floor.astype(float),
        floor_text=["" if not math.isfinite(f) else f"f {f:.2f}" for f in floor.astype(float)],
        above=frame["above"].astype(float),
    )
    per_task = [int(frame.loc[frame["task"] == t, "difficulty"].nunique()) for t in tasks]
    cell, per_row = map_layout(per_task)
    base = alt.Chart().encode(
        x=alt.X("difficulty:N", sort=difficulty_order(frame), title=None,
                # Upright and every one kept: at a slant a cell's label overlaps its neighbour's, and
                # Vega then drops every other one (ρ 0.5 went missing between ρ 0 and 0.9).
                axis=alt.Axis(labelAngle=-90, labelLimit=120, labelOverlap=False)),
        y=alt.Y("mixer:N", sort=mixers, title=None, axis=alt.Axis(labelLimit=0)),
    )
    tooltip = [alt.Tooltip("mixer:N"), alt.Tooltip("task_label:N", title="task"), alt.Tooltip("difficulty:N"),
               alt.Tooltip("mean:Q", format=".3f", title="accuracy"),
               alt.Tooltip("std:Q", format=".3f", title="std (seeds)"),
               alt.Tooltip("chance:Q", format=".3f"),
               alt.Tooltip("floor:Q", format=".3f", title="exclusion floor"),
               alt.Tooltip("above:Q", format=".3f", title="above max(chance, floor)"),
               alt.Tooltip("n:Q", title="seeds")]
    # The colour legend below the map, a horizontal gradient: beside it, it would widen the map.
    cells = base.transform_filter(DEFINED).mark_rect(stroke=palette.TEXT_ON_DARK, strokeWidth=1).encode(
        color=alt.Color("above:Q", title="accuracy above max(chance, floor)",
                        scale=alt.Scale(domain=[-1, 0, 1], range=list(palette.ABOVE_CHANCE_COLORS), clamp=True),
                        legend=alt.Legend(format=".1f", orient="bottom", direction="horizontal", gradientLength=200,
                                          titleLimit=0, labelFontSize=LEGEND_SIZE, titleFontSize=LEGEND_SIZE)),
        tooltip=tooltip,
    )
    # A cell whose above-chance value is undefined (a chance of 1 leaves nothing to learn) keeps its
    # place and its accuracy, in the reference grey: no colour of the scale would be true of it.
    undefined = base.transform_filter(f"!({DEFINED})").mark_rect(
        stroke=palette.TEXT_ON_DARK, strokeWidth=1, color=palette.REFERENCE_COLOR).encode(tooltip=tooltip)
    # Dark cells take light text; the threshold is where the upper end of the scale gets dark.
    on_dark = alt.condition(f"datum.above > {palette.ABOVE_CHANCE_DARK}", alt.value(palette.TEXT_ON_DARK),
                            alt.value(palette.TEXT_COLOR))
    text = base.mark_text(fontSize=10, dy=-5).encode(text="text:N", color=on_dark)
    # The floor under the accuracy, smaller: what the colour is measured from.
    floor_text = base.mark_text(fontSize=7, dy=7).encode(text="floor_text:N", color=on_dark)
    # A heading word by word: a task of few difficulties is narrower than its label on one line.
    header = alt.Header(labelFontSize=12, labelFontWeight="bold", labelExpr="split(datum.value, ' ')")
    layer = (alt.layer(cells, undefined, text, floor_text, data=data)  # data on the layer: a facet needs it there
             .properties(width=alt.Step(cell), height=alt.Step(max(cell - 8, 22))))
    if per_row >= len(tasks):  # every task side by side
        chart = layer.facet(column=alt.Column("task_label:N", sort=labels, title=None, header=header),
                            spacing=_MAP_GAP)
    else:  # too many columns for one row even at CELL_MIN: the tasks wrap
        chart = layer.facet(facet=alt.Facet("task_label:N", sort=labels, title=None, header=header),
                            columns=per_row, spacing=_MAP_GAP)
    return with_layout(
        chart.resolve_scale(x="independent")
        .properties(title=chart_title(
            "The boundary map: where each mixer keeps what",
            f"colour: accuracy above b = max(chance, exclusion floor), (acc − b) / (1 − b); text: test accuracy; "
            f"f: the exclusion floor; {_seeds_note(frame, bars=False)}", PAGE_WIDTH - _MAP_AXIS))
    )


# -- structure against content -------------------------------------------------------------------------

def crossing_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The crossing chart's rows: the agreement variants in the independent stream (ρ = 0, or none
    stored: runs before the dial), with their labels."""
    frame = _frame(frame)
    independent = frame["redundancy"].isna() | (frame["redundancy"] == 0)
    df = frame.loc[frame["task"].isin(list(CROSSING)) & independent].copy()
    df["variant"] = df["task"].map(lambda t: CROSSING[t][0])
    return df.reset_index(drop=True)


def crossing_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Accuracy against the distance k, structure solid and content dashed, one colour per mixer; log₂ k.

    Chance (the most frequent label) is drawn in grey for each variant, with its dash; the window
    mixer, the floor, is drawn over the others, thicker, so it is never hidden under a curve.
    """
    df = crossing_frame(frame)
    mixers = mixer_order(df["mixer"])
    variants = [label for task, (label, _) in CROSSING.items() if task in set(df["task"])]
    dashes = [dash for task, (label, dash) in CROSSING.items() if label in variants]
    ks = sorted(set(int(k) for k in df["level"]))
    # Each mixer a little apart along k (in the hierarchy's order, centred on k): equal accuracies
    # (two perfect mixers) would otherwise draw one line over the other.
    step = min(DODGE_OCTAVES, 2 * DODGE_SPAN / max(len(mixers) - 1, 1))
    offset = {m: step * (i - (len(mixers) - 1) / 2) for i, m in enumerate(mixers)}
    spread = step * (len(mixers) - 1) / 2
    data = df.assign(lo=(df["mean"] - df["std"]).clip(lower=0), hi=(df["mean"] + df["std"]).clip(upper=1),
                     k_drawn=[k * 2.0 ** offset[m] for k, m in zip(df["level"], df["mixer"])])
    # A single distance would make a log domain of zero width: Vega then picks its own.
    scale = (alt.Scale(type="log", base=2, domain=[min(ks) * 2.0 ** -spread, max(ks) * 2.0 ** spread], nice=False)
             if len(ks) > 1 else alt.Scale(type="log", base=2))
    x_title, x_axis = "distance k (tokens back, log scale)", alt.Axis(values=ks, format=COUNT_FORMAT)
    x = alt.X("level:Q", title=x_title, scale=scale, axis=x_axis)
    x_drawn = alt.X("k_drawn:Q", title=x_title, scale=scale, axis=x_axis)
    y = alt.Y("mean:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="accuracy (test)")
    dash = alt.StrokeDash("variant:N", sort=variants, title="task",
                          scale=alt.Scale(domain=variants, range=dashes),
                          legend=legend(variants, symbolType="stroke", symbolSize=400, symbolStrokeWidth=2))
    color = _mixer_color(mixers)
    tooltip = [alt.Tooltip("mixer:N"), alt.Tooltip("variant:N", title="task"), alt.Tooltip("level:Q", title="k"),
               alt.Tooltip("mean:Q", format=".3f", title="accuracy"),
               alt.Tooltip("std:Q", format=".3f", title="std (seeds)"), alt.Tooltip("chance:Q", format=".3f"),
               alt.Tooltip("n:Q", title="seeds")]
    # Chance depends on the variant (and a little on k: it is measured on each cell's data), not on
    # the mixer: the mean over mixers and seeds.
    chance = (df.groupby(["variant", "level"], as_index=False)["chance"].mean()
              if len(df) else pd.DataFrame(columns=["variant", "level", "chance"]))
    chance_lines = alt.Chart(chance).mark_line(color=palette.REFERENCE_COLOR, strokeWidth=1.5).encode(
        x=x, y=alt.Y("chance:Q"), strokeDash=dash,
        tooltip=[alt.Tooltip("variant:N", title="chance of"), alt.Tooltip("chance:Q", format=".3f")])
    layers = [chance_lines]
    for part, width in ((data[data["mixer"] != FLOOR_MIXER], 2.0), (data[data["mixer"] == FLOOR_MIXER], 3.5)):
        if not len(part):
            continue
        base = alt.Chart(part).encode(x=x_drawn, color=color)
        layers += [
            base.mark_line(point=alt.OverlayMarkDef(size=40, filled=True), strokeWidth=width)
            .encode(y=y, strokeDash=dash, detail="variant:N", tooltip=tooltip),
            base.transform_filter(HAS_STD).mark_rule(strokeWidth=1.2, opacity=0.7).encode(y="lo:Q", y2="hi:Q"),
        ]
    return with_layout(alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Structure against content, distance by distance",
                          f"solid: the category k tokens back; dashed: a map of its identity; grey: chance; "
                          f"thick: the window, the floor; mixers set a little apart along k; {_seeds_note(df)}"),
    ))


# -- MQAR ----------------------------------------------------------------------------------------------

# -- the redundancy dial ---------------------------------------------------------------------------------

def dose_frame(frame: pd.DataFrame, reach: int = DEFAULT_WINDOW_REACH) -> pd.DataFrame:
    """The dial's rows: agree_structure at the farthest k beyond the window's ``reach``, one per (mixer, ρ);
    empty where the runs hold no such cell with a ρ (runs before the dial, or no k beyond the reach)."""
    frame = _frame(frame)
    df = frame.loc[(frame["task"] == "agree_structure") & frame["redundancy"].notna() & (frame["level"] > reach)]
    if not len(df):
        return df.copy()
    return df.loc[df["level"] == df["level"].max()].sort_values(["redundancy"], kind="stable").reset_index(drop=True)


def dose_response_chart(frame: pd.DataFrame, reach: int = DEFAULT_WINDOW_REACH) -> alt.LayerChart:
    """Structure accuracy against the redundancy ρ, one line per mixer, at a distance beyond the window's
    reach; the exclusion floor (the best accuracy without position t − k, the same for every mixer)
    as a thick dashed grey line.  Where a mixer's line runs along the floor, what it scores is what
    the context repeats; the gap between them is what it holds of position t − k."""
    df = dose_frame(frame, reach)
    mixers = mixer_order(df["mixer"])
    rhos = sorted(set(float(r) for r in df["redundancy"]))
    k = int(df["level"].max()) if len(df) else reach + 1
    x = alt.X("redundancy:Q", title="redundancy ρ (share of sequences from the sentence templates)",
              scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(values=rhos or [0, 1], format=".2~f"))
    y = alt.Y("mean:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="structure accuracy (test)")
    floor = (df.groupby("redundancy", as_index=False).agg(floor=("floor", "mean"), chance=("chance", "mean"))
             if len(df) else pd.DataFrame(columns=["redundancy", "floor", "chance"]))
    floor_line = alt.Chart(floor).transform_filter("isValid(datum.floor)").mark_line(
        color=palette.REFERENCE_COLOR, strokeDash=[6, 3], strokeWidth=3,
        point=alt.OverlayMarkDef(size=50, filled=True, color=palette.REFERENCE_COLOR)).encode(
        x=x, y=alt.Y("floor:Q"),
        tooltip=[alt.Tooltip("redundancy:Q", title="ρ"), alt.Tooltip("floor:Q", format=".3f", title="exclusion floor"),
                 alt.Tooltip("chance:Q", format=".3f")])
    data = df.assign(lo=(df["mean"] - df["std"]).clip(lower=0), hi=(df["mean"] + df["std"]).clip(upper=1))
    base = alt.Chart(data).encode(x=x, color=_mixer_color(mixers))
    tooltip = [alt.Tooltip("mixer:N"), alt.Tooltip("redundancy:Q", title="ρ"),
               alt.Tooltip("mean:Q", format=".3f", title="accuracy"), alt.Tooltip("std:Q", format=".3f", title="std (seeds)"),
               alt.Tooltip("floor:Q", format=".3f", title="exclusion floor"),
               alt.Tooltip("above:Q", format=".3f", title="above the floor"), alt.Tooltip("n:Q", title="seeds")]
    layers = [floor_line,
              base.mark_line(point=alt.OverlayMarkDef(size=40, filled=True), strokeWidth=2).encode(y=y, tooltip=tooltip),
              base.transform_filter(HAS_STD).mark_rule(strokeWidth=1.2, opacity=0.7).encode(y="lo:Q", y2="hi:Q")]
    return with_layout(alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title(f"Structure as the context repeats it, k = {k}",
                          f"the category {k} tokens back (beyond the window's reach of {reach}); dashed grey: the "
                          f"exclusion floor, what the context gives away without position t − k; {_seeds_note(df)}"),
    ))


def _recall_axes(data: pd.DataFrame, width: float = WIDTH) -> tuple[alt.X, alt.Y]:
    """Recall against state: floats per sequence on a log axis fitted to the data's states, test accuracy
    from 0 to 1 (the map's MQAR chart and the recall-against-state chart share them)."""
    floats = data["state_floats"][data["state_floats"] > 0]
    lo, hi = (float(floats.min()), float(floats.max())) if len(floats) else (1.0, 10.0)
    # A quarter of a decade of margin each side: a point on the edge of a log axis is drawn half outside.
    domain = [10 ** (math.log10(lo) - 0.25), 10 ** (math.log10(hi) + 0.25)]
    # The title no wider than a facet: side by side, two facets' titles would run into each other.
    x = alt.X("state_floats:Q", title="state (floats/sequence, log)",
              scale=alt.Scale(type="log", domain=domain, nice=False),
              axis=alt.Axis(values=_log_ticks(*domain), format="~s", titleLimit=width))
    y = alt.Y("mean:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="recall (test accuracy)")
    return x, y


def mqar_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """MQAR recall against the state a mixer keeps (floats per sequence, log scale), one point per
    mixer, one facet per MQAR size (pairs, length); chance in grey."""
    frame = _frame(frame)
    df = frame.loc[frame["task"] == "mqar"].copy()
    mixers = mixer_order(df["mixer"])
    sizes = difficulty_order(df) if len(df) else []
    data = df.assign(lo=(df["mean"] - df["std"]).clip(lower=0), hi=(df["mean"] + df["std"]).clip(upper=1),
                     state_floats=df["state_floats"].astype(float))
    columns, facet_width = facet_grid(len(sizes), max_columns=MQAR_COLUMNS, min_width=160, max_width=240)
    x, y = _recall_axes(data, facet_width)
    base = alt.Chart().encode(x=x, color=_mixer_color(mixers, PAGE_WIDTH))
    points = base.mark_point(filled=True, size=70, opacity=0.9).encode(
        y=y, shape=alt.value("circle"),
        tooltip=[alt.Tooltip("mixer:N"), alt.Tooltip("difficulty:N", title="MQAR size"),
                 alt.Tooltip("state_floats:Q", format=",.0f", title="state floats"),
                 alt.Tooltip("mean:Q", format=".3f", title="recall"),
                 alt.Tooltip("std:Q", format=".3f", title="std (seeds)"), alt.Tooltip("chance:Q", format=".3f"),
                 alt.Tooltip("n:Q", title="seeds")])
    errors = base.transform_filter(HAS_STD).mark_rule(strokeWidth=1.2).encode(y="lo:Q", y2="hi:Q")
    chance = alt.Chart().mark_rule(color=palette.REFERENCE_COLOR, strokeWidth=1.5, strokeDash=[6, 4]).encode(
        y="mean(chance):Q", tooltip=[alt.Tooltip("mean(chance):Q", format=".3f", title="chance")])
    return with_layout(
        alt.layer(chance, errors, points, data=data)
        .properties(width=facet_width, height=170)
        .facet(facet=alt.Facet("difficulty:N", sort=sizes, title=None,
                               header=alt.Header(labelFontSize=12, labelFontWeight="bold")), columns=columns)
        .properties(title=chart_title(
            "MQAR recall against state size",
            f"one point per mixer; grey dashes: chance; {_seeds_note(df)}",
            max(facet_width, columns * (facet_width + 20) - 20)))
    )


# -- recall against state size, at several widths (zoology's view) --------------------------------------

def recall_state_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The recall chart's rows from ``boundary_recall_state``: one per (mixer, MQAR size, width), mean and
    std of test accuracy over seeds, chance, the state (floats per sequence) and ``reaches`` (True at the
    smallest state where the mixer's mean reaches RECALL_LEVEL: :func:`recall_frontier`)."""
    cols = ["mixer", "difficulty", "d", "state_floats", "n", "mean", "std", "chance", "reaches"]
    if rows is None or not len(rows):
        return pd.DataFrame(columns=cols)
    df = rows.assign(accuracy=pd.to_numeric(rows["accuracy"], errors="coerce"),
                     state_floats=pd.to_numeric(rows["state_floats"], errors="coerce"),
                     chance=pd.to_numeric(rows["chance"], errors="coerce"),
                     d=pd.to_numeric(rows["d"], errors="coerce"))
    df = df[df["accuracy"].notna() & (df["state_floats"] > 0)]
    if not len(df):
        return pd.DataFrame(columns=cols)
    # A seed two picked runs both hold is one measurement (as on the map).
    df = df.groupby(["mixer", "difficulty", "d", "state_floats", "seed"], as_index=False, dropna=False).agg(
        accuracy=("accuracy", "mean"), chance=("chance", "mean"))
    out = (df.groupby(["mixer", "difficulty", "d", "state_floats"], as_index=False, dropna=False)
           .agg(n=("accuracy", "count"), mean=("accuracy", "mean"), std=("accuracy", "std"), chance=("chance", "mean")))
    frontier = recall_frontier(df.to_dict("records"))
    out["reaches"] = [frontier.get((m, d)) == f for m, d, f in zip(out["mixer"], out["difficulty"], out["state_floats"])]
    mixers = mixer_order(out["mixer"])
    out = out.assign(_m=out["mixer"].map(mixers.index)).sort_values(["_m", "difficulty", "state_floats"])
    return out.drop(columns="_m")[cols].reset_index(drop=True)


def recall_state_chart(rows: pd.DataFrame) -> alt.FacetChart:
    """MQAR recall against the state a mixer keeps, as zoology draws it: test accuracy against floats per
    sequence (log scale), one line per mixer across its widths (softmax and the window, at the body's
    width, as single points beside them), the smallest state that reaches RECALL_LEVEL ringed per mixer,
    RECALL_LEVEL and chance as rules; one facet per MQAR size."""
    df = recall_state_frame(rows) if "mean" not in rows.columns else rows
    mixers = mixer_order(df["mixer"])
    sizes = sorted(set(df["difficulty"]), key=lambda d: (level_of(None, d), d))
    data = df.assign(lo=(df["mean"] - df["std"]).clip(lower=0), hi=(df["mean"] + df["std"]).clip(upper=1),
                     state_floats=df["state_floats"].astype(float), level=RECALL_LEVEL, ref="")
    # Zoology's published points, in every facet (a facet's layers share its data): rows of their own,
    # told apart by ``ref`` (their label), never a mixer of this map.
    refs = pd.DataFrame([{"difficulty": size, "state_floats": floats, "mean": acc, "ref": label, "level": RECALL_LEVEL}
                         for size in sizes for label, floats, acc in ZOOLOGY_RECALL])
    data = pd.concat([data, refs], ignore_index=True) if len(refs) else data
    ours = "datum.ref === ''"
    columns, facet_width = facet_grid(len(sizes), max_columns=MQAR_COLUMNS - 1, min_width=180, max_width=260)
    x, y = _recall_axes(data, facet_width)
    base = alt.Chart().transform_filter(ours).encode(x=x, color=_mixer_color(mixers, PAGE_WIDTH))
    tooltip = [alt.Tooltip("mixer:N"), alt.Tooltip("difficulty:N", title="MQAR size"), alt.Tooltip("d:Q", title="width"),
               alt.Tooltip("state_floats:Q", format=",.0f", title="state floats"),
               alt.Tooltip("mean:Q", format=".3f", title="recall"), alt.Tooltip("std:Q", format=".3f", title="std (seeds)"),
               alt.Tooltip("chance:Q", format=".3f"), alt.Tooltip("n:Q", title="seeds")]
    lines = base.mark_line(strokeWidth=2, point=alt.OverlayMarkDef(size=50, filled=True)).encode(
        y=y, detail="mixer:N", tooltip=tooltip)
    errors = base.transform_filter(HAS_STD).mark_rule(strokeWidth=1.2).encode(y="lo:Q", y2="hi:Q")
    # The mark: a ring around the smallest state that reaches the bar, per mixer.
    marks = base.transform_filter("datum.reaches").mark_point(size=260, strokeWidth=2, filled=False).encode(
        y=y, tooltip=[*tooltip[:4], alt.Tooltip("mean:Q", format=".3f", title=f"first to reach {RECALL_LEVEL:g}")])
    bar = alt.Chart().mark_rule(color=palette.REFERENCE_COLOR, strokeWidth=1).encode(
        y="mean(level):Q", tooltip=[alt.Tooltip("mean(level):Q", title="recall bar")])
    chance = alt.Chart().transform_filter(ours).mark_rule(
        color=palette.REFERENCE_COLOR, strokeWidth=1.5, strokeDash=[6, 4]).encode(
        y="mean(chance):Q", tooltip=[alt.Tooltip("mean(chance):Q", format=".3f", title="chance")])
    published = alt.Chart().transform_filter(f"!({ours})")
    ref_tooltip = [alt.Tooltip("ref:N", title=ZOOLOGY_SETTING), alt.Tooltip("state_floats:Q", format=",.0f",
                                                                           title="state floats"),
                   alt.Tooltip("mean:Q", format=".2f", title="recall (published)")]
    ref_points = published.mark_point(shape="diamond", size=70, filled=True, color=palette.REFERENCE_COLOR).encode(
        x=x, y=y, tooltip=ref_tooltip)
    # to the left of its point: the rightmost (the window at 6.6e4 floats) would otherwise run past the plot
    ref_labels = published.mark_text(align="right", dx=-6, dy=-6, fontSize=9, color=palette.REFERENCE_COLOR).encode(
        x=x, y=y, text="ref:N")
    return with_layout(
        alt.layer(chance, bar, errors, lines, marks, ref_points, ref_labels, data=data)
        .properties(width=facet_width, height=200)
        .facet(facet=alt.Facet("difficulty:N", sort=sizes, title=None,
                               header=alt.Header(labelFontSize=12, labelFontWeight="bold")), columns=columns)
        .properties(title=chart_title(
            "MQAR recall against state size, at several widths",
            f"one line per mixer across its widths; ringed: the smallest state reaching {RECALL_LEVEL:g} "
            f"(grey rule); grey dashes: chance; grey diamonds: {ZOOLOGY_SETTING} (published, another setting); "
            f"{_seeds_note(df)}",
            max(facet_width, columns * (facet_width + 20) - 20)))
    )


# -- every rate's dev curve -------------------------------------------------------------------------------

def dev_curve_chart(rows: pd.DataFrame, title: str = "") -> alt.LayerChart:
    """Dev accuracy against the training step, one line per learning rate (mean over seeds), from
    ``boundary_dev_curve`` rows of one cell (mixer, task, difficulty): how each rate of the grid trained,
    and so why the chosen one was chosen."""
    df = rows.assign(dev_accuracy=pd.to_numeric(rows["dev_accuracy"], errors="coerce"),
                     step=pd.to_numeric(rows["step"], errors="coerce"), lr=pd.to_numeric(rows["lr"], errors="coerce"))
    df = (df.dropna(subset=["dev_accuracy", "step", "lr"])
          .groupby(["lr", "step"], as_index=False).agg(dev=("dev_accuracy", "mean"), n=("dev_accuracy", "count")))
    rates = sorted(set(df["lr"]))
    df["rate"] = [f"{v:g}" for v in df["lr"]]
    labels = [f"{v:g}" for v in rates]
    # Ordered, smallest rate darkest: the rates are a log-spaced grid, not categories.  Each rate's colour
    # is its value's (the palette's ramp), whichever other rates a cell tried.
    color = alt.Color("rate:O", sort=labels, title="learning rate",
                      scale=alt.Scale(domain=labels, range=[palette.learning_rate_color(v) for v in rates]),
                      legend=legend(labels, symbolType="stroke", symbolStrokeWidth=3))
    return with_layout(alt.Chart(df).mark_line(point=alt.OverlayMarkDef(size=30, filled=True), strokeWidth=2).encode(
        x=alt.X("step:Q", title="training step", axis=alt.Axis(format=COUNT_FORMAT)),
        y=alt.Y("dev:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="dev accuracy"),
        color=color,
        tooltip=[alt.Tooltip("rate:N", title="learning rate"), alt.Tooltip("step:Q", format=COUNT_FORMAT),
                 alt.Tooltip("dev:Q", format=".3f", title="dev accuracy"), alt.Tooltip("n:Q", title="seeds")],
    ).properties(width=WIDTH, height=HEIGHT * 2 // 3,
                 title=chart_title(title or "Dev accuracy per learning rate", "mean over seeds; every rate from the "
                                   "same weights and minibatches")))


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks of a log axis from ``lo`` to ``hi``: 1, 2, 5 of each decade where few decades are shown, the
    decades alone where many are (Vega's default grid draws every multiple of every decade)."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    steps = (1, 2, 5) if len(decades) <= 3 else (1,)
    return [m * 10.0**e for e in decades for m in steps if lo <= m * 10.0**e <= hi]


def run_figures(rows: pd.DataFrame) -> list[tuple[str, alt.TopLevelMixin]]:
    """The figures of exported ``boundary_accuracy`` rows (one run's), each with its file stem: the map,
    then the crossing and MQAR charts where the run holds their tasks."""
    frame = boundary_frame(rows)
    if frame.empty:
        return []
    out: list[tuple[str, alt.TopLevelMixin]] = [("boundary_map", heat_map(frame))]
    if len(crossing_frame(frame)):
        out.append(("boundary_crossing", crossing_chart(frame)))
    if len(dose_frame(frame)):
        out.append(("boundary_redundancy", dose_response_chart(frame)))
    if (frame["task"] == "mqar").any():
        out.append(("boundary_mqar", mqar_chart(frame)))
    return out


def recall_figures(rows: pd.DataFrame) -> list[tuple[str, alt.TopLevelMixin]]:
    """The figure of exported ``boundary_recall_state`` rows (one run's): recall against state size."""
    frame = recall_state_frame(rows)
    return [("boundary_recall_state", recall_state_chart(frame))] if len(frame) else []


__all__ = ["CROSSING", "TASK_LABELS", "boundary_frame", "crossing_chart", "crossing_frame", "dev_curve_chart",
           "dose_frame", "dose_response_chart",
           "difficulty_order", "heat_map", "mixer_order", "mqar_chart", "recall_figures", "recall_state_chart",
           "recall_state_frame", "run_figures", "task_label", "task_order"]
