"""Resources the pages share for the life of the server (not per session)."""
from __future__ import annotations

import importlib
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, NamedTuple, TypeVar

import pandas as pd
import streamlit as st

from ema_core.rundir import RESUMABLE_STATES, emalab_home
from ema_core.studies import STUDIES
from jobs.runner import LocalRunner, existing_run, next_free_seed
from store import StorageError, StoreError, config_id, config_without_seed, ingest
from store.scoreboard import span_of

T = TypeVar("T")


def runner() -> LocalRunner:
    return _runner(str(emalab_home()))


@st.cache_resource
def _runner(home: str) -> LocalRunner:
    # One runner per server and data folder: it owns the scheduler thread that starts queued
    # jobs as slots free.  Jobs are detached processes with their state in run folders, so a
    # restarted app (or a CLI) sees the same jobs.
    return LocalRunner(home=home, slots=2)


def ingest_quietly() -> str | None:
    """Bring the store up to date with the run folders; a problem becomes a message, not a traceback."""
    try:
        ingest()
    except (StoreError, StorageError) as exc:
        return str(exc)
    return None


def read_store(read: Callable[[], T]) -> T:
    """Take in new run folders, then ``read()``: a failed ingest is a warning, an unreadable store stops the page."""
    problem = ingest_quietly()
    if problem:
        st.warning(f"The store could not be brought up to date: {problem}")
    return query(read)


def query(read: Callable[[], T]) -> T:
    """``read()`` from the store as it is (a page reads it once brought up to date): an unreadable store
    stops the page with its message."""
    try:
        return read()
    except StoreError as exc:
        st.error(str(exc))
        st.stop()


def launch(jobs: Callable[[], Iterable[tuple[str, object]]], preset: str | None,
           seed_key: str | None = None, follow_link: bool = True) -> list[str]:
    """Submit the (kind, config) pairs ``jobs()`` builds as background jobs; say what started, or why nothing did.

    The configs are built inside: a setting refused by its config is reported like a failed submit.
    Settings that already ran to the end are not run again (:func:`already_done` says so);
    ``seed_key`` names the page's seed input, which its "use seed N" button then sets;
    ``follow_link`` adds a link to the Jobs page (left out on the Jobs page itself).
    """
    try:
        planned = [(kind, cfg, *existing_run(kind, cfg)) for kind, cfg in jobs()]
        # A queued or running run is followed, not launched again: only new or resumable ones start.
        started = [(runner().submit(kind, cfg, preset=preset), before) for kind, cfg, _, before in planned
                   if before not in ("done", "queued", "running")]
    except (ValueError, StorageError) as exc:  # a bad setting, or a data folder that cannot be written
        st.error(f"Not launched: {exc}")
        return []
    if started:
        st.success("Launched: " + ", ".join(run_id + relaunch_note(before) for run_id, before in started),
                   icon=":material/rocket_launch:")
    going = [f"{run_id} ({before})" for _, _, run_id, before in planned if before in ("queued", "running")]
    if going:
        st.info("Already under way, nothing new started: " + ", ".join(going), icon=":material/hourglass_top:")
    if follow_link and (started or going):
        st.page_link("pages/jobs.py", label="Follow them on the Jobs page", icon=":material/arrow_forward:")
    done = [(kind, cfg, run_id) for kind, cfg, run_id, before in planned if before == "done"]
    if done:
        already_done(done, seed_key)
    return [run_id for run_id, _ in started]


def relaunch_note(before: str | None) -> str:
    """What launching did to a run of these settings that existed already ('' for a new one)."""
    if before is None:
        return ""
    if before in RESUMABLE_STATES:
        return f" (it was {before}: resumed from its newest checkpoint)"
    return f" (already {before})"


class ResultPage(NamedTuple):
    page: str
    title: str
    # The key of the page's run picker (its pick_runs call), which is also the URL parameter that
    # picks runs there (see from_url); None where the page picks no runs of this kind by id.
    picks: str | None = None


def _result_pages() -> dict[str, ResultPage]:
    """Where a kind's finished runs are shown: a judging study's own kind on its main page (whose run
    picker is keyed "<page>_runs"), its other kinds there too (re-evaluations on Content), and a study
    with no page of runs (the dilution sweep, a study without pages) in its tables on Export."""
    out = {}
    for s in STUDIES.values():
        for kind in s.kinds:
            if s.page is None or not s.judges:
                out[kind] = ResultPage("pages/export.py", "Export", "export_runs")
            else:
                out[kind] = ResultPage(s.page, s.title, f"{Path(s.page).stem}_runs" if kind == s.kind else None)
    return out


