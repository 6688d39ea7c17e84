"""What the last block's stream still holds: the depth counterpart of the trace probes.

Two linear read-outs of the final stream z_L (before the final norm), each fitted on one part of the
held-out tokens, its penalty chosen on a second part, scored on a third (whole windows in each part:
no window lends tokens to two of them):

* ``probe_token``: the identity of the token at that position, among the ``classes`` tokens most
  frequent in training (the positions holding one of them), by the ridge classifier of
  :mod:`ema_core.probes` — how much of the embedding x_0 is still readable after L writes;
* ``probe_early``: block 1's write (x_1 − x_0), by ridge regression onto all its d coordinates, as the
  R² over them (1: read exactly; 0: no better than its mean).  It sits at its ceiling (0.998–0.999 at
  the quick budget, trained or not): the write is mostly a function of the current token, which the
  stream keeps, so it is kept as a sanity check only;
* ``probe_early_resid``: the same write with the part a linear map of x_0 explains removed (least
  squares on x_0, fitted on the fit part), read the same way — what block 1 added beyond the token
  and its position, which only the stream after it can still hold;
* ``probe_prev``: the identity of the *previous* token, among the same frequent tokens — something the
  stream holds only if a block wrote it there (x_0 at t knows nothing of t − 1).

Both are measured on the trained model and on the same model at initialisation (``*_init``), the
baseline that says what training changed; ``probe_token_chance`` is the share of the commonest class
among the scored positions.
"""
from __future__ import annotations

import numpy as np

from ema_core.probes import fit_probe

# Ridge penalties on standardised features, strongest first (a tie keeps the stronger).
R2_GRID = (1e4, 1e3, 1e2, 10.0, 1.0, 0.1)
# The parts of the probe windows, in order: fitted on, penalty chosen on, scored on.
PARTS = (0.5, 0.25, 0.25)


def split_windows(n_windows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window indices of the three parts (fit, dev, score), contiguous; each holds at least one window."""
    if n_windows < 3:
        raise ValueError(f"the probes need at least 3 windows (fit, dev, score), got {n_windows}")
    a = max(1, int(round(n_windows * PARTS[0])))
    b = max(a + 1, min(n_windows - 1, a + int(round(n_windows * PARTS[1]))))
    idx = np.arange(n_windows)
    return idx[:a], idx[a:b], idx[b:]


def token_probe(final: np.ndarray, tokens: np.ndarray, frequent: np.ndarray) -> dict[str, float]:
    """Accuracy of reading each position's token from ``final`` (windows, T, d), among ``frequent``
    token ids; and its chance (the commonest of them among the scored positions)."""
    parts = split_windows(len(final))
    keep = np.isin(tokens, frequent)
    X = [final[p][keep[p]] for p in parts]
    y = [tokens[p][keep[p]] for p in parts]
    if any(len(v) == 0 for v in y):
        raise ValueError("a probe part holds no position of the frequent tokens; give the probe more windows")
    probe = fit_probe(X[0], y[0], X[1], y[1], kind="ridge")
    acc = float((probe.predict(X[2]) == y[2]).mean())
    _, counts = np.unique(y[2], return_counts=True)
    return {"accuracy": acc, "chance": float(counts.max() / counts.sum())}


def ridge_r2(final: np.ndarray, target: np.ndarray, grid: tuple[float, ...] = R2_GRID) -> float:
    """R² of ``target`` (windows, T, k) read linearly from ``final`` (windows, T, d): the ridge fitted on
    the first part, its penalty chosen on the second by R², scored on the third.  Features are
    standardised and the target centred with the fitted part's statistics."""
    parts = split_windows(len(final))
    X = [final[p].reshape(-1, final.shape[-1]).astype(np.float64) for p in parts]
    Y = [target[p].reshape(-1, target.shape[-1]).astype(np.float64) for p in parts]
    mean, scale = X[0].mean(0), X[0].std(0)
    scale[scale < 1e-12] = 1.0
    X = [(x - mean) / scale for x in X]
    y_mean = Y[0].mean(0)
    Y = [y - y_mean for y in Y]
    gram, cross = X[0].T @ X[0], X[0].T @ Y[0]
    eye = np.eye(gram.shape[0])

    def r2(W: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        total = float(((y - y.mean(0)) ** 2).sum())
        return 1.0 - float(((y - x @ W) ** 2).sum()) / total if total > 0 else float("nan")

    best = None
    for reg in sorted(grid, reverse=True):
        W = np.linalg.solve(gram + reg * eye, cross)
        score = r2(W, X[1], Y[1])
        if best is None or score > best[0]:
            best = (score, W)
    return r2(best[1], X[2], Y[2])


def frequent_tokens(train: np.ndarray, classes: int) -> np.ndarray:
    """The ``classes`` token ids most frequent in the training stream (a tie: the smaller id)."""
    counts = np.bincount(np.asarray(train, dtype=np.int64))
    order = np.lexsort((np.arange(len(counts)), -counts))
    return np.sort(order[:classes])


def residualise(target: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``target`` (windows, T, k) less its least-squares fit on ``source`` (windows, T, d) with an intercept,
    the fit made on the probes' fit part only (so the score part never shapes what is removed)."""
    fit, _, _ = split_windows(len(target))
    X = source[fit].reshape(-1, source.shape[-1]).astype(np.float64)
    Y = target[fit].reshape(-1, target.shape[-1]).astype(np.float64)
    X1 = np.hstack([X, np.ones((len(X), 1))])
    coef, *_ = np.linalg.lstsq(X1, Y, rcond=None)
    flat = source.reshape(-1, source.shape[-1]).astype(np.float64)
    fitted = flat @ coef[:-1] + coef[-1]
    return target.astype(np.float64) - fitted.reshape(target.shape)


def probe_all(final: np.ndarray, early: np.ndarray, x0: np.ndarray, tokens: np.ndarray,
              frequent: np.ndarray) -> dict[str, float]:
    """Every probe of one model's last stream ``final``: ``probe_token`` with its chance, ``probe_early``
    (block 1's write ``early``), ``probe_early_resid`` (the write less what the embedding ``x0``
    explains), ``probe_prev`` with its chance (the previous token's identity)."""
    tok = token_probe(final, tokens, frequent)
    prev = token_probe(final[:, 1:], tokens[:, :-1], frequent)
    return {"probe_token": tok["accuracy"], "probe_token_chance": tok["chance"],
            "probe_early": ridge_r2(final, early), "probe_early_resid": ridge_r2(final, residualise(early, x0)),
            "probe_prev": prev["accuracy"], "probe_prev_chance": prev["chance"]}
