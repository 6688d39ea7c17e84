"""The boundary study's experiment: the config's checks, the cell contract (rates chosen on dev, the dev
curve, recall against state size), resume, workers and their clean-up, the CLI's JSON.  The tasks
themselves are tests/test_boundary_tasks.py's."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from ema_core.learning_rates import settings_at
from ema_core.studies.boundary import learning_rates as boundary_rates
from ema_core.studies.boundary.tasks import TASKS
from ema_core.experiments import REGISTRY, Cancelled, NullReporter, build_config
from ema_core.studies.boundary import experiment as boundary_experiment
from ema_core.studies.boundary.experiment import cells, difficulties
from ema_core.mixers import MIXER_NAMES

# Warnings a fresh interpreter does not print (Python's default filters): the rest would be a line on stderr.
HIDDEN_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A whole grid in seconds: every task, two distances, two MQAR sizes, two seeds, recall against state
# at two widths (EMA at 8 and 16, the window and softmax at 16), rates compared half way.
TINY = {"mixers": "window_k,ema,softmax", "distances": "1,3", "mqar_pairs": "2,4", "mqar_len": "16",
        "data.seq_len": 16, "data.n_train": 32, "data.n_dev": 16, "data.n_test": 16, "data.mqar_vocab": 32,
        "train.steps": 6, "train.lrs": "0.01,0.003", "train.choose_at": 0.5, "train.eval_every": 2,
        "model.d": 16, "recall_widths": "8,16", "seeds": 2}
MAP_CELLS = 3 * (4 * 2 + 2)  # per seed: mixers × (4 tasks × 2 distances at one ρ + 2 MQAR sizes)


def test_bad_settings_are_refused_naming_the_setting():
    for setting, value, names in (("mixers", "ema,lstm", MIXER_NAMES), ("tasks", "mqar,copy", TASKS)):
        with pytest.raises(ValueError) as err:
            build_config("boundary", overrides={setting: value})
        said = str(err.value)  # the setting, the name refused, and every name it takes
        assert said.startswith(setting) and repr(value.split(",")[1]) in said and all(n in said for n in names)
    for overrides, says in (
        ({"distances": "1,64", "data.seq_len": 64}, "distances: every k must be below data.seq_len (64)"),
        ({"distances": "2,2,4"}, "distances: 2 given more than once"),
        ({"tasks": []}, "tasks: none given; name at least one"),
        # An MQAR size that does not fit is refused by name, not dropped from the map.
        ({"mqar_pairs": "4,40", "mqar_len": "64"}, "mqar_pairs: 40 pairs need T ≥ 160 (4·pairs), and the longest "
                                                    "of mqar_len is 64"),
        ({"mqar_pairs": "8,16", "mqar_len": "16,64"}, "mqar_len: T = 16 holds none of mqar_pairs [8, 16]"),
        ({"mqar_pairs": "8", "mqar_len": "64", "data.mqar_vocab": 16}, "mqar_pairs: at most 7 pairs"),
        ({"model.conv": 1}, "model.conv: 0 (no conv) or a width of 2 to 8"),
        ({"model.conv": 9}, "model.conv"),
        ({"train.choose_at": 0.25}, "train.choose_at"),
        ({"recall_widths": "16,30"}, "recall_widths: every width must be a multiple of 4"),
        ({"redundancy": "0,1.5"}, "redundancy: every ρ must be in [0, 1]"),
        ({"redundancy": "0.5,0.5"}, "redundancy: 0.5 given more than once"),
        ({"data.words_per_category": 8}, "data.words_per_category: a redundancy below 1 (independent rows) needs "
                                         "at least 16"),
    ):
        with pytest.raises(ValueError) as err:
            build_config("boundary", overrides=overrides)
        assert str(err.value).startswith(says), (overrides, str(err.value))
    # Without MQAR its sizes are not read; without widths recall against state is not measured.
    assert build_config("boundary", overrides={"tasks": "agree_content", "mqar_pairs": "40", "mqar_len": "64"})
    cfg = build_config("boundary", overrides={**TINY, "recall_widths": []})
    assert cfg.recall_widths == () and len(cells(cfg)) == 2 * MAP_CELLS


def test_a_stored_config_of_an_older_run_reads_as_it_ran():
    """A run made before the conv, the independent structure, MQAR's vocabulary, recall against state
    and the softmax heads setting stored none of them: it reads as what it ran (no conv, the
    templates, keys K as a vocabulary holding K keys, no recall cells, four heads), not as today's
    defaults."""
    from ema_core.rundir import current_config

    today = build_config("boundary", overrides=TINY).model_dump(mode="json")
    older = json.loads(json.dumps(today))
    del older["model"]["conv"], older["redundancy"], older["data"]["mqar_vocab"], older["recall_widths"]
    del older["model"]["heads"]
    del older["train"]["mqar_steps"], older["train"]["eval_every"], older["model"]["mlp"]  # defaults: as older runs
    older["data"]["mqar_keys"] = 16
    cfg = boundary_experiment.BoundaryConfig.model_validate(current_config("boundary", older))
    assert cfg.model.conv == 0 and cfg.redundancy == (1.0,) and cfg.recall_widths == ()
    assert cfg.model.heads == 4 and cfg.model.mlp == 4  # four softmax heads, an MLP of 4·d
    assert cfg.data.mqar_vocab == 34 and boundary_experiment.mqar_keys(cfg.data) == 16
    assert len(cells(cfg)) == 2 * MAP_CELLS
    assert current_config("boundary", today) == today  # a config of today passes as it is
    # A run made while the structure was a setting ran at one ρ: independent 0, templates 1.
    for structure, rho in (("independent", 0.0), ("templates", 1.0)):
        between = json.loads(json.dumps(today))
        del between["redundancy"]
        between["data"]["structure"] = structure
        cfg = boundary_experiment.BoundaryConfig.model_validate(current_config("boundary", between))
        assert cfg.redundancy == (rho,) and "structure" not in cfg.data.model_dump()
    # At ρ = 1 alone the templates take fewer words, as the structure setting allowed
    assert build_config("boundary", overrides={"redundancy": "1", "data.words_per_category": 8})


@pytest.mark.parametrize("value,says", [
    ("ema,ema", "mixers: ema given more than once; each may appear once"),
    ("ema,softmax,ema,softmax", "mixers: ema, softmax given more than once"),
    (",", "mixers: none given; name at least one"),
    ("", "mixers: none given; name at least one"),
    ("ema,mamba", "mixers: must be one of 'window_k'"),
])
def test_a_bad_mixers_setting_is_one_plain_line_from_the_command_line(tmp_path, monkeypatch, value, says):
    # The command's main in process (tests/test_cli.py runs a refused `run` through a fresh interpreter):
    # its exit code, stdout and stderr, and any warning, which a real process would print on stderr.
    from test_cli import in_process  # here, not at the top: the spawned cell workers import this module

    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = in_process("run", "boundary", "--preset", "quick", "--set", f"mixers={value}")
    assert not [w for w in caught if not issubclass(w.category, HIDDEN_WARNINGS)], [str(w.message) for w in caught]
    line = out.stderr.strip()
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert line.startswith("emalab: error: mixers") and says in line, line
    assert "Traceback" not in line and "Tuple should" not in line and "after validation" not in line, line
    # nothing said twice: not the setting's name, not the value
    assert sum(w.startswith("mixers") for w in line.split()) == 1 and line.count(repr(value.split(","))) <= 1, line
    if "mamba" in value:  # an unknown name: the names it could have been
        assert all(name in line for name in MIXER_NAMES), line
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_every_preset_builds_and_the_default_grid_holds_every_mixer_and_task():
    from ema_core.studies.boundary.findings import window_reach

    for preset in REGISTRY["boundary"].presets:
        cfg = build_config("boundary", preset=preset)
        assert set(cfg.mixers) == set(MIXER_NAMES) and {"agree_structure", "agree_content4", "mqar"} <= set(cfg.tasks)
        assert cfg.model.conv == 3 and len(cfg.train.lrs) >= 4 and cfg.train.choose_at >= 0.5
        # MQAR not degenerate in the quick map: the pairs' block and one slot per query take at most half
        # the sequence (the full preset follows zoology's grid, up to 4·pairs = T)
        assert preset != "quick" or all(4 * p <= T / 2 for p, T in boundary_experiment.mqar_sizes(cfg))
        # the dial at three redundancies or more, from the independent stream to (nearly: the quick
        # budget's) templates
        assert len(cfg.redundancy) >= 3 and min(cfg.redundancy) == 0 and max(cfg.redundancy) >= 0.9
        assert len(cfg.recall_widths) >= 4 and cfg.model.d in cfg.recall_widths
    quick = build_config("boundary", preset="quick")
    labels = [d.label for d in difficulties(quick)]
    # At a distance beyond the window's reach, at ρ 0, 0.5 and 0.9; one MQAR size with 4·pairs ≤ T/2.
    reach = window_reach(quick.model.window, quick.model.layers, quick.model.conv)
    assert reach == 10 and min(quick.distances) > reach and quick.redundancy == (0.0, 0.5, 0.9)
    assert [d.label for d in difficulties(quick) if d.task == "mqar"] == ["pairs=8,T=64"]
    assert "k=16,rho=0.5" in labels and quick.data.n_train >= 16_384
    recurrent = [m for m in MIXER_NAMES if m not in boundary_experiment.NOT_RECURRENT]
    assert len(cells(quick)) == len(MIXER_NAMES) * len(labels) + len(recurrent) * 3  # three widths besides 64
    full = build_config("boundary", preset="full")
    assert full.data.mqar_vocab == 8192 and max(p for p, T in boundary_experiment.mqar_sizes(full) if T == 256) == 64


@pytest.fixture(scope="module")
def tiny_run():
    """One whole TINY grid, in this process: (config, result)."""
    cfg = build_config("boundary", overrides=TINY)
    return cfg, REGISTRY["boundary"].run(cfg, NullReporter())


def test_a_run_scores_every_cell_with_a_rate_chosen_on_dev(tiny_run):
    cfg, result = tiny_run
    rows = result["tables"]["boundary_accuracy"]
    assert len(rows) == 2 * MAP_CELLS and {r["seed"] for r in rows} == {0, 1}
    for r in rows:
        assert 0 <= r["accuracy"] <= 1 and 0 <= r["dev_accuracy"] <= 1 and 0 < r["chance"] < 1
        assert 0 < r["exclusion_floor"] < 1 and r["d"] == 16
        assert r["lr"] in (0.01, 0.003) and r["params"] > 0 and r["state_floats"] > 0
    s = result["summary"]
    assert s["cells"] == len(rows) and s["tuned_on"] == "dev" and s["seconds"] > 0
    assert set(s["map"]) == {"window_k", "ema", "softmax"}
    assert set(s["map"]["ema"]) == set(TASKS) and set(s["map"]["ema"]["mqar"]) == {"pairs=2,T=16", "pairs=4,T=16"}
    assert set(s["chance"]) == set(TASKS)
    # state per sequence, per layer: the conv's last 2 inputs (2·d) and EMA's d floats, or softmax's
    # key/value cache (2·T·d)
    assert s["state_floats"]["ema"] == 2 * (2 * 16 + 16) and s["state_floats"]["softmax"] == 2 * (2 * 16 + 2 * 16 * 16)
    mean_ema_k1 = np.mean([r["accuracy"] for r in rows if (r["mixer"], r["task"], r["difficulty"]) ==
                           ("ema", "agree_content", "k=1,rho=0")])
    assert s["map"]["ema"]["agree_content"]["k=1,rho=0"] == pytest.approx(mean_ema_k1)


def test_the_dev_curve_holds_every_rate_and_the_rate_is_chosen_on_dev_no_earlier_than_half_way(tiny_run):
    cfg, result = tiny_run
    curve = result["tables"]["boundary_dev_curve"]
    by_cell: dict[tuple, dict[float, dict[int, float]]] = {}
    for p in curve:
        by_cell.setdefault((p["mixer"], p["task"], p["difficulty"], p["seed"], p["d"]), {}).setdefault(
            p["lr"], {})[p["step"]] = p["dev_accuracy"]
    assert len(by_cell) == len(cells(cfg))
    choose = 3  # choose_at 0.5 of 6 steps; evaluations every 2 steps
    for r in result["tables"]["boundary_accuracy"]:
        rates = by_cell[(r["mixer"], r["task"], r["difficulty"], r["seed"], r["d"])]
        # every rate, the one not kept too, unless the first was already perfect on dev at the choice
        assert set(rates) == ({0.01} if rates[0.01][choose] == 1.0 else {0.01, 0.003})
        for lr, points in rates.items():
            # every eval_every steps, and where the rate stops: at the choice, or at the end for the kept one
            assert sorted(points) == ([2, 3, 4, 6] if lr == r["lr"] else [2, 3])
        at_choice = {lr: points[choose] for lr, points in rates.items()}
        assert at_choice[r["lr"]] == max(at_choice.values())  # best on dev at the choice
        if at_choice[0.01] == at_choice.get(0.003):
            assert r["lr"] == 0.01  # a tie keeps the grid's first
        assert r["dev_accuracy"] == rates[r["lr"]][6]


def test_the_kept_rate_is_dev_s_winner_not_test_s(monkeypatch):
    """Scores that rank the rates one way on dev and the other way on test: the kept rate is dev's
    winner, the grid's second (so keeping the first, or choosing on test, would fail here)."""

    class Tagged(boundary_experiment.Trainer):
        def __init__(self, model, data, **kw):
            super().__init__(model, data, **kw)
            model.tagged_lr = kw["lr"]

    small = build_config("boundary", overrides={**TINY, "mixers": "ema", "seeds": 1, "data.n_test": 32,
                                                "recall_widths": []})

    def scored(model, data):
        on_dev = len(data.tokens) == small.data.n_dev  # dev and test differ in size here
        return ({0.01: 0.2, 0.003: 0.9} if on_dev else {0.01: 0.8, 0.003: 0.1})[model.tagged_lr]

    monkeypatch.setattr(boundary_experiment, "Trainer", Tagged)  # workers=1: the cells run in this process
    monkeypatch.setattr(boundary_experiment, "accuracy", scored)
    picked = REGISTRY["boundary"].run(small, NullReporter())["tables"]["boundary_accuracy"]
    assert len(picked) == len(cells(small))
    assert {(r["lr"], r["dev_accuracy"], r["accuracy"]) for r in picked} == {(0.003, 0.9, 0.1)}


