"""The depth comparison's models: each residual rule against its float64 reference, exactly causal,
matched in size; the probes; and the experiment end to end on a tiny grid."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ema_core.depth import RULES
from ema_core.studies.depth import learning_rates as rate_tables
from ema_core.depth.probes import frequent_tokens, probe_all, residualise, ridge_r2, split_windows, token_probe
from ema_core.depth.residual import (SELECT_INIT_SHARE, DepthLMConfig, DepthLM, depth_weights, mix_entropy, params,
                                     reference_mix, reference_streams)
from ema_core.experiments import REGISTRY, NullReporter, build_config
from ema_core.studies.depth.experiment import lm_streams, model_config, remix
from ema_core.mixers.causality import check_causal
from depth_fixture import SEEDS, TINY, tiny_run


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def small(rule: str, layers: int = 4, **kw) -> DepthLMConfig:
    return DepthLMConfig(vocab_size=31, d_model=16, n_heads=2, d_ff=24, n_layers=layers, seq_len=12, rule=rule, **kw)


def _perturbed(model: DepthLM, seed: int = 1) -> DepthLM:
    """The model with every mixing parameter moved off its starting point (a one-hot α or a zero gate
    would let a wrong index pass)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.mix.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model


@pytest.mark.parametrize("rule", RULES)
def test_fast_path_matches_the_float64_reference_outputs_final_stream_and_gradients(rule):
    model = _perturbed(DepthLM(small(rule), seed=3)).double()
    idx = torch.randint(0, 31, (2, 7), generator=torch.Generator().manual_seed(0))
    fast = model.streams(idx)
    ref = reference_streams(model, idx)
    for a, b in zip(fast["outputs"], ref["outputs"]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fast["final"], ref["final"], rtol=1e-12, atol=1e-12)
    # Gradients of one scalar of the final stream, through both paths, into every parameter.
    g = torch.randn(fast["final"].shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    grads = []
    for s in (model.streams(idx), reference_streams(model, idx)):
        model.zero_grad()
        (s["final"] * g).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    if rule != "sum":
        assert any(n.startswith("mix.") for n in grads[0]), "the rule's own parameters get no gradient"
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], rtol=1e-10, atol=1e-12, msg=n)


@pytest.mark.parametrize("rule", RULES)
def test_float32_fast_path_stays_within_rounding_of_the_float64_reference(rule):
    model = _perturbed(DepthLM(small(rule), seed=4))
    idx = torch.randint(0, 31, (2, 9), generator=torch.Generator().manual_seed(2))
    fast = model.streams(idx)["final"]
    ref = reference_streams(model.double(), idx)["final"]
    torch.testing.assert_close(fast.double(), ref, rtol=1e-5, atol=1e-5)


def test_the_reference_is_not_the_fast_path_a_wrong_weight_is_seen():
    """The reference is written independently: swap two α of block 3 and the chain breaks."""
    model = _perturbed(DepthLM(small("static"), seed=5)).double()
    idx = torch.randint(0, 31, (1, 5), generator=torch.Generator().manual_seed(3))
    outs = model.streams(idx)["outputs"]
    good = reference_mix("static", 3, outs, model.mix)
    with torch.no_grad():
        model.mix.alpha[2][[0, 3]] = model.mix.alpha[2][[3, 0]]
    fast, _ = model.mix(3, outs)
    assert not torch.allclose(fast, good)


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_is_exactly_causal(rule):
    check_causal(_perturbed(DepthLM(small(rule), seed=6)), T=12)


def test_a_rule_that_mixes_across_tokens_is_caught_by_the_probe():
    model = _perturbed(DepthLM(small("static"), seed=7))
    mix = model.mix
    original = mix.forward

    def leaky(i, outs):  # reads the next token's output of block 0
        z, w = original(i, outs)
        return z + 1e-3 * torch.roll(outs[0], shifts=-1, dims=1), w

    mix.forward = leaky
    with pytest.raises(ValueError, match=r"depth\[static, 4 blocks\].* is not causal"):
        check_causal(model, T=12)


