"""Boundary map: every context mixer on structure and content tasks, distance by distance."""
from __future__ import annotations


import pandas as pd
import streamlit as st

from ema_core.boundary_findings import (DEFAULT_WINDOW_REACH, FLOOR_MIXER, PAPER_HIERARCHY, TASKS, VERDICT_RULE,
                                       claim_verdicts, measured_order, undertrained_text, window_reach)
from ema_core.experiments import REGISTRY, build_config
from ema_core.figures.boundary import (CROSSING, boundary_frame, crossing_chart, heat_map, mqar_chart,
                                       task_label, task_order)
from ema_core.mixers import MIXER_NAMES
from pages._router import ensure_router
from pages._state import finished_runs, launch, pick_config_seeds, read_store
from pages._ui import chart_with_downloads, table_downloads, unbroken
from store import StoreError, list_runs, mean_std_cells
from store.boundary import boundary_accuracy

ensure_router()  # before anything is drawn: see pages/_router.py

KIND = "boundary"
VERDICT_BOX = {"reproduced": st.success, "not_reproduced": st.error, "inconclusive": st.warning}
PRESET_NOTES = {"quick": "every mixer and task at one seed, about half an hour on two CPU cores",
                "full": "the whole grid at three seeds, for a GPU"}
CHANCE_TEXT = f"""
**Chance** is what a model that ignores its input scores on a cell: the better of a uniform guess and
always naming the training split's most frequent label, measured on the cell's own test data. It is
not one number per task: the agreement tasks' classes are uneven, and MQAR's values are many. The map
therefore colours each cell by accuracy *above* chance, (accuracy − chance) / (1 − chance): 0 is
chance, 1 is perfect, below 0 worse than chance; the cell's text is the accuracy itself.

**The window** (`{FLOOR_MIXER}`) is the floor: a mixer that sees only the last few inputs of each layer, with
no memory past them. Whatever it solves needs no long memory; a mixer is interesting where it beats
the window at a distance the window cannot reach. It is drawn thick on the crossing chart so that no
curve hides it.
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


def _reach(cfgs) -> int:
    """How far back the window mixer sees in these runs; the farthest where configs differ, so that a
    distance called "beyond its reach" is beyond it in every run."""
    reaches = [window_reach(int(c["model"]["window"]), int(c["model"]["layers"])) for c in cfgs
               if isinstance(c, dict) and isinstance(c.get("model"), dict) and {"window", "layers"} <= set(c["model"])]
    return max(reaches, default=DEFAULT_WINDOW_REACH)


def map_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The map as a table: one row per (mixer, task, difficulty), mean ± std across seeds."""
    table = pd.DataFrame({
        "mixer": frame["mixer"], "task": frame["task"], "difficulty": frame["difficulty"], "seeds": frame["n"],
        "accuracy_mean": frame["mean"], "accuracy_std": frame["std"],
        "chance_mean": frame["chance"], "chance_std": frame["chance_std"],
        "above_chance_mean": frame["above"], "above_chance_std": frame["above_std"],
        "state_floats": frame["state_floats"],  # nullable (Int64): a row the store holds without it
    })
    return mean_std_cells(table, digits=3)


def launch_section() -> None:
    st.subheader("Launch")
    exp = REGISTRY[KIND]
    presets = sorted(exp.presets, key=lambda p: (p != "quick", p != "full", p))
    st.markdown("One run holds every cell of the grid (mixer × task × difficulty × its seeds) and runs as a "
                "background job; the page shows it once it is done. "
                + "; ".join(f"`{p}`: {note}" for p, note in PRESET_NOTES.items() if p in presets) + ".")
    with st.form("boundary_launch"):
        left, right = st.columns(2)
        preset = left.selectbox("Preset", presets, key="boundary_preset")
        seed = right.number_input("Seed", min_value=0, max_value=2**31 - 33, value=0, step=1,
                                  key="boundary_seed", help="the first seed; a preset of several seeds counts up")
        mixers = st.multiselect("Mixers", list(MIXER_NAMES), default=list(MIXER_NAMES), key="boundary_mixers")
        tasks = st.multiselect("Tasks", list(TASKS), default=list(TASKS), key="boundary_tasks",
                               format_func=task_label)
        launched = st.form_submit_button("Launch", type="primary", icon=":material/play_arrow:")
    if launched:
        if not mixers or not tasks:
            st.warning("Pick at least one mixer and one task.")
            return
        # In the mixers' and the tasks' own order, whatever order they were clicked in: two
        # launches of the same choice are then the same config (and the second says "already done").
        chosen_mixers = [m for m in MIXER_NAMES if m in mixers]
        chosen_tasks = [t for t in TASKS if t in tasks]
        launch(lambda: [(KIND, build_config(KIND, preset=preset, seed=int(seed),
                                            overrides={"mixers": chosen_mixers, "tasks": chosen_tasks}))],
               preset, seed_key="boundary_seed")