def test_a_rate_perfect_on_dev_at_the_choice_settles_the_cell_and_the_rest_are_not_trained(monkeypatch):
    """The first rate scores 1.0 on dev at the choice: a later one could only tie, and a tie keeps the
    first, so the later rates never train; the row is the one a full grid would have given."""
    trained: list[float] = []

    class Counted(boundary_experiment.Trainer):
        def __init__(self, model, data, **kw):
            super().__init__(model, data, **kw)
            model.tagged_lr = kw["lr"]

        def advance(self, until, should_stop=lambda: False):
            trained.append(self.lr)
            return super().advance(until, should_stop)

    small = build_config("boundary", overrides={**TINY, "mixers": "ema", "seeds": 1, "tasks": "agree_content",
                                                "distances": "1", "recall_widths": [],
                                                "train.lrs": "0.01,0.003,0.001"})
    monkeypatch.setattr(boundary_experiment, "Trainer", Counted)

    def perfect_first(model, data):
        return 1.0 if model.tagged_lr == 0.01 else 0.5

    monkeypatch.setattr(boundary_experiment, "accuracy", perfect_first)
    out = REGISTRY["boundary"].run(small, NullReporter())["tables"]
    assert set(trained) == {0.01}  # the 3e-3 and 1e-3 models took no step
    assert [(r["lr"], r["dev_accuracy"]) for r in out["boundary_accuracy"]] == [(0.01, 1.0)]
    assert {p["lr"] for p in out["boundary_dev_curve"]} == {0.01}

    def perfect_second(model, data):  # not the first: every rate up to the perfect one trains
        return 1.0 if model.tagged_lr == 0.003 else 0.5

    trained.clear()
    monkeypatch.setattr(boundary_experiment, "accuracy", perfect_second)
    out = REGISTRY["boundary"].run(small, NullReporter())["tables"]
    assert set(trained) == {0.01, 0.003}
    assert [r["lr"] for r in out["boundary_accuracy"]] == [0.003]


