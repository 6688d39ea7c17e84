"""SPEN's predictors: x̂_t from the EMA traces of the past (PAPER.md §3, the predictor ablation).

Every predictor reads the same inputs and returns the same thing::

    h       (B, T, K, d)  h_t^(s): the K traces of u_{<t} (traces of the *past* only, zero at t = 0)
    u_prev  (B, T, d)     u_{t−1}: the block's (normed) input one step back, zero at t = 0
    x̂       (B, T, d)     the prediction of u_t

Nothing here sees u_t, so x̂_t never contains the token it predicts.  The query of every attention
predictor is the current trace state ``q_t = W_q [h_t^(1); …; h_t^(K)]``; what it attends over is
``attn_input`` (PAPER.md §5 item 9):

* ``"state"``    — the K trace vectors of step t only, a set of K keys/values per position:
                   ``k_s = W_k h_t^(s) + r_s`` (r_s a learned rate embedding, so the set is not
                   blind to which rate is which), ``v_s = W_v h_t^(s)``.  The predictor sees only
                   the current state, where the data processing inequality applies cleanly.
* ``"sequence"`` — causal attention over time: keys/values from the trace state at every τ ≤ t,
                   ``k_τ = W_k [h_τ^(1); …; h_τ^(K)]``.  Those traces hold u_{<τ}, so this is still
                   causal; but an EMA *sequence* is invertible, so identity is in principle
                   recoverable here.
* ``"tokens"``   — the raw-token control: keys/values from u_τ for τ < t (``u_prev``; its zero
                   row at τ = 0 is a null slot that gives every query something to attend to),
                   i.e. attention with identity still present.

``linear`` is a static map of the current state and has no attention input: it accepts
``"state"`` only (any other value is an error, so two configs never name the same model).
:class:`PredictorChoice` declares the two settings and that rule once; SPEN's config and the lm
experiment's config both inherit it, so a choice is validated where it is typed, and only there.
Linear attention uses the positive feature map φ(z) = elu(z) + 1 and the usual normaliser
``Σ φ(q)·φ(k)``; over time it is causal through cumulative sums, computed in chunks.
"""
from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

AttnInput = Literal["state", "sequence", "tokens"]
ATTN_INPUTS: tuple[str, ...] = get_args(AttnInput)


def phi(z: torch.Tensor) -> torch.Tensor:
    """The positive feature map of linear attention (Katharopoulos et al. 2020)."""
    return F.elu(z) + 1.0


