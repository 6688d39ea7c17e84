"""Recurrent mixers beyond fixed-rate EMA: learned diagonal decay, and linear attention with a matrix state.

    diag_decay          h_t = λ ⊙ h_{t−1} + (1 − λ) ⊙ W_in x_t, λ = σ(θ) learned per channel and
                        independent of the input (LRU / S4D-style); y_t = W_out h_t.  State: D floats.
    decay_linear_attn   S_t = γ_h S_{t−1} + k_tᵀ v_t per head, γ_h fixed (RetNet: 1 − 2^(−5−h));
                        o_t = q_t S_t; y = W_o o.  State: D²/H floats.
    gated_linear_attn   S_t = diag(α_t) S_{t−1} + k_tᵀ v_t, α_t = σ(W_g x_t)^(1/16) per key channel:
                        the decay depends on the input (GLA; Mamba-2 with a scalar gate is the
                        special case of one α per head).  State: D²/H floats.

The fast paths are chunked (C steps at a time): inside a chunk the decays between every pair of
steps form a (C, C) lower-triangular weight whose upper part is an exact zero, across chunks the
state is carried.  The references are the recurrences above, one step at a time.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ema_core.mixers.base import Mixer, causal_mask, check_input, heads_of, merge_heads

CHUNK = 32


def _chunks(T: int, size: int = CHUNK):
    for start in range(0, T, size):
        yield start, min(T, start + size)


class DiagDecay(Mixer):
    name = "diag_decay"

    def __init__(self, d: int, seed: int = 0):
        super().__init__(d, seed)
        self.inp, self.out = self.linear(d, d), self.linear(d, d)
        # initial decays log-uniform in 1 − λ ∈ [0.01, 0.5]: memories of about 2 to 100 steps
        one_minus = torch.exp(torch.rand(d, generator=self._gen) * (math.log(0.5) - math.log(0.01)) + math.log(0.01))
        self.theta = torch.nn.Parameter(torch.log((1 - one_minus) / one_minus))  # σ(θ) = λ

    def scan(self, x):
        check_input(x, self.d)
        B, T, D = x.shape
        u = self.inp(x)
        log_lam = F.logsigmoid(self.theta)  # (D,)
        gain = -torch.expm1(log_lam)  # 1 − λ, exact for λ near 1
        h = x.new_zeros(B, D)
        ys = []
        for a, b in _chunks(T):
            n = b - a
            i = torch.arange(n, device=x.device)
            lags = (i[:, None] - i[None, :]).clamp(min=0).to(x.dtype)  # (n, n): t − s where s ≤ t
            decay = torch.exp(lags[..., None] * log_lam) * causal_mask(n, x.device, x.dtype)[..., None]  # (n, n, D)
            inside = torch.einsum("tsd,bsd->btd", decay, gain * u[:, a:b])
            carried = torch.exp((i[:, None] + 1).to(x.dtype) * log_lam) * h[:, None]  # λ^(t+1) h_before
            hs = inside + carried  # (B, n, D)
            h = hs[:, -1]
            ys.append(hs)
        hs = torch.cat(ys, 1) if ys else x.new_zeros(B, 0, D)
        return self.out(hs), h

    def reference(self, x):
        check_input(x, self.d)
        W = self.weights(x)
        lam = torch.sigmoid(W["theta"])
        u = x @ W["inp.weight"].T
        h = x.new_zeros(x.shape[0], self.d)
        hs = []
        for t in range(x.shape[1]):
            h = lam * h + (1 - lam) * u[:, t]
            hs.append(h)
        hs = torch.stack(hs, 1) if hs else x.new_zeros(x.shape[0], 0, self.d)
        return hs @ W["out.weight"].T, h

    def state_floats(self, T: int) -> int:
        return self.d


class _LinearAttention(Mixer):
    """Shared by both linear-attention mixers: projections, heads, and the chunked evaluation."""

    # A decay that is one number per head (the same on every key channel) lets a chunk's weights be
    # (n, n) per head, a plain matmul, instead of (n, n, dh): measured 4x faster per training step.
    scalar_decay = False

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed)
        if d % heads:
            raise ValueError(f"d ({d}) must be divisible by heads ({heads})")
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.out = (self.linear(d, d) for _ in range(4))

    def log_decay(self, x: torch.Tensor, W: dict | None = None) -> torch.Tensor:
        """log of the decay applied to the state at each step: (B, H, T, dh) (per key channel)."""
        raise NotImplementedError

    def _qkv(self, x, W=None):
        if W is None:
            q, k, v = self.q(x), self.k(x), self.v(x)
        else:
            q, k, v = (x @ W[f"{n}.weight"].T for n in "qkv")
        q = q / math.sqrt(self.dh)
        return (heads_of(t, self.heads) for t in (q, k, v))  # (B, H, T, dh)

    def scan(self, x):
        check_input(x, self.d)
        B, T, D = x.shape
        q, k, v = self._qkv(x)
        g = self.log_decay(x)  # (B, H, T, dh), ≤ 0
        S = x.new_zeros(B, self.heads, self.dh, self.dh)
        outs = []
        for a, b in _chunks(T):
            n = b - a
            qc, kc, vc = q[:, :, a:b], k[:, :, a:b], v[:, :, a:b]
            cum = torch.cumsum(g[:, :, a:b], 2)  # (B, H, n, dh): log decay from the chunk's start to t, inclusive
            mask = causal_mask(n, x.device)
            # log decay from s to t (t ≥ s): cum_t − cum_s; above the diagonal −inf, whose exp is an exact 0
            if self.scalar_decay:
                c0 = cum[..., 0]  # (B, H, n): every channel holds the same
                rel = torch.where(mask, c0[:, :, :, None] - c0[:, :, None, :], -math.inf)  # (B, H, n, n)
                scores = (qc @ kc.transpose(-1, -2)) * torch.exp(rel)
            else:
                rel = torch.where(mask[..., None], cum[:, :, :, None] - cum[:, :, None, :], -math.inf)  # (B, H, n, n, dh)
                scores = torch.einsum("bhtd,bhsd,bhtsd->bhts", qc, kc, torch.exp(rel))
            inside = scores @ vc  # (B, H, n, dh)
            carried = (qc * torch.exp(cum)) @ S  # the state before the chunk, decayed to each t
            outs.append(inside + carried)
            to_end = torch.exp(cum[:, :, -1:] - cum)  # (B, H, n, dh): decay from s to the chunk's end
            S = torch.exp(cum[:, :, -1])[..., None] * S + (kc * to_end).transpose(-1, -2) @ vc
        o = torch.cat(outs, 2) if outs else q
        return self.out(merge_heads(o)), S

    def reference(self, x):
        check_input(x, self.d)
        W = self.weights(x)
        q, k, v = self._qkv(x, W)
        alpha = torch.exp(self.log_decay(x, W))  # (B, H, T, dh)
        B, T = x.shape[:2]
        S = x.new_zeros(B, self.heads, self.dh, self.dh)
        outs = []
        for t in range(T):
            S = alpha[:, :, t, :, None] * S + k[:, :, t, :, None] * v[:, :, t, None, :]
            outs.append((q[:, :, t, None, :] @ S)[:, :, 0])  # (B, H, dh)
        o = torch.stack(outs, 2) if outs else q
        return merge_heads(o) @ W["out.weight"].T, S

    def state_floats(self, T: int) -> int:
        return self.heads * self.dh * self.dh


class DecayLinearAttention(_LinearAttention):
    """A fixed decay per head, the same for every key channel and input (RetNet's γ_h = 1 − 2^(−5−h))."""

    name = "decay_linear_attn"
    scalar_decay = True

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed, heads)
        gammas = 1 - 2.0 ** (-5 - torch.arange(heads, dtype=torch.float64))
        self.register_buffer("log_gamma", torch.log(gammas).float(), persistent=False)

    def log_decay(self, x, W=None):
        B, T, _ = x.shape
        return self.log_gamma.to(x.dtype)[None, :, None, None].expand(B, self.heads, T, self.dh)


class GatedLinearAttention(_LinearAttention):
    """The decay read from the input at every step, per key channel (GLA)."""

    name = "gated_linear_attn"
    temperature = 16.0  # α = σ(·)^(1/16): gates start near 1, so memories start long (GLA's choice)

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed, heads)
        self.gate = self.linear(d, d)

    def log_decay(self, x, W=None):
        g = self.gate(x) if W is None else x @ W["gate.weight"].T
        return heads_of(F.logsigmoid(g) / self.temperature, self.heads)
