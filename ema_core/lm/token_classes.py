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

Two more partitions split the recall tokens along a second axis, each with one class for the rest
(``not_recall``), so that every partition's classes add up to the whole loss
    ``recall_by_bigram_count``  zoology's other axis: how often the bigram (p, y) occurs in the training
                                split, 0, 1–9 or ≥ 10 times (``BIGRAM_COUNT_EDGES``).  A recall token whose
                                bigram is common needs no memory of the window to be predicted.
    ``recall_by_position``      the distance buckets again, each within bins of the target's position
                                (tokens of context seen, j + 1; ``POSITION_EDGES``), so that a far and a
                                near recall can be compared at the same positions: a recall 65–256 back
                                exists only past position 65, where loss is lower anyway.

``classify`` is the fast path (sorts, no Python loop over tokens); ``classify_reference`` the loops
it is tested against; likewise ``partition_codes`` and ``partition_reference``.  ``SPLITS`` names every
partition once: the key an evaluation reports it under, the store's ``partition`` column, its classes.
"""
from __future__ import annotations

from dataclasses import dataclass

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
RECALL = CLASSES[: len(RECALL_EDGES) + 1]  # every distance bucket, nearest first
NOT_RECALL = "not_recall"  # first and other: the rest of a recall partition

# Upper edges of the training-count buckets of a recall bigram; the last bucket is open-ended.
BIGRAM_COUNT_EDGES = (0, 9)
# Upper edges of the position bins (j + 1, the tokens of context a target is predicted from).
POSITION_EDGES = (16, 64, 128, 256, 512)


def _ranges(edges: tuple[int, ...], first: int) -> tuple[str, ...]:
    """``("0", "1_9", "10_plus")`` for edges (0, 9) from 0: each bucket's bounds, as the class names spell them."""
    lows = (first,) + tuple(e + 1 for e in edges)
    return tuple(f"{lo}" if lo == hi else f"{lo}_{hi}" for lo, hi in zip(lows, edges)) + (f"{edges[-1] + 1}_plus",)


BIGRAM_COUNT_CLASSES = tuple(f"recall_bigram_{r}" for r in _ranges(BIGRAM_COUNT_EDGES, 0)) + (NOT_RECALL,)
_POSITION_BINS = _ranges(POSITION_EDGES, 1)
_POSITION_LOWS = (1,) + tuple(e + 1 for e in POSITION_EDGES)
_DISTANCE_LOWS = (1,) + tuple(e + 1 for e in RECALL_EDGES)
# A recall at distance d has a previous occurrence d tokens back, so its position is at least d + 1:
# only the (bucket, bin) pairs that can hold a token are classes.
_POSITION_PAIRS = tuple((b, q) for b in range(len(RECALL)) for q in range(len(_POSITION_BINS))
                        if q == len(POSITION_EDGES) or _DISTANCE_LOWS[b] + 1 <= POSITION_EDGES[q])
POSITION_CLASSES = tuple(f"{RECALL[b]}_at_{_POSITION_BINS[q]}" for b, q in _POSITION_PAIRS) + (NOT_RECALL,)


def position_classes(buckets: tuple[str, ...], from_position: int) -> tuple[str, ...]:
    """The classes of ``recall_by_position`` of these distance buckets in the bins from ``from_position`` on
    (which must start a bin): the pool a position-matched comparison reads."""
    if from_position not in _POSITION_LOWS:
        raise ValueError(f"{from_position} starts no position bin (bins start at {_POSITION_LOWS})")
    first = _POSITION_LOWS.index(from_position)
    return tuple(f"{RECALL[b]}_at_{_POSITION_BINS[q]}" for b, q in _POSITION_PAIRS
                 if RECALL[b] in buckets and q >= first)

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


@dataclass(frozen=True)
class Split:
    """One partition of the held-out loss: ``evaluate``'s key for it, the store's name, its classes."""

    key: str                  # the key of an evaluation and of a run's summary ("token_classes")
    partition: str            # the ``partition`` column of the store's class rows ("class")
    classes: tuple[str, ...]  # in their order; they cover every target exactly once
    label: str                # how a page names it
    needs_train: bool         # read from the training split (left out where there is none)


SPLITS = (
    Split("token_classes", "class", CLASSES, "token class", False),
    Split("token_bands", "band", BANDS, "training-frequency band", True),
    Split("recall_by_bigram_count", "recall_by_bigram_count", BIGRAM_COUNT_CLASSES,
          "recall by training-bigram count", True),
    Split("recall_by_position", "recall_by_position", POSITION_CLASSES, "recall distance at matched positions", False),
)


