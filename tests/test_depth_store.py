"""The depth study in the store: a real run ingested and read back (every cell and every weight, in the
paper's order of the rules), its rows checked on the way in, ingested again without a change, exported as
mean ± std across the seeds one run holds, and an older store file migrated to hold it."""
import copy
import io
import re
import statistics

import duckdb
import pandas as pd
import pytest

from depth_fixture import KIND, SEEDS, tiny_run
from ema_core.depth import RULES
from ema_core.rundir import RunDir, run_id_for
from store import schema
from store.db import check, open_store, store_path
from store.depth import depth_remix, depth_results, depth_weight_steps, depth_weights
from store.export import EXPORT_TABLES, render_table
from store.ingest import forget_seen, ingest
from store.queries import GROUPABLE, grouped, list_runs

COLUMNS = ["run_id", "seed", "run_seed", "rule", "depth", "d", "params", "lr", "tokens", "train_loss", "val_loss",
           "val_bpb", "probe_token", "probe_token_chance", "probe_early", "probe_token_init", "probe_early_init",
           "probe_early_resid", "probe_early_resid_init", "probe_prev", "probe_prev_init", "probe_prev_chance",
           "mix_entropy", "seconds"]
WEIGHT_COLUMNS = ["run_id", "seed", "rule", "depth", "layer", "source", "weight"]
STEP_COLUMNS = ["run_id", "seed", "rule", "depth", "step", "layer", "source", "weight"]
REMIX_COLUMNS = ["run_id", "seed", "rule", "depth", "steps", "lr", "val_loss", "base_loss", "tokens"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


@pytest.fixture(scope="module")
def tiny():
    """One real run of the experiment (kept for the session by depth_fixture): (config, events, result)."""
    return tiny_run(0)


def write_run(config, events, result, seed=0) -> RunDir:
    """A finished run folder, as a worker leaves it (not yet ingested)."""
    config = {**config, "seed": seed}
    rd = RunDir.for_id(run_id_for(KIND, config, seed))
    rd.create(KIND, config, seed)
    rd.write_status(state="running", started="2026-01-01T00:00:00+00:00", progress=0.0)
    rd.append_events([{"seq": i, "step": step, "metrics": m} for i, (step, m) in enumerate(events)])
    rd.write_result(copy.deepcopy(result))
    rd.write_status(state="done", ended="2026-01-01T00:01:00+00:00", progress=1.0)
    return rd


def keyed(frame_or_rows, table: str) -> dict[tuple, dict]:
    """Rows by their key in ``table`` (the run's own columns only)."""
    key = [c.name for c in schema.RESULT_TABLES[table] if c.key]
    rows = frame_or_rows.to_dict("records") if isinstance(frame_or_rows, pd.DataFrame) else frame_or_rows
    return {tuple(r[k] for k in key): r for r in rows}


def test_a_real_run_goes_in_and_comes_back(home, tiny):
    cfg, events, result = tiny
    rd = write_run(cfg, events, result)
    report = ingest()
    assert report["errors"] == [] and report["results"] == 1 and report["unknown_tables"] == {}
    df = depth_results()
    assert list(df.columns) == COLUMNS
    rows = result["tables"]["depth_results"]
    depths = sorted(cfg["depths"])
    assert len(rows) == len(df) == len(RULES) * len(depths) * SEEDS
    assert set(df["run_id"]) == {rd.run_id} and set(df["run_seed"]) == {0}
    assert sorted(set(df["seed"])) == list(range(SEEDS))
    stored = keyed(df, "depth_results")
    for r in rows:  # every number as the run wrote it
        got = stored[(r["rule"], r["depth"], r["seed"])]
        assert {c: got[c] for c in r} == r
    # The paper's order of the rules (worst first), then depth, then seed.
    assert df[["rule", "depth", "seed"]].values.tolist() == [
        [rule, L, s] for rule in RULES for L in depths for s in range(SEEDS)]
    assert depth_results([rd.run_id]).equals(df) and depth_results([]).empty
    assert list_runs(kind=KIND)["run_id"].tolist() == [rd.run_id]

    weights = depth_weights()
    assert list(weights.columns) == WEIGHT_COLUMNS
    written = result["tables"]["depth_weights"]
    # Each block of each cell weighs the embedding and every output up to its own.
    assert len(weights) == len(written) == len(RULES) * SEEDS * sum(sum(i + 1 for i in range(1, L + 1))
                                                                    for L in depths)
    back = keyed(weights, "depth_weights")
    for r in written:
        got = back[tuple(r[k] for k in ("rule", "depth", "seed", "layer", "source"))]
        assert {c: got[c] for c in r} == r
    assert weights["rule"].tolist() == sorted(weights["rule"], key=RULES.index)
    first = weights[(weights["rule"] == RULES[0]) & (weights["depth"] == depths[-1]) & (weights["seed"] == 0)]
    assert first[["layer", "source"]].values.tolist() == [
        [layer, source] for layer in range(1, depths[-1] + 1) for source in range(layer + 1)]

    steps = depth_weight_steps()
    assert list(steps.columns) == STEP_COLUMNS and len(steps) == len(result["tables"]["depth_weight_steps"])
    back = keyed(steps, "depth_weight_steps")
    for r in result["tables"]["depth_weight_steps"]:
        got = back[tuple(r[k] for k in ("rule", "depth", "seed", "step", "layer", "source"))]
        assert {c: got[c] for c in r} == r

    remix = depth_remix()
    assert list(remix.columns) == REMIX_COLUMNS and len(remix) == len(result["tables"]["depth_remix"])
    back = keyed(remix, "depth_remix")
    sums = {(r["depth"], r["seed"]): r["tokens"] for r in rows if r["rule"] == "sum"}
    for r in result["tables"]["depth_remix"]:
        got = back[(r["rule"], r["depth"], r["seed"])]
        assert {c: got[c] for c in r} == r
        assert got["tokens"] == sums[r["depth"], r["seed"]]  # the budget, from the sum model it was fitted on


def test_rows_sort_by_the_predicted_order_not_the_alphabet(home):
    cells = [("select", 8), ("mine", 4), ("static", 16), ("sum", 16), ("static", 4), ("sum", 4), ("select", 4)]
    rows = [{"rule": r, "depth": L, "seed": s, "val_loss": 5.0} for r, L in cells for s in (1, 0)]
    write_run({"rules": ["x"]}, [], {"summary": {}, "tables": {"depth_results": rows}}, seed=0)
    assert ingest()["errors"] == []
    df = depth_results()
    assert df[["rule", "depth", "seed"]].values.tolist() == [
        ["sum", 4, 0], ["sum", 4, 1], ["sum", 16, 0], ["sum", 16, 1], ["static", 4, 0], ["static", 4, 1],
        ["static", 16, 0], ["static", 16, 1], ["select", 4, 0], ["select", 4, 1], ["select", 8, 0], ["select", 8, 1],
        ["mine", 4, 0], ["mine", 4, 1]]
    assert df["probe_early"].isna().all()  # a value the run did not write is stored as missing


def _twin(rows):
    """Row 3 made the twin of row 0 in its key, whatever the run's order."""
    rows[3].update({k: rows[0][k] for k in ("rule", "depth", "seed")})


@pytest.mark.parametrize("table, damage, message", [
    ("depth_results", lambda rows: rows[3].pop("rule"),
     r"tables.depth_results\[3\] lacks 'rule', part of the table's key"),
    ("depth_results", lambda rows: rows[3].pop("seed"), r"tables.depth_results\[3\] lacks 'seed'"),
    ("depth_results", lambda rows: rows[3].update(depth=1.5),
     r"tables.depth_results\[3\].depth must be a whole number, got 1.5"),
    ("depth_results", lambda rows: rows[3].update(val_loss="low"),
     r"tables.depth_results\[3\].val_loss must be a number, got 'low'"),
    ("depth_results", lambda rows: rows[3].update(rule=3), r"tables.depth_results\[3\].rule must be text, got 3"),
    ("depth_results", lambda rows: rows[3].update(val_los=5.0),
     r"tables.depth_results\[3\] has unknown column\(s\) \['val_los'\]"),
    ("depth_results", _twin, r"tables.depth_results\[3\] repeats the key"),
    ("depth_weights", lambda rows: rows[3].pop("layer"),
     r"tables.depth_weights\[3\] lacks 'layer', part of the table's key"),
    ("depth_weights", lambda rows: rows[3].update(weight=True),
     r"tables.depth_weights\[3\].weight must be a number, got True"),
])
def test_a_damaged_row_is_refused_naming_its_column(home, tiny, table, damage, message):
    cfg, events, result = tiny
    bad = copy.deepcopy(result)
    damage(bad["tables"][table])
    rd = write_run(cfg, events, bad)
    report = ingest()
    (error,) = report["errors"]
    assert error["run_id"] == rd.run_id
    assert re.search(message, error["error"]), error["error"]
    # Neither table takes a row of a result one of whose tables is damaged.
    assert depth_results().empty and depth_weights().empty and report["results"] == 0
    assert list_runs(kind=KIND)["status"].tolist() == ["done"]  # the run itself is in; its rows are not
    # Mended, the next ingest takes the rows.
    rd.write_result(copy.deepcopy(result))
    assert ingest()["errors"] == []
    assert len(depth_results()) == len(result["tables"]["depth_results"])
    assert len(depth_weights()) == len(result["tables"]["depth_weights"])


def test_ingesting_again_changes_nothing(home, tiny):
    cfg, events, result = tiny
    rd = write_run(cfg, events, result)
    assert ingest()["results"] == 1
    before = depth_results(), depth_weights()
    again = ingest()
    assert again["errors"] == [] and again["results"] == 0 and again["runs_updated"] == 0
    # Even a result read and written a second time (the store forgets it took it) leaves the same rows,
    # each once: a run's rows are replaced whole, never added to.
    with open_store(readonly=False) as conn:
        conn.execute("UPDATE ingest_state SET result_ingested = false WHERE run_id = ?", [rd.run_id])
    forget_seen()
    report = ingest()
    assert report["errors"] == [] and report["results"] == 1
    after = depth_results(), depth_weights()
    assert after[0].equals(before[0]) and after[1].equals(before[1])
    assert len(after[0]) == len(result["tables"]["depth_results"])


def test_both_tables_are_offered_for_export_and_grouped_over_the_seeds_of_one_run(home, tiny):
    cfg, events, result = tiny
    write_run(cfg, events, result)
    assert ingest()["errors"] == []
    for name in ("depth_results", "depth_weights"):
        assert GROUPABLE[name].seeds_in_rows and GROUPABLE[name].ordered
        assert EXPORT_TABLES[name].description  # the one line the Export page and `emalab export --help` show
    rows = pd.DataFrame(result["tables"]["depth_results"])

    g = pd.read_csv(io.StringIO(render_table("depth_results", "csv", grouped=True)))
    assert list(g.columns)[:10] == ["config_id", "kind", "rule", "depth", "d", "params", "tokens", "runs", "n",
                                    "seeds"]
    depths = sorted(cfg["depths"])
    assert g[["rule", "depth"]].values.tolist() == [[rule, L] for rule in RULES for L in depths]
    seeds = ",".join(map(str, range(SEEDS)))
    assert (g["runs"] == 1).all() and (g["n"] == SEEDS).all() and (g["seeds"] == seeds).all()
    for r in g.itertuples():
        cell = rows[(rows["rule"] == r.rule) & (rows["depth"] == r.depth)]
        assert r.val_loss_mean == pytest.approx(statistics.mean(cell["val_loss"]))
        assert r.val_loss_std == pytest.approx(statistics.stdev(cell["val_loss"]), abs=1e-12)  # sample std
        assert r.probe_early_init_mean == pytest.approx(statistics.mean(cell["probe_early_init"]))

    w = grouped("depth_weights")
    assert len(w) == len(result["tables"]["depth_weights"]) // SEEDS and (w["n"] == SEEDS).all()
    assert w["rule"].tolist() == sorted(w["rule"], key=RULES.index)
    # Not grouped: one row per cell and seed, the caption counting the run's seeds.
    flat = pd.read_csv(io.StringIO(render_table("depth_results", "csv")))
    assert len(flat) == len(rows) and list(flat.columns)[:3] == ["run_id", "seed", "run_seed"]
    assert f"from 1 run; seeds {', '.join(map(str, range(SEEDS)))}." in render_table("depth_results", "latex")


def test_a_version_5_store_gains_the_depth_tables_and_keeps_its_rows(home, monkeypatch, tiny):
    """A store written by the release before M006 holds a run; today's code upgrades the file on open (its
    rows kept) and takes a depth run beside it."""
    cfg, events, result = tiny
    with monkeypatch.context() as release_5:
        release_5.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:5])
        with open_store(readonly=False) as conn:
            conn.execute("INSERT INTO runs (run_id, kind, status) VALUES ('r1', 'lm', 'done')")
    conn = duckdb.connect(str(store_path()), read_only=True)
    try:
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (5,)
        names = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "depth_results" not in names and "depth_weights" not in names
    finally:
        conn.close()

    rd = write_run(cfg, events, result)
    assert ingest()["errors"] == []
    with open_store(readonly=True) as conn:
        applied = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
        assert conn.execute("SELECT run_id FROM runs WHERE kind = 'content'").fetchall() == [("r1",)]  # m009 renamed it
    assert applied[5] == (6, "m006_depth") and [v for v, _ in applied] == [m.version for m in schema.MIGRATIONS]
    report = check()
    assert report["ok"] and report["schema_version"] == schema.MIGRATIONS[-1].version
    assert len(depth_results([rd.run_id])) == len(result["tables"]["depth_results"])
