"""Token classes from the lm run to the paper: a real tiny run splits the loss of every evaluation by token
class and band, its summary holds the final split, the store keeps the rows (``lm_token_classes``, added
by migration 4) and exports them labelled; a cancelled run resumes to the same rows, also from a
checkpoint written before the split, and a store file of the release before is migrated keeping its rows."""
import contextlib
import copy
import io
import math

import duckdb
import pandas as pd
import pytest

from ema_core.experiments import REGISTRY, Cancelled, NullReporter, build_config
from ema_core.lm.token_classes import SPLITS
from ema_core.lm.train import CLASS_SPLITS
from ema_core.studies import STUDIES
from ema_core.rundir import RunDir, run_id_for
from jobs import cli
from lm_fixture import SPECS, TINY, make_lm_runs
from store import schema
from store.content import LM_LABELS, lm_eval, lm_runs, lm_token_class_pairs, lm_token_classes
from store.db import check, open_store, store_path
from store.export import exports_dir, render_table
from store.ingest import ingest
from store.queries import metric_series

KIND = STUDIES["content"].kind
TABLE = "lm_token_classes"
SEEDS = (0, 1)
# TINY evaluates every 2 of its 6 steps, then once more at the end on more tokens.
EVALUATIONS = [("periodic", 2), ("periodic", 4), ("periodic", 6), ("final", 6), ("bigram", 6), ("cache", 6),
               ("kn_trigram", 6), ("copy_mix", 6)]
PARTITIONS = tuple((s.partition, s.classes) for s in SPLITS)
ALL_CLASSES = [c for _, names in PARTITIONS for c in names]  # every partition's, in order (not_recall twice)
COLUMNS = ["run_id", "seed", *LM_LABELS, "evaluation", "step", "partition", "class", "tokens", "loss",
           "loss_per_token"]


@pytest.fixture(scope="module")
def lm_home(tmp_path_factory):
    """Real tiny runs of SPEN (linear predictor), two seeds, as finished jobs leave them, ingested."""
    home = tmp_path_factory.mktemp("token_classes") / "home"
    return home, make_lm_runs(home, ("linear",), SEEDS)


@pytest.fixture
def runs(lm_home, monkeypatch):
    home, run_ids = lm_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    return run_ids


def _rows_of(rows, evaluation, step, partition):
    return [r for r in rows if (r["evaluation"], r["step"], r["partition"]) == (evaluation, step, partition)]


def test_a_real_run_splits_every_evaluation_and_its_summary_adds_up_to_the_loss(runs):
    for run_id in runs:
        result = RunDir.for_id(run_id).read_result()
        s, rows = result["summary"], result["tables"][TABLE]
        # The summary: the final evaluation's split as nats per token, giving back val_loss weighted by tokens.
        assert CLASS_SPLITS == tuple(s.key for s in SPLITS)
        for key, names in ((s.key, s.classes) for s in SPLITS):
            parts = s[key]
            assert set(parts) == set(names)
            assert sum(p["tokens"] for p in parts.values()) == s["val_tokens"] == TINY["final_eval_tokens"]
            total = sum(p["tokens"] * p["loss"] for p in parts.values() if p["tokens"])
            assert total / s["val_tokens"] == pytest.approx(s["val_loss"], abs=1e-6)
        # 32-token windows hold no bigram 257 tokens back: a class with no tokens has no mean, not 0/0.
        assert s["token_classes"]["recall_257_plus"] == {"tokens": 0, "loss": None}
        assert s["token_classes"]["first"]["tokens"] > 0 and s["token_classes"]["recall_1_16"]["tokens"] > 0

        # The result table: every class and every band at every evaluation, the final one marked.
        assert sorted({(r["evaluation"], r["step"]) for r in rows}, key=EVALUATIONS.index) == EVALUATIONS
        assert len(rows) == len(EVALUATIONS) * (len(ALL_CLASSES))
        logged = metric_series(run_id, "val/loss").set_index("step")["value"]
        for evaluation, step in EVALUATIONS:
            for partition, names in PARTITIONS:
                part = _rows_of(rows, evaluation, step, partition)
                assert [r["class"] for r in part] == list(names)
                tokens = sum(r["tokens"] for r in part)
                assert tokens == (TINY["eval_tokens"] if evaluation == "periodic" else s["val_tokens"])
                # Summed nats: each evaluation's classes add up to the loss it reported.
                loss = {"periodic": logged[step], "final": s["val_loss"]}.get(evaluation)
                loss = s["baselines"][evaluation]["val_loss"] if loss is None else loss
                assert sum(r["loss"] for r in part) / tokens == pytest.approx(loss, abs=1e-6)
        for r in _rows_of(rows, "final", 6, "class"):
            p = s["token_classes"][r["class"]]
            assert p["tokens"] == r["tokens"] and p["loss"] == (r["loss"] / r["tokens"] if r["tokens"] else None)


