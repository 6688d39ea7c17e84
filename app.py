"""EMA Lab: the router.  Pages live in pages/ and stay thin; the science is in ema_core."""
import streamlit as st

from pages._router import mark_routed, open_default_by_name

st.set_page_config(page_title="EMA Lab", layout="wide")

# Explicit pages rather than pages/ discovery: the order, titles and icons are decided here, and
# helper modules in pages/ (pages/_ui.py) never show up as pages (each page calls
# pages/_router.ensure_router so that this holds for a deep link into a fresh server too).
# The default page is served at "/": /overview, its own name, must open it too (see pages/_router.py).
open_default_by_name("overview")
pg = st.navigation(
    [
        st.Page("pages/overview.py", title="Overview", icon=":material/home:", default=True),
        st.Page("pages/dilution.py", title="Trace dilution", icon=":material/blur_on:"),
        st.Page("pages/structure.py", title="Structure", icon=":material/account_tree:"),
        st.Page("pages/content.py", title="Content", icon=":material/menu_book:"),
        st.Page("pages/boundary.py", title="Boundary map", icon=":material/grid_on:"),
        st.Page("pages/jobs.py", title="Jobs", icon=":material/work_history:"),
        st.Page("pages/export.py", title="Export", icon=":material/ios_share:"),
    ]
)
mark_routed()

with st.sidebar:
    st.caption(
        "**EMA Lab** reproduces, measures and extends "
        "[*EMA Is Not All You Need*](https://arxiv.org/abs/2604.08556) (arXiv 2604.08556)."
    )

pg.run()
