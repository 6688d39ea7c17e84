"""Tables as Markdown and LaTeX (booktabs), for the page's downloads and the CLI's exports.

Written out here rather than through pandas: ``DataFrame.to_markdown`` needs ``tabulate`` and
``Styler.to_latex`` needs ``jinja2``, neither of which the project depends on.
"""
from __future__ import annotations

import math
import numbers
import re

import pandas as pd

FLOAT_FORMAT = None  # None: one number of decimals per column (:func:`column_decimals`)
EMPTY = "empty: no rows"  # what an export with no rows says

# One pass over the text: replacing one character after another would escape the braces of
# \textbackslash{} again.
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_LATEX_SPECIAL_RE = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIAL))
# Rate labels carry Greek letters ("α=0.5"); pdflatex without unicode support rejects them raw.
_LATEX_UNICODE = {"α": r"$\alpha$", "β": r"$\beta$", "λ": r"$\lambda$", "σ": r"$\sigma$", "−": "-", "±": r"$\pm$"}


def _missing(v) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def column_decimals(values) -> int | None:
    """The decimals every number of a column is shown with, from its largest magnitude: four
    significant digits from 1 up (1.000, 12.35, 148.4, 5,000), three below (0.850, 0.0156); None
    (scientific notation) when every value is below 0.001 but not all are zero."""
    finite = [abs(float(v)) for v in values if isinstance(v, numbers.Real) and not isinstance(v, bool)
              and math.isfinite(float(v))]
    top = max(finite, default=0.0)
    if top == 0.0:
        return 3
    if top < 1e-3:
        return None
    e = math.floor(math.log10(top))
    return max(0, 3 - e) if e >= 0 else 2 - e


def number_text(v: float, decimals: int | None) -> str:
    """``v`` with ``decimals`` decimals and a thousands separator, or in scientific notation (None)."""
    return f"{v:.2e}" if decimals is None else f"{v:,.{decimals}f}"


def _plain_integers(name) -> bool:
    # Identifiers are not quantities: seed 12345 is not "12,345".
    name = str(name)
    return name.endswith("seed") or name.endswith("_id") or name == "id"


def preview_formats(df: pd.DataFrame) -> dict[str, str]:
    """The display format of each numeric column of ``df`` on a page: the exported files' decimals
    (:func:`column_decimals`) as a printf format, counts with the reader's thousands separator
    ("localized"), identifiers plain.  A long table (one column of several quantities) is left alone."""
    out = {}
    for name in df.columns:
        s = df[name]
        if not _is_numeric(s) or _plain_integers(name):
            continue
        if pd.api.types.is_integer_dtype(s):
            out[str(name)] = "localized"
        else:
            decimals = column_decimals(s.dropna().tolist())
            out[str(name)] = "%.2e" if decimals is None else f"%.{decimals}f"
    return out


def decimals_by(values: pd.Series, by: pd.Series | None = None) -> list[int | None]:
    """:func:`column_decimals` for every row of ``values``: of the whole column, or of the rows
    sharing its value of ``by`` (a long table's key, whose rows hold different quantities)."""
    if by is None:
        return [column_decimals(values)] * len(values)
    keys = [str(k) for k in by]  # as text: a missing key (NaN) is then one group, like any other
    groups = pd.Series(list(values), dtype=object).groupby(keys, sort=False)
    per_key = {key: column_decimals(part) for key, part in groups}
    return [per_key[key] for key in keys]


def _column_cells(s: pd.Series, float_format: str | None, by: pd.Series | None) -> list[str]:
    """Every cell of the column ``s`` as text, in one format (per ``by`` group when given)."""
    floats = s.map(lambda v: v if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral)
                   and not _missing(v) else None)
    decimals = decimals_by(floats, by)
    grouping = "" if _plain_integers(s.name) else ","

    def cell(v, d) -> str:
        if _missing(v):
            return ""
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, numbers.Integral):
            return f"{int(v):{grouping}d}"
        if isinstance(v, numbers.Real):
            return float_format.format(float(v)) if float_format else number_text(float(v), d)
        return str(v)

    return [cell(v, d) for v, d in zip(s, decimals)]


def _rows(df: pd.DataFrame, float_format: str | None, by: str | None = None):
    key = df[by] if by is not None and by in df.columns else None
    columns = [_column_cells(df[c], float_format, key) for c in df.columns]
    return zip(*columns) if columns else iter(())


def _is_numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _with_index(df: pd.DataFrame, index: bool) -> pd.DataFrame:
    return df.reset_index() if index else df


def to_markdown(df: pd.DataFrame, index: bool = False, float_format: str | None = FLOAT_FORMAT,
                empty: str | None = None, by: str | None = None) -> str:
    """A GitHub-flavoured Markdown table; numeric columns right-aligned, one number format per column
    (per value of the column ``by``, if given; ``float_format``, e.g. ``"{:.3f}"``, for every float
    instead).  A table with no rows is followed by the line ``empty`` when given."""
    df = _with_index(df, index)

    def esc(text: str) -> str:
        # A bare "|" would start a new cell; newlines would end the row.
        return text.replace("|", r"\|").replace("\n", " ")

    header = [esc(str(c)) for c in df.columns]
    align = ["---:" if _is_numeric(df[c]) else ":---" for c in df.columns]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    for row in _rows(df, float_format, by):
        lines.append("| " + " | ".join(esc(v) for v in row) + " |")
    if not len(df) and empty:
        lines += ["", f"*{esc(empty)}*"]
    return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
    text = _LATEX_SPECIAL_RE.sub(lambda m: _LATEX_SPECIAL[m.group()], text)
    for ch, rep in _LATEX_UNICODE.items():
        text = text.replace(ch, rep)
    return text


def to_latex_booktabs(
    df: pd.DataFrame,
    caption: str | None = None,
    label: str | None = None,
    index: bool = False,
    float_format: str | None = FLOAT_FORMAT,
    empty: str | None = None,
    by: str | None = None,
) -> str:
    r"""A booktabs ``tabular`` (inside a ``table`` float when given a caption or label); one number
    format per column (per value of the column ``by``, as :func:`to_markdown`).  A table with no rows
    gets one row spanning the columns that says ``empty``.

    Needs ``\usepackage{booktabs}`` in the preamble.
    """
    df = _with_index(df, index)
    spec = "".join("r" if _is_numeric(df[c]) else "l" for c in df.columns)
    body = [
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(latex_escape(str(c)) for c in df.columns) + r" \\",
        r"\midrule",
    ]
    for row in _rows(df, float_format, by):
        body.append(" & ".join(latex_escape(v) for v in row) + r" \\")
    if not len(df) and empty:
        body.append(rf"\multicolumn{{{max(1, len(df.columns))}}}{{c}}{{\emph{{{latex_escape(empty)}}}}} \\")
    body += [r"\bottomrule", r"\end{tabular}"]
    if caption is None and label is None:
        return "\n".join(body) + "\n"
    out = [r"\begin{table}[t]", r"\centering"]
    if caption is not None:
        out.append(rf"\caption{{{latex_escape(caption)}}}")
    if label is not None:
        # Labels are identifiers, not text: escaping would change the name \ref must use.
        out.append(rf"\label{{{label}}}")
    return "\n".join(out + body + [r"\end{table}"]) + "\n"
