"""Pages stay fast as the store grows: the page-load benchmark runs, and what keeps pages fast works.

The timings themselves are not checked here (they are for the full benchmark on a quiet machine):
only that ``python -m bench.pages --json`` fills a store, loads every page without an exception and
reports well-formed figures; then the two things that make page loads independent of the number of
finished runs: ingest passing over runs it has already seen, and the Jobs page drawing the newest
jobs only.
"""
import contextlib
import importlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ema_core.rundir import RunDir, run_id_for
from store import db
from store.db import open_store
from store.ingest import ingest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
ingest_module = importlib.import_module("store.ingest")


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


def _seconds(v) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v > 0


def test_bench_pages_tiny_json(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.pages", "--runs", "20", "--metric-rows", "5000", "--repeats", "1", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "EMALAB_HOME": str(tmp_path / "unused")},
    )
    # A page that raised makes the benchmark exit non-zero with the page's exception on stderr.
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)  # stdout holds exactly one JSON object

    assert report["runs"] == 20 and report["metric_rows"] == 5000
    assert report["result_rows"] > 0 and sum(report["states"].values()) == 20
    assert _seconds(report["fill_seconds"])
    assert report["first_ingest_was_noop"] is True  # the filled store holds exactly the run folders
    assert {"overview", "overview_after_restart", "dilution", "structure", "content", "jobs", "jobs_table", "export",
            "export_dilution_accuracy", "export_dilution_accuracy_grouped"} == set(report["pages"])
    for name, page in report["pages"].items():
        assert _seconds(page["cold_s"]) and _seconds(page["warm_s"]), name
        assert isinstance(page["pass"], bool), name
    # The app's memory, read from the real server process as Chromium walks every page of the navigation.
    from pages._router import NAV

    memory = report["memory"]
    assert list(memory["pages"]) == [stem for stem, _, _ in NAV] and memory["exceptions"] == []
    assert 0 < memory["start_mib"] < memory["end_mib"] <= memory["peak_mib"]
    assert isinstance(memory["pass"], bool) and memory["target_mib"] == 700
    assert all(_seconds(v) for v in report["diagnostics"].values()), report["diagnostics"]
    assert report["machine"]["cores"] >= 1 and report["machine"]["duckdb"]
    assert not (tmp_path / "unused").exists()  # the benchmark filled a folder of its own


def test_bench_pages_refuses_a_folder_that_holds_something(tmp_path):
    # The benchmark's main in process (its console entry is the test above's): argparse's refusal is a
    # SystemExit with the exit status and its message on stderr, as a real process would end.
    from bench.pages import main

    (tmp_path / "runs").mkdir()
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exited, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(["--home", str(tmp_path), "--json"])
    assert exited.value.code == 2 and "not empty" in err.getvalue() and out.getvalue() == ""
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]  # the folder is left as it was


# -- ingest passes over runs it has seen ------------------------------------------------------------

def _finished_run(seed: int = 0) -> RunDir:
    config = {"width": 8}
    rd = RunDir.for_id(run_id_for("probe", config, seed))
    rd.create("probe", config, seed)
    rd.append_events([{"seq": i, "step": i, "metrics": {"loss": 1.0 / (i + 1)}} for i in range(5)])
    rd.write_result({"summary": {"acc": 0.5}, "tables": {"lm_eval": [{"split": "val", "loss": 1.0}]}})
    rd.write_status(state="done", ended="2026-03-01T10:00:00+00:00")
    return rd


@pytest.fixture
def settled(monkeypatch):
    # Files count as settled once written before the pass began, rather than two seconds before
    # it (the margin for coarse file-system clocks): a test need not sleep.
    monkeypatch.setattr(ingest_module, "_SETTLE_NS", 0)


@pytest.fixture
def reads(monkeypatch):
    """Run ids whose config.json ingest read: a run it passes over is never read."""
    seen = []
    real = RunDir.read_config

    def counting(self):
        seen.append(self.run_id)
        return real(self)

    monkeypatch.setattr(RunDir, "read_config", counting)
    return seen


