"""The `emalab` command line end to end: real job processes, a kill -9, a resume and a LaTeX export.

Commands run as subprocesses (``python -m jobs.cli``, what the console script calls) where the
user story needs a separate process (a background launch and a resume that exit leaving their worker
behind, a Ctrl-C, and one refused command through the real entry point), and in-process through
``jobs.cli.main`` everywhere else: the same code, answer and exit code without a new interpreter's
start-up (polling a job is then fast enough to catch it half-way).  Other test files call
:func:`in_process` from here for their own commands.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ema_core.experiments import build_config
from ema_core.rundir import RunDir, wait_for
from jobs import cli

ROOT = Path(__file__).resolve().parents[1]
# Tiny, but with enough steps that a poll every few milliseconds catches the job half-way.
TINY = {"vocab": 8, "dim": 8, "max_lag": 2, "n_train": 256, "n_test": 128, "steps": 6000, "batch": 64,
        "checkpoint_every": 20, "alphas": 0.5}
STABLE_RUN_KEYS = {"run_id", "kind", "state", "seed", "preset", "config", "progress", "message", "background",
                   "summary", "path"}


def _sets(**changes) -> list[str]:
    out = []
    for key, value in {**TINY, **changes}.items():
        out += ["--set", f"{key}={value}"]
    return out


# Liveness only: how long to wait for something that must happen (a command's exit, a job's end)
# before calling it stuck.  Ten times what a loaded 2-core machine needs; never a speed target.
PATIENCE = 600


def emalab(home: Path, *args: str, timeout: float = PATIENCE) -> subprocess.CompletedProcess:
    env = {**os.environ, "EMALAB_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_object(stdout: str) -> dict:
    """stdout holds exactly one JSON object on one line, and nothing else."""
    assert stdout.endswith("\n") and stdout.count("\n") == 1, stdout
    obj = json.loads(stdout)  # json.loads refuses anything after the object
    assert isinstance(obj, dict)
    return obj


def run_main(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    return rc, out.getvalue(), err.getvalue()


def in_process(*args: str) -> subprocess.CompletedProcess:
    """The command through ``jobs.cli.main`` in this process, answered like :func:`emalab`: the same
    exit code and output without a new interpreter's start-up (seconds of imports, each time)."""
    rc, out, err = run_main(*args)
    return subprocess.CompletedProcess(["emalab", *args], rc, out, err)


def show(run_id: str) -> dict:
    rc, out, err = run_main("jobs", "show", run_id, "--json")
    assert rc == 0, err
    return one_object(out)


