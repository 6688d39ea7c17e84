"""Which tokens a held-out loss lives on: associative-recall classes and training-frequency bands.

The anchor is zoology (Arora et al. 2023, arXiv 2312.04927): a token whose bigram was already seen
in the same context can be predicted by looking back (associative recall), and that is where
attention-free models fall behind attention.  Splitting the loss by class shows whether a gap
between SPEN and the GPT sits on those tokens or spreads over all of them.

Classes of a target (one window ``w`` of T + 1 tokens; target j = 0..T−1 predicts ``y = w[j+1]``
from ``w[0..j]``, after the previous token ``p = w[j]``)
    ``recall_<lo>_<hi>``  the bigram (p, y) occurred earlier in the window: w[i] = p, w[i+1] = y for
                          some i < j.  Bucketed by the distance j − i to the nearest such i:
                          1–16, 17–64, 65–256, 257 and more (``RECALL_EDGES``).
    ``first``             y occurs nowhere in w[0..j]: this window has not shown it yet.
    ``other``             the rest: y was seen, but never right after p.
    A recall target's y was seen (at i + 1 ≤ j), so recall and first never overlap.

Frequency bands of a token id (from the training split)
    ``frequent``  the most frequent types that together cover the first 50 % of training tokens;
    ``middle``    the next ones, up to 90 %; ``rare`` the rest, types never seen in training included.
    Types are ranked by count, ties by id; the type that straddles a cut belongs to the band it
    starts in (``BAND_CUTS_PERCENT``).

``classify`` is the fast path (sorts, no Python loop over tokens); ``classify_reference`` the loops
it is tested against.
"""
from __future__ import annotations

import numpy as np

# Upper edges of the recall buckets, in tokens of distance; the last bucket is open-ended.
RECALL_EDGES = (16, 64, 256)
# Percent of training tokens covered at the end of the frequent and the middle band.
BAND_CUTS_PERCENT = (50, 90)

BANDS = ("frequent", "middle", "rare")


def _class_names() -> tuple[str, ...]:
    lows = (1,) + tuple(edge + 1 for edge in RECALL_EDGES[:-1])
    recall = tuple(f"recall_{lo}_{hi}" for lo, hi in zip(lows, RECALL_EDGES))
    return recall + (f"recall_{RECALL_EDGES[-1] + 1}_plus", "first", "other")


CLASSES = _class_names()
FIRST = CLASSES.index("first")
OTHER = CLASSES.index("other")

# Bigram codes are p·(max id + 1) + y in int64: ids below this keep the product from overflowing.
_MAX_ID = 3_000_000_000
# Rows classified per pass, in tokens: bounds the sort's scratch arrays (a few int64 per token).
_BLOCK_TOKENS = 1 << 20


def classify_reference(window) -> list[str]:
    """The class name of every target of one window, by the definitions' own loops (O(T²))."""
    w = [int(t) for t in window]
    out = []
    for j in range(len(w) - 1):
        p, y = w[j], w[j + 1]
        nearest = None
        for i in range(j):
            if w[i] == p and w[i + 1] == y:
                nearest = i
        if nearest is not None:
            out.append(_recall_name(j - nearest))
        elif y not in w[: j + 1]:
            out.append("first")
        else:
            out.append("other")
    return out


def _recall_name(distance: int) -> str:
    for name, edge in zip(CLASSES, RECALL_EDGES):
        if distance <= edge:
            return name
    return CLASSES[len(RECALL_EDGES)]