def test_the_pool_hands_out_the_longest_cells_first():
    cfg = build_config("boundary", preset="quick")
    grid = cells(cfg)
    sizes = [boundary_experiment.cell_size(cfg, c) for c in grid]
    mqar = [s for c, s in zip(grid, sizes) if c.difficulty.task == "mqar"]
    rest = [s for c, s in zip(grid, sizes) if c.difficulty.task != "mqar"]
    assert min(mqar) > max(rest)  # every MQAR cell, the narrow ones of recall against state too, first


def test_recall_against_state_reuses_the_map_s_cell_at_the_body_s_width(tiny_run):
    cfg, result = tiny_run
    recall = result["tables"]["boundary_recall_state"]
    assert set(recall[0]) == {"mixer", "difficulty", "d", "seed", "accuracy", "dev_accuracy", "chance", "lr",
                              "state_floats", "params"}
    # EMA at each width, the window and softmax at the body's only; every MQAR size, every seed.
    assert sorted({(r["mixer"], r["d"]) for r in recall}) == [("ema", 8), ("ema", 16), ("softmax", 16),
                                                              ("window_k", 16)]
    assert len(recall) == 4 * 2 * 2
    mqar = {(r["mixer"], r["difficulty"], r["seed"]): r for r in result["tables"]["boundary_accuracy"]
            if r["task"] == "mqar"}
    for r in recall:
        if r["d"] == 16:  # the map's own cell, not trained again
            assert {k: mqar[(r["mixer"], r["difficulty"], r["seed"])][k] for k in r} == r
    ema8 = [r for r in recall if (r["mixer"], r["d"]) == ("ema", 8)]
    assert {r["state_floats"] for r in ema8} == {2 * (2 * 8 + 8)}
    assert ema8[0]["params"] < mqar[("ema", "pairs=2,T=16", 0)]["params"]
    # The summary: {mixer: {state floats: accuracy}}, each the mean over seeds and MQAR sizes.
    by_state = result["summary"]["recall_vs_state"]
    assert set(by_state) == {"window_k", "ema", "softmax"} and list(by_state["ema"]) == ["48", "96"]
    assert by_state["ema"]["48"] == pytest.approx(np.mean([r["accuracy"] for r in ema8]))


