"""Depth dilution, explored: a stack of L layer writes added into one stream, analytic and measured.

The model.  Layer j = 0..L (0 is the embedding) writes w_j = g_j · e_j[x_j]: a random token x_j of V,
coded by its layer's own table e_j (V random codes of unit energy in D dimensions, drawn as the time
axis draws its embeddings), with the norm g_j = (1 + growth)^j (0 = equal norms; pre-norm streams
grow with depth).  The final stream is s = Σ_j c_j w_j, normalised so that the effective weights
a_j = c_j g_j / Σ_i c_i g_i add to one (the scale a final norm removes anyway): a stream and an EMA
trace are then both weighted averages of unit-energy codes, and the stored error σ means the same
on both axes.  The rules (:data:`ema_core.depth.EXPLORER_RULES`) set c_j:

* ``sum``:    c_j = 1 (the pre-norm residual).  a_{L−d} ∝ (1 + growth)^−d: with geometric growth
  the sum *is* an EMA over depth, of rate α = growth/(1 + growth) (:func:`twin_alpha`), cut at L + 1;
* ``decay``:  c_j = γ^(L−j): fixed decay over depth, a_{L−d} ∝ (γ/(1 + growth))^d;
* ``static``: c_j ∝ 1/g_j: the input-independent weighting that undoes the norm growth, a_j = 1/(L+1).
  Of all fixed weightings it maximises the worst layer's signal-to-interference (1/L for every
  layer), which is the best a DenseFormer-style learned static average can do for a reader of
  *every* layer;
* ``select``: the stream the reader of layer j gets is a softmax over the writes (normalised by their
  norms, as ``static``) whose logit is β for layer j and 0 elsewhere: a_j = e^β/(e^β + L).  β = 0 is
  ``static``; β → ∞ is reading the write alone.  An ideal selector: it knows which layer is wanted.

Analytic side.  Reading layer j, the other writes interfere: SIR_j = a_j² / (Σ_i a_i² − a_j²), the
time axis's w_k²/(α/(2−α) − w_k²) with a rule's weights in place of the lag weights.

Measured side, exactly as the time axis (:mod:`ema_core.dilution`): the stream is computed in
float64, Gaussian noise σ ``noise`` is added and the sum is rounded to ``precision``
(:func:`ema_core.dilution.store_trace`); x_j is named from the stored stream, on held-out stacks,
by a linear read-out (ridge onto one-hot labels, standardised features, an intercept; trained on
``n_train`` stacks) or by the peel (knows the tables and the weights: names the largest-weight
layer's token, subtracts its write, goes on to the next; no training).  The stored error σ sets the
analytic horizon d*, the distance from the top where a layer's weight falls to σ
(:func:`weight_horizon`); which limit applies is judged by the time axis's rule
(:func:`depth_limit_frame`).

Worked example: ``stream_weights("sum", 2, growth=1.0)`` is ``[[1/7, 2/7, 4/7]] * 3``: the top write
holds 4/7 of the stream, the embedding 1/7; its SIR is (1/49)/(16/49 + 4/49) = 1/20.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ema_core.blas import blas_limit
from ema_core.config import seed_field
from ema_core.depth import EXPLORER_RULES, RULE_LABELS, ExplorerRule
from ema_core.dilution import (
    LIMIT_BEYOND,
    LIMIT_DILUTED,
    LIMIT_NOISE,
    LIMIT_PRECISION,
    LIMIT_READOUT,
    NOISE_STREAM,
    LimitWording,
    error_threshold,
    lag_weights,
    limit_sentences,
    limit_summary,
    measure_footprint,
    measured_horizon,
    noise_limited,
    peel_weighted,
    rate_label,
    ridge_footprint,
    ridge_read,
    signal_to_interference,
    sir_of_weight,
    store_trace,
    stored_error,
)
from ema_core.dilution_config import Decoder, DilutionConfig, Precision, StreamConfig

# Whose codes a layer writes with: its own table (a layer's write is its own weights applied to its
# input, so its directions are its own), or one table for every layer, as the time axis's tokens.
# With one table and equal weights the stream says which tokens were written but not by which
# layer (a sum is symmetric): a question of order, not of dilution.
Codes = Literal["per_layer", "shared"]
CODES: tuple[str, ...] = get_args(Codes)
CODE_LABELS = {"per_layer": "a table per layer", "shared": "one shared table (as the time axis)"}

# The stream's settings the time axis has too, declared once there (StreamConfig, DilutionConfig):
# the same bounds, defaults and descriptions on both axes.
_STREAM = StreamConfig.model_fields
# Separate generators for the tables and the tokens, each drawn layer by layer: a deeper stack adds
# layers on top and keeps every lower layer's table and tokens, so moving L changes only what it adds.
_TABLES, _TOKENS = 0x7461626C, 0x746F6B73
MAX_LAYERS = 64  # the deepest stack; the "as L grows" chart runs up to it


class ExplorerConfig(BaseModel):
    """A stack of L + 1 writes under each rule, stored and decoded (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layers: int = Field(16, ge=1, le=MAX_LAYERS,
                        description="L: layers above the embedding; the stream adds L + 1 writes")
    growth: float = Field(0.2, ge=0.0, le=1.0, description="norm growth per layer: g_j = (1 + growth)^j")
    gamma: float = Field(0.8, ge=0.01, le=0.99, description="the decay rule's γ: c_j = γ^(L − j)")
    sharpness: float = Field(4.0, ge=0.0, le=30.0, description="the select rule's β: the logit of the layer read")
    codes: Codes = Field("per_layer", description="per_layer: each layer its own code table; shared: one table")
    rules: tuple[ExplorerRule, ...] = Field(EXPLORER_RULES, min_length=1, description="the rules measured")
    vocab: int = copy.copy(_STREAM["vocab"])
    dim: int = copy.copy(_STREAM["dim"])
    n_train: int = copy.copy(_STREAM["n_train"])
    n_test: int = copy.copy(_STREAM["n_test"])
    precision: Precision = copy.copy(_STREAM["precision"])
    noise: float = copy.copy(_STREAM["noise"])
    decoder: Decoder = Field("linear", description="linear: a ridge read-out trained on the stacks; "
                                                   "peel: knows the tables and the weights, no training")
    ridge: float = copy.copy(DilutionConfig.model_fields["ridge"])
    seed: int = seed_field("seed of the tables, the tokens, the noise and the split")

    @field_validator("rules")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"each rule once, got {list(v)}")
        return v


