"""Token classes of the held-out loss: recall by distance, first sight, frequency bands, and evaluate's split."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ema_core.lm import token_classes as tc
from ema_core.lm.sizes import ModelChoice, build_model
from ema_core.lm.token_classes import (BANDS, BIGRAM_COUNT_CLASSES, CLASSES, POSITION_CLASSES, RECALL_EDGES, SPLITS,
                                       TrainCounts, class_sums, classify, classify_reference, frequency_bands,
                                       partition_codes, partition_reference, position_classes)
from ema_core.lm.train import Streams, evaluate

# The lm tests' small model and their one-thread fixture (autouse: imported, it applies here too).
from test_lm_train import SMALL, V, _one_thread  # noqa: F401


def _names(window) -> list[str]:
    return [CLASSES[c] for c in classify(np.asarray(window)[None])[0]]


def test_class_names_follow_the_edges():
    assert RECALL_EDGES == (16, 64, 256)
    assert CLASSES == ("recall_1_16", "recall_17_64", "recall_65_256", "recall_257_plus", "first", "other")


@pytest.mark.parametrize("window, expected", [
    # j=0 (5→7): 7 unseen; j=1 (7→5): 5 seen, bigram new; j=2 (5→7): bigram at i=0, distance 2;
    # j=3 (7→9): unseen; j=4 (9→5): seen; j=5 (5→7): nearest earlier at i=2, distance 3.
    ([5, 7, 5, 7, 9, 5, 7], ["first", "other", "recall_1_16", "first", "other", "recall_1_16"]),
    ([3, 3, 3, 3], ["other", "recall_1_16", "recall_1_16"]),  # (3, 3) at i = j − 1 from j = 1 on
    ([4, 4], ["other"]),  # T = 1: y is the context's only token, no earlier bigram
    ([4, 2], ["first"]),
    ([1, 2, 1, 3, 1, 2], ["first", "other", "first", "other", "recall_1_16"]),  # nearest (1, 2) is i=0: 4
], ids=["mixed", "all-equal", "T1-seen", "T1-new", "skip-other-follower"])
def test_hand_made_windows(window, expected):
    assert classify_reference(window) == expected
    assert _names(window) == expected


@pytest.mark.parametrize("d, bucket", [(2, "recall_1_16"), (16, "recall_1_16"), (17, "recall_17_64"),
                                       (64, "recall_17_64"), (65, "recall_65_256"), (256, "recall_65_256"),
                                       (257, "recall_257_plus"), (600, "recall_257_plus")])
def test_recall_buckets_at_their_edges(d, bucket):
    # (1, 2) at 0 and again at d, distinct fillers between: every filler and the first 2 are new,
    # the 1 after the last filler was seen (after another token), and target d recalls at distance d.
    window = [1, 2] + list(range(100, 100 + d - 2)) + [1, 2]
    expected = ["first"] * (d - 1) + ["other", bucket]
    assert classify_reference(window) == expected
    assert _names(window) == expected


@pytest.mark.parametrize("vocab, T, B", [(1, 5, 3), (2, 1, 50), (2, 9, 40), (3, 64, 20), (5, 300, 4),
                                         (40, 700, 2), (500, 200, 3)])
def test_fast_path_matches_the_reference_on_random_windows(vocab, T, B):
    rng = np.random.default_rng(vocab * 1000 + T)
    windows = rng.integers(0, vocab, (B, T + 1))
    windows[0] = windows[0, 0]  # one all-equal window in every batch
    codes = classify(windows)
    assert codes.shape == (B, T) and codes.dtype == np.uint8
    for w, c in zip(windows, codes):
        assert [CLASSES[k] for k in c] == classify_reference(w)


def test_random_windows_reach_every_class():
    # The chained test above is only as good as the classes it meets: all six occur there.
    rng = np.random.default_rng(0)
    seen = set()
    for vocab, T in ((2, 9), (3, 64), (5, 300), (40, 700)):
        seen |= set(np.unique(classify(rng.integers(0, vocab, (4, T + 1)))))
    assert seen == set(range(len(CLASSES)))


def test_classify_is_the_same_for_any_id_dtype_and_any_block_size(monkeypatch):
    rng = np.random.default_rng(1)
    windows = rng.integers(0, 30, (9, 129))
    codes = classify(windows)
    assert np.array_equal(classify(windows.astype(np.uint16)), codes)
    assert np.array_equal(classify(windows.astype(np.int32) + 2_000_000_000 - 30), codes)  # ids near the cap
    monkeypatch.setattr(tc, "_BLOCK_TOKENS", 300)  # two rows per pass
    assert np.array_equal(classify(windows), codes)


def test_classify_edge_shapes_and_bad_input():
    assert classify(np.zeros((0, 5), int)).shape == (0, 4)
    assert classify(np.zeros((3, 1), int)).shape == (3, 0)
    for bad in (np.zeros(5, int), np.zeros((2, 0), int), np.zeros((2, 3)), np.array([[0, -1]])):
        with pytest.raises(ValueError):
            classify(bad)


def test_frequency_bands_on_a_hand_made_stream():
    # Counts: id 2 ×5, id 0 ×3, ids 1 and 3 ×1 (the tie goes to the lower id), ids 4 and 5 never.
    # Coverage ahead of each, ranked 2, 0, 1, 3, 4, 5: 0, 5, 8, 9, 10, 10 of 10 tokens. Id 2 starts
    # before the 50 % cut, 0 and 1 before the 90 % cut; 3 starts exactly on it, so it is rare.
    stream = np.array([2, 0, 2, 1, 2, 0, 3, 2, 0, 2])
    assert [BANDS[b] for b in frequency_bands(stream, 6)] == ["middle", "middle", "frequent", "rare", "rare", "rare"]
    # A type that straddles the first cut is frequent; the next one starts at 60 %: middle.
    assert [BANDS[b] for b in frequency_bands(np.array([7] * 6 + [1] * 4, np.uint16), 8)] == \
        ["rare", "middle", "rare", "rare", "rare", "rare", "rare", "frequent"]
    assert set(frequency_bands(np.zeros(0, int), 4)) == {BANDS.index("rare")}  # nothing seen: all rare
    with pytest.raises(ValueError, match="outside a vocabulary"):
        frequency_bands(np.array([0, 9]), 4)


def test_class_sums_cover_every_class_and_add_up():
    rng = np.random.default_rng(2)
    losses = rng.random(10_000).astype(np.float32) * 5
    codes = rng.choice([0, 2, 4], size=10_000).astype(np.uint8)  # classes 1, 3 and 5 never occur
    sums = class_sums(losses, codes)
    assert list(sums) == list(CLASSES)
    assert sums["recall_17_64"] == {"tokens": 0, "loss": 0.0}
    assert sum(s["tokens"] for s in sums.values()) == losses.size
    assert sum(s["loss"] for s in sums.values()) == pytest.approx(losses.astype(np.float64).sum(), rel=1e-12)
    assert sums["first"]["loss"] == pytest.approx(losses[codes == 4].astype(np.float64).sum(), rel=1e-12)
    assert list(class_sums([1.0], [2], BANDS)) == list(BANDS)
    with pytest.raises(ValueError):
        class_sums([1.0, 2.0], [0])
    with pytest.raises(ValueError):
        class_sums([1.0], [len(BANDS)], BANDS)


class _Unigram(torch.nn.Module):
    """Fixed logits at every position, so each target's loss depends on its id alone."""

    def __init__(self, seed=0):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(V, generator=torch.Generator().manual_seed(seed)))

    def forward(self, idx):
        return self.bias.expand(*idx.shape, V)


