"""Exports: a table from the store in each of :data:`FORMATS` (CSV, LaTeX booktabs, Markdown, Parquet).

The tables come from an allow-list, each backed by a query in ``store.queries`` or in a study's file
of ``store/`` (which adds its tables here with :func:`register_table` when ``store`` is imported),
so a table name never reaches SQL.  Files are written only inside ``$EMALAB_HOME/exports/``:
whatever ``out`` says (``..``, an absolute path, a symlink), a target that resolves outside that
folder is refused before anything is written, and the file appears atomically.

Every row says what it measured: a study's table carries what each run was (its ``labels``, read
from the run's config), and every run table the config fields that differ between the runs
exported (``store.queries.labelled``).

Grouped exports average runs whose configs differ only in their seed (and, where one run holds
several seeds and each row carries its own, over those seeds too: ``RunTable.seeds_in_rows``).
LaTeX and Markdown show one ``mean ± std`` cell per value, with one number of decimals per column,
and the mean alone where the seeds agree exactly (a constant such as chance); CSV keeps
``<value>_mean`` and ``<value>_std`` as numbers, since a CSV is read by programs (and so does
Parquet, typed columns for a notebook: ``docs/notebook.md``).  LaTeX comes as a
``table`` float with a caption (what the table is, from how many runs and seeds) and a label
(``tab:<table>``).  A table with no rows is still written (CSV: the header; Markdown and LaTeX: the
header and a line saying ``empty: no rows``), and :func:`write_export` reports ``rows``, so the CLI
and the page can say so.
"""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Callable, NamedTuple

import duckdb
import pandas as pd

from ema_core.tables import EMPTY, decimals_by, number_text, to_latex_booktabs, to_markdown
from ema_core.rundir import StorageError, atomic_write, emalab_home

from . import queries
from .queries import RunIds

class Format(NamedTuple):
    ext: str    # the file name's ending
    label: str  # what a button, a help text or a message calls it
    mime: str   # what a download says it is


# By name, in the order the CLI's help and the export page offer them.
FORMATS: dict[str, Format] = {
    "csv": Format(".csv", "CSV", "text/csv"),
    "latex": Format(".tex", "LaTeX", "application/x-tex"),  # a booktabs table float (ema_core.tables)
    "markdown": Format(".md", "Markdown", "text/markdown"),
    "parquet": Format(".parquet", "Parquet", "application/vnd.apache.parquet"),
}
MEAN_STD_DIGITS = 3
MAX_NAME_BYTES = 200  # of one path component; file systems allow 255


class ExportTable(NamedTuple):
    query: Callable[..., pd.DataFrame]  # (run_ids, home) -> frame
    description: str
    # A long table (one row per metric) formats its numbers per value of this column, not per
    # column: a loss and a perplexity need different decimals.
    by: str | None = None


def _labelled(name: str) -> Callable[..., pd.DataFrame]:
    return lambda run_ids, home: queries.labelled(name, run_ids, home=home)


# By name, in the order the export page and the CLI list them: the tables every study shares here,
# each study's own after them, added by its file in store/.
EXPORT_TABLES: dict[str, ExportTable] = {
    "runs": ExportTable(lambda run_ids, home: queries.list_runs(limit=None, run_ids=run_ids, home=home),
                        "one row per run: kind, seed, status, times, code version, host, config"),
    "metrics_final": ExportTable(_labelled("metrics_final"),
                                 "the last logged value of every metric of every run", by="key"),
    "bench_figures": ExportTable(lambda run_ids, home: queries.bench_figures(home=home),
                                 "the newest figure of every benchmark key, with machine and command",
                                 by="key"),
}


def register_table(name: str, description: str, by: str | None = None) -> None:
    """Offer the run table ``name`` (declared with ``queries.register_run_table``) for export, its rows
    labelled (``queries.labelled``); ``description`` says what one row is.  The figures of an exported
    table are its study's (``Study.export_figures``): the store draws nothing."""
    if name not in queries.GROUPABLE:
        raise ValueError(f"{name!r} is not a run table; declare it with queries.register_run_table first")
    if name in EXPORT_TABLES:
        raise ValueError(f"export table {name!r} is declared twice")
    EXPORT_TABLES[name] = ExportTable(_labelled(name), description, by)


def exports_dir(home: Path | None = None) -> Path:
    return Path(home or emalab_home()) / "exports"


def _check_name(name: str) -> ExportTable:
    if name not in EXPORT_TABLES:
        raise ValueError(f"unknown table {name!r}; tables: {', '.join(EXPORT_TABLES)}")
    return EXPORT_TABLES[name]


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    return fmt


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def mean_std(mean: float, std: float, digits: int | None = MEAN_STD_DIGITS) -> str:
    """``0.812 ± 0.004``; just the mean when there is no spread to show: one seed, or seeds that
    agree exactly (a constant such as chance is not "± 0.000").  ``digits`` None: scientific."""
    if _missing(mean):
        return ""
    if _missing(std) or std == 0:
        return number_text(mean, digits)
    return f"{number_text(mean, digits)} ± {number_text(std, digits)}"


