"""Boundary map: every context mixer on structure and content tasks, distance by distance."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ema_core.studies.boundary.findings import (FLOOR_MIXER, PAPER_HIERARCHY, RECALL_LEVEL, TASKS, VERDICT_RULE,
                                       claim_verdicts, claims_and_checks, measured_order, recall_frontier,
                                       recipe_failures_text, runs_reach, undertrained_text)
from ema_core.experiments import build_config
from ema_core.studies.boundary.figures import (boundary_frame, crossing_chart, crossing_frame, dev_curve_chart, dose_frame,
                                       dose_response_chart, heat_map, mixer_order, mqar_chart, recall_state_chart,
                                       recall_state_frame, task_label, task_order)
from ema_core.mixers import MIXER_NAMES
from ema_core.studies.boundary.findings import scores as boundary_scores
from ema_core.verdicts import VERDICT_MIN_SEEDS
from pages._grid import Axis, grid_launch, grid_runs
from pages._router import ensure_router
from pages._state import query
from pages._ui import chart_with_downloads, table_downloads, unbroken
from pages._verdicts import verdict_lines
from store import mean_std_cells
from store.boundary import boundary_accuracy, boundary_dev_curve, boundary_recall_state

ensure_router()  # before anything is drawn: see pages/_router.py

KIND = "boundary"
# What each preset runs, in words, and how long it takes (its seeds are read from its config).  The
# launch form offers the presets in this order.
PRESET_NOTES = {"quick": "every mixer, the dial at three redundancies, MQAR and recall at four widths, about 12 minutes on two CPU cores", "full": "the whole grid, for a GPU"}
CHANCE_TEXT = f"""
**Chance** is what a model that ignores its input scores on a cell: the better of a uniform guess and
always naming the training split's most frequent label, measured on the cell's own test data. It is
not one number per task: the agreement tasks' classes are uneven, and MQAR's values are many.

**The exclusion floor** of a cell is the best accuracy reachable *without* position t − k: a predictor
fitted on the training split that sees every other position (MQAR: the best rule that binds no key to
its value, reading only which query this is and where it stands after the block). Whatever the rest
of the sequence gives away about the label is in it. The
map therefore colours each cell by accuracy above b = max(chance, exclusion floor), (accuracy − b) /
(1 − b): 0 is what a model that never saw t − k gets, 1 is perfect, below 0 worse; the cell's text
is the accuracy itself, with the floor (f) under it. A run stored before the floor was measured has
none: its cells are set against chance.

**The window** (`{FLOOR_MIXER}`) is the mixer with no memory: it sees only the last few inputs of each
layer (and the short conv before it), nothing past them. Whatever it solves needs no long memory.
"At a distance" is every k beyond its reach, layers · ((window − 1) + (conv − 1)) tokens, computed from
the run's own body. It is drawn thick on the crossing chart so that no curve hides it.
"""


DIAL_TEXT = """
At ρ = 0 every position's category is drawn afresh, so only position t − k says the category k back:
the floor is chance, and a mixer above it **held** something of t − k. As ρ grows, more sequences
follow the sentence templates, whose neighbours name the category at t − k nearly always: the floor
rises, and a mixer can score well while holding nothing of t − k. The paper's claim is judged where
the context repeats nothing (ρ = 0, above the floor); its statement as the paper makes it (structure
kept, content lost) at the largest ρ, where this chart says how much of it the repetition explains.
At ρ = 0 structure and the four-way content map are one task up to relabelling the words: the
label-count control checks that they score alike.
"""


def _order_text(order) -> str:
    """A numbered list of mixers, weakest first: names, or (name, mean accuracy) as measured."""
    lines = []
    for i, item in enumerate(order, 1):
        if isinstance(item, (tuple, list)):
            name, acc = item
            lines.append(f"{i}. `{name}` — {acc:.3f}")
        else:
            lines.append(f"{i}. `{item}`")
    return "\n".join(lines) or "—"


def map_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The map as a table: one row per (mixer, task, difficulty), mean ± std across seeds."""
    table = pd.DataFrame({
        "mixer": frame["mixer"], "task": frame["task"], "difficulty": frame["difficulty"], "seeds": frame["n"],
        "accuracy_mean": frame["mean"], "accuracy_std": frame["std"],
        "chance_mean": frame["chance"], "chance_std": frame["chance_std"],
        "exclusion_floor_mean": frame["floor"], "exclusion_floor_std": frame["floor_std"],
        "above_floor_mean": frame["above"], "above_floor_std": frame["above_std"],
        "state_floats": frame["state_floats"],  # nullable (Int64): a row the store holds without it
    })
    return mean_std_cells(table, digits=3)


