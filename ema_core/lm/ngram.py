"""The n-gram baselines of the content gap: the held-out loss by token class with no network at all, and
with a free copy mechanism added to a network.

Three models, scored on exactly the windows :func:`ema_core.lm.train.evaluate` scores (each window
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
* ``kn_trigram`` — an interpolated Kneser–Ney trigram (Chen & Goodman 1998, one discount per order,
  D = n1 / (n1 + 2·n2) of that order's counts) fitted on the training split.  It knows local word order
  two tokens back and nothing else of the window: the share of a gap on first-seen and other tokens
  that it already closes is local order, not memory.  A window's first target has one token of
  context and reads the middle order.

And one mix, ``copy_mix``: a trained model's own prediction interpolated with the window's bigrams, as
the cache interpolates the bigram (λ chosen on the model's losses on the training text's end).  The
part of the SPEN–GPT gap it closes, per class, is what a free copy mechanism buys each model.

``window_losses`` is the fast path (sorts, no Python loop over tokens); ``window_losses_reference`` the
loops it is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ema_core.lm.token_classes import TrainCounts, partition_codes, partition_sums

BASELINES = ("bigram", "cache", "kn_trigram")  # fitted on the training split alone
COPY_MIX = "copy_mix"  # a trained model with the window's bigrams mixed in
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
        t = _training_ids(tokens, vocab, 2, "bigram")
        codes, counts = np.unique(t[:-1] * vocab + t[1:], return_counts=True)
        discount = _discount(counts)
        unigram = (np.bincount(t, minlength=vocab) + 1.0) / (t.size + vocab)
        return cls(vocab=vocab, codes=codes, counts=counts, context=np.bincount(t[:-1], minlength=vocab),
                   types=np.bincount(codes // vocab, minlength=vocab), unigram=unigram, discount=discount)

    def prob(self, prev, nxt) -> np.ndarray:
        """P(nxt | prev), elementwise over arrays of ids; > 0 everywhere (the unigram is add-one)."""
        p, y = np.asarray(prev, dtype=np.int64), np.asarray(nxt, dtype=np.int64)
        pair = _lookup(self.codes, self.counts, p * self.vocab + y)
        ctx = self.context[p]
        seen = ctx > 0
        safe = np.where(seen, ctx, 1)
        interp = np.maximum(pair - self.discount, 0.0) / safe + self.discount * self.types[p] / safe * self.unigram[y]
        return np.where(seen, interp, self.unigram[y])


def _training_ids(tokens, vocab: int, n: int, model: str) -> np.ndarray:
    """The training ids as one int64 array, refused where too few for one ``n``-gram or outside [0, vocab)."""
    t = np.asarray(tokens, dtype=np.int64).ravel()
    if t.size < n:
        raise ValueError(f"a {model} needs at least {n} training tokens, got {t.size}")
    if t.min() < 0 or t.max() >= vocab:
        raise ValueError(f"token ids must lie in [0, {vocab}), got [{t.min()}, {t.max()}]")
    return t


def _discount(counts: np.ndarray) -> float:
    """Ney's absolute discount n1 / (n1 + 2·n2) of a set of counts (0.5 where neither occurs)."""
    n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
    return n1 / (n1 + 2 * n2) if n1 + n2 else 0.5


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[k] where keys[k] == query (keys sorted), 0 where a query is not among the keys."""
    if not keys.size:
        return np.zeros(np.shape(query), dtype=values.dtype)
    at = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    return np.where(keys[at] == query, values[at], 0)


@dataclass(frozen=True)
class KneserNey:
    """An interpolated Kneser–Ney trigram of a token stream (ids in [0, vocab)).

    With N(·x) counting the distinct tokens seen before x (continuation counts) and D_k each order's discount:
      P1(w)       = max(N(·w) − D1, 0) / N(··) + D1·|{w : N(·w) > 0}| / N(··) · 1/V
      P2(w | v)   = max(N(·vw) − D2, 0) / N(·v·) + D2·|{w : N(·vw) > 0}| / N(·v·) · P1(w)     (P1 if N(·v·) = 0)
      P3(w | u v) = max(c(uvw) − D3, 0) / c(uv·) + D3·|{w : c(uvw) > 0}| / c(uv·) · P2(w | v) (P2 if c(uv·) = 0)
    Every count comes from the stream's trigrams, so each level sums to 1 over the vocabulary.
    """

    vocab: int
    tri: np.ndarray         # sorted distinct trigram codes (u·V + v)·V + w
    tri_counts: np.ndarray  # c(uvw)
    ctx: np.ndarray         # sorted distinct context codes u·V + v
    ctx_total: np.ndarray   # c(uv·)
    ctx_types: np.ndarray   # |{w : c(uvw) > 0}|
    mid: np.ndarray         # sorted distinct bigram codes v·V + w (the trigrams' last two tokens)
    mid_cont: np.ndarray    # N(·vw)
    mid_total: np.ndarray   # (V,) N(·v·)
    mid_types: np.ndarray   # (V,) |{w : N(·vw) > 0}|
    uni: np.ndarray         # (V,) P1
    discounts: tuple[float, float, float]  # D1, D2, D3

    @classmethod
    def fit(cls, tokens, vocab: int) -> "KneserNey":
        t = _training_ids(tokens, vocab, 3, "trigram")
        if vocab >= 2 ** 21:
            raise ValueError(f"a vocabulary of {vocab} ids overflows the trigram codes (at most {2 ** 21 - 1})")
        tri, tri_counts = np.unique((t[:-2] * vocab + t[1:-1]) * vocab + t[2:], return_counts=True)
        ctx, first = np.unique(tri // vocab, return_index=True)  # tri is sorted: each context's run is contiguous
        ctx_total = np.add.reduceat(tri_counts, first)
        ctx_types = np.diff(np.append(first, tri.size))
        mid, mid_cont = np.unique(tri % (vocab * vocab), return_counts=True)  # N(·vw): one per distinct u
        mid_total = np.bincount(mid // vocab, weights=mid_cont, minlength=vocab)
        mid_types = np.bincount(mid // vocab, minlength=vocab)
        uni_cont = np.bincount(mid % vocab, minlength=vocab)  # N(·w): distinct v before w
        d1, d2, d3 = _discount(uni_cont), _discount(mid_cont), _discount(tri_counts)
        total = uni_cont.sum()
        uni = np.maximum(uni_cont - d1, 0) / total + d1 * np.count_nonzero(uni_cont) / total / vocab
        return cls(vocab, tri, tri_counts, ctx, ctx_total, ctx_types, mid, mid_cont, mid_total, mid_types, uni,
                   (d1, d2, d3))

    def prob(self, u, v, w) -> np.ndarray:
        """P(w | u v), elementwise over arrays of ids; u < 0 marks no token two back (the middle order)."""
        u, v, w = (np.asarray(a, dtype=np.int64) for a in (u, v, w))
        V, (_, d2, d3) = self.vocab, self.discounts
        n_v = self.mid_total[v]
        p2 = np.where(n_v > 0, (np.maximum(_lookup(self.mid, self.mid_cont, v * V + w) - d2, 0)
                                + d2 * self.mid_types[v] * self.uni[w]) / np.maximum(n_v, 1), self.uni[w])
        context = np.maximum(u, 0) * V + v
        c_uv = np.where(u >= 0, _lookup(self.ctx, self.ctx_total, context), 0)
        c_uvw = _lookup(self.tri, self.tri_counts, context * V + w)
        types = _lookup(self.ctx, self.ctx_types, context)
        p3 = (np.maximum(c_uvw - d3, 0) + d3 * types * p2) / np.maximum(c_uv, 1)
        return np.where(c_uv > 0, p3, p2)

    def window_losses(self, windows) -> np.ndarray:
        """(B, T) losses in nats of the targets of (B, T + 1) windows, each window's context starting empty."""
        w = np.asarray(windows, dtype=np.int64)
        two_back = np.concatenate([np.full((w.shape[0], 1), -1), w[:, :-2]], axis=1)
        return -np.log(self.prob(two_back, w[:, :-1], w[:, 1:]))