def _streams(n_val=1 + 32 * 20, seed=0, train=True) -> Streams:
    rng = np.random.default_rng(seed)
    # A small alphabet spread over the vocabulary in the held-out text, so bigrams repeat within a
    # window; a skewed training text, so its targets fall in all three bands.
    val = rng.integers(0, 12, n_val) * 5
    tr = np.minimum(rng.zipf(1.3, 5_000) - 1, V - 1) if train else np.zeros(0, np.int64)
    return Streams(train=tr, val=val, val_bytes=lambda ids: 3 * len(ids))


def test_evaluate_splits_the_loss_by_class_and_band_exactly():
    s, seq_len = _streams(), 32
    model = _Unigram()
    ev = evaluate(model, s, seq_len, batch=16, token_classes=True)  # 20 windows: two batches
    nll = -torch.log_softmax(model.bias.detach().double(), -1).numpy()
    windows = np.stack([s.val[w * seq_len: w * seq_len + seq_len + 1] for w in range(20)])
    targets = windows[:, 1:].ravel()
    names = np.array([n for w in windows for n in classify_reference(w)])
    for name in CLASSES:
        assert ev["token_classes"][name]["tokens"] == int(np.sum(names == name))
        assert ev["token_classes"][name]["loss"] == pytest.approx(nll[targets[names == name]].sum(), rel=1e-6, abs=1e-9)
    bands = frequency_bands(s.train, V)[targets]
    assert set(bands) == {0, 1, 2}
    for b, name in enumerate(BANDS):
        assert ev["token_bands"][name]["loss"] == pytest.approx(nll[targets[bands == b]].sum(), rel=1e-6, abs=1e-9)


