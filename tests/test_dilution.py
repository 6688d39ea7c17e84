import json
import math
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd
import pydantic
import pytest
import torch
from streamlit.testing.v1 import AppTest

from ema_core.config import config_error
from ema_core.dilution_config import DilutionConfig, StreamConfig
from ema_core.dilution import (
    ALL_RATES,
    LimitWording,
    analytic_frame,
    analytic_horizon,
    effective_window,
    half_life,
    interference_energy,
    lag_weights,
    limit_sentences,
    limit_summary,
    measure_identity,
    measured_horizon,
    noise_limited,
    peel_decode,
    peel_order,
    peel_weighted,
    random_stream,
    ridge_read,
    signal_to_interference,
    sir_of_weight,
    store_trace,
    stored_error,
    trace_sigma,
    unit_roundoff,
)
from ema_core.studies.dilution.figures import horizon_frame
from ema_core.scan import ema_scan

APP = Path(__file__).resolve().parents[1] / "app.py"

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


# -- the stored trace, the peel decoder and the limit -----------------------------------------------
def test_defaults_keep_todays_measurement_and_older_configs_validate():
    cfg = DilutionConfig()
    assert (cfg.decoder, cfg.precision, cfg.noise) == ("linear", "float32", 0.0)
    older = {k: v for k, v in cfg.model_dump().items() if k not in ("decoder", "precision", "noise")}
    assert DilutionConfig.model_validate(older) == cfg


@pytest.mark.parametrize("field,value", [("decoder", "mlp"), ("precision", "int8"), ("precision", "bf16"),
                                         ("noise", -0.1)])
def test_an_unknown_decoder_or_precision_is_one_line_naming_it(field, value):
    with pytest.raises(pydantic.ValidationError) as info:
        DilutionConfig(**{field: value})
    line = config_error(info.value)
    assert line.startswith(f"{field}: ") and "\n" not in line and repr(value) in line


def test_the_peel_refuses_a_window():
    with pytest.raises(pydantic.ValidationError) as info:
        DilutionConfig(decoder="peel", window=4)
    assert "window: the peel decoder reads the current trace state only" in config_error(info.value)
    DilutionConfig(decoder="linear", window=4)  # the linear read-out's caveat stays


def test_store_trace_rounds_to_nearest_in_each_precision(rng):
    x = rng.standard_normal(100_000) * np.exp(rng.uniform(-12, 4, 100_000))
    assert np.array_equal(store_trace(x, "float64"), x)
    assert np.array_equal(store_trace(x, "float32"), x.astype(np.float32))
    assert np.array_equal(store_trace(x, "float16"), x.astype(np.float16).astype(np.float32))
    for precision in ("float32", "bfloat16", "float16"):
        stored = store_trace(x, precision).astype(np.float64)
        err = np.abs(stored - x)
        big = np.abs(x) > 1e-4  # clear of float16's subnormals
        assert np.all(err[big] <= unit_roundoff(precision) * np.abs(x[big]))  # within half an ulp
        assert np.mean(stored != x) > 0.99  # the rounding really applies
    # bfloat16 against torch's own, on float32 inputs (torch rounds float32 → bfloat16 once)
    x32 = x.astype(np.float32).astype(np.float64)
    theirs = torch.from_numpy(x32.astype(np.float32)).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(store_trace(x32, "bfloat16"), theirs)
    # ties go to the even neighbour: 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8)])
    np.testing.assert_array_equal(store_trace(ties, "bfloat16"), [1.0, 1 + 2**-6, -1.0])


def test_the_stored_error_is_the_derived_sigma():
    # σ = √(noise² + u²·(E[h²] + noise²)/(8 ln 2)), per rate: the derivation against the measured error.
    alphas = (0.5, 0.1, 0.02)
    small = dict(vocab=32, dim=32, n_train=2048, n_test=512)
    exact = random_stream(StreamConfig(precision="float64", **small), alphas, 3)
    for precision, noise in (("float32", 0.0), ("bfloat16", 0.0), ("float16", 0.0), ("float32", 0.003)):
        stored = random_stream(StreamConfig(precision=precision, noise=noise, **small), alphas, 3)
        assert np.array_equal(stored.tokens, exact.tokens) and np.array_equal(stored.embeddings, exact.embeddings)
        err = (stored.traces.astype(np.float64) - exact.traces)[exact.first:]
        np.testing.assert_allclose(err.std(axis=(0, 2)), trace_sigma(alphas, 32, 32, precision, noise), rtol=0.1)
    # the noise is the config's seed's: the same again for the same seed, another for another
    again = random_stream(StreamConfig(noise=0.003, **small), alphas, 3)
    other = random_stream(StreamConfig(noise=0.003, **small), alphas, 4)
    assert np.array_equal(again.traces, random_stream(StreamConfig(noise=0.003, **small), alphas, 3).traces)
    assert not np.array_equal(again.traces[:100], other.traces[:100])