def causal_linear_attention(q, k, v, chunk: int = 64, eps: float = 1e-6):
    """out_t = Σ_{τ≤t} (q_t·k_τ) v_τ / Σ_{τ≤t} q_t·k_τ for non-negative q, k: (B, H, T, ·).

    Chunked so nothing loops over time and no (T, dk, dv) state is materialised: inside a chunk
    a masked (C, C) product, across chunks the exclusive cumulative sum of the chunk states.
    The normaliser rides along as one extra column of ones in v.

    Causal bit for bit: no later position enters any sum that an earlier output reads, not even
    as a term added and cancelled.  Inside a chunk the scores of later keys are zeroed by the
    mask *before* they meet v, and a product by an exact zero adds an exact zero; across chunks
    the prefix is exclusive by construction (a shift, never a subtraction).
    """
    B, H, T, dk = q.shape
    v1 = torch.cat([v, v.new_ones(B, H, T, 1)], dim=-1)  # (B, H, T, dv + 1)
    C = min(chunk, T)
    N = -(-T // C)
    pad = N * C - T
    if pad:  # zero keys after the end add nothing to any sum
        q, k, v1 = (F.pad(z, (0, 0, 0, pad)) for z in (q, k, v1))
    qc = q.reshape(B, H, N, C, dk)
    kc = k.reshape(B, H, N, C, dk)
    vc = v1.reshape(B, H, N, C, -1)  # (B, H, N, C, dv + 1)
    intra = torch.matmul(qc, kc.transpose(-1, -2)).tril() @ vc  # (B, H, N, C, dv + 1)
    S = kc.transpose(-1, -2) @ vc  # (B, H, N, dk, dv + 1): one chunk's Σ k vᵀ
    # The state entering chunk n is the sum over chunks < n only, built as an *exclusive* prefix
    # sum: a zero state, then the inclusive sums of chunks 0..n−1.  Never `S.cumsum(2) − S`: that
    # adds chunk n's own state and subtracts it again, and the rounding of that round trip lets a
    # later token in chunk n move the outputs of earlier positions of the same chunk (4.5e-8 in
    # float32).  With the shift, output t is a function of positions ≤ t only, bit for bit.
    S = torch.cat([torch.zeros_like(S[:, :, :1]), S[:, :, :-1].cumsum(2)], dim=2)
    y = intra + qc @ S  # (B, H, N, C, dv + 1)
    y = y.reshape(B, H, N * C, -1)[:, :, :T]  # (B, H, T, dv + 1)
    return y[..., :-1] / y[..., -1:].clamp_min(eps)


class LinearPredictor(nn.Module):
    """x̂_t = W [h_t^(1); …; h_t^(K)]: a static linear read-out of the current trace state."""

    def __init__(self, d: int, K: int, n_heads: int, attn_input: str = "state"):
        super().__init__()  # attn_input is "state": PredictorChoice refuses any other with the config
        self.W = nn.Linear(K * d, d, bias=False)

    def forward(self, h, u_prev):
        B, T, K, d = h.shape
        return self.W(h.reshape(B, T, K * d))  # (B, T, K·d) -> (B, T, d)


class _TraceAttention(nn.Module):
    """Shared by both attention predictors; ``kind`` says how scores become weights."""

    kind = ""

    def __init__(self, d: int, K: int, n_heads: int, attn_input: str = "state", chunk: int = 64):
        super().__init__()
        # attn_input was checked with the config (PredictorChoice); the heads are this module's own rule
        if d % n_heads:
            raise ValueError(f"d_model ({d}) must be divisible by n_heads ({n_heads})")
        self.attn_input, self.n_heads, self.chunk = attn_input, n_heads, chunk
        d_src = K * d if attn_input == "sequence" else d  # what one key/value is read from
        self.W_q = nn.Linear(K * d, d, bias=False)
        self.W_k = nn.Linear(d_src, d, bias=False)
        self.W_v = nn.Linear(d_src, d, bias=False)
        self.W_o = nn.Linear(d, d, bias=False)
        if attn_input == "state":
            self.r = nn.Parameter(torch.zeros(K, d))  # rate embedding: which trace a key came from

    def forward(self, h, u_prev):
        B, T, K, d = h.shape
        H = self.n_heads
        q = self.W_q(h.reshape(B, T, K * d))  # (B, T, K·d) -> (B, T, d)
        if self.attn_input == "state":
            k = (self.W_k(h) + self.r).reshape(B, T, K, H, d // H)  # (B, T, K, d) -> (B, T, K, H, dh)
            v = self.W_v(h).reshape(B, T, K, H, d // H)  # (B, T, K, H, dh)
            y = self._over_set(q.reshape(B, T, H, d // H), k, v)  # (B, T, H, dh)
        else:
            src = h.reshape(B, T, K * d) if self.attn_input == "sequence" else u_prev  # (B, T, d_src)
            q, k, v = (z.reshape(B, T, H, d // H).transpose(1, 2) for z in (q, self.W_k(src), self.W_v(src)))  # (B, H, T, dh)
            y = self._over_time(q, k, v).transpose(1, 2)  # (B, H, T, dh) -> (B, T, H, dh)
        return self.W_o(y.reshape(B, T, d))  # (B, T, H, dh) -> (B, T, d)


class SoftmaxAttentionPredictor(_TraceAttention):
    """Full softmax attention, scaled dot products, one softmax per head."""

    kind = "softmax_attention"

    def _over_set(self, q, k, v):
        # q (B, T, H, dh), k/v (B, T, K, H, dh): K = 3 keys per position, a tiny batched op
        s = torch.einsum("bthd,btkhd->bthk", q, k) * q.shape[-1] ** -0.5  # (B, T, H, K)
        return torch.einsum("bthk,btkhd->bthd", s.softmax(-1), v)

    def _over_time(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class LinearAttentionPredictor(_TraceAttention):
    """Linear attention, φ = elu + 1, normalised; causal cumulative sums over time."""

    kind = "linear_attention"

    def _over_set(self, q, k, v):
        s = torch.einsum("bthd,btkhd->bthk", phi(q), phi(k))  # (B, T, H, K), all > 0
        return torch.einsum("bthk,btkhd->bthd", s / s.sum(-1, keepdim=True), v)

    def _over_time(self, q, k, v):
        return causal_linear_attention(phi(q), phi(k), v, chunk=self.chunk)


PREDICTORS: dict[str, type[nn.Module]] = {
    "linear": LinearPredictor,
    "linear_attention": LinearAttentionPredictor,
    "softmax_attention": SoftmaxAttentionPredictor,
}


Predictor = Literal[tuple(PREDICTORS)]  # the registry's names, typed: a name not in it is refused by the config


class PredictorChoice(BaseModel):
    """SPEN's predictor and what its attention reads, with the one rule that pairs them.

    A base both configs inherit (:class:`ema_core.lm.spen.SPENConfig`, the lm experiment's
    ``LMConfig``): the fields keep their names there, so the configs dump as before.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    predictor: Predictor = Field("linear", description=f"SPEN's predictor: one of {', '.join(PREDICTORS)}")
    attn_input: AttnInput = Field("state", description="what an attention predictor reads: state (current traces), "
                                                       "sequence (past trace states) or tokens (raw inputs: the control)")

    @model_validator(mode="after")
    def _linear_reads_the_state(self):
        if self.predictor == "linear" and self.attn_input != "state":
            raise ValueError("the linear predictor is a static map of the current trace state: attn_input must be "
                             f"'state', got {self.attn_input!r}")
        return self
