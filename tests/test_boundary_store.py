"""The boundary map in the store: a real run ingested and read back (the map, every rate's dev curve,
recall against state size), its rows checked on the way in, exported as mean ± std across the seeds
one run holds, and older store files and older runs' results migrated and ingested beside it."""
import copy
import io
import math
import re
import statistics

import duckdb
import pandas as pd
import pytest

from ema_core.rundir import RunDir, run_id_for
from store import schema
from store.boundary import boundary_accuracy, boundary_dev_curve, boundary_recall_state
from store.db import check, open_store, store_path
from store.export import EXPORT_TABLES, export_table, render_table
from store.ingest import ingest
from store.queries import GROUPABLE, grouped, list_runs

KIND = "boundary"
# Seconds on a CPU: two mixers, every task, two distances, one MQAR size, two seeds in one run; recall
# against state with EMA at width 8 besides the map's 16.
TINY = {"mixers": "window_k,ema", "distances": "1,2", "mqar_pairs": "2", "mqar_len": "16", "data.seq_len": 16,
        "data.n_train": 32, "data.n_dev": 16, "data.n_test": 16, "data.mqar_vocab": 32, "train.steps": 3,
        "train.lrs": "0.01", "train.eval_every": 2, "model.d": 16, "recall_widths": "8,16", "seeds": 2}
COLUMNS = ["run_id", "seed", "run_seed", "mixer", "task", "difficulty", "level", "seq_len", "accuracy",
           "dev_accuracy", "chance", "exclusion_floor", "d", "redundancy", "lr", "train_loss", "state_floats", "params"]
