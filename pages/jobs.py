"""Jobs: launch any registered experiment with a preset, watch it, cancel it, resume it, read its log;
every run in one table (filtered, with notes and tags), and two runs' settings side by side."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pandas as pd
import streamlit as st

from ema_core import palette
from ema_core.config import flatten, setting_fields
from ema_core.experiments import REGISTRY, build_config, headline
from ema_core.experiments.units import with_unit
from ema_core.rundir import RESUMABLE_STATES, STATES, StorageError
from jobs.runner import eta_text, format_duration
from pages._router import ensure_router
from pages._sources import check_sources
from pages._state import RESULT_PAGES, from_url, ingest_quietly, launch, read_store, result_link, runner, to_url
from pages._ui import table_downloads
from store import StoreError, config_diff, list_runs, run_notes, set_note, tags_in_use

ensure_router()  # before anything is drawn: see pages/_router.py

ACTIVE = ("queued", "running")
# Job cards drawn at first: a data folder holds thousands of runs, and a card per run would make the
# page take seconds to draw, every second.  Active jobs are always shown.
SHOWN = 20
# The colour of each state (a card's badge and bar, the table's state), in Streamlit's named colours, and
# their hues for what takes a CSS colour (st.progress takes no colour): the palette's, like every colour.
STATE_COLORS, _HEX = palette.JOB_STATE_COLORS, palette.STREAMLIT_HEX

st.title("Jobs")
st.markdown(
    "Every result in EMA Lab comes from a job. A job runs in its own process and writes its run "
    "folder; the store takes in what it wrote. Closing this page does not stop a job; a job whose "
    "process dies is marked *crashed* and resumes from its newest checkpoint."
)

# The registry's order: the paper's studies first (dilution the default: seconds to run), extensions after.
kinds = list(REGISTRY)
kind = st.selectbox("Experiment", kinds, format_func=lambda k: f"{k} — {REGISTRY[k].description}", key="launch_kind")
exp = REGISTRY[kind]
with st.form("launch"):
    left, right = st.columns([1, 1])
    preset = left.selectbox("Preset", list(exp.presets), key="launch_preset")
    seed = right.number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, step=1, key="launch_seed")
    overrides_text = st.text_area(
        "Overrides (one `key=value` per line)", key="launch_overrides", height=80,
        help="Settings of " + kind + " (a setting's own name will do where no other has it): "
             + ", ".join(setting_fields(exp.config_cls)),
    )
    launched = st.form_submit_button("Launch", type="primary", icon=":material/play_arrow:")

with st.expander(f"What the presets of {kind} set"):
    st.json({name: values for name, values in exp.presets.items()}, expanded=False)


def _launch_jobs():
    overrides = {}
    for line in overrides_text.splitlines():
        if line.strip():
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"override lines are key=value, got {line.strip()!r}")
            overrides[key.strip()] = value.strip()
    check_sources(overrides)  # before the config, whose own check would say what exists
    config = build_config(kind, preset=preset, overrides=overrides, seed=int(seed))
    check_sources(config.model_dump())  # and whatever name reached them, once they are read
    return [(kind, config)]


if launched:
    launch(_launch_jobs, preset, seed_key="launch_seed", follow_link=False)


def _md(text: str) -> str:
    # Settings are data (a corpus path, a name with * or $): shown as typed, not as Markdown or LaTeX.
    return re.sub(r"([\\`*_{}\[\]<>()#+\-.!|~$])", r"\\\1", str(text))


def _color(state: str | None) -> str:
    return STATE_COLORS.get(str(state), "gray")


def _when(iso: str | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    """A run folder's ISO time in UTC, for people ("" when it cannot be read)."""
    try:
        t = datetime.fromisoformat(str(iso))
    except (TypeError, ValueError):
        return ""
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).strftime(fmt)


def _ran(row: dict) -> str:
    """How long a finished run ran, and from when to when: "ran 3 min 20 s (2026-05-01 09:12 → 09:15 UTC)"."""
    if row.get("run_s") is None:
        return ""
    start, end = _when(row.get("started")), _when(row.get("ended"))
    if start[:10] == end[:10]:
        end = end[11:]  # the same day: its time alone
    attempt = f", attempt {row['attempts']}" if (row.get("attempts") or 0) > 1 else ""
    return f"ran {format_duration(row['run_s'])} ({start} → {end} UTC{attempt})"


