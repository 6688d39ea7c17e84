"""The trace-dilution study's queries (PAPER.md §1): identity decoding accuracy per feature and lag."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import export
from .queries import RUN_FILTER, RunIds, RunTable, id_list, query_frame, register_run_table


def dilution_accuracy(run_ids: RunIds = None, feature: str | None = None, *,
                      home: Path | None = None) -> pd.DataFrame:
    """Identity decoding accuracy per feature and lag: run_id, seed, feature, lag, accuracy, chance."""
    return query_frame(
        f"""SELECT t.run_id, r.seed, t.feature, t.lag, t.accuracy, t.chance
            FROM dilution_accuracy t JOIN runs r USING (run_id)
            WHERE {RUN_FILTER.format(col='t.run_id')} AND ($feature::VARCHAR IS NULL OR t.feature = $feature)
            ORDER BY t.run_id, t.feature, t.lag""",
        {"ids": id_list(run_ids), "feature": feature}, home,
    )


register_run_table("dilution_accuracy", RunTable(dilution_accuracy, ("feature", "lag"), ("accuracy", "chance")))
export.register_table("dilution_accuracy", "identity decoding accuracy per feature and lag, with chance")