def test_evaluate_with_classes_keeps_the_loss_and_adds_up_to_it():
    model = build_model(ModelChoice(model="spen"), vocab_size=V, seq_len=64, seed=0, **SMALL)
    s = _streams()
    plain = evaluate(model, s, 32)
    split = evaluate(model, s, 32, token_classes=True)
    assert set(plain) == {"loss", "ppl", "bpb", "tokens", "bytes"}
    assert set(split) == set(plain) | {s.key for s in SPLITS}
    assert split["loss"] == pytest.approx(plain["loss"], rel=1e-9)
    assert {k: split[k] for k in plain} == pytest.approx(plain, rel=1e-9)
    for key in (s.key for s in SPLITS):
        parts = split[key].values()
        assert sum(p["tokens"] for p in parts) == split["tokens"]
        assert sum(p["loss"] for p in parts) / split["tokens"] == pytest.approx(split["loss"], rel=1e-6)


def test_evaluate_without_training_tokens_has_no_bands():
    ev = evaluate(_Unigram(), _streams(train=False), 32, max_tokens=64, token_classes=True)
    assert "token_bands" not in ev and "recall_by_bigram_count" not in ev
    assert sum(p["tokens"] for p in ev["recall_by_position"].values()) == 64
    assert sum(p["tokens"] for p in ev["token_classes"].values()) == ev["tokens"] == 64
    assert sum(p["loss"] for p in ev["token_classes"].values()) / 64 == pytest.approx(ev["loss"], rel=1e-6)
    assert math.isfinite(ev["loss"])


def test_the_recall_partitions_name_their_buckets():
    assert BIGRAM_COUNT_CLASSES == ("recall_bigram_0", "recall_bigram_1_9", "recall_bigram_10_plus", "not_recall")
    # a bucket appears only in the position bins that can hold it: d back needs position ≥ d + 1
    assert "recall_17_64_at_1_16" not in POSITION_CLASSES and "recall_17_64_at_17_64" in POSITION_CLASSES
    assert "recall_257_plus_at_129_256" not in POSITION_CLASSES and POSITION_CLASSES[-1] == "not_recall"
    assert position_classes(("recall_1_16",), 65) == ("recall_1_16_at_65_128", "recall_1_16_at_129_256",
                                                      "recall_1_16_at_257_512", "recall_1_16_at_513_plus")
    with pytest.raises(ValueError, match="starts no position bin"):
        position_classes(("recall_1_16",), 66)
    assert [s.key for s in SPLITS][:2] == ["token_classes", "token_bands"]


def test_hand_made_window_in_every_partition():
    train = [3, 4] * 12 + [5, 6]  # (3, 4) twelve times, (5, 6) once, (7, 8) never
    window = [3, 4, 9, 5, 6, 9, 3, 4, 5, 6, 9, 7, 8, 9, 7, 8]
    ref = partition_reference(window, train)
    assert [ref["token_classes"][j] for j in (6, 8, 14)] == ["recall_1_16"] * 3  # 6, 5 and 3 back
    assert ref["recall_by_bigram_count"][6] == "recall_bigram_10_plus"
    assert ref["recall_by_bigram_count"][8] == "recall_bigram_1_9"
    assert ref["recall_by_bigram_count"][14] == "recall_bigram_0"
    assert ref["token_classes"][5] == "other" and ref["recall_by_bigram_count"][5] == "not_recall"
    assert ref["recall_by_position"][14] == "recall_1_16_at_1_16" and ref["recall_by_position"][5] == "not_recall"
    codes = partition_codes(np.array([window]), TrainCounts.of(train, 10))
    for s in SPLITS:
        assert [s.classes[c] for c in codes[s.key][0]] == ref[s.key]


@pytest.mark.parametrize("vocab,T", [(3, 40), (8, 700), (40, 300)])
def test_partitions_match_the_loops_on_random_windows(vocab, T):
    rng = np.random.default_rng(vocab * T)
    train = rng.integers(0, vocab, 3_000) if vocab < 40 else np.minimum(rng.zipf(1.3, 3_000) - 1, vocab - 1)
    windows = rng.integers(0, vocab, (3, T + 1))
    codes = partition_codes(windows, TrainCounts.of(train, vocab))
    for b in range(3):
        ref = partition_reference(windows[b], train)
        for s in SPLITS:
            assert [s.classes[c] for c in codes[s.key][b]] == ref[s.key], s.key
    without = partition_codes(windows)
    assert set(without) == {s.key for s in SPLITS if not s.needs_train}


def test_every_recall_partition_class_is_reached():
    rng = np.random.default_rng(3)
    train = np.concatenate([np.tile([0, 1], 20), rng.integers(0, 4, 200)])
    windows = rng.integers(0, 6, (8, 1200))
    codes = partition_codes(windows, TrainCounts.of(train, 6))
    for key, names in (("recall_by_bigram_count", BIGRAM_COUNT_CLASSES), ("recall_by_position", POSITION_CLASSES)):
        assert set(np.unique(codes[key])) == set(range(len(names))), key
