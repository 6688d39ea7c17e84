"""The studies: one folder each, and this one list of them.

A study's folder (``ema_core/studies/<name>/``) holds what is its own: its config and presets with
``run`` (``experiment.py``: ``EXPERIMENT``), its claims and verdicts (``findings.py``: torch-free, the
store and the pages read it), its charts (``figures.py``), and in ``__init__.py`` the :class:`Study`
that declares it.  The models and tasks several studies share stay in the library
(``ema_core/lm``, ``ema_core/mixers``, ``ema_core/depth``, ...).  Its SQL, where a study needs its
own, is ``store/<name>.py`` (SQL lives in the store, and nothing here imports DuckDB).

Everything that lists studies iterates :data:`STUDIES`: the experiment registry (CLI choices, the
Jobs page, the runner), the store's tables and exports, the scoreboard, the learning rates chosen on
dev (``emalab learning-rates``), and the pages' navigation.
Adding a study is its folder and one entry in :data:`NAMES` (``docs/architecture.md``).

Importing this module is light (no torch): each study's ``__init__`` names its experiment modules,
and only :mod:`ema_core.experiments` imports them.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ema_core.protocol import ResultTable


@dataclass(frozen=True)
class Page:
    """A screen of the study, in the app's navigation: ``pages/<stem>.py``."""

    stem: str
    title: str
    icon: str


@dataclass(frozen=True)
class Study:
    name: str                       # its folder and its key here
    title: str                      # how the app and the scoreboard name it
    claim: str = ""                 # the paper's claim it tests, in its words (the Overview states it)
    source: str = ""                # where the paper says so
    # Its experiment kinds, each with the module of its folder that declares its ``EXPERIMENT``; the
    # first is the study's own kind (whose runs it judges, and whose picker its page keys
    # ``<name>_runs``).  The folder's ``__init__`` names each kind once and the module reads it there.
    experiments: Mapping[str, str] = field(default_factory=dict)
    # Its screens in pages/, in the navigation's order; the first shows its finished runs (and its
    # claims).  A study with none is still run, stored, exported and judged (the Export page and the
    # Overview show it).
    pages: tuple[Page, ...] = ()
    # Its claims on the Overview's scoreboard, judged on its best group of finished runs (the runs of one
    # config holding the most seeds): ``scores(tables, configs) -> list[Score]`` is given the group's
    # rows of each table named in ``claim_tables`` ({name: DataFrame}) and each run's config by run id.
    # A study whose judging needs SQL of its own sets ``judged_in_store`` instead, and its
    # ``store/<name>.py`` has ``judged(home)``.  Neither: it judges nothing (its limits hold by construction).
    scores: Callable[..., list[Any]] | None = None
    claim_tables: tuple[str, ...] = ()
    judged_in_store: bool = False
    not_judged: str = ""            # why a study that judges nothing does not (the Overview says it)
    # The figures of one run's rows of an exported table, offered as SVG/PNG beside it on the Export
    # page: {table: the function of the folder's ``figures.py`` that draws them}.  The store never
    # draws (it imports no chart code); the page looks them up here.
    export_figures: Mapping[str, str] = field(default_factory=dict)
    # Result tables that need no SQL of their own (:class:`ema_core.protocol.ResultTable`): the store
    # makes them, fills them from a run's result, groups them across seeds and offers them for export.
    tables: tuple[ResultTable, ...] = ()
    # The module of its folder whose ``TABLES`` are its learning rates chosen on dev
    # (:class:`ema_core.learning_rates.RateTable`), read where a config says ``auto``; "" where it chooses none.
    learning_rates: str = ""

    @property
    def module(self) -> str:
        return f"{__name__}.{self.name}"

    @property
    def kind(self) -> str:
        """The study's own experiment kind (its first)."""
        return next(iter(self.experiments))

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.experiments)

    def experiment_modules(self) -> list[str]:
        """Its experiment modules, by dotted name (importing them loads torch: the registry's business)."""
        return [f"{self.module}.{m}" for m in self.experiments.values()]

    def rate_tables(self) -> tuple:
        """Its learning-rate tables (:class:`ema_core.learning_rates.RateTable`), read from its folder each
        time (light: no torch)."""
        return (importlib.import_module(f"{self.module}.{self.learning_rates}").TABLES if self.learning_rates
                else ())

    @property
    def page(self) -> str | None:
        """The file of its main page (None: it has none)."""
        return f"pages/{self.pages[0].stem}.py" if self.pages else None

    @property
    def judges(self) -> bool:
        return self.scores is not None or self.judged_in_store


# The one registry line per study, in the order the app lists them: the paper's studies first,
# extensions after.  A study is found here by its folder's name; its folder declares the rest.
NAMES: tuple[str, ...] = ("dilution", "structure", "content", "boundary", "depth")

STUDIES: dict[str, Study] = {}
for _name in NAMES:
    STUDIES[_name] = importlib.import_module(f"{__name__}.{_name}").STUDY
    if STUDIES[_name].name != _name:
        raise ValueError(f"ema_core/studies/{_name}/ declares a study named {STUDIES[_name].name!r}")