RESULT_PAGES = _result_pages()


def export_figures(table: str) -> Callable[[pd.DataFrame], list] | None:
    """What draws one run's rows of the exported ``table`` as figures [(file stem, chart)]: the function
    its study names in ``Study.export_figures``, from its folder's ``figures.py``; None where no study
    draws that table.  The store draws nothing, so the Export page looks the drawing up here."""
    for study in STUDIES.values():
        if table in study.export_figures:
            # Imported by name when a figure is drawn, not when the page loads: a study's charts bring
            # altair (and dilution's numba and scipy), 0.8 s the page need not pay to show a table.
            module = importlib.import_module(f"{study.module}.figures")
            return getattr(module, study.export_figures[table])
    return None


def result_link(kind: str, run_ids: Collection[str] = (), label: str | None = None) -> None:
    """A link to the page that shows ``kind``'s finished runs, with ``run_ids`` picked there where
    its picker takes them from the URL."""
    target = RESULT_PAGES.get(kind, ResultPage("pages/jobs.py", "Jobs"))
    st.page_link(target.page, label=label or f"See the results on the {target.title} page",
                 icon=":material/arrow_forward:",
                 query_params={target.picks: URL_SEP.join(run_ids)} if target.picks and run_ids else None)


# -- page state in the URL ----------------------------------------------------------------------------
# A widget whose key names a parameter of the page's URL (?structure_runs=id1,id2, ?kinds=content) starts
# from it, and its value is written back after every run: a reload, or a link someone shares, shows
# what was picked.  Only values the page still offers are taken (a run that left the store is
# dropped); a widget that already has a value for this visitor keeps it.  Lists are joined by commas,
# which no run id, kind or state holds, and tags may not (store.notes.normalise_tags).
URL_SEP = ","


def from_url(key: str, options: Collection[Any] | None = None, *, many: bool = False, flag: bool = False) -> bool:
    """Set widget ``key``'s value from the URL's ``key`` parameter, if the widget has none yet for this
    visitor; True when it did (then draw the widget without a default: Streamlit refuses both).

    ``options``: the values it may take (others are dropped; none left, and the URL is ignored);
    ``many``: a list (a multiselect); ``flag``: a toggle ("1" is on).
    """
    if key in st.session_state or key not in st.query_params:
        return False
    raw = st.query_params[key]
    if flag:
        value: Any = raw == "1"
    elif many:
        value = [v for v in dict.fromkeys(raw.split(URL_SEP)) if v and (options is None or v in options)]
        if not value:
            return False
    elif options is None or raw in options:
        value = raw
    else:
        return False
    st.session_state[key] = value
    return True


def to_url(key: str, value: Any, default: Any = None) -> None:
    """Mirror widget ``key``'s value into the URL; an empty value (nothing picked, a toggle off, no
    text), or the widget's ``default``, removes the parameter, so that the URL says only what was chosen."""
    if default is not None and value == default:
        value = None
    if isinstance(value, bool):
        text = "1" if value else ""
    elif isinstance(value, (list, tuple)):
        text = URL_SEP.join(map(str, value))
    else:
        text = "" if value is None else str(value)
    if text:
        if st.query_params.get(key) != text:
            st.query_params[key] = text
    elif key in st.query_params:
        del st.query_params[key]


def already_done(done: list[tuple[str, object, str]], seed_key: str | None = None) -> None:
    """Say that these (kind, config, run id) ran to the end before and nothing ran now; link to their
    results and offer the next seed at which none of them has a run."""
    seed = next_free_seed([(kind, cfg) for kind, cfg, _ in done])
    ids = ", ".join(run_id for _, _, run_id in done)
    st.info(f"Already done: {ids}. Nothing ran now: these settings ran to the end with "
            f"{'these seeds' if len(done) > 1 else 'this seed'} before; the next free seed is {seed}.",
            icon=":material/task_alt:")
    for kind in sorted({kind for kind, _, _ in done}):
        result_link(kind, [run_id for k, _, run_id in done if k == kind])
    if seed_key is not None:
        st.button(f"Use seed {seed}", key=f"{seed_key}_next_free", icon=":material/add:",
                  on_click=_set_state, args=(seed_key, seed))


def _set_state(key: str, value: object) -> None:
    # A callback runs before the next rerun draws the input, the one moment its value may be set.
    st.session_state[key] = value


