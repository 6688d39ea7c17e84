"""The n-gram baselines of the content gap: the held-out loss by token class with no network at all.

Two models, scored on exactly the windows :func:`ema_core.lm.train.evaluate` scores (each window
starts with an empty context), so that their class losses stand beside SPEN's and the GPT's:

* ``bigram`` — the training split's bigram counts, interpolated absolute discounting (Ney's discount
  D = n1 / (n1 + 2·n2)) down to an add-one unigram.  It knows which tokens follow which in the
  training text, and nothing of the window: a recall token it predicts well is one whose bigram is
  simply common, which a network needs no memory of the context to get right.
* ``cache`` — the bigram mixed with the window's own bigrams so far:
  ``(1 − λ)·P_bigram(y | p) + λ·c(p, y) / c(p)`` where c counts the pairs already seen in the window
  (the bigram alone where p has not been seen).  The simplest model that copies from its context: on
  recall tokens it is what "looking back" buys without learning anything.  λ is chosen on windows cut
  from the end of the training text (counts from the rest), never on the held-out text.

``window_losses`` is the fast path (sorts, no Python loop over tokens); ``window_losses_reference`` the
loops it is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ema_core.lm.token_classes import BANDS, class_sums, classify, frequency_bands

BASELINES = ("bigram", "cache")
# The grid λ is chosen from (the cache's weight), roughly log-spaced: on Austen at 256-token windows
# the optimum sits near 0.05, where the loss is flat to a factor of two either way.
CACHE_WEIGHTS = (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7)
# Training tokens held back to choose λ on (its end), at most this share of the training text.
DEV_FRACTION = 0.05
# Training tokens a bigram is counted on, at most (the first ones): beyond tens of millions a bigram's
# estimates hardly move, and the counting's scratch arrays would take gigabytes (the paper's corpora).
MAX_FIT_TOKENS = 50_000_000


@dataclass(frozen=True)
class Bigram:
    """Interpolated absolute-discounting bigram counts of a token stream (ids in [0, vocab))."""

    vocab: int
    codes: np.ndarray  # sorted distinct pair codes p·vocab + y
    counts: np.ndarray  # their counts
    context: np.ndarray  # (vocab,) c(p): pairs starting with p
    types: np.ndarray  # (vocab,) N1+(p): distinct tokens seen after p
    unigram: np.ndarray  # (vocab,) add-one unigram probabilities
    discount: float

    @classmethod
    def fit(cls, tokens, vocab: int) -> "Bigram":
        t = np.asarray(tokens, dtype=np.int64).ravel()
        if t.size < 2:
            raise ValueError(f"a bigram needs at least 2 training tokens, got {t.size}")
        if t.min() < 0 or t.max() >= vocab:
            raise ValueError(f"token ids must lie in [0, {vocab}), got [{t.min()}, {t.max()}]")
        codes, counts = np.unique(t[:-1] * vocab + t[1:], return_counts=True)
        n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
        discount = n1 / (n1 + 2 * n2) if n1 + n2 else 0.5
        unigram = (np.bincount(t, minlength=vocab) + 1.0) / (t.size + vocab)
        return cls(vocab=vocab, codes=codes, counts=counts, context=np.bincount(t[:-1], minlength=vocab),
                   types=np.bincount(codes // vocab, minlength=vocab), unigram=unigram, discount=discount)

    def prob(self, prev, nxt) -> np.ndarray:
        """P(nxt | prev), elementwise over arrays of ids; > 0 everywhere (the unigram is add-one)."""
        p, y = np.asarray(prev, dtype=np.int64), np.asarray(nxt, dtype=np.int64)
        code = p * self.vocab + y
        at = np.minimum(np.searchsorted(self.codes, code), self.codes.size - 1)
        pair = np.where(self.codes[at] == code, self.counts[at], 0)
        ctx = self.context[p]
        seen = ctx > 0
        safe = np.where(seen, ctx, 1)
        interp = np.maximum(pair - self.discount, 0.0) / safe + self.discount * self.types[p] / safe * self.unigram[y]
        return np.where(seen, interp, self.unigram[y])


def _count_before(x: np.ndarray) -> np.ndarray:
    """#{t' < t : x[t'] == x[t]} in each row of a 2-D array."""
    order = np.argsort(x, axis=1, kind="stable")  # equal values in position order
    ranked = np.take_along_axis(x, order, axis=1)
    idx = np.broadcast_to(np.arange(x.shape[1]), x.shape)
    starts = np.concatenate([np.ones((x.shape[0], 1), bool), ranked[:, 1:] != ranked[:, :-1]], axis=1)
    group_start = np.maximum.accumulate(np.where(starts, idx, 0), axis=1)
    out = np.empty(x.shape, dtype=np.int64)
    np.put_along_axis(out, order, idx - group_start, axis=1)
    return out


