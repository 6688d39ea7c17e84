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
from typing import Any

import pandas as pd

from ema_core import depth_findings
from ema_core.boundary_findings import claim_verdicts, runs_reach
from ema_core.content_findings import HEADLINE_VARIANT, ablation_verdict, gap_verdicts, headline_verdict
from ema_core.scoreboard import STUDIES, Score, boundary_scores, content_scores, depth_scores, structure_scores
from ema_core.structure_findings import NGRAM_BASELINE, SPCN_HEADLINE, STRUCTURAL_ROLES, structure_verdicts
from store.boundary import boundary_accuracy, boundary_recall_state
from store.content import lm_final_losses, lm_runs, lm_token_class_pairs
from store.depth import depth_remix, depth_results
from store.queries import config_id, config_without_seed, list_runs
from store.structure import probe_accuracy, structure_headlines


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


def _best_group(groups: dict[str, dict[str, Any]]) -> str | None:
    """The group with the most seeds, the newest (listed first) on a tie."""
    if not groups:
        return None
    order = list(groups)
    return max(order, key=lambda g: (len(groups[g]["seeds"]), -order.index(g)))


def _configs(runs: pd.DataFrame) -> dict[str, dict]:
    return {r.run_id: json.loads(r.config) if isinstance(r.config, str) else None for r in runs.itertuples()}


def _structure(home: Path | None) -> Judged:
    kind = STUDIES["structure"].kind
    runs = list_runs(kind=kind, status="done", limit=None, home=home)
    configs = _configs(runs)
    groups: dict[str, dict[str, Any]] = {}
    for r in runs.itertuples():  # newest first
        g = groups.setdefault(config_id(kind, configs[r.run_id]), {"runs": [], "seeds": set()})
        g["runs"].append(r.run_id)
        if pd.notna(r.seed):
            g["seeds"].add(int(r.seed))
    best = _best_group(groups)
    if best is None:
        return Judged("structure", (), ())
    ids = groups[best]["runs"]
    headlines = structure_headlines(ids, STRUCTURAL_ROLES, SPCN_HEADLINE, NGRAM_BASELINE, home=home)
    overall = probe_accuracy(ids, role="overall", home=home)
    verdicts = structure_verdicts(headlines.to_dict("records"), overall.to_dict("records"))
    return Judged("structure", tuple(ids), tuple(sorted(groups[best]["seeds"])), best,
                  (config_without_seed(configs[ids[0]]),), 1, structure_scores(verdicts.claims))


def _groups_of_row_seeds(kind: str, runs: pd.DataFrame, configs: dict[str, dict],
                         rows: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The runs by config, each group with the seeds its rows hold: a run of a kind whose rows carry their
    own seeds (boundary, depth) holds several, and a seed two runs of one config both hold counts once."""
    seeds_of = rows.groupby("run_id")["seed"].agg(lambda s: {int(v) for v in s}).to_dict()
    groups: dict[str, dict[str, Any]] = {}
    for r in runs.itertuples():  # newest first
        g = groups.setdefault(config_id(kind, configs[r.run_id]), {"runs": [], "seeds": set()})
        g["runs"].append(r.run_id)
        g["seeds"] |= seeds_of.get(r.run_id, set())
    return groups


def _span(config: Any) -> int:
    """The seeds one run of ``config`` covers: its ``seeds`` (1 where it names none)."""
    span = config.get("seeds", 1) if isinstance(config, dict) else 1
    return span if isinstance(span, int) and span >= 1 else 1


def _boundary(home: Path | None) -> Judged:
    kind = STUDIES["boundary"].kind
    runs = list_runs(kind=kind, status="done", limit=None, home=home)
    if runs.empty:
        return Judged("boundary", (), ())
    configs = _configs(runs)
    rows = boundary_accuracy(list(runs["run_id"]), home=home)
    groups = _groups_of_row_seeds(kind, runs, configs, rows)
    best = _best_group(groups)
    ids = groups[best]["runs"]
    picked = rows[rows["run_id"].isin(ids)]
    verdicts = claim_verdicts(picked, reach=runs_reach(configs[r] for r in ids),
                              recall=boundary_recall_state(list(ids), home=home))
    return Judged("boundary", tuple(ids), tuple(sorted(groups[best]["seeds"])), best,
                  (config_without_seed(configs[ids[0]]),), _span(configs[ids[0]]), boundary_scores(verdicts))


def _depth(home: Path | None) -> Judged:
    kind = STUDIES["depth"].kind
    runs = list_runs(kind=kind, status="done", limit=None, home=home)
    if runs.empty:
        return Judged("depth", (), ())
    configs = _configs(runs)
    rows = depth_results(list(runs["run_id"]), home=home)
    groups = _groups_of_row_seeds(kind, runs, configs, rows)
    best = _best_group(groups)
    ids = groups[best]["runs"]
    # One config is one budget: its rows and remix rows are judged together.
    verdicts = depth_findings.claim_verdicts(rows[rows["run_id"].isin(ids)], depth_remix(list(ids), home=home))
    return Judged("depth", tuple(ids), tuple(sorted(groups[best]["seeds"])), best,
                  (config_without_seed(configs[ids[0]]),), _span(configs[ids[0]]), depth_scores(verdicts))


def _content(home: Path | None) -> Judged:
    runs = lm_runs(status="done", home=home)
    if runs.empty:
        return Judged("content", (), ())
    finals = lm_final_losses(list(runs["run_id"]), home=home)
    # A group's seeds are those at which SPEN linear and its GPT both finished: the headline's pairs.
    spen, gpt = HEADLINE_VARIANT, ("gpt", *HEADLINE_VARIANT[1:])
    groups: dict[str, dict[str, Any]] = {}
    for g in dict.fromkeys(runs["group_id"]):  # newest first
        part = finals[finals["group_id"] == g]
        held = {v: {int(s) for s in part.loc[(part["model"] == v[0]) & (part["predictor"] == v[1])
                                             & (part["attn_input"] == v[2]), "seed"]} for v in (spen, gpt)}
        groups[g] = {"runs": list(runs.loc[runs["group_id"] == g, "run_id"]), "seeds": held[spen] & held[gpt]}
    best = _best_group(groups)
    ids = groups[best]["runs"]
    picked = finals[finals["group_id"] == best].to_dict("records")
    part = runs[runs["group_id"] == best]
    # One config per variant (model, predictor, attention input), the newest run's.
    variants = part.drop_duplicates(["model", "predictor", "attn_input"])
    configs = tuple(config_without_seed(json.loads(c)) for c in variants["config"])
    scores = content_scores(headline_verdict(picked), ablation_verdict(picked),
                            gap_verdicts(lm_token_class_pairs(ids, home=home).to_dict("records")))
    return Judged("content", tuple(ids), tuple(sorted(groups[best]["seeds"])), best, configs, 1, scores)


def scoreboard(*, home: Path | None = None) -> list[Judged]:
    """Every study's claims, judged on its group of finished runs, in STUDIES' order."""
    readers = {"structure": _structure, "content": _content, "boundary": _boundary, "depth": _depth}
    return [readers[s](home) for s in STUDIES]
