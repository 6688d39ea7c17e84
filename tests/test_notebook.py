"""docs/notebook.md's lines, run exactly as written, while another process writes to the store as the app does.

Each ```python block of the page that opens the store is run in a fresh interpreter (a notebook's
own process, reading while this one writes), from a folder holding ``emalab_home/`` (as a notebook
started in the checkout would), against a store with real rows and exports of them; a block that
only reads an export file is run here, from the same folder, on a namespace of its own.
"""
import contextlib
import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from ema_core.rundir import RunDir, run_id_for
from store.db import open_store
from store.export import export_table, table_frame
from store.ingest import ingest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "notebook.md"
PATIENCE = 600  # liveness only: how long a block may wait for the store before it is called stuck


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A folder with ``emalab_home/`` holding two structure-like runs, ingested, and their exports."""
    home = tmp_path / "emalab_home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    for seed, acc in enumerate((0.8, 0.9)):
        config = {"feature_set": "traces"}
        rd = RunDir.for_id(run_id_for("structure", config, seed))
        rd.create("structure", config, seed)
        rd.write_status(state="done")
        rd.write_result({"summary": {}, "tables": {"probe_accuracy": [
            {"role": "overall", "feature_set": "traces", "split": "test", "accuracy": acc}]}})
    ingest()
    export_table("probe_accuracy", "parquet")
    export_table("probe_accuracy", "csv")
    return tmp_path


def run_block(code: str, cwd: Path) -> pd.DataFrame:
    """The block as written, from ``cwd``; the frame it read (df, or runs).  In a fresh interpreter
    where it opens the store (the store's locks are per process: only another process reads as a
    notebook does while the app writes); otherwise in this one, on a namespace of its own, so that a
    name it uses without defining still fails."""
    if "store" not in code:
        names: dict = {}
        with contextlib.chdir(cwd):
            exec(compile(code, "<notebook block>", "exec"), names)
        return names["df"] if "df" in names else names["runs"]
    show = "print((df if 'df' in dir() else runs).to_json(orient='split'))"
    # The data folder the page's paths name (emalab_home/ beside the notebook), for the store's lines too.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMALAB_HOME": str(cwd / "emalab_home"),
           "EMALAB_STORE_TIMEOUT": str(PATIENCE)}
    p = subprocess.run([sys.executable, "-c", code + "\n" + show], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=PATIENCE)
    assert p.returncode == 0, (code, p.stderr)
    return pd.read_json(io.StringIO(p.stdout), orient="split")


def test_the_page_has_the_lines_it_promises():
    codes = blocks()
    assert len(codes) == 3 and all(len(c.strip().splitlines()) <= 2 for c in codes)
    assert "read_parquet" in codes[0] and "table_frame" in codes[1] and "query_frame" in codes[2]


def test_the_documented_lines_read_the_exports_and_the_store_while_the_app_writes(checkout):
    expected = table_frame("probe_accuracy")
    stop = threading.Event()
    sessions = []

    def app_writer():  # as the app's ingest does on every page load: short write sessions, over and over
        while not stop.is_set():
            with open_store(readonly=False) as conn:
                conn.execute("SELECT count(*) FROM runs").fetchall()
                stop.wait(0.02)
            sessions.append(1)
            stop.wait(0.01)

    writer = threading.Thread(target=app_writer)
    writer.start()
    try:
        outputs = [run_block(code, checkout) for code in blocks()]
    finally:
        stop.set()
        writer.join()
    assert sessions  # the store really was being written meanwhile
    exported, by_name, by_sql = outputs
    assert sorted(exported["accuracy"]) == sorted(by_name["accuracy"]) == sorted(expected["accuracy"]) == [0.8, 0.9]
    assert list(exported["run_id"]) == list(by_name["run_id"]) == list(expected["run_id"])
    assert list(by_sql["kind"]) == ["structure", "structure"] and sorted(by_sql["seed"]) == [0, 1]


def test_a_parquet_export_reads_back_as_the_table(checkout):
    back = pd.read_parquet(checkout / "emalab_home" / "exports" / "probe_accuracy.parquet")
    pd.testing.assert_frame_equal(back, table_frame("probe_accuracy"), check_dtype=False)
    grouped = pd.read_parquet(export_table("probe_accuracy", "parquet", grouped=True))
    assert grouped.loc[0, "accuracy_mean"] == pytest.approx(0.85) and grouped.loc[0, "n"] == 2
    assert pd.api.types.is_float_dtype(grouped["accuracy_std"])  # numbers stay numbers, as in CSV