def test_ingested_into_a_duckdb_file_the_rows_come_back_labelled(runs):
    results = {run_id: RunDir.for_id(run_id).read_result() for run_id in runs}
    conn = duckdb.connect(str(store_path()), read_only=True)
    try:
        counts = dict(conn.execute(f"SELECT run_id, count(*) FROM {TABLE} GROUP BY run_id").fetchall())
    finally:
        conn.close()
    assert counts == {run_id: len(r["tables"][TABLE]) for run_id, r in results.items()}

    df = lm_token_classes(runs)
    assert list(df.columns) == COLUMNS
    assert set(df["model"]) == {"spen"} and set(df["predictor"]) == {"linear"} and set(df["size"]) == {"tiny"}
    assert set(df["corpus"]) == {"austen"} and (df["params"] > 0).all() and df["lr"].notna().all()
    own = ["evaluation", "step", "partition", "class", "tokens", "loss"]
    for run_id, result in results.items():
        mine = df[df["run_id"] == run_id]
        # Every number as the run wrote it, in the run's order: the curve's evaluations, then the final;
        # classes in their own order, then bands.
        assert mine[own].to_dict("records") == result["tables"][TABLE]
        per_token = [r["loss"] / r["tokens"] if r["tokens"] else None for r in result["tables"][TABLE]]
        assert [None if math.isnan(v) else v for v in mine["loss_per_token"]] == pytest.approx(per_token)
    final = lm_token_classes(runs, evaluation="final")
    assert len(final) == len(runs) * (len(ALL_CLASSES)) and set(final["step"]) == {TINY["steps"]}


def test_the_pairs_query_holds_the_same_rows_with_settings_and_training_tokens(runs):
    """lm_token_class_pairs (the Content page's token-class section reads it): the rows of lm_token_classes,
    in their order, with the run's group, training tokens by each step, and no GPT among SPEN-only runs."""
    pairs = lm_token_class_pairs(runs)
    own = lm_token_classes(runs)
    cols = ["run_id", "seed", "evaluation", "step", "partition", "class", "tokens", "loss"]
    assert pairs[cols].to_dict("records") == own[cols].to_dict("records")
    assert pairs["gpt_run_id"].isna().all()
    info = lm_runs(runs).set_index("run_id")
    assert (pairs["group_id"] == info.loc[pairs["run_id"], "group_id"].to_numpy()).all()
    per_step = info.loc[pairs["run_id"], "tokens_per_step"].to_numpy()
    assert (pairs["tokens_seen"] == pairs["step"] * per_step).all() and per_step[0] == TINY["batch"] * TINY["seq_len"]
    final = lm_token_class_pairs(runs, "final")
    assert set(final["evaluation"]) == {"final"} and len(final) == len(runs) * (len(ALL_CLASSES))


def test_the_export_names_the_classes_in_every_format_and_groups_over_seeds(runs):
    csv = pd.read_csv(io.StringIO(render_table(TABLE, "csv")))
    assert list(csv.columns) == COLUMNS
    assert set(csv["class"]) == set(ALL_CLASSES) and set(csv["evaluation"]) == {e for e, _ in EVALUATIONS}
    md = render_table(TABLE, "markdown")
    assert all(f"| {name} |" in md for name in ALL_CLASSES)
    tex = render_table(TABLE, "latex")
    assert r"\label{tab:lm_token_classes}" in tex and r"\caption{" in tex
    assert all(name.replace("_", r"\_") in tex for name in ALL_CLASSES)

    # Grouped: one row per (evaluation, step, partition, class), mean ± std over the two seeds, in the
    # classes' own order.
    g = pd.read_csv(io.StringIO(render_table(TABLE, "csv", grouped=True)))
    assert len(g) == len(EVALUATIONS) * (len(ALL_CLASSES))
    assert (g["n"] == len(SEEDS)).all() and set(g["seeds"]) == {"0,1"}
    assert g["class"].tolist()[: len(ALL_CLASSES)] == ALL_CLASSES
    # Every seed reads the same held-out text: a class's tokens are a column of the group, not averaged.
    assert "tokens_mean" not in g and g["tokens"].tolist() == csv[csv["seed"] == 0]["tokens"].tolist()
    first = csv[(csv["evaluation"] == "final") & (csv["class"] == "first")]
    row = g[(g["evaluation"] == "final") & (g["class"] == "first")].iloc[0]
    assert row["loss_mean"] == pytest.approx(first["loss"].mean())
    assert row["loss_std"] == pytest.approx(first["loss"].std())
    gtex = render_table(TABLE, "latex", grouped=True)
    assert r"$\pm$" in gtex and r"recall\_1\_16" in gtex and r"\label{tab:lm_token_classes_grouped}" in gtex
    assert "recall_17_64" in render_table(TABLE, "markdown", grouped=True)

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["export", "--table", TABLE, "--format", "latex", "--grouped"])
    assert rc == 0, err.getvalue()
    assert r"recall\_1\_16" in (exports_dir() / f"{TABLE}-grouped.tex").read_text(encoding="utf-8")


