"""Streamlit helpers shared by the pages: every chart and every table comes with its downloads; and
what the pages that measure as they draw (Trace dilution, Depth explorer) share.

Files are produced only when a button is clicked (``data`` is a callable): rendering an SVG and a
PNG for every chart on every slider move would cost more than the recompute itself.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

import altair as alt
import pandas as pd
import streamlit as st

from ema_core.figures import chart_to_png, chart_to_svg
from ema_core.tables import to_latex_booktabs, to_markdown

T = TypeVar("T")


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


# -- the pages that measure as they draw ------------------------------------------------------------------

# σ of the noise on the stored trace or stream, in decades: a trace's coordinates are about 0.01 to 0.1,
# and a depth stream, a weighted average of unit-energy codes as a trace is, has the same scale.
NOISE_STEPS = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
# Past this a page explains instead of measuring, so one visitor cannot take the server down.
MEASURE_BUDGET_BYTES = 1.5 * 2**30
# name: (min, max, default) of the stream's settings both pages take (the random codes and the seed).
STREAM_LIMITS = {"vocab": (2, 512, 64), "dim": (1, 256, 64), "seed": (0, 2**32 - 1, 0)}


def drop_bad_state(limits: dict, choices: dict, prefix: str = "") -> list[str]:
    """Forget widget values that are out of range, so the widgets fall back to their defaults: the names
    dropped.  ``limits`` is name: (min, max, default) of each number, ``choices`` name: (options,
    default) of each choice, and a widget's key is ``prefix`` + name.

    A live session keeps its values across a code change that narrows a range, and state can be
    set from outside the widgets; Streamlit raises on such a value rather than clamping it.
    """
    dropped = []
    for name, (lo, hi, _) in limits.items():
        v = st.session_state.get(prefix + name)
        if v is None:
            continue
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi
        if not ok or (isinstance(lo, int) and not float(v).is_integer()):
            del st.session_state[prefix + name]
            dropped.append(name)
    for name, (options, _) in choices.items():
        v = st.session_state.get(prefix + name)
        if v is not None and (isinstance(v, bool) or v not in options):
            del st.session_state[prefix + name]
            dropped.append(name)
    return dropped


def stop_if_oversized(footprint: float, advice: str) -> None:
    """Past :data:`MEASURE_BUDGET_BYTES`, say what the measurement would need and stop the page there;
    ``advice`` says which settings to lower."""
    if footprint > MEASURE_BUDGET_BYTES:
        st.warning(
            f"Measuring these settings would need about {footprint / 2**30:.1f} GiB "
            f"(the page stops at {MEASURE_BUDGET_BYTES / 2**30:.1f} GiB). {advice}"
        )
        st.stop()


def measure_cached(measure: Callable[[str], T], cfg, spinner: str, seconds: Callable[[T], float]) -> tuple[T, bool]:
    """``measure`` (a cached function of the config's JSON) of ``cfg`` under a spinner; and whether the
    result came from the cache, said beside the time ``seconds`` reads from it (the measurement's own)."""
    t0 = time.perf_counter()
    with st.spinner(spinner):
        result = measure(cfg.model_dump_json())
    # A cache hit returns in a small part of the time the measurement took: the time shown is then not this run's.
    return result, time.perf_counter() - t0 < 0.5 * seconds(result)


def stored_text(cfg) -> str:
    """How the measured stream or trace was stored, in words: ``cfg``'s precision and noise."""
    return f"stored as {cfg.precision}" + (f" with noise σ = {cfg.noise:g}" if cfg.noise > 0 else "")


def measured_caption(cfg, seconds: float, cached: bool, chance: float, *, held_out: str, features: str,
                     window: str = "") -> None:
    """The caption under a measurement: its time, what the decoder trained and was scored on (``held_out``
    names the test items, ``window`` the linear decoder's input where it has one), how the ``features`` were
    stored, and chance."""
    st.caption(
        f"Measured in {seconds:.2f} s{' (cached)' if cached else ''}: "
        + (f"{cfg.n_train} training and {cfg.n_test} held-out {held_out}" + (f", {window}" if window else "")
           if cfg.decoder == "linear" else f"the peel on {cfg.n_test} held-out {held_out}, no training")
        + f", {features} {stored_text(cfg)}, chance 1/V = {chance:.4g}."
    )
