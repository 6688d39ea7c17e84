"""Make sure a page runs under app.py's router, even on a deep link into a fresh server.

Streamlit (1.67) decides once per server whether an app is a "pages folder" app: it is while a
`pages/` folder sits beside the main script and `st.navigation` has not run yet.  A first visitor
who lands on a deep link (`/jobs`) of a fresh server would therefore run `pages/jobs.py` alone,
and every session after would get the folder's navigation (helper modules included) until
someone opened `/`.  The project keeps its pages in `pages/`, so every page calls
:func:`ensure_router` first: while app.py's router has never run in this process it switches
Streamlit to st.navigation mode and reruns, and the rerun goes through app.py with the page the
visitor asked for.  Once the router has run (:func:`mark_routed`), nothing happens — which also
leaves Streamlit's test harness (it resets the folder flag before every run) alone.

Streamlit also serves the default page at ``/`` only: its url_path is ``""`` whatever st.Page is
given, so a link to its own name (``/overview``) would be "Page not found" once the router runs.
:func:`open_default_by_name` sends that name to the default page.
"""
from __future__ import annotations

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ema_core.studies import STUDIES

_routed = False

# The app's pages in the navigation's order: (file stem in pages/, title, icon).  The first is the
# default, served at "/"; every other page's URL path is its stem.  Each study brings its own
# (ema_core.studies: its ``pages``), between the Overview and the pages every study shares.
NAV: tuple[tuple[str, str, str], ...] = (
    ("overview", "Overview", ":material/home:"),
    *((p.stem, p.title, p.icon) for study in STUDIES.values() for p in study.pages),
    ("jobs", "Jobs", ":material/work_history:"),
    ("export", "Export", ":material/ios_share:"),
)


def mark_routed() -> None:
    global _routed
    _routed = True


def ensure_router() -> None:
    if not _routed and PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False  # what st.navigation itself sets on its first run
        st.rerun()


def open_default_by_name(name: str) -> None:
    """Call before st.navigation: a deep link to ``/name`` opens the default page.

    A page picked by its hash (a click in the navigation, a rerun) is left alone; only a URL typed or
    linked by name is matched, and only to ``name``: every other page's name is its url_path already.
    """
    ctx = get_script_run_ctx()
    pm = ctx.pages_manager if ctx else None
    if pm is None or pm.intended_page_script_hash:
        return
    if (pm.intended_page_name or "").strip("/") == name:
        pm.set_script_intent("", "")  # no hash, no name: st.navigation resolves the default page