def test_analytic_horizon_is_where_the_weight_meets_sigma():
    a = np.array([0.5, 0.1, 0.02])
    sigma = lag_weights(a, 40)[np.arange(3), [10, 25, 40]]  # σ equal to the weight at lags 10, 25, 40
    np.testing.assert_allclose(analytic_horizon(a, sigma), [10, 25, 40])
    assert analytic_horizon([0.5], [0.7])[0] < 0  # noise above the newest token's weight
    np.testing.assert_array_equal(analytic_horizon([1.0, 1.0], [0.1, 2.0]), [0.0, -1.0])


def _peel(**kw):
    base = dict(decoder="peel", alphas=(0.5,), vocab=64, dim=64, n_test=512, n_train=64)
    return measure_identity(DilutionConfig(**{**base, **kw}))


def test_peel_names_the_exact_tokens_at_float64_up_to_its_horizon():
    r = _peel(precision="float64", max_lag=64)
    acc = _acc(r, "α=0.5")
    k = float(r.limits.loc[0, "analytic_horizon"])
    assert 56 < k < 58  # ln(σ/α)/ln ½ with σ ≈ 3.5e-18
    assert np.all(acc[:50] == 1.0)  # every token, every step, for 50 lags
    assert np.all(acc[int(k) + 3:] < 3 * r.chance)  # and gone past the float64 horizon
    assert r.limits.loc[0, "limit"] == "precision"


def test_peel_reaches_lag_20_at_float32_and_fails_past_its_horizon():
    # The independent check: 1.00 for lags 0–20 at α = 0.5, V = D = 64, float32; lost from lag 30.
    r = _peel(max_lag=34)
    acc = _acc(r, "α=0.5")
    assert np.all(acc[:21] == 1.0) and np.all(acc[30:] < 3 * r.chance)
    linear = measure_identity(DilutionConfig(alphas=(0.5,), max_lag=3))
    assert _acc(linear, "α=0.5")[1] < 3 * linear.chance  # where the linear probe is at chance from lag 1


def test_the_peel_horizon_follows_precision_and_noise():
    horizons = {}
    for precision, noise in (("float32", 0.0), ("float16", 0.0), ("bfloat16", 0.0), ("float64", 1e-3), ("float64", 1e-2)):
        r = _peel(precision=precision, noise=noise, max_lag=32)
        row = r.limits.iloc[0]
        acc = _acc(r, "α=0.5")
        h, k = int(row["measured_horizon"]), float(row["analytic_horizon"])
        # measured within two lags below k*; named (≥ 0.99) until two lags before it, chance-like after it
        assert k - 2 <= h <= k + 0.5, (precision, noise, h, k)
        assert np.all(acc[: max(int(k) - 2, 0)] >= 0.99) and np.all(acc[int(k) + 2:] < 3 * r.chance)
        assert row["limit"] == ("noise" if noise else "precision")
        horizons[(precision, noise)] = h
    assert horizons[("float32", 0.0)] > horizons[("float16", 0.0)] > horizons[("bfloat16", 0.0)]
    assert horizons[("float64", 1e-3)] > horizons[("float64", 1e-2)]


def test_slow_rates_are_diluted_whatever_the_precision():
    r = _peel(alphas=(0.5, 0.02), precision="float64", max_lag=8)
    limits = r.limits.set_index("feature")
    assert _acc(r, "α=0.02")[0] < 0.2  # not even the newest token
    assert limits.loc["α=0.02", "limit"] == "diluted"
    assert limits.loc["α=0.02", "snr"] > 1e10  # its weight is still far above the float64 error
    assert limits.loc["α=0.5", "limit"] == "beyond max lag"
    # the all-rates row is judged by the rates that named anything alone: α = 0.5's horizon, not α = 0.02's
    assert limits.loc[ALL_RATES, "analytic_horizon"] == limits.loc["α=0.5", "analytic_horizon"]


