"""Trace dilution: how much of the token at lag k is left in an EMA trace.

Analytic side.  With h_t = (1 − α)·h_{t−1} + α·x_t, the token seen k steps ago enters h_t with
weight w_k = α·(1 − α)^k, whatever the token.  For i.i.d. unit-energy inputs the trace's
steady-state energy is Σ_k w_k² = α/(2 − α); everything but the token of interest interferes, so
its signal-to-interference ratio is w_k² / (α/(2 − α) − w_k²).

Measured side.  A stream of random tokens over V words, each a random Gaussian embedding in
D dimensions, goes through the scan kernels; a linear decoder (ridge least squares onto one-hot
labels, standardised features) is trained on one stretch of the stream to name the token at lag k
and scored on a later stretch, for each rate alone and for all rates together.  Chance is 1/V.

The paper's caveat is a switch: ``window = 1`` decodes from the current trace state only (the
setting where the data-processing argument applies); ``window = w > 1`` lets the decoder read the
last w trace states, and since x_t = (h_t − (1 − α)·h_{t−1})/α an EMA *sequence* is invertible:
lags up to w − 2 become exactly recoverable.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import linalg

from ema_core.blas import blas_limit
from ema_core.config import DilutionConfig, StreamConfig
from ema_core.jit import njit, prange
from ema_core.scan import ema_scan, validate_alphas


def lag_weights(alphas, max_lag: int) -> np.ndarray:
    """w[k, lag] = α_k·(1 − α_k)^lag for lag = 0..max_lag: (K, max_lag + 1)."""
    a = validate_alphas(alphas)
    lags = np.arange(max_lag + 1)
    return a[:, None] * (1.0 - a[:, None]) ** lags[None, :]


def half_life(alphas) -> np.ndarray:
    """Lag at which a token's weight has halved: ln ½ / ln(1 − α) steps (0 for α = 1)."""
    a = validate_alphas(alphas)
    with np.errstate(divide="ignore"):
        return np.where(a >= 1.0, 0.0, np.log(0.5) / np.log1p(-np.minimum(a, 1 - 1e-300)))


def effective_window(alphas, mass: float = 0.95) -> np.ndarray:
    """Fewest recent tokens that carry ``mass`` of the total weight: ⌈ln(1 − mass)/ln(1 − α)⌉."""
    if not 0.0 < mass < 1.0:
        raise ValueError(f"mass must lie in (0, 1), got {mass}")
    a = validate_alphas(alphas)
    out = np.ones_like(a)
    slow = a < 1.0
    out[slow] = np.ceil(np.log1p(-mass) / np.log1p(-a[slow]))
    return out.astype(int)


def interference_energy(alphas) -> np.ndarray:
    """Steady-state trace energy Σ_k w_k² = α/(2 − α) for unit-energy i.i.d. inputs."""
    a = validate_alphas(alphas)
    return a / (2.0 - a)


def signal_to_interference(alphas, max_lag: int) -> np.ndarray:
    """w_k² / (α/(2 − α) − w_k²): (K, max_lag + 1); inf where the token is all there is (α = 1, lag 0)."""
    w2 = lag_weights(alphas, max_lag) ** 2
    rest = interference_energy(alphas)[:, None] - w2
    with np.errstate(divide="ignore"):
        return np.where(rest <= 1e-15 * w2, np.inf, w2 / np.maximum(rest, 1e-300))


def analytic_frame(alphas, max_lag: int) -> pd.DataFrame:
    """Long format, one row per (rate, lag): weight, SIR and SIR in dB."""
    a = validate_alphas(alphas)
    w = lag_weights(a, max_lag)
    sir = signal_to_interference(a, max_lag)
    rows = []
    for k, alpha in enumerate(a):
        for lag in range(max_lag + 1):
            rows.append((rate_label(alpha), float(alpha), lag, w[k, lag], sir[k, lag]))
    df = pd.DataFrame(rows, columns=["rate", "alpha", "lag", "weight", "sir"])
    with np.errstate(divide="ignore"):
        df["sir_db"] = 10.0 * np.log10(df["sir"])
    return df