def test_static_dynamic_and_select_start_as_or_near_the_standard_residual():
    idx = torch.randint(0, 31, (2, 8), generator=torch.Generator().manual_seed(4))
    base = DepthLM(small("sum"), seed=8)
    static = DepthLM(small("static"), seed=8)
    # The same body (the same draws for every block), and α one-hot on each block's own output.
    torch.testing.assert_close(static(idx), base(idx), rtol=0, atol=0)
    # dynamic is static's α plus an increment that starts at 0: the sum model too, bit for bit
    torch.testing.assert_close(DepthLM(small("dynamic"), seed=8)(idx), base(idx), rtol=0, atol=0)
    select = DepthLM(small("select"), seed=8)
    rows = depth_weights(select, idx)
    own = [r["weight"] for r in rows if r["layer"] == r["source"]]
    assert own == pytest.approx([SELECT_INIT_SHARE] * 4, abs=1e-6)
    assert sum(r["weight"] for r in rows if r["layer"] == 2) == pytest.approx(1.0)


def _mix_grads(model: DepthLM, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    logits = model(idx[:, :-1])
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten()).backward()
    # a parameter no gradient reached has none at all: read as zeros, so that the test names it
    return {name: torch.zeros_like(p) if p.grad is None else p.grad.clone() for name, p in model.mix.named_parameters()}


@pytest.mark.parametrize("rule", [r for r in RULES if r != "sum"])
def test_every_mixing_weight_gets_a_gradient_from_the_first_step(rule):
    # The failure reported for constrained hyper-connections: a mixing parameter that no gradient
    # reaches trains nothing, and the rule is then a fixed sum by another name.  Every element of every
    # mixing parameter is checked, at the rule's starting point (not perturbed).
    model = DepthLM(small(rule), seed=2)
    idx = torch.randint(0, 31, (4, 12), generator=torch.Generator().manual_seed(6))
    grads = _mix_grads(model, idx)
    # select's and dynamic's norms sit behind gates that start at 0: no gradient reaches them at the
    # first step, by construction (as behind MUDDFormer's zero-initialised dynamic weights) ...
    behind_zero = {n for n in grads if n.startswith("norms.")}
    assert bool(behind_zero) == (rule in ("select", "dynamic"))
    for name, g in grads.items():
        if name in behind_zero:
            assert torch.count_nonzero(g) == 0, name
        else:
            assert torch.count_nonzero(g) == g.numel(), f"{name}: {g.numel() - torch.count_nonzero(g)} elements get no gradient"
    # ... and every one of them has one after that step.
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    grads = _mix_grads(model, idx)
    assert all(torch.count_nonzero(g) == g.numel() for g in grads.values()), \
        [n for n, g in grads.items() if torch.count_nonzero(g) < g.numel()]


def test_depth_weights_are_lower_triangular_and_sum_draws_its_own_output():
    idx = torch.randint(0, 31, (1, 6), generator=torch.Generator().manual_seed(5))
    rows = depth_weights(DepthLM(small("sum", layers=3), seed=0), idx)
    assert [(r["layer"], r["source"]) for r in rows] == [(i, j) for i in range(1, 4) for j in range(i + 1)]
    assert [r["weight"] for r in rows if r["weight"] == 1.0] == [1.0, 1.0, 1.0]


def test_parameters_match_within_one_percent_at_the_quick_depths():
    for L in (4, 8, 16):
        counts = {r: params(DepthLMConfig(vocab_size=4096, d_model=128, n_heads=4, d_ff=512, n_layers=L, seq_len=128,
                                        rule=r)) for r in RULES}
        assert max(counts.values()) / min(counts.values()) - 1 < 0.01, (L, counts)
        assert counts["sum"] < counts["static"] < counts["select"]  # each rule's own parameters are counted
        assert counts["dynamic"] == counts["select"]  # α in place of select's bias: the same count


