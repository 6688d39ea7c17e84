"""Where EMA Lab keeps its data: the one rule, used by the science, the run-folder format
(``ema_core.rundir``), the store and the job runner."""
from __future__ import annotations

import os
from pathlib import Path

# The project checkout: ema_core/paths.py → ema_core → the repository root.
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def emalab_home() -> Path:
    """The data folder: $EMALAB_HOME, or ``emalab_home/`` inside the project checkout."""
    env = os.environ.get("EMALAB_HOME")
    return Path(env).expanduser() if env else PROJECT_ROOT / "emalab_home"


def cache_home() -> Path:
    """Derived data that can be rebuilt at any time (tokenizers, token streams, numba's JIT cache)."""
    return emalab_home() / "cache"
