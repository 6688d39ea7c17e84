"""Export: pick a table and runs, group seeds as mean ± std, preview, download it in every format and its figures."""
from __future__ import annotations

import streamlit as st

from ema_core.tables import preview_formats
from pages._router import ensure_router
from pages._state import export_figures, from_url, read_store, to_url
from pages._ui import chart_with_downloads
from store import EMPTY, EXPORT_TABLES, FORMATS, GROUPABLE, StoreError, list_runs, render_table, table_frame

ensure_router()  # before anything is drawn: see pages/_router.py

st.title("Export")
st.markdown(
    "Every table here is a query over the store; the same query feeds `emalab export`. Grouping "
    "puts runs with equal configs (all but the seed) in one row as mean ± std across seeds."
)

runs = read_store(lambda: list_runs(limit=None))

choices = list(runs["run_id"]) if len(runs) else []
# The table, the runs and the grouping live in the URL too: a link (a finished run's card) or a reload
# opens the same export.
from_url("export_table", list(EXPORT_TABLES))
from_url("export_runs", choices, many=True)
from_url("export_grouped", flag=True)
table = st.selectbox("Table", list(EXPORT_TABLES), format_func=lambda n: f"{n} — {EXPORT_TABLES[n].description}",
                     key="export_table")
picked = st.multiselect("Runs (none picked: all)", choices, key="export_runs")
can_group = table in GROUPABLE
grouped = st.toggle("Group equal configs across seeds (mean ± std)", key="export_grouped", disabled=not can_group,
                    help=None if can_group else f"{table} is not grouped across seeds")
for key, value, default in (("export_table", table, next(iter(EXPORT_TABLES))), ("export_runs", picked, None),
                            ("export_grouped", grouped, None)):
    to_url(key, value, default)
run_ids = picked or None

try:
    frame = table_frame(table, run_ids, grouped and can_group)
except (StoreError, ValueError) as exc:
    st.error(str(exc))
    st.stop()

if len(frame):
    st.caption(f"{len(frame)} rows")
else:  # the same words as the CLI and the files: an empty export is said, never silently blank
    st.info(f"{EMPTY} — {'the runs picked have' if run_ids else 'the store has'} nothing for {table} yet.",
            icon=":material/info:")
# The preview shows each column's numbers as the downloads write them.
formats = {} if "key" in frame.columns else preview_formats(frame)
st.dataframe(frame, hide_index=True, height=min(420, 38 + 35 * max(len(frame), 1)), key="export_preview",
             column_config={name: st.column_config.NumberColumn(format=fmt) for name, fmt in formats.items()})
if len(frame):
    stem = table + ("-grouped" if grouped and can_group else "")
    # Keyed by the table: a button offered for the table picked before cannot be clicked for this one.
    with st.container(horizontal=True, gap="small"):
        for fmt, spec in FORMATS.items():
            st.download_button(
                spec.label, lambda fmt=fmt: render_table(table, fmt, run_ids, grouped and can_group),
                file_name=stem + spec.ext, mime=spec.mime, key=f"export_{stem}_{fmt}", on_click="ignore",
                icon=":material/download:",
            )

# The study's own figures of one run's rows, where it draws that table (its STUDY's export_figures).
if len(frame) and not (grouped and can_group) and "run_id" in frame.columns and (draw := export_figures(table)):
    st.subheader("Figure")
    run_choice = st.selectbox("Run", sorted(frame["run_id"].unique()), key="export_fig_run")
    for i, (stem, chart) in enumerate(draw(frame[frame["run_id"] == run_choice])):
        chart_with_downloads(chart, f"{stem}-{run_choice}", key="export_fig" if i == 0 else f"export_fig{i}")
