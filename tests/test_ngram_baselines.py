"""The n-gram baselines of the content gap: the fast path against its loops, and the class sums."""
from __future__ import annotations

import numpy as np
import pytest

from ema_core.lm.ngram import (BASELINES, CACHE_WEIGHTS, Bigram, KneserNey, baseline_evaluations, choose_cache_weight,
                               copy_mix_evaluation, eval_windows, kneser_ney_reference, mix_cache, window_losses,
                               window_losses_reference)
from ema_core.lm.token_classes import CLASSES, SPLITS, TrainCounts


def _stream(n: int, vocab: int, seed: int) -> np.ndarray:
    # a skewed stream with repeats, so that every class and the cache have something to do
    rng = np.random.default_rng(seed)
    return rng.zipf(1.4, size=n) % vocab


def test_the_bigram_is_a_distribution_over_the_vocabulary():
    m = Bigram.fit(_stream(5000, 50, 0), 50)
    for prev in (0, 3, 49):
        assert m.prob(np.full(50, prev), np.arange(50)).sum() == pytest.approx(1.0, abs=1e-12)
    assert 0 < m.discount < 1
    unseen = Bigram.fit(np.array([1, 2, 1, 2]), 10)  # a context never seen: the unigram alone
    assert unseen.prob(7, 3) == pytest.approx(unseen.unigram[3])


@pytest.mark.parametrize("lam", [None, 0.3, 0.8])
def test_the_fast_path_matches_the_loops(lam):
    m = Bigram.fit(_stream(4000, 30, 1), 30)
    windows = _stream(5 * 41, 30, 2).reshape(5, 41)
    fast = window_losses(m, windows, lam)
    for row, w in zip(fast, windows):
        np.testing.assert_allclose(row, window_losses_reference(m, w, lam), rtol=1e-12)


def test_the_cache_copies_what_the_window_repeats():
    train = _stream(4000, 30, 3)
    m = Bigram.fit(train, 30)
    window = np.array([[5, 7, 11, 5, 7, 11, 5, 7, 11]])
    plain, cached = window_losses(m, window), window_losses(m, window, 0.5)
    assert np.array_equal(plain[0, :2], cached[0, :2])  # nothing seen yet: the bigram's own
    assert (cached[0, 4:] < plain[0, 4:]).all()          # a repeated pair: the cache predicts it


def test_baselines_cut_the_windows_evaluate_cuts_and_their_classes_add_up():
    train, val = _stream(20_000, 64, 4), _stream(3000, 64, 5)
    assert eval_windows(val, 64, 1000).shape == (15, 65)
    out = baseline_evaluations(train, val, seq_len=64, max_tokens=1000)
    assert set(out) == set(BASELINES) == {"bigram", "cache", "kn_trigram"}
    for b in out.values():
        assert b["tokens"] == 15 * 64 and set(b["token_classes"]) == set(CLASSES)
        for split in SPLITS:
            assert list(b[split.key]) == list(split.classes)
            assert sum(c["tokens"] for c in b[split.key].values()) == b["tokens"]
            assert sum(c["loss"] for c in b[split.key].values()) == pytest.approx(b["loss"] * b["tokens"], rel=1e-9)
    assert out["bigram"]["cache_weight"] is None and out["cache"]["cache_weight"] in CACHE_WEIGHTS
    assert choose_cache_weight(train, 64, 64) == out["cache"]["cache_weight"]
    with pytest.raises(ValueError, match="shorter than seq_len"):
        eval_windows(val[:10], 64)


@pytest.mark.parametrize("vocab", [7, 12])  # 12: ids the training text never shows
def test_kneser_ney_matches_its_loops_and_is_a_distribution(vocab):
    t = np.minimum(np.random.default_rng(1).zipf(1.5, 400) - 1, 6)
    kn, ref = KneserNey.fit(t, vocab), kneser_ney_reference(t, vocab)
    assert all(0 < d < 1 for d in kn.discounts)
    for u in (None, 0, 2, 6, vocab - 1):
        for v in (0, 1, 5, vocab - 1):
            p = kn.prob(np.full(vocab, -1 if u is None else u), np.full(vocab, v), np.arange(vocab))
            assert p.sum() == pytest.approx(1.0, abs=1e-12) and (p > 0).all()
            np.testing.assert_allclose(p, [ref(u, v, w) for w in range(vocab)], rtol=1e-12)


def test_kneser_ney_windows_read_two_tokens_back_from_the_window_alone():
    t = _stream(4000, 30, 6)
    kn, ref = KneserNey.fit(t, 30), kneser_ney_reference(t, 30)
    windows = _stream(3 * 21, 30, 7).reshape(3, 21)
    losses = kn.window_losses(windows)
    for row, w in zip(losses, windows):
        expected = [-np.log(ref(None if j == 0 else int(w[j - 1]), int(w[j]), int(w[j + 1]))) for j in range(20)]
        np.testing.assert_allclose(row, expected, rtol=1e-12)
    with pytest.raises(ValueError, match="at least 3"):
        KneserNey.fit([1, 2], 5)
    with pytest.raises(ValueError, match="must lie in"):
        KneserNey.fit([1, 2, 9], 5)


def test_kneser_ney_learns_order_two_tokens_back_that_a_bigram_cannot():
    rng = np.random.default_rng(10)
    t = [0, 1]
    for _ in range(30_000):  # the next token is fixed by the two before it, one time in ten random
        t.append(int(rng.integers(16)) if rng.random() < 0.1 else (t[-1] + 3 * t[-2]) % 16)
    t = np.array(t)
    out = baseline_evaluations(t[:25_000], t[25_000:], seq_len=64)
    assert out["kn_trigram"]["loss"] < out["bigram"]["loss"] - 1.0


def test_copy_mix_is_the_cache_over_the_models_own_prediction():
    train, val = _stream(20_000, 40, 8), _stream(2000, 40, 9)
    m = Bigram.fit(train, 40)
    windows, dev = eval_windows(val, 32, 640), eval_windows(train[-700:], 32)
    # a "model" that is the bigram: its copy mix is the cache baseline at the λ it chooses
    out = copy_mix_evaluation(window_losses(m, dev), dev, window_losses(m, windows), windows, TrainCounts.of(train, 40))
    lam = out["cache_weight"]
    assert lam in CACHE_WEIGHTS
    assert out["loss"] == pytest.approx(float(window_losses(m, windows, lam).mean()), rel=1e-12)
    dev_losses = [float(window_losses(m, dev, x).mean()) for x in CACHE_WEIGHTS]
    assert lam == CACHE_WEIGHTS[int(np.argmin(dev_losses))]
    for split in SPLITS:
        assert sum(c["tokens"] for c in out[split.key].values()) == windows[:, 1:].size
    # nothing seen in the window: the model's own probability, untouched
    p = np.full((1, 3), 0.25)
    np.testing.assert_array_equal(mix_cache(p, np.array([[1, 2, 3, 4]]), 0.5), p)
