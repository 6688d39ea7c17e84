"""The store's schema as numbered, append-only migrations.

A migration, once released, is never edited: a change is a new entry at the end.  ``db.migrate``
applies the pending ones in order, each in its own transaction, and records it in
``schema_migrations``; a file whose recorded version is above ``SCHEMA_VERSION`` was made by a
newer EMA Lab and is refused.

Times are naive ``TIMESTAMP`` values in UTC (run folders write ISO times with an offset; ingest
converts them), so that comparisons never depend on the reader's time zone.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from ema_core.protocol import Column, ResultTable
from ema_core.studies import STUDIES

APP_ID = "emalab"


class Migration(NamedTuple):
    version: int
    name: str
    statements: tuple[str, ...]


M001_INITIAL = Migration(1, "m001_initial", (
    # Tells our file from any other DuckDB file that happens to sit at the same path.
    "CREATE TABLE emalab_meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    f"INSERT INTO emalab_meta VALUES ('app', '{APP_ID}')",
    "CREATE TABLE schema_migrations "
    "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)",
    """CREATE TABLE runs (
        run_id       VARCHAR PRIMARY KEY,
        kind         VARCHAR NOT NULL,
        config       JSON,
        seed         BIGINT,
        status       VARCHAR,
        created_at   TIMESTAMP,
        started_at   TIMESTAMP,
        ended_at     TIMESTAMP,
        code_version VARCHAR,
        host         VARCHAR,
        summary      JSON,
        message      VARCHAR
    )""",
    # Long format: one row per (event, key).  ``seq`` rather than ``step`` is the key because a
    # resumed run may log the same step twice; seq counts events and makes ingest idempotent.
    # No secondary index on (run_id, key): ingest inserts one run's rows together, so DuckDB's
    # zone maps already skip other runs, and an ART index would slow every ingest.
    """CREATE TABLE metrics (
        run_id VARCHAR NOT NULL,
        seq    BIGINT NOT NULL,
        step   BIGINT,
        key    VARCHAR NOT NULL,
        value  DOUBLE,
        PRIMARY KEY (run_id, seq, key)
    )""",
    # Where ingest stopped in each run folder; moves in the same transaction as the rows it covers.
    """CREATE TABLE ingest_state (
        run_id          VARCHAR PRIMARY KEY,
        events_offset   BIGINT NOT NULL DEFAULT 0,
        result_ingested BOOLEAN NOT NULL DEFAULT false,
        bad_lines       BIGINT NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE dilution_accuracy (
        run_id   VARCHAR NOT NULL,
        feature  VARCHAR NOT NULL,
        lag      INTEGER NOT NULL,
        accuracy DOUBLE,
        chance   DOUBLE,
        PRIMARY KEY (run_id, feature, lag)
    )""",
    """CREATE TABLE probe_accuracy (
        run_id      VARCHAR NOT NULL,
        role        VARCHAR NOT NULL,
        feature_set VARCHAR NOT NULL,
        split       VARCHAR NOT NULL,
        accuracy    DOUBLE,
        PRIMARY KEY (run_id, role, feature_set, split)
    )""",
    """CREATE TABLE lm_eval (
        run_id VARCHAR NOT NULL,
        split  VARCHAR NOT NULL,
        loss   DOUBLE,
        ppl    DOUBLE,
        bpb    DOUBLE,
        PRIMARY KEY (run_id, split)
    )""",
    # Not tied to runs: a benchmark measures the code on a machine, not an experiment.
    """CREATE TABLE bench_figures (
        bench       VARCHAR NOT NULL,
        key         VARCHAR NOT NULL,
        value       DOUBLE,
        measured_at TIMESTAMP NOT NULL,
        machine     JSON,
        command     VARCHAR
    )""",
))

# The boundary map (ema_core.studies.boundary.experiment): one run holds several seeds, so the row's own
# ``seed`` is part of its key, beside the mixer, the task and the difficulty ("k=8", "pairs=16,T=64").
M002_BOUNDARY = Migration(2, "m002_boundary", (
    """CREATE TABLE boundary_accuracy (
        run_id       VARCHAR NOT NULL,
        mixer        VARCHAR NOT NULL,
        task         VARCHAR NOT NULL,
        difficulty   VARCHAR NOT NULL,
        seed         BIGINT NOT NULL,
        level        INTEGER,
        seq_len      INTEGER,
        accuracy     DOUBLE,
        dev_accuracy DOUBLE,
        chance       DOUBLE,
        lr           DOUBLE,
        train_loss   DOUBLE,
        state_floats BIGINT,
        params       BIGINT,
        PRIMARY KEY (run_id, mixer, task, difficulty, seed)
    )""",
))

# The boundary map's second form: each cell's exclusion floor (the best accuracy reachable without
# the position its label is about) and model width, every rate's dev curve, and MQAR recall against
# state size (a mixer at several widths, so the width is part of the key).  Rows of runs stored
# before it keep null in the new columns: they were measured without a floor.
M003_BOUNDARY_CURVES = Migration(3, "m003_boundary_curves", (
    "ALTER TABLE boundary_accuracy ADD COLUMN exclusion_floor DOUBLE",
    "ALTER TABLE boundary_accuracy ADD COLUMN d INTEGER",
    """CREATE TABLE boundary_dev_curve (
        run_id       VARCHAR NOT NULL,
        mixer        VARCHAR NOT NULL,
        task         VARCHAR NOT NULL,
        difficulty   VARCHAR NOT NULL,
        seed         BIGINT NOT NULL,
        d            INTEGER NOT NULL,
        lr           DOUBLE NOT NULL,
        step         BIGINT NOT NULL,
        dev_accuracy DOUBLE,
        PRIMARY KEY (run_id, mixer, task, difficulty, seed, d, lr, step)
    )""",
    """CREATE TABLE boundary_recall_state (
        run_id       VARCHAR NOT NULL,
        mixer        VARCHAR NOT NULL,
        difficulty   VARCHAR NOT NULL,
        d            INTEGER NOT NULL,
        seed         BIGINT NOT NULL,
        accuracy     DOUBLE,
        dev_accuracy DOUBLE,
        chance       DOUBLE,
        lr           DOUBLE,
        state_floats BIGINT,
        params       BIGINT,
        PRIMARY KEY (run_id, mixer, difficulty, d, seed)
    )""",
))

# A language model's held-out loss split by token (ema_core.lm.token_classes), at every evaluation:
# ``evaluation`` is "periodic" (the validation curve's) or "final" (the run's last evaluation, on its
# own number of tokens: at the last step both exist, hence part of the key); ``partition`` "class"
# (recall by distance, first, other) or "band" (training frequency).  ``loss`` is summed over the
# class, in nats, so that sums and counts add up across classes.  Runs stored before it have no rows.
M004_LM_TOKEN_CLASSES = Migration(4, "m004_lm_token_classes", (
    """CREATE TABLE lm_token_classes (
        run_id     VARCHAR NOT NULL,
        evaluation VARCHAR NOT NULL,
        step       BIGINT NOT NULL,
        partition  VARCHAR NOT NULL,
        class      VARCHAR NOT NULL,
        tokens     BIGINT,
        loss       DOUBLE,
        PRIMARY KEY (run_id, evaluation, step, partition, class)
    )""",
))

# What a person writes about a run (store/notes.py): a note and tags, one row per run.  The only
# table a person writes rather than ingest: ingest never touches it, so a note outlives any number of
# ingests of its run.  ``tags`` is a list, normalised before it is written (stripped, no commas, each
# once, in the order given); ``updated_at`` is the last write, in UTC.
M005_RUN_NOTES = Migration(5, "m005_run_notes", (
    """CREATE TABLE run_notes (
        run_id     VARCHAR PRIMARY KEY,
        note       VARCHAR NOT NULL DEFAULT '',
        tags       VARCHAR[] NOT NULL DEFAULT [],
        updated_at TIMESTAMP NOT NULL
    )""",
))

# Dilution in depth (ema_core.studies.depth.experiment): one row per cell of a run, which holds several seeds, so
# the cell's ``seed`` is part of the key beside its rule and depth (in blocks); d, params, lr and tokens
# follow from the config and the cell and are kept as columns.  Losses are nats/token, ``val_bpb`` bits per
# byte; the probes (accuracy, R²) are read on the trained model and, ``*_init``, on the same model at its
# initialisation.  ``depth_weights``: the weight the stream after block ``layer`` gives each earlier output
# ``source`` (0, the embedding, to ``layer``).
M006_DEPTH = Migration(6, "m006_depth", (
    """CREATE TABLE depth_results (
        run_id             VARCHAR NOT NULL,
        rule               VARCHAR NOT NULL,
        depth              INTEGER NOT NULL,
        seed               BIGINT NOT NULL,
        d                  INTEGER,
        params             BIGINT,
        lr                 DOUBLE,
        tokens             BIGINT,
        train_loss         DOUBLE,
        val_loss           DOUBLE,
        val_bpb            DOUBLE,
        probe_token        DOUBLE,
        probe_token_chance DOUBLE,
        probe_early        DOUBLE,
        probe_token_init   DOUBLE,
        probe_early_init   DOUBLE,
        seconds            DOUBLE,
        PRIMARY KEY (run_id, rule, depth, seed)
    )""",
    """CREATE TABLE depth_weights (
        run_id VARCHAR NOT NULL,
        rule   VARCHAR NOT NULL,
        depth  INTEGER NOT NULL,
        seed   BIGINT NOT NULL,
        layer  INTEGER NOT NULL,
        source INTEGER NOT NULL,
        weight DOUBLE,
        PRIMARY KEY (run_id, rule, depth, seed, layer, source)
    )""",
))

# The boundary map's redundancy dial: each agreement cell's ρ, the share of its rows drawn from the
# sentence templates (its difficulty names it too, "k=16,rho=0.5"); null for the tasks without one
# (MQAR, the lag task) and for rows of runs stored before it (their ρ is their config's structure).
M007_BOUNDARY_REDUNDANCY = Migration(7, "m007_boundary_redundancy", (
    "ALTER TABLE boundary_accuracy ADD COLUMN redundancy DOUBLE",
))

# The depth study's controls: the probes with room to move (block 1's write less what the embedding
# explains, the previous token's identity), each also at initialisation; how spread the mixing weights
# are (0 to 1); the weights at every evaluation; and the remix test (a trained sum model frozen, only
# depth weights fitted on it: its held-out loss before, ``base_loss``, and after, ``val_loss``).  Null in
# rows of runs stored before them.
M008_DEPTH_CONTROLS = Migration(8, "m008_depth_controls", (
    "ALTER TABLE depth_results ADD COLUMN probe_early_resid DOUBLE",
    "ALTER TABLE depth_results ADD COLUMN probe_early_resid_init DOUBLE",
    "ALTER TABLE depth_results ADD COLUMN probe_prev DOUBLE",
    "ALTER TABLE depth_results ADD COLUMN probe_prev_init DOUBLE",
    "ALTER TABLE depth_results ADD COLUMN probe_prev_chance DOUBLE",
    "ALTER TABLE depth_results ADD COLUMN mix_entropy DOUBLE",
    """CREATE TABLE depth_weight_steps (
        run_id VARCHAR NOT NULL,
        rule   VARCHAR NOT NULL,
        depth  INTEGER NOT NULL,
        seed   BIGINT NOT NULL,
        step   BIGINT NOT NULL,
        layer  INTEGER NOT NULL,
        source INTEGER NOT NULL,
        weight DOUBLE,
        PRIMARY KEY (run_id, rule, depth, seed, step, layer, source)
    )""",
    """CREATE TABLE depth_remix (
        run_id    VARCHAR NOT NULL,
        rule      VARCHAR NOT NULL,
        depth     INTEGER NOT NULL,
        seed      BIGINT NOT NULL,
        steps     BIGINT,
        lr        DOUBLE,
        val_loss  DOUBLE,
        base_loss DOUBLE,
        PRIMARY KEY (run_id, rule, depth, seed)
    )""",
))

# The content study's language-model runs were kind "lm" before the study had a folder of its own:
# their rows take its name (their run folders keep theirs; ingest reads them as today's,
# ``rundir.current_kind``), so every query and export says one name.
M009_CONTENT_KIND = Migration(9, "m009_content_kind", (
    "UPDATE runs SET kind = 'content' WHERE kind = 'lm'",
))

MIGRATIONS: tuple[Migration, ...] = (M001_INITIAL, M002_BOUNDARY, M003_BOUNDARY_CURVES, M004_LM_TOKEN_CLASSES,
                                     M005_RUN_NOTES, M006_DEPTH, M007_BOUNDARY_REDUNDANCY, M008_DEPTH_CONTROLS,
                                     M009_CONTENT_KIND)
SCHEMA_VERSION = MIGRATIONS[-1].version


# The result tables a run's result.json may fill (``result["tables"][name]`` is a list of rows).
RESULT_TABLES: dict[str, tuple[Column, ...]] = {
    "dilution_accuracy": (Column("feature", str, True), Column("lag", int, True),
                          Column("accuracy", float, False), Column("chance", float, False)),
    "probe_accuracy": (Column("role", str, True), Column("feature_set", str, True),
                       Column("split", str, True), Column("accuracy", float, False)),
    "lm_eval": (Column("split", str, True), Column("loss", float, False),
                Column("ppl", float, False), Column("bpb", float, False)),
    "boundary_accuracy": (Column("mixer", str, True), Column("task", str, True), Column("difficulty", str, True),
                          Column("seed", int, True), Column("level", int, False), Column("seq_len", int, False),
                          Column("accuracy", float, False), Column("dev_accuracy", float, False),
                          Column("chance", float, False), Column("lr", float, False),
                          Column("train_loss", float, False), Column("state_floats", int, False),
                          Column("params", int, False), Column("exclusion_floor", float, False),
                          Column("d", int, False), Column("redundancy", float, False)),
    "boundary_dev_curve": (Column("mixer", str, True), Column("task", str, True), Column("difficulty", str, True),
                           Column("seed", int, True), Column("d", int, True), Column("lr", float, True),
                           Column("step", int, True), Column("dev_accuracy", float, False)),
    "boundary_recall_state": (Column("mixer", str, True), Column("difficulty", str, True), Column("d", int, True),
                              Column("seed", int, True), Column("accuracy", float, False),
                              Column("dev_accuracy", float, False), Column("chance", float, False),
                              Column("lr", float, False), Column("state_floats", int, False),
                              Column("params", int, False)),
    "lm_token_classes": (Column("evaluation", str, True), Column("step", int, True), Column("partition", str, True),
                         Column("class", str, True), Column("tokens", int, False), Column("loss", float, False)),
    "depth_results": (Column("rule", str, True), Column("depth", int, True), Column("seed", int, True),
                      Column("d", int, False), Column("params", int, False), Column("lr", float, False),
                      Column("tokens", int, False), Column("train_loss", float, False),
                      Column("val_loss", float, False), Column("val_bpb", float, False),
                      Column("probe_token", float, False), Column("probe_token_chance", float, False),
                      Column("probe_early", float, False), Column("probe_token_init", float, False),
                      Column("probe_early_init", float, False), Column("seconds", float, False),
                      Column("probe_early_resid", float, False), Column("probe_early_resid_init", float, False),
                      Column("probe_prev", float, False), Column("probe_prev_init", float, False),
                      Column("probe_prev_chance", float, False), Column("mix_entropy", float, False)),
    "depth_weights": (Column("rule", str, True), Column("depth", int, True), Column("seed", int, True),
                      Column("layer", int, True), Column("source", int, True), Column("weight", float, False)),
    "depth_weight_steps": (Column("rule", str, True), Column("depth", int, True), Column("seed", int, True),
                           Column("step", int, True), Column("layer", int, True), Column("source", int, True),
                           Column("weight", float, False)),
    "depth_remix": (Column("rule", str, True), Column("depth", int, True), Column("seed", int, True),
                    Column("steps", int, False), Column("lr", float, False), Column("val_loss", float, False),
                    Column("base_loss", float, False)),
}


def declared_tables() -> dict[str, ResultTable]:
    """The result tables the studies declare (``Study.tables``), in the studies' order: made from their
    declaration after the numbered migrations (:func:`declared_statement`), never by one."""
    out: dict[str, ResultTable] = {}
    for study in STUDIES.values():
        for t in study.tables:
            if t.name in RESULT_TABLES or t.name in out:
                raise ValueError(f"the study {study.name!r} declares a table {t.name!r} the store already has")
            bad = [n for n in (t.name, *(c.name for c in t.columns)) if not _IDENTIFIER.fullmatch(n)]
            bad += [c.name for c in t.columns if c.type not in _SQL_TYPES or c.name == "run_id"]
            if bad or not t.columns:
                raise ValueError(f"the study {study.name!r} declares the table {t.name!r} with bad names or types: "
                                 f"{', '.join(bad) or 'no columns'} (names: lower case, digits and _; types: str, "
                                 "int or float; run_id is the store's)")
            out[t.name] = t
    return out


_SQL_TYPES = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE"}
# A declared name goes into SQL text: only these ever do.
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]{0,62}")


def declared_statement(table: ResultTable) -> str:
    """The CREATE TABLE of a declared result table: run_id, then its columns; the key is run_id and its
    key columns."""
    cols = [f"{c.name} {_SQL_TYPES[c.type]}{' NOT NULL' if c.key else ''}" for c in table.columns]
    key = ", ".join(("run_id", *table.keys))
    return f"CREATE TABLE {table.name} (run_id VARCHAR NOT NULL, {', '.join(cols)}, PRIMARY KEY ({key}))"


def result_tables() -> dict[str, tuple[Column, ...]]:
    """Every result table a run's result.json may fill: the migrations' and the studies' declared ones."""
    return {**RESULT_TABLES, **{name: t.columns for name, t in declared_tables().items()}}
