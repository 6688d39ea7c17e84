"""Adding a study, as docs/architecture.md says, followed literally in a copy of the project.

The page's steps are read from the page itself (so neither can rot): each ``python`` block is
written where its first line names, each ``diff`` block is applied to the file it names, and nothing
else is changed: a folder and one registry line.  The copy then runs as a user would run it, in
fresh processes: the CLI offers and trains the new kind, the Jobs page offers it, the store holds its
declared table, the Overview's scoreboard judges its claim on three seeds, and both exports (the
CLI's and the Export page's) hold its rows.  A step the page leaves out fails here as it would for
the user.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from project_copy import ROOT, apply_diff, copy_project, run_in

PAGE = ROOT / "docs" / "architecture.md"
NAME = "coin"

pytestmark = pytest.mark.subprocess


def steps(language: str) -> list[str]:
    """The page's fenced blocks of ``language`` in its step-by-step section, in order."""
    section = PAGE.read_text(encoding="utf-8").split("## Adding a study, step by step", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the project with the page's steps applied, and nothing else."""
    root = copy_project(tmp_path_factory.mktemp("study") / "project")
    written = []
    for block in steps("python"):
        head = block.split("\n", 1)[0]
        assert head.startswith("# ema_core/studies/"), f"a step writes into the study's folder only: {head}"
        (root / head[2:].strip()).parent.mkdir(parents=True, exist_ok=True)
        (root / head[2:].strip()).write_text(block, encoding="utf-8")
        written.append(head[2:].strip())
    assert {Path(p).parent.name for p in written} == {NAME}
    (diff,) = steps("diff")
    assert diff.startswith("# ema_core/studies/__init__.py\n"), "the one line outside the folder is the registry's"
    apply_diff(root, diff)
    return root


def run(checkout: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    return run_in(checkout, *args, home=home, timeout=600)


def test_the_new_study_is_run_shown_judged_and_exported(checkout, tmp_path):
    home = tmp_path / "home"
    helped = run(checkout, "-m", "jobs.cli", "run", "--help", home=home)
    assert helped.returncode == 0 and NAME in helped.stdout, helped.stderr[-2000:]
    for seed in range(3):  # the rule's three seeds
        out = run(checkout, "-m", "jobs.cli", "run", NAME, "--preset", "quick", "--seed", str(seed), "--json", home=home)
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout)
        assert result["state"] == "done" and result["ingested"] and result["kind"] == NAME, result

    exported = run(checkout, "-m", "jobs.cli", "export", "--table", "coin_error", "--format", "csv",
                   "--out", "coin.csv", home=home)
    assert exported.returncode == 0, exported.stderr[-3000:]
    csv = (home / "exports" / "coin.csv").read_text(encoding="utf-8")
    assert csv.count("\n") >= 1 + 3 * 2 and "alpha" in csv and "error" in csv  # a row per seed and rate

    shown = run(checkout, "-c", (
        "import json, sys; sys.path.insert(0, 'tests'); "
        "from apptest import ok, open_page; from store.scoreboard import scoreboard; "
        "jobs = open_page('pages/jobs.py'); "
        "kinds = list(jobs.selectbox(key='launch_kind').options); "
        "over = open_page(); "
        "board = {j.study: [j.seeds, [(s.verdict, s.line) for s in j.scores]] for j in scoreboard()}; "
        "text = ' '.join(str(m.value) for m in over.markdown); "
        "export = open_page('pages/export.py'); "
        "tables = list(export.selectbox(key='export_table').options); "
        "print(json.dumps([kinds, board.get('coin'), text, tables]))"), home=home)
    assert shown.returncode == 0, shown.stderr[-3000:]
    kinds, board, overview, tables = json.loads(shown.stdout.strip().splitlines()[-1])
    assert any(k.startswith(NAME) for k in kinds), kinds
    seeds, scores = board
    assert seeds == [0, 1, 2] and len(scores) == 1
    verdict, line = scores[0]
    # The error of a trace at α = 0.5 is about 4 times that at α = 0.05 (√(α/(2−α)) ratio): far beyond
    # the spread of three seeds, whatever the seeds.
    assert verdict == "reproduced" and "A slower trace reads the bias closer" in line
    assert "Coin bias" in overview and "A slower trace reads the bias closer" in overview
    assert any(t.startswith("coin_error") for t in tables), tables


def test_a_declared_table_that_changed_is_refused_and_the_store_is_left_as_it_was(checkout, tmp_path):
    home = tmp_path / "home"
    out = run(checkout, "-m", "jobs.cli", "run", NAME, "--preset", "quick", "--json", home=home)
    assert out.returncode == 0, out.stderr[-3000:]
    init = checkout / "ema_core" / "studies" / NAME / "__init__.py"
    before = init.read_text(encoding="utf-8")
    changed = tmp_path / "changed"
    shutil.copytree(checkout, changed, ignore=shutil.ignore_patterns("__pycache__"))
    (changed / init.relative_to(checkout)).write_text(
        before.replace('Column("error", float, False)', 'Column("error", float, False), Column("bias", float, False)'),
        encoding="utf-8")
    refused = run(changed, "-m", "jobs.cli", "store", "migrate", home=home)
    assert refused.returncode != 0
    assert "coin_error" in refused.stderr and "numbered migration" in refused.stderr, refused.stderr[-2000:]
    still = run(checkout, "-m", "jobs.cli", "export", "--table", "coin_error", "--format", "csv",
                "--out", "still.csv", home=home)
    assert still.returncode == 0 and (home / "exports" / "still.csv").read_text(encoding="utf-8").count("\n") >= 3