def launch_section() -> None:
    # The quick preset's tasks by default (its rate table has rates for those; a task it has none
    # for chooses its rate on dev in every cell, the slower way).
    grid_launch(KIND, "boundary", cells="mixer × task × difficulty", notes=PRESET_NOTES,
                describe=lambda p: f"{PRESET_NOTES[p]}, {build_config(KIND, preset=p).seeds} seed(s)",
                axes=(Axis("mixers", "Mixers", MIXER_NAMES, MIXER_NAMES, "mixer"),
                      Axis("tasks", "Tasks", TASKS, build_config(KIND, preset="quick").tasks, "task", task_label)))


st.title("Boundary map")
st.markdown(
    """
Where does each way of mixing context keep **structure** and lose **content**? Every context mixer —
a fixed window, EMA traces, their sequence, learned and data-dependent decays, linear and softmax
attention — sits in the same small model (two layers, the same width) and is trained on the same tasks at
controlled distances: **agreement** asks for the grammatical category of the word *k* tokens back
(structure) or for a balanced two- or four-class map of *which* word it was (content), on the same
sequences, each drawn from sentence templates with probability ρ (the **redundancy**: how much the
context repeats the category) and with every position independent otherwise;
**MQAR** asks to recall the value bound to each of several keys; **lag identity** names the token *k*
steps back in a random stream. Each cell keeps the learning rate that scores best on its dev split and
is scored on held-out test data, against its exclusion floor. The paper's claim: fixed-decay traces
keep the category and lose the identity as *k* grows, where attention keeps both.
"""
)

_, picked, picked_configs, configs, rows = grid_runs(KIND, "boundary", "boundary", launch_section, boundary_accuracy,
                                                    "These runs hold no cells of the map.")

frame = boundary_frame(rows)
seeds = sorted({int(s) for s in rows["seed"].dropna()})
st.caption(f"{len(picked)} run(s) · seeds {', '.join(map(str, seeds))} · config {', '.join(picked_configs)} · "
           "every number is a mean over seeds; error bars and ± are the standard deviation across them")

# -- the map -------------------------------------------------------------------------------------------
st.subheader("The map")
chart_with_downloads(heat_map(frame), "boundary_map", key="boundary_map_chart")
table = map_table(frame)
if frame["floor"].isna().any():
    st.caption("Some cells hold no exclusion floor (runs stored before it was measured): they are coloured by "
               "accuracy above chance alone.")
with st.expander("The map as a table"):
    st.dataframe(unbroken(table, "accuracy", "chance", "exclusion_floor", "above_floor"), hide_index=True,
                 key="boundary_map_table")
table_downloads(table, "boundary_map", key="boundary_map_dl",
                caption=f"The boundary map: test accuracy per mixer, task and difficulty, mean ± std across seeds "
                        f"(seeds {', '.join(map(str, seeds))}); above floor = (accuracy − b) / (1 − b), "
                        "b = max(chance, exclusion floor).",
                label="tab:boundary-map")

# -- structure against content -------------------------------------------------------------------------
present = set(frame["task"])
st.subheader("Structure against content")
chart_col, text_col = st.columns([3, 2])
with chart_col:
    if len(crossing_frame(frame)):
        chart_with_downloads(crossing_chart(frame), "boundary_crossing", key="boundary_crossing_chart")
    else:
        st.info("These runs hold no agreement task in the independent stream (ρ = 0).")
with text_col:
    st.markdown(CHANCE_TEXT)

# -- the redundancy dial ---------------------------------------------------------------------------------
st.subheader("Structure as the context repeats it")
reach = runs_reach(configs[r] for r in picked)
if len(dose_frame(frame, reach)):
    dial_col, dial_text = st.columns([3, 2])
    with dial_col:
        chart_with_downloads(dose_response_chart(frame, reach), "boundary_redundancy", key="boundary_dial_chart")
    with dial_text:
        st.markdown(DIAL_TEXT)
else:
    st.info(f"These runs hold no agreement cell with a redundancy beyond the window's reach (k > {reach}): runs "
            "stored before the dial ran one stream. Launch a run of today's presets to draw it.")

# -- recall --------------------------------------------------------------------------------------------
# The whole width: one facet per MQAR size does not shrink to a column.
st.subheader("MQAR recall against state size")
recall = query(lambda: boundary_recall_state(picked))
if len(recall_state_frame(recall)):
    chart_with_downloads(recall_state_chart(recall_state_frame(recall)), "boundary_recall_state",
                         key="boundary_recall_chart")
    frontier = recall_frontier(recall)
    lines = []
    for size in sorted(set(recall["difficulty"])):
        for m in mixer_order(recall.loc[recall["difficulty"] == size, "mixer"]):
            got = frontier.get((m, size))
            lines.append(f"- {size}, `{m}`: " + (f"{got:,.0f} floats" if got is not None
                                                  else "not reached at the widths measured"))
    st.markdown(f"**The smallest state reaching {RECALL_LEVEL:g}** (mean test accuracy over seeds):\n"
                + "\n".join(lines))