def test_a_finished_run_already_ingested_is_not_read_again(home, reads, settled):
    rd = _finished_run()
    assert ingest()["runs_updated"] == 1
    ingest()  # finds nothing new, and remembers so
    reads.clear()
    report = ingest()
    assert report["runs_seen"] == 1 and report["runs_updated"] == 0 and reads == []
    rd.append_events([{"seq": 5, "step": 5, "metrics": {"loss": 0.1}}])
    assert ingest()["metric_rows"] == 1 and reads == [rd.run_id]


def test_a_file_rewritten_in_place_with_its_old_time_is_still_noticed(home, reads, settled):
    rd = _finished_run()
    ingest()
    ingest()
    text = rd.status_path.read_text()
    stamp = rd.status_path.stat().st_mtime
    rd.status_path.write_text(text.replace('"state": "done"', '"state": "fail"'))  # same size, same inode
    os.utime(rd.status_path, (stamp, stamp))  # the change time still moves
    reads.clear()
    ingest()
    assert reads == [rd.run_id]
    with open_store() as conn:
        assert conn.execute("SELECT status FROM runs").fetchone() == ("fail",)


def test_files_still_changing_are_read_on_every_pass(home, reads, monkeypatch):
    # Files changed within the last hour count as still changing here, however slow the machine.
    monkeypatch.setattr(ingest_module, "_SETTLE_NS", 3600 * 10**9)
    rd = _finished_run()
    ingest()
    ingest()
    reads.clear()
    ingest()
    assert reads == [rd.run_id]


def test_a_store_replaced_under_a_running_app_is_filled_again(home, settled):
    _finished_run()
    ingest()
    ingest()
    db.store_path().unlink()
    report = ingest()
    assert report["runs_updated"] == 1 and report["metric_rows"] == 5 and report["results"] == 1


def test_a_run_in_error_is_reported_on_every_pass(home, settled):
    rd = _finished_run()
    rd.result_path.write_text('{"tables": {"lm_eval": [{"split": "val", "loss": "low"}]}}')
    for _ in range(3):
        (err,) = ingest()["errors"]
        assert "must be a number" in err["error"]


def test_runs_whose_folders_are_gone_are_forgotten(home, settled):
    rd, kept = _finished_run(seed=0), _finished_run(seed=1)
    ingest()
    ingest()
    seen = ingest_module._SEEN[str(home.resolve())]
    assert {rd.run_id, kept.run_id} <= set(seen)
    for f in rd.path.iterdir():
        f.unlink()
    rd.path.rmdir()
    ingest(home)
    assert rd.run_id not in seen and kept.run_id in seen


# -- the Jobs page draws the newest jobs ---------------------------------------------------------

def test_the_jobs_page_draws_the_newest_jobs_and_every_active_one(home):
    from bench.pages import fill

    fill(home, 45, 45 * 4)
    old_active = min((RunDir(p) for p in (home / "runs").iterdir()), key=lambda rd: rd.read_config()["created"])
    status = old_active.read_status() | {"state": "running", "eta_s": 60.0}
    old_active.status_path.write_text(json.dumps(status))

    at = AppTest.from_file(APP, default_timeout=600).run()  # liveness only
    at.switch_page("pages/jobs.py").run()
    assert not at.exception, [e.value for e in at.exception]
    cards = [p.proto.text for p in at.get("progress")]
    assert len(cards) == 21  # the newest 20 and the old one still running
    assert any(old_active.run_id in text for text in cards)
    assert any("2 active of 45 jobs · 21 shown" in c.value for c in at.caption)

    at.button(key="jobs_more").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("progress")) == 41
    at.button(key="jobs_more").click().run()
    assert len(at.get("progress")) == 45
    assert not [b for b in at.button if b.key == "jobs_more"]  # nothing left to show
