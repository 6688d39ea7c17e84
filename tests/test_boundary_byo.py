"""Bringing your own mixer, as the README says, followed literally in a copy of the project.

The README's example module and its registration lines are read from the README itself (so neither
can rot): the module is written where the README names it, each ``diff`` block is applied to the
file it names (its unmarked lines must stand there as shown), and nothing else is changed.  The
copy then runs as a user would run it, in fresh processes: the mixer meets the contract every mixer
meets (``tests/test_mixers.py``), the command the README gives trains it on the boundary study's
tasks, and the run is stored, shown on the Boundary map page and exported.  A step the README leaves
out (an import line, say) fails here as it would for the user.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ema_core.studies.boundary.experiment import BoundaryModelConfig
from project_copy import ROOT, apply_diff, copy_project, run_in

README = ROOT / "README.md"
NAME = "cumulative_mean"
# What a user's copy of the project needs to run, show and export a run (the data folder is not read).
COPIED = ("ema_core", "store", "jobs", "pages", "tests", "app.py")
TINY = {"distances": "1,2", "mqar_pairs": "2", "mqar_len": "16", "data.seq_len": 16, "data.n_train": 32,
        "data.n_dev": 16, "data.n_test": 16, "train.steps": 4, "train.lrs": "0.01", "model.d": 16}


def readme_blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language`` in its bring-your-own-mixer section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The boundary map, and bringing your own mixer", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the project with the README's steps applied, and nothing else."""
    root = copy_project(tmp_path_factory.mktemp("byo") / "project")
    (module,) = [b for b in readme_blocks("python") if b.startswith("# ema_core/mixers/")]
    (root / module.split("\n", 1)[0][2:].strip()).write_text(module, encoding="utf-8")
    diffs = readme_blocks("diff")
    assert diffs, "the README shows the registration lines as diff blocks"
    for block in diffs:
        apply_diff(root, block)
    return root


def run(checkout: Path, *args: str, home: Path | None = None) -> subprocess.CompletedProcess:
    return run_in(checkout, *args, home=home)


def test_the_readme_steps_register_the_mixer_everywhere_the_names_are_read(checkout):
    out = run(checkout, "-c", "import json, ema_core.mixers.registry as r, ema_core.palette as p; "
                              "from ema_core.experiments import build_config; "
                              f"cfg = build_config('boundary', overrides={{'mixers': 'ema,{NAME}'}}); "
                              "print(json.dumps([list(r.MIXERS), list(p.MIXER_COLORS), list(cfg.mixers), "
                              f"r.MIXERS['{NAME}'].__module__, r.__file__]))")
    assert out.returncode == 0, out.stderr[-3000:]
    registry, colours, chosen, module, source = json.loads(out.stdout)
    assert registry[-1] == colours[-1] == NAME and chosen == ["ema", NAME] and module == "ema_core.mixers.mine"
    assert Path(source).is_relative_to(checkout)  # the copy ran, not the project it was copied from


def test_the_readme_mixer_meets_the_contract_every_mixer_meets(checkout):
    out = run(checkout, "-m", "pytest", "tests/test_mixers.py", "-q", "-k", NAME, "-p", "no:cacheprovider")
    assert out.returncode == 0, out.stdout[-3000:]
    assert int(re.search(r"(\d+) passed", out.stdout).group(1)) >= 6 and "deselected" in out.stdout


def test_the_readmes_command_trains_it_and_the_run_is_stored_shown_and_exported(checkout, tmp_path):
    home = tmp_path / "home"
    sets = [a for k, v in {"mixers": f"ema,{NAME},softmax", **TINY}.items() for a in ("--set", f"{k}={v}")]
    out = run(checkout, "-m", "jobs.cli", "run", "boundary", *sets, "--json", home=home)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["state"] == "done" and result["ingested"], result
    # d floats in each of 2 layers, and the last conv − 1 inputs of the short conv before it
    conv = BoundaryModelConfig().conv
    assert NAME in result["map"] and result["state_floats"][NAME] == 2 * (16 + max(conv - 1, 0) * 16)

    shown = run(checkout, "-c", "import json, sys; sys.path.insert(0, 'tests'); "
                                "from apptest import ok, open_page; from store import export_table; "
                                "at = open_page('pages/boundary.py'); ok(at); "
                                "text = ' '.join(str(x.value) for x in [*at.markdown, *at.caption]) + "
                                "' '.join(d.value.to_string() for d in at.dataframe); "
                                "path = export_table('boundary_accuracy', 'csv'); "
                                "print(json.dumps([text, open(path, encoding='utf-8').read()]))", home=home)
    assert shown.returncode == 0, shown.stderr[-3000:]
    page, exported = json.loads(shown.stdout.strip().splitlines()[-1])
    assert NAME in page and NAME in exported


# A mixer that reads one step ahead, registered by the same steps: the probe every run starts with
# (ema_core.mixers.causality) must refuse it before anything trains on the answer it reads.
AHEAD = """import torch
from ema_core.mixers.base import Mixer, check_input


class ReadsAhead(Mixer):
    name = "reads_ahead"

    def __init__(self, d: int, seed: int = 0):
        super().__init__(d, seed)
        self.out = self.linear(d, d)

    def scan(self, x):
        check_input(x, self.d)
        return self.out(torch.cat([x[:, 1:], x[:, -1:]], 1)), x[:, -1]
"""
AHEAD_STEPS = ("# ema_core/mixers/__init__.py\n     \"cumulative_mean\",\n+    \"reads_ahead\",\n )\n",
               "# ema_core/mixers/registry.py\n from ema_core.mixers.mine import CumulativeMean\n"
               "+from ema_core.mixers.ahead import ReadsAhead\n",
               "# ema_core/mixers/registry.py\n     CumulativeMean,\n+    ReadsAhead,\n )\n")


def test_a_mixer_that_reads_ahead_is_refused_when_the_run_starts(checkout, tmp_path):
    root = tmp_path / "project"
    shutil.copytree(checkout, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "ema_core" / "mixers" / "ahead.py").write_text(AHEAD, encoding="utf-8")
    for block in AHEAD_STEPS:
        apply_diff(root, block)
    sets = [a for k, v in {"mixers": "ema,reads_ahead", **TINY}.items() for a in ("--set", f"{k}={v}")]
    out = run(root, "-m", "jobs.cli", "run", "boundary", *sets, "--json", home=tmp_path / "home")
    assert out.returncode != 0, out.stdout[-3000:]
    result = json.loads(out.stdout)
    assert result["state"] == "failed" and not result["summary"], result
    assert "mixer 'reads_ahead' is not causal: its output at position 0 changes" in result["message"], result