elif "mqar" in present:
    st.info("These runs hold no recall-against-state rows (runs stored before MQAR was trained at several "
            "widths): the map's MQAR cells, at the body's width only, instead.")
    chart_with_downloads(mqar_chart(frame), "boundary_mqar", key="boundary_mqar_chart")
else:
    st.info("These runs hold no MQAR cells.")
# Said once here, beside the chart it concerns; the verdicts below do not repeat it.
under = undertrained_text(rows) if "mqar" in present else ""
if under:
    st.warning(under, icon=":material/hourglass_empty:")
if failed := recipe_failures_text(rows):
    st.warning(failed, icon=":material/error:")

# -- the learning rates ---------------------------------------------------------------------------------
with st.expander("Dev accuracy per learning rate"):
    curves = query(lambda: boundary_dev_curve(picked))
    if curves.empty:
        st.info("These runs hold no dev curves (runs stored before every rate's dev accuracy was): only the "
                "chosen rate and its dev accuracy, in the map's table.")
    else:
        # Every cell's curves, the map's and the recall widths' (d tells them apart).
        cells = curves[["mixer", "task", "difficulty", "d"]].drop_duplicates()
        options = [(m, t, d, int(w)) for m, t, d, w in cells.itertuples(index=False)]
        cell = st.selectbox("Cell", options, format_func=lambda c: f"{c[0]} · {task_label(c[1])} · {c[2]} · d={c[3]}",
                            key="boundary_curve_cell")
        one = curves[(curves["mixer"] == cell[0]) & (curves["task"] == cell[1]) & (curves["difficulty"] == cell[2])
                     & (curves["d"] == cell[3])]
        chart_with_downloads(dev_curve_chart(one, f"Dev accuracy per learning rate: {cell[0]}, "
                                                  f"{task_label(cell[1])} {cell[2]}, d = {cell[3]}"),
                             "boundary_dev_curve", key="boundary_curve_chart")

# -- the paper beside ours -----------------------------------------------------------------------------
st.subheader("The paper's hierarchy and the measured one")
tasks = task_order(present)
# Opens on a task the page trusts: MQAR (the paper's argument is about recall) only where no size of it
# is under-trained (``under`` above says so), else a content task (the hierarchy is about keeping
# content), else the first.
if st.session_state.get("boundary_order_task") not in tasks:
    trusted = [t for t in ("mqar", "agree_content4", "agree_content", "lag_identity") if t in tasks and not (t == "mqar" and under)]
    st.session_state["boundary_order_task"] = (trusted or tasks)[0]
task = st.radio("Measured on", tasks, format_func=task_label, horizontal=True, key="boundary_order_task")
paper_col, ours_col = st.columns(2)
with paper_col:
    st.markdown("**The paper's hierarchy**, weakest first\n\n" + _order_text(PAPER_HIERARCHY))
with ours_col:
    ours = measured_order(rows, task, mixers=PAPER_HIERARCHY)
    st.markdown(f"**Measured on {task_label(task)}**, weakest first (mean test accuracy over its cells and "
                "seeds)\n\n" + (_order_text(ours) if ours else "None of these mixers is in the runs picked."))
everyone = measured_order(rows, task)
st.caption(f"Every mixer of these runs on {task_label(task)}, weakest first: "
           + ", ".join(f"{m} {acc:.3f}" for m, acc in everyone) + ".")
verdicts = claim_verdicts(rows, reach=reach, recall=recall)
claims, checks = claims_and_checks(verdicts)
st.markdown("**The paper's claims**, each of which these tasks could refute")
if len(seeds) < VERDICT_MIN_SEEDS:
    st.info(f"These runs hold {len(seeds)} seed(s): a claim is judged on {VERDICT_MIN_SEEDS} seeds or more, so "
            f"each says \"not judged: {len(seeds)} seed{'' if len(seeds) == 1 else 's'}\". Launch more seeds to judge them.")
said = verdict_lines(boundary_scores(claims), VERDICT_RULE, key="boundary_claims", said=[under] if under else [])
st.markdown("**Sanity checks**: they hold by construction or check the harness (the recipe trains, the window "
            "forgets past its reach, attention reads what is there), so they say whether the map can be read, "
            "not whether the paper is right")
verdict_lines(boundary_scores(checks), VERDICT_RULE, key="boundary_checks", title="The checks' rule and numbers",
              said=said)

launch_section()
