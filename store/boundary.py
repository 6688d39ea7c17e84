"""The boundary study's queries (PAPER.md §4.4): every context mixer's accuracy on structure and content
tasks, distance by distance; recall against state size; every rate's dev curve.  Its runs are
``queries.list_runs(kind="boundary")``; its verdicts are :mod:`ema_core.studies.boundary.findings`' on the
``boundary_accuracy`` rows."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ema_core.mixers import MIXER_NAMES
from ema_core.studies.boundary import KIND
from ema_core.studies.boundary.findings import TASK_ORDER, claim_verdicts, runs_reach, scores

from . import export
from .queries import RUN_FILTER, RunIds, RunTable, id_list, list_runs, query_frame, register_run_table
from .scoreboard import Judged, judge_best, row_seeds


def boundary_accuracy(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """Every cell's accuracy: run_id, seed (the cell's: a run holds several), run_seed (the run's, its
    first), mixer, task, difficulty, level, seq_len, accuracy (test), dev_accuracy, chance,
    exclusion_floor (the best accuracy without position t − k, or MQAR's best without binding; null
    on runs stored before it), d (the cell's model width; null likewise), redundancy (ρ, the agreement
    tasks' share of template rows; null for the other tasks and on runs stored before it), lr (chosen
    on dev), train_loss, state_floats, params.

    Mixers in the hierarchy's order (a researcher's own after them, by name), tasks in the
    study's order, then by level (k, or MQAR's pairs), MQAR's length, seed and run.
    """
    return query_frame(
        f"""SELECT t.run_id, t.seed, r.seed AS run_seed, t.mixer, t.task, t.difficulty, t.level, t.seq_len,
                   t.accuracy, t.dev_accuracy, t.chance, t.exclusion_floor, t.d, t.redundancy, t.lr, t.train_loss,
                   t.state_floats, t.params
            FROM boundary_accuracy t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')}
            ORDER BY list_position($mixers::VARCHAR[], t.mixer) NULLS LAST, t.mixer,
                     list_position($tasks::VARCHAR[], t.task) NULLS LAST, t.task,
                     t.level, t.seq_len, t.difficulty, t.seed, t.run_id""",
        {"ids": id_list(run_ids), "mixers": list(MIXER_NAMES), "tasks": list(TASK_ORDER)}, home,
    )


def boundary_dev_curve(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """Every rate's dev accuracy at every evaluation of every cell: run_id, seed, mixer, task, difficulty,
    d (the model width: the map's cells at the body's, recall-against-state cells at theirs), lr, step,
    dev_accuracy.  Empty for runs stored before the curves were (they hold none).

    In the map's order (mixers, tasks, difficulty), then width, seed, rate and step.
    """
    return query_frame(
        f"""SELECT t.run_id, t.seed, t.mixer, t.task, t.difficulty, t.d, t.lr, t.step, t.dev_accuracy
            FROM boundary_dev_curve t
            WHERE {RUN_FILTER.format(col='t.run_id')}
            ORDER BY list_position($mixers::VARCHAR[], t.mixer) NULLS LAST, t.mixer,
                     list_position($tasks::VARCHAR[], t.task) NULLS LAST, t.task,
                     t.difficulty, t.d, t.seed, t.lr, t.step, t.run_id""",
        {"ids": id_list(run_ids), "mixers": list(MIXER_NAMES), "tasks": list(TASK_ORDER)}, home,
    )


def boundary_recall_state(run_ids: RunIds = None, *, home: Path | None = None) -> pd.DataFrame:
    """MQAR recall against the state a mixer keeps (zoology's view): run_id, seed, mixer, difficulty, d
    (the model width), accuracy (test), dev_accuracy, chance, lr, state_floats, params; the recurrent
    mixers at several widths, softmax and the window at the body's.  Empty for runs stored before it.

    Mixers in the hierarchy's order, then by size, state and seed.
    """
    return query_frame(
        f"""SELECT t.run_id, t.seed, t.mixer, t.difficulty, t.d, t.accuracy, t.dev_accuracy, t.chance, t.lr,
                   t.state_floats, t.params
            FROM boundary_recall_state t
            WHERE {RUN_FILTER.format(col='t.run_id')}
            ORDER BY list_position($mixers::VARCHAR[], t.mixer) NULLS LAST, t.mixer, t.difficulty,
                     t.state_floats, t.d, t.seed, t.run_id""",
        {"ids": id_list(run_ids), "mixers": list(MIXER_NAMES)}, home,
    )


# Keyed by the cell (level, seq_len, state_floats and params follow from it: kept as columns, never
# averaged); the rows carry their own seeds, in the order of the query above.
register_run_table("boundary_accuracy", RunTable(
    boundary_accuracy, ("mixer", "task", "difficulty", "level", "seq_len", "d", "redundancy", "state_floats",
                        "params"),
    ("accuracy", "dev_accuracy", "chance", "exclusion_floor", "lr", "train_loss"), seeds_in_rows=True,
    ordered=True))
register_run_table("boundary_dev_curve", RunTable(
    boundary_dev_curve, ("mixer", "task", "difficulty", "d", "lr", "step"), ("dev_accuracy",), seeds_in_rows=True,
    ordered=True))
register_run_table("boundary_recall_state", RunTable(
    boundary_recall_state, ("mixer", "difficulty", "d", "state_floats", "params"),
    ("accuracy", "dev_accuracy", "chance", "lr"), seeds_in_rows=True, ordered=True))
export.register_table("boundary_accuracy", "test accuracy of every context mixer per task and difficulty, "
                                           "with chance, the exclusion floor, the redundancy ρ, the state floats "
                                           "and the learning rate chosen on dev")
export.register_table("boundary_dev_curve", "dev accuracy of every learning rate of every cell at every evaluation")
export.register_table("boundary_recall_state", "MQAR test accuracy against the state a mixer keeps, at several "
                                               "model widths")


def judged(home: Path | None = None) -> Judged:
    """The boundary map's claims on the Overview's scoreboard, judged on its best group of finished runs."""
    runs = list_runs(kind=KIND, status="done", limit=None, home=home)
    rows = boundary_accuracy(list(runs["run_id"]), home=home) if not runs.empty else pd.DataFrame()

    def scores_of(ids: list[str], configs: dict) -> list:
        return scores(claim_verdicts(rows[rows["run_id"].isin(ids)], reach=runs_reach(configs[r] for r in ids),
                                     recall=boundary_recall_state(ids, home=home)))

    return judge_best("boundary", runs, row_seeds(rows), scores_of)