# -- the weights ----------------------------------------------------------------------------------------

def norm_growth(layers: int, growth: float) -> np.ndarray:
    """g_j = (1 + growth)^j for j = 0..L: (L + 1,)."""
    return (1.0 + growth) ** np.arange(layers + 1, dtype=np.float64)


def coefficients(rule: str, layers: int, growth: float = 0.0, gamma: float = 0.8, sharpness: float = 0.0,
                 read: int | None = None) -> np.ndarray:
    """c_j of ``rule`` for j = 0..L (unnormalised): (L + 1,).  ``select`` needs ``read``, the layer read."""
    j = np.arange(layers + 1)
    if rule == "sum":
        return np.ones(layers + 1)
    if rule == "decay":
        return gamma ** (layers - j).astype(np.float64)
    if rule == "static":
        return 1.0 / norm_growth(layers, growth)
    if rule == "select":
        if read is None or not 0 <= read <= layers:
            raise ValueError(f"select: read must name a layer 0..{layers}, got {read}")
        # softmax over the norm-undone writes, logit β on the layer read: e^β where j = read, else 1
        # (the softmax's normaliser is the stream's, applied in stream_weights).
        return np.where(j == read, math.exp(sharpness), 1.0) / norm_growth(layers, growth)
    raise ValueError(f"rule: one of {', '.join(EXPLORER_RULES)}, got {rule!r}")


