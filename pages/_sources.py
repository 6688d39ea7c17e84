"""What text the app may have a job read: the one rule for corpus and tokenizer settings typed into the app.

A job reads its corpus and tokenizer with the server's rights, on behalf of whoever reaches the app.
So the app takes only the built-in name (``austen``, ``bpe``), a hub name (``HuggingFaceFW/fineweb-edu``,
``allenai/c4:en``, ``gpt2``) or a path that leads, once symlinks and ``..`` are resolved, into the data
folder ($EMALAB_HOME) or the project's ``data/`` folder.  Everything else gets one message, whether
or not it exists, and the check runs before the config's own (which says "no such file"), so the app
tells nobody which files exist outside those folders.  The command line reads whatever its user can.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ema_core.config import flatten
from ema_core.lm.corpus import looks_like_path
from ema_core.paths import PROJECT_ROOT, emalab_home

BUILT_IN = {"corpus": "austen", "tokenizer": "bpe"}
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
HUB_NAMES = {  # "owner/name" or "name"; a corpus may name a config after a colon
    "corpus": re.compile(rf"{_SEGMENT}(/{_SEGMENT})?(:[A-Za-z0-9_.-]+)?"),
    "tokenizer": re.compile(rf"{_SEGMENT}(/{_SEGMENT})?"),
}


def refusal(field: str) -> str:
    """The one message for every refused ``field``: it names no path and says nothing of what exists."""
    return (f"{field}: the app reads only {BUILT_IN[field]!r}, a hub name ("
            + ("owner/name[:config]" if field == "corpus" else "owner/name")
            + ") or a file or folder inside the data folder ($EMALAB_HOME) or the project's data/ folder; "
              "the command line reads other paths")


def check_sources(settings: Mapping[str, object]) -> None:
    """Raise ValueError(:func:`refusal`) for a corpus or tokenizer in ``settings`` the app may not read.

    ``settings`` are overrides as typed (``{"corpus": "/etc/passwd"}``, ``{"data.corpus": …}``) or a
    built config's values (nested).  A setting is known by the last part of its name, whatever path
    or alias reaches it; a value typed as a JSON string (``"\\"/etc/passwd\\""``) is checked as the
    config would decode it too.
    """
    for key, value in flatten(dict(settings)).items():
        field = str(key).rsplit(".", 1)[-1].strip()
        if field in BUILT_IN and isinstance(value, str) and not all(source_allowed(field, v) for v in _readings(value)):
            raise ValueError(refusal(field))


def source_allowed(field: str, spec: str) -> bool:
    """Whether the app may let a job read ``spec`` as its ``field`` ("corpus" or "tokenizer")."""
    if spec == BUILT_IN[field]:
        return True
    if "\x00" in spec:  # no file has such a name; the path functions would raise on it
        return False
    # Relative paths: a job reads them from the project root (the worker's folder), the config
    # checks them from the server's: both must lead inside.
    bases = (PROJECT_ROOT, Path.cwd())
    if HUB_NAMES[field].fullmatch(spec) and not looks_like_path(spec):
        # A hub name, unless something local has that name: the loaders read a local path first.
        # (This existence test only sees names of the hub's shape next to the project's files.)
        if not any(os.path.lexists(base / spec) for base in bases):
            return True
    return all(_inside(Path(os.path.realpath(base / os.path.expanduser(spec)))) for base in bases)


def _readings(value: str) -> set[str]:
    """Every string a config may take from ``value`` (see ema_core.experiments.build_config)."""
    out = {value, value.strip()}
    try:
        decoded = json.loads(value.strip())
    except ValueError:
        return out
    if isinstance(decoded, str):
        out |= {decoded, decoded.strip()}
    return out


def _roots() -> list[Path]:
    return [Path(os.path.realpath(p)) for p in (emalab_home(), PROJECT_ROOT / "data")]


def _inside(path: Path) -> bool:
    """``path`` (resolved) is in an allowed folder, and so is everything a job would read under it."""
    roots = _roots()
    if not any(path.is_relative_to(root) for root in roots):
        return False
    if not path.is_dir():
        return True
    # A folder inside may still hold a symlink out of it (a folder corpus reads every file under it).
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            target = Path(os.path.realpath(os.path.join(top, name)))
            if not any(target.is_relative_to(root) for root in roots):
                return False
    return True