def test_a_cancelled_run_resumes_to_the_same_rows_also_from_a_checkpoint_before_the_split(runs):
    cfg = build_config(KIND, preset="quick", overrides={**TINY, **SPECS["linear"], "checkpoint_every": 2}, seed=0)
    exp = REGISTRY[KIND]
    whole = exp.run(cfg, NullReporter())
    # Cancelled at step 2, resumed: the class sums of step 2 came back from the checkpoint, bit for bit.
    rep = NullReporter(stop_after_checkpoints=1)
    with pytest.raises(Cancelled) as info:
        exp.run(cfg, rep)
    assert info.value.step == 2
    rep.stop_after_checkpoints = None
    resumed = exp.run(cfg, rep)
    assert resumed["tables"] == whole["tables"]
    assert {k: resumed["summary"][k] for k in CLASS_SPLITS} == {k: whole["summary"][k] for k in CLASS_SPLITS}

    # A checkpoint written before the split, at step 4: its curve entries lack the sums.  It resumes, and
    # the steps it holds simply have no rows; the later ones are the uninterrupted run's.
    rep = NullReporter(stop_after_checkpoints=2)
    with pytest.raises(Cancelled) as info:
        exp.run(cfg, rep)
    assert info.value.step == 4
    step, state = rep.load_checkpoint()
    state["curve"] = [{k: v for k, v in entry.items() if k not in CLASS_SPLITS} for entry in state["curve"]]
    rep.save_checkpoint(step, state)
    rep.stop_after_checkpoints = None
    older = exp.run(cfg, rep)
    later = [r for r in whole["tables"][TABLE] if r["evaluation"] == "final" or r["step"] > 4]
    assert older["tables"][TABLE] == later
    assert older["tables"]["lm_eval"] == whole["tables"]["lm_eval"]


def _write_run(config, events, result, seed) -> RunDir:
    """A finished run folder, as a worker leaves it (not yet ingested)."""
    config = {**config, "seed": seed}
    rd = RunDir.for_id(run_id_for(KIND, config, seed))
    rd.create(KIND, config, seed)
    rd.write_status(state="running", started="2026-01-01T00:00:00+00:00", progress=0.0)
    rd.append_events(events)
    rd.write_result(copy.deepcopy(result))
    rd.write_status(state="done", ended="2026-01-01T00:01:00+00:00", progress=1.0)
    return rd


def test_a_version_3_store_migrates_to_4_keeping_its_rows(lm_home, tmp_path, monkeypatch):
    """A store written by the release before M004 holds an lm run of its day; today's code upgrades the
    file on open (its rows kept, the new table empty) and takes today's run beside it."""
    source_home, run_ids = lm_home
    source = RunDir.for_id(run_ids[0], source_home)
    cfg, events, result = source.read_config()["config"], source.read_events()[0], source.read_result()
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    older = {"summary": {k: v for k, v in result["summary"].items() if k not in CLASS_SPLITS},
             "tables": {"lm_eval": result["tables"]["lm_eval"]}}
    old = _write_run(cfg, events, older, seed=5)
    with monkeypatch.context() as release_3:
        # The store as the release before this migration wrote it: three migrations, no split.
        release_3.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:3])
        release_3.setattr(schema, "RESULT_TABLES", {k: v for k, v in schema.RESULT_TABLES.items() if k != TABLE})
        assert ingest()["errors"] == []
    conn = duckdb.connect(str(store_path()), read_only=True)
    try:
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (3,)
        assert TABLE not in {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        before = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "metrics", "lm_eval")}
    finally:
        conn.close()
    assert before["runs"] == 1 and before["metrics"] > 0 and before["lm_eval"] == 1

    with open_store(readonly=True) as conn:
        # Every migration, this one among them, applied in order (later ones too: the store is today's).
        assert conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall() == [
            (m.version, m.name) for m in schema.MIGRATIONS]
        assert (4, "m004_lm_token_classes") in [(m.version, m.name) for m in schema.MIGRATIONS]
    report = check()
    assert report["ok"] and report["schema_version"] == schema.SCHEMA_VERSION
    assert {t: report["tables"][t] for t in before} == before and report["tables"][TABLE] == 0
    assert lm_eval([old.run_id])["loss"].tolist() == [result["tables"]["lm_eval"][0]["loss"]]
    assert lm_token_classes([old.run_id]).empty

    # Today's run beside it: its rows go in; the older run still has none.
    new = _write_run(cfg, events, result, seed=0)
    assert ingest()["errors"] == []
    assert len(lm_token_classes([new.run_id])) == len(result["tables"][TABLE])
    assert lm_token_classes([old.run_id]).empty and len(lm_eval([old.run_id, new.run_id])) == 2