def test_all_rates_hand_over_to_a_slower_trace():
    # D = 256: α = 0.2 and 0.1 can be peeled (the newest token's lead α beats the older tokens' sum),
    # and under bfloat16 they outlast α = 0.5, whose amplified error grows as 2^k.
    cfg = DilutionConfig(decoder="peel", alphas=(0.5, 0.2, 0.1), vocab=64, dim=256, max_lag=30, n_test=512,
                         n_train=64, precision="bfloat16")
    order = peel_order(np.array(cfg.alphas), trace_sigma(cfg.alphas, 64, 256, "bfloat16"), 256, cfg.max_lag)
    assert order[0] == 0 and order[-1] != 0 and np.all(np.diff(order) >= 0)  # fast first, then slower
    r = measure_identity(cfg)
    fast, both = _acc(r, "α=0.5"), _acc(r, ALL_RATES)
    h_fast, h_all = measured_horizon(fast), measured_horizon(both)
    assert h_all >= h_fast + 4
    named = fast >= 0.99
    assert np.all(both[named] >= fast[named] - 0.01)  # the lags the fast trace names are kept


def test_peel_with_alpha_one_names_lag_zero_only():
    r = _peel(alphas=(1.0,), max_lag=3)
    acc = _acc(r, "α=1")
    assert acc[0] == 1.0 and np.all(acc[1:] < 3 * r.chance)


def test_peel_decode_is_exact_on_a_hand_made_trace():
    # Three orthonormal embeddings, tokens 2, 0, 1, 1 (newest first) at α = 0.5, exact arithmetic.
    E = np.eye(3)
    tokens = [2, 0, 1, 1]
    h = sum(0.5 * 0.5**k * E[v] for k, v in enumerate(tokens))
    np.testing.assert_array_equal(peel_decode(h[None, None, :], E, [0.5], 3), [tokens])


def test_limit_text_follows_the_numbers():
    linear = measure_identity(DilutionConfig(max_lag=6))
    assert set(linear.limits["limit"]) == {"read-out"}
    peel = _peel(precision="float16", max_lag=20)
    lines = limit_sentences(peel.limits, peel.config, "peel")
    assert "precision-limited" in lines[0] and "k* ≈ 15.0" in lines[0] and "from lag 14" in lines[0]
    assert limit_summary(peel.limits).startswith("Precision limits α=0.5")
    noisy = _peel(noise=0.01, max_lag=10)
    assert noisy.limits.loc[0, "limit"] == "noise" and "noise σ = 0.01" in limit_sentences(noisy.limits, noisy.config,
                                                                                         "peel")[0]
    # a window of w states moves the analytic horizon out by w − 1 lags
    window = measure_identity(DilutionConfig(alphas=(0.5,), max_lag=6, window=4, noise=0.01))
    assert window.limits.loc[0, "analytic_horizon"] == pytest.approx(noisy.limits.loc[0, "analytic_horizon"] + 3)


def test_a_negative_k_star_is_said_to_be_no_horizon():
    # σ = 0.1 is above the slow rates' α (0.1 and 0.02 count too): k* = ln(σ/α)/ln(1−α) < 0 there, an
    # absence of a horizon, which the text must not print as a lag.
    noisy = measure_identity(DilutionConfig(noise=0.1, max_lag=6))
    assert (noisy.limits["analytic_horizon"] < 0).any()
    lines = limit_sentences(noisy.limits, noisy.config, "linear")
    for line, k in zip(lines, noisy.limits["analytic_horizon"]):
        assert ("no analytic horizon k*" in line) == (k < 0), line
    assert not any("k* ≈ -" in line or "k* ≈ −" in line for line in lines)


