"""Trace dilution: how much of the token at lag k is left in an EMA trace.

Analytic side.  With h_t = (1 − α)·h_{t−1} + α·x_t, the token seen k steps ago enters h_t with
weight w_k = α·(1 − α)^k, whatever the token.  For i.i.d. unit-energy inputs the trace's
steady-state energy is Σ_k w_k² = α/(2 − α); everything but the token of interest interferes, so
its signal-to-interference ratio is w_k² / (α/(2 − α) − w_k²).

Measured side.  A stream of random tokens over V words, each a random Gaussian embedding in
D dimensions, goes through the scan kernels; a decoder names the token at lag k on a later stretch
of the stream, for each rate alone and for all rates together.  Chance is 1/V.  The linear decoder
(``decoder="linear"``, ridge least squares onto one-hot labels, standardised features) is trained
on an earlier stretch; the peel (``decoder="peel"``, :func:`peel_decode`) needs no training.

The paper's caveat is a switch: ``window = 1`` decodes from the current trace state only (the
setting where the data-processing argument applies); ``window = w > 1`` lets the decoder read the
last w trace states, and since x_t = (h_t − (1 − α)·h_{t−1})/α an EMA *sequence* is invertible:
lags up to w − 2 become exactly recoverable.

The limit made visible.  The weight of the token at lag k fades, but a fading weight is not lost
information: a decoder that knows the embedding table and the rates (``decoder="peel"``) takes the
newest tokens off the current state one at a time and names the token at lag k exactly, until the
stored trace's own error hides it.  The trace is computed in float64, then stored: Gaussian noise of
σ ``noise`` per coordinate is added and the result rounded to ``precision``
(:func:`store_trace`).  The stored error per coordinate σ (:func:`trace_sigma`) sets the analytic
horizon k* = ln(σ/α)/ln(1 − α) (:func:`analytic_horizon`), the lag where the token's weight
α(1 − α)^k falls to σ.  Where a decoder loses the token near k*, precision or noise is the limit;
where it loses it while the weight is still far above σ, the other tokens are (the information is
diluted for that read-out) or, for the linear decoder, the read-out is (:func:`limit_frame`).

Both axes.  The depth explorer (:mod:`ema_core.depth.explorer`) adds writes into one stream with
weights of its own; what holds for any weights is written here once, and the EMA functions are its
geometric case: :func:`sir_of_weight`, :func:`rounding_error` and :func:`stored_error` (of any power),
:func:`peel_weighted`, :func:`ridge_read`, and :func:`limit_sentences` / :func:`limit_summary` with a
:class:`LimitWording`.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import linalg

from ema_core.blas import blas_limit
from ema_core.dilution_config import DilutionConfig, Precision, StreamConfig
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


def sir_of_weight(weight, energy) -> np.ndarray:
    """w² / (E − w²): the signal-to-interference of a unit-energy code held with weight w in a weighted sum
    of independent unit-energy codes whose energy is E = Σ_i w_i²; inf where the code is all there is.

    Any weights: an EMA trace's (:func:`signal_to_interference`) or a depth stream's
    (:func:`ema_core.depth.explorer.weight_sir`).  E is the caller's, since a trace's sum runs over
    every past token (α/(2 − α)), not only the lags asked for.
    """
    w2 = np.asarray(weight, dtype=np.float64) ** 2
    rest = energy - w2
    with np.errstate(divide="ignore"):
        return np.where(rest <= 1e-15 * w2, np.inf, w2 / np.maximum(rest, 1e-300))


def signal_to_interference(alphas, max_lag: int) -> np.ndarray:
    """w_k² / (α/(2 − α) − w_k²): (K, max_lag + 1); inf where the token is all there is (α = 1, lag 0)."""
    return sir_of_weight(lag_weights(alphas, max_lag), interference_energy(alphas)[:, None])


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
    """Measured identity accuracy: ``accuracy`` has columns feature, lag, accuracy; ``limits`` one row
    per feature set, its horizons and what limits it (:func:`limit_frame`)."""

    config: DilutionConfig
    accuracy: pd.DataFrame
    chance: float
    seconds: float
    limits: pd.DataFrame | None = None


def _burn_in(alphas: np.ndarray) -> int:
    # Start decoding once the slowest trace has forgotten its zero start to 1e-3 of its weight.
    slow = float(alphas.min())
    return 0 if slow >= 1.0 else min(int(math.ceil(math.log(1e-3) / math.log1p(-slow))), 20_000)


# Significant bits p (the implicit leading one included) of each storage format: unit roundoff 2^-p.
SIGNIFICAND_BITS: dict[str, int] = {"float64": 53, "float32": 24, "bfloat16": 8, "float16": 11}
# The noise's generator is seeded from (seed, this tag): independent of the tokens and embeddings,
# so a stream with noise has the very same tokens and table as the one without.
NOISE_STREAM = 0x6E6F6973


@dataclass(frozen=True)
class Stream:
    """The measurement's data: tokens (T,), the embedding table (V, D) float32 (unit energy per
    token), the stored traces (T, K, D) and the first step whose lags and window all lie inside."""

    tokens: np.ndarray
    embeddings: np.ndarray
    traces: np.ndarray
    first: int


def random_stream(cfg: StreamConfig, alphas, seed: int, backend: str = "numba") -> Stream:
    """The measurement's data, a pure function of (stream settings, rates, seed).

    The traces are computed in float64, then stored as ``cfg`` says (:func:`store_trace`): with
    ``noise`` σ > 0 Gaussian noise is added first (its own generator, from ``seed``), then the sum is
    rounded to ``precision``.  Decoders read only the stored traces.
    """
    a = validate_alphas(alphas)
    rng = np.random.default_rng(seed)
    first = _burn_in(a) + cfg.max_lag + cfg.window - 1
    T = first + cfg.n_train + cfg.n_test
    tokens = rng.integers(0, cfg.vocab, size=T)
    emb = (rng.standard_normal((cfg.vocab, cfg.dim)) / math.sqrt(cfg.dim)).astype(np.float32)  # unit energy per token
    # float64 from the float32 table: exact, so float64 storage holds nothing but the scan's own rounding.
    traces, _ = ema_scan(emb.astype(np.float64)[tokens][None], a, backend=backend)  # (1, T, K, D)
    traces = traces[0]
    exact = traces.numpy() if hasattr(traces, "numpy") else traces
    if cfg.noise > 0:
        exact += cfg.noise * np.random.default_rng([seed, NOISE_STREAM]).standard_normal(exact.shape)
    return Stream(tokens, emb, store_trace(exact, cfg.precision), first)


def store_trace(exact: np.ndarray, precision: Precision) -> np.ndarray:
    """``exact`` (float64) rounded to the nearest ``precision`` value, ties to even.

    Held in float64 for float64 and in float32 otherwise: float32 holds every bfloat16 and float16
    value exactly, so what a decoder reads is the rounded value and nothing else.
    """
    x = np.asarray(exact, dtype=np.float64)
    if precision == "float64":
        return x
    if precision == "float32":
        return x.astype(np.float32)
    if precision == "float16":
        return x.astype(np.float16).astype(np.float32)  # numpy rounds float64 to float16 in one step
    if precision == "bfloat16":
        return _round_bfloat16(x).astype(np.float32)
    raise ValueError(f"precision: must be one of {', '.join(SIGNIFICAND_BITS)} (got {precision!r})")


def _round_bfloat16(x: np.ndarray) -> np.ndarray:
    # bfloat16 is float32's exponent with 8 significant bits.  numpy has none, and rounding through
    # float32 would round twice; so round float64's 53-bit significand at bit 45 on the bit pattern:
    # add just under half an ulp, plus one where the kept part is odd (ties to even), and clear the
    # rest.  A carry out of the significand moves into the exponent, which is the right answer, and
    # the sign bit is never reached.  (Subnormals, below 1e-38, are not handled: no trace gets there.)
    drop = 45
    bits = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    odd = (bits >> np.uint64(drop)) & np.uint64(1)
    rounded = (bits + np.uint64((1 << (drop - 1)) - 1) + odd) & ~np.uint64((1 << drop) - 1)
    return rounded.view(np.float64)


def unit_roundoff(precision: Precision) -> float:
    """u = 2^-p: the largest relative error of rounding to nearest in ``precision``."""
    return 2.0 ** -SIGNIFICAND_BITS[precision]


def trace_power(alphas, vocab: int, dim: int) -> np.ndarray:
    """E[h²] per coordinate of a steady-state trace of the random stream: (α/(2−α)·(1 − 1/V) + 1/V)/D.

    The tokens' fluctuation (energy α/(2−α), of the embeddings' spread about their mean) plus the
    trace's mean, the table's mean embedding (energy about 1/V), which a slow trace sits close to.
    """
    a = validate_alphas(alphas)
    return (interference_energy(a) * (1.0 - 1.0 / vocab) + 1.0 / vocab) / dim


# Rounding x to p significant bits errs uniformly over one ulp, variance ulp²/12, with ulp = 2u·|x|/m
# (u = 2^-p, m ∈ [1, 2) the significand).  Over significands spread log-uniformly (Benford),
# E[1/m²] = 3/(8 ln 2), so the variance is u²·x²/(8 ln 2) on average:
# σ = u·rms(x)/√(8 ln 2) ≈ 0.42·u·rms(x).  (Measured: within 5 % for every precision and rate.)
ROUNDING_VARIANCE = 1.0 / (8.0 * math.log(2.0))


def rounding_error(power, precision: Precision, noise: float = 0.0) -> np.ndarray:
    """Per-coordinate standard deviation of the rounding alone, of a stored value whose mean square per
    coordinate is ``power`` before its noise: u·rms/√(8 ln 2) of the value rounded (it plus its noise).

    Any stored sum of codes: an EMA trace (:func:`trace_power`, :func:`rounding_sigma`) or a depth
    stream (:func:`ema_core.depth.explorer.stream_power`).
    """
    return unit_roundoff(precision) * np.sqrt(ROUNDING_VARIANCE * (power + noise**2))


def stored_error(power, precision: Precision, noise: float = 0.0) -> np.ndarray:
    """σ of a stored value of mean square ``power`` per coordinate: the standard deviation of stored −
    exact, the noise and the rounding together, √(noise² + σ_round²) (they are independent)."""
    return np.sqrt(noise**2 + rounding_error(power, precision, noise) ** 2)


def noise_limited(power, precision: Precision, noise: float) -> np.ndarray:
    """Whether the noise is the larger part of :func:`stored_error` (else the rounding is): which of the
    two a token lost to the stored error was lost to."""
    return noise**2 >= rounding_error(power, precision, noise) ** 2


def rounding_sigma(alphas, vocab: int, dim: int, precision: Precision, noise: float = 0.0) -> np.ndarray:
    """:func:`rounding_error` of each rate's trace."""
    return rounding_error(trace_power(alphas, vocab, dim), precision, noise)


