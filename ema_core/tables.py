"""Tables as Markdown and LaTeX (booktabs), for the page's downloads and the CLI's exports.

Written out here rather than through pandas: ``DataFrame.to_markdown`` needs ``tabulate`` and
``Styler.to_latex`` needs ``jinja2``, neither of which the project depends on.
"""
from __future__ import annotations

import math
import numbers
import re

import pandas as pd

FLOAT_FORMAT = "{:.4g}"

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


def _cell(v, float_format: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        return float_format.format(float(v))
    return str(v)


def _is_numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _with_index(df: pd.DataFrame, index: bool) -> pd.DataFrame:
    return df.reset_index() if index else df


def to_markdown(df: pd.DataFrame, index: bool = False, float_format: str = FLOAT_FORMAT) -> str:
    """A GitHub-flavoured Markdown table; numeric columns right-aligned."""
    df = _with_index(df, index)

    def esc(text: str) -> str:
        # A bare "|" would start a new cell; newlines would end the row.
        return text.replace("|", r"\|").replace("\n", " ")

    header = [esc(str(c)) for c in df.columns]
    align = ["---:" if _is_numeric(df[c]) else ":---" for c in df.columns]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    for row in df.itertuples(index=False, name=None):
        lines.append("| " + " | ".join(esc(_cell(v, float_format)) for v in row) + " |")
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
    float_format: str = FLOAT_FORMAT,
) -> str:
    r"""A booktabs ``tabular`` (inside a ``table`` float when given a caption or label).

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
    for row in df.itertuples(index=False, name=None):
        body.append(" & ".join(latex_escape(_cell(v, float_format)) for v in row) + r" \\")
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