def stream_weights(rule: str, layers: int, growth: float = 0.0, gamma: float = 0.8,
                   sharpness: float = 0.0) -> np.ndarray:
    """a[r, i]: the weight of layer i's code in the stream the reader of layer r gets, rows adding to
    one: (L + 1, L + 1).  Every row is the same but under ``select``, whose stream follows the reader."""
    g = norm_growth(layers, growth)
    rows = [coefficients(rule, layers, growth, gamma, sharpness, read=r if rule == "select" else None) * g
            for r in (range(layers + 1) if rule == "select" else [0])]
    a = np.array(rows)
    a /= a.sum(axis=1, keepdims=True)
    return a if rule == "select" else np.repeat(a, layers + 1, axis=0)


def read_weights(weights: np.ndarray) -> np.ndarray:
    """The weight of layer j in the stream read for j: the diagonal of :func:`stream_weights`."""
    return np.diag(weights).copy()


def weight_sir(weights: np.ndarray) -> np.ndarray:
    """a_j² / (Σ_i a_i² − a_j²) for each layer j read (rows of :func:`stream_weights`): (L + 1,); inf where
    the layer is all there is.  The time axis's SIR (:func:`ema_core.dilution.sir_of_weight`), with the
    stream's own energy."""
    return sir_of_weight(read_weights(weights), (weights**2).sum(axis=1))


def twin_alpha(growth: float) -> float:
    """The EMA rate whose lag weights fall as the sum rule's do over depth: α = growth/(1 + growth)
    (1 − α = 1/(1 + growth) per layer of distance); 0 for equal norms, an average with no decay."""
    return growth / (1.0 + growth)


def time_alpha(cfg: ExplorerConfig) -> float:
    """The time axis's rate beside the stack: α = 1 − γ, the trace whose weights fall by the decay
    rule's γ per step (with equal norms the decay rule is that trace, cut at depth L)."""
    return round(1.0 - cfg.gamma, 12)  # 1 − 0.8 is 0.19999999999999996: the slider's 0.2, not its float


def time_config(cfg: ExplorerConfig) -> DilutionConfig:
    """The time axis's measurement in the same terms: one trace of rate :func:`time_alpha`, lags 0..L,
    the same vocabulary, dimension, sample counts, storage, decoder, ridge and seed."""
    return DilutionConfig(alphas=(time_alpha(cfg),), vocab=cfg.vocab, dim=cfg.dim, max_lag=cfg.layers,
                          n_train=cfg.n_train, n_test=cfg.n_test, precision=cfg.precision, noise=cfg.noise,
                          decoder=cfg.decoder, ridge=cfg.ridge, seed=cfg.seed)


def _weights(cfg: ExplorerConfig, rule: str, layers: int | None = None) -> np.ndarray:
    return stream_weights(rule, cfg.layers if layers is None else layers, cfg.growth, cfg.gamma, cfg.sharpness)


def analytic_frame(cfg: ExplorerConfig) -> pd.DataFrame:
    """One row per (rule, layer): rule, layer j, distance L − j, weight (a_j in the stream read for j),
    sir and sir_db."""
    frames = []
    for rule in cfg.rules:
        a = _weights(cfg, rule)
        j = np.arange(cfg.layers + 1)
        frames.append(pd.DataFrame({"rule": rule, "layer": j, "distance": cfg.layers - j,
                                    "weight": read_weights(a), "sir": weight_sir(a)}))
    df = pd.concat(frames, ignore_index=True)
    with np.errstate(divide="ignore"):
        df["sir_db"] = 10.0 * np.log10(df["sir"])
    return df


