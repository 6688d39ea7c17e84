"""SPCN — Sparse Predictive Column Network: frozen random projections, top-k, EMA traces, local learning.

The paper names the parts (PAPER.md §2) and leaves their wiring to us (§5 item 1); this is ours,
and ``docs/decisions.md`` says why.  For a token stream ``x_1..x_T`` (word ids) with sentence
starts marked::

    c_t  = code(x_t)                       (d,)   a fixed random code per word id: a word never
                                                  seen before gets a fresh code, never a trained one
    u_t  = standardise(P c_t)              (N,)   P (N, d) frozen random projection
    f_t  = topk(u_t)                       (N,)   feed-forward sparse code, k of N units are 1
    g_t  = EMA_α(f)_t for α in rates       (K, N) input traces (the foundation's scan kernel),
                                                  reset at sentence starts when configured
    p_t  = W · g_{t−1}                     (N,)   each column predicts its next input from the
                                                  traces of the *past* inputs only
    e_t  = f_t − p_t                       (N,)   prediction error
    a_t  = topk(u_t + γ · p_t)             (N,)   the column state: input, biased by what the
                                                  context predicted (γ = context_gain)
    h_t  = EMA_α(a)_t                      (K, N) the traces a probe reads

Learning (``hebbian_step``), the only thing that changes, with no labels and no gradients: the
weights into unit i move by its precision-weighted error times the presynaptic trace,
``ΔW_ij = η · π_i · e_i · g_j`` averaged over a batch of tokens — a local, error-driven Hebbian
(delta) rule.  The precision π_i is the inverse of unit i's running error variance, normalised to
mean 1 over units and clipped: a unit whose input the context predicts reliably learns at full
rate, a unit whose input is noise learns slowly (precision gating).  ``W`` starts at zero, so
an untrained SPCN is the pure feed-forward code: ``p = 0`` and ``a = f``.

The API takes token ids and sentence starts, never roles: SPCN cannot see a label.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ema_core.config import PAPER_ALPHAS, check_rates
from ema_core.scan import ema_scan

FEATURE_SETS = ("instantaneous", "traces", "both")


class SPCNConfig(BaseModel):
    """The knobs of SPCN; the seed is passed beside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code_dim: int = Field(64, ge=2, le=4096, description="size of each word's fixed random input code")
    units: int = Field(256, ge=4, le=8192, description="columns N (projection size)")
    k: int = Field(16, ge=1, le=4096, description="active units per token (top-k)")
    rates: tuple[float, ...] = Field(PAPER_ALPHAS, min_length=1, max_length=8, description="EMA rates α of the traces")
    reset_at_sentence: bool = Field(True, description="traces restart at each sentence's first token")
    context_gain: float = Field(4.0, ge=0.0, le=100.0, description="γ: weight of the prediction in the column state (0: none)")
    lr: float = Field(0.05, gt=0.0, le=10.0, description="η of the Hebbian update")
    batch: int = Field(64, ge=1, le=65_536, description="tokens per Hebbian update")
    passes: int = Field(3, ge=0, le=1000, description="passes over the training stream (0: untrained)")
    precision_rate: float = Field(0.05, gt=0.0, le=1.0, description="rate of the running error variance behind the precision")
    precision_clip: float = Field(4.0, ge=1.0, le=1e6, description="largest precision weight (precisions have mean 1)")

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        return check_rates(v, distinct=True)

    def model_post_init(self, _context) -> None:
        if self.k >= self.units:
            raise ValueError(f"k must be below units (a sparse code), got k={self.k}, units={self.units}")


@dataclass
class SPCNState:
    """Everything that defines a (trained) SPCN: frozen parts from the seed, W and the precision."""

    W: np.ndarray  # (N, K·N) prediction weights, float64
    err_var: np.ndarray  # (N,) running error variance per unit
    updates: int = 0

    def as_checkpoint(self) -> dict:
        return {"W": torch.from_numpy(self.W.copy()), "err_var": torch.from_numpy(self.err_var.copy()),
                "updates": self.updates}

    @classmethod
    def from_checkpoint(cls, state: dict) -> "SPCNState":
        return cls(state["W"].numpy().copy(), state["err_var"].numpy().copy(), int(state["updates"]))