def window_losses(model: Bigram, windows, cache_weight: float | None = None) -> np.ndarray:
    """(B, T) losses in nats of the targets of (B, T + 1) windows: the bigram's, or with ``cache_weight``
    the cache's (the window's own pairs before each target, mixed in at that weight)."""
    w = np.asarray(windows, dtype=np.int64)
    prev, nxt = w[:, :-1], w[:, 1:]
    p = model.prob(prev, nxt)
    if cache_weight is not None and w.shape[1] > 1:
        # target j sees pairs (w[i], w[i+1]) with i < j: the earlier occurrences of p, and of (p, y)
        seen_p = _count_before(prev)
        seen_py = _count_before(prev * model.vocab + nxt)
        ctx = np.where(seen_p > 0, seen_py / np.maximum(seen_p, 1), 0.0)
        p = np.where(seen_p > 0, (1 - cache_weight) * p + cache_weight * ctx, p)
    return -np.log(p)


def window_losses_reference(model: Bigram, window, cache_weight: float | None = None) -> list[float]:
    """The losses of one window's targets by the definitions' own loops (O(T²))."""
    w = [int(t) for t in window]
    out = []
    for j in range(len(w) - 1):
        p, y = w[j], w[j + 1]
        prob = float(model.prob(p, y))
        if cache_weight is not None:
            seen_p = sum(1 for i in range(j) if w[i] == p)
            if seen_p:
                seen_py = sum(1 for i in range(j) if w[i] == p and w[i + 1] == y)
                prob = (1 - cache_weight) * prob + cache_weight * seen_py / seen_p
        out.append(-np.log(prob))
    return out


def eval_windows(tokens, seq_len: int, max_tokens: int = 0) -> np.ndarray:
    """(n, seq_len + 1): the consecutive windows :func:`ema_core.lm.train.evaluate` scores, the same cut."""
    t = np.asarray(tokens, dtype=np.int64)
    n = (t.size - 1) // seq_len
    if max_tokens:
        n = min(n, max(1, max_tokens // seq_len))
    if n < 1:
        raise ValueError(f"the stream ({t.size} tokens) is shorter than seq_len + 1 ({seq_len + 1})")
    return t[np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)]


def choose_cache_weight(train, vocab: int, seq_len: int) -> float:
    """The λ of ``CACHE_WEIGHTS`` with the lowest loss on windows from the end of the training text,
    the bigram counted on the rest (ties: the smaller λ)."""
    t = np.asarray(train, dtype=np.int64)
    dev = max(seq_len + 1, int(DEV_FRACTION * t.size))
    if t.size - dev < 2:
        raise ValueError(f"the training text ({t.size} tokens) is too short to hold back {dev} tokens for λ")
    model, windows = Bigram.fit(t[:-dev], vocab), eval_windows(t[-dev:], seq_len)
    losses = [float(window_losses(model, windows, lam).mean()) for lam in CACHE_WEIGHTS]
    return CACHE_WEIGHTS[int(np.argmin(losses))]


def baseline_evaluations(train, val, seq_len: int, max_tokens: int = 0, vocab: int | None = None) -> dict[str, dict]:
    """``{baseline: {"loss", "tokens", "token_classes", "token_bands", "cache_weight"}}`` on the held-out
    windows ``evaluate`` scores with these ``seq_len`` and ``max_tokens``; class sums as its."""
    train, val = np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
    vocab = vocab or int(max(train.max(), val.max())) + 1
    windows = eval_windows(val, seq_len, max_tokens)
    classes = classify(windows).ravel()
    bands = frequency_bands(train, vocab)[windows[:, 1:]].ravel()  # the models' bands: the whole split's
    fit = train[:MAX_FIT_TOKENS]
    model = Bigram.fit(fit, vocab)
    weights = {"bigram": None, "cache": choose_cache_weight(fit, vocab, seq_len)}
    out = {}
    for name, lam in weights.items():
        losses = window_losses(model, windows, lam).ravel()
        out[name] = {"loss": float(losses.mean()), "tokens": int(losses.size), "cache_weight": lam,
                     "token_classes": class_sums(losses, classes), "token_bands": class_sums(losses, bands, BANDS)}
    return out