def test_a_cancelled_run_resumes_cell_by_cell_to_the_uninterrupted_result():
    cfg = build_config("boundary", overrides={**TINY, "seeds": 1})
    whole = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]
    rep = NullReporter(stop_after_checkpoints=5)
    with pytest.raises(Cancelled):
        REGISTRY["boundary"].run(cfg, rep)
    step, state = rep.load_checkpoint()
    assert step == 5 and len(state["done"]) == 5
    rep.stop_after_checkpoints = None
    resumed = REGISTRY["boundary"].run(cfg, rep)["tables"]
    assert resumed == whole
    other = build_config("boundary", overrides={**TINY, "seeds": 1, "train.steps": 7})
    with pytest.raises(ValueError, match="config"):
        REGISTRY["boundary"].run(other, rep)  # another config's checkpoint is refused


def test_cells_in_two_processes_give_the_map_of_one():
    cfg = build_config("boundary", overrides={**TINY, "mixers": "ema,softmax", "seeds": 1})
    one = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]
    two = REGISTRY["boundary"].run(cfg.model_copy(update={"workers": 2}), NullReporter())["tables"]
    assert one == two


class ReadsAhead(torch.nn.Module):
    """A mixer that reads x_{t+1}: what a bring-your-own mixer with an off-by-one mask does."""

    settings: dict = {}

    def __init__(self, d, seed=0):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        return self.proj(x + torch.nn.functional.pad(x[:, 1:], (0, 0, 0, 1)))

    def state_floats(self, T):
        return 0