def pick_runs(label: str, run_ids: Iterable[str], group_of: Callable[[str], object],
              within: Callable[[str], tuple], *, seeds_of: Callable[[str], Iterable],
              format_func: Callable[[str], str], key: str) -> list[str]:
    """The finished runs a results page shows: a multiselect, by default every run of the group with the
    most seeds (then the most runs, then the newest), as the Overview's scoreboard judges.

    A group is what mean ± std may pool (a config across seeds, comparable settings across
    variants).  ``run_ids`` come newest first, as the store lists them, so groups are offered newest
    first; ``within`` orders a group's runs, and ``seeds_of`` names the seeds a run holds (a grid run may
    hold several).  A one-seed run launched after a three-seed group is offered first but not picked: a
    finished run's link (``?<key>=id``) picks it.  A remembered pick that names a run no longer in the
    store falls back to the default.  The pick lives in the URL too (``?<key>=id1,id2``, see
    :func:`from_url`): a reload or a shared link picks the same runs, less any that left the store.
    """
    run_ids = list(run_ids)
    rank = {g: i for i, g in enumerate(dict.fromkeys(group_of(r) for r in run_ids))}
    options = sorted(run_ids, key=lambda r: (rank[group_of(r)], *within(r)))
    seeds: dict[object, set] = {}
    for r in options:
        seeds.setdefault(group_of(r), set()).update(seeds_of(r))
    size = Counter(group_of(r) for r in options)
    largest = min(rank, key=lambda g: (-len(seeds[g]), -size[g], rank[g]))
    if any(r not in options for r in st.session_state.get(key, [])):
        del st.session_state[key]  # a run left the store: fall back to the default
    default = None if from_url(key, options, many=True) else [r for r in options if group_of(r) == largest]
    picked = st.multiselect(label, options, default=default, format_func=format_func, key=key)
    to_url(key, picked)
    return picked


def pick_config_seeds(done, kind: str, label: str, key: str, launch_section: Callable[[], None]):
    """The finished runs of one study a page shows, grouped by config (newest first, seeds in order
    within one); with nothing picked, says so, offers the launch and stops the page.  Warns when the
    runs picked mix configs (mean ± std would then mix them) and shows each config picked.

    Returns (picked run ids, the config ids picked, config by run, seed by run)."""
    configs = {r.run_id: json.loads(r.config) if r.config else None for r in done.itertuples()}
    cid = {run_id: config_id(kind, cfg) for run_id, cfg in configs.items()}
    seed_of = dict(zip(done["run_id"], done["seed"]))

    def _seeds(r: str) -> range | tuple:
        # A grid study's run holds several seeds from its first, counted as the scoreboard counts them.
        first = seed_of[r]
        return () if pd.isna(first) else range(int(first), int(first) + span_of(configs[r]))

    picked = pick_runs(
        label, done["run_id"], cid.get,
        lambda r: (pd.isna(seed_of[r]), seed_of[r] if pd.notna(seed_of[r]) else 0, r), seeds_of=_seeds,
        format_func=lambda r: f"seed {seed_of[r]} · config {cid[r]} · {r}", key=key,
    )
    if not picked:
        st.info("Pick at least one run.")
        launch_section()
        st.stop()
    picked_configs = sorted({cid[r] for r in picked})
    if len(picked_configs) > 1:
        st.warning(f"The runs picked come from {len(picked_configs)} different configs; mean ± std then mixes them.")
    with st.expander("Config of the runs picked"):
        st.json({c: config_without_seed(configs[next(r for r in picked if cid[r] == c)]) for c in picked_configs},
                expanded=len(picked_configs) == 1)
    return picked, picked_configs, configs, seed_of


def finished_runs(runs, what: str, per: str, launch_section: Callable[[], None]):
    """The done rows of a study page's ``runs``; says how many are still under way, and when none is
    done, invites a launch (``launch_section``) and stops the page.  ``what`` names the runs
    ("structure"), ``per`` what one run is ("one run per seed")."""
    done = runs[runs["status"] == "done"].reset_index(drop=True)
    active = runs[runs["status"].isin(["queued", "running"])]
    if len(active):
        st.caption(f"{len(active)} {what} run(s) queued or running; they appear here once done.")
        st.page_link("pages/jobs.py", label="Follow them on the Jobs page", icon=":material/arrow_forward:")
    if done.empty:
        st.info(f"No finished {what} runs in the store yet. Launch some below: {per}; the charts show "
                "mean ± std across seeds.", icon=":material/science:")
        launch_section()
        st.stop()
    return done