def analytic_summary(cfg: ExplorerConfig) -> pd.DataFrame:
    """One row per rule, then the time axis's trace: the weight read and its SIR (dB) at distance 0 (the
    top write; the newest token) and at distance L (the embedding; the token at lag L)."""
    L = cfg.layers
    rows = []
    for rule in cfg.rules:
        a = _weights(cfg, rule)
        w, sir = read_weights(a), weight_sir(a)
        rows.append((RULE_LABELS[rule], w[L], w[0], sir[L], sir[0]))
    alpha = time_alpha(cfg)
    w, sir = lag_weights([alpha], L)[0], signal_to_interference([alpha], L)[0]
    rows.append((f"time axis: EMA trace {rate_label(alpha)}", w[0], w[L], sir[0], sir[L]))
    top, bottom = "weight at distance 0", f"weight at distance {L}"
    df = pd.DataFrame(rows, columns=["reads", top, bottom, "sir_0", "sir_L"])
    with np.errstate(divide="ignore"):
        df.insert(2, "SIR at distance 0 (dB)", 10.0 * np.log10(df.pop("sir_0")))
        df[f"SIR at distance {L} (dB)"] = 10.0 * np.log10(df.pop("sir_L"))
    return df


def embedding_sir_frame(cfg: ExplorerConfig, max_layers: int | None = None) -> pd.DataFrame:
    """As the stack deepens: the SIR of the embedding's write (layer 0, at distance L) for L = 1..max,
    per rule; and the time axis's, the token at lag L of the trace of rate :func:`time_alpha`.

    Columns: series (a rule, or ``"time"``), layers, sir, sir_db.
    """
    top = max_layers or MAX_LAYERS
    depths = np.arange(1, top + 1)
    rows = [(rule, int(L), float(weight_sir(_weights(cfg, rule, int(L)))[0])) for rule in cfg.rules for L in depths]
    trace = signal_to_interference([time_alpha(cfg)], top)[0]  # the time axis's own formula
    rows += [("time", int(L), float(trace[L])) for L in depths]
    df = pd.DataFrame(rows, columns=["series", "layers", "sir"])
    with np.errstate(divide="ignore"):
        df["sir_db"] = 10.0 * np.log10(df["sir"])
    return df


# -- the stored stream ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stack:
    """The measurement's data: tokens (n, L + 1) and the code tables (L + 1 or 1, V, D) float32."""

    tokens: np.ndarray
    tables: np.ndarray

    def table(self, j: int) -> np.ndarray:
        return self.tables[j if len(self.tables) > 1 else 0]


def random_stack(cfg: ExplorerConfig) -> Stack:
    """Tokens and tables, a pure function of (L, V, D, codes, sample counts, seed)."""
    n, N = cfg.n_train + cfg.n_test, cfg.layers + 1
    tables = 1 if cfg.codes == "shared" else N
    t_rng = np.random.default_rng([cfg.seed, _TABLES])
    # unit energy per code, float32 as the time axis's table (float64 copies of it are exact)
    E = (t_rng.standard_normal((tables, cfg.vocab, cfg.dim)) / math.sqrt(cfg.dim)).astype(np.float32)
    # drawn (layer, stack): layer j's tokens are the same whatever L is
    X = np.random.default_rng([cfg.seed, _TOKENS]).integers(0, cfg.vocab, size=(N, n)).T
    return Stack(np.ascontiguousarray(X), E)


def exact_stream(stack: Stack, weights: np.ndarray) -> np.ndarray:
    """Σ_j a_j e_j[x_j] in float64 for every stack: (n, D)."""
    out = np.zeros((len(stack.tokens), stack.tables.shape[-1]))
    for j, a in enumerate(np.asarray(weights, dtype=np.float64)):
        # gathered in float32, multiplied in float64: exact codes, one rounding of each product
        out += np.multiply(stack.table(j)[stack.tokens[:, j]], a, dtype=np.float64)
    return out


def stream_noise(cfg: ExplorerConfig, shape: tuple[int, int]) -> np.ndarray | None:
    """The noise added to every stored stream: one draw from the seed, the same for every rule (so the
    rules differ by their weights only), from its own generator (the time axis's noise tag)."""
    if cfg.noise <= 0:
        return None
    return cfg.noise * np.random.default_rng([cfg.seed, NOISE_STREAM]).standard_normal(shape)


