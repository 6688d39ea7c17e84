"""Exports: a table from the store as CSV, LaTeX (booktabs) or Markdown.

The tables come from an allow-list, each backed by a query in ``store.queries``, so a table name
never reaches SQL.  Files are written only inside ``$EMALAB_HOME/exports/``: whatever ``out`` says
(``..``, an absolute path, a symlink), a target that resolves outside that folder is refused before
anything is written, and the file appears atomically.

Grouped exports average runs whose configs differ only in their seed.  LaTeX and Markdown show one
``mean ± std`` cell per value; CSV keeps ``<value>_mean`` and ``<value>_std`` as numbers, since a
CSV is read by programs.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

from ema_core.tables import to_latex_booktabs, to_markdown
from jobs.rundir import StorageError, atomic_write, emalab_home

from . import queries
from .queries import RunIds

FORMATS = {"csv": ".csv", "latex": ".tex", "markdown": ".md"}
MEAN_STD_DIGITS = 3
MAX_NAME_BYTES = 200  # of one path component; file systems allow 255


class ExportTable(NamedTuple):
    query: Callable[..., pd.DataFrame]  # (run_ids, home) -> frame
    description: str


EXPORT_TABLES: dict[str, ExportTable] = {
    "runs": ExportTable(lambda run_ids, home: queries.list_runs(limit=None, run_ids=run_ids, home=home),
                        "one row per run: kind, seed, status, times, code version, host, config"),
    "metrics_final": ExportTable(lambda run_ids, home: queries.final_metrics(run_ids, home=home),
                                 "the last logged value of every metric of every run"),
    "dilution_accuracy": ExportTable(lambda run_ids, home: queries.dilution_accuracy(run_ids, home=home),
                                     "identity decoding accuracy per feature and lag, with chance"),
    "probe_accuracy": ExportTable(lambda run_ids, home: queries.probe_accuracy(run_ids, home=home),
                                  "probe accuracy per role, feature set and split"),
    "lm_eval": ExportTable(lambda run_ids, home: queries.lm_eval(run_ids, home=home),
                           "language-model loss, perplexity and bits per byte per split"),
    "bench_figures": ExportTable(lambda run_ids, home: queries.bench_figures(home=home),
                                 "the newest figure of every benchmark key, with machine and command"),
}


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


def mean_std(mean: float, std: float, digits: int = MEAN_STD_DIGITS) -> str:
    """``0.812 ± 0.004``; just the mean when there is no spread to show (one seed)."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def mean_std_cells(df: pd.DataFrame, digits: int = MEAN_STD_DIGITS) -> pd.DataFrame:
    """Fold each ``<v>_mean``/``<v>_std`` pair of a grouped frame into one text column ``<v>``."""
    out = df.copy()
    for col in [c for c in df.columns if c.endswith("_mean") and c[:-5] + "_std" in df.columns]:
        base = col[:-5]
        at = out.columns.get_loc(col)
        cells = [mean_std(m, s, digits) for m, s in zip(df[col], df[base + "_std"])]
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


def render_table(name: str, fmt: str, run_ids: RunIds = None, grouped: bool = False, *,
                 home: Path | None = None) -> str:
    """The export's text, for a download button; nothing is written."""
    _check_format(fmt)
    df = table_frame(name, run_ids, grouped, home=home)
    if fmt == "csv":
        return df.to_csv(index=False)
    if grouped:
        df = mean_std_cells(df)
    df = _for_text(df)
    return to_markdown(df) if fmt == "markdown" else to_latex_booktabs(df)


def export_path(out: str | os.PathLike | None, fmt: str, default_stem: str, home: Path | None = None) -> Path:
    """Where an export goes: inside the export folder, or ``ValueError`` naming ``out``."""
    root = exports_dir(home)
    root_real = root.resolve()
    if out is None:
        candidate = root / (default_stem + FORMATS[fmt])
    else:
        text = os.fspath(out)
        if not text or "\x00" in text:
            raise ValueError(f"out={text!r} is not a usable file name")
        candidate = Path(text) if Path(text).is_absolute() else root / text
        if not candidate.suffix:
            candidate = candidate.with_name(candidate.name + FORMATS[fmt])
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


def export_table(name: str, fmt: str, run_ids: RunIds = None, grouped: bool = False,
                 out: str | os.PathLike | None = None, *, home: Path | None = None) -> Path:
    """Write the export under ``$EMALAB_HOME/exports/`` and return its path.

    ``out`` is a file name or a relative path inside the export folder (default:
    ``<table>[-grouped].<ext>``).  A target outside the folder raises ``ValueError``; a folder that
    cannot be written raises ``StorageError``; either way nothing is left half-written.
    """
    _check_name(name)
    _check_format(fmt)
    target = export_path(out, fmt, name + ("-grouped" if grouped else ""), home)
    text = render_table(name, fmt, run_ids, grouped, home=home)
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
        atomic_write(target, text.encode("utf-8"))
    except OSError as exc:  # atomic_write converts failures of the write itself, not of creating the temp file
        raise StorageError(f"the export folder cannot be written: could not write {target}: "
                           f"{exc.strerror or exc}") from exc
    return target