class SPCN:
    """Frozen parts (codes, projection) are a pure function of (config, seed); ``state`` is learned."""

    def __init__(self, cfg: SPCNConfig, seed: int, state: SPCNState | None = None):
        self.cfg, self.seed = cfg, int(seed)
        rng = np.random.default_rng(np.random.SeedSequence((self.seed, 0x5C0)))
        # Gaussian columns scaled so u has unit variance per unit before standardisation.
        self.P = rng.standard_normal((cfg.units, cfg.code_dim)) / np.sqrt(cfg.code_dim)
        K, N = len(cfg.rates), cfg.units
        self.state = state or SPCNState(np.zeros((N, K * N)), np.full(N, float(cfg.k) / N))

    # -- the frozen front end -------------------------------------------------------------------
    def codes(self, tokens: np.ndarray) -> np.ndarray:
        """(T, d) fixed random codes: each word id's code is drawn from its own stream of (seed, id).

        Keyed by id rather than a table, so any id — including novel words ≥ 147 — has a code, and
        two runs agree on a word's code whatever else they have seen.
        """
        ids = np.asarray(tokens, dtype=np.int64)
        uniq, inv = np.unique(ids, return_inverse=True)
        table = np.stack([np.random.default_rng(np.random.SeedSequence((self.seed, 0xC0DE, int(w))))
                          .standard_normal(self.cfg.code_dim) for w in uniq]) if len(uniq) else \
            np.zeros((0, self.cfg.code_dim))
        return table[inv]

    def drive(self, tokens: np.ndarray) -> np.ndarray:
        """(T, N) standardised feed-forward drive u_t."""
        u = self.codes(tokens) @ self.P.T
        return (u - u.mean(1, keepdims=True)) / (u.std(1, keepdims=True) + 1e-12)

    def traces(self, x: np.ndarray, sentence_start: np.ndarray) -> np.ndarray:
        """(T, K·N) EMA traces of x (T, N) at every rate, rate-major, via the scan kernel."""
        T, N = x.shape
        reset = sentence_start if self.cfg.reset_at_sentence else np.zeros(T, dtype=bool)
        # The torch path: on one thread its arithmetic order is fixed, so a resumed run sees the very
        # same features (the numba path splits long streams by thread count, changing last bits).
        res = ema_scan(x[None], np.asarray(self.cfg.rates), reset=np.asarray(reset, dtype=bool)[None],
                       backend="torch")
        return np.asarray(res.traces[0]).reshape(T, len(self.cfg.rates) * N)

    def past(self, g: np.ndarray, sentence_start: np.ndarray) -> np.ndarray:
        """g_{t−1} for each t: the traces before the token arrives (zero at a reset, causal by shift)."""
        prev = np.zeros_like(g)
        prev[1:] = g[:-1]
        if self.cfg.reset_at_sentence:
            prev[np.asarray(sentence_start, dtype=bool)] = 0.0
        return prev

    # -- forward --------------------------------------------------------------------------------
    def run(self, tokens: np.ndarray, sentence_start: np.ndarray) -> dict[str, np.ndarray]:
        """Every quantity of the module docstring for a stream, with the current weights."""
        u = self.drive(tokens)
        f = topk_mask(u, self.cfg.k)
        g_prev = self.past(self.traces(f, sentence_start), sentence_start)
        p = g_prev @ self.state.W.T
        a = topk_mask(u + self.cfg.context_gain * p, self.cfg.k) if self.cfg.context_gain else f
        return {"u": u, "f": f, "g_prev": g_prev, "p": p, "e": f - p, "a": a}

    def features(self, tokens: np.ndarray, sentence_start: np.ndarray) -> dict[str, np.ndarray]:
        """What a probe reads: the column state a_t, its traces h_t, and both side by side."""
        a = self.run(tokens, sentence_start)["a"]
        h = self.traces(a, sentence_start)
        return {"instantaneous": a, "traces": h, "both": np.concatenate([a, h], axis=1)}

    def prediction_error(self, tokens: np.ndarray, sentence_start: np.ndarray) -> float:
        """Mean squared prediction error per token (summed over units)."""
        e = self.run(tokens, sentence_start)["e"]
        return float((e * e).sum(1).mean())

    # -- learning -------------------------------------------------------------------------------
    def train(self, tokens: np.ndarray, sentence_start: np.ndarray, *, passes: int | None = None,
              on_pass=None, should_stop=None) -> list[float]:
        """Hebbian passes over a stream, in batches of consecutive tokens; returns the error per batch.

        The input traces do not depend on W (they trace f, not a), so they are computed once and
        every update reads them; what changes is p and e.  ``on_pass(pass_index, mean_error)`` after
        each pass; ``should_stop()`` is polled between batches and stops early when True (the state
        then holds the updates made so far).
        """
        u = self.drive(tokens)
        f = topk_mask(u, self.cfg.k)
        g_prev = self.past(self.traces(f, sentence_start), sentence_start)
        B, errors = self.cfg.batch, []
        for pi in range(self.cfg.passes if passes is None else passes):
            batch_err = []
            for s in range(0, len(f), B):
                if should_stop is not None and should_stop():
                    return errors
                batch_err.append(hebbian_step(self.state, g_prev[s:s + B], f[s:s + B], self.cfg))
            errors += batch_err
            if on_pass is not None:
                on_pass(pi, float(np.mean(batch_err)))
        return errors


def topk_mask(x: np.ndarray, k: int) -> np.ndarray:
    """(T, N) float64 with 1 at each row's k largest entries (ties broken by the lower index)."""
    # argsort with a stable kind, on −x: equal values keep index order, so the result is one
    # deterministic function of x (argpartition's choice among ties is not specified).
    idx = np.argsort(-x, axis=1, kind="stable")[:, :k]
    out = np.zeros(x.shape, dtype=np.float64)
    np.put_along_axis(out, idx, 1.0, axis=1)
    return out


def precision(err_var: np.ndarray, clip: float) -> np.ndarray:
    """π (N,): inverse error variance normalised to mean 1, clipped to [0, clip]."""
    inv = 1.0 / (err_var + 1e-6)
    return np.minimum(inv / inv.mean(), clip)


def hebbian_step(state: SPCNState, g_prev: np.ndarray, f: np.ndarray, cfg: SPCNConfig) -> float:
    """One local update from a batch: ΔW = η/B · Σ_t (π ⊙ e_t) g_{t−1}ᵀ; returns the batch's mean error.

    The precision used is the one from before the batch (what the unit knew when the errors came);
    the running variance then takes in this batch's errors.  In place on ``state``.
    """
    e = f - g_prev @ state.W.T  # (b, N)
    pi = precision(state.err_var, cfg.precision_clip)
    state.W += (cfg.lr / len(f)) * (pi[:, None] * (e.T @ g_prev))
    state.err_var += cfg.precision_rate * ((e * e).mean(0) - state.err_var)
    state.updates += 1
    return float((e * e).sum(1).mean())