ROWS = 2 * 2 * (4 * 2 + 1)  # mixers × seeds × (3 agreement tasks and the lag task × 2 distances + 1 MQAR size)
CELL = ["mixer", "task", "difficulty", "seed"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


@pytest.fixture(scope="module")
def tiny():
    """One real run of the experiment, in-process: (config, events, result)."""
    from ema_core.experiments import NullReporter, build_config, get_experiment

    cfg = build_config(KIND, overrides=TINY)
    reporter = NullReporter()
    result = get_experiment(KIND).run(cfg, reporter)
    return cfg.model_dump(mode="json"), reporter.events, result


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


def test_a_real_run_goes_in_and_comes_back(home, tiny):
    cfg, events, result = tiny
    rd = write_run(cfg, events, result)
    report = ingest()
    assert report["errors"] == [] and report["results"] == 1 and report["unknown_tables"] == {}
    df = boundary_accuracy()
    assert list(df.columns) == COLUMNS
    rows = result["tables"]["boundary_accuracy"]
    assert len(rows) == len(df) == ROWS
    assert set(df["run_id"]) == {rd.run_id} and set(df["run_seed"]) == {0} and sorted(set(df["seed"])) == [0, 1]
    stored = {tuple(r[c] for c in CELL): r for r in df.to_dict("records")}
    for r in rows:  # every number as the run wrote it
        got = stored[tuple(r[c] for c in CELL)]
        # a value the run wrote as null (the redundancy of a task without one) comes back missing
        assert {c: None if isinstance(got[c], float) and math.isnan(got[c]) else got[c] for c in r} == r
    # The hierarchy's order (window before EMA), then the study's task order, distance, seed.
    assert df["mixer"].tolist() == ["window_k"] * (ROWS // 2) + ["ema"] * (ROWS // 2)
    window = df[df["mixer"] == "window_k"]
    assert window["task"].tolist()[::4][:4] == ["agree_structure", "agree_content", "agree_content4", "mqar"]
    assert window[["difficulty", "seed"]].values.tolist()[:4] == [["k=1,rho=0", 0], ["k=1,rho=0", 1],
                                                                  ["k=2,rho=0", 0], ["k=2,rho=0", 1]]
    assert boundary_accuracy([rd.run_id]).equals(df) and boundary_accuracy([]).empty
    assert list_runs(kind=KIND)["run_id"].tolist() == [rd.run_id]
    # Every rate's dev curve (each cell evaluated at step 2 and at its end, 3), and recall against state.
    for name, read in (("boundary_dev_curve", boundary_dev_curve), ("boundary_recall_state", boundary_recall_state)):
        written = result["tables"][name]
        got = read([rd.run_id])
        assert len(got) == len(written) and set(got["run_id"]) == {rd.run_id}
        key = [c.name for c in schema.RESULT_TABLES[name] if c.key]
        back = {tuple(r[c] for c in key): r for r in got.to_dict("records")}
        for r in written:
            assert {c: back[tuple(r[c] for c in key)][c] for c in r} == r
    curve = boundary_dev_curve()
    assert len(curve) == 2 * (2 * 9 + 1) * 2 and sorted(set(curve["step"])) == [2, 3]  # + EMA at width 8
    recall = boundary_recall_state()
    assert sorted(set(zip(recall["mixer"], recall["d"]))) == [("ema", 8), ("ema", 16), ("window_k", 16)]


def test_rows_sort_by_the_hierarchy_not_the_alphabet(home):
    cells = [("softmax", "mqar", "pairs=4,T=64", 4), ("mine", "agree_structure", "k=2", 2),
             ("ema", "lag_identity", "k=16", 16), ("ema", "lag_identity", "k=2", 2),
             ("ema", "agree_structure", "k=16", 16), ("window_k", "mqar", "pairs=4,T=64", 4)]
    rows = [{"mixer": m, "task": t, "difficulty": d, "level": k, "seed": 3, "accuracy": 0.5, "chance": 0.25}
            for m, t, d, k in cells]
    write_run({"mixers": ["x"]}, [], {"summary": {}, "tables": {"boundary_accuracy": rows}}, seed=3)
    assert ingest()["errors"] == []
    df = boundary_accuracy()
    assert df[["mixer", "task", "difficulty"]].values.tolist() == [
        ["window_k", "mqar", "pairs=4,T=64"], ["ema", "agree_structure", "k=16"], ["ema", "lag_identity", "k=2"],
        ["ema", "lag_identity", "k=16"], ["softmax", "mqar", "pairs=4,T=64"], ["mine", "agree_structure", "k=2"]]
    assert df["seq_len"].isna().all()  # a value the run did not write is stored as missing


@pytest.mark.parametrize("damage, message", [
    (lambda r: r.pop("seed"), r"tables.boundary_accuracy\[3\] lacks 'seed', part of the table's key"),
    (lambda r: r.pop("difficulty"), r"tables.boundary_accuracy\[3\] lacks 'difficulty'"),
    (lambda r: r.update(accuracy="high"), r"tables.boundary_accuracy\[3\].accuracy must be a number, got 'high'"),
    (lambda r: r.update(seed=1.5), r"tables.boundary_accuracy\[3\].seed must be a whole number, got 1.5"),
    (lambda r: r.update(level="k=2"), r"tables.boundary_accuracy\[3\].level must be a number"),
    (lambda r: r.update(acuracy=0.5), r"tables.boundary_accuracy\[3\] has unknown column\(s\) \['acuracy'\]"),
    (lambda r: r.update(seed=0, mixer="window_k", task="agree_structure", difficulty="k=1,rho=0"),
     r"tables.boundary_accuracy\[3\] repeats the key"),
])
def test_a_damaged_row_is_refused_naming_its_column(home, tiny, damage, message):
    cfg, events, result = tiny
    bad = copy.deepcopy(result)
    damage(bad["tables"]["boundary_accuracy"][3])
    rd = write_run(cfg, events, bad)
    report = ingest()
    (error,) = report["errors"]
    assert error["run_id"] == rd.run_id
    assert re.search(message, error["error"]), error["error"]
    assert boundary_accuracy().empty and report["results"] == 0
    assert list_runs(kind=KIND)["status"].tolist() == ["done"]  # the run itself is in; its rows are not
    # Mended, the next ingest takes the rows.
    rd.write_result(copy.deepcopy(result))
    assert ingest()["errors"] == [] and len(boundary_accuracy()) == ROWS


def test_grouped_exports_spread_over_the_seeds_of_one_run(home, tiny):
    cfg, events, result = tiny
    write_run(cfg, events, result)
    assert ingest()["errors"] == []
    rows = pd.DataFrame(result["tables"]["boundary_accuracy"])
    spec = GROUPABLE["boundary_accuracy"]
    assert spec.seeds_in_rows and "boundary_accuracy" in EXPORT_TABLES

    g = pd.read_csv(io.StringIO(render_table("boundary_accuracy", "csv", grouped=True)))
    assert list(g.columns) == ["config_id", "kind", "mixer", "task", "difficulty", "level", "seq_len", "d",
                               "redundancy", "state_floats", "params", "runs", "n", "seeds", "accuracy_mean", "accuracy_std",
                               "dev_accuracy_mean", "dev_accuracy_std", "chance_mean", "chance_std",
                               "exclusion_floor_mean", "exclusion_floor_std", "lr_mean", "lr_std",
                               "train_loss_mean", "train_loss_std"]
    assert len(g) == 18 and (g["runs"] == 1).all() and (g["n"] == 2).all() and (g["seeds"] == "0,1").all()
    # In the study's order: the window's cells first, distances 1 then 2, MQAR after the agreement tasks.
    assert g["mixer"].tolist() == ["window_k"] * 9 + ["ema"] * 9
    assert g["difficulty"].tolist()[:9] == ["k=1,rho=0", "k=2,rho=0"] * 3 + ["pairs=2,T=16", "k=1", "k=2"]
    assert g["redundancy"].iloc[:9].isna().tolist() == [False] * 6 + [True] * 3 and (g["redundancy"].iloc[:6] == 0).all()
    for r in g.itertuples():
        cell = rows[(rows.mixer == r.mixer) & (rows.task == r.task) & (rows.difficulty == r.difficulty)]
        accs = cell["accuracy"].tolist()
        assert r.accuracy_mean == pytest.approx(statistics.mean(accs))
        assert r.accuracy_std == pytest.approx(statistics.stdev(accs), abs=1e-12)  # sample std, ddof 1
        assert r.lr_mean == pytest.approx(0.01)

    # Markdown and LaTeX: one "mean ± std" cell per value, three decimals for accuracies below 10.
    spread = next(r for r in g.itertuples() if r.accuracy_std > 0.0005)
    cell = f"{spread.accuracy_mean:.3f} ± {spread.accuracy_std:.3f}"
    md = render_table("boundary_accuracy", "markdown", grouped=True)
    line = next(x for x in md.splitlines()[2:]
                if f"| {spread.mixer} | {spread.task} | {spread.difficulty} |" in x)
    assert f"| {cell} |" in line and "| 1 | 2 | 0,1 |" in line
    tex = export_table("boundary_accuracy", "latex", grouped=True).read_text(encoding="utf-8")
    assert cell.replace("±", r"$\pm$") in tex
    assert "from 1 run; seeds 0, 1." in tex and r"\label{tab:boundary_accuracy_grouped}" in tex
    # Not grouped: one row per cell and seed, the caption counting the run's seeds.
    flat = pd.read_csv(export_table("boundary_accuracy", "csv"))
    assert len(flat) == ROWS and list(flat.columns)[:3] == ["run_id", "seed", "run_seed"]
    assert "from 1 run; seeds 0, 1." in render_table("boundary_accuracy", "latex")


def test_runs_of_one_config_pool_their_seeds(home):
    """Two runs that differ only by their first seed: one group of four seeds from two runs."""
    accs = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.8}
    for first in (0, 2):
        rows = [{"mixer": "ema", "task": "mqar", "difficulty": "pairs=4,T=64", "level": 4, "seed": s,
                 "accuracy": accs[s], "chance": 0.01} for s in (first, first + 1)]
        write_run({"seeds": 2, "steps": 10}, [], {"summary": {}, "tables": {"boundary_accuracy": rows}}, seed=first)
    write_run({"seeds": 2, "steps": 20}, [], {"summary": {}, "tables": {"boundary_accuracy": [
        {"mixer": "ema", "task": "mqar", "difficulty": "pairs=4,T=64", "level": 4, "seed": 0, "accuracy": 0.9,
         "chance": 0.01}]}}, seed=0)
    assert ingest()["errors"] == []
    g = grouped("boundary_accuracy").set_index("steps")
    assert g.loc[10, ["runs", "n", "seeds"]].tolist() == [2, 4, "0,1,2,3"]
    assert g.loc[10, "accuracy_mean"] == pytest.approx(0.65)
    assert g.loc[10, "accuracy_std"] == pytest.approx(statistics.stdev(accs.values()))
    assert g.loc[20, ["runs", "n", "seeds"]].tolist() == [1, 1, "0"] and math.isnan(g.loc[20, "accuracy_std"])
    tex = render_table("boundary_accuracy", "latex", grouped=True)
    assert "from 3 runs; seeds 0, 1, 2, 3." in tex and r"0.650 $\pm$ 0.129" in tex


def test_a_seed_two_runs_of_one_config_both_hold_counts_once(home):
    """Runs at 0 (seeds 0–2) and 1 (seeds 1–3) overlap on 1 and 2: four seeds from two runs, each once."""
    accs = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.8}
    for first in (0, 1):
        rows = [{"mixer": "ema", "task": "mqar", "difficulty": "pairs=4,T=64", "level": 4, "seed": s,
                 "accuracy": accs[s], "chance": 0.01} for s in range(first, first + 3)]
        write_run({"seeds": 3, "steps": 10}, [], {"summary": {}, "tables": {"boundary_accuracy": rows}}, seed=first)
    assert ingest()["errors"] == []
    g = grouped("boundary_accuracy")
    assert g[["runs", "n", "seeds"]].values.tolist() == [[2, 4, "0,1,2,3"]]
    assert g["accuracy_mean"].iloc[0] == pytest.approx(0.65)
    assert g["accuracy_std"].iloc[0] == pytest.approx(statistics.stdev(accs.values()))


