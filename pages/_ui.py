"""Streamlit helpers shared by the pages: every chart and every table comes with its downloads.

Files are produced only when a button is clicked (``data`` is a callable): rendering an SVG and a
PNG for every chart on every slider move would cost more than the recompute itself.
"""
from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from ema_core.figures import chart_to_png, chart_to_svg
from ema_core.tables import to_latex_booktabs, to_markdown


def chart_with_downloads(chart: alt.TopLevelMixin, name: str, key: str) -> None:
    """The chart at the container's width, then SVG and PNG downloads named ``name``."""
    # width="stretch" is what use_container_width=True became; the old spelling logs a deprecation.
    st.altair_chart(chart, width="stretch")
    with st.container(horizontal=True, gap="small"):
        st.download_button(
            "SVG", lambda: chart_to_svg(chart), file_name=f"{name}.svg", mime="image/svg+xml",
            key=f"{key}_svg", on_click="ignore", icon=":material/download:",
        )
        st.download_button(
            "PNG", lambda: chart_to_png(chart), file_name=f"{name}.png", mime="image/png",
            key=f"{key}_png", on_click="ignore", icon=":material/download:",
        )


def table_downloads(
    df: pd.DataFrame, name: str, key: str, caption: str | None = None, label: str | None = None
) -> None:
    """CSV, Markdown and LaTeX (booktabs) downloads of ``df`` named ``name``."""
    with st.container(horizontal=True, gap="small"):
        st.download_button(
            "CSV", lambda: df.to_csv(index=False), file_name=f"{name}.csv", mime="text/csv",
            key=f"{key}_csv", on_click="ignore", icon=":material/download:",
        )
        st.download_button(
            "Markdown", lambda: to_markdown(df), file_name=f"{name}.md", mime="text/markdown",
            key=f"{key}_md", on_click="ignore", icon=":material/download:",
        )
        st.download_button(
            "LaTeX", lambda: to_latex_booktabs(df, caption=caption, label=label), file_name=f"{name}.tex",
            mime="application/x-tex", key=f"{key}_tex", on_click="ignore", icon=":material/download:",
        )


def unbroken(df: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """For display only: ``mean ± std`` cells with no-break spaces, so a narrow column does not split them."""
    return df.assign(**{c: df[c].str.replace(" ", "\u00a0") for c in columns if c in df.columns})
