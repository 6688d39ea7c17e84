"""Resources the pages share for the life of the server (not per session)."""
from __future__ import annotations

import streamlit as st

from jobs.rundir import emalab_home
from jobs.runner import LocalRunner


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