def test_the_peel_reaches_the_page_with_its_horizons():
    at = AppTest.from_file(APP, default_timeout=600).run()
    at.switch_page("pages/dilution.py").run()
    at.radio(key="decoder").set_value("peel")
    at.selectbox(key="precision").set_value("float16")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.toggle(key="window_mode").disabled
    spec = json.loads(at.get("vega_lite_chart")[2].proto.spec)
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "rule", "rule"]
    # (the data travels as Arrow beside the spec; the dash scale names the two horizons)
    assert spec["layer"][2]["encoding"]["strokeDash"]["scale"]["domain"] == ["analytic k*", "measured"]
    text = " ".join(m.value for m in at.markdown)
    assert "Which limit applies here." in text and "**precision-limited**" in text and "information diluted" in text
    assert any("the peel on 2048 held-out steps" in c.value for c in at.caption)
    at.select_slider(key="noise").set_value(1e-2).run()
    assert "**noise-limited**" in " ".join(m.value for m in at.markdown)


def test_a_stale_choice_is_reset_not_raised():
    at = AppTest.from_file(APP, default_timeout=600).run()
    at.switch_page("pages/dilution.py")
    at.session_state["decoder"] = "mlp"
    at.session_state["precision"] = "int8"
    at.session_state["noise"] = 0.5
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert (at.radio(key="decoder").value, at.selectbox(key="precision").value, at.select_slider(key="noise").value) \
        == ("linear", "float32", 0.0)
    assert any("decoder" in i.value and "precision" in i.value for i in at.info)


def test_horizons_are_drawn_where_they_lie_on_the_lag_axis():
    default = measure_identity(DilutionConfig(decoder="peel", max_lag=8, n_test=256))
    assert horizon_frame(default.limits, 8).empty  # k* = 28, 177, 866: all past the axis, nothing drawn
    r = _peel(alphas=(0.5, 0.1), precision="float16", max_lag=20)
    frame = horizon_frame(r.limits, 20)
    # α = 0.5's pair, once (all rates has the very same pair); α = 0.1's k* ≈ 91 is off the axis
    assert list(frame["feature"]) == ["α=0.5", "α=0.5"] and list(frame["kind"]) == ["analytic k*", "measured"]
    assert frame["lag"].tolist() == [pytest.approx(r.limits.loc[0, "analytic_horizon"]), 14.0]


# -- the general functions the depth explorer calls: the EMA is their geometric case ---------------------

def test_the_sir_of_any_weights():
    # The trace's SIR is the general one at its weights and its energy over every past token ...
    np.testing.assert_array_equal(sir_of_weight(lag_weights(RATES, 10), interference_energy(RATES)[:, None]),
                                  signal_to_interference(RATES, 10))
    # ... and any weights: codes at 1/7, 2/7, 4/7 hold 21/49 of energy, so the first has SIR (1/49)/(20/49)
    a = np.array([1.0, 2.0, 4.0]) / 7
    np.testing.assert_allclose(sir_of_weight(a, (a**2).sum()), [1 / 20, 4 / 17, 16 / 5])
    assert np.isinf(sir_of_weight(1.0, 1.0)) and sir_of_weight(0.0, 1.0) == 0.0


def test_the_peel_of_any_weights_tables_and_order(rng):
    # The EMA's decay given step by step is the same peel as given once.
    stream = random_stream(StreamConfig(precision="float16", max_lag=12, n_train=64, n_test=256), (0.5, 0.2), 1)
    steps = np.arange(stream.first, len(stream.tokens))
    states, E, a = stream.traces[steps], stream.embeddings.astype(np.float64), np.array([0.5, 0.2])
    order = peel_order(a, trace_sigma(a, 64, 64, "float16"), 64, 12)
    by_step = peel_weighted(states, [E] * 13, a, np.repeat((1 - a)[:, None], 12, axis=1), order)
    np.testing.assert_array_equal(by_step, peel_decode(states, stream.embeddings, a, 12, order))
    # Weights that are no geometric series, each step its own table (orthonormal codes in directions of
    # its own, permuted, and a zero code, which a residual of the wrong scale would be named: below ½ of a
    # code, nothing is nearer), in a sum that only the second state holds (the first is noise): exact,
    # read from the second only.
    w, x = np.array([0.5, 0.45, 0.1, 0.01]), np.array([[2, 0, 1, 3], [1, 1, 3, 0]])
    tables = [np.vstack([np.eye(16)[4 * s + rng.permutation(4)], np.zeros(16)]) for s in range(4)]
    h = np.stack([sum(w[s] * tables[s][row[s]] for s in range(4)) for row in x])  # (2, 16)
    states = np.stack([rng.standard_normal(h.shape), h], axis=1)  # (2, K = 2, D = 16)
    scale, decay = [2.0, w[0]], np.stack([np.ones(3), w[1:] / w[:-1]])
    np.testing.assert_array_equal(peel_weighted(states, tables, scale, decay, np.ones(4, int)), x)
    assert not np.array_equal(peel_weighted(states, tables, scale, decay), x)
    # a weight of 0 leaves nothing to peel: every later name is the same guess, whatever the state
    names = peel_weighted(states[:, 1:], tables, [0.5], [[0.0, np.nan, np.nan]])
    assert len(set(names[:, 1:].ravel())) <= 3 and np.all(names[0, 1:] == names[1, 1:])