def test_a_mixer_that_is_not_causal_is_refused_before_any_cell_trains(monkeypatch):
    from ema_core.mixers import registry

    monkeypatch.setitem(registry.MIXERS, "ema", ReadsAhead)
    trained = []
    monkeypatch.setattr(boundary_experiment, "run_cell", lambda *a, **k: trained.append(a))
    cfg = build_config("boundary", overrides={**TINY, "seeds": 1})
    with pytest.raises(ValueError, match=r"^mixers: mixer 'ema' is not causal.*the map trains causal mixers only"):
        REGISTRY["boundary"].run(cfg, NullReporter())
    assert trained == []


def _cell_or_fail(cfg, mixer, d, seed, width):
    """A worker's cell that notes each cell it starts and fails the one BOUNDARY_TEST_FAIL names.  The
    workers are spawned: they run this by importing this module, and read the test's wishes from the
    environment they inherit (a monkeypatch of the parent is not seen there)."""
    i = cells(cfg).index((mixer, d, seed, width))
    (Path(os.environ["BOUNDARY_TEST_STARTED"]) / str(i)).touch()
    if str(i) == os.environ.get("BOUNDARY_TEST_FAIL"):
        raise RuntimeError(f"cell {i} failed")
    return boundary_experiment._worker_cell(cfg, mixer, d, seed, width)


