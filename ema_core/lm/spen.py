"""SPEN — Sparse Predictive Equilibrium Network: a language model whose only context is three EMA traces.

The paper gives the parts of one block (Figure 1, PAPER.md §3) and leaves their form to us (§5
items 2, 7); this is ours, and ``docs/decisions.md`` says why.  Per token, with x the residual stream::

    x = wte[idx]                                   no positional embedding: order enters through the traces
    for each of n_layers blocks:
        u_t   = norm_1(x_t)                        (d,)     pre-norm
        h_t^(s) = EMA_α_s(u)_{t−1}                 (K, d)   traces of the PAST inputs u_{<t}, zero at t = 0,
                                                            α = (0.5, 0.1, 0.02), fixed buffers, never learned
        x̂_t   = predictor(h_{≤t}, u_{<t})         (d,)     :mod:`ema_core.lm.predictors`; never sees u_t
        e_t   = u_t − x̂_t                          (d,)     prediction error: the only way u_t enters the update
        m_t   = W_e e_t + W_h [h_t^(1); …; h_t^(K)] (d,)     Context Mix: [e; h] ((K+1)·d) down to d —
                                                            this projection is the bottleneck
        x_t  += W_2 · topk_k(gelu(W_1 · norm_2(m_t)))       sparse FFN, width d_ff, k = 6 % of d_ff kept
    logits = norm_f(x) · wteᵀ                      tied input/output embeddings

Causality.  The kernel's traces are inclusive (h_t holds x_t); SPEN scans the input shifted one step
(``u_prev``, zero at t = 0), so h_t holds u_{<t} only and x̂_t cannot copy the token it predicts
(PAPER.md §5 item 2).  Everything else is per position, so logits at t depend on tokens ≤ t only.

Sparse FFN.  k = max(1, round-half-up(topk_frac · d_ff)) units per token, chosen by value after the
activation (ties broken by ``torch.topk``); the others are set to zero in the forward pass.  The
gradient is straight-through by default: the backward treats the mask as the identity, so every
unit's pre-activation gets the gradient it would get in a dense FFN (W_2's gradient still sees the
sparse activations); ``topk_grad="masked"`` gives the plain gradient of the masked forward (dropped
units get none).  The matmuls stay dense: sparsity here is a representational constraint, not a
speed-up.

With the linear predictor, m = W_e u + (W_h − W_e W_p) h is linear in [u; h], so the predictor is
absorbed by the Context Mix: its prediction error shapes the parametrisation, not the function class.

Norms, init and the parameter count are the baseline's (:mod:`ema_core.lm.gpt`), so that the two
models differ only in how a token sees its context.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator, model_validator
from torch import nn

from ema_core.config import PAPER_ALPHAS, check_rates
from ema_core.lm.gpt import ModelShape, init_weights, make_norm
from ema_core.lm.predictors import PREDICTORS, PredictorChoice
from ema_core.scan import ema_scan


def topk_count(d_ff: int, frac: float) -> int:
    """k = max(1, round-half-up(frac·d_ff)); the 1e-9 keeps 0.06·25 = 1.4999… on the side of 1.5."""
    return max(1, math.floor(frac * d_ff + 0.5 + 1e-9))


def topk_mask(a: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the k largest entries along the last axis (exactly k per row)."""
    idx = a.topk(k, dim=-1, sorted=False).indices
    return torch.zeros_like(a, dtype=torch.bool).scatter_(-1, idx, True)


def topk_sparsify(a: torch.Tensor, k: int, grad: str = "straight_through") -> torch.Tensor:
    """Forward: a where the top-k mask holds, 0 elsewhere.  Backward: identity ("straight_through") or the mask ("masked")."""
    mask = topk_mask(a.detach(), k)
    if grad == "masked":
        return a * mask
    # a − (dropped part, detached): the forward value is exactly a·mask (x − x = 0 in floating
    # point), and the only path to a is the identity.
    return a - a.detach().masked_fill(mask, 0.0)


