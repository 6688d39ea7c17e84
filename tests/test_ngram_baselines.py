"""The n-gram baselines of the content gap: the fast path against its loops, and the class sums."""
from __future__ import annotations

import numpy as np
import pytest

from ema_core.lm.ngram import (CACHE_WEIGHTS, Bigram, baseline_evaluations, choose_cache_weight, eval_windows,
                               window_losses, window_losses_reference)
from ema_core.lm.token_classes import CLASSES


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
    assert set(out) == {"bigram", "cache"}
    for b in out.values():
        assert b["tokens"] == 15 * 64 and set(b["token_classes"]) == set(CLASSES)
        for split in ("token_classes", "token_bands"):
            assert sum(c["tokens"] for c in b[split].values()) == b["tokens"]
            assert sum(c["loss"] for c in b[split].values()) == pytest.approx(b["loss"] * b["tokens"], rel=1e-9)
    assert out["bigram"]["cache_weight"] is None and out["cache"]["cache_weight"] in CACHE_WEIGHTS
    assert choose_cache_weight(train, 64, 64) == out["cache"]["cache_weight"]
    with pytest.raises(ValueError, match="shorter than seq_len"):
        eval_windows(val[:10], 64)