def tree(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*")} if home.exists() else set()


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


def test_user_story_background_kill_resume_export(home):
    # Launch in the background: the command returns at once with the run id.
    p = emalab(home, "run", "dilution", *_sets(), "--background", "--json")
    assert p.returncode == 0, p.stderr
    launched = one_object(p.stdout)
    assert STABLE_RUN_KEYS <= set(launched)
    assert launched["background"] is True and launched["state"] in ("queued", "running")
    assert launched["config"]["train"]["steps"] == TINY["steps"] and launched["kind"] == "dilution"
    run_id = launched["run_id"]

    # Watch its progress rise, then kill its worker the hard way.
    seen = []

    def progressed() -> bool:
        info = show(run_id)
        assert info["state"] in ("queued", "running"), info
        seen.append(info["progress"])
        return len({p for p in seen if 0 < p < 1}) >= 2

    assert wait_for(progressed, PATIENCE, 0.02), f"the job never made progress: {seen[-5:]}"  # liveness only
    rising = [p for p in seen if p > 0]
    assert rising == sorted(rising) and rising[-1] > rising[0]
    pid = json.loads((home / "runs" / run_id / "status.json").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    killed_at = rising[-1]

    # The separate processes the story needs are the launch and the resume (each must leave a
    # worker behind and exit); looking, exporting and checking go through the same main in-process.
    rows = {}

    def noticed() -> bool:
        p = in_process("jobs", "list", "--json")
        assert p.returncode == 0, p.stderr
        rows.update({r["run_id"]: r for r in one_object(p.stdout)["jobs"]})
        assert rows[run_id]["state"] in ("running", "crashed"), rows[run_id]
        return rows[run_id]["state"] == "crashed"

    assert wait_for(noticed, PATIENCE, 0.2), f"the killed worker was never noticed: {rows.get(run_id)}"
    assert rows[run_id]["progress"] < 1

    # Nothing was ingested yet (background runs are not): a bad --out must not create the store.
    p = in_process("export", "--table", "dilution_accuracy", "--format", "latex", "--out", "../../x.tex")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("emalab: error: --out") and p.stderr.count("\n") == 1, p.stderr
    assert not (home / "emalab.duckdb").exists() and not (home / "exports").exists()
    assert not (home.parent / "x.tex").exists()

    p = emalab(home, "jobs", "resume", run_id, "--json")
    assert p.returncode == 0, p.stderr
    resumed = one_object(p.stdout)
    assert resumed["run_id"] == run_id and resumed["state"] in ("queued", "running")
    after, last = [], {}

    def ended() -> bool:
        last.update(show(run_id))
        if last["state"] in ("queued", "running"):
            after.append(last["progress"])
            return False
        return True

    assert wait_for(ended, PATIENCE), f"the resumed job never finished: {last}"
    info = last
    assert info["state"] == "done", info["message"]
    assert info["attempts"] == 2 and info["progress"] == 1.0
    assert info["summary"]["acc_lag0/α=0.5"] > 0.5  # it decodes the current token
    # It went on from its newest checkpoint (at most checkpoint_every steps back), not from zero.
    assert min(after, default=1.0) >= killed_at - 2 * TINY["checkpoint_every"] / TINY["steps"]
    # the config shown is the one launched, in its nested shape
    as_typed = {key: str(value) for key, value in TINY.items()}  # as the command line passed them
    assert info["config"] == build_config("dilution", overrides=as_typed, seed=info["seed"]).model_dump(mode="json")

    # The log tells both attempts apart.
    p = in_process("jobs", "logs", run_id, "--tail", "0")  # every line: a line per checkpoint
    assert p.returncode == 0 and "attempt 1" in p.stdout and "attempt 2" in p.stdout, p.stdout

    # Download its table as LaTeX.
    p = in_process("export", "--table", "dilution_accuracy", "--format", "latex", "--json")
    assert p.returncode == 0, p.stderr
    exported = one_object(p.stdout)
    path = Path(exported["path"])
    assert path.parent == home / "exports" and path.name == "dilution_accuracy.tex"
    assert exported["table"] == "dilution_accuracy" and exported["format"] == "latex"
    tex = path.read_text(encoding="utf-8")
    assert "\\toprule" in tex and "\\bottomrule" in tex
    assert sum(run_id in line for line in tex.splitlines()) == TINY["max_lag"] + 1  # one row per lag

    p = in_process("store", "check", "--json")
    assert p.returncode == 0, p.stderr
    report = one_object(p.stdout)
    assert report["ok"] is True and report["problems"] == [] and report["tables"]["runs"] == 1

    # Text mode answers in words, still without a traceback.
    p = in_process("jobs", "list")
    assert p.returncode == 0 and run_id in p.stdout and "done" in p.stdout


def test_foreground_run_prints_one_object_and_a_progress_bar(home):
    args = ["run", "dilution", *_sets(steps=40, seed=3)]
    # In process: the console entry's own run is the user story's launch (and its Ctrl-C test's run).
    p = in_process(*args, "--json")
    assert p.returncode == 0, p.stderr
    out = one_object(p.stdout)
    assert STABLE_RUN_KEYS | {"ingested"} <= set(out)
    assert out["state"] == "done" and out["seed"] == 3 and out["config"]["seed"] == 3
    assert out["background"] is False and out["ingested"] is True and out["preset"] is None
    assert out["summary"] and all(out[k] == v for k, v in out["summary"].items())  # summary keys on top too
    assert "%|" not in p.stderr  # no progress bar in --json mode

    # The same job again is the same run, found done: in the background too, and with a bar in text mode.
    p = in_process(*args, "--background", "--json")
    assert p.returncode == 0, p.stderr
    again = one_object(p.stdout)
    assert STABLE_RUN_KEYS <= set(again)
    assert again["run_id"] == out["run_id"] and again["state"] == "done" and again["background"] is True
    assert again["reused"] is True and again["summary"] == out["summary"]
    rc, text, err = run_main(*args)
    assert rc == 0 and text.startswith(f"{out['run_id']}: done") and "already done" in text and "%|" not in err

    # Its rows are in the store: run ids select them, grouped exports fold the seeds.
    rc, text, err = run_main("export", "--table", "dilution_accuracy", "--format", "markdown", "--runs",
                             out["run_id"], "--grouped", "--out", "sub/table", "--json")
    assert rc == 0, err
    exported = one_object(text)
    assert Path(exported["path"]) == home / "exports" / "sub" / "table.md" and exported["grouped"] is True
    assert "| accuracy |" in Path(exported["path"]).read_text(encoding="utf-8")


def test_relaunching_a_done_run_says_so_and_runs_nothing(home):
    args = ["run", "dilution", "--preset", "quick", *_sets(steps=40)]
    rc, out, err = run_main(*args, "--json")
    assert rc == 0, err
    first = one_object(out)
    run_id = first["run_id"]
    assert first["reused"] is False and first["next_seed"] == 1 and first["preset"] == "quick"
    log = (home / "runs" / run_id / "log.txt").read_text()

    # Text: one line that says it is done already, with the run id and the next free seed, no bar.
    rc, text, err = run_main(*args)
    assert rc == 0 and "%|" not in err, err
    head = text.splitlines()[0]
    assert head.startswith(f"{run_id}: done (already done") and "rerun with --seed 1" in head
    assert "final_loss/α=0.5: " in text and "nats, summed over lags" in text  # the summary with its units

    # JSON: the stored result, marked reused.
    rc, out, err = run_main(*args, "--json")
    again = one_object(out)
    assert rc == 0 and again["reused"] is True and again["run_id"] == run_id and again["state"] == "done"
    assert again["summary"] == first["summary"] and again["next_seed"] == 1
    assert again["units"]["final_loss/α=0.5"] == "nats, summed over lags" and again["units"]["seconds"] == "s"
    shown = show(run_id)
    assert shown["attempts"] == 1 and shown["units"]["chance"] == "fraction correct"
    assert (home / "runs" / run_id / "log.txt").read_text() == log

    # The job list: a header, then kind, preset, seed, state, progress, age and the settings that differ.
    rc, text, err = run_main("jobs", "list")
    header, row = text.splitlines()
    assert header.split() == ["RUN", "ID", "KIND", "PRESET", "SEED", "STATE", "PROGRESS", "AGE", "SETTINGS", "NOTE"]
    assert row.split()[:6] == [run_id, "dilution", "quick", "0", "done", "100.0%"]
    assert "alphas=0.5, vocab=8, dim=8" in row and "steps=40" in row and "seed=" not in row
    rc, text, err = run_main("jobs", "show", run_id)
    assert rc == 0 and '"label": "dilution quick · alphas=0.5' in text and '"nats, summed over lags"' in text


def test_a_damaged_row_is_listed_plainly():
    # What the runner lists for a run folder it cannot read: no kind, config or progress, a message.
    text = cli._job_table([{"run_id": "dilution-000000000000-s0", "state": "damaged",
                            "message": "config.json cannot be read: Expecting value"}])
    header, row = text.splitlines()
    assert row.split()[:7] == ["dilution-000000000000-s0", "-", "-", "-", "damaged", "-", "-"]
    assert row.endswith("config.json cannot be read: Expecting value")


def test_run_help_lists_every_kinds_presets():
    from ema_core.experiments import REGISTRY

    rc, out, err = run_main("run", "content", "--help")
    flat = " ".join(out.split())
    assert rc == 0 and "content: quick, tiny, long, fresh, fresh_micro, small, paper" in flat
    for kind, exp in REGISTRY.items():
        assert f"{kind}: {', '.join(exp.presets)}" in flat


def test_ctrl_c_cancels_a_foreground_run(home):
    env = {**os.environ, "EMALAB_HOME": str(home)}
    # A terminal hands the command the default SIGINT disposition; a test process may not (an ignored
    # signal is inherited across exec, and Python keeps it ignored), so give the child what a shell would.
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "run", "dilution", *_sets(steps=1_000_000), "--json"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        def started() -> bool:
            status = [json.loads(p.read_text()) for p in home.glob("runs/*/status.json")]
            if status and status[0].get("progress", 0) > 0:
                return True
            assert proc.poll() is None, proc.communicate()
            return False

        assert wait_for(started, PATIENCE), "the run never made progress"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PATIENCE)  # liveness: a cancelled run stops at its next step
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    result = one_object(out)
    assert result["state"] == "cancelled" and "Traceback" not in err
    assert result["summary"] == {}


def test_usage_errors_are_one_line_exit_2_and_write_nothing(home):
    for args, names in [
        (["run", "dilution", "--set", "vocab=1"], "vocab"),
        (["run", "dilution", "--set", "steps=true"], "steps"),
        (["run", "dilution", "--set", "alphas=0.5,2"], "alphas"),
        (["run", "dilution", "--set", "bogus=1"], "bogus"),
        (["run", "dilution", "--set", "novalue"], "--set"),
        (["run", "dilution", "--preset", "huge"], "preset"),
        (["run", "dilution", "--seed", "x"], "--seed"),
        (["run", "dilution", "--seed", "-1"], "seed"),
        (["run", "nope"], "kind"),
        (["run", "dilution", "--slots", "0"], "--slots"),
        (["jobs", "show", "dilution-000000000000-s0", "--json"], "no run"),
        (["jobs", "show", "../etc", "--json"], "run id"),
        (["jobs", "show"], "run id"),
        (["jobs", "list", "extra"], "run id"),
        (["jobs", "logs", "x", "--tail", "-1"], "--tail"),
        (["export", "--table", "nope", "--format", "csv"], "--table"),
        (["export", "--table", "runs", "--format", "pdf"], "--format"),
        (["export", "--table", "runs", "--format", "csv", "--grouped"], "--grouped"),
        (["export", "--table", "runs", "--format", "csv", "--runs", "nope"], "no run"),
        (["export", "--table", "runs", "--format", "csv", "--out", "/etc/x.csv"], "--out"),
        (["store", "vacuum"], "action"),
        (["bench", "dilution-page", "--quick"], "--quick"),
        (["frobnicate"], "COMMAND"),
    ]:
        rc, out, err = run_main(*args)
        assert rc == 2 and out == "", (args, rc, out, err)
        assert err.startswith("emalab: error: ") and err.count("\n") == 1 and names in err, (args, err)
    assert tree(home) == set()  # no runs folder, no store, no exports, not even the data folder

    # The real entry point agrees, in a fresh interpreter (its imports write nothing and say nothing
    # either): the suite's one refused command through a new process; the rest, and the boundary
    # study's refusals (tests/test_boundary.py), go through main in process.
    p = emalab(home, "run", "dilution", "--set", "vocab=1", "--json")
    assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith("emalab: error: stream.vocab:")
    assert p.stderr.count("\n") == 1, p.stderr
    assert tree(home) == set()


def test_store_problems_are_one_line_exit_1(home):
    home.mkdir()
    (home / "emalab.duckdb").write_bytes(b"this is not a database\n" * 100)
    before = (home / "emalab.duckdb").read_bytes()
    rc, out, err = run_main("store", "migrate", "--json")
    assert rc == 1 and out == "" and err.startswith("emalab: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "not a DuckDB database" in err
    rc, out, err = run_main("store", "check", "--json")
    assert rc == 1 and one_object(out)["ok"] is False
    rc, out, err = run_main("export", "--table", "runs", "--format", "csv")
    assert rc == 1 and out == "" and err.count("\n") == 1, err  # the store cannot be read: said in one line
    assert (home / "emalab.duckdb").read_bytes() == before  # left untouched


def test_store_migrate_and_check_on_a_fresh_folder(home):
    rc, out, err = run_main("store", "check", "--json")
    assert rc == 0 and one_object(out)["exists"] is False
    assert not (home / "emalab.duckdb").exists()  # checking creates nothing
    rc, out, err = run_main("store", "migrate", "--json")
    report = one_object(out)
    assert rc == 0 and report["ok"] and report["applied"] and report["schema_version"] >= 1
    rc, out, err = run_main("store", "migrate", "--json")
    assert rc == 0 and one_object(out)["applied"] == []
    rc, out, err = run_main("store", "check")
    assert rc == 0 and out.rstrip().endswith("ok")


def test_help_returns_instead_of_exiting():
    rc, out, err = run_main("--help")
    assert rc == 0 and "run" in out and "export" in out


def test_export_help_lists_every_table_and_format_the_store_registers(home):
    from store.export import EXPORT_TABLES, FORMATS

    rc, out, err = run_main("export", "--help")
    flat = " ".join(out.split())
    assert rc == 0 and "boundary_accuracy" in EXPORT_TABLES  # a study's table registered by its store file
    for name, table in EXPORT_TABLES.items():
        assert f"{name} ({' '.join(table.description.split())})" in flat, name
    for name, fmt in FORMATS.items():
        assert f"{name}: {fmt.label}" in flat, name
    assert tree(home) == set()  # the help opened nothing


def test_export_writes_parquet_that_pandas_reads_back(home):
    import pandas as pd

    from ema_core.rundir import run_id_for

    for seed, acc in enumerate((0.8, 0.9)):
        rd = RunDir.for_id(run_id_for("probe", {"feature_set": "traces"}, seed))
        rd.create("probe", {"feature_set": "traces"}, seed)
        rd.write_status(state="done")
        rd.write_result({"summary": {}, "tables": {"probe_accuracy": [
            {"role": "overall", "feature_set": "traces", "split": "test", "accuracy": acc}]}})
    rc, out, err = run_main("export", "--table", "probe_accuracy", "--format", "parquet", "--grouped", "--json")
    exported = one_object(out)
    assert rc == 0 and exported["format"] == "parquet" and exported["rows"] == 1, err
    back = pd.read_parquet(exported["path"])
    assert Path(exported["path"]) == home / "exports" / "probe_accuracy-grouped.parquet"
    assert back.loc[0, "accuracy_mean"] == pytest.approx(0.85) and back.loc[0, "seeds"] == "0,1"