@st.cache_data(max_entries=4096, show_spinner=False)
def _summary(home: str, run_id: str, ended: str | None) -> dict:
    # A finished run's result does not change (its id is its config and seed): read once per run, not
    # on every refresh of the list.  A result that cannot be read raises, and is not cached.
    return (runner().result(run_id) or {}).get("summary") or {}


def _headline(row: dict) -> str:
    try:
        return headline(row.get("kind"), _summary(str(runner().home), row["run_id"], row.get("ended")))
    except (OSError, ValueError):  # a result that cannot be read: the log says more
        return ""


def _card_text(row: dict) -> str:
    """The bar's line: run id, state, progress, age and, while it runs, the time left once it is known."""
    parts = [f"**{row['run_id']}**", str(row.get("state") or "?"),
             f"{100 * min(max(float(row.get('progress') or 0.0), 0.0), 1.0):.0f}%"]
    if row.get("age_s") is not None:
        parts.append(f"created {format_duration(row['age_s'])} ago")
    if row.get("state") == "running" and row.get("eta_s") is not None:
        parts.append(eta_text(row["eta_s"], bool(row.get("eta_settled"))))
    return " · ".join(parts)


def _details(r, row: dict) -> None:
    rid = row["run_id"]
    st.code(r.logs(rid, tail=40) or "(empty)", language=None)
    if row.get("config") is not None:
        st.caption("Config" + (f" (preset {row['preset']})" if row.get("preset") else ""))
        st.code(json.dumps(row["config"], indent=1, ensure_ascii=False), language="json")
    if row.get("state") == "done":
        try:
            summary = _summary(str(r.home), rid, row.get("ended"))
        except (OSError, ValueError):  # a result that cannot be read: the log says more
            summary = {}
        if summary:
            st.caption("Summary")
            st.code("\n".join(f"{k}: {with_unit(k, v)}" for k, v in summary.items()), language=None)


# A card's bar takes its state's colour: st.progress has no colour of its own, so the bar sits in a
# container keyed by its state and one rule per state colours the bars inside such containers.
st.html("<style>" + "".join(
    f'[class*="st-key-bar_{state}_"] [data-testid="stProgressBarTrack"] > div {{background-color: {_HEX[color]};}}'
    for state, color in STATE_COLORS.items()) + "</style>")


@st.fragment(run_every=1.0)
def live_jobs() -> None:
    r = runner()
    rows = r.list()
    # When a job has just finished, bring the store up to date so the other pages see it.
    seen = st.session_state.setdefault("_jobs_seen_states", {})
    if any(seen.get(row["run_id"]) in ACTIVE and row["state"] not in ACTIVE for row in rows):
        problem = ingest_quietly()
        if problem:
            st.warning(problem)
    st.session_state["_jobs_seen_states"] = {row["run_id"]: row["state"] for row in rows}

    if not rows:
        st.info("No jobs yet: launch one above.")
        return
    limit = st.session_state.setdefault("jobs_shown", SHOWN)
    newest = sorted(rows, key=lambda x: x.get("created") or "", reverse=True)
    shown = [row for i, row in enumerate(newest) if i < limit or row["state"] in ACTIVE]
    hidden = len(rows) - len(shown)
    st.caption(f"{sum(row['state'] in ACTIVE for row in rows)} active of {len(rows)} jobs"
               + (f" · {len(shown)} shown" if hidden else "") + " · refreshed every second")
    for row in shown:
        rid, state = row["run_id"], row.get("state")
        with st.container(border=True, key=f"job_{rid}"):
            head, actions = st.columns([5, 2], vertical_alignment="center")
            # What tells one job from another (kind, preset, the settings that differ, seed) heads the card.
            head.markdown(f"**{_md(row.get('label') or rid)}**"
                          + (f" · seed {row['seed']}" if row.get("seed") is not None else "")
                          + f" :{_color(state)}-badge[{_md(state or '?')}]")
            with head.container(key=f"bar_{state}_{rid}"):
                st.progress(min(max(float(row.get("progress") or 0.0), 0.0), 1.0), text=_card_text(row))
            if row.get("message") and state != "done":
                head.caption(row["message"])
            outcome = [_ran(row)] + ([_headline(row)] if state == "done" else [])
            if any(outcome):
                head.caption(_md(" · ".join(part for part in outcome if part)))
            with actions:
                if state in ACTIVE and st.button("Cancel", key=f"cancel_{rid}", icon=":material/stop:"):
                    r.cancel(rid, wait=False)
                    st.rerun(scope="fragment")
                if state in RESUMABLE_STATES and st.button("Resume", key=f"resume_{rid}", icon=":material/replay:"):
                    try:
                        r.resume(rid)
                    except ValueError as exc:
                        st.error(str(exc))
                    st.rerun(scope="fragment")
                if state == "done" and row.get("kind") in RESULT_PAGES:
                    result_link(row["kind"], [rid], label=f"Open on {RESULT_PAGES[row['kind']].title}")
            with st.expander("Log and config"):
                _details(r, row)
    if hidden:
        st.button(f"Show {min(SHOWN, hidden)} more of {hidden} older jobs", key="jobs_more",
                  icon=":material/expand_more:", on_click=_show_more)


