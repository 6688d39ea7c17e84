"""Resources the pages share for the life of the server (not per session)."""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

import streamlit as st

from jobs.rundir import emalab_home
from jobs.runner import LocalRunner

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
    from store import StorageError, StoreError, ingest

    try:
        ingest()
    except (StoreError, StorageError) as exc:
        return str(exc)
    return None


def read_store(read: Callable[[], T]) -> T:
    """Take in new run folders, then ``read()``: a failed ingest is a warning, an unreadable store stops the page."""
    from store import StoreError

    problem = ingest_quietly()
    if problem:
        st.warning(f"The store could not be brought up to date: {problem}")
    try:
        return read()
    except StoreError as exc:
        st.error(str(exc))
        st.stop()


def launch(jobs: Callable[[], Iterable[tuple[str, object]]], preset: str | None) -> list[str]:
    """Submit the (kind, config) pairs ``jobs()`` builds as background jobs; say what started, or why nothing did.

    The configs are built inside: a setting refused by its config is reported like a failed submit.
    """
    from store import StorageError

    try:
        started = [runner().submit(kind, cfg, preset=preset) for kind, cfg in jobs()]
    except (ValueError, StorageError) as exc:  # a bad setting, or a data folder that cannot be written
        st.error(f"Not launched: {exc}")
        return []
    st.success("Launched: " + ", ".join(started), icon=":material/rocket_launch:")
    st.page_link("pages/jobs.py", label="Follow them on the Jobs page", icon=":material/arrow_forward:")
    return started
