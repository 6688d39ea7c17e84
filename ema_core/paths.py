"""Where EMA Lab keeps its data: the one rule, here because ``ema_core`` may not import the job
runner while the job runner may import ``ema_core`` (``jobs.rundir`` re-exports ``emalab_home``)."""
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