def kneser_ney_reference(tokens, vocab: int):
    """P(w | u, v) of the interpolated Kneser–Ney trigram by dictionaries and loops (u None: no token two
    back), for tests of :class:`KneserNey`."""
    t = [int(x) for x in tokens]
    c3: dict[tuple, int] = {}
    for a, b, c in zip(t, t[1:], t[2:]):
        c3[(a, b, c)] = c3.get((a, b, c), 0) + 1
    cont2: dict[tuple, set] = {}
    for (a, b, c) in c3:
        cont2.setdefault((b, c), set()).add(a)
    cont1: dict[int, set] = {}
    for (b, c) in cont2:
        cont1.setdefault(c, set()).add(b)

    def disc(counts) -> float:
        counts = list(counts)
        n1, n2 = counts.count(1), counts.count(2)
        return n1 / (n1 + 2 * n2) if n1 + n2 else 0.5

    d3 = disc(c3.values())
    d2 = disc(len(s) for s in cont2.values())
    d1 = disc(len(s) for s in cont1.values())
    n_all = sum(len(s) for s in cont1.values())

    def p1(w):
        n = len(cont1.get(w, ()))
        return max(n - d1, 0) / n_all + d1 * len(cont1) / n_all / vocab

    def p2(v, w):
        n_v = sum(len(s) for (b, _), s in cont2.items() if b == v)
        if n_v == 0:
            return p1(w)
        types = sum(1 for (b, _) in cont2 if b == v)
        return max(len(cont2.get((v, w), ())) - d2, 0) / n_v + d2 * types / n_v * p1(w)

    def p3(u, v, w):
        if u is None:
            return p2(v, w)
        c_uv = sum(n for (a, b, _), n in c3.items() if (a, b) == (u, v))
        if c_uv == 0:
            return p2(v, w)
        types = sum(1 for (a, b, _) in c3 if (a, b) == (u, v))
        return max(c3.get((u, v, w), 0) - d3, 0) / c_uv + d3 * types / c_uv * p2(v, w)

    return p3


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
    p = model.prob(w[:, :-1], w[:, 1:])
    if cache_weight is not None:
        p = mix_cache(p, w, cache_weight)
    return -np.log(p)