def test_a_grid_whose_rules_are_not_matched_is_refused_with_the_gap():
    with pytest.raises(ValueError, match=r"parameter counts differ by .*%.*at most 1%"):
        build_config("depth", overrides={"model.d_model": 8, "model.n_heads": 1, "model.d_ff": 8,
                                         "data.vocab_size": 257, "depths": "48"})


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="rules"):
        build_config("depth", overrides={"rules": "sum,fancy"})
    with pytest.raises(ValueError, match="depths.*more than once"):
        build_config("depth", overrides={"depths": "4,4"})
    with pytest.raises(ValueError, match="depths.*1 to 96"):
        build_config("depth", overrides={"depths": "0"})


# -- probes ---------------------------------------------------------------------------------------------

def test_residualise_removes_exactly_what_a_linear_map_of_the_source_explains():
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=(12, 20, 6))
    own = rng.normal(size=(12, 20, 3))
    target = x0 @ rng.normal(size=(6, 3)) + 2.0 + own
    left = residualise(target, x0)
    np.testing.assert_allclose(residualise(x0 @ rng.normal(size=(6, 3)) - 1.0, x0), 0, atol=1e-9)
    # what x_0 cannot explain survives: the residual is still read where the stream holds it
    assert ridge_r2(np.concatenate([x0, own], -1), left) > 0.99 and ridge_r2(x0, left) < 0.1


def test_probe_prev_reads_the_previous_token_only_where_the_stream_holds_it():
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 10, size=(12, 30))
    codes = rng.normal(size=(10, 16))
    frequent = frequent_tokens(tokens.ravel(), 5)
    prev = np.concatenate([np.zeros((12, 1), dtype=int), tokens[:, :-1]], 1)
    x0 = codes[tokens]
    holds = probe_all(np.concatenate([codes[tokens], codes[prev]], -1), x0[..., :4], x0, tokens, frequent)
    blind = probe_all(codes[tokens], x0[..., :4], x0, tokens, frequent)
    assert holds["probe_prev"] == 1.0 and blind["probe_prev"] < 0.5
    assert 0 < blind["probe_prev_chance"] < 0.5


def test_mix_entropy_is_zero_on_one_output_one_when_even_and_none_for_sum():
    for rule in ("static", "dynamic"):  # both start with all weight on the block's own output
        assert mix_entropy(DepthLM(small(rule), seed=0), torch.zeros(1, 4, dtype=torch.long)) == pytest.approx(0.0)
    assert mix_entropy(DepthLM(small("sum"), seed=0), torch.zeros(1, 4, dtype=torch.long)) is None
    even = DepthLM(small("static", layers=3), seed=0)
    with torch.no_grad():
        for a in even.mix.alpha:
            a.fill_(-0.5)  # signed: magnitudes are read
    assert mix_entropy(even, torch.zeros(1, 4, dtype=torch.long)) == pytest.approx(1.0)
    sel = mix_entropy(DepthLM(small("select", layers=3), seed=0), torch.zeros(1, 4, dtype=torch.long))
    assert 0 < sel < 1  # 0.9 on its own output, the rest spread



def test_split_windows_is_three_disjoint_contiguous_parts():
    a, b, c = split_windows(10)
    assert list(a) + list(b) + list(c) == list(range(10)) and min(len(a), len(b), len(c)) >= 1
    with pytest.raises(ValueError, match="at least 3 windows"):
        split_windows(2)


def test_ridge_r2_reads_a_linear_target_and_not_noise():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 20, 8))
    Y = X @ rng.normal(size=(8, 3))
    assert ridge_r2(X, Y) > 0.99
    assert ridge_r2(X, rng.normal(size=(12, 20, 3))) < 0.1


def test_token_probe_reads_identity_from_codes_and_sees_chance_without_them():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 10, size=(12, 30))
    codes = rng.normal(size=(10, 16))
    frequent = frequent_tokens(tokens[:6].ravel(), 5)
    assert len(frequent) == 5
    assert token_probe(codes[tokens], tokens, frequent)["accuracy"] == 1.0
    blind = token_probe(rng.normal(size=(12, 30, 16)), tokens, frequent)
    assert blind["accuracy"] < 0.5 and 0 < blind["chance"] < 0.5


