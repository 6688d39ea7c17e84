"""Numba, set up once for every module of ema_core that compiles: the JIT cache folder first.

Import ``njit``/``prange`` from here, never from numba directly, so that the cache folder is
chosen before any ``@njit(cache=True)`` function is defined (numba picks its cache locator at
decoration time, and fails there when it finds nothing writable).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numba
import numpy as np


def _writable(folder: Path) -> bool:
    # Probe by writing: os.access() says yes to root even on read-only mounts.
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError:
        return False


def numba_cache_dir() -> str | None:
    """Where numba will keep this module's JIT cache, choosing a fallback if needed.

    numba caches next to the source (``__pycache__``) and otherwise in a user cache
    folder; when neither is writable (a read-only install with a read-only home)
    ``cache=True`` fails at import with "no locator available".  We keep the
    in-tree cache when it works and otherwise point numba at the first writable
    folder among $NUMBA_CACHE_DIR, $EMALAB_HOME/cache/numba, ~/.cache/emalab/numba
    and the system temp folder.  Returns the folder chosen, or None for in-tree.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return os.environ["NUMBA_CACHE_DIR"]
    package = Path(__file__).resolve().parent
    if all(_writable(folder / "__pycache__") for folder in (package, package / "scan")):
        return None
    candidates = []
    if os.environ.get("EMALAB_HOME"):
        candidates.append(Path(os.environ["EMALAB_HOME"]) / "cache" / "numba")
    candidates.append(Path.home() / ".cache" / "emalab" / "numba")
    candidates.append(Path(tempfile.gettempdir()) / f"emalab-numba-{os.getuid()}")
    for folder in candidates:
        if _writable(folder):
            numba.config.CACHE_DIR = str(folder)
            return str(folder)
    return None  # nothing writable: numba will say so


CACHE_DIR = numba_cache_dir()

from numba import get_num_threads, njit, prange  # noqa: E402,F401  (after the cache folder is set)
