import numpy as np
import pydantic
import pytest

from ema_core.config import DilutionConfig
from ema_core.dilution import (
    ALL_RATES,
    analytic_frame,
    effective_window,
    half_life,
    interference_energy,
    lag_weights,
    measure_identity,
    signal_to_interference,
)
from ema_core.scan import ema_scan

RATES = [0.5, 0.1, 0.02]


def test_lag_weights_are_the_impulse_response():
    w = lag_weights(RATES, 2000)
    assert w.shape == (3, 2001)
    np.testing.assert_allclose(w[:, 0], RATES)
    np.testing.assert_allclose(w[1, 3], 0.1 * 0.9**3)
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-12)  # the weights of all lags add to one
    # and they are what the kernel does to an impulse
    x = np.zeros((1, 50, 1))
    x[0, 0, 0] = 1.0
    traces, _ = ema_scan(x, RATES)
    np.testing.assert_allclose(traces[0, :, :, 0].T, lag_weights(RATES, 49), rtol=1e-12)


def test_half_life_and_effective_window():
    hl = half_life(RATES + [1.0])
    np.testing.assert_allclose((1 - np.array(RATES)) ** hl[:3], 0.5)
    assert hl[3] == 0.0
    n = effective_window(RATES + [1.0], mass=0.95)
    for a, k in zip(RATES, n[:3]):
        assert 1 - (1 - a) ** k >= 0.95 > 1 - (1 - a) ** (k - 1)
    assert n[3] == 1
    with pytest.raises(ValueError, match="mass"):
        effective_window(RATES, mass=1.0)


def test_interference_energy_analytic_and_measured(rng):
    E = interference_energy(RATES)
    np.testing.assert_allclose(E, (lag_weights(RATES, 4000) ** 2).sum(1), rtol=1e-12)
    # unit-energy i.i.d. inputs: the trace's steady-state energy per channel is α/(2 − α)
    x = rng.standard_normal((4, 20_000, 64))
    traces, _ = ema_scan(x, RATES)
    measured = (traces[:, 2000:] ** 2).mean(axis=(0, 1, 3))
    np.testing.assert_allclose(measured, E, rtol=0.05)


def test_signal_to_interference():
    sir = signal_to_interference(RATES, 10)
    w2 = lag_weights(RATES, 10) ** 2
    np.testing.assert_allclose(sir, w2 / (interference_energy(RATES)[:, None] - w2))
    assert np.all(np.diff(sir, axis=1) < 0)  # fades with lag
    one = signal_to_interference([1.0], 3)
    assert np.isinf(one[0, 0]) and np.all(one[0, 1:] == 0)
    df = analytic_frame(RATES, 10)
    assert len(df) == 33 and set(df.columns) >= {"rate", "alpha", "lag", "weight", "sir", "sir_db"}


def _acc(result, feature):
    return result.accuracy[result.accuracy.feature == feature].sort_values("lag")["accuracy"].to_numpy()


def test_identity_is_perfect_at_lag_zero_and_chance_beyond_for_alpha_one():
    # α = 1: the trace is the current token's embedding, nothing else.
    r = measure_identity(DilutionConfig(alphas=(1.0,), vocab=16, dim=32, max_lag=4, n_train=2048, n_test=1024))
    acc = _acc(r, "α=1")
    assert r.chance == pytest.approx(1 / 16)
    assert acc[0] == 1.0
    assert np.all(np.abs(acc[1:] - 1 / 16) < 0.05)


def test_identity_fades_with_lag_and_all_rates_help():
    r = measure_identity(DilutionConfig(max_lag=20, seed=3))
    slow, medium = _acc(r, "α=0.02"), _acc(r, "α=0.1")
    both = _acc(r, ALL_RATES)
    assert medium[0] > medium[5] > medium[20]
    assert medium[0] > r.chance * 10
    assert slow[0] > r.chance  # some identity even in the slow trace
    assert both[0] >= max(_acc(r, "α=0.5")[0], medium[0]) - 0.01


def test_window_of_states_recovers_recent_lags():
    # an EMA sequence is invertible: with w states, lags 0..w−2 come back exactly
    state = measure_identity(DilutionConfig(alphas=(0.1,), max_lag=8, window=1))
    window = measure_identity(DilutionConfig(alphas=(0.1,), max_lag=8, window=6))
    assert np.all(_acc(window, "α=0.1")[:5] > 0.99)
    assert _acc(state, "α=0.1")[3] < 0.5


def test_measurement_is_a_pure_function_of_the_config():
    a = measure_identity(DilutionConfig(vocab=8, dim=8, max_lag=3, n_train=256, n_test=128, seed=5))
    b = measure_identity(DilutionConfig(vocab=8, dim=8, max_lag=3, n_train=256, n_test=128, seed=5))
    c = measure_identity(DilutionConfig(vocab=8, dim=8, max_lag=3, n_train=256, n_test=128, seed=6))
    assert a.accuracy.equals(b.accuracy)
    assert not a.accuracy.equals(c.accuracy)


@pytest.mark.parametrize(
    "field,value",
    [("vocab", 1), ("dim", 0), ("alphas", (0.0,)), ("alphas", (1.2, 0.5)), ("alphas", ()), ("max_lag", -1),
     ("window", 0), ("ridge", 0.0), ("colour", "blue")],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(pydantic.ValidationError, match=field):
        DilutionConfig(**{field: value})