class SPENConfig(ModelShape, PredictorChoice):
    """Size and wiring of one SPEN (the shape it shares with the GPT, its predictor's choice, then its own);
    the seed is passed beside it."""

    topk_frac: float = Field(0.06, gt=0.0, le=1.0, description="share of FFN units kept per token (the paper: 6 %)")
    topk_grad: Literal["straight_through", "masked"] = Field(
        "straight_through", description="backward of the top-k mask: identity, or the mask itself"
    )
    alphas: tuple[float, ...] = Field(
        PAPER_ALPHAS, min_length=1, max_length=8, description="EMA rates α of the traces, fixed (the paper: 0.5, 0.1, 0.02)"
    )

    @field_validator("alphas")
    @classmethod
    def _rates(cls, v):
        return check_rates(v)

    @model_validator(mode="after")
    def _heads(self):
        if self.predictor != "linear" and self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        return self

    @property
    def k(self) -> int:
        return topk_count(self.d_ff, self.topk_frac)


class SparseFFN(nn.Module):
    def __init__(self, cfg: SPENConfig):
        super().__init__()
        self.k, self.grad = cfg.k, cfg.topk_grad
        self.c_fc = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.c_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        a = F.gelu(self.c_fc(x))  # (B, T, d_ff)
        return self.c_proj(topk_sparsify(a, self.k, self.grad))  # k of d_ff units nonzero per token


class SPENBlock(nn.Module):
    def __init__(self, cfg: SPENConfig):
        super().__init__()
        d, K = cfg.d_model, len(cfg.alphas)
        # α is part of the model's definition, so it travels in the state dict, but as a buffer:
        # never a parameter, never learned.  The scan reads the same values from the config
        # (validating a device tensor on every call would cost a host sync).
        self.register_buffer("alphas", torch.tensor(cfg.alphas, dtype=torch.float64))  # (K,)
        self.rates = cfg.alphas
        self.norm_1 = make_norm(cfg.norm, d)
        self.predictor = PREDICTORS[cfg.predictor](d, K, cfg.n_heads, cfg.attn_input)
        self.W_e = nn.Linear(d, d, bias=False)  # Context Mix, error part
        self.W_h = nn.Linear(K * d, d, bias=False)  # Context Mix, trace part
        self.norm_2 = make_norm(cfg.norm, d)
        self.ffn = SparseFFN(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def predict(self, x):
        """(u, h, x̂) for the block input x (B, T, d): the normed input, the past traces, the prediction."""
        u = self.norm_1(x)  # (B, T, d)
        u_prev = F.pad(u[:, :-1], (0, 0, 1, 0))  # (B, T, d): u_{t−1}, zero at t = 0
        h = ema_scan(u_prev, self.rates, backend="torch", validate=False).traces  # (B, T, K, d): traces of u_{<t}
        return u, h, self.predictor(h, u_prev)  # x̂: (B, T, d)

    def forward(self, x):
        u, h, x_hat = self.predict(x)
        e = u - x_hat  # (B, T, d)
        B, T, K, d = h.shape
        m = self.W_e(e) + self.W_h(h.reshape(B, T, K * d))  # [e; h] ((K+1)·d) -> (B, T, d)
        return x + self.drop(self.ffn(self.norm_2(m)))


class SPEN(nn.Module):
    def __init__(self, cfg: SPENConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):  # the default inits below are overwritten anyway
            self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.blocks = nn.ModuleList(SPENBlock(cfg) for _ in range(cfg.n_layers))
            self.norm_f = make_norm(cfg.norm, cfg.d_model)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        init_weights(self, seed, residual_std=0.02 / math.sqrt(cfg.n_layers))  # one residual add per block

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) token ids -> logits (B, T, V); position t sees tokens ≤ t only, any T."""
        x = self.wte(idx)  # (B, T, d)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm_f(x))  # (B, T, V)
