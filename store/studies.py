"""The store's side of the study registry (:data:`ema_core.studies.STUDIES`): each study's queries.

A study's declared result tables (``Study.tables``) need no SQL of its own: the store makes, reads,
groups and exports them.  A study with SQL of its own keeps it in ``store/<study>.py`` (SQL lives in
the store); importing it registers its tables for grouping and export, and its ``judged(home)``
states its claims on the Overview's scoreboard.  This module finds those files by the registry, so
that nothing here lists the studies.
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from ema_core.studies import STUDIES

from . import export, queries


def study_module(name: str) -> ModuleType | None:
    """``store.<name>``, the study's own queries, or None where the study has none."""
    module = f"{__package__}.{name}"
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module)


def load_study_modules() -> None:
    """Every study's queries and declared tables, in the studies' order: importing a study's module
    registers its tables; its declared ones (``Study.tables``) are registered here."""
    for name, study in STUDIES.items():
        study_module(name)
        for table in study.tables:
            queries.register_declared(table)
            export.register_table(table.name, table.description)
