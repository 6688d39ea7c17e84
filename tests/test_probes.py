"""Linear probes on toy cases with known answers, and the control task."""
from __future__ import annotations

import numpy as np
import pytest

from ema_core.probes import accuracy_by_label, apply_control, context_keys, control_labels, fit_probe, window_features


def _linear_task(rng, n, p=20, classes=4):
    W = rng.standard_normal((p, classes))
    X = rng.standard_normal((n, p)) * rng.uniform(0.1, 10, p)  # uneven scales: standardising matters
    return X, (X / X.std(0)) @ W


@pytest.mark.parametrize("kind", ["ridge", "logistic"])
def test_probe_reads_a_linearly_decodable_label(kind):
    rng = np.random.default_rng(0)
    X, scores = _linear_task(rng, 3000)
    y = scores.argmax(1)
    probe = fit_probe(X[:2000], y[:2000], X[2000:2500], y[2000:2500], kind=kind)
    assert (probe.predict(X[2500:]) == y[2500:]).mean() > 0.9
    assert probe.reg in probe.dev_accuracy and probe.dev_accuracy[probe.reg] == max(probe.dev_accuracy.values())


@pytest.mark.parametrize("kind", ["ridge", "logistic"])
def test_probe_cannot_read_what_is_not_there(kind):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 20))
    y = rng.integers(0, 4, 3000)  # independent of X
    probe = fit_probe(X[:2000], y[:2000], X[2000:2500], y[2000:2500], kind=kind)
    assert abs((probe.predict(X[2500:]) == y[2500:]).mean() - 0.25) < 0.08


def test_regularisation_is_chosen_on_dev_and_ties_go_to_the_stronger_penalty():
    rng = np.random.default_rng(2)
    X, scores = _linear_task(rng, 600, p=5)
    y = scores.argmax(1)
    probe = fit_probe(X[:400], y[:400], X[400:], y[400:], kind="ridge", grid=(1e-3, 1e-2))
    # Both tiny penalties fit this easy task the same way on dev: the stronger one is kept.
    if probe.dev_accuracy[1e-3] == probe.dev_accuracy[1e-2]:
        assert probe.reg == 1e-2
    huge = fit_probe(X[:400], y[:400], X[400:], y[400:], kind="ridge", grid=(1e9, 1.0))
    assert huge.reg == 1.0  # a penalty that flattens every weight loses on dev


def test_constant_features_do_not_break_standardisation():
    rng = np.random.default_rng(3)
    X = np.c_[rng.standard_normal((300, 3)), np.ones(300)]
    y = (X[:, 0] > 0).astype(int)
    probe = fit_probe(X[:200], y[:200], X[200:], y[200:])
    assert np.isfinite(probe._standardise(X)).all()


def test_bad_probe_input_is_named():
    X, y = np.zeros((10, 3)), np.zeros(10, dtype=int)
    with pytest.raises(ValueError, match="probe kind"):
        fit_probe(X, y, X, y, kind="mlp")
    with pytest.raises(ValueError, match="equal widths"):
        fit_probe(X, y, np.zeros((10, 4)), y)
    with pytest.raises(ValueError, match="rows and labels"):
        fit_probe(X, y[:5], X, y)
    with pytest.raises(ValueError, match="grid"):
        fit_probe(X, y, X, y, grid=(0.0,))


def test_accuracy_by_label_counts_per_label_and_skips_absent_ones():
    acc = accuracy_by_label(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 1, 0]), ["a", "b", "c"])
    assert acc == {"overall": pytest.approx(0.6), "a": pytest.approx(0.5), "b": pytest.approx(2 / 3)}


def test_control_task_gives_each_word_type_one_label_from_the_label_distribution():
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 200, 20_000)
    labels = rng.choice([0, 1, 2], size=20_000, p=[0.7, 0.2, 0.1])
    mapping = control_labels(tokens, labels, seed=9)
    assert set(mapping) == set(np.unique(tokens).tolist())
    ctrl = apply_control(tokens, mapping)
    for t in (0, 17, 199):
        assert len(set(ctrl[tokens == t].tolist())) == 1
    share = np.bincount(list(mapping.values()), minlength=3) / len(mapping)
    assert abs(share[0] - 0.7) < 0.12
    assert mapping == control_labels(tokens, labels, seed=9)  # a function of the seed
    with pytest.raises(ValueError, match="without a control label"):
        apply_control(np.array([5000]), mapping)


def test_window_features_one_hot_the_last_words_and_the_position():
    # two sentences: [3, 1, 7] and [9, 2]; id 7 and id 9 are unknown at n_words = 5
    tokens = np.array([3, 1, 7, 9, 2])
    position = np.array([0, 1, 2, 0, 1])
    X = window_features(tokens, position, window=2, n_words=5, n_positions=3)
    width = 5 + 2  # known words, unknown, before the sentence
    assert X.shape == (5, 2 * width + 3) and X.dtype == np.float32
    assert (X.sum(1) == 3).all()  # one column per slot, one for the position

    def lit(row):
        return [int(c) for c in np.flatnonzero(X[row])]

    unknown, before = 5, 6
    assert lit(0) == [3, width + before, 2 * width + 0]  # the first word: nothing before it
    assert lit(1) == [1, width + 3, 2 * width + 1]
    assert lit(2) == [unknown, width + 1, 2 * width + 2]  # an unseen id: the one unknown column
    assert lit(3) == [unknown, width + before, 2 * width + 0]  # the window never reaches the last sentence
    # positions past the last column share it
    far = window_features(np.array([0]), np.array([10]), window=1, n_words=5, n_positions=3)
    assert int(np.flatnonzero(far[0])[-1]) == width + 2
    with pytest.raises(ValueError, match="1-D of one length"):
        window_features(tokens, position[:3], window=1, n_words=5, n_positions=3)


def test_a_probe_on_the_window_never_learns_from_the_unknown_column():
    # Training rows never light the unknown column, so a novel word adds nothing of its own: its
    # prediction is the one of a row with only its context and position lit.
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 8, 2000)
    position = np.arange(2000) % 4
    y = (tokens + position) % 3
    X = window_features(tokens, position, window=1, n_words=8, n_positions=4)
    probe = fit_probe(X[:1500], y[:1500], X[1500:], y[1500:])
    unknown_col = 8
    assert np.allclose(probe.model.coef_[:, unknown_col], 0.0)


def test_context_keys_are_one_to_one_and_each_control_has_its_own_stream():
    tokens = np.array([0, 0, 1, 1, 146])
    ctx = np.array([0, 1, 0, 1, 10])
    keys = context_keys(tokens, ctx, 11)
    assert len(set(keys.tolist())) == 5 and keys[-1] == 146 * 11 + 10
    with pytest.raises(ValueError, match="context must lie"):
        context_keys(tokens, np.array([0, 0, 0, 0, 11]), 11)
    rng = np.random.default_rng(6)
    labels = rng.integers(0, 20, 5000)
    a = control_labels(np.arange(5000) % 500, labels, seed=1, types=np.arange(500))
    b = control_labels(np.arange(5000) % 500, labels, seed=1, types=np.arange(500), stream=0xC7A2)
    assert a == control_labels(np.arange(5000) % 500, labels, seed=1, types=np.arange(500), stream=0xC7A1)
    assert np.mean([a[t] == b[t] for t in range(500)]) < 0.3  # independent draws, not one shared map