st.title("Boundary map")
st.markdown(
    """
Where does each way of mixing context keep **structure** and lose **content**? Every context mixer —
a fixed window, EMA traces, their sequence, learned and data-dependent decays, linear and softmax
attention — sits in the same small model (two layers, the same width) and is trained on the same tasks at
controlled distances: **agreement** asks for the grammatical category of the word *k* tokens back
(structure) or for a random two-class map of *which* word it was (content), on the same sentences;
**MQAR** asks to recall the value bound to each of several keys; **lag identity** names the token *k*
steps back in a random stream. Each cell keeps the learning rate that scores best on its dev split and
is scored on held-out test data. The paper's claim: fixed-decay traces keep the category and lose the
identity as *k* grows, where attention keeps both.
"""
)

runs = read_store(lambda: list_runs(kind=KIND, limit=None))

done = finished_runs(runs, "boundary", "one run per preset and seed", launch_section)

picked, picked_configs, configs, _ = pick_config_seeds(done, KIND, "Runs (default: every run of the newest config)",
                                                      "boundary_runs", launch_section)

try:
    rows = boundary_accuracy(picked)
except StoreError as exc:
    st.error(str(exc))
    st.stop()
if rows.empty:
    st.info("These runs hold no cells of the map.")
    launch_section()
    st.stop()

frame = boundary_frame(rows)
seeds = sorted({int(s) for s in rows["seed"].dropna()})
st.caption(f"{len(picked)} run(s) · seeds {', '.join(map(str, seeds))} · config {', '.join(picked_configs)} · "
           "every number is a mean over seeds; error bars and ± are the standard deviation across them")

# -- the map -------------------------------------------------------------------------------------------
st.subheader("The map")
chart_with_downloads(heat_map(frame), "boundary_map", key="boundary_map_chart")
table = map_table(frame)
with st.expander("The map as a table"):
    st.dataframe(unbroken(table, "accuracy", "chance", "above_chance"), hide_index=True, key="boundary_map_table")
table_downloads(table, "boundary_map", key="boundary_map_dl",
                caption=f"The boundary map: test accuracy per mixer, task and difficulty, mean ± std across seeds "
                        f"(seeds {', '.join(map(str, seeds))}); above chance = (accuracy − chance) / (1 − chance).",
                label="tab:boundary-map")

# -- structure against content -------------------------------------------------------------------------
present = set(frame["task"])
st.subheader("Structure against content")
chart_col, text_col = st.columns([3, 2])
with chart_col:
    if present & set(CROSSING):
        chart_with_downloads(crossing_chart(frame), "boundary_crossing", key="boundary_crossing_chart")
    else:
        st.info("These runs hold neither agreement task.")
with text_col:
    st.markdown(CHANCE_TEXT)

# -- recall --------------------------------------------------------------------------------------------
# The whole width: one facet per MQAR size, four to a row, does not shrink to a column.
st.subheader("MQAR recall against state size")
if "mqar" in present:
    chart_with_downloads(mqar_chart(frame), "boundary_mqar", key="boundary_mqar_chart")
    if under := undertrained_text(rows):
        st.warning(under, icon=":material/hourglass_empty:")
else:
    st.info("These runs hold no MQAR cells.")

# -- the paper beside ours -----------------------------------------------------------------------------
st.subheader("The paper's hierarchy and the measured one")
tasks = task_order(present)
# MQAR first: the hierarchy is the paper's argument about recall.
if st.session_state.get("boundary_order_task") not in tasks:
    st.session_state["boundary_order_task"] = "mqar" if "mqar" in tasks else tasks[0]
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
verdicts = claim_verdicts(rows, reach=_reach(configs[r] for r in picked))
claims = pd.DataFrame({"claim": [v.claim.what for v in verdicts], "the paper": [v.claim.paper for v in verdicts],
                       "source": [v.claim.source for v in verdicts], "verdict": [v.word for v in verdicts]})
st.table(claims, hide_index=True)
for v in verdicts:
    VERDICT_BOX.get(v.verdict, st.info)(v.sentence)
st.markdown(VERDICT_RULE)

launch_section()
