"""The depth explorer: each rule's coefficients, the analytic SIR against the measured streams, the peel
exact where nothing limits it, the precision floor as the time axis's, refusals, and the page."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pydantic
import pytest
from pydantic import Field

import ema_core.depth.explorer
from apptest import ok, open_page
from ema_core import palette
from ema_core.config import config_error
from ema_core.depth import ALL_RULES, EXPLORER_RULES, RULE_LABELS, RULES
from ema_core.depth.explorer import (
    ExplorerConfig,
    Stack,
    analytic_frame,
    analytic_summary,
    coefficients,
    depth_limit_sentences,
    depth_limit_summary,
    embedding_sir_frame,
    exact_stream,
    explorer_footprint,
    measure_depth,
    norm_growth,
    peel_layers,
    peel_order,
    random_stack,
    read_weights,
    store_stream,
    stream_noise,
    stream_power,
    stream_sigma,
    stream_weights,
    time_alpha,
    time_config,
    twin_alpha,
    weight_horizon,
    weight_sir,
)
from ema_core.dilution import analytic_frame as time_analytic_frame
from ema_core.dilution import lag_weights, measure_identity, signal_to_interference
from ema_core.dilution_config import DilutionConfig, StreamConfig
from ema_core.studies.depth.figures import (
    explorer_depth_sweep_chart,
    explorer_horizon_frame,
    explorer_identity_charts,
    explorer_series_color,
    explorer_sir_charts,
    explorer_weight_charts,
)
from ema_core.studies.dilution.figures import horizon_frame
from test_palette import _colours

PAGE = "pages/depth_explorer.py"
SMALL = dict(n_train=2048, n_test=512)


def _acc(result, rule: str) -> np.ndarray:
    """Accuracy by distance from the top (0 = the top write)."""
    rows = result.accuracy[result.accuracy["rule"] == rule].sort_values("distance")
    return rows["accuracy"].to_numpy()


# -- the coefficients ---------------------------------------------------------------------------------------

def test_each_rules_coefficients():
    L, g, gamma, beta = 5, 0.3, 0.7, 2.0
    j = np.arange(L + 1)
    np.testing.assert_array_equal(norm_growth(L, g), 1.3**j)
    np.testing.assert_array_equal(coefficients("sum", L, g, gamma, beta), np.ones(L + 1))
    np.testing.assert_allclose(coefficients("decay", L, g, gamma, beta), gamma ** (L - j))
    np.testing.assert_allclose(coefficients("static", L, g, gamma, beta), 1.3**-j)
    select = coefficients("select", L, g, gamma, beta, read=2)
    np.testing.assert_allclose(select * 1.3**j, np.where(j == 2, math.exp(beta), 1.0))
    with pytest.raises(ValueError, match="select: read"):
        coefficients("select", L, g, gamma, beta)
    with pytest.raises(ValueError, match="rule"):
        coefficients("max", L)


def test_stream_weights_are_normalised_and_worked_example_holds():
    # The module's worked example: the top write holds 4/7, the embedding 1/7, its SIR 1/20.
    a = stream_weights("sum", 2, growth=1.0)
    np.testing.assert_allclose(a, [[1 / 7, 2 / 7, 4 / 7]] * 3)
    np.testing.assert_allclose(weight_sir(a)[0], 1 / 20)
    L = 9
    for rule in EXPLORER_RULES:
        w = stream_weights(rule, L, 0.25, 0.8, 3.0)
        np.testing.assert_allclose(w.sum(axis=1), 1.0)
        assert w.shape == (L + 1, L + 1) and np.all(w > 0)
    # static undoes the growth: every layer 1/(L+1), SIR 1/L; the sum at equal norms is the same stream
    np.testing.assert_allclose(stream_weights("static", L, 0.25), 1 / (L + 1))
    np.testing.assert_allclose(weight_sir(stream_weights("static", L, 0.25)), 1 / L)
    np.testing.assert_allclose(stream_weights("sum", L, 0.0), stream_weights("static", L, 0.6))
    # select: e^β/(e^β + L) on the layer read, whatever the growth; β = 0 is the static rule
    sel = stream_weights("select", L, 0.25, sharpness=3.0)
    np.testing.assert_allclose(read_weights(sel), math.exp(3) / (math.exp(3) + L))
    np.testing.assert_allclose(weight_sir(sel), math.exp(6) / L)
    np.testing.assert_allclose(stream_weights("select", L, 0.25, sharpness=0.0), stream_weights("static", L, 0.25))
    assert not np.allclose(sel[0], sel[1])  # the stream follows the reader


def test_the_sum_with_growth_is_an_ema_over_depth_and_decay_at_equal_norms_the_trace():
    # a_{L−d} ∝ (1 + g)^−d: the lag weights of α = g/(1 + g), renormalised over the L + 1 layers.
    L, g = 20, 0.5
    alpha = twin_alpha(g)
    by_distance = read_weights(stream_weights("sum", L, g))[::-1]
    w = lag_weights([alpha], L)[0]
    np.testing.assert_allclose(by_distance, w / w.sum(), rtol=1e-12)
    # decay over a deep stack at equal norms is the EMA trace α = 1 − γ: the time axis's SIR at every lag
    cfg = ExplorerConfig(layers=64, growth=0.0, gamma=0.6, rules=("decay",))
    assert time_alpha(cfg) == 0.4
    depth = analytic_frame(cfg).sort_values("distance")["sir"].to_numpy()[:20]
    np.testing.assert_allclose(depth, signal_to_interference([0.4], 19)[0], rtol=1e-9)


def test_the_sir_is_what_the_streams_hold():
    # a_j² against the energy of everything but layer j's write, measured on the exact streams
    cfg = ExplorerConfig(layers=6, growth=0.3, dim=64, vocab=64, **SMALL)
    stack = random_stack(cfg)
    energy = float((stack.tables.astype(np.float64) ** 2).sum(-1).mean())  # E‖e‖², about 1
    for rule in ("sum", "decay", "static"):
        a = stream_weights(rule, cfg.layers, cfg.growth, cfg.gamma)[0]
        s = exact_stream(stack, a)
        for j in (0, 3, 6):
            rest = s - a[j] * stack.table(j).astype(np.float64)[stack.tokens[:, j]]
            measured = a[j] ** 2 * energy / float((rest**2).sum(1).mean())
            analytic = weight_sir(stream_weights(rule, 6, 0.3, cfg.gamma))[j]
            assert measured == pytest.approx(analytic, rel=0.05), (rule, j)
        # and the stream's power per coordinate, from which the rounding's σ follows
        assert float((s**2).mean()) == pytest.approx(stream_power(a, cfg.vocab, cfg.dim), rel=0.05)


@pytest.mark.parametrize("codes", ["per_layer", "shared"])
def test_the_stored_error_is_the_derived_sigma(codes):
    cfg = ExplorerConfig(layers=5, growth=0.5, codes=codes, dim=32, vocab=32, **SMALL)
    stack = random_stack(cfg)
    a = stream_weights("sum", 5, 0.5)[0]
    exact = exact_stream(stack, a)
    for precision, noise in (("float32", 0.0), ("bfloat16", 0.0), ("float16", 0.0), ("float32", 0.003)):
        c = cfg.model_copy(update=dict(precision=precision, noise=noise))
        stored = store_stream(exact, stream_noise(c, exact.shape), precision)
        sigma, noisy = stream_sigma(a, c)
        assert float((stored - exact).std()) == pytest.approx(sigma, rel=0.1), (precision, noise)
        assert noisy == (noise > 0)


def test_linear_accuracy_follows_the_analytic_sir():
    # Two-sided: a write whose SIR is above 0 dB is read, one below −30 dB is not, and across every
    # rule and layer the accuracy rises with the SIR.
    cfg = ExplorerConfig(layers=16, growth=0.2, sharpness=1.0, **SMALL)
    r = measure_depth(cfg)
    m = r.accuracy.merge(analytic_frame(cfg), on=["rule", "layer", "distance"])
    assert (m.loc[m["sir_db"] > 0, "accuracy"] > 0.9).all()
    assert (m.loc[m["sir_db"] < -30, "accuracy"] < 3 * r.chance).all()
    assert m[["sir", "accuracy"]].corr(method="spearman").iloc[0, 1] > 0.9


# -- the peel and the floors ----------------------------------------------------------------------------------

def test_peel_decode_is_exact_on_a_hand_made_stream():
    # Orthonormal codes, one table per layer, tokens 2, 0, 1 at weights 1/7, 2/7, 4/7: exact.
    tables = np.stack([np.eye(3)] * 3).astype(np.float32)
    tokens = np.array([[2, 0, 1]])
    stack = Stack(tokens, tables)
    a = stream_weights("sum", 2, 1.0)[0]
    order = peel_order(a)
    assert list(order) == [2, 1, 0]  # largest weight first
    named = peel_layers(exact_stream(stack, a), stack, a, order)
    np.testing.assert_array_equal(named[0], tokens[0, order])
    assert list(peel_order(np.full(4, 0.25))) == [3, 2, 1, 0]  # ties: top first, the time axis's newest first


def test_the_peel_names_every_layer_exactly_at_float64():
    cfg = ExplorerConfig(layers=32, growth=0.5, sharpness=8.0, decoder="peel", precision="float64", **SMALL)
    r = measure_depth(cfg)
    for rule in ("sum", "decay", "select"):
        assert np.all(_acc(r, rule) == 1.0), rule
    assert set(r.limits.set_index("rule").loc[["sum", "decay", "select"], "limit"]) == {"beyond max lag"}
    # the static rule weighs 33 writes alike: diluted for a decoder that names one write at a time,
    # though every weight is 1e14× the float64 error
    static = r.limits.set_index("rule").loc["static"]
    assert static["limit"] == "diluted" and static["snr"] > 1e10 and _acc(r, "static").max() < 0.5
    assert math.isinf(static["analytic_horizon"])


@pytest.mark.parametrize("precision,noise", [("float32", 0.0), ("float16", 0.0), ("bfloat16", 0.0),
                                             ("float64", 1e-3), ("float64", 1e-2)])
def test_the_precision_floor_is_the_time_axiss(precision, noise):
    # growth 1 doubles each write: the sum is the EMA α = 1/2 over depth.  Its peel loses layer L − d
    # where the time axis's loses the token at lag d, for the same reason (precision or noise).
    cfg = ExplorerConfig(layers=40, growth=1.0, gamma=0.5, rules=("sum",), decoder="peel", precision=precision,
                         noise=noise, n_train=64, n_test=512)
    depth = measure_depth(cfg)
    trace = measure_identity(time_config(cfg))
    d, t = depth.limits.iloc[0], trace.limits.iloc[0]
    assert d["limit"] == t["limit"] == ("noise" if noise else "precision")
    assert d["analytic_horizon"] == pytest.approx(t["analytic_horizon"], abs=0.1)
    assert abs(int(d["measured_horizon"]) - int(t["measured_horizon"])) <= 1
    k = d["analytic_horizon"]
    acc = _acc(depth, "sum")
    assert k - 2 <= d["measured_horizon"] <= k + 0.5
    assert np.all(acc[: max(int(k) - 2, 0)] >= 0.99) and np.all(acc[int(k) + 2:] < 3 * depth.chance)


def test_the_horizon_moves_with_precision_and_noise():
    def horizon(**kw):
        cfg = ExplorerConfig(layers=40, growth=1.0, rules=("sum",), decoder="peel", n_train=64, n_test=256, **kw)
        return int(measure_depth(cfg).limits.loc[0, "measured_horizon"])

    assert horizon(precision="float32") > horizon(precision="float16") > horizon(precision="bfloat16")
    assert horizon(precision="float64", noise=1e-3) > horizon(precision="float64", noise=1e-2)


def test_equal_norms_make_the_sum_the_static_rule_measured_too():
    # The same weights give the same stream, noise included: the same names, read by either decoder.
    for decoder in ("linear", "peel"):
        r = measure_depth(ExplorerConfig(layers=8, growth=0.0, noise=1e-3, decoder=decoder, **SMALL))
        np.testing.assert_array_equal(_acc(r, "sum"), _acc(r, "static"))


def test_selection_without_sharpness_is_the_static_rule_measured_too():
    # β = 0: the reader of every layer gets the static stream (built layer by layer here, once there),
    # and the linear read-out of one layer is the same solve whether or not the others are read with it.
    r = measure_depth(ExplorerConfig(layers=8, growth=0.4, sharpness=0.0, rules=("static", "select"), **SMALL))
    np.testing.assert_allclose(_acc(r, "select"), _acc(r, "static"), atol=2 / SMALL["n_test"])
    assert _acc(r, "static").max() < 0.9  # diluted enough that a stronger selected write would show


def test_shared_codes_lose_which_layer_wrote_what():
    # One table for every layer and equal weights: the stream is symmetric in the layers, so even the
    # peel names the top layer's token barely above a guess among the written ones; a table per layer
    # keeps the writes apart (the top write is named far more often).
    kw = dict(layers=4, growth=0.0, rules=("sum",), decoder="peel", dim=64, **SMALL)
    shared = measure_depth(ExplorerConfig(codes="shared", **kw))
    own = measure_depth(ExplorerConfig(codes="per_layer", **kw))
    assert _acc(shared, "sum")[0] < 0.35 < _acc(own, "sum")[0] - 0.2


def test_weight_horizon():
    w = 0.5 * 0.5 ** np.arange(11)
    assert weight_horizon(w, 0.5 * 0.5**6.5) == pytest.approx(6.5)
    assert weight_horizon(w, 0.5 * 0.5**13) == pytest.approx(13.0)  # past the stack, at its rate
    assert weight_horizon(w, 0.7) < 0  # above even the top write
    assert math.isinf(weight_horizon(np.full(5, 0.2) * (1 + 1e-16 * np.arange(5)), 1e-9))  # flat: none


def test_limit_text_follows_the_numbers():
    linear = measure_depth(ExplorerConfig(**SMALL))
    limits = linear.limits.set_index("rule")
    assert limits.loc["select", "limit"] == "beyond max lag"
    assert set(limits.loc[["sum", "decay", "static"], "limit"]) == {"read-out"}
    lines = depth_limit_sentences(linear.limits, linear.config)
    assert [line.split("** — ")[0] for line in lines] == [f"- **{RULE_LABELS[r]}" for r in EXPLORER_RULES]
    h = int(limits.loc["sum", "measured_horizon"])
    assert f"from distance {h} (layer {16 - h})" in lines[0] and "read-out-limited" in lines[0]
    assert "no analytic horizon d*" in lines[2] and "d* ≈ inf" not in lines[2]  # static: flat weights
    assert depth_limit_summary(linear.limits).startswith("The read-out limits fixed sum")
    peel = measure_depth(ExplorerConfig(growth=1.0, decoder="peel", precision="float16", noise=0.0, **SMALL))
    lines = depth_limit_sentences(peel.limits, peel.config)
    assert "**precision-limited**" in lines[0] and "float16 rounding" in lines[0]
    noisy = measure_depth(ExplorerConfig(growth=1.0, decoder="peel", precision="float64", noise=1e-2, **SMALL))
    assert "**noise-limited**" in depth_limit_sentences(noisy.limits, noisy.config)[0]
    assert "noise σ = 0.01" in depth_limit_sentences(noisy.limits, noisy.config)[0]


# -- configs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [("layers", 0), ("layers", 65), ("growth", -0.1), ("gamma", 1.0),
                                         ("gamma", 0.0), ("sharpness", -1.0), ("vocab", 1), ("dim", 0),
                                         ("precision", "int8"), ("decoder", "mlp"), ("codes", "mixed"),
                                         ("rules", ("sum", "max")), ("rules", ()), ("rules", ("sum", "sum")),
                                         ("noise", -0.1), ("colour", "blue")])
def test_bad_config_is_refused_in_one_line_naming_the_field(field, value):
    with pytest.raises(pydantic.ValidationError) as info:
        ExplorerConfig(**{field: value})
    line = config_error(info.value)
    assert line.startswith(f"{field}: ") and "\n" not in line, line


def test_the_stream_settings_are_the_time_axiss():
    # vocab, dim, sample counts, precision, noise and ridge are declared once, by the time axis's config.
    for name in ("vocab", "dim", "n_train", "n_test", "precision", "noise"):
        mine, theirs = ExplorerConfig.model_fields[name], StreamConfig.model_fields[name]
        assert (mine.default, mine.metadata, mine.description) == (theirs.default, theirs.metadata, theirs.description)
    assert ExplorerConfig().ridge == DilutionConfig().ridge
    t = time_config(ExplorerConfig(layers=7, gamma=0.9, decoder="peel", precision="float16", noise=1e-3, seed=4))
    assert (t.alphas, t.max_lag, t.decoder, t.precision, t.noise, t.seed) == ((0.1,), 7, "peel", "float16", 1e-3, 4)


def test_measurement_is_a_pure_function_of_the_config_and_a_deeper_stack_keeps_the_lower_layers():
    a = measure_depth(ExplorerConfig(layers=4, vocab=8, dim=8, **SMALL))
    b = measure_depth(ExplorerConfig(layers=4, vocab=8, dim=8, **SMALL))
    c = measure_depth(ExplorerConfig(layers=4, vocab=8, dim=8, seed=1, **SMALL))
    assert a.accuracy.equals(b.accuracy) and not a.accuracy.equals(c.accuracy)
    short, deep = random_stack(ExplorerConfig(layers=4, **SMALL)), random_stack(ExplorerConfig(layers=9, **SMALL))
    np.testing.assert_array_equal(deep.tokens[:, :5], short.tokens)
    np.testing.assert_array_equal(deep.tables[:5], short.tables)


def test_the_footprint_grows_with_the_sizes():
    small = explorer_footprint(ExplorerConfig())
    assert explorer_footprint(ExplorerConfig(layers=64, vocab=512, dim=256)) > 10 * small > 0


# -- the charts --------------------------------------------------------------------------------------------

def _charts(cfg: ExplorerConfig) -> list:
    alpha = time_alpha(cfg)
    d, t = analytic_frame(cfg), time_analytic_frame([alpha], cfg.layers)
    acc = pd.DataFrame([(rule, L, cfg.layers - L, 0.5) for rule in cfg.rules for L in range(cfg.layers + 1)],
                       columns=["rule", "layer", "distance", "accuracy"])
    limits = pd.DataFrame({"rule": list(cfg.rules), "analytic_horizon": 2.0, "measured_horizon": 1})
    tacc = pd.DataFrame({"feature": f"α={alpha:g}", "lag": range(cfg.layers + 1), "accuracy": 0.5})
    tlim = pd.DataFrame({"feature": [f"α={alpha:g}"], "analytic_horizon": [2.0], "measured_horizon": [1]})
    return [*explorer_weight_charts(d, t, cfg.layers), *explorer_sir_charts(d, t, cfg.layers),
            explorer_depth_sweep_chart(embedding_sir_frame(cfg, 12), cfg.layers, alpha),
            *explorer_identity_charts(acc, tacc, 1 / 64, cfg.layers, "peel", explorer_horizon_frame(limits, cfg.layers),
                                      horizon_frame(tlim, cfg.layers))]


def test_every_colour_is_the_palettes_and_a_rule_keeps_its_colour():
    assert set(palette.DEPTH_RULE_COLORS) == set(ALL_RULES) >= set(EXPLORER_RULES) | set(RULES)
    assert len(set(palette.DEPTH_RULE_COLORS.values())) == len(ALL_RULES)
    # one mechanism, one colour: fixed accumulation is the EMA blue, selection softmax's red, static learned
    assert palette.DEPTH_RULE_COLORS["sum"] == palette.mixer_color("ema")
    assert palette.DEPTH_RULE_COLORS["select"] == palette.mixer_color("softmax")
    assert palette.DEPTH_RULE_COLORS["static"] == palette.LEARNED
    full = _charts(ExplorerConfig(layers=6))
    part = _charts(ExplorerConfig(layers=6, rules=("select", "sum")))
    for whole, fewer in zip(full, part):
        found, every = _colours(whole)
        assert found and all(str(c).lower() in palette.COLORS for c, _ in found), found
        _, some = _colours(fewer)
        assert {s: some[s] for s in set(some) & set(every)} == {s: every[s] for s in set(some) & set(every)}
    _, colours = _colours(full[0])
    assert colours[RULE_LABELS["static"]] == palette.LEARNED
    _, colours = _colours(full[1])  # the trace beside keeps its rate's colour, as on the Trace dilution page
    assert colours["α=0.2"] == palette.rate_color(0.2) == explorer_series_color("EMA trace α=0.2")


def test_a_pair_shares_its_axes():
    cfg = ExplorerConfig(layers=9, growth=0.6, gamma=0.3)
    for depth, time_ in zip(*[iter(_charts(cfg)[:4])] * 2):
        d, t = json.loads(depth.to_json()), json.loads(time_.to_json())
        assert d["encoding"]["x"]["scale"]["domain"] == t["encoding"]["x"]["scale"]["domain"] == [0, 9]
        assert d["encoding"]["y"]["scale"]["domain"] == t["encoding"]["y"]["scale"]["domain"]
    # the weights' decades reach the smallest weight of either side (decay at γ = 0.3 falls fastest)
    smallest = analytic_frame(cfg)["weight"].min()
    assert json.loads(_charts(cfg)[0].to_json())["encoding"]["y"]["scale"]["domain"][0] <= smallest


# -- the page ------------------------------------------------------------------------------------------------

def _page_charts(at) -> list[tuple[dict, pd.DataFrame]]:
    out = []
    for c in at.get("vega_lite_chart"):
        data = pa.ipc.open_stream(c.proto.datasets[0].data.data).read_all().to_pandas()
        out.append((json.loads(c.proto.spec), data))
    return out


def _tables(at) -> tuple[pd.DataFrame, pd.DataFrame]:
    assert len(at.dataframe) == 2
    return at.dataframe[0].value, at.dataframe[1].value


@pytest.fixture(scope="module")
def default_page():
    return open_page(PAGE)


def test_the_page_renders_what_the_science_computes(default_page):
    at = default_page
    assert at.title[0].value == "Depth explorer"
    charts = _page_charts(at)
    assert len(charts) == 7
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("SVG") == 7 and labels.count("PNG") == 7
    assert labels.count("CSV") == labels.count("Markdown") == labels.count("LaTeX") == 2
    cfg = ExplorerConfig()
    summary, table = _tables(at)
    pd.testing.assert_frame_equal(summary.reset_index(drop=True), analytic_summary(cfg))
    # the measured table is measure_depth's and the time axis's own numbers, one row per distance
    depth, trace = measure_depth(cfg), measure_identity(time_config(cfg))
    assert list(table.columns) == ["distance", "layer", *[RULE_LABELS[r] for r in EXPLORER_RULES],
                                   "EMA trace α=0.2 (lag = distance)"]
    assert len(table) == 17
    for rule in EXPLORER_RULES:
        np.testing.assert_array_equal(table.sort_values("distance")[RULE_LABELS[rule]].to_numpy(), _acc(depth, rule))
    np.testing.assert_array_equal(table.sort_values("distance").iloc[:, -1].to_numpy(),
                                  trace.accuracy.sort_values("lag")["accuracy"].to_numpy())
    text = " ".join(m.value for m in at.markdown)
    assert "Which limit applies in depth." in text and "And in time" in text
    for line in depth_limit_sentences(depth.limits, cfg):
        assert line in text
    assert any("α = 1 − γ = 0.2" in c.value and "EMA with α = 0.167" in c.value for c in at.caption)


def test_moving_the_sliders_moves_the_numbers():
    at = open_page(PAGE)
    at.slider(key="depth_explorer_layers").set_value(6)
    at.slider(key="depth_explorer_growth").set_value(1.0)
    at.radio(key="depth_explorer_decoder").set_value("peel")
    at.selectbox(key="depth_explorer_precision").set_value("float16")
    ok(at.run())
    summary, table = _tables(at)
    assert len(table) == 7 and list(table["distance"]) == list(range(7))
    cfg = ExplorerConfig(layers=6, growth=1.0, decoder="peel", precision="float16")
    pd.testing.assert_frame_equal(summary.reset_index(drop=True), analytic_summary(cfg))
    # the pairs' x axes end at the new L, on both sides
    for spec, _ in _page_charts(at)[:4]:
        assert spec["encoding"]["x"]["scale"]["domain"] == [0, 6]
    assert any("the peel on 2048 held-out stacks" in c.value for c in at.caption)
    at.slider(key="depth_explorer_layers").set_value(40)
    ok(at.run())
    assert "**precision-limited**" in " ".join(m.value for m in at.markdown)  # float16 under a doubling sum


def test_bad_state_is_reset_not_raised():
    at = open_page(None)
    at.switch_page(PAGE)
    at.session_state["depth_explorer_layers"] = 0
    at.session_state["depth_explorer_gamma"] = "slow"
    at.session_state["depth_explorer_decoder"] = "mlp"
    at.session_state["depth_explorer_codes"] = "mixed"
    ok(at.run())
    assert at.slider(key="depth_explorer_layers").value == 16 and at.slider(key="depth_explorer_gamma").value == 0.8
    assert at.radio(key="depth_explorer_decoder").value == "linear"
    assert any("reset to their defaults" in i.value and "codes" in i.value for i in at.info)
    assert len(_page_charts(at)) == 7


def test_invalid_config_is_an_error_message(monkeypatch):
    # The widgets' ranges sit inside the config's, so tighten the config to reach the error path.
    class Tight(ExplorerConfig):
        layers: int = Field(16, ge=1, le=8)

    monkeypatch.setattr(ema_core.depth.explorer, "ExplorerConfig", Tight)
    at = open_page(PAGE)
    assert len(at.error) == 1
    assert "layers" in at.error[0].value and "8" in at.error[0].value and "Traceback" not in at.error[0].value
    assert len(_page_charts(at)) == 0


def test_an_oversized_measurement_is_refused(monkeypatch):
    monkeypatch.setattr(ema_core.depth.explorer, "explorer_footprint", lambda cfg: 4 * 2**30)
    at = open_page(PAGE)
    assert any("GiB" in w.value for w in at.warning)
    assert len(at.dataframe) == 1  # the analytic table only
    assert len(_page_charts(at)) == 5  # the analytic side still draws