def _show_more() -> None:
    st.session_state["jobs_shown"] += SHOWN


# -- every run in one table, with notes and tags ---------------------------------------------------

def _settings_text(row: dict) -> str:
    """What the setting filter searches: the label, and every setting as ``path=value``."""
    flat = flatten(row.get("config") or {})
    return " ".join([str(row.get("label") or ""), *(f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                                                     for k, v in flat.items())]).casefold()


def _runs_frame(rows: list[dict], summaries: dict[str, str | None], notes: pd.DataFrame) -> pd.DataFrame:
    """One row per run: what the table shows, plus the text the setting filter searches."""
    note_of = {n.run_id: (n.note, list(n.tags)) for n in notes.itertuples()}
    out = []
    for row in rows:
        summary = summaries.get(row["run_id"])
        note, tags = note_of.get(row["run_id"], ("", []))
        out.append({
            "run_id": row["run_id"], "kind": row.get("kind") or "?", "label": row.get("label") or "",
            "state": row.get("state") or "?", "seed": row.get("seed"),
            "created": row.get("created"),
            "run time (min)": None if row.get("run_s") is None else row["run_s"] / 60,
            "headline": headline(row.get("kind"), json.loads(summary)) if isinstance(summary, str) else "",
            "note": note, "tags": ", ".join(tags), "_tags": tags, "_search": _settings_text(row),
        })
    columns = ["run_id", "kind", "label", "state", "seed", "created", "run time (min)", "headline", "note", "tags",
               "_tags", "_search"]
    frame = pd.DataFrame(out, columns=columns)
    frame["seed"] = frame["seed"].astype("Int64")
    # Parsed as one column: a parse per row cost half a second over a thousand runs.
    frame["created"] = pd.to_datetime(frame["created"], utc=True, errors="coerce", format="ISO8601")
    return frame


def _save_note() -> None:
    # A callback: the save lands before the rerun reads the table, which then shows it.
    run_id = st.session_state.get("note_run")
    try:
        row = set_note(run_id, st.session_state.get("note_text", ""), st.session_state.get("note_tags", ""))
    except (ValueError, StoreError, StorageError) as exc:
        st.session_state["_note_said"] = ("error", f"Not saved: {exc}")
        return
    st.session_state["note_tags"] = ", ".join(row["tags"])  # as stored: stripped, each once
    st.session_state["_note_said"] = ("success", f"Saved the note and tags of {run_id}.")


def _stored() -> tuple[dict[str, str | None], pd.DataFrame, list[str]]:
    """The store's summary (JSON) of every run it holds, every note and every tag in use."""
    runs = list_runs(limit=None)
    return dict(zip(runs["run_id"], runs["summary"])), run_notes(), tags_in_use()