def test_a_failing_cell_stops_the_workers_and_keeps_the_cells_done(tmp_path, monkeypatch):
    cfg = build_config("boundary", overrides={**TINY, "seeds": 1, "workers": 2, "recall_widths": []})
    grid = cells(cfg)
    started = tmp_path / "started"
    started.mkdir()
    monkeypatch.setenv("BOUNDARY_TEST_STARTED", str(started))
    monkeypatch.setenv("BOUNDARY_TEST_FAIL", "2")
    monkeypatch.setattr(boundary_experiment, "_worker_cell", _cell_or_fail)  # what the parent submits
    rep = NullReporter()
    with pytest.raises(RuntimeError, match="cell 2 failed"):
        REGISTRY["boundary"].run(cfg, rep)
    # The queued cells were cancelled, not trained: a worker takes cell 2 once it has done cell 0 or 1;
    # after it, only the few cells the pool had already handed on start (and stop at their first step).
    ran = {int(p.name) for p in started.iterdir()}
    assert {0, 1, 2} <= ran and len(ran) < len(grid) // 2
    _, state = rep.load_checkpoint()
    kept = {i for i, _ in state["done"]}
    assert kept and 2 not in kept and kept <= ran and len(rep.events) == len(kept)
    # A resume trains the others only: the cells done before the failure are not done again.
    for p in started.iterdir():
        p.unlink()
    monkeypatch.delenv("BOUNDARY_TEST_FAIL")
    rows = REGISTRY["boundary"].run(cfg, rep)["tables"]["boundary_accuracy"]
    assert {int(p.name) for p in started.iterdir()} == set(range(len(grid))) - kept
    assert len(rows) == MAP_CELLS


