"""The boundary study's tasks and experiment: pure tasks, the cell contract, resume, workers, the CLI's JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ema_core.boundary import (CATEGORIES, IGNORE, STOP, TASKS, Difficulty, TaskConfig, category_of, chance,
                               content_map, make_data)
from ema_core.experiments import REGISTRY, Cancelled, NullReporter, build_config
from ema_core.experiments import boundary as boundary_experiment
from ema_core.experiments.boundary import cells, difficulties
from ema_core.mixers import MIXER_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = TaskConfig(seq_len=24, words_per_category=8, lag_vocab=16, mqar_keys=16, n_train=64, n_dev=16, n_test=32)
# A whole grid in seconds: every task, two distances, two MQAR sizes, two seeds.
TINY = {"mixers": "window_k,ema,softmax", "distances": "1,3", "mqar_pairs": "2,4", "mqar_len": "16",
        "data.seq_len": 16, "data.n_train": 32, "data.n_dev": 16, "data.n_test": 16, "train.steps": 6,
        "train.lrs": "0.01,0.003", "model.d": 16, "seeds": 2}


def agree(task: str, k: int) -> Difficulty:
    return Difficulty(task, k=k, seq_len=SMALL.seq_len)


def test_every_task_is_a_pure_function_of_config_seed_and_split():
    for d in (agree("agree_structure", 2), agree("agree_content", 2), agree("lag_identity", 3),
              Difficulty("mqar", pairs=4, seq_len=24)):
        a, b = make_data(d, SMALL, 5, "train"), make_data(d, SMALL, 5, "train")
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
        other_split, other_seed = make_data(d, SMALL, 5, "test"), make_data(d, SMALL, 6, "train")
        assert not torch.equal(a.tokens[:32], other_split.tokens[:32])
        assert not torch.equal(a.tokens, other_seed.tokens)
        assert a.tokens.dtype == torch.int64 and a.tokens.shape == (SMALL.n_train, d.seq_len)
        assert int(a.tokens.max()) < a.vocab and int(a.targets.max()) < a.n_classes


def test_the_two_agreement_variants_share_sequences_and_positions_and_differ_only_in_the_label():
    s, c = make_data(agree("agree_structure", 3), SMALL, 1, "dev"), make_data(agree("agree_content", 3), SMALL, 1, "dev")
    assert torch.equal(s.tokens, c.tokens)
    assert torch.equal(s.targets == IGNORE, c.targets == IGNORE)
    tok = s.tokens.numpy()
    cats = category_of(tok, SMALL.words_per_category)
    scored = s.targets.numpy() != IGNORE
    t_idx = np.nonzero(scored)
    # the label at t is the category (or the map) of the token 3 back, and never of a full stop
    back = tok[t_idx[0], t_idx[1] - 3]
    assert (back != STOP).all() and (t_idx[1] >= 3).all()
    assert (s.targets.numpy()[t_idx] == cats[t_idx[0], t_idx[1] - 3]).all()
    assert (c.targets.numpy()[t_idx] == content_map(SMALL, 1)[back]).all()
    assert s.n_classes == len(CATEGORIES) and c.n_classes == 2


def test_the_content_map_is_balanced_inside_every_category_so_a_category_says_nothing_of_it():
    m = content_map(SMALL, 3)
    W = SMALL.words_per_category
    assert m[STOP] == 0
    for c in range(len(CATEGORIES)):
        assert m[1 + c * W: 1 + (c + 1) * W].sum() == W // 2
    assert not np.array_equal(m, content_map(SMALL, 4))  # the map is drawn from the seed


def test_lag_identity_names_the_token_k_back_and_mqar_the_value_bound_to_each_query():
    d = make_data(agree("lag_identity", 4), SMALL, 0, "train")
    assert (d.targets[:, :4] == IGNORE).all()
    assert torch.equal(d.targets[:, 4:], d.tokens[:, :-4])
    q = make_data(Difficulty("mqar", pairs=3, seq_len=20), SMALL, 0, "train")
    K = SMALL.mqar_keys
    for row, target in zip(q.tokens.tolist(), q.targets.tolist()):
        keys, values = row[0:6:2], row[1:6:2]
        assert len(set(keys)) == 3 and all(1 <= k <= K for k in keys) and all(K < v <= 2 * K for v in values)
        assert all(t == IGNORE for t in target[:6])
        bound = dict(zip(keys, values))
        assert all(bound[tok] - 1 - K == t for tok, t in zip(row[6:], target[6:]))


def test_chance_is_the_training_majority_label_scored_on_test():
    d = agree("agree_structure", 1)
    train, test = make_data(d, SMALL, 0, "train"), make_data(d, SMALL, 0, "test")
    y = train.targets[train.targets != IGNORE]
    majority = int(torch.bincount(y).argmax())
    t = test.targets[test.targets != IGNORE]
    assert chance(train, test) == pytest.approx(max(0.25, float((t == majority).double().mean())))
    q = Difficulty("mqar", pairs=2, seq_len=8)
    few = TaskConfig(mqar_keys=64, n_train=16, n_dev=16, n_test=16)
    assert chance(make_data(q, few, 0, "train"), make_data(q, few, 0, "test")) >= 1 / 64  # never below a guess
    assert 1 / len(CATEGORIES) <= chance(train, test) < 1


def test_bad_settings_are_refused_naming_the_setting():
    for setting, value, names in (("mixers", "ema,lstm", MIXER_NAMES), ("tasks", "mqar,copy", TASKS)):
        with pytest.raises(ValueError) as err:
            build_config("boundary", overrides={setting: value})
        said = str(err.value)  # the setting, the name refused, and every name it takes
        assert said.startswith(setting) and repr(value.split(",")[1]) in said and all(n in said for n in names)
    with pytest.raises(ValueError, match="below data.seq_len"):
        build_config("boundary", overrides={"distances": "1,64", "data.seq_len": 64})
    with pytest.raises(ValueError, match="2·pairs < T"):
        build_config("boundary", overrides={"mqar_pairs": "40", "mqar_len": "64"})
    with pytest.raises(ValueError, match="distances: 2 given more than once"):
        build_config("boundary", overrides={"distances": "2,2,4"})
    with pytest.raises(ValueError, match="tasks: none given; name at least one"):
        build_config("boundary", overrides={"tasks": []})


@pytest.mark.parametrize("value,says", [
    ("ema,ema", "mixers: ema given more than once; each may appear once"),
    ("ema,softmax,ema,softmax", "mixers: ema, softmax given more than once"),
    (",", "mixers: none given; name at least one"),
    ("", "mixers: none given; name at least one"),
    ("ema,mamba", "mixers: must be one of 'window_k'"),
])
def test_a_bad_mixers_setting_is_one_plain_line_from_the_command_line(tmp_path, value, says):
    env = {**os.environ, "EMALAB_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "run", "boundary", "--preset", "quick", "--set",
                          f"mixers={value}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    line = out.stderr.strip()
    assert out.returncode == 2 and out.stdout == "" and len(line.splitlines()) == 1, out.stderr
    assert line.startswith("emalab: error: mixers") and says in line, line
    assert "Traceback" not in line and "Tuple should" not in line and "after validation" not in line, line
    # nothing said twice: not the setting's name, not the value
    assert sum(w.startswith("mixers") for w in line.split()) == 1 and line.count(repr(value.split(","))) <= 1, line
    if "mamba" in value:  # an unknown name: the names it could have been
        assert all(name in line for name in MIXER_NAMES), line


def test_every_preset_builds_and_the_default_grid_holds_every_mixer_and_task():
    for preset in REGISTRY["boundary"].presets:
        cfg = build_config("boundary", preset=preset)
        assert set(cfg.mixers) == set(MIXER_NAMES) and set(cfg.tasks) == set(TASKS)
    quick = build_config("boundary", preset="quick")
    labels = [d.label for d in difficulties(quick)]
    assert sum(1 for d in difficulties(quick) if d.task == "agree_content") >= 4
    assert sum(1 for d in difficulties(quick) if d.task == "mqar") >= 2
    assert "k=8" in labels and "pairs=16,T=64" in labels
    assert len(cells(quick)) == len(MIXER_NAMES) * len(labels)


def test_a_run_scores_every_cell_with_a_rate_chosen_on_dev(monkeypatch):
    cfg = build_config("boundary", overrides=TINY)
    result = REGISTRY["boundary"].run(cfg, NullReporter())
    rows = result["tables"]["boundary_accuracy"]
    assert len(rows) == len(cells(cfg)) == 3 * (2 + 2 + 2 + 2) * 2
    assert {r["seed"] for r in rows} == {0, 1}
    for r in rows:
        assert 0 <= r["accuracy"] <= 1 and 0 <= r["dev_accuracy"] <= 1 and 0 < r["chance"] < 1
        assert r["lr"] in (0.01, 0.003) and r["params"] > 0 and r["state_floats"] > 0
    s = result["summary"]
    assert s["cells"] == len(rows) and s["tuned_on"] == "dev" and s["seconds"] > 0
    assert set(s["map"]) == {"window_k", "ema", "softmax"}
    assert set(s["map"]["ema"]) == set(TASKS) and set(s["map"]["ema"]["mqar"]) == {"pairs=2,T=16", "pairs=4,T=16"}
    assert set(s["chance"]) == set(TASKS)
    # state per sequence: EMA keeps d floats per layer, softmax its key/value cache (2·T·d per layer)
    assert s["state_floats"]["ema"] == 2 * 16 and s["state_floats"]["softmax"] == 2 * 2 * 16 * 16
    mean_ema_k1 = np.mean([r["accuracy"] for r in rows if (r["mixer"], r["task"], r["difficulty"]) ==
                           ("ema", "agree_content", "k=1")])
    assert s["map"]["ema"]["agree_content"]["k=1"] == pytest.approx(mean_ema_k1)

    # Scores that rank the rates one way on dev and the other way on test: the kept rate is dev's
    # winner, the grid's second (so keeping the first, or choosing on test, would fail here).
    class Tagged(boundary_experiment.Trainer):
        def __init__(self, model, data, **kw):
            super().__init__(model, data, **kw)
            model.tagged_lr = kw["lr"]

    small = build_config("boundary", overrides={**TINY, "mixers": "ema", "seeds": 1, "data.n_test": 32})

    def scored(model, data):
        on_dev = len(data.tokens) == small.data.n_dev  # dev and test differ in size here
        return ({0.01: 0.2, 0.003: 0.9} if on_dev else {0.01: 0.8, 0.003: 0.1})[model.tagged_lr]

    monkeypatch.setattr(boundary_experiment, "Trainer", Tagged)  # workers=1: the cells run in this process
    monkeypatch.setattr(boundary_experiment, "accuracy", scored)
    picked = REGISTRY["boundary"].run(small, NullReporter())["tables"]["boundary_accuracy"]
    assert len(picked) == len(cells(small))
    assert {(r["lr"], r["dev_accuracy"], r["accuracy"]) for r in picked} == {(0.003, 0.9, 0.1)}


def test_a_cancelled_run_resumes_cell_by_cell_to_the_uninterrupted_result():
    cfg = build_config("boundary", overrides={**TINY, "seeds": 1})
    whole = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]["boundary_accuracy"]
    rep = NullReporter(stop_after_checkpoints=5)
    with pytest.raises(Cancelled):
        REGISTRY["boundary"].run(cfg, rep)
    step, state = rep.load_checkpoint()
    assert step == 5 and len(state["done"]) == 5
    rep.stop_after_checkpoints = None
    resumed = REGISTRY["boundary"].run(cfg, rep)["tables"]["boundary_accuracy"]
    assert resumed == whole
    other = build_config("boundary", overrides={**TINY, "seeds": 1, "train.steps": 7})
    with pytest.raises(ValueError, match="config"):
        REGISTRY["boundary"].run(other, rep)  # another config's checkpoint is refused


def test_cells_in_two_processes_give_the_map_of_one():
    cfg = build_config("boundary", overrides={**TINY, "mixers": "ema,softmax", "seeds": 1})
    one = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]["boundary_accuracy"]
    two = REGISTRY["boundary"].run(cfg.model_copy(update={"workers": 2}), NullReporter())["tables"]["boundary_accuracy"]
    assert one == two


def _cell_or_fail(cfg, mixer, d, seed):
    """A worker's cell that notes each cell it starts and fails the one BOUNDARY_TEST_FAIL names.  The
    workers are spawned: they run this by importing this module, and read the test's wishes from the
    environment they inherit (a monkeypatch of the parent is not seen there)."""
    i = cells(cfg).index((mixer, d, seed))
    (Path(os.environ["BOUNDARY_TEST_STARTED"]) / str(i)).touch()
    if str(i) == os.environ.get("BOUNDARY_TEST_FAIL"):
        raise RuntimeError(f"cell {i} failed")
    return boundary_experiment._worker_cell(cfg, mixer, d, seed)


def test_a_failing_cell_stops_the_workers_and_keeps_the_cells_done(tmp_path, monkeypatch):
    cfg = build_config("boundary", overrides={**TINY, "seeds": 1, "workers": 2})
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
    assert len(rows) == len(grid)


def test_cli_run_prints_the_map_as_json(tmp_path):
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    env = {**os.environ, "EMALAB_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "run", "boundary", *sets, "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    obj = json.loads(out.stdout)
    assert obj["state"] == "done" and obj["cells"] == 48 and obj["seconds"] > 0
    assert set(obj["map"]["softmax"]) == set(TASKS)
    assert set(obj["map"]["softmax"]["agree_structure"]) == {"k=1", "k=3"}
    assert set(obj["chance"]) == set(TASKS) and set(obj["state_floats"]) == {"window_k", "ema", "softmax"}


@pytest.mark.gpu
def test_a_grid_trains_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cfg = build_config("boundary", overrides={**TINY, "seeds": 1, "device": "cuda"})
    rows = REGISTRY["boundary"].run(cfg, NullReporter())["tables"]["boundary_accuracy"]
    assert len(rows) == len(cells(cfg)) and all(0 <= r["accuracy"] <= 1 for r in rows)


def test_a_cuda_device_that_is_not_there_is_refused():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(ValueError, match="no CUDA device"):
        build_config("boundary", overrides={"device": "cuda"})