def rate_label(alpha: float) -> str:
    return f"α={alpha:g}"


ALL_RATES = "all rates"


@dataclass(frozen=True)
class IdentityResult:
    """Measured identity accuracy: ``accuracy`` has columns feature, lag, accuracy."""

    config: DilutionConfig
    accuracy: pd.DataFrame
    chance: float
    seconds: float


def _burn_in(alphas: np.ndarray) -> int:
    # Start decoding once the slowest trace has forgotten its zero start to 1e-3 of its weight.
    slow = float(alphas.min())
    return 0 if slow >= 1.0 else min(int(math.ceil(math.log(1e-3) / math.log1p(-slow))), 20_000)


def random_stream(cfg: StreamConfig, alphas, seed: int, backend: str = "numba") -> tuple[np.ndarray, np.ndarray, int]:
    """The measurement's data, a pure function of (stream settings, rates, seed): tokens (T,),
    traces (T, K, D) float32, and the first step whose lags and window all lie inside the stream."""
    a = validate_alphas(alphas)
    rng = np.random.default_rng(seed)
    first = _burn_in(a) + cfg.max_lag + cfg.window - 1
    T = first + cfg.n_train + cfg.n_test
    tokens = rng.integers(0, cfg.vocab, size=T)
    emb = (rng.standard_normal((cfg.vocab, cfg.dim)) / math.sqrt(cfg.dim)).astype(np.float32)  # unit energy per token
    traces, _ = ema_scan(emb[tokens][None], a, backend=backend)  # (1, T, K, D)
    traces = traces[0]
    return tokens, (traces.numpy() if hasattr(traces, "numpy") else traces), first


def window_features(traces: np.ndarray, starts: np.ndarray, window: int, K: int, D: int) -> np.ndarray:
    """Rows t of the decoder's input: the trace states at t, t−1, …, t−window+1: (n, window·K·D).

    Columns are ordered (window step, rate, channel), so a single rate's columns are a regular
    slice pattern (see :func:`feature_sets`).  Shared with the dilution sweep
    (:mod:`ema_core.experiments.dilution_sweep`), whose decoder reads the very same features.
    """
    idx = starts[:, None] - np.arange(window)[None, :]  # (n, window)
    return traces[idx].reshape(len(starts), window * K * D)


def _rate_columns(k: int, window: int, K: int, D: int) -> np.ndarray:
    return (np.arange(window)[:, None] * K * D + k * D + np.arange(D)[None, :]).ravel()


def feature_sets(alphas, window: int, D: int, include_all: bool = True) -> list[tuple[str, np.ndarray]]:
    """(label, columns of :func:`window_features`) of each rate alone, then of all rates together
    (when there are several and ``include_all``).  Shared with the dilution sweep, which decodes the
    same sets."""
    K = len(alphas)
    sets = [(rate_label(alpha), _rate_columns(k, window, K, D)) for k, alpha in enumerate(alphas)]
    if include_all and K > 1:
        sets.append((ALL_RATES, np.arange(window * K * D)))
    return sets


@njit(parallel=True, cache=True, nogil=True)
def _label_sums(F, tokens, rows, out):
    # out[lag, v] = Σ of F[i] over training rows i whose token lag steps back is v: the raw
    # Fᵀ Y for one-hot targets, without building Y.  Parallel over lags (no write conflicts).
    n, p = F.shape
    for lag in prange(out.shape[0]):
        for i in range(n):
            row = out[lag, tokens[rows[i] - lag]]
            for j in range(p):
                row[j] += F[i, j]


def measure_footprint(cfg: DilutionConfig) -> float:
    """Rough peak bytes of ``measure_identity(cfg)``: its largest arrays, counted once each."""
    K, V, D, L, W = len(cfg.alphas), cfg.vocab, cfg.dim, cfg.max_lag, cfg.window
    p, q = W * K * D, V * (L + 1)  # decoder inputs, one-hot targets over all lags
    n, m = cfg.n_train, cfg.n_test
    traces = 4 * (n + m) * (K + 1) * D
    features = 8 * (n + m) * p  # float32, raw and standardised
    gram = 20 * p * p  # float32 product, float64 copy, the ridge system of the largest set
    solve = 24 * q * p  # Fᵀ Y in float32 and float64, the solution in float64 and float32
    scores = 8 * m * q  # held-out scores, and their sum with the prior
    return float(traces + features + gram + solve + scores)


