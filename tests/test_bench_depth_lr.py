"""The depth rate sweep's search: a ladder of √2 steps, and an edge winner extended until the best is inside.

The trainings are replaced by a known dev loss per rate (a parabola in log-rate with its minimum at a
chosen rate per depth), so the search itself is what is tested; the trainings are the experiment's own
cells, tested in test_depth.py."""
import math

import pytest

import bench.depth_lr as sweep_module
from bench.depth_lr import ladder, rung

BEST = {4: 8e-3, 8: 2.83e-3, 16: 1.41e-3}  # on the ladder: 4 and 16 blocks lie beyond the start's edges


@pytest.fixture
def fake_trainings(monkeypatch):
    calls = []

    def run_parallel(jobs, workers, reporter, finished, work):
        for i, (cfg, rule, depth, seed, dev_tokens) in jobs:
            calls.append((rule, depth, cfg.train.lr))
            loss = 5.0 + math.log(cfg.train.lr / BEST[depth]) ** 2 + (0.5 if rule == "dynamic" and seed == 1 else 0)
            if rule == "select" and seed == 1 and cfg.train.lr == BEST[depth]:
                loss = 9.0  # the best rate on seed 0 diverges on seed 1
            if rule == "static" and seed == 1 and cfg.train.lr >= BEST[depth] / 1.5:
                loss = 9.0  # on seed 1 the best and the rung below diverge: the check goes down further
            finished(i, {"val_loss": loss, "val_bpb": loss / 2.5, "seconds": 1.0})
        return True

    monkeypatch.setattr(sweep_module, "run_parallel", run_parallel)
    return calls


def test_the_ladder_steps_by_root_two_and_a_start_off_it_is_refused():
    assert [ladder(k) for k in range(5)] == [1e-3, 1.41e-3, 2e-3, 2.83e-3, 4e-3]
    assert all(ladder(k + 1) / ladder(k) < 1.5 for k in range(-6, 12))
    assert rung(2.83e-3) == 3 and rung(1e-3) == 0
    with pytest.raises(ValueError, match="0.003 is not on the ladder"):
        rung(3e-3)


def test_an_edge_winner_is_extended_until_the_best_is_inside(fake_trainings):
    report = sweep_module.sweep(rules=("sum", "dynamic"), depths=(4, 8, 16), seeds=(0,), rounds=6)
    for rule in ("sum", "dynamic"):
        for L, best in BEST.items():
            c = report["choice"][rule][str(L)]
            assert c["lr"] == best and c["inside"], (rule, L, c)
            assert c["tried"] == sorted(c["tried"]) and min(c["tried"]) < best < max(c["tried"])
    # 8 blocks: the start (2e-3, 2.83e-3, 4e-3) holds the best inside, so nothing more is tried there
    assert report["choice"]["sum"]["8"]["tried"] == [2e-3, 2.83e-3, 4e-3]
    assert report["choice"]["sum"]["4"]["tried"] == [2e-3, 2.83e-3, 4e-3, 5.66e-3, 8e-3, 0.0113]
    assert report["held_out_read"] is False


def test_rounds_that_run_out_flag_the_choice_on_the_edge(fake_trainings):
    report = sweep_module.sweep(rules=("sum",), depths=(4,), seeds=(0,), rounds=2)
    c = report["choice"]["sum"]["4"]
    assert c["lr"] == 5.66e-3 and not c["inside"]


def test_with_several_seeds_a_rate_scores_its_worst(fake_trainings):
    report = sweep_module.sweep(rules=("dynamic",), depths=(8,), seeds=(0, 1), rounds=4)
    c = report["choice"]["dynamic"]["8"]
    assert c["lr"] == 2.83e-3 and c["dev_loss"] == pytest.approx(5.5 + math.log(2.83e-3 / 2.83e-3) ** 2)


def test_check_seeds_step_down_a_best_rate_that_diverges_on_another_seed(fake_trainings):
    report = sweep_module.sweep(rules=("sum", "select"), depths=(8,), seeds=(0,), check_seeds=(1,), rounds=4)
    assert report["choice"]["sum"]["8"]["lr"] == 2.83e-3           # holds on both seeds
    select = report["choice"]["select"]["8"]
    assert (select["searched"], select["lr"]) == (2.83e-3, 2e-3)   # diverged on seed 1: one rung down
    assert select["dev_loss"] == pytest.approx(5.0 + math.log(2e-3 / 2.83e-3) ** 2)
    checked = {(r["rule"], r["lr"]) for r in report["rows"] if r["seed"] == 1}
    # select kept the lower rung, so the one below that was tried too (and lost)
    assert checked == {("sum", 2.83e-3), ("sum", 2e-3), ("select", 2.83e-3), ("select", 2e-3), ("select", 1.41e-3)}
    # Where even the rung below diverges on seed 1, the check goes on down while the worst seed improves.
    down = sweep_module.sweep(rules=("static",), depths=(8,), seeds=(0,), check_seeds=(1,), rounds=4)
    assert down["choice"]["static"]["8"]["lr"] == 1.41e-3
    assert {r["lr"] for r in down["rows"] if r["seed"] == 1} == {2.83e-3, 2e-3, 1.41e-3, 1e-3}


def test_an_earlier_reports_rows_are_not_trained_again(fake_trainings):
    first = sweep_module.sweep(rules=("sum",), depths=(8,), seeds=(0,), rounds=4)
    n = len(fake_trainings)
    again = sweep_module.sweep(rules=("sum",), depths=(8,), seeds=(0,), check_seeds=(1,), prior=first["rows"])
    assert len(fake_trainings) == n + 2  # only the check: two rungs on seed 1
    assert again["choice"]["sum"]["8"]["lr"] == first["choice"]["sum"]["8"]["lr"]