@dataclass(frozen=True)
class TrainCounts:
    """What the partitions read from the training split: each id's frequency band and each bigram's count."""

    vocab: int             # ids below it: every id of the training and the held-out text
    bands: np.ndarray      # (vocab,) indices into BANDS
    bigrams: np.ndarray    # sorted distinct codes p·vocab + y of the training bigrams
    counts: np.ndarray     # their counts

    @classmethod
    def of(cls, train, vocab: int) -> "TrainCounts":
        t = np.asarray(train, dtype=np.int64).ravel()
        if t.size and (t.min() < 0 or t.max() >= vocab):
            raise ValueError(f"training token ids must lie in [0, {vocab}), got [{t.min()}, {t.max()}]")
        if vocab >= _MAX_ID:
            raise ValueError(f"a vocabulary of {vocab} ids overflows the bigram codes (at most {_MAX_ID - 1})")
        bigrams, counts = np.unique(t[:-1] * vocab + t[1:], return_counts=True)
        return cls(vocab, frequency_bands(t, vocab), bigrams, counts)

    def bigram_count(self, prev, nxt) -> np.ndarray:
        """How often each bigram (prev, nxt) occurs in the training split, elementwise."""
        code = np.asarray(prev, dtype=np.int64) * self.vocab + np.asarray(nxt, dtype=np.int64)
        if not self.bigrams.size:
            return np.zeros(code.shape, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.bigrams, code), self.bigrams.size - 1)
        return np.where(self.bigrams[at] == code, self.counts[at], 0)


# (distance bucket, position bin) -> index into POSITION_CLASSES; −1 where no token can fall.
_POSITION_CODE = np.full((len(RECALL), len(POSITION_EDGES) + 1), -1, dtype=np.int64)
for _c, (_b, _q) in enumerate(_POSITION_PAIRS):
    _POSITION_CODE[_b, _q] = _c


def partition_codes(windows, counts: TrainCounts | None = None) -> dict[str, np.ndarray]:
    """``{split key: (B, T) indices into its classes}`` for (B, T + 1) windows, every split of ``SPLITS``
    (those that read the training split only with ``counts``)."""
    w = np.asarray(windows)
    classes = classify(w)
    out = {"token_classes": classes}
    recall = classes < len(RECALL)
    position = np.searchsorted(POSITION_EDGES, np.arange(1, w.shape[1]), side="left")  # (T,) bin of j + 1
    pos = np.full(classes.shape, len(POSITION_CLASSES) - 1, dtype=np.uint8)
    pos[recall] = _POSITION_CODE[classes[recall], np.broadcast_to(position, classes.shape)[recall]]
    out["recall_by_position"] = pos
    if counts is not None:
        nxt = w[:, 1:]
        if w.size and w.max() >= counts.vocab:
            raise ValueError(f"token id {w.max()} is outside the training counts' vocabulary of {counts.vocab}")
        out["token_bands"] = counts.bands[nxt]
        bucket = np.searchsorted(BIGRAM_COUNT_EDGES, counts.bigram_count(w[:, :-1], nxt), side="left")
        out["recall_by_bigram_count"] = np.where(recall, bucket, len(BIGRAM_COUNT_CLASSES) - 1).astype(np.uint8)
    return {s.key: out[s.key] for s in SPLITS if s.key in out}


def partition_reference(window, train=None) -> dict[str, list[str]]:
    """The class name of every target of one window in every split, by the definitions' own loops."""
    w = [int(t) for t in window]
    names = classify_reference(w)
    out = {"token_classes": names}
    position = []
    for j, name in enumerate(names):
        if name not in RECALL:
            position.append(NOT_RECALL)
            continue
        at = next((i for i, e in enumerate(POSITION_EDGES) if j + 1 <= e), len(POSITION_EDGES))
        position.append(f"{name}_at_{_POSITION_BINS[at]}")
    out["recall_by_position"] = position
    if train is not None:
        t = [int(x) for x in train]
        pairs: dict[tuple[int, int], int] = {}
        for a, b in zip(t, t[1:]):
            pairs[(a, b)] = pairs.get((a, b), 0) + 1
        vocab = max(t + w) + 1
        band = frequency_bands(t, vocab)
        out["token_bands"] = [BANDS[band[y]] for y in w[1:]]
        counted = []
        for j, name in enumerate(names):
            n = pairs.get((w[j], w[j + 1]), 0)
            bucket = 0 if n == 0 else (1 if n <= 9 else 2)
            counted.append(BIGRAM_COUNT_CLASSES[bucket] if name in RECALL else NOT_RECALL)
        out["recall_by_bigram_count"] = counted
    return {s.key: out[s.key] for s in SPLITS if s.key in out}


def partition_sums(losses, codes: dict[str, np.ndarray]) -> dict[str, dict[str, dict]]:
    """``{split key: class_sums}`` of per-target ``losses`` under each split's codes."""
    by_key = {s.key: s for s in SPLITS}
    return {key: class_sums(losses, c, by_key[key].classes) for key, c in codes.items()}