def store_stream(exact: np.ndarray, noise: np.ndarray | None, precision: str) -> np.ndarray:
    """What a decoder reads: (exact + noise) rounded to ``precision`` (the time axis's store_trace)."""
    return store_trace(exact if noise is None else exact + noise, precision)


def stream_power(weights: np.ndarray, vocab: int, dim: int, codes: str = "per_layer") -> float:
    """E[s²] per coordinate of the stream of ``weights`` (one row, adding to one).

    The codes' spread about their table's mean, Σ a_i²·(1 − 1/V), plus the mean: with one shared table
    every write shares it, (Σ a_i)²/V = 1/V (the time axis's trace_power, a slow trace's mean); with a
    table per layer the means are independent, Σ a_i²/V.
    """
    w = np.asarray(weights, dtype=np.float64)
    s2 = float((w**2).sum())
    mean = float(w.sum()) ** 2 if codes == "shared" else s2
    return (s2 * (1.0 - 1.0 / vocab) + mean / vocab) / dim


def stream_sigma(weights: np.ndarray, cfg: ExplorerConfig) -> tuple[float, bool]:
    """(σ, noisy): the stored stream's error per coordinate, √(noise² + σ_round²), by the time axis's
    rounding law (:func:`ema_core.dilution.stored_error`); ``noisy`` where the noise is the larger part."""
    power = stream_power(weights, cfg.vocab, cfg.dim, cfg.codes)
    return (float(stored_error(power, cfg.precision, cfg.noise)),
            bool(noise_limited(power, cfg.precision, cfg.noise)))


# -- the decoders ----------------------------------------------------------------------------------------

def peel_order(weights: np.ndarray) -> np.ndarray:
    """The layers in the order the peel names them: largest weight first, ties top first (the time
    axis's newest first)."""
    w = np.asarray(weights)
    return np.lexsort((-np.arange(len(w)), -w))


