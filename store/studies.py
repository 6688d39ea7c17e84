"""The store's side of the study registry (:data:`ema_core.studies.STUDIES`): each study's queries.

A study with SQL of its own keeps it in ``store/<study>.py`` (SQL lives in the store); importing it
registers its tables for grouping and export, and its ``judged(home)`` states its claims on the
Overview's scoreboard.  This module finds those files by the registry, so that nothing here lists
the studies.
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from ema_core.studies import STUDIES


def study_module(name: str) -> ModuleType | None:
    """``store.<name>``, the study's own queries, or None where the study has none."""
    module = f"{__package__}.{name}"
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module)


def load_study_modules() -> list[ModuleType]:
    """Every study's queries, in the studies' order (importing one registers its tables)."""
    return [m for m in (study_module(name) for name in STUDIES) if m is not None]
