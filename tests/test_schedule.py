"""The one warm-up + cosine schedule, against the two formulas it replaced (boundary cells, language models)."""
from __future__ import annotations

import math

import pytest

from ema_core.studies.boundary.tasks import LR_FLOOR
from ema_core.schedule import warmup_cosine


def boundary_before(step: int, steps: int, warmup: int) -> float:
    """The boundary trainer's own schedule before it was shared (a tenth at the end)."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def lm_before(step: int, steps: int, warmup: int, lr: float, min_lr_frac: float) -> float:
    """The language models' ``lr_at`` before it was shared."""
    if warmup and step < warmup:
        return lr * (step + 1) / warmup
    span = max(1, steps - warmup)
    progress = min(1.0, (step - warmup) / span)
    floor = lr * min_lr_frac
    return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def test_it_warms_up_then_follows_half_a_cosine_to_its_floor():
    assert warmup_cosine(0, steps=110, warmup=10, floor=0.1) == pytest.approx(0.1)  # the first step moves
    assert warmup_cosine(9, steps=110, warmup=10, floor=0.1) == 1.0                 # the end of the warm-up
    assert warmup_cosine(10, steps=110, warmup=10, floor=0.1) == 1.0                # the top of the cosine
    assert warmup_cosine(60, steps=110, warmup=10, floor=0.1) == pytest.approx(0.55)
    assert warmup_cosine(110, steps=110, warmup=10, floor=0.1) == pytest.approx(0.1)  # the end
    assert warmup_cosine(500, steps=110, warmup=10, floor=0.25) == pytest.approx(0.25)  # and after it
    assert warmup_cosine(0, steps=5, warmup=0, floor=0.0) == 1.0  # no warm-up: the cosine from the start
    curve = [warmup_cosine(s, steps=110, warmup=10, floor=0.0) for s in range(10, 111)]
    assert all(a > b for a, b in zip(curve, curve[1:])) and curve[-1] == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("steps,warmup", [(600, 20), (400, 20), (2000, 20), (4, 0), (4, 20), (1, 1)])
def test_the_boundary_cells_see_bit_for_bit_the_rates_they_saw_before(steps, warmup):
    # the presets' budgets and edge cases: a warm-up longer than the run, a run of one step
    assert LR_FLOOR == 0.1
    for lr in (1e-3, 3e-3, 1e-2):
        assert [lr * warmup_cosine(s, steps, warmup, LR_FLOOR) for s in range(steps)] == \
               [lr * boundary_before(s, steps, warmup) for s in range(steps)]


@pytest.mark.parametrize("steps,warmup,lr,frac", [(1000, 100, 3e-3, 0.1), (2000, 200, 6e-4, 0.0), (40, 5, 1e-2, 0.1),
                                                  (110, 10, 1.0, 0.3), (50, 0, 1e-3, 0.1)])
def test_the_language_models_rates_are_the_ones_they_had(steps, warmup, lr, frac):
    # One formula for both cannot be bit for bit both old ones (they rounded differently); the
    # language models' rate moves by at most a few units in the last place.
    for s in range(steps + 1):
        assert lr * warmup_cosine(s, steps, warmup, frac) == pytest.approx(lm_before(s, steps, warmup, lr, frac),
                                                                          rel=1e-14, abs=1e-18)


def test_warmup_stable_decay_holds_the_peak_then_decays_to_its_floor():
    from ema_core.schedule import warmup_stable_decay
    f = [warmup_stable_decay(s, steps=100, warmup=10, decay=20, floor=0.1) for s in range(101)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0                  # the warm-up, as the cosine's
    assert all(v == 1.0 for v in f[10:81])                             # the plateau, through the decay's first step
    assert all(a > b for a, b in zip(f[80:], f[81:]))                  # then strictly down
    assert f[90] == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(0.5)))    # 1 - sqrt at half the decay
    assert f[100] == pytest.approx(0.1) and warmup_stable_decay(500, 100, 10, 20, 0.1) == pytest.approx(0.1)
    # a decay longer than the run after its warm-up starts where the warm-up ends; no decay: a plateau
    assert warmup_stable_decay(10, steps=20, warmup=10, decay=50, floor=0.0) == 1.0
    assert warmup_stable_decay(15, steps=20, warmup=10, decay=50, floor=0.0) == pytest.approx(1 - math.sqrt(0.5))
    assert [warmup_stable_decay(s, 20, 0, 0, 0.1) for s in (0, 19)] == [1.0, 1.0]


def test_the_language_models_read_their_schedule_from_the_config():
    from ema_core.lm.train import TrainConfig, lr_at
    cosine = TrainConfig(steps=100, warmup=10, lr=1e-2)
    wsd = TrainConfig(steps=100, warmup=10, lr=1e-2, schedule="wsd", decay_frac=0.2)
    assert cosine.schedule == "cosine"  # the default: every run stored before the setting trained on it
    assert lr_at(50, cosine) == pytest.approx(1e-2 * warmup_cosine(50, 100, 10, 0.1))
    assert lr_at(50, wsd) == 1e-2 and lr_at(80, wsd) == 1e-2 and lr_at(99, wsd) < lr_at(90, wsd) < 1e-2
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")