# -- the experiment ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_result():
    """(config, result) of the fixtures' tiny run: every rule at 1 and 2 blocks, three seeds, trained once
    per test run (tests/depth_fixture.py)."""
    config, _, result = tiny_run(0)
    cfg = build_config("depth", overrides=TINY, seed=0)
    assert cfg.model_dump(mode="json") == config
    return cfg, result


def test_the_run_reports_every_cell_and_the_map_the_cli_promises(tiny_result):
    cfg, result = tiny_result
    rows = result["tables"]["depth_results"]
    assert len(rows) == len(RULES) * 2 * SEEDS == result["summary"]["cells"]
    m = result["summary"]["map"]
    assert set(m) == set(RULES) and all(set(by) == {"1", "2"} for by in m.values())
    assert all({"val_loss", "probe_token", "probe_early"} <= set(v) for by in m.values() for v in by.values())
    for r in rows:
        assert math.isfinite(r["val_loss"]) and 0 <= r["probe_token"] <= 1 and r["probe_early"] <= 1
        assert r["lr"] == cfg.lr(r["rule"], r["depth"])
        for k in ("probe_early_resid", "probe_prev", "probe_early_resid_init", "probe_prev_init"):
            assert r[k] <= 1 and math.isfinite(r[k]), k
        assert ("mix_entropy" in r) == (r["rule"] != "sum")
    assert result["summary"]["param_gap"] < 0.01
    # At one (depth, seed) the rules start from the same body and the same batches: sum and static
    # are the same function at step 0, so their probes at initialisation agree exactly.
    by = {(r["rule"], r["depth"], r["seed"]): r for r in rows}
    for L in (1, 2):
        assert by["sum", L, 0]["probe_token_init"] == by["static", L, 0]["probe_token_init"]


def test_weights_rows_cover_every_layer_and_source(tiny_result):
    _, result = tiny_result
    w = result["tables"]["depth_weights"]
    # per cell: Σ_{i=1..L} (i + 1) rows; L = 1: 2, L = 2: 5
    assert len(w) == len(RULES) * SEEDS * (2 + 5)
    static = [r for r in w if r["rule"] == "static" and r["depth"] == 2 and r["seed"] == 0]
    assert {(r["layer"], r["source"]) for r in static} == {(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)}


def test_a_cancelled_run_resumes_cell_by_cell_to_the_same_rows(tiny_result):
    cfg, result = tiny_result
    cfg1 = cfg.model_copy(update={"seeds": 1})
    rep = NullReporter(stop_after_checkpoints=2)
    with pytest.raises(Exception, match="cancelled"):
        REGISTRY["depth"].run(cfg1, rep)
    rep.stop_after_checkpoints = None
    again = REGISTRY["depth"].run(cfg1, rep)["tables"]["depth_results"]
    first = [r for r in result["tables"]["depth_results"] if r["seed"] == cfg.seed]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(again) == strip(first)


def test_a_frozen_sum_model_is_remixed_at_every_depth_and_seed(tiny_result):
    cfg, result = tiny_result
    remix = result["tables"]["depth_remix"]
    assert {(m["rule"], m["depth"], m["seed"]) for m in remix} == {
        (r, L, cfg.seed + s) for r in ("static", "dynamic") for L in (1, 2) for s in range(SEEDS)}
    sums = {(r["depth"], r["seed"]): r["val_loss"] for r in result["tables"]["depth_results"] if r["rule"] == "sum"}
    for m in remix:
        assert m["base_loss"] == sums[m["depth"], m["seed"]] and m["steps"] == cfg.train.steps
        assert math.isfinite(m["val_loss"])
    by = result["summary"]["remix"]["static"]["2"]
    assert by["recovered"] == pytest.approx(by["base_loss"] - by["val_loss"])