def measure_identity(cfg: DilutionConfig | None = None, **overrides) -> IdentityResult:
    """Train a linear decoder to name the token at each lag; score it on held-out steps."""
    t_start = time.perf_counter()
    if cfg is None or overrides:  # build (and validate) from the given config plus any overrides
        cfg = DilutionConfig(**{**(cfg.model_dump() if cfg else {}), **overrides})
    # Small matrices (p ≤ a few hundred at the page's defaults): one BLAS thread (see ema_core/blas.py).
    with blas_limit(1):
        frame = _measure(cfg)
    return IdentityResult(cfg, frame, 1.0 / cfg.vocab, time.perf_counter() - t_start)




def _measure(cfg: DilutionConfig) -> pd.DataFrame:
    a = np.asarray(cfg.alphas, dtype=np.float64)
    K, V, D, L, Wn = a.size, cfg.vocab, cfg.dim, cfg.max_lag, cfg.window
    tokens, traces, first = random_stream(cfg, cfg.alphas, cfg.seed)
    T = len(tokens)

    steps = np.arange(first, T)
    train, test = steps[: cfg.n_train], steps[cfg.n_train :]
    F = window_features(traces, train, Wn, K, D)  # (n, p) raw trace states
    Ft = window_features(traces, test, Wn, K, D)  # (m, p)
    n, m, p, q = len(train), len(test), F.shape[1], V * (L + 1)

    # Targets: one-hot of the token at every lag side by side, column lag·V + token, so one
    # solve serves all lags.  Standardising the features and centring both sides (an intercept)
    # is folded into the algebra instead of run as passes over F: the standardised Gram, FᵀY
    # and the held-out scores all follow from the raw products and (μ, σ).
    mu = F.mean(0, dtype=np.float64)
    gram = (F.T @ F).astype(np.float64) - n * np.outer(mu, mu)  # centred Fᵀ F
    sd = np.sqrt(np.maximum(np.diag(gram), 0.0) / n) + 1e-12
    gram /= np.outer(sd, sd)
    sums = np.zeros((L + 1, V, p), np.float32)
    _label_sums(F, tokens, train, sums)  # Σ of raw feature rows per (lag, token)
    counts = np.bincount((np.arange(L + 1)[None, :] * V + tokens[train[:, None] - np.arange(L + 1)]).ravel(), minlength=q)
    FtY = (sums.reshape(q, p) - counts[:, None] * mu) / sd  # (q, p): centred, standardised Fᵀ Y
    prior = counts / n  # class frequencies per lag: the intercept
    Ft1 = np.empty((m, p + 1), np.float32)  # a column of ones carries the intercept in the matmul
    Ft1[:, :p], Ft1[:, p] = Ft, 1.0
    truth = tokens[test[:, None] - np.arange(L + 1)[None, :]]  # (m, L + 1)

    rows = []
    for name, c in feature_sets(a, Wn, D):
        A = gram[np.ix_(c, c)].astype(np.float32)
        A[np.diag_indices_from(A)] += cfg.ridge * n  # the ridge keeps A well conditioned for float32
        Wsol = linalg.cho_solve(linalg.cho_factor(A, check_finite=False), FtY[:, c].T.astype(np.float32), check_finite=False)
        # scores = ((Ft − μ)/σ) W + prior = Ft (W/σ) + (prior − (μ/σ) W)
        W1 = np.empty((len(c) + 1, q), np.float32)
        W1[:-1] = Wsol / sd[c, None]
        W1[-1] = prior - (mu[c] / sd[c]) @ Wsol
        scores = Ft1[:, np.append(c, p)] @ W1  # (m, q)
        acc = (scores.reshape(m, L + 1, V).argmax(-1) == truth).mean(0)
        rows.extend((name, lag, float(acc[lag])) for lag in range(L + 1))
    return pd.DataFrame(rows, columns=["feature", "lag", "accuracy"])
