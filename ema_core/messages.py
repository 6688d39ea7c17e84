"""One line of text from anything: the single rule for messages that must stay on one line.

A job's status message, a line of ``jobs list``, an ``emalab: error: ...`` a script reads, the
reason a corpus could not be read: each is shown where a line break would break the display or
the parsing, and each caller used to cut its own.  The ways differ on purpose, and are named here:

* ``join`` (the default): every run of whitespace, line breaks included, becomes one space — a
  library's multi-line message read as a sentence;
* ``escape``: every character kept, line breaks written as escapes (``\\n``) — the exact text, for
  a message that names what the user typed;
* ``first`` / ``last``: the first or last non-blank line, stripped — an exception's headline (a Ray
  task's error ends with its cause, after the remote traceback).

It imports only the standard library, so the CLI, the worker and the science all use it.
"""
from __future__ import annotations

from typing import Any

HOW = ("join", "escape", "first", "last")


def one_line(value: Any, how: str = "join", limit: int | None = None) -> str:
    """``str(value)`` on one line, the way ``how`` says (see the module); at most ``limit`` characters, then "…"."""
    text = str(value)
    if how == "join":
        out = " ".join(text.split())
    elif how == "escape":
        # Any character Python splits lines at (\n, \r, \x0b, \x1c, \u2028, ...), not only \n.
        out = "".join(c if len(f"a{c}a".splitlines()) == 1 else c.encode("unicode_escape").decode("ascii")
                      for c in text)
    elif how in ("first", "last"):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        out = (lines[0] if how == "first" else lines[-1]) if lines else ""
    else:
        raise ValueError(f"how must be one of {HOW}, got {how!r}")
    if limit is not None and len(out) > limit:
        out = out[:limit] + "…"
    return out


def error_line(exc: BaseException, how: str = "first") -> str:
    """``Type: message`` on one line (the message as :func:`one_line` gives it), or the type alone."""
    text = one_line(exc, how)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
