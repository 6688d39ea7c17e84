"""A copy of the project a test changes as a user would (the docs' steps applied to it), and a command
run in it in a fresh process: the bring-your-own-mixer and the add-a-study tests share them."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a copy of the project needs to run, show and export a run (the data folder is not read).
COPIED = ("ema_core", "store", "jobs", "pages", "tests", "app.py")


def copy_project(root: Path) -> Path:
    """The project's code copied to ``root`` (no caches), which is returned."""
    root.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    return root


def apply_diff(root: Path, block: str) -> None:
    """One ``diff`` block of the docs: a first line ``# path``, then lines that stand (a space first),
    go (``-``) or come (``+``).  The lines before the change must stand together, once, in that file."""
    head, *lines = block.rstrip("\n").split("\n")
    assert head.startswith("# "), f"a diff block names its file first: {head!r}"
    assert lines and all(line[:1] in (" ", "-", "+") for line in lines), f"only ' ', '-' and '+' lines: {block!r}"
    path = root / head[2:].strip()
    before = "\n".join(line[1:] for line in lines if line[0] in " -")
    after = "\n".join(line[1:] for line in lines if line[0] in " +")
    text = path.read_text(encoding="utf-8")
    assert text.count(before) == 1, f"{head[2:]}: the lines shown around the change stand {text.count(before)} times, not once"
    path.write_text(text.replace(before, after), encoding="utf-8")


def run_in(checkout: Path, *args: str, home: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """``python args`` in the copy, as its user would run it (the copy first on the import path)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if home is not None:
        env["EMALAB_HOME"] = str(home)
    return subprocess.run([sys.executable, *args], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=timeout)