def mean_std_cells(df: pd.DataFrame, digits: int | None = None, by: str | None = None) -> pd.DataFrame:
    """Fold each ``<v>_mean``/``<v>_std`` pair of a grouped frame into one text column ``<v>``, with
    ``digits`` decimals, or by default the decimals of ``ema_core.tables.column_decimals`` for the
    column's means (for the means of each value of the column ``by``, if given): one number format
    per column."""
    out = df.copy()
    key = df[by] if by is not None and by in df.columns else None
    for col in [c for c in df.columns if c.endswith("_mean") and c[:-5] + "_std" in df.columns]:
        base = col[:-5]
        at = out.columns.get_loc(col)
        ds = [digits] * len(df) if digits is not None else decimals_by(df[col], key)
        cells = [mean_std(m, s, d) for m, s, d in zip(df[col], df[base + "_std"], ds)]
        out = out.drop(columns=[col, base + "_std"])
        out.insert(at, base, cells)
    return out


def table_frame(name: str, run_ids: RunIds = None, grouped: bool = False, *,
                home: Path | None = None) -> pd.DataFrame:
    """The frame an export of ``name`` holds (grouped: mean/std/n across seeds)."""
    table = _check_name(name)
    if not grouped:
        return table.query(run_ids, home)
    if name not in queries.GROUPABLE:
        raise ValueError(f"table {name!r} cannot be grouped across seeds; groupable: {', '.join(queries.GROUPABLE)}")
    return queries.grouped(name, run_ids, home=home)


def _for_text(df: pd.DataFrame) -> pd.DataFrame:
    # Times as ISO text and missing times as empty cells ("NaT" is not for a paper).
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_datetime64_any_dtype(out[col]):
            out[col] = [None if pd.isna(v) else v.isoformat(sep=" ") for v in out[col]]
    return out


def _runs_and_seeds(df: pd.DataFrame, grouped: bool, runs_column: str = "n") -> tuple[int, list[int]]:
    """How many runs a frame of ``table_frame`` comes from, and their seeds."""
    if not len(df) or ("run_id" not in df.columns and "config_id" not in df.columns):
        return 0, []
    if grouped:
        # A config's runs: its largest count (a key a run lacks has fewer); seeds from the "0,1,2" cells.
        runs = int(df.groupby("config_id")[runs_column].max().sum())
        return runs, sorted({int(s) for cell in df["seeds"] for s in str(cell).split(",") if s.strip()})
    seeds = sorted({int(s) for s in df["seed"].dropna()}) if "seed" in df.columns else []
    return int(df["run_id"].nunique()), seeds


def caption(name: str, df: pd.DataFrame, grouped: bool = False) -> str:
    """What the table is and what it was formed from, for a LaTeX ``\\caption``."""
    what = EXPORT_TABLES[name].description
    what = what[0].upper() + what[1:]
    if name == "bench_figures":
        return f"{what} ({len(df)} figures)." if len(df) else f"{what}: {EMPTY}."
    spec = queries.GROUPABLE.get(name)
    # Where a run holds several seeds, ``n`` counts seeds and ``runs`` the runs (queries.grouped).
    runs, seeds = _runs_and_seeds(df, grouped, "runs" if spec is not None and spec.seeds_in_rows else "n")
    if not runs:
        return f"{what}: {EMPTY} (no runs yet)."
    seed_text = f"; seeds {', '.join(map(str, seeds))}" if seeds else ""
    spread = ", mean ± std across seeds of equal configs" if grouped else ""
    return f"{what}{spread}; from {runs} run{'s' if runs != 1 else ''}{seed_text}."


def label(name: str, grouped: bool = False) -> str:
    return f"tab:{name}" + ("_grouped" if grouped else "")


class Rendered(NamedTuple):
    data: str | bytes  # text, or for Parquet the file's bytes
    rows: int


def parquet_bytes(df: pd.DataFrame) -> bytes:
    """``df`` as a Parquet file, written by DuckDB (its own in-memory database, not the store)."""
    # DuckDB writes a file, not a buffer: a private temporary folder, read back whole, so the export
    # still appears atomically (atomic_write) and the download button gets the same bytes.
    with tempfile.TemporaryDirectory(prefix="emalab-parquet-") as tmp:
        path = Path(tmp) / "table.parquet"
        with duckdb.connect() as conn:
            conn.register("frame", df)
            quoted = path.as_posix().replace("'", "''")  # a file name is not a parameter in COPY
            conn.execute(f"COPY frame TO '{quoted}' (FORMAT parquet)")
        return path.read_bytes()