def test_the_remix_starts_as_the_sum_model_and_moves_only_its_mixing_weights():
    cfg = build_config("depth", overrides={**TINY, "seeds": 1, "depths": "2"}, seed=0)
    trained = DepthLM(ModelCfg(cfg, "sum", 2), seed=0)
    streams = lm_streams(cfg)
    body = {k: v.clone() for k, v in trained.state_dict().items()}
    idx = torch.randint(0, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    for rule in ("static", "dynamic"):
        fitted = DepthLM(ModelCfg(cfg, rule, 2), seed=0)
        fitted.load_state_dict(trained.state_dict(), strict=False)
        torch.testing.assert_close(fitted(idx), trained(idx), rtol=0, atol=0)  # the same function at step 0
        out = remix(cfg, trained, rule, 2, 0, streams, torch.device("cpu"))
        assert out["rule"] == rule and out["steps"] == cfg.train.steps and math.isfinite(out["val_loss"])
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in body.items())  # the trained model untouched


def ModelCfg(cfg, rule: str, depth: int):
    return model_config(cfg, rule, depth, 257)


def test_the_weights_are_kept_at_every_evaluation_for_every_rule_but_sum(tiny_result):
    cfg, result = tiny_result
    steps = result["tables"]["depth_weight_steps"]
    assert {r["rule"] for r in steps} == set(RULES) - {"sum"}
    # evaluations at 3 and 6 (eval_every 3 of 6 steps), and the initialisation at 0
    assert {r["step"] for r in steps} == {0, 3, 6}
    first = [r for r in steps if (r["rule"], r["depth"], r["seed"], r["step"]) == ("static", 2, 0, 0)]
    assert {(r["layer"], r["source"]): r["weight"] for r in first} == {
        (1, 0): 0.0, (1, 1): 1.0, (2, 0): 0.0, (2, 1): 0.0, (2, 2): 1.0}  # DenseFormer's start: the sum


def test_auto_reads_a_rate_per_rule_and_depth_and_refuses_what_was_not_chosen():
    quick = build_config("depth", preset="quick")
    table = rate_tables.TABLES[0]
    assert (quick.rate_table().table, quick.rate_table().matched) == (table, True)
    for rule in RULES:
        for L in quick.depths:
            assert quick.lr(rule, L) == table.rates[f"{rule}|{L}"]
    with pytest.raises(ValueError, match=r"^train.lr: auto, but no rates were chosen at these settings \(quick: "
                                         r"train.steps 300 there, 200 here\)"):
        build_config("depth", preset="quick", overrides={"train.steps": 200})
    # A model setting the table does not record is a body it never saw: refused too.
    with pytest.raises(ValueError, match=r"no rates were chosen.*model.d_model 128 there, 64 here"):
        build_config("depth", preset="quick", overrides={"model.d_model": 64})
    with pytest.raises(ValueError, match=r"has no rate for rule sum depth 2, .* \(it holds rule dynamic, select, "
                                         r"static, sum; depth 4, 8, 16\)"):
        build_config("depth", preset="quick", overrides={"depths": "2,4"})
    with pytest.raises(ValueError, match=r"rates_from: no rate table named 'nope'"):
        build_config("depth", preset="quick", overrides={"rates_from": "nope"})
    # Read at another budget only on purpose, and said so: the long preset reads the quick table.
    long = build_config("depth", preset="long")
    assert long.rate_table().table.name == "quick" and not long.rate_table().matched
    assert table.differences(long.model_dump(mode="json"))["train.steps"] == (300, 2400)
    assert long.lr("dynamic", 16) == quick.lr("dynamic", 16)


def test_the_long_preset_is_eight_times_the_quick_tokens_with_warm_up_plateau_and_cool_down():
    quick, long = (build_config("depth", preset=p).train for p in ("quick", "long"))
    tokens = lambda t: t.steps * t.batch * t.seq_len  # noqa: E731
    assert tokens(long) >= 8 * tokens(quick)
    assert long.schedule == "wsd" and long.warmup > 0 and 0 < long.decay_frac < 1


def test_the_remix_refuses_sum():
    with pytest.raises(ValueError, match="sum has no mixing weights"):
        build_config("depth", overrides={**TINY, "remix.fitted": "sum"})


def test_headline_names_the_deepest_depth(tiny_result):
    _, result = tiny_result
    line = REGISTRY["depth"].headline(result["summary"])
    assert line.startswith(f"{len(RULES) * 2 * SEEDS} cells · val loss at 2 blocks: sum ")