def test_the_stored_error_of_any_value_of_a_given_power(rng):
    # The rounding law on plain Gaussian values, no trace: σ from the mean square alone.
    power = 1 / 64
    x = np.sqrt(power) * rng.standard_normal(200_000)
    for precision, noise in (("float32", 0.0), ("bfloat16", 0.0), ("float16", 0.0), ("float16", 1e-3)):
        noisy = x + noise * rng.standard_normal(x.size)
        err = store_trace(noisy, precision).astype(np.float64) - x
        assert err.std() == pytest.approx(stored_error(power, precision, noise), rel=0.1), precision
    # which part is larger: the noise over float32's rounding; bfloat16's rounding (σ ≈ 2e-4) over 1e-4
    assert noise_limited(power, "float32", 1e-3) and not noise_limited(power, "bfloat16", 1e-4)
    assert not noise_limited(power, "float32", 0.0)


def test_the_ridge_read_out_names_each_label_column_from_its_features(rng):
    # Two label columns, each coded in its own 16 features: every set of features names what it holds.
    V, D, n, m = 8, 16, 2048, 512
    codes = rng.standard_normal((2, V, D))
    labels = rng.integers(0, V, size=(n + m, 2))
    F = np.concatenate([codes[0][labels[:, 0]], codes[1][labels[:, 1]]], axis=1)
    F += 0.1 * rng.standard_normal(F.shape)
    both, first = ridge_read(F[:n], labels[:n], F[n:], V, 1e-2, [np.arange(2 * D), np.arange(D)])
    assert both.shape == (m, 2) and np.all((both == labels[n:]).mean(0) > 0.95)
    hit = (first == labels[n:]).mean(0)
    assert hit[0] > 0.95 and hit[1] < 0.25  # the second column's code is not in the first set: chance 1/8
    np.testing.assert_array_equal(ridge_read(F[:n], labels[:n], F[n:], V, 1e-2)[0], both)  # all features


def test_another_wording_reaches_every_sentence():
    # Every limit with every kind of horizon (one, none as σ is above every weight, none as the weights
    # stop falling), said of writes in a stream: no word of the time axis's is left in the text.
    limits = ["precision", "noise", "diluted", "read-out", "beyond max lag"]
    rows = [(f"r{i}", 1e-3, k, 3, 12.5, limit) for i, (limit, k) in enumerate(product(limits, [2.5, -1.0, math.inf]))]
    frame = pd.DataFrame(rows, columns=["rule", "sigma", "analytic_horizon", "measured_horizon", "snr", "limit"])
    words = LimitWording(item="write", store="stream", weight="a_j", horizon="d*", newest="top write", top="a_L",
                         span="the stack", at="under", unlimited="nothing limits within the stack under", key="rule",
                         names={"r0": "first rule"}, place="distance {}".format)
    lines = limit_sentences(frame, DilutionConfig(noise=0.01), "peel", words)
    text = " ".join(lines) + " " + limit_summary(frame, words)
    assert len(lines) == 15 and lines[0].startswith("- **first rule** — **precision-limited**")
    for word in ("token", "trace", "lag", "k*", "α"):
        assert word not in text, word
    for line, k in zip(lines, frame["analytic_horizon"]):
        assert ("d* ≈ 2.5" in line) == (k == 2.5) and "d* ≈ -" not in line and "d* ≈ inf" not in line, line
    assert "from distance 3" in text and "up to distance 2" in text and "under r" in text