def mix_cache(prob, windows, cache_weight: float) -> np.ndarray:
    """(B, T) probabilities of the targets of (B, T + 1) windows with the window's own bigrams mixed in:
    ``(1 − λ)·prob + λ·c(p, y) / c(p)`` over the pairs before each target, ``prob`` where p is unseen."""
    w = np.asarray(windows, dtype=np.int64)
    p = np.asarray(prob, dtype=np.float64)
    if w.shape[1] < 2:
        return p
    prev, nxt = w[:, :-1], w[:, 1:]
    # target j sees pairs (w[i], w[i+1]) with i < j: the earlier occurrences of p, and of (p, y)
    seen_p = _count_before(prev)
    seen_py = _count_before(prev * (int(w.max()) + 1) + nxt)
    ctx = np.where(seen_p > 0, seen_py / np.maximum(seen_p, 1), 0.0)
    return np.where(seen_p > 0, (1 - cache_weight) * p + cache_weight * ctx, p)


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


def baseline_evaluations(train, val, seq_len: int, max_tokens: int = 0, vocab: int | None = None,
                         counts: TrainCounts | None = None) -> dict[str, dict]:
    """``{baseline: {"loss", "tokens", "cache_weight", <split key>: class sums, ...}}`` on the held-out windows
    ``evaluate`` scores with these ``seq_len`` and ``max_tokens``; class sums as its, under every split.
    ``counts``: the training split's, when the caller holds them already (``Streams.counts``)."""
    train, val = np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
    vocab = vocab or int(max(train.max(), val.max())) + 1
    windows = eval_windows(val, seq_len, max_tokens)
    # The models' partitions read the whole training split; the fits, its first MAX_FIT_TOKENS.
    codes = partition_codes(windows, counts if counts is not None else TrainCounts.of(train, vocab))
    fit = train[:MAX_FIT_TOKENS]
    bigram = Bigram.fit(fit, vocab)
    lam = choose_cache_weight(fit, vocab, seq_len)
    losses = {"bigram": (window_losses(bigram, windows), None),
              "cache": (window_losses(bigram, windows, lam), lam),
              "kn_trigram": (KneserNey.fit(fit, vocab).window_losses(windows), None)}
    return {name: _evaluation(l, codes, lam) for name, (l, lam) in losses.items()}


def _evaluation(losses: np.ndarray, codes: dict[str, np.ndarray], cache_weight: float | None) -> dict:
    flat = np.asarray(losses).ravel()
    return {"loss": float(flat.mean()), "tokens": int(flat.size), "cache_weight": cache_weight,
            **partition_sums(flat, {k: c.ravel() for k, c in codes.items()})}


def copy_mix_evaluation(dev_losses, dev_windows, losses, windows, counts: TrainCounts | None) -> dict:
    """A trained model with the window's bigrams mixed in (:func:`mix_cache`), as a baseline's evaluation on
    the held-out ``windows`` its ``losses`` were scored on; λ is the one of ``CACHE_WEIGHTS`` with the lowest
    mixed loss on ``dev_windows`` of training text (the model's ``dev_losses`` there; ties: the smaller)."""
    dev_p = np.exp(-np.asarray(dev_losses, dtype=np.float64))
    dev = [float(-np.log(mix_cache(dev_p, dev_windows, lam)).mean()) for lam in CACHE_WEIGHTS]
    lam = CACHE_WEIGHTS[int(np.argmin(dev))]
    mixed = -np.log(mix_cache(np.exp(-np.asarray(losses, dtype=np.float64)), windows, lam))
    return _evaluation(mixed, partition_codes(windows, counts), lam)