def peel_layers(streams: np.ndarray, stack: Stack, weights: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Name the token of each layer of ``order`` in turn from ``streams`` (m, D): (m, len(order)).

    The time axis's peel (:func:`ema_core.dilution.peel_weighted`) of one sum whose steps are the layers
    of ``order``: step s is layer order[s]'s code, in its table, with weight a_{order[s]}, so the decay
    from one step to the next is the ratio of their weights.  (On the time axis a_i = α(1−α)^k, the
    newest first: the decay is 1 − α at every step.)
    """
    w = np.asarray(weights, dtype=np.float64)[np.asarray(order)]
    with np.errstate(divide="ignore", invalid="ignore"):  # a weight that underflowed to 0: nothing to peel
        decay = w[1:] / w[:-1]
    return peel_weighted(np.asarray(streams)[:, None], [stack.table(int(i)) for i in order], w[:1], decay[None])


# -- the measurement ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DepthResult:
    """Measured identity of each layer's write: ``accuracy`` has columns rule, layer, distance,
    accuracy; ``limits`` one row per rule (:func:`depth_limit_frame`)."""

    config: ExplorerConfig
    accuracy: pd.DataFrame
    limits: pd.DataFrame
    chance: float
    seconds: float


def _decode_rule(cfg: ExplorerConfig, stack: Stack, noise, rule: str) -> np.ndarray:
    """Accuracy of naming x_j for j = 0..L under ``rule``, on the held-out stacks: (L + 1,)."""
    a = _weights(cfg, rule)
    n, N = cfg.n_train, cfg.layers + 1
    truth = stack.tokens[n:]
    if rule != "select":  # one stream serves every reader
        stored = store_stream(exact_stream(stack, a[0]), noise, cfg.precision)
        if cfg.decoder == "peel":
            order = peel_order(a[0])
            named = np.empty_like(truth)
            named[:, order] = peel_layers(stored[n:], stack, a[0], order)
        else:
            named = ridge_read(stored[:n], stack.tokens[:n], stored[n:], cfg.vocab, cfg.ridge)[0]
        return (named == truth).mean(axis=0)
    # select: the reader of layer j gets its own stream, u·Σ_i e_i[x_i] + (p − u)·e_j[x_j], with p the
    # selected layer's weight and u every other's (the same in every row: L ≥ 1, so there is another)
    p, u = a[0, 0], a[0, 1]
    # the peel needs no training: only the held-out stacks' streams are built
    rows = slice(n, None) if cfg.decoder == "peel" else slice(None)
    held = Stack(stack.tokens[rows], stack.tables)
    base = exact_stream(held, np.full(N, u))
    acc = np.empty(N)
    for j in range(N):
        exact = base + np.multiply(held.table(j)[held.tokens[:, j]], p - u, dtype=np.float64)
        stored = store_stream(exact, None if noise is None else noise[rows], cfg.precision)
        if cfg.decoder == "peel":  # the selected layer leads: it is named first, from the stream alone
            named = peel_layers(stored, held, a[j], np.array([j]))[:, 0]
        else:
            named = ridge_read(stored[:n], held.tokens[:n, [j]], stored[n:], cfg.vocab, cfg.ridge)[0][:, 0]
        acc[j] = float((named == truth[:, j]).mean())
    return acc


def measure_depth(cfg: ExplorerConfig | None = None, **overrides) -> DepthResult:
    """Name each layer's token from the stored stream under each rule, by ``cfg.decoder``, on held-out
    stacks; and judge which limit applies (:func:`depth_limit_frame`)."""
    t_start = time.perf_counter()
    if cfg is None or overrides:
        cfg = ExplorerConfig(**{**(cfg.model_dump() if cfg else {}), **overrides})
    stack = random_stack(cfg)
    noise = stream_noise(cfg, (len(stack.tokens), cfg.dim))
    rows = []
    with blas_limit(1):  # small matrices (p = D): one BLAS thread (see ema_core/blas.py)
        for rule in cfg.rules:
            acc = _decode_rule(cfg, stack, noise, rule)
            rows += [(rule, j, cfg.layers - j, float(acc[j])) for j in range(cfg.layers + 1)]
    frame = pd.DataFrame(rows, columns=["rule", "layer", "distance", "accuracy"])
    return DepthResult(cfg, frame, depth_limit_frame(cfg, frame), 1.0 / cfg.vocab, time.perf_counter() - t_start)


def depth_footprint(cfg: ExplorerConfig) -> float:
    """Rough peak bytes of :func:`measure_depth`: its largest arrays, counted once each."""
    N, V, D = cfg.layers + 1, cfg.vocab, cfg.dim
    n, m = cfg.n_train, cfg.n_test
    tables = 12 * (1 if cfg.codes == "shared" else N) * V * D  # float32, and a float64 copy of one
    tokens = 8 * (n + m) * N
    streams = 8 * (n + m) * D * 5  # base, exact, noise, stored, a layer's gathered codes
    if cfg.decoder == "peel":
        return float(tables + tokens + streams + 16 * m * (V + D) + 8 * m * N)
    # the read-out's targets: every layer's token, one of V
    return float(tables + tokens + streams + ridge_footprint(n, m, D, N * V))


def explorer_footprint(cfg: ExplorerConfig) -> float:
    """Rough peak bytes of the page's two measurements, the stack's and the time axis's."""
    return max(depth_footprint(cfg), measure_footprint(time_config(cfg)))


# -- which limit applies -----------------------------------------------------------------------------------

FLAT_STEP = 1e-9  # a log-weight step smaller than this is no fall: equal weights, up to their rounding


def weight_horizon(weights, sigma: float) -> float:
    """d*: the distance where the read weight (``weights[d]`` at distance d = 0..L) falls to σ.

    Log-linear between the two distances that bracket σ (exact for the geometric profiles of ``sum``
    and ``decay``); past the stack, extended at its last step's rate, and inf where the weights stop
    falling (``static``, ``select``); negative where even the top write's weight is at or below σ.
    """
    lw = np.log(np.asarray(weights, dtype=np.float64))
    ls = math.log(sigma) if sigma > 0 else -math.inf
    below = np.flatnonzero(lw <= ls)
    if below.size and below[0] == 0:
        return -1.0 if len(lw) < 2 or lw[1] - lw[0] > -FLAT_STEP else float((ls - lw[0]) / (lw[1] - lw[0]))
    if below.size:
        d = int(below[0])
        return float(d - 1 + (ls - lw[d - 1]) / (lw[d] - lw[d - 1]))
    step = lw[-1] - lw[-2] if len(lw) > 1 else 0.0
    # a flat profile's last step is a rounding error away from 0 (either side): it does not fall
    flat = step > -FLAT_STEP
    return math.inf if flat or not math.isfinite(ls) else float(len(lw) - 1 + (ls - lw[-1]) / step)


def depth_limit_frame(cfg: ExplorerConfig, accuracy: pd.DataFrame) -> pd.DataFrame:
    """One row per rule: which limit applies, by the time axis's rule (:func:`ema_core.dilution.limit_frame`).

    Columns: rule, sigma, analytic_horizon (d*), measured_horizon (the first distance from the top
    where accuracy falls below ½; L + 1 when none), snr (the read weight at that distance over σ) and
    limit: ``beyond max lag`` (every layer named), ``precision``/``noise`` (lost where the weight had
    fallen to within the error threshold of σ), else ``diluted`` (peel) or ``read-out`` (linear).
    """
    threshold = error_threshold(cfg.vocab)
    rows = []
    for rule in cfg.rules:
        a = _weights(cfg, rule)
        sigma, noisy = stream_sigma(a[-1], cfg)  # every row of a rule has the same power
        by_distance = read_weights(a)[::-1]  # distance d = L − j
        acc = accuracy.loc[accuracy["rule"] == rule].sort_values("distance")["accuracy"].to_numpy()
        h = measured_horizon(acc)
        snr = float(by_distance[min(h, cfg.layers)] / sigma)
        if h >= len(acc):
            limit, snr = LIMIT_BEYOND, float("nan")
        elif snr <= threshold:
            limit = LIMIT_NOISE if noisy else LIMIT_PRECISION
        else:
            limit = LIMIT_DILUTED if cfg.decoder == "peel" else LIMIT_READOUT
        rows.append((rule, sigma, weight_horizon(by_distance, sigma), h, snr, limit))
    return pd.DataFrame(rows, columns=["rule", "sigma", "analytic_horizon", "measured_horizon", "snr", "limit"])


def depth_wording(layers: int) -> LimitWording:
    """The limit sentences' words for a stack of ``layers``: writes in a stream, by distance from the top
    (the layer lost at distance d is L − d)."""
    return LimitWording(item="write", store="stream", weight="a_j", horizon="d*", newest="top write", top="a_L",
                        span="the stack", at="under", unlimited="nothing limits within the stack under", key="rule",
                        names=RULE_LABELS, place=lambda d: f"distance {d} (layer {layers - d})")


def depth_limit_sentences(limits: pd.DataFrame, cfg: ExplorerConfig) -> list[str]:
    """What limits each rule, one Markdown line each: the time axis's limit_sentences, said of layers."""
    return limit_sentences(limits, cfg, cfg.decoder, depth_wording(cfg.layers))


def depth_limit_summary(limits: pd.DataFrame) -> str:
    """One sentence: which limit applies to which rules (the time axis's limit_summary, of writes)."""
    # a summary names the rules, never where a write is lost: the depth of the stack does not enter
    return limit_summary(limits, depth_wording(0))
