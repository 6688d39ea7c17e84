"""SPCN: the Hebbian update against a slow reference, learning without labels, causality, resets."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from ema_core.grammar import GrammarConfig, sample_sentences, stream
from ema_core.spcn import SPCN, SPCNConfig, SPCNState, hebbian_step, precision, topk_mask

SMALL = SPCNConfig(code_dim=16, units=24, k=3, rates=(0.5, 0.1), lr=0.1, batch=8, passes=2)


def _grammar_stream(n=120, seed=0, split="train"):
    tok, roles, start = stream(sample_sentences(GrammarConfig(), n, seed, split))
    return tok, roles, start


def _slow_hebbian(W, err_var, g_prev, f, cfg):
    """ΔW_ij = η/B Σ_t π_i e_ti g_tj, written element by element with Python loops."""
    N, M = len(W), len(W[0])
    B = len(f)
    e = [[f[t][i] - sum(W[i][j] * g_prev[t][j] for j in range(M)) for i in range(N)] for t in range(B)]
    inv = [1.0 / (err_var[i] + 1e-6) for i in range(N)]
    mean_inv = sum(inv) / N
    pi = [min(inv[i] / mean_inv, cfg.precision_clip) for i in range(N)]
    W_new = [[W[i][j] + cfg.lr / B * pi[i] * sum(e[t][i] * g_prev[t][j] for t in range(B)) for j in range(M)]
             for i in range(N)]
    var_new = [err_var[i] + cfg.precision_rate * (sum(e[t][i] ** 2 for t in range(B)) / B - err_var[i])
               for i in range(N)]
    return np.array(W_new), np.array(var_new), sum(sum(x * x for x in row) for row in e) / B


def test_hebbian_update_equals_the_slow_reference_step_by_step():
    cfg = SPCNConfig(code_dim=8, units=6, k=2, rates=(0.5, 0.1), lr=0.3, batch=5, precision_clip=2.0)
    rng = np.random.default_rng(7)
    state = SPCNState(np.zeros((6, 12)), np.full(6, 2 / 6))
    W_ref, var_ref = state.W.copy(), state.err_var.copy()
    for step in range(6):
        g_prev = rng.random((5, 12))
        f = topk_mask(rng.standard_normal((5, 6)), 2)
        err = hebbian_step(state, g_prev, f, cfg)
        W_ref, var_ref, err_ref = _slow_hebbian(W_ref.tolist(), var_ref.tolist(), g_prev.tolist(), f.tolist(), cfg)
        np.testing.assert_allclose(state.W, W_ref, rtol=1e-12, atol=1e-14, err_msg=f"W after step {step}")
        np.testing.assert_allclose(state.err_var, var_ref, rtol=1e-12, atol=1e-14)
        assert err == pytest.approx(err_ref, rel=1e-12)
    assert state.updates == 6
    assert np.abs(state.W).sum() > 0  # the steps did move the weights


def test_precision_gates_the_update_by_error_variance():
    pi = precision(np.array([0.01, 0.1, 1.0, 10.0]), clip=100.0)
    assert pi.mean() == pytest.approx(1.0)
    assert np.all(np.diff(pi) < 0)  # a noisier unit learns slower
    assert precision(np.array([1e-9, 1.0, 1.0, 1.0]), clip=2.0).max() == 2.0


def test_the_api_takes_no_labels():
    for fn in (SPCN.train, SPCN.run, SPCN.features, SPCN.prediction_error):
        names = set(inspect.signature(fn).parameters)
        assert not names & {"roles", "labels", "y", "targets"}, fn.__name__


def test_prediction_error_falls_with_hebbian_passes():
    tok, _, start = _grammar_stream(300)
    model = SPCN(SMALL, seed=3)
    before = model.prediction_error(tok, start)
    per_pass = []
    model.train(tok, start, passes=4, on_pass=lambda i, e: per_pass.append(e))
    after = model.prediction_error(tok, start)
    assert after < 0.95 * before
    assert per_pass[-1] < per_pass[0]
    # ...and on sentences it never saw (held-out test split), not only on its training stream
    ttok, _, tstart = _grammar_stream(100, split="test")
    assert model.prediction_error(ttok, tstart) < SPCN(SMALL, seed=3).prediction_error(ttok, tstart)


def test_untrained_spcn_is_the_feed_forward_code():
    tok, _, start = _grammar_stream(20)
    out = SPCN(SMALL, seed=1).run(tok, start)
    np.testing.assert_array_equal(out["a"], out["f"])
    assert not out["p"].any()


def test_features_are_sparse_and_shaped():
    tok, _, start = _grammar_stream(30)
    model = SPCN(SMALL, seed=1)
    model.train(tok, start, passes=1)
    F = model.features(tok, start)
    T, N, K = len(tok), SMALL.units, len(SMALL.rates)
    assert F["instantaneous"].shape == (T, N) and F["traces"].shape == (T, K * N)
    assert F["both"].shape == (T, N + K * N)
    np.testing.assert_array_equal(F["instantaneous"].sum(1), SMALL.k)  # exactly k active per token


def test_deterministic_per_seed():
    tok, _, start = _grammar_stream(60)
    a, b, c = SPCN(SMALL, 5), SPCN(SMALL, 5), SPCN(SMALL, 6)
    for m in (a, b, c):
        m.train(tok, start)
    np.testing.assert_array_equal(a.state.W, b.state.W)
    np.testing.assert_array_equal(a.features(tok, start)["traces"], b.features(tok, start)["traces"])
    assert not np.array_equal(a.state.W, c.state.W)


def test_a_words_code_depends_on_its_id_only():
    model = SPCN(SMALL, 2)
    alone = model.codes(np.array([150]))
    in_context = model.codes(np.array([3, 150, 7, 150]))
    np.testing.assert_array_equal(in_context[1], alone[0])
    np.testing.assert_array_equal(in_context[3], alone[0])
    # a novel id gets a code of its own, unlike any training word's
    train_codes = model.codes(np.arange(147))
    assert np.abs(train_codes @ alone[0]).max() < np.linalg.norm(alone[0]) ** 2 * 0.9


def test_causal_prediction_and_traces():
    # Changing token t never changes the prediction at t or before, nor any feature before t.
    tok, _, _ = _grammar_stream(10)
    start = np.zeros(len(tok), dtype=bool)
    start[0] = True
    model = SPCN(SMALL.model_copy(update={"reset_at_sentence": False}), 4)
    model.train(tok, start, passes=1)
    t = 20
    other = tok.copy()
    other[t] = (tok[t] + 1) % 147
    a, b = model.run(tok, start), model.run(other, start)
    np.testing.assert_array_equal(a["p"][: t + 1], b["p"][: t + 1])
    assert not np.array_equal(a["p"][t + 1:], b["p"][t + 1:])  # it does reach the future
    fa, fb = model.features(tok, start), model.features(other, start)
    np.testing.assert_array_equal(fa["traces"][:t], fb["traces"][:t])


def test_reset_isolates_sentences():
    sents = sample_sentences(GrammarConfig(), 6, 0, "train")
    model = SPCN(SMALL, 4)
    tok, _, start = stream(sents)
    model.train(tok, start, passes=1)
    last_tok, _, last_start = stream(sents[-1:])
    whole = model.features(tok, start)["both"][-len(last_tok):]
    alone = model.features(last_tok, last_start)["both"]
    np.testing.assert_allclose(whole, alone, rtol=0, atol=1e-6)


def test_topk_mask_keeps_exactly_k_with_deterministic_ties():
    x = np.array([[1.0, 3.0, 3.0, 0.0, 3.0]])
    np.testing.assert_array_equal(topk_mask(x, 2), [[0, 1, 1, 0, 0]])
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(topk_mask(rng.standard_normal((50, 30)), 7).sum(1), 7)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="k must be below units"):
        SPCNConfig(units=8, k=8)
    with pytest.raises(ValueError, match="rates"):
        SPCNConfig(rates=(0.5, 0.5))
    with pytest.raises(ValueError):
        SPCNConfig(rates=(1.5,))