def classify(windows) -> np.ndarray:
    """(B, T) uint8 indices into ``CLASSES`` for a (B, T + 1) array of token ids (ids ≥ 0)."""
    w = np.asarray(windows)
    if w.ndim != 2 or w.shape[1] < 1:
        raise ValueError(f"windows must be (B, T + 1) with T ≥ 0, got shape {w.shape}")
    if not np.issubdtype(w.dtype, np.integer):
        raise ValueError(f"windows must hold integer token ids, got {w.dtype}")
    codes = np.full((w.shape[0], w.shape[1] - 1), OTHER, dtype=np.uint8)
    if codes.size == 0:
        return codes
    if w.min() < 0 or w.max() >= _MAX_ID:
        raise ValueError(f"token ids must lie in [0, {_MAX_ID}), got [{w.min()}, {w.max()}]")
    rows = max(1, _BLOCK_TOKENS // w.shape[1])
    for r0 in range(0, w.shape[0], rows):
        _classify_rows(w[r0: r0 + rows], codes[r0: r0 + rows])
    return codes


def _classify_rows(w: np.ndarray, codes: np.ndarray) -> None:
    # Target j is new exactly when w[j+1] is its token's first occurrence in the row.
    seen = _gap_to_previous(w)[:, 1:] > 0
    codes[~seen] = FIRST
    wide = w.astype(np.int64, copy=False)
    bigrams = wide[:, :-1] * (int(w.max()) + 1) + wide[:, 1:]  # (B, T): the bigram target j completes
    gap = _gap_to_previous(bigrams)
    recall = gap > 0
    codes[recall] = np.searchsorted(RECALL_EDGES, gap[recall], side="left")


def _gap_to_previous(x: np.ndarray) -> np.ndarray:
    """t − t' for the last t' < t in the same row with x[t'] == x[t]; 0 where there is none."""
    # A stable sort puts equal values in position order, so a value's previous occurrence is its
    # left neighbour in sorted order: O(T log T) per row whatever the vocabulary (a dense table of
    # bigrams would need V² entries, a hash map a loop per token).
    order = np.argsort(x, axis=1, kind="stable")
    ranked = np.take_along_axis(x, order, axis=1)
    gaps = np.where(ranked[:, 1:] == ranked[:, :-1], order[:, 1:] - order[:, :-1], 0)
    out = np.zeros(x.shape, dtype=np.int64)
    np.put_along_axis(out, order[:, 1:], gaps, axis=1)
    return out


def frequency_bands(train_tokens, vocab_size: int) -> np.ndarray:
    """(vocab_size,) uint8 indices into ``BANDS``: each token id's band by its training frequency."""
    tokens = np.asarray(train_tokens).ravel()
    counts = np.bincount(tokens, minlength=vocab_size)
    if counts.size > vocab_size:
        raise ValueError(f"training token id {counts.size - 1} is outside a vocabulary of {vocab_size}")
    order = np.argsort(-counts, kind="stable")  # most frequent first, ties by id
    ranked = counts[order]
    before = np.cumsum(ranked) - ranked  # training tokens covered by the types ranked ahead
    # In integers, so that a cut landing exactly on a type's edge is decided exactly.
    band = np.full(vocab_size, len(BANDS) - 1, dtype=np.uint8)
    for code in reversed(range(len(BAND_CUTS_PERCENT))):
        band[100 * before < BAND_CUTS_PERCENT[code] * tokens.size] = code
    out = np.empty(vocab_size, dtype=np.uint8)
    out[order] = band
    return out


def class_sums(losses, codes, names: tuple[str, ...] = CLASSES) -> dict[str, dict]:
    """``{name: {"tokens": n, "loss": Σ loss}}`` for every name (zeros included), sums in float64.

    Every name is present so that tables and comparisons across runs see the same keys whether or
    not a class turned up.  ``codes`` index ``names`` (``CLASSES`` by default, ``BANDS`` for bands).
    """
    losses = np.asarray(losses).ravel()
    codes = np.asarray(codes).ravel()
    if losses.shape != codes.shape:
        raise ValueError(f"{losses.size} losses for {codes.size} codes")
    if codes.size and (codes.min() < 0 or codes.max() >= len(names)):
        raise ValueError(f"codes must lie in [0, {len(names)})")
    codes = codes.astype(np.intp, copy=False)
    tokens = np.bincount(codes, minlength=len(names))
    total = np.bincount(codes, weights=losses.astype(np.float64), minlength=len(names))
    return {name: {"tokens": int(tokens[c]), "loss": float(total[c])} for c, name in enumerate(names)}