def trace_sigma(alphas, vocab: int, dim: int, precision: Precision, noise: float = 0.0) -> np.ndarray:
    """σ of each rate's stored trace (:func:`stored_error`).

    σ is per coordinate, and the embeddings have unit norm, so σ is also the error of the trace's
    projection onto any one embedding: what a decoder that compares the trace with the table sees.
    """
    return stored_error(trace_power(alphas, vocab, dim), precision, noise)


def analytic_horizon(alphas, sigma) -> np.ndarray:
    """k* = ln(σ/α)/ln(1 − α): the lag where the token's weight α(1 − α)^k falls to the stored error σ.

    Past k* the token's projection is below the error on it, whatever decodes it.  Negative where σ ≥ α
    (not even the newest token stands out); α = 1 keeps lag 0 only (0, or −1 where σ ≥ 1).
    """
    a = validate_alphas(alphas)
    s = np.broadcast_to(np.asarray(sigma, dtype=np.float64), a.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.log(s / a) / np.log1p(-np.minimum(a, 1 - 1e-16))
    return np.where(a >= 1.0, np.where(s < 1.0, 0.0, -1.0), k)


def peel_interference(alphas) -> np.ndarray:
    """I = (1−α)²/(α(2−α)): the energy of the older tokens in h/α relative to the token being named
    (unit-energy i.i.d. embeddings).  The same at every peeling step, since peeling restores the shape."""
    a = validate_alphas(alphas)
    return (1.0 - a) ** 2 / (a * (2.0 - a))


def peel_order(alphas, sigma, dim: int, max_lag: int) -> np.ndarray:
    """For a set of rates peeled together, the trace that names the token at each lag: (max_lag + 1,).

    Every trace has every named token taken off; the token at lag k is named from the trace with the
    best margin α / √(I/D + s_k²): the newest token leads the next one by α in h/α, against the older
    tokens' interference I/D per coordinate and the stored error amplified by the peeling,
    s_k = σ/(α(1 − α)^k).  A fast trace wins the early lags, a slower one takes over where the fast
    one's amplified error has grown past it.
    """
    a = validate_alphas(alphas)
    s = np.broadcast_to(np.asarray(sigma, dtype=np.float64), a.shape)
    lags = np.arange(max_lag + 1, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_s = np.log(s / a)[:, None] - lags[None, :] * np.log1p(-np.minimum(a, 1.0))[:, None]
        log_s[:, 0] = np.log(s / a)  # 0·ln 0 for α = 1 at lag 0
        amplified = np.exp(2.0 * log_s)  # inf past an α = 1 trace's lag 0: it knows nothing older
        margin = a[:, None] / np.sqrt(peel_interference(a)[:, None] / dim + amplified)
    return np.argmax(np.nan_to_num(margin, nan=0.0), axis=0)


def peel_weighted(states: np.ndarray, tables, scale, decay, order: np.ndarray | None = None) -> np.ndarray:
    """Name the code written at each step s = 0..S−1 from the current stored state of K weighted sums of
    the same writes: (m, S), S = len(tables).

    ``states`` (m, K, D): sum k holds step s's code, a row of ``tables[s]`` (V, D), with weight
    w[k, s] = scale[k]·Π_{i<s} decay[k, i] (``decay`` (K, S − 1), or (K, 1): the same at every step).
    r = h/w[k, 0] ≈ e_{x_0} + decay·(e_{x_1} + …): name the nearest code (argmax of r·e − ‖e‖²/2),
    subtract it, divide by the step's decay, repeat.  Every sum is peeled by the same named codes, and
    ``order`` (S,) says which sum names each step (sum 0 by default).  A decay that is not positive
    (a weight that is 0) leaves nothing further to peel: the residual becomes 0 and later names are
    guesses.  Arithmetic in float64, whatever the stored precision: the decoder adds no rounding of its
    own worth the name, so the stored value is the limit.

    An EMA trace is the geometric case (:func:`peel_decode`); a depth stream is one sum whose steps are
    its layers, largest weight first (:func:`ema_core.depth.explorer.peel_layers`).
    """
    S = len(tables)
    scale = np.asarray(scale, dtype=np.float64)
    K = scale.size
    # (K, m, D): each sum's residuals contiguous, so a step's matmul reads one block (a new array: the
    # division is not in place, as the moved axes may be a view of the caller's states)
    R = np.ascontiguousarray(np.moveaxis(np.asarray(states, dtype=np.float64), 1, 0)) / scale[:, None, None]
    decay = np.broadcast_to(np.asarray(decay, dtype=np.float64), (K, S - 1))
    order = np.zeros(S, dtype=np.int64) if order is None else np.asarray(order)
    out = np.empty((R.shape[1], S), dtype=np.int64)
    for step in range(S):
        E = np.asarray(tables[step], dtype=np.float64)
        scores = R[order[step]] @ E.T
        scores -= 0.5 * np.einsum("vd,vd->v", E, E)
        named = scores.argmax(axis=1)
        out[:, step] = named
        if step == S - 1:
            break
        R -= E[named][None]
        for k in range(K):
            if decay[k, step] > 0:
                R[k] /= decay[k, step]  # a division, not a product with 1/decay: one rounding, not two
            else:
                R[k] = 0.0  # the older writes weigh nothing (α = 1 keeps the newest token only)
    return out


def peel_decode(states: np.ndarray, embeddings: np.ndarray, alphas, max_lag: int,
                order: np.ndarray | None = None) -> np.ndarray:
    """Name the token at lags 0..max_lag from the current stored state of each rate: (m, max_lag + 1).

    ``states`` (m, K, D).  :func:`peel_weighted` with the lags as its steps, one table, and the EMA's
    geometric weights: r = h/α ≈ e_{x_t} + (1−α)·e_{x_{t−1}} + …, so each step divides by 1 − α.  With
    several rates ``order`` (see :func:`peel_order`) says which trace names the token at each lag.
    """
    a = validate_alphas(alphas)
    E = np.asarray(embeddings, dtype=np.float64)
    return peel_weighted(states, [E] * (max_lag + 1), a, (1.0 - a)[:, None], order)


def rate_sets(alphas, include_all: bool = True) -> list[tuple[str, np.ndarray]]:
    """(label, indices of the rates) of each rate alone, then of all rates together (when there are
    several and ``include_all``): the sets both decoders read, in :func:`feature_sets`' order."""
    K = len(alphas)
    sets = [(rate_label(alpha), np.array([k])) for k, alpha in enumerate(alphas)]
    if include_all and K > 1:
        sets.append((ALL_RATES, np.arange(K)))
    return sets


def peel_set_accuracy(stream: Stream, steps: np.ndarray, cfg: StreamConfig, alphas, rates) -> np.ndarray:
    """The peel decoder's accuracy at lags 0..max_lag on ``steps``, reading the stream's rates ``rates``
    (indices into ``alphas``, the stream's rates) together: (max_lag + 1,).

    No training: the decoder knows the table, the rates and the stored trace's σ (which trace names
    which lag, :func:`peel_order`).
    """
    a = validate_alphas(alphas)
    ks = np.asarray(rates)
    L = cfg.max_lag
    sigma = trace_sigma(a[ks], cfg.vocab, cfg.dim, cfg.precision, cfg.noise)
    truth = stream.tokens[steps[:, None] - np.arange(L + 1)[None, :]]  # (m, L + 1)
    states = stream.traces[steps][:, ks]  # (m, |ks|, D): the current state only
    order = peel_order(a[ks], sigma, cfg.dim, L)
    return (peel_decode(states, stream.embeddings, a[ks], L, order) == truth).mean(0)


def peel_accuracy(stream: Stream, steps: np.ndarray, cfg: StreamConfig, alphas,
                  include_all: bool = True) -> pd.DataFrame:
    """:func:`peel_set_accuracy` of every rate set (:func:`rate_sets`): feature, lag, accuracy."""
    rows = []
    for name, ks in rate_sets(alphas, include_all):
        acc = peel_set_accuracy(stream, steps, cfg, alphas, ks)
        rows.extend((name, lag, float(acc[lag])) for lag in range(cfg.max_lag + 1))
    return pd.DataFrame(rows, columns=["feature", "lag", "accuracy"])


def window_features(traces: np.ndarray, starts: np.ndarray, window: int, K: int, D: int) -> np.ndarray:
    """Rows t of the decoder's input: the trace states at t, t−1, …, t−window+1: (n, window·K·D).

    Columns are ordered (window step, rate, channel), so a single rate's columns are a regular
    slice pattern (see :func:`feature_sets`).  Shared with the dilution sweep
    (:mod:`ema_core.studies.dilution.experiment`), whose decoder reads the very same features.
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
def _label_sums(F, labels, out):
    # out[j, v] = Σ of F[i] over training rows i whose label j is v: the raw Fᵀ Y for one-hot
    # targets, without building Y.  Parallel over label columns (no write conflicts).
    n, p = F.shape
    for j in prange(out.shape[0]):
        for i in range(n):
            row = out[j, labels[i, j]]
            for c in range(p):
                row[c] += F[i, c]


def ridge_read(F: np.ndarray, labels: np.ndarray, Ft: np.ndarray, vocab: int, ridge: float,
               sets=None) -> list[np.ndarray]:
    """The linear read-out: ridge least squares from features F (n, p) onto the one-hot of each column of
    ``labels`` (n, J), on standardised features with an intercept; for each set of feature columns in
    ``sets`` (all p when None), the label it scores highest on the held-out features Ft (m, p): (m, J) each.

    Both axes' linear decoder: the time axis's labels are the token at each lag (:func:`_measure`),
    depth's each layer's token (:func:`ema_core.depth.explorer.measure_depth`).  It computes in float32
    whatever the stored precision (a float64 store reads as its float32 rounding): its own
    ridge-limited error is far above float32's.
    """
    F = np.asarray(F, dtype=np.float32)
    labels = np.ascontiguousarray(labels)
    n, p = F.shape
    J = labels.shape[1]
    m, q = len(Ft), J * vocab

    # Targets: one-hot of every column's label side by side, column j·V + label, so one solve serves
    # all columns, and one Gram matrix every set.  Standardising the features and centring both sides
    # (an intercept) is folded into the algebra instead of run as passes over F: the standardised Gram,
    # FᵀY and the held-out scores all follow from the raw products and (μ, σ).
    mu = F.mean(0, dtype=np.float64)
    gram = (F.T @ F).astype(np.float64) - n * np.outer(mu, mu)  # centred Fᵀ F
    sd = np.sqrt(np.maximum(np.diag(gram), 0.0) / n) + 1e-12
    gram /= np.outer(sd, sd)
    sums = np.zeros((J, vocab, p), np.float32)
    _label_sums(F, labels, sums)  # Σ of raw feature rows per (column, label)
    counts = np.bincount((np.arange(J)[None, :] * vocab + labels).ravel(), minlength=q)
    FtY = (sums.reshape(q, p) - counts[:, None] * mu) / sd  # (q, p): centred, standardised Fᵀ Y
    prior = counts / n  # class frequencies per column: the intercept
    Ft1 = np.empty((m, p + 1), np.float32)  # a column of ones carries the intercept in the matmul
    Ft1[:, :p], Ft1[:, p] = Ft, 1.0

    named = []
    for c in [np.arange(p)] if sets is None else sets:
        A = gram[np.ix_(c, c)].astype(np.float32)
        A[np.diag_indices_from(A)] += ridge * n  # the ridge keeps A well conditioned for float32
        Wsol = linalg.cho_solve(linalg.cho_factor(A, check_finite=False), FtY[:, c].T.astype(np.float32), check_finite=False)
        # scores = ((Ft − μ)/σ) W + prior = Ft (W/σ) + (prior − (μ/σ) W)
        W1 = np.empty((len(c) + 1, q), np.float32)
        W1[:-1] = Wsol / sd[c, None]
        W1[-1] = prior - (mu[c] / sd[c]) @ Wsol
        scores = Ft1[:, np.append(c, p)] @ W1  # (m, q)
        named.append(scores.reshape(m, J, vocab).argmax(-1))
    return named


def ridge_footprint(n: int, m: int, p: int, q: int) -> int:
    """Rough peak bytes of :func:`ridge_read` on n training and m held-out rows of p features, onto q
    one-hot targets (labels × vocabulary): its largest arrays, counted once each."""
    features = 8 * (n + m) * p  # float32, raw and standardised
    gram = 20 * p * p  # float32 product, float64 copy, the ridge system of the largest set
    solve = 24 * q * p  # Fᵀ Y in float32 and float64, the solution in float64 and float32
    scores = 8 * m * q  # held-out scores, and their sum with the prior
    return features + gram + solve + scores


def measure_footprint(cfg: DilutionConfig) -> float:
    """Rough peak bytes of ``measure_identity(cfg)``: its largest arrays, counted once each."""
    K, V, D, L, W = len(cfg.alphas), cfg.vocab, cfg.dim, cfg.max_lag, cfg.window
    p, q = W * K * D, V * (L + 1)  # decoder inputs, one-hot targets over all lags
    n, m = cfg.n_train, cfg.n_test
    # float64 embeddings and traces, their noise, the stored copy (float32, or float64 for float64)
    stored = 8 if cfg.precision == "float64" else 4
    traces = (8 + stored) * (n + m) * (K + 1) * D + (8 * (n + m) * K * D if cfg.noise > 0 else 0)
    if cfg.decoder == "peel":
        # residuals of every rate (float64) twice (a set's copy), the scores, the predictions
        return float(traces + 16 * m * K * D + 8 * m * V + 16 * m * (L + 1))
    return float(traces + ridge_footprint(n, m, p, q))


def measure_identity(cfg: DilutionConfig | None = None, **overrides) -> IdentityResult:
    """Name the token at each lag from the stored traces, by ``cfg.decoder``, and score it on
    held-out steps: a linear decoder trained on the earlier stretch, or the peel (no training)."""
    t_start = time.perf_counter()
    if cfg is None or overrides:  # build (and validate) from the given config plus any overrides
        cfg = DilutionConfig(**{**(cfg.model_dump() if cfg else {}), **overrides})
    # Small matrices (p ≤ a few hundred at the page's defaults): one BLAS thread (see ema_core/blas.py).
    with blas_limit(1):
        frame = _measure_peel(cfg) if cfg.decoder == "peel" else _measure(cfg)
    limits = limit_frame(cfg, cfg.alphas, cfg.decoder, frame)
    return IdentityResult(cfg, frame, 1.0 / cfg.vocab, time.perf_counter() - t_start, limits)


def _measure_peel(cfg: DilutionConfig) -> pd.DataFrame:
    stream = random_stream(cfg, cfg.alphas, cfg.seed)
    # The linear decoder's held-out steps: the two decoders are scored on the same tokens.
    test = np.arange(stream.first + cfg.n_train, len(stream.tokens))
    return peel_accuracy(stream, test, cfg, cfg.alphas)


# -- which limit applies ------------------------------------------------------------------------------
HORIZON_ACCURACY = 0.5  # a token is "named" at a lag while the decoder is right more often than not
# The peel misses the token once its projection, signal α(1−α)^k, no longer beats the largest of the
# V − 1 wrong tokens' error projections, about σ·√(2 ln V); measured, it misses at a signal of about
# 2σ (α = 0.5, every precision).  A token lost within twice that, SNR ≤ 2·√(2 ln V), was lost to
# the stored error; one lost while far above it (10× to 10⁶× in practice) was lost to something else.
ERROR_SLACK = 2.0
LIMIT_PRECISION, LIMIT_NOISE = "precision", "noise"
LIMIT_DILUTED, LIMIT_READOUT, LIMIT_BEYOND = "diluted", "read-out", "beyond max lag"


def measured_horizon(accuracy) -> int:
    """The first lag at which accuracy falls below ½ (``len(accuracy)`` when it never does)."""
    below = np.flatnonzero(np.asarray(accuracy, dtype=np.float64) < HORIZON_ACCURACY)
    return int(below[0]) if below.size else len(accuracy)


def error_threshold(vocab: int) -> float:
    """The SNR α(1−α)^h/σ at or below which a token lost at lag h counts as lost to the stored error."""
    return ERROR_SLACK * math.sqrt(2.0 * math.log(vocab))


def limit_frame(cfg: StreamConfig, alphas, decoder: str, accuracy: pd.DataFrame) -> pd.DataFrame:
    """One row per feature set of ``accuracy``: which limit applies, from the measured and analytic numbers.

    Columns: feature, alpha (NaN for all rates), sigma (the stored error per coordinate),
    analytic_horizon (k*), measured_horizon (first lag below ½ accuracy; max_lag + 1 when none),
    snr (the token's weight over σ at the measured horizon) and limit:

    * ``beyond max lag``: named at every lag measured;
    * ``precision`` / ``noise``: lost where its weight had fallen to within ``error_threshold`` of σ
      (whichever of rounding and noise is the larger part of σ): the stored trace no longer holds it;
    * ``diluted`` (peel) / ``read-out`` (linear): lost while its weight was still above that.  The
      peel knows everything but the older tokens, so what hides the token is their sum: the
      information is diluted for a decoder that names one token at a time.  For the linear decoder it
      is its read-out, as the peel shows by reading further.

    All rates together are judged by the rates that named at least the newest token alone (all of
    them if none did), since a rate that names nothing alone adds no lags: their best k* and SNR.
    A window of w states sees the token at lag k as lag k − (w − 1) of its oldest state: its k* and
    SNR are those of that state (the newer lags it inverts exactly).
    """
    a = validate_alphas(alphas)
    sigma = trace_sigma(a, cfg.vocab, cfg.dim, cfg.precision, cfg.noise)
    noisy = noise_limited(trace_power(a, cfg.vocab, cfg.dim), cfg.precision, cfg.noise)
    shift = cfg.window - 1
    kstar = analytic_horizon(a, sigma) + shift
    threshold = error_threshold(cfg.vocab)
    features = set(accuracy["feature"])
    rows, alone = [], {}
    for name, ks in rate_sets(a, include_all=True):
        if name not in features:
            continue
        acc = accuracy.loc[accuracy["feature"] == name].sort_values("lag")["accuracy"].to_numpy()
        h = measured_horizon(acc)
        if len(ks) > 1:
            readable = [k for k in ks if alone.get(k, 0) > 0]
            ks = np.array(readable) if readable else ks
        snrs = a[ks] * (1.0 - a[ks]) ** max(h - shift, 0) / sigma[ks]
        best = ks[int(np.argmax(snrs))]
        snr = float(snrs.max())
        if h >= len(acc):
            limit, snr = LIMIT_BEYOND, float("nan")
        elif snr <= threshold:
            limit = LIMIT_NOISE if noisy[best] else LIMIT_PRECISION
        else:
            limit = LIMIT_DILUTED if decoder == "peel" else LIMIT_READOUT
        if len(ks) == 1 and name != ALL_RATES:
            alone[int(ks[0])] = h
        rows.append((name, float(a[ks[0]]) if name != ALL_RATES else float("nan"), float(sigma[best]),
                     float(kstar[ks].max()), h, snr, limit))
    return pd.DataFrame(rows, columns=["feature", "alpha", "sigma", "analytic_horizon", "measured_horizon", "snr",
                                       "limit"])


@dataclass(frozen=True)
class LimitWording:
    """What :func:`limit_sentences` and :func:`limit_summary` speak of: by default the time axis's
    tokens in a trace, by lag; the depth explorer's are writes in a stream, by distance from the top
    (:func:`ema_core.depth.explorer.depth_wording`)."""

    item: str = "token"  # what a decoder names
    store: str = "trace"  # what holds it
    weight: str = "α(1−α)^k"  # an item's weight, as the pages write it
    horizon: str = "k*"  # the analytic horizon's symbol
    newest: str = "newest token"  # the item of largest weight
    top: str = "α"  # its weight
    span: str = "the lags measured"  # what the measurement covers
    at: str = "at"  # before the names of the sets the summary lists as diluted
    unlimited: str = "nothing limits within the lags measured"  # the summary's words where nothing does
    key: str = "feature"  # the limits' column that names a row
    names: dict[str, str] = field(default_factory=dict)  # a row's name in the text, where not the key's value
    place: Callable[[int], str] = "lag {}".format  # where the decoder loses it, from the measured horizon


TRACE_WORDING = LimitWording()


def limit_sentences(limits: pd.DataFrame, cfg: StreamConfig, decoder: str,
                    wording: LimitWording = TRACE_WORDING) -> list[str]:
    """What limits each feature set, one Markdown line each, worded from :func:`limit_frame`'s numbers.

    With another ``wording``, of any frame with limit_frame's columns (``cfg`` needs only a precision
    and a noise): the depth explorer's rules, said of writes.
    """
    w = wording
    error = f"{cfg.precision} rounding" + (f" and noise σ = {cfg.noise:g}" if cfg.noise > 0 else "")
    reader = "the peel" if decoder == "peel" else "the linear read-out"
    lines = []
    for r in limits.itertuples():
        name = getattr(r, w.key)
        whose = f"its best {w.store}'s" if name == ALL_RATES else "the"
        stored = f"{whose} stored error σ ≈ {r.sigma:.2g} per coordinate ({error})"
        # A negative k* means σ ≥ the newest item's weight: nothing stands above the stored error, so
        # there is no horizon to name (a negative lag would read as a number when it is an absence); an
        # infinite one, weights that stop falling (equal weights in depth): none of them reaches σ.
        has_k = 0 <= r.analytic_horizon < math.inf
        if has_k:
            k = f"{w.horizon} ≈ {r.analytic_horizon:.1f}"
            hides, until = f"would hide it from {k}", f"until {k}"
        elif r.analytic_horizon == math.inf:
            k = f"no analytic horizon {w.horizon}: the weights stop falling, no {w.item}'s weight reaches σ"
            hides, until = f"is below every {w.item}'s weight", f"({k})"
        else:
            k = f"no analytic horizon {w.horizon} (σ ≥ {w.top}: below the error from {w.place(0)})"
            hides = f"is above even the {w.newest}'s weight {w.top} (no analytic horizon {w.horizon})"
            until = f"(yet σ ≥ {w.top}: no analytic horizon {w.horizon})"
        lost = f"loses it from {w.place(r.measured_horizon)}"
        if r.limit == LIMIT_BEYOND:
            text = (f"not limited within {w.span}: {reader} names it up to {w.place(r.measured_horizon - 1)}; "
                    f"{stored} {hides}.")
        elif r.limit in (LIMIT_PRECISION, LIMIT_NOISE):
            text = (f"**{r.limit}-limited**: {reader} {lost}, where its weight {w.weight} is down to {r.snr:.2g}× "
                    f"{stored}; {'analytic horizon ' if has_k else ''}{k}. Past it the stored {w.store} no longer "
                    f"holds the {w.item}: more precision or less noise would move the limit.")
        elif r.limit == LIMIT_DILUTED:
            text = (f"**information diluted**: {reader} {lost} while its weight is still {r.snr:.3g}× {stored} "
                    f"({k}): the sum of the other {w.item}s hides it from a decoder that names one {w.item} at a "
                    f"time, not the precision; a more precise {w.store} would not bring it back.")
        else:
            text = (f"**read-out-limited**: {reader} {lost}, but the stored {w.store} keeps it {r.snr:.3g}× above "
                    f"{stored} {until}: the read-out loses it, not the stored {w.store} (the peel decoder shows "
                    "whether it is readable there or diluted).")
        lines.append(f"- **{w.names.get(name, name)}** — {text}")
    return lines


def limit_summary(limits: pd.DataFrame, wording: LimitWording = TRACE_WORDING) -> str:
    """One sentence: which limit applies to which rates (feature sets grouped by their limit); with
    another ``wording``, to which rows of its kind (the depth explorer's rules)."""
    w = wording
    words = {LIMIT_PRECISION: "precision limits", LIMIT_NOISE: "noise limits",
             LIMIT_DILUTED: f"the information is diluted (lost under the other {w.item}s, not the precision) {w.at}",
             LIMIT_READOUT: "the read-out limits",
             LIMIT_BEYOND: w.unlimited}
    parts = []
    for limit, group in limits.groupby("limit", sort=False):
        parts.append(f"{words[limit]} {', '.join(w.names.get(v, v) for v in group[w.key])}")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


def _measure(cfg: DilutionConfig) -> pd.DataFrame:
    a = np.asarray(cfg.alphas, dtype=np.float64)
    K, D, L, Wn = a.size, cfg.dim, cfg.max_lag, cfg.window
    stream = random_stream(cfg, cfg.alphas, cfg.seed)
    tokens, first = stream.tokens, stream.first
    # cast once, before the windows are gathered: the read-out computes in float32 (ridge_read)
    traces = stream.traces.astype(np.float32, copy=False)
    steps = np.arange(first, len(tokens))
    train, test = steps[: cfg.n_train], steps[cfg.n_train :]
    lags = np.arange(L + 1)[None, :]
    sets = feature_sets(a, Wn, D)
    named = ridge_read(window_features(traces, train, Wn, K, D), tokens[train[:, None] - lags],
                       window_features(traces, test, Wn, K, D), cfg.vocab, cfg.ridge, [c for _, c in sets])
    truth = tokens[test[:, None] - lags]  # (m, L + 1)
    rows = []
    for (name, _), names in zip(sets, named):
        acc = (names == truth).mean(0)
        rows.extend((name, lag, float(acc[lag])) for lag in range(L + 1))
    return pd.DataFrame(rows, columns=["feature", "lag", "accuracy"])
