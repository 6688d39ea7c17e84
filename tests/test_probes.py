"""Linear probes on toy cases with known answers, and the control task."""
from __future__ import annotations

import numpy as np
import pytest

from ema_core.probes import accuracy_by_label, apply_control, control_labels, fit_probe


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