def run_table(rows: list[dict]) -> None:
    summaries, notes, tags = read_store(_stored)
    frame = _runs_frame(rows, summaries, notes)
    kinds = [k for k in REGISTRY if k in set(frame["kind"])] + sorted(set(frame["kind"]) - set(REGISTRY))
    states = [s for s in (*STATES, "damaged") if s in set(frame["state"])]
    for key, options in (("kinds", kinds), ("states", states), ("tags", tags)):
        from_url(key, options, many=True)
    from_url("q")
    by_kind, by_state, by_setting, by_tag = st.columns([2, 2, 3, 2])
    picked_kinds = by_kind.multiselect("Kind", kinds, key="kinds", placeholder="every kind")
    picked_states = by_state.multiselect("State", states, key="states", placeholder="every state")
    text = by_setting.text_input("Setting contains", key="q", placeholder="model=gpt, lr, austen …",
                                 help="Searched in each run's label and in every setting as path=value.")
    picked_tags = by_tag.multiselect("Tag", tags, key="tags", placeholder="any tag or none")
    for key, value in (("kinds", picked_kinds), ("states", picked_states), ("q", text), ("tags", picked_tags)):
        to_url(key, value)
    shown = frame[(frame["kind"].isin(picked_kinds) if picked_kinds else True)
                  & (frame["state"].isin(picked_states) if picked_states else True)
                  & frame["_search"].str.contains(text.strip().casefold(), regex=False)
                  & (frame["_tags"].map(lambda ts: bool(set(ts) & set(picked_tags))) if picked_tags else True)]
    shown = shown.drop(columns=["_tags", "_search"]).reset_index(drop=True)
    st.caption(f"{len(shown)} of {len(frame)} runs · click a column's name to sort by it")
    st.dataframe(
        shown.style.map(lambda s: f"color: {_HEX[_color(s)]}", subset=["state"]), hide_index=True, key="run_table",
        column_config={"created": st.column_config.DatetimeColumn("created (UTC)", format="YYYY-MM-DD HH:mm"),
                       "run time (min)": st.column_config.NumberColumn(format="%.1f"),
                       "headline": st.column_config.TextColumn(width="large"),
                       "note": st.column_config.TextColumn(width="medium")})
    table_downloads(shown, "runs", key="runs_dl")

    st.subheader("Notes and tags")
    stored = [r for r in frame["run_id"] if r in summaries]  # only a stored run takes a note (store.notes)
    if not stored:
        st.caption("A run takes notes and tags once the store has taken it in.")
        return
    label_of = dict(zip(frame["run_id"], frame["label"]))
    run_id = st.selectbox("Run", stored, key="note_run", format_func=lambda r: f"{r} · {label_of.get(r, '')}")
    if st.session_state.get("_note_for") != run_id:  # another run picked: its own note to edit
        mine = notes[notes["run_id"] == run_id]
        st.session_state["note_text"] = mine["note"].iloc[0] if len(mine) else ""
        st.session_state["note_tags"] = ", ".join(mine["tags"].iloc[0]) if len(mine) else ""
        st.session_state["_note_for"] = run_id
    with st.form("note_form", border=False):
        st.text_area("Note", key="note_text", height=80, placeholder="what this run was for, what it showed")
        st.text_input("Tags", key="note_tags", placeholder="baseline, lr sweep",
                      help="Separated by commas; each kept once.")
        st.form_submit_button("Save note", icon=":material/save:", on_click=_save_note)
    said = st.session_state.pop("_note_said", None)
    if said:
        (st.error if said[0] == "error" else st.success)(said[1])


# -- two runs' settings side by side ---------------------------------------------------------------

def compare_configs(rows: list[dict]) -> None:
    runs = {row["run_id"]: row for row in rows if row.get("config") is not None}
    if len(runs) < 2:
        st.info("Two runs are needed to compare their settings.")
        return
    ids = list(runs)
    a_from_url, b_from_url = from_url("run_a", ids), from_url("run_b", ids)
    from_url("same", flag=True)
    name = lambda r: f"{r} · {runs[r]['label']}"  # noqa: E731
    left, right = st.columns(2)
    a = left.selectbox("Run A", ids, key="run_a", format_func=name, index=None if a_from_url else 0)
    b = right.selectbox("Run B", ids, key="run_b", format_func=name, index=None if b_from_url else 1)
    same = st.toggle("Show the settings they share", key="same")
    # The first two runs (the newest) are the default pair: the URL names a pair only once it is another.
    to_url("run_a", a, default=ids[0])
    to_url("run_b", b, default=ids[1])
    to_url("same", same)
    if a is None or b is None:
        st.info("Pick two runs.")
        return
    diff = config_diff((runs[a]["kind"], runs[a]["config"]), (runs[b]["kind"], runs[b]["config"]))
    differ = int((~diff["same"]).sum())
    st.caption(f"{differ} of {len(diff)} settings differ" + ("" if same else "; the rest are hidden"))
    shown = (diff if same else diff[~diff["same"]]).rename(columns={"a": "run A", "b": "run B"})
    st.dataframe(shown if same else shown.drop(columns="same"), hide_index=True, key="config_diff",
                 column_config={"same": st.column_config.CheckboxColumn("same")})


# Only the open tab is drawn (the tab is kept in the URL): the run table lists every run the data
# folder holds, which would cost every visit to the cards its time (docs/benchmarks.md, Pages).
cards, table, compare = st.tabs(["Jobs", "Table", "Compare configs"], key="tab", on_change="rerun",
                                bind="query-params")
if cards.open:
    with cards:
        live_jobs()
else:
    all_rows = runner().list()
    if table.open:
        with table:
            run_table(all_rows)
    if compare.open:
        with compare:
            compare_configs(all_rows)
