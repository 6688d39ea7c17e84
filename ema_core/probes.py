"""Linear probes: how much of a label a representation makes linearly readable.

A probe is a linear classifier (scikit-learn) on standardised features, with its regularisation
strength chosen on a dev split: the probe is deliberately weak, so that what it reads is what the
representation holds (a strong probe would learn the task itself).  Two kinds:

* ``ridge`` (default): one-vs-rest least squares with an L2 penalty (``RidgeClassifier``), solved
  in closed form — the readout of reservoir computing, exact and fast enough to probe every
  feature set, control and seed in a quick run;
* ``logistic``: multinomial logistic regression (lbfgs), the probe of most NLP probing papers;
  iterative, tens of seconds per fit at the paper preset's sizes.

Two controls keep the probe honest:

* control task (Hewitt & Liang 2019): every word type gets a random label drawn from the task's
  label distribution, and the same probe, same features, same regularisation is trained on it.  A probe that can
  memorise word types scores well on the control too; *selectivity* = task − control accuracy.
* an untrained representation, probed the same way (the caller supplies its features).

Context-keyed control tasks use the same two functions on composite keys (``context_keys``: word
type × a context such as the previous word's category or the position in the sentence), each with
its own random stream (``stream``), so their labels are independent of the word-keyed control's.

A representation-free baseline, ``window_features``: one-hot identities of the last ``window`` words
and the position in the sentence, no memory beyond the window — what a short window alone makes
linearly readable, to set a representation's score against.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from ema_core.blas import blas_limit

PROBE_KINDS = ("ridge", "logistic")
# Regularisation grids, weakest penalty last.  For ridge the value is the penalty α on the
# standardised features; for logistic it is C (the inverse penalty), sklearn's conventions.
# Ridge reaches down to 0.01: with a floor of 1, dev chose the floor itself for SPCN's traces
# (structure, quick preset), a sign that a weaker penalty was wanted; at 0.1 dev is as good as
# at 0.01 there, so the choice now lies inside the grid (a tie goes to the stronger penalty).
DEFAULT_GRID = {"ridge": (1e4, 1e3, 1e2, 10.0, 1.0, 0.1, 0.01), "logistic": (0.01, 0.1, 1.0)}


@dataclass
class Probe:
    mean: np.ndarray
    scale: np.ndarray
    model: object  # the fitted sklearn classifier
    kind: str
    reg: float  # the chosen α (ridge) or C (logistic)
    dev_accuracy: dict[float, float] = field(default_factory=dict)  # every value tried → its dev accuracy

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict(self._standardise(X))

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=np.float64) - self.mean) / self.scale


def fit_probe(X: np.ndarray, y: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray, *, kind: str = "ridge",
              grid: tuple[float, ...] | None = None, max_iter: int = 300, seed: int = 0) -> Probe:
    """The probe whose regularisation scores best on the dev split; a tie goes to the stronger penalty.

    Features are standardised with the training rows' mean and std (a constant feature gets scale 1,
    so it stays 0 rather than dividing by zero).  The chosen probe is the one fitted on the training
    rows: the dev rows choose C and are never trained on.
    """
    # scikit-learn takes 1.1 s to import, and the registry (so every CLI command and every worker)
    # imports this module through the structure experiment: only a fit pays for it.
    from sklearn.exceptions import ConvergenceWarning  # start-up: sklearn's 1.1 s import, paid only by a fit
    from sklearn.linear_model import LogisticRegression, RidgeClassifier  # the same

    if kind not in PROBE_KINDS:
        raise ValueError(f"probe kind must be one of {PROBE_KINDS}, got {kind!r}")
    grid = DEFAULT_GRID[kind] if grid is None else tuple(grid)

    X, X_dev = np.asarray(X, dtype=np.float64), np.asarray(X_dev, dtype=np.float64)
    y, y_dev = np.asarray(y), np.asarray(y_dev)
    if X.ndim != 2 or X_dev.ndim != 2 or X.shape[1] != X_dev.shape[1]:
        raise ValueError(f"features must be 2-D with equal widths, got {X.shape} and {X_dev.shape}")
    if len(X) != len(y) or len(X_dev) != len(y_dev):
        raise ValueError(f"rows and labels differ: {len(X)} vs {len(y)}, {len(X_dev)} vs {len(y_dev)}")
    if not grid or any(not np.isfinite(v) or v <= 0 for v in grid):
        raise ValueError(f"grid must hold positive regularisation values, got {list(grid)}")
    mean = X.mean(0)
    scale = X.std(0)
    scale[scale < 1e-12] = 1.0
    Xs, Xd = (X - mean) / scale, (X_dev - mean) / scale
    best: tuple[float, float, object] | None = None
    dev_acc: dict[float, float] = {}
    # Strongest penalty first, and only a strictly better dev score displaces it.
    for reg in (sorted(grid, reverse=True) if kind == "ridge" else sorted(grid)):
        model = (RidgeClassifier(alpha=reg, solver="cholesky") if kind == "ridge"
                 else LogisticRegression(C=reg, max_iter=max_iter, random_state=seed))
        # One BLAS thread: small solves, shared cores (see ema_core/blas.py).
        with warnings.catch_warnings(), blas_limit(1):
            # A weak probe stopped at max_iter is still a fixed, reproducible probe; its dev score
            # already says how good it is.
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(Xs, y)
            acc = float((model.predict(Xd) == y_dev).mean())
        dev_acc[reg] = acc
        if best is None or acc > best[0]:
            best = (acc, reg, model)
    return Probe(mean, scale, best[2], kind, best[1], dev_acc)


def accuracy_by_label(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str]) -> dict[str, float]:
    """{"overall": token accuracy, label name: accuracy over its tokens} for labels present in y_true."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {y_true.shape} vs {y_pred.shape}")
    out = {"overall": float((y_true == y_pred).mean()) if len(y_true) else float("nan")}
    for i, name in enumerate(labels):
        m = y_true == i
        if m.any():
            out[name] = float((y_pred[m] == i).mean())
    return out