def render(name: str, fmt: str, run_ids: RunIds = None, grouped: bool = False, *,
           home: Path | None = None) -> Rendered:
    """The export's text and its number of rows; nothing is written."""
    _check_format(fmt)
    df = table_frame(name, run_ids, grouped, home=home)
    if fmt == "csv":
        return Rendered(df.to_csv(index=False), len(df))
    if fmt == "parquet":  # numbers as numbers, like CSV; times and text typed
        return Rendered(parquet_bytes(df), len(df))
    by = EXPORT_TABLES[name].by
    text_df = _for_text(mean_std_cells(df, by=by) if grouped else df)
    if fmt == "markdown":
        return Rendered(to_markdown(text_df, empty=EMPTY, by=by), len(df))
    return Rendered(to_latex_booktabs(text_df, caption=caption(name, df, grouped), label=label(name, grouped),
                                      empty=EMPTY, by=by), len(df))


def render_table(name: str, fmt: str, run_ids: RunIds = None, grouped: bool = False, *,
                 home: Path | None = None) -> str | bytes:
    """The export's text (Parquet: its bytes), for a download button; nothing is written."""
    return render(name, fmt, run_ids, grouped, home=home).data


def export_path(out: str | os.PathLike | None, fmt: str, default_stem: str, home: Path | None = None) -> Path:
    """Where an export goes: inside the export folder, or ``ValueError`` naming ``out``."""
    root = exports_dir(home)
    root_real = root.resolve()
    if out is None:
        candidate = root / (default_stem + FORMATS[fmt].ext)
    else:
        text = os.fspath(out)
        if not text or "\x00" in text:
            raise ValueError(f"out={text!r} is not a usable file name")
        candidate = Path(text) if Path(text).is_absolute() else root / text
        if not candidate.suffix:
            candidate = candidate.with_name(candidate.name + FORMATS[fmt].ext)
    # resolve() applies "..", and follows every symlink that exists, the file itself included.
    real = candidate.resolve()
    if real == root_real or not real.is_relative_to(root_real):
        raise ValueError(f"out={os.fspath(out) if out is not None else default_stem!r} resolves to {real}, "
                         f"outside the export folder {root}; give a file name inside it")
    # Refused here rather than failing half-way: a name the file system cannot hold (the atomic
    # write's temporary file adds a few characters to it), or a file where a folder must go.
    for part in real.relative_to(root_real).parts:
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise ValueError(f"out={os.fspath(out)!r}: a file or folder name is longer than {MAX_NAME_BYTES} bytes")
    if real.is_dir():
        raise ValueError(f"out={os.fspath(out)!r} is a folder; give a file name")
    for parent in real.relative_to(root_real).parents[:-1]:  # the export folder itself: StorageError later
        folder = root_real / parent
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"out={os.fspath(out)!r}: {folder.name} is a file, not a folder")
    return real


class Exported(NamedTuple):
    path: Path
    rows: int  # 0: the file holds the header and says "empty: no rows"


def export_table(name: str, fmt: str, run_ids: RunIds = None, grouped: bool = False,
                 out: str | os.PathLike | None = None, *, home: Path | None = None) -> Path:
    """Write the export under ``$EMALAB_HOME/exports/`` and return its path (see :func:`write_export`)."""
    return write_export(name, fmt, run_ids, grouped, out, home=home).path


def write_export(name: str, fmt: str, run_ids: RunIds = None, grouped: bool = False,
           out: str | os.PathLike | None = None, *, home: Path | None = None) -> Exported:
    """Write the export under ``$EMALAB_HOME/exports/``; its path and number of rows.

    ``out`` is a file name or a relative path inside the export folder (default:
    ``<table>[-grouped].<ext>``).  A target outside the folder raises ``ValueError``; a folder that
    cannot be written raises ``StorageError``; either way nothing is left half-written.
    """
    _check_name(name)
    _check_format(fmt)
    target = export_path(out, fmt, name + ("-grouped" if grouped else ""), home)
    data, rows = render(name, fmt, run_ids, grouped, home=home)
    root_real = exports_dir(home).resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"the export folder cannot be written: could not create {target.parent}: "
                           f"{exc.strerror or exc}") from exc
    if not target.parent.resolve().is_relative_to(root_real):  # a folder swapped for a link meanwhile
        raise ValueError(f"out={os.fspath(out)!r} resolves outside the export folder")
    try:
        # Bytes, so the "±" and Greek letters do not depend on the locale's encoding.
        atomic_write(target, data.encode("utf-8") if isinstance(data, str) else data)
    except OSError as exc:  # atomic_write converts failures of the write itself, not of creating the temp file
        raise StorageError(f"the export folder cannot be written: could not write {target}: "
                           f"{exc.strerror or exc}") from exc
    return Exported(target, rows)
