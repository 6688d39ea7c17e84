"""The runs each study's claims are judged on, for the Overview's scoreboard.

A study's page lets a reader pick any runs; the scoreboard judges, per study, the one group of
finished runs that can say most: the runs of one config (for the language model, of one comparable
setting, every variant) holding the most seeds, the newest on a tie.  It reads the same store
queries the study's page reads and judges by the same findings functions, so the board and the page
agree on the same runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ema_core.scoreboard import Score
from ema_core.studies import STUDIES
from store.queries import GROUPABLE, config_id, config_without_seed, list_runs
from store.studies import study_module


@dataclass(frozen=True)
class Judged:
    """One study's claims, and the runs they were judged on."""

    study: str                 # a key of STUDIES
    run_ids: tuple[str, ...]   # the group judged (empty: no finished run)
    seeds: tuple[int, ...]     # the seeds those runs hold
    group: str = ""            # the config id (or the language model's settings id) of the group
    # One config per variant of the group, seed removed: what a launch of more seeds runs again.
    configs: tuple[dict[str, Any], ...] = ()
    span: int = 1              # seeds one run covers (a boundary or depth run covers its ``seeds``)
    scores: list[Score] = field(default_factory=list)


def best_group(groups: dict[str, dict[str, Any]]) -> str | None:
    """The group with the most seeds, the newest (listed first) on a tie."""
    if not groups:
        return None
    order = list(groups)
    return max(order, key=lambda g: (len(groups[g]["seeds"]), -order.index(g)))


def run_configs(runs: pd.DataFrame) -> dict[str, dict]:
    return {r.run_id: json.loads(r.config) if isinstance(r.config, str) else None for r in runs.itertuples()}


def row_seeds(rows: pd.DataFrame) -> dict[str, set[int]]:
    """The seeds each run's rows hold (a boundary or depth run holds several: each row carries its own)."""
    if rows.empty:
        return {}
    return rows.groupby("run_id")["seed"].agg(lambda s: {int(v) for v in s}).to_dict()


def run_seeds(runs: pd.DataFrame) -> dict[str, set[int]]:
    """The seed of each run (a run of one seed)."""
    return {r.run_id: {int(r.seed)} for r in runs.itertuples() if pd.notna(r.seed)}


def span_of(config: Any) -> int:
    """The seeds one run of ``config`` covers: its ``seeds`` (1 where it names none)."""
    span = config.get("seeds", 1) if isinstance(config, dict) else 1
    return span if isinstance(span, int) and span >= 1 else 1


def judge_best(study: str, runs: pd.DataFrame, seeds_of: dict[str, set[int]],
               scores_of: Callable[[list[str], dict[str, Any]], list[Score]]) -> Judged:
    """A study's claims judged on its best group of ``runs`` (finished, newest first): the runs by config,
    each group with the seeds its runs hold (a seed two runs of one config both hold counts once).
    ``scores_of(run_ids, configs)`` judges the group (``configs``: each run's config by id)."""
    if runs.empty:
        return Judged(study, (), ())
    kind = STUDIES[study].kind
    configs = run_configs(runs)
    groups: dict[str, dict[str, Any]] = {}
    for r in runs.itertuples():  # newest first
        g = groups.setdefault(config_id(kind, configs[r.run_id]), {"runs": [], "seeds": set()})
        g["runs"].append(r.run_id)
        g["seeds"] |= seeds_of.get(r.run_id, set())
    best = best_group(groups)
    ids = groups[best]["runs"]
    return Judged(study, tuple(ids), tuple(sorted(groups[best]["seeds"])), best,
                  (config_without_seed(configs[ids[0]]),), span_of(configs[ids[0]]), scores_of(ids, configs))


def scoreboard(*, home: Path | None = None) -> list[Judged]:
    """Every judging study's claims, judged on its group of finished runs, in the studies' order: each
    study's ``judged(home)`` in its store module (``store/<study>.py``)."""
    return [study_module(name).judged(home) if s.judged_in_store else _judged(name, home)
            for name, s in STUDIES.items() if s.judges]


def _judged(name: str, home: Path | None) -> Judged:
    """A study's claims from its declared tables (``Study.scores``): no SQL of its own."""
    study = STUDIES[name]
    runs = list_runs(kind=study.kind, status="done", limit=None, home=home)
    ids = list(runs["run_id"])
    tables = {t: GROUPABLE[t].rows(ids, home=home) if ids else pd.DataFrame() for t in study.claim_tables}
    in_rows = [tables[t] for t in study.claim_tables if GROUPABLE[t].seeds_in_rows and not tables[t].empty]
    seeds_of = row_seeds(pd.concat(in_rows)) if in_rows else run_seeds(runs)

    def scores_of(group: list[str], configs: dict[str, Any]) -> list[Score]:
        return study.scores({t: rows[rows["run_id"].isin(group)] for t, rows in tables.items()},
                            {r: configs[r] for r in group})

    return judge_best(name, runs, seeds_of, scores_of)
