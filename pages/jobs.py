"""Jobs: launch any registered experiment with a preset, watch it, cancel it, resume it, read its log."""
from __future__ import annotations

import json
import re

import streamlit as st

from ema_core.config import setting_fields
from ema_core.experiments import REGISTRY, build_config
from ema_core.experiments.units import with_unit
from ema_core.rundir import RESUMABLE_STATES
from jobs.runner import format_duration
from pages._router import ensure_router
from pages._sources import check_sources
from pages._state import ingest_quietly, launch, runner

ensure_router()  # before anything is drawn: see pages/_router.py

ACTIVE = ("queued", "running")
# Job cards drawn at first: a data folder holds thousands of runs, and a card per run would make the
# page take seconds to draw, every second.  Active jobs are always shown.
SHOWN = 20

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


def _card_text(row: dict) -> str:
    """The bar's line: run id, state, progress, age and, while it runs, the time left once it is known."""
    parts = [f"**{row['run_id']}**", str(row.get("state") or "?"),
             f"{100 * min(max(float(row.get('progress') or 0.0), 0.0), 1.0):.0f}%"]
    if row.get("age_s") is not None:
        parts.append(f"created {format_duration(row['age_s'])} ago")
    if row.get("state") == "running" and row.get("eta_s") is not None:
        parts.append(f"about {format_duration(row['eta_s'])} left")
    return " · ".join(parts)


def _details(r, row: dict) -> None:
    rid = row["run_id"]
    st.code(r.logs(rid, tail=40) or "(empty)", language=None)
    if row.get("config") is not None:
        st.caption("Config" + (f" (preset {row['preset']})" if row.get("preset") else ""))
        st.code(json.dumps(row["config"], indent=1, ensure_ascii=False), language="json")
    if row.get("state") == "done":
        try:
            summary = (r.result(rid) or {}).get("summary") or {}
        except (OSError, ValueError):  # a result that cannot be read: the log says more
            summary = {}
        if summary:
            st.caption("Summary")
            st.code("\n".join(f"{k}: {with_unit(k, v)}" for k, v in summary.items()), language=None)


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
                          + (f" · seed {row['seed']}" if row.get("seed") is not None else ""))
            head.progress(min(max(float(row.get("progress") or 0.0), 0.0), 1.0), text=_card_text(row))
            if row.get("message") and state != "done":
                head.caption(row["message"])
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
            with st.expander("Log and config"):
                _details(r, row)
    if hidden:
        st.button(f"Show {min(SHOWN, hidden)} more of {hidden} older jobs", key="jobs_more",
                  icon=":material/expand_more:", on_click=_show_more)


def _show_more() -> None:
    st.session_state["jobs_shown"] += SHOWN


live_jobs()