CONTROL_STREAM = 0xC7A1  # the word-keyed control's stream; a context-keyed control passes its own


def control_labels(tokens: np.ndarray, labels: np.ndarray, seed: int, types=None, *,
                   stream: int = CONTROL_STREAM) -> dict[int, int]:
    """Hewitt & Liang's control task: each word type → a label drawn from the empirical label distribution.

    The distribution is the one of ``labels`` over ``tokens``; ``types`` (default: the types in
    ``tokens``) lists every word type that gets a label, seen in ``tokens`` or not.  A "type" may be
    a composite key (:func:`context_keys`); ``stream`` keeps each control's draw its own.
    """
    tokens, labels = np.asarray(tokens), np.asarray(labels)
    rng = np.random.default_rng(np.random.SeedSequence((int(seed), int(stream))))
    values, counts = np.unique(labels, return_counts=True)
    types = np.unique(tokens) if types is None else np.unique(np.asarray(types))
    drawn = rng.choice(values, size=len(types), p=counts / counts.sum())
    return {int(t): int(c) for t, c in zip(types, drawn)}


def apply_control(tokens: np.ndarray, mapping: dict[int, int]) -> np.ndarray:
    """Control labels of a token stream; a word type the mapping does not know is an error."""
    missing = sorted({int(t) for t in np.unique(tokens)} - set(mapping))
    if missing:
        raise ValueError(f"word types without a control label: {missing[:10]}")
    return np.array([mapping[int(t)] for t in tokens], dtype=np.int64)


def context_keys(tokens: np.ndarray, context: np.ndarray, n_contexts: int) -> np.ndarray:
    """(T,) composite keys word × context (``word · n_contexts + context``), for a context-keyed control.

    ``context`` must lie in [0, n_contexts): the key is then one-to-one in (word, context).
    """
    tokens, context = np.asarray(tokens, dtype=np.int64), np.asarray(context, dtype=np.int64)
    if tokens.shape != context.shape:
        raise ValueError(f"tokens and context differ in shape: {tokens.shape} vs {context.shape}")
    if len(context) and (context.min() < 0 or context.max() >= n_contexts):
        raise ValueError(f"context must lie in [0, {n_contexts}), got [{context.min()}, {context.max()}]")
    return tokens * int(n_contexts) + context


def window_features(tokens: np.ndarray, position: np.ndarray, window: int, n_words: int,
                    n_positions: int) -> np.ndarray:
    """(T, window·(n_words + 2) + n_positions) float32 one-hot: the words at t, t−1, … t−window+1 and
    the position in the sentence.  No memory beyond the window, no learned representation.

    Each of the ``window`` slots has ``n_words`` known-word columns, one *unknown* column (every id
    ≥ ``n_words``: one bucket, like the BiGRU's UNK) and one *before the sentence* column (the slot
    reaches past the sentence's first word).  A probe trained on training words never sees the
    unknown column lit, so a novel word adds no evidence of its own and its role is read from the
    words around it and its position.  Positions ≥ ``n_positions`` share the last position column.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    position = np.asarray(position, dtype=np.int64)
    if tokens.shape != position.shape or tokens.ndim != 1:
        raise ValueError(f"tokens and position must be 1-D of one length, got {tokens.shape} and {position.shape}")
    if window < 1 or n_words < 1 or n_positions < 1:
        raise ValueError(f"window, n_words and n_positions must be ≥ 1, got {window}, {n_words}, {n_positions}")
    if len(position) and position.min() < 0:
        raise ValueError("positions must be ≥ 0")
    T, width = len(tokens), n_words + 2
    unknown, before = n_words, n_words + 1
    ids = np.where((tokens >= 0) & (tokens < n_words), tokens, unknown)
    X = np.zeros((T, window * width + n_positions), dtype=np.float32)
    rows = np.arange(T)
    for lag in range(window):
        col = np.full(T, before, dtype=np.int64)
        # the word lag steps back, when it is still in this token's sentence
        inside = position >= lag
        col[inside] = ids[rows[inside] - lag]
        X[rows, lag * width + col] = 1.0
    X[rows, window * width + np.minimum(position, n_positions - 1)] = 1.0
    return X