def _children(pid: int) -> set[int]:
    """The processes ``pid`` started that are still its children (Linux's /proc)."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with open(task / "children") as f:
            out |= {int(c) for c in f.read().split()}
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie has exited: its parent is gone and nothing has reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from Linux's /proc")
def test_a_worker_killed_with_sigkill_takes_its_training_children_with_it(tmp_path):
    """The run's process is killed with SIGKILL mid-grid (it runs no clean-up): its two training
    processes and multiprocessing's resource tracker end too, within seconds, rather than training on
    under PID 1."""
    import signal
    import time

    started = tmp_path / "started"
    started.mkdir()
    script = (
        "import sys\n"
        "sys.path.insert(0, 'tests')\n"
        "from ema_core.experiments import NullReporter, REGISTRY, build_config\n"
        "from ema_core.studies.boundary import experiment as boundary\n"
        "from test_boundary import TINY, _cell_or_fail\n"
        "boundary._worker_cell = _cell_or_fail\n"
        "cfg = build_config('boundary', overrides={**TINY, 'seeds': 1, 'workers': 2, 'train.steps': 1_000_000})\n"
        "REGISTRY['boundary'].run(cfg, NullReporter())\n"
    )
    env = {**os.environ, "BOUNDARY_TEST_STARTED": str(started)}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        # Until two spawned workers each start a cell; a hang is pytest-timeout's to catch, not a clock's here.
        while len(list(started.iterdir())) < 2:
            assert proc.poll() is None, "the run ended before its workers started a cell"
            time.sleep(0.2)
        children = _children(proc.pid)
        assert len(children) >= 3  # two workers and the resource tracker
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # liveness again: the kernel kills them with the parent; 120 s only bounds a hang on a busy machine
        deadline = time.monotonic() + 120
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for c in children if _alive(c)], "children of the killed run still running"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_run_prints_the_map_as_json(tmp_path, monkeypatch):
    # The command's main in process (its console entry is tests/test_cli.py's to start); the run itself
    # is still the runner's worker process.
    from test_cli import in_process

    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    out = in_process("run", "boundary", *sets, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    obj = json.loads(out.stdout)
    assert obj["state"] == "done" and obj["cells"] == 2 * MAP_CELLS and obj["seconds"] > 0
    assert set(obj["map"]["softmax"]) == set(TASKS)
    assert set(obj["map"]["softmax"]["agree_structure"]) == {"k=1,rho=0", "k=3,rho=0"}
    assert set(obj["chance"]) == set(TASKS) and set(obj["state_floats"]) == {"window_k", "ema", "softmax"}
    assert set(obj["recall_vs_state"]) == {"window_k", "ema", "softmax"}


@pytest.mark.gpu
def test_a_grid_trains_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cfg = build_config("boundary", overrides={**TINY, "seeds": 1, "device": "cuda"})
    rows = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]["boundary_accuracy"]
    assert len(rows) == MAP_CELLS and all(0 <= r["accuracy"] <= 1 for r in rows)


def test_a_cuda_device_that_is_not_there_is_refused():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(ValueError, match="no CUDA device"):
        build_config("boundary", overrides={"device": "cuda"})


def test_a_rate_table_trains_each_cell_once_at_its_rate_and_refuses_what_it_was_not_chosen_for(monkeypatch):
    small = {**TINY, "mixers": "ema,softmax", "tasks": "agree_structure,mqar", "distances": "3", "seeds": 1,
             "mqar_pairs": "2"}
    dev_cfg = build_config("boundary", overrides=small)
    grid = cells(dev_cfg)
    rates = {"|".join(map(str, boundary_rates.rate_key(c.mixer, c.difficulty.task, c.width))):
             0.003 if c.mixer == "ema" else 0.01 for c in grid}
    tuned = settings_at(dev_cfg.model_dump(mode="json"), boundary_rates.TUNED_PATHS)
    table = dataclasses.replace(boundary_rates.TABLES[0], rates=rates, tuned_for=tuned)
    monkeypatch.setattr(boundary_rates, "TABLES", (table,))
    cfg = build_config("boundary", overrides={**small, "train.lr_choice": "table"})
    out = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]
    assert {(r["mixer"], r["lr"]) for r in out["boundary_accuracy"]} == {("ema", 0.003), ("softmax", 0.01)}
    # one rate trained per cell: every dev curve is that rate's
    assert {(c["mixer"], c["lr"]) for c in out["boundary_dev_curve"]} == {("ema", 0.003), ("softmax", 0.01)}
    # a cell it has no rate for (a mixer of one's own) chooses on dev among the rates, in the cell
    cfg = build_config("boundary", overrides={**small, "mixers": "ema,ema3", "train.lr_choice": "table"})
    out = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]
    assert {c["lr"] for c in out["boundary_dev_curve"] if c["mixer"] == "ema3"} == {0.01, 0.003}
    assert {c["lr"] for c in out["boundary_dev_curve"] if c["mixer"] == "ema"} == {0.003}
    # at another budget or another body, the table is refused by name
    for overrides, says in (({"train.steps": 7}, "train.steps 6 there, 7 here"),
                            ({"model.d": 32, "recall_widths": "8,32"}, "model.d 16 there, 32 here")):
        with pytest.raises(ValueError) as err:
            build_config("boundary", overrides={**small, **overrides, "train.lr_choice": "table"})
        assert str(err.value).startswith("train.lr_choice: ") and says in str(err.value), str(err.value)
        build_config("boundary", overrides={**small, **overrides})  # choosing on dev, it runs
    monkeypatch.setattr(boundary_rates, "TABLES", (dataclasses.replace(table, rates={}),))
    with pytest.raises(ValueError, match="^train.lr_choice: table, but the quick rate table is empty"):
        build_config("boundary", overrides={**small, "train.lr_choice": "table"})
