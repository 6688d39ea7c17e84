"""The structure study's charts (PAPER.md §2): per-role probe accuracy of SPCN, the n-gram window and
the BiGRU, and the probe controls, from the frames of the store's probe queries."""
from __future__ import annotations

import math

import altair as alt
import pandas as pd

from ema_core import palette
from ema_core.figures import (ACCURACY_AXIS, HAS_STD, HEIGHT, PAGE_WIDTH, WIDTH, chart_title, color_scale,
                              label_colors, legend, with_layout)
from ema_core.grammar import ROLES

# What the role chart compares: feature set in the store -> label, in legend order.  The n-gram
# window (the last 3 word identities and the position, no EMA) is the baseline the traces must beat.
ROLE_MODELS = {"instantaneous": "SPCN instantaneous", "traces": "SPCN traces", "ngram": "n-gram window",
               "bigru": "BiGRU"}
ROLE_GROUPS = ("all tokens", "lexical", "structure-dependent", "other")
# The probe-control chart: measure of the store's probe_control -> label, in legend order.  "real
# task" is the probe on the features themselves (the trained SPCN's, or the n-gram window's).
CONTROL_CONDITIONS = {"trained": "real task", "untrained": "untrained SPCN", "control": "control: word",
                      "control_prev": "control: word × previous category", "control_pos": "control: word × position"}
# The feature sets of the probe-control chart, in its order: SPCN's, then the n-gram windows.
CONTROL_SETS = ("instantaneous", "traces", "both", "ngram1", "ngram2", "ngram")
# A title over the role facets wraps at this width: the legend on top is about as wide, and a split
# with few roles makes facets narrower than any title.
ROLE_TITLE_WIDTH = 360
# px per bar, at most and at least: every role of a split side by side must fit PAGE_WIDTH (a facet is
# not narrowed to its column), so the bars of a split with many roles are thinner.
ROLE_BAR_STEP, ROLE_BAR_MIN = 10, 4
# What a role chart takes besides its bars: the y axis, the gaps between facets, a role's padding.
_ROLE_AXIS, _ROLE_GAP, _ROLE_PAD = 64, 16, 0.25


def _role_group(role: str) -> str:
    if role == "overall":
        return ROLE_GROUPS[0]
    flags = {r.name: r.lexical for r in ROLES}
    if role not in flags:
        return ROLE_GROUPS[3]
    return ROLE_GROUPS[1] if flags[role] else ROLE_GROUPS[2]


