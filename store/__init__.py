"""The DuckDB store: schema and migrations, the single writer (ingest), queries, exports.

Workers never open the store; they write run folders (``ema_core.rundir``), and ``ingest`` copies
them in.  Pages and the CLI read through ``queries`` (what every study shares), ``export``, and one
file per study: ``dilution``, ``structure``, ``content``, ``boundary`` and ``depth`` hold that study's
queries and declare its tables to the generic ones.

Damage is said, never repaired:

- a store file DuckDB cannot read whole (cut short, a block that fails its checksum) raises
  ``DamagedStoreError`` in one line naming the file, and is never opened for writing;
- a run whose ``result.json`` cannot be read (empty, binary, not JSON, not an object) is an ingest
  error naming the file; its ``runs`` row keeps the summary of the last good result, and its
  ``message`` starts with ``"damaged: "`` (``ingest.DAMAGED``) followed by the problem, until a
  readable result is back.
"""
from ema_core.rundir import StorageError

from .db import (DamagedStoreError, ForeignStoreError, NotAStoreError, StoreBusy, StoreError, StoreVersionError,
                 check, migrate, migrate_store, open_store, store_path)
from .export import (EMPTY, EXPORT_TABLES, FORMATS, export_table, exports_dir, mean_std_cells, render_table,
                     table_frame)
from .ingest import ResultError, ingest, record_bench
from .notes import UnknownRunError, normalise_tags, run_notes, set_note, tags_in_use
from .queries import (GROUPABLE, bench_figures, config_diff, config_id, config_without_seed, final_metrics, grouped,
                      list_runs, metric_keys, metric_series, query_frame, run_detail, store_summary)
from .schema import SCHEMA_VERSION

# Each study's queries (store/<study>.py, where it has SQL of its own) are imported here, so that their
# tables are registered (queries.GROUPABLE, export.EXPORT_TABLES) whichever module of the store is
# imported first; in the studies' order, the order exports list them.
from .studies import load_study_modules  # isort: skip

load_study_modules()

__all__ = [
    "DamagedStoreError", "EMPTY", "EXPORT_TABLES", "FORMATS", "ForeignStoreError", "GROUPABLE", "NotAStoreError",
    "ResultError", "SCHEMA_VERSION", "StorageError", "StoreBusy", "StoreError", "StoreVersionError",
    "UnknownRunError", "bench_figures", "check", "config_diff", "config_id", "config_without_seed",
    "export_table", "exports_dir", "final_metrics", "grouped", "ingest",
    "list_runs", "mean_std_cells", "metric_keys", "metric_series", "migrate", "migrate_store", "normalise_tags",
    "open_store", "query_frame", "record_bench", "render_table", "run_detail", "run_notes", "set_note", "store_path",
    "store_summary", "table_frame", "tags_in_use",
]
