"""What the pages of the grid studies share (Boundary map, Depth dilution: one run holds every cell of a
grid of settings, times its seeds): the launch form, and the finished runs a page picks and reads."""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import pandas as pd
import streamlit as st

from ema_core.experiments import REGISTRY, build_config
from ema_core.verdicts import VERDICT_MIN_SEEDS
from pages._state import finished_runs, launch, pick_config_seeds, query, read_store
from store import list_runs


class Axis(NamedTuple):
    """An axis of the grid the launch form offers: ``name`` is its config field, and its multiselect's key
    after the page's prefix; ``noun`` is one of its values in words ("Pick at least one rule.")."""
    name: str
    label: str
    options: Sequence[str]
    default: Sequence[str]
    noun: str
    format_func: Callable[[str], str] = str


def grid_launch(kind: str, prefix: str, *, cells: str, notes: Sequence[str], describe: Callable[[str], str],
                axes: Sequence[Axis], choose_seeds: bool = False) -> None:
    """The launch section: one run of the preset picked, over the values picked on each axis.

    ``cells`` names the grid's axes in words ("rule × depth"); ``notes`` are the presets the text
    describes, in the order offered (the rest follow by name), and ``describe`` says one of them in a
    phrase. With ``choose_seeds`` the form takes the number of seeds too; else the preset decides.
    Widget keys are ``<prefix>_preset``, ``<prefix>_seed``, ``<prefix>_seeds`` and ``<prefix>_<axis>``.
    """
    st.subheader("Launch")
    order = list(notes)
    presets = sorted(REGISTRY[kind].presets, key=lambda p: (order.index(p) if p in order else len(order), p))
    st.markdown(f"One run holds every cell of the grid ({cells} × its seeds) and runs as a background job; the "
                "page shows it once it is done. "
                + "; ".join(f"`{p}`: {describe(p)}" for p in order if p in presets)
                + f". The claims are judged on {VERDICT_MIN_SEEDS} seeds or more.")
    with st.form(f"{prefix}_launch"):
        columns = st.columns(3 if choose_seeds else 2)
        preset = columns[0].selectbox("Preset", presets, key=f"{prefix}_preset")
        seed = columns[1].number_input(
            "Seed", min_value=0, max_value=2**31 - 33, value=0, step=1, key=f"{prefix}_seed",
            help=f"the first seed; a {'run' if choose_seeds else 'preset'} of several seeds counts up")
        seeds = columns[2].number_input(
            "Seeds", min_value=1, max_value=32, value=1, step=1, key=f"{prefix}_seeds",
            help=f"seeds in this run (the claims need {VERDICT_MIN_SEEDS})") if choose_seeds else None
        picked = {a.name: st.multiselect(a.label, list(a.options), default=list(a.default), key=f"{prefix}_{a.name}",
                                         format_func=a.format_func) for a in axes}
        launched = st.form_submit_button("Launch", type="primary", icon=":material/play_arrow:")
    if not launched:
        return
    if not all(picked.values()):
        st.warning("Pick at least one " + " and one ".join(a.noun for a in axes) + ".")
        return
    # Each axis in its own order, whatever order the values were clicked in: two launches of the same
    # choice are then the same config (and the second says "already done").
    overrides: dict[str, object] = {a.name: [v for v in a.options if v in picked[a.name]] for a in axes}
    if seeds is not None:
        overrides["seeds"] = int(seeds)
    launch(lambda: [(kind, build_config(kind, preset=preset, seed=int(seed), overrides=overrides))], preset,
           seed_key=f"{prefix}_seed")


class GridRuns(NamedTuple):
    done: pd.DataFrame  # every finished run of the kind
    picked: list[str]
    picked_configs: list[str]  # the config ids of the runs picked
    configs: dict  # run id -> its config (a dict; None where the run recorded none)
    rows: pd.DataFrame  # the cells of the runs picked


def grid_runs(kind: str, prefix: str, what: str, launch_section: Callable[[], None],
              cells: Callable[[list[str]], pd.DataFrame], no_cells: str) -> GridRuns:
    """The finished runs of ``kind`` (``what`` names them in words), those picked (``<prefix>_runs``, every
    run of the config with the most seeds by default) and their cells as ``cells`` reads them from the
    store.  With none finished, none picked or no cells, says so (``no_cells``), offers the launch and
    stops the page."""
    runs = read_store(lambda: list_runs(kind=kind, limit=None))
    done = finished_runs(runs, what, "one run per preset and seed", launch_section)
    picked, picked_configs, configs, _ = pick_config_seeds(
        done, kind, "Runs (default: every run of the config with the most seeds)", f"{prefix}_runs",
        launch_section)
    rows = query(lambda: cells(picked))
    if rows.empty:
        st.info(no_cells)
        launch_section()
        st.stop()
    return GridRuns(done, picked, picked_configs, configs, rows)
