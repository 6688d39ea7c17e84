"""The depth study's queries (PAPER.md §4 item 5): every residual rule's held-out loss and probes at every
depth, and the weights each block's stream gives the outputs before it.  Its runs are
``queries.list_runs(kind="depth")``; its verdicts are :mod:`ema_core.studies.depth.findings`' on the
``depth_results`` rows."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ema_core.depth import RULES
from ema_core.studies.depth import KIND
from ema_core.studies.depth.findings import claim_verdicts, scores

from . import export
from .queries import RUN_FILTER, RunIds, RunTable, id_list, list_runs, query_frame, register_run_table
from .scoreboard import Judged, judge_best, row_seeds


def depth_results(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """Every cell: run_id, seed (the cell's: a run holds several), run_seed (the run's, its first), rule,
    depth (blocks), d, params, lr, tokens, train_loss, val_loss (nats/token), val_bpb (bits/byte),
    probe_token (accuracy), probe_token_chance, probe_early (R²), probe_early_resid (R²), probe_prev
    (accuracy), probe_prev_chance, each probe at initialisation (``*_init``), mix_entropy, seconds.

    Rules in the paper's predicted order, worst first (a rule of no RULES after them, by name), then by
    depth, seed and run.
    """
    return query_frame(
        f"""SELECT t.run_id, t.seed, r.seed AS run_seed, t.rule, t.depth, t.d, t.params, t.lr, t.tokens,
                   t.train_loss, t.val_loss, t.val_bpb, t.probe_token, t.probe_token_chance, t.probe_early,
                   t.probe_token_init, t.probe_early_init, t.probe_early_resid, t.probe_early_resid_init,
                   t.probe_prev, t.probe_prev_init, t.probe_prev_chance, t.mix_entropy, t.seconds
            FROM depth_results t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')}
            ORDER BY list_position($rules::VARCHAR[], t.rule) NULLS LAST, t.rule, t.depth, t.seed, t.run_id""",
        {"ids": id_list(run_ids), "rules": list(RULES)}, home,
    )


def depth_weights(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """The weight the stream after block ``layer`` gives each earlier output ``source`` (0: the embedding):
    run_id, seed, rule, depth, layer, source, weight.

    Rules in the paper's predicted order, then by depth, seed and run, then layer and source.
    """
    return query_frame(
        f"""SELECT t.run_id, t.seed, t.rule, t.depth, t.layer, t.source, t.weight
            FROM depth_weights t
            WHERE {RUN_FILTER.format(col='t.run_id')}
            ORDER BY list_position($rules::VARCHAR[], t.rule) NULLS LAST, t.rule, t.depth, t.seed, t.run_id,
                     t.layer, t.source""",
        {"ids": id_list(run_ids), "rules": list(RULES)}, home,
    )


def depth_weight_steps(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """The weights of :func:`depth_weights` at every evaluation of training (``step``, 0 the
    initialisation), for every rule but ``sum``: run_id, seed, rule, depth, step, layer, source, weight."""
    return query_frame(
        f"""SELECT t.run_id, t.seed, t.rule, t.depth, t.step, t.layer, t.source, t.weight
            FROM depth_weight_steps t
            WHERE {RUN_FILTER.format(col='t.run_id')}
            ORDER BY list_position($rules::VARCHAR[], t.rule) NULLS LAST, t.rule, t.depth, t.seed, t.run_id,
                     t.step, t.layer, t.source""",
        {"ids": id_list(run_ids), "rules": list(RULES)}, home,
    )


def depth_remix(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """The remix test: per (depth, seed) and fitted rule, the frozen sum model's held-out loss
    (``base_loss``) and the remixed one's (``val_loss``): run_id, seed, rule, depth, steps, lr, val_loss,
    base_loss, with tokens (the sum model's, per model: the run's budget)."""
    return query_frame(
        f"""SELECT t.run_id, t.seed, t.rule, t.depth, t.steps, t.lr, t.val_loss, t.base_loss, s.tokens
            FROM depth_remix t
            LEFT JOIN depth_results s ON s.run_id = t.run_id AND s.rule = 'sum' AND s.depth = t.depth
                                      AND s.seed = t.seed
            WHERE {RUN_FILTER.format(col='t.run_id')}
            ORDER BY list_position($rules::VARCHAR[], t.rule) NULLS LAST, t.rule, t.depth, t.seed, t.run_id""",
        {"ids": id_list(run_ids), "rules": list(RULES)}, home,
    )


# Keyed by the cell (d, params and tokens follow from it and the config: kept as columns, never averaged);
# the rows carry their own seeds, in the study's order (rules worst first, not alphabetical).
register_run_table("depth_results", RunTable(
    depth_results, ("rule", "depth", "d", "params", "tokens"),
    ("val_loss", "val_bpb", "train_loss", "probe_token", "probe_token_chance", "probe_early", "probe_token_init",
     "probe_early_init", "probe_early_resid", "probe_early_resid_init", "probe_prev", "probe_prev_init",
     "probe_prev_chance", "mix_entropy", "lr", "seconds"), seeds_in_rows=True, ordered=True))
register_run_table("depth_weights", RunTable(
    depth_weights, ("rule", "depth", "layer", "source"), ("weight",), seeds_in_rows=True, ordered=True))
register_run_table("depth_weight_steps", RunTable(
    depth_weight_steps, ("rule", "depth", "step", "layer", "source"), ("weight",), seeds_in_rows=True, ordered=True))
register_run_table("depth_remix", RunTable(
    depth_remix, ("rule", "depth", "steps", "tokens"), ("val_loss", "base_loss", "lr"), seeds_in_rows=True,
    ordered=True))
export.register_table("depth_results", "held-out loss, bits per byte and the two probes (trained and at "
                                       "initialisation) of every residual rule at every depth")
export.register_table("depth_weights", "the weight each block's stream gives every earlier output, per rule "
                                       "and depth")
export.register_table("depth_weight_steps", "the mixing weights at every evaluation of training, per rule, depth, "
                                            "layer and source")
export.register_table("depth_remix", "the remix test: a trained fixed-sum model frozen, only depth weights fitted "
                                     "on it; its held-out loss before and after")


def judged(home: Path | None = None) -> Judged:
    """The depth study's claims on the Overview's scoreboard, judged on its best group of finished runs (one
    config is one budget: its rows and remix rows are judged together)."""
    runs = list_runs(kind=KIND, status="done", limit=None, home=home)
    rows = depth_results(list(runs["run_id"]), home=home) if not runs.empty else pd.DataFrame()

    def scores_of(ids: list[str], configs: dict) -> list:
        return scores(claim_verdicts(rows[rows["run_id"].isin(ids)], depth_remix(ids, home=home)))

    return judge_best("depth", runs, row_seeds(rows), scores_of)
