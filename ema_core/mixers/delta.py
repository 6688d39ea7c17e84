"""The delta rule (DeltaNet): linear attention whose write first takes out what its key already reads.

    delta_net   S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ
                    = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,     o_t = S_tᵀ q_t,
                per head, S of shape (d_k, d_v); q and k unit vectors (SiLU, then L2 norm),
                β_t = σ(W_β x_t) one per head.  State: D²/H floats.

Schlag et al. (2021) for the rule; flash-linear-attention's DeltaNet layer for the feature map and
β.  With β = 1 and a unit key the write replaces: reading S_t with k_t gives v_t exactly, where
linear attention would give v_t plus whatever was stored under k_t before.  It ends as the decaying
linear attentions do (each head through the RMS norm with a shared gain, times swish(W_r x_t), then
W_o), so what separates it from them is the state update alone.

The fast path is the chunked form of Yang et al. (2024, "Parallelizing Linear Transformers with the
Delta Rule over Sequence Length"): within a chunk of C steps that starts from the state S_0, write
the state at its step t as S_t = S_0 + Σ_{s≤t} k_s u_sᵀ.  Then
u_t = β_t (v_t − S_0ᵀ k_t − Σ_{s<t} (k_t·k_s) u_s), that is, for the chunk's rows,

    A U = diag(β) (V − K S_0),     A = I + tril(diag(β) K Kᵀ, −1),

a unit lower-triangular system whose solution is U = W_v − W_k S_0 with
W_k, W_v = A⁻¹ diag(β) [K, V] (the WY / UT form).  A does not depend on the state, so every
chunk's W_k, W_v come from one batched triangular solve; the loop over chunks only carries S:
U = W_v − W_k S_0, S ← S_0 + Kᵀ U.  The outputs are then O = Q S_0 + tril(Q Kᵀ) U, all chunks at once.  The reference is the
recurrence above, one step at a time, in float64.

Causality stays exact: row t of a forward substitution reads rows ≤ t of A and of the right side
only, the pairs above the diagonal are exact zeros (not read at all by the solve), and the state
is carried forward, never formed by subtracting a later term.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ema_core.mixers.base import check_input, heads_of
from ema_core.mixers.recurrent import _LinearAttention


def unit(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / √(|x|² + eps) over the last axis: flash-linear-attention's L2 norm (eps keeps a zero vector finite)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def delta_chunked(q, k, v, beta, chunk: int):
    """The delta rule over (B, H, T, ·) queries, keys, values and (B, H, T) β, ``chunk`` steps at a time:
    the outputs o_t = S_tᵀ q_t (B, H, T, d_v) and the last state S_T (B, H, d_k, d_v)."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    c = chunk
    n = -(-T // c)
    if not n:
        return q.new_zeros(B, H, 0, dv), k.new_zeros(B, H, dk, dv)
    fill = n * c - T  # filled steps have k = v = β = 0: they write nothing
    q, k, v, beta = ((F.pad(t, (0, 0, 0, fill)) if fill else t).contiguous().unflatten(2, (n, c))
                     for t in (q, k, v, beta[..., None]))  # (B, H, n, c, ·), laid out for the products
    # A's part below the diagonal, β_t k_t·k_s for s < t, zeros elsewhere: the solve takes A's unit
    # diagonal as given (unitriangular) and reads nothing above it
    below = ((beta * k) @ k.transpose(-1, -2)).tril(-1)
    wk, wv = torch.linalg.solve_triangular(below, beta * torch.cat([k, v], -1), upper=False,
                                           unitriangular=True).split([dk, dv], -1)
    S = k.new_zeros(B, H, dk, dv)
    before, writes = [], []
    for i in range(n):
        before.append(S)
        u = wv[:, :, i] - wk[:, :, i] @ S  # (B, H, c, dv): each step's write β_t(v_t − S_{t−1}ᵀ k_t)
        writes.append(u)
        S = S + k[:, :, i].transpose(-1, -2) @ u
    scores = (q @ k.transpose(-1, -2)).tril()  # (B, H, n, c, c): the pairs s > t exact zeros
    o = q @ torch.stack(before, 2) + scores @ torch.stack(writes, 2)
    return o.flatten(2, 3)[:, :, :T], S


def delta_steps(q, k, v, beta):
    """The same as :func:`delta_chunked`, as the recurrence one step at a time."""
    B, H, T, dk = k.shape
    S = k.new_zeros(B, H, dk, v.shape[-1])
    out = []
    for t in range(T):
        kt = k[:, :, t, :, None]  # (B, H, dk, 1)
        held = S.transpose(-1, -2) @ kt  # (B, H, dv, 1): what the state gives for k_t before the write
        S = S + beta[:, :, t, None, None] * kt * (v[:, :, t, :, None] - held).transpose(-1, -2)
        out.append((S.transpose(-1, -2) @ q[:, :, t, :, None])[..., 0])
    return (torch.stack(out, 2) if out else q.new_zeros(B, H, 0, v.shape[-1])), S


class DeltaNet(_LinearAttention):
    """DeltaNet: the delta rule per head, ending in the shared norm and output gate.

    Its projections q, k, v, W_r, W_o and the norm's gain are :class:`_LinearAttention`'s (drawn in the
    same order), W_β besides; the state update and its chunked evaluation are its own."""

    name = "delta_net"
    # Steps per chunk: the triangular solve is batched over every chunk at once, the loop over
    # chunks carries the state (two small products a chunk).  Any size gives the same sums; 32 measured
    # fastest for a training step at the boundary study's shapes, by a few per cent over 16
    # (docs/decisions.md).
    chunk = 32
    qk_eps = 1e-6  # the L2 norm's (flash-linear-attention's)

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed, heads)
        self.beta = self.linear(d, heads)  # W_β: one write strength per head, from the input

    def _qkvb(self, x, W=None):
        """q, k (unit vectors after a SiLU), v: (B, H, T, dh); β (B, H, T) in (0, 1).  q is not scaled:
        the output norm undoes any one number a head's output is multiplied by."""
        if W is None:
            q, k, v, b = self.q(x), self.k(x), self.v(x), self.beta(x)
        else:
            q, k, v, b = (x @ W[f"{n}.weight"].T for n in ("q", "k", "v", "beta"))
        q, k = (unit(heads_of(F.silu(t), self.heads), self.qk_eps) for t in (q, k))
        return q, k, heads_of(v, self.heads), torch.sigmoid(b).transpose(1, 2)

    def scan(self, x):
        check_input(x, self.d)
        q, k, v, beta = self._qkvb(x)
        o, S = delta_chunked(q, k, v, beta, self.chunk)
        return self._finish(o, x), S

    def reference(self, x):
        check_input(x, self.d)
        W = self.weights(x)
        o, S = delta_steps(*self._qkvb(x, W))
        r = x @ W["gate_out.weight"].T
        ys = [self._finish_step(o[:, :, t], r[:, t], W) for t in range(x.shape[1])]
        return (torch.stack(ys, 1) if ys else x.new_zeros(x.shape[0], 0, self.d)), S