def _older_boundary_result(result: dict) -> dict:
    """``result`` as a run made before the exclusion floor, the dev curve and recall against state wrote it."""
    rows = [{k: v for k, v in r.items() if k not in ("exclusion_floor", "d", "redundancy")}
            for r in result["tables"]["boundary_accuracy"]]
    return {"summary": {"cells": len(rows)}, "tables": {"boundary_accuracy": rows}}


def test_a_version_2_store_migrates_to_3_keeping_its_rows(home, monkeypatch, tiny):
    """A store written by the release before M003 holds an older boundary run; today's code upgrades the
    file on open (its rows kept, the new columns null), and takes today's run and an older run's
    result folder beside it."""
    cfg, events, result = tiny
    older = _older_boundary_result(result)
    old = write_run(cfg, events, older, seed=5)
    new_columns = {"exclusion_floor", "d", "redundancy"}
    with monkeypatch.context() as release_2:
        # The store as the release before this migration wrote it: two migrations, the map's first form.
        release_2.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:2])
        release_2.setattr(schema, "RESULT_TABLES", {
            "boundary_accuracy": tuple(c for c in schema.RESULT_TABLES["boundary_accuracy"]
                                       if c.name not in new_columns),
            **{k: v for k, v in schema.RESULT_TABLES.items() if not k.startswith("boundary")}})
        assert ingest()["errors"] == []
    conn = duckdb.connect(str(store_path()), read_only=True)
    try:
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (2,)
        names = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "boundary_accuracy" in names and "boundary_dev_curve" not in names
        assert conn.execute("SELECT count(*) FROM boundary_accuracy").fetchone() == (ROWS,)
    finally:
        conn.close()

    with open_store(readonly=True) as conn:
        applied = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    # Migrated forward to today's version, through the boundary's curves and every migration after it.
    assert applied[:3] == [(1, "m001_initial"), (2, "m002_boundary"), (3, "m003_boundary_curves")]
    assert [v for v, _ in applied] == [m.version for m in schema.MIGRATIONS]
    report = check()
    assert report["ok"] and report["schema_version"] == schema.MIGRATIONS[-1].version
    assert report["tables"]["boundary_dev_curve"] == report["tables"]["boundary_recall_state"] == 0
    df = boundary_accuracy([old.run_id])
    assert len(df) == ROWS and df["exclusion_floor"].isna().all() and df["d"].isna().all()
    assert boundary_dev_curve([old.run_id]).empty and boundary_recall_state([old.run_id]).empty
    # Today's run beside it; an older run's result, ingested only now, goes in as the older did.
    new = write_run(cfg, events, result, seed=0)
    late = write_run({**cfg, "steps_note": 1}, events, older, seed=7)
    assert ingest()["errors"] == []
    assert len(boundary_accuracy([new.run_id])) == ROWS and boundary_accuracy([new.run_id])["d"].eq(16).all()
    assert len(boundary_dev_curve([new.run_id])) == len(result["tables"]["boundary_dev_curve"])
    assert len(boundary_accuracy([late.run_id])) == ROWS and boundary_dev_curve([late.run_id]).empty
    assert sorted(list_runs(kind=KIND)["run_id"]) == sorted([old.run_id, new.run_id, late.run_id])