def role_accuracy_frame(stats: pd.DataFrame, split: str) -> pd.DataFrame:
    """The role chart's rows from the store's ``probe_accuracy_stats`` for one split.

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


def _bars_with_errors(df: pd.DataFrame, x: str, x_title: str | None, offset: str, domain: list[str],
                      colors: dict[str, str], legend_title: str, x_sort: list[str],
                      legend: alt.Legend | None = None, label_angle: int = 0) -> alt.LayerChart:
    """Grouped bars (``x`` by ``offset``) of ``mean`` with mean ± std rules where a std exists."""
    data = df.assign(lo=(df["mean"] - df["std"]).clip(lower=0), hi=(df["mean"] + df["std"]).clip(upper=1))
    base = alt.Chart().encode(
        # Vega hides labels whose axis-aligned boxes overlap; slanted labels a band apart do not
        # touch, but their boxes do, so every label is drawn.  Between two groups of bars a quarter
        # of a group's width: the groups stay apart when the bars are thin.
        x=alt.X(f"{x}:N", sort=x_sort, title=x_title, scale=alt.Scale(paddingInner=_ROLE_PAD, paddingOuter=_ROLE_PAD / 2),
                axis=alt.Axis(labelAngle=label_angle, labelLimit=140, labelOverlap=not label_angle)),
        xOffset=alt.XOffset(f"{offset}:N", sort=domain, scale=alt.Scale(domain=domain, paddingInner=0.05)),
    )
    bars = base.mark_bar().encode(
        y=alt.Y("mean:Q", scale=alt.Scale(domain=[0, 1]), axis=ACCURACY_AXIS, title="accuracy (held out)"),
        color=alt.Color(f"{offset}:N", scale=color_scale(domain, lambda name: colors.get(name, palette.OTHER_COLOR)),
                        sort=domain, title=legend_title, legend=legend),
        tooltip=[alt.Tooltip(f"{x}:N"), alt.Tooltip(f"{offset}:N"), alt.Tooltip("mean:Q", format=".3f"),
                 alt.Tooltip("std:Q", format=".3f", title="std (seeds)"), alt.Tooltip("n:Q", title="seeds")],
    )
    errors = base.transform_filter(HAS_STD).mark_rule(color=palette.TEXT_COLOR, strokeWidth=1.5).encode(
        y="lo:Q", y2="hi:Q")
    return alt.layer(bars, errors, data=data)  # data on the layer: a facet of it needs it there


def role_bar_step(n_roles: int, n_models: int, n_groups: int) -> float:
    """px per bar so that ``n_roles`` roles of ``n_models`` bars each, in ``n_groups`` facets, fit
    PAGE_WIDTH: ROLE_BAR_STEP where they fit, thinner (down to ROLE_BAR_MIN) where they would not."""
    room = PAGE_WIDTH - _ROLE_AXIS - _ROLE_GAP * max(n_groups - 1, 0)
    # A role's band is its bars plus the padding around it (paddingInner of the band, half of the
    # outer padding at each end of each facet).
    per_bar = max(n_roles * (1 + _ROLE_PAD) + n_groups * _ROLE_PAD, 1) * max(n_models, 1)
    return max(ROLE_BAR_MIN, min(ROLE_BAR_STEP, math.floor(10 * room / per_bar) / 10))


def role_accuracy_chart(frame: pd.DataFrame, split_label: str = "") -> alt.FacetChart:
    """Per-role probe accuracy: SPCN instantaneous, SPCN traces, the n-gram window and the BiGRU side by
    side, mean ± std across seeds, roles faceted into all tokens / lexical / structure-dependent."""
    models = [m for m in ROLE_MODELS.values() if m in set(frame["model"])] or list(ROLE_MODELS.values())
    colors = label_colors(ROLE_MODELS, palette.PROBE_COLORS)
    groups = [g for g in ROLE_GROUPS if g in set(frame["group"])]
    roles = list(dict.fromkeys(frame["role"]))
    # A facet's width follows its number of roles (independent x scales, a fixed step per bar), the step
    # chosen so that the facets fit a page.  The legend on top, as wide as the title.
    layer = _bars_with_errors(frame, "role", None, "model", models, colors, "probe reads", roles,
                              legend=legend(models, width=ROLE_TITLE_WIDTH, orient="top"), label_angle=-90)
    subtitle = "mean ± std across seeds (no bar: one seed)" + (f"; split: {split_label}" if split_label else "")
    step = role_bar_step(len(roles), len(models), len(groups))
    return with_layout(
        layer.properties(width=alt.Step(step), height=HEIGHT)
        .facet(column=alt.Column("group:N", sort=groups, title=None,
                                 header=alt.Header(labelFontSize=13, labelFontWeight="bold")), spacing=_ROLE_GAP)
        .resolve_scale(x="independent")
        .properties(title=chart_title("Grammatical roles read from SPCN, an n-gram window and the BiGRU", subtitle,
                                      ROLE_TITLE_WIDTH))
    )


def probe_control_frame(control: pd.DataFrame) -> pd.DataFrame:
    """The probe-control chart's rows from the store's ``probe_control``.

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
    sets = [f for f in CONTROL_SETS if f in set(out["feature_set"])] + sorted(set(out["feature_set"]) - set(CONTROL_SETS))
    out["_f"] = out["feature_set"].map(sets.index)
    out["_c"] = out["condition"].map(list(CONTROL_CONDITIONS.values()).index)
    return out.sort_values(["_f", "_c"]).drop(columns=["_f", "_c"]).reset_index(drop=True)


def probe_control_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Overall probe accuracy per feature set: the real task, the untrained SPCN and the three control tasks."""
    conditions = [c for c in CONTROL_CONDITIONS.values() if c in set(frame["condition"])] \
        or list(CONTROL_CONDITIONS.values())
    colors = label_colors(CONTROL_CONDITIONS, palette.CONDITION_COLORS)
    sets = list(dict.fromkeys(frame["feature_set"]))
    # The legend below the plot, whole: "control: word × previous category" is wider than the plot
    # of half a page's column.
    return with_layout(_bars_with_errors(frame, "feature_set", "features probed", "condition", conditions, colors,
                                         "probe on", sets, legend=legend(conditions)).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Probe controls", "overall accuracy, test split; selectivity = real task − a control task"),
    ))
