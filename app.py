"""EMA Lab: the router.  Pages live in pages/ and stay thin; the science is in ema_core."""
import streamlit as st

from pages._router import NAV, mark_routed, open_default_by_name

st.set_page_config(page_title="EMA Lab", layout="wide")

# Explicit pages rather than pages/ discovery: the order, titles and icons are decided (pages/_router.NAV), and
# helper modules in pages/ (pages/_ui.py) never show up as pages (each page calls
# pages/_router.ensure_router so that this holds for a deep link into a fresh server too).
# The default page is served at "/": /overview, its own name, must open it too (see pages/_router.py).
open_default_by_name(NAV[0][0])
pg = st.navigation([st.Page(f"pages/{stem}.py", title=title, icon=icon, default=i == 0)
                    for i, (stem, title, icon) in enumerate(NAV)])
mark_routed()

with st.sidebar:
    st.caption(
        "**EMA Lab** reproduces, measures and extends "
        "[*EMA Is Not All You Need*](https://arxiv.org/abs/2604.08556) (arXiv 2604.08556)."
    )

pg.run()
