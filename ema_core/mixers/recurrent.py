"""Recurrent mixers beyond fixed-rate EMA: learned diagonal decay, and linear attention with a matrix state.

    diag_decay          h_t = λ ⊙ h_{t−1} + (1 − λ) ⊙ W_in x_t, λ = σ(θ) learned per channel and
                        independent of the input (LRU / S4D-style); y_t = W_out h_t.  State: D floats.
    linear_attn         Katharopoulos et al.'s: S_t = S_{t−1} + φ(k_t)ᵀ v_t, z_t = z_{t−1} + φ(k_t) per
                        head, φ = elu + 1, nothing decays; o_t = φ(q_t) S_t / (φ(q_t)·z_t + ε).
                        State: D²/H + D floats.
    decay_linear_attn   RetNet's retention: S_t = γ_h S_{t−1} + k_tᵀ v_t per head, γ_h fixed
                        (1 − 2^(−5−h)); o_t = q_t S_t.  State: D²/H floats.
    gated_linear_attn   GLA: S_t = diag(α_t) S_{t−1} + k_tᵀ v_t, α_t = σ(W_2 W_1 x_t + b)^(1/16) per
                        key channel (a rank-16 gate with a bias): the decay depends on the input
                        (Mamba-2 with a scalar gate is the special case of one α per head).
                        State: D²/H floats.

(The delta rule, the last rung before softmax, is in :mod:`ema_core.mixers.delta`.)

The decaying linear attentions end as their papers do: each head's o_t through an RMS norm (a gain
per channel, shared by the heads), times an output gate swish(W_r x_t), then W_o.  Neither has a
normaliser (a running sum of keys to divide by): the norm is what keeps the output's scale.
``linear_attn`` is the other way round, as its paper: the normaliser keeps the scale (each head's
output is a weighted mean of the values so far), and it has no norm and no gate.

The fast paths are chunked (C steps at a time): inside a chunk every pair of steps is weighted by
the decay between them, the pairs above the diagonal by an exact zero; across chunks the state is
carried.  The references are the recurrences above, one step at a time.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ema_core.mixers.base import Mixer, causal_mask, check_input, heads_of, merge_heads

CHUNK = 32  # diag_decay's chunk


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


def _projections(mixer: Mixer, d: int, heads: int) -> None:
    """The linear attentions' heads and their W_q, W_k, W_v, W_o, drawn from the mixer's seed in that order."""
    if d % heads:
        raise ValueError(f"d ({d}) must be divisible by heads ({heads})")
    mixer.heads, mixer.dh = heads, d // heads
    mixer.q, mixer.k, mixer.v, mixer.out = (mixer.linear(d, d) for _ in range(4))


class LinearAttention(Mixer):
    """Linear attention as Katharopoulos et al. (2020, "Transformers are RNNs") write it: φ(x) = elu(x) + 1
    on queries and keys, per head o_t = φ(q_t) S_t / (φ(q_t)·z_t + ε) with S_t = Σ_{s≤t} φ(k_s)ᵀ v_s and
    z_t = Σ_{s≤t} φ(k_s), then W_o.

    The hierarchy's rung of binding without decay: every key–value pair written stays in the state at
    full weight for ever, so it shows what binding does before any forgetting (``decay_linear_attn``
    adds that).  It is the paper's layer as written, with no RMS norm and no output gate (the paper
    has neither): the normaliser keeps the scale, each head's output being a weighted mean of
    v_0..v_t (weights φ(q_t)·φ(k_s) > 0).
    """

    name = "linear_attn"
    # Steps per chunk: inside, one masked (C, C) product per chunk, all chunks at once; across, a
    # running sum of the chunks' states.  Any size gives the same sums; 16 measured fastest for a
    # training step at the boundary study's shapes, 32 within a few per cent (docs/decisions.md).
    chunk = 16
    eps = 1e-6  # added to the normaliser, as the paper's code; φ > 0 already keeps it above 0

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed)
        _projections(self, d, heads)

    def _features(self, x, W=None):
        """φ(q), φ(k), v: (B, H, T, dh) each.  q is not scaled by 1/√dh: the paper does not, and the
        scale would not cancel (φ is not linear)."""
        if W is None:
            q, k, v = self.q(x), self.k(x), self.v(x)
        else:
            q, k, v = (x @ W[f"{n}.weight"].T for n in "qkv")
        return heads_of(F.elu(q) + 1, self.heads), heads_of(F.elu(k) + 1, self.heads), heads_of(v, self.heads)

    def scan(self, x):
        check_input(x, self.d)
        B, T, D = x.shape
        q, k, v = self._features(x)
        # the normaliser rides along as one more value channel of ones: [S | z] is one sum
        v = torch.cat([v, torch.ones_like(v[..., :1])], -1)
        c = self.chunk
        n = -(-T // c)
        fill = n * c - T  # filled up after φ, so a filled step's key is 0 and adds nothing
        q, k, v = ((F.pad(t, (0, 0, 0, fill)) if fill else t).unflatten(2, (n, c)) for t in (q, k, v))
        scores = torch.where(causal_mask(c, x.device), q @ k.transpose(-1, -2), 0.0)  # (B, H, n, c, c)
        added = k.transpose(-1, -2) @ v  # (B, H, n, dh, dh + 1): what each chunk adds to [S | z]
        # the state before chunk i: the running sum of chunks 0..i−1, shifted in after a zero (never
        # the running sum through i less chunk i's own, whose rounding would carry later steps back)
        run = torch.cumsum(added, 2)
        before = torch.cat([torch.zeros_like(added[:, :, :1]), run[:, :, :-1]], 2)
        o = (scores @ v + q @ before).flatten(2, 3)[:, :, :T]
        o = o[..., :-1] / (o[..., -1:] + self.eps)
        state = run[:, :, -1] if n else x.new_zeros(B, self.heads, self.dh, self.dh + 1)
        return self.out(merge_heads(o)), (state[..., :-1], state[..., -1])

    def reference(self, x):
        check_input(x, self.d)
        W = self.weights(x)
        q, k, v = self._features(x, W)
        B, T = x.shape[:2]
        S = x.new_zeros(B, self.heads, self.dh, self.dh)
        z = x.new_zeros(B, self.heads, self.dh)
        ys = []
        for t in range(T):
            S = S + k[:, :, t, :, None] * v[:, :, t, None, :]
            z = z + k[:, :, t]
            o = (q[:, :, t, None, :] @ S)[:, :, 0] / ((q[:, :, t] * z).sum(-1, keepdim=True) + self.eps)
            ys.append(o.reshape(B, self.d) @ W["out.weight"].T)
        return (torch.stack(ys, 1) if ys else x.new_zeros(B, 0, self.d)), (S, z)

    def state_floats(self, T: int) -> int:
        return self.heads * self.dh * self.dh + self.heads * self.dh


class _LinearAttention(Mixer):
    """Shared by the decaying linear-attention mixers: projections, heads, the chunked evaluation, the
    output norm and gate (the delta rule, :mod:`ema_core.mixers.delta`, takes all but the evaluation)."""

    # Steps per chunk: the across-chunk loop is Python, the inside one batched product over every
    # chunk at once; 16 measured fastest for a training step at the boundary study's shapes
    # (docs/decisions.md).  Any size gives the same sums.
    chunk = 16
    # A decay that is one number per head (the same on every key channel) lets a chunk's pairwise
    # weights be (C, C) per head, computed directly; a decay per key channel takes the matmul form.
    scalar_decay = False
    # The largest decay since a chunk's start, in log units, that the gated matmul form undoes (e^30 ≈ 1e13).
    LIMIT = 30.0
    norm_eps = 1e-5  # the output norm's (flash-linear-attention's)

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed)
        _projections(self, d, heads)
        self.gate_out = self.linear(d, d)  # the output gate's W_r
        self.norm = nn.Parameter(torch.ones(self.dh))  # the output norm's gain, shared by the heads

    def log_decay(self, x: torch.Tensor, W: dict | None = None) -> torch.Tensor:
        """log of the decay applied to the state at each step, ≤ 0: (B, H, T, dh), one per key
        channel, or (B, H, T, 1) for one per head."""
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
        c = self.chunk
        n = -(-T // c)  # chunks; the last is filled up with steps that decay nothing and add nothing
        fill = n * c - T
        q, k, v, g = ((F.pad(t, (0, 0, 0, fill)) if fill else t).unflatten(2, (n, c))
                      for t in (*self._qkv(x), self.log_decay(x)))  # (B, H, n, c, dh or 1)
        cum = torch.cumsum(g, 3)  # log decay from the chunk's start to t, inclusive; falls with t
        mask = causal_mask(c, x.device)
        qd = q * torch.exp(cum)  # q_t decayed from the chunk's start (≤ |q|)
        if self.scalar_decay:
            c0 = cum[..., 0]
            rel = torch.where(mask, c0[..., :, None] - c0[..., None, :], -math.inf)  # −inf above: exp → exact 0
            scores = (q @ k.transpose(-1, -2)) * torch.exp(rel)
        else:
            scores = self._gated_scores(q, k, qd, cum, mask)
        inside = scores @ v  # (B, H, n, c, dh)
        # across chunks: what each chunk adds to the state, decayed to its end, and its total decay
        added = (k * torch.exp(cum[..., -1:, :] - cum)).transpose(-1, -2) @ v  # (B, H, n, dh, dh)
        through = torch.exp(cum[..., -1, :])[..., None]  # (B, H, n, dh or 1, 1)
        S = x.new_zeros(B, self.heads, self.dh, self.dh)
        before = []
        for i in range(n):
            before.append(S)
            S = through[:, :, i] * S + added[:, :, i]
        carried = qd @ torch.stack(before, 2) if n else inside  # the state before the chunk, decayed to t
        o = (inside + carried).flatten(2, 3)[:, :, :T]
        return self._finish(o, x), S

    def _gated_scores(self, q, k, qd, cum, mask):
        """(B, H, n, c, c): Σ_d q_td k_sd exp(cum_td − cum_sd) for s ≤ t, exact 0 above.

        As one product: (q ⊙ e^cum)(k ⊙ e^−cum)ᵀ, both taken from the chunk's start, the one reference
        point every row's past shares (a later one would make row t depend on steps after t).
        e^−cum grows as the chunk decays, so a row whose decay since the chunk's start passes
        ``LIMIT`` (only a gate near 0 for most of the chunk does that) takes the direct form
        instead: which form a row takes depends on its own past only, so causality stays exact."""
        kd = k * torch.exp(torch.clamp(-cum, max=self.LIMIT))  # exact wherever a row reads it
        scores = torch.where(mask, qd @ kd.transpose(-1, -2), 0.0)
        reach = (-cum).amax(-1)  # (B, H, n, c): row t's largest decay since the chunk's start
        if bool((reach > self.LIMIT).any()):
            rel = torch.where(mask[..., None], cum[..., :, None, :] - cum[..., None, :, :], -math.inf)
            direct = torch.einsum("bhntd,bhnsd,bhntsd->bhnts", q, k, torch.exp(rel))
            scores = torch.where((reach > self.LIMIT)[..., None], direct, scores)
        return scores

    def _finish(self, o, x):
        """Each head's output (B, H, T, dh) through the RMS norm, the output gate swish(W_r x), then W_o."""
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.norm_eps) * self.norm
        return self.out(merge_heads(o) * F.silu(self.gate_out(x)))

    def reference(self, x):
        check_input(x, self.d)
        W = self.weights(x)
        q, k, v = self._qkv(x, W)
        alpha = torch.exp(self.log_decay(x, W))  # (B, H, T, dh or 1)
        r = x @ W["gate_out.weight"].T
        B, T = x.shape[:2]
        S = x.new_zeros(B, self.heads, self.dh, self.dh)
        ys = []
        for t in range(T):
            S = alpha[:, :, t, :, None] * S + k[:, :, t, :, None] * v[:, :, t, None, :]
            o = (q[:, :, t, None, :] @ S)[:, :, 0]  # (B, H, dh)
            ys.append(self._finish_step(o, r[:, t], W))
        return (torch.stack(ys, 1) if ys else x.new_zeros(B, 0, self.d)), S

    def _finish_step(self, o, r, W):
        """:meth:`_finish` at one step, in the reference's maths: each head's o_t (B, H, dh) and
        r = W_r x_t (B, D) to y_t (B, D)."""
        o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + self.norm_eps) * W["norm"]
        return (o.reshape(o.shape[0], self.d) * torch.sigmoid(r) * r) @ W["out.weight"].T

    def state_floats(self, T: int) -> int:
        return self.heads * self.dh * self.dh


class DecayLinearAttention(_LinearAttention):
    """RetNet's retention: a fixed decay per head (γ_h = 1 − 2^(−5−h)), the same for every key channel
    and input."""

    name = "decay_linear_attn"
    scalar_decay = True

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed, heads)
        gammas = 1 - 2.0 ** (-5 - torch.arange(heads, dtype=torch.float64))
        self.register_buffer("log_gamma", torch.log(gammas).float(), persistent=False)

    def log_decay(self, x, W=None):
        B, T, _ = x.shape
        return self.log_gamma.to(x.dtype)[None, :, None, None].expand(B, self.heads, T, 1)


class GatedLinearAttention(_LinearAttention):
    """GLA: the decay read from the input at every step, per key channel, through a rank-16 gate with a bias."""

    name = "gated_linear_attn"
    temperature = 16.0  # α = σ(·)^(1/16): gates start near 1, so memories start long (GLA's choice)
    rank = 16  # GLA's low rank for the gate

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed, heads)
        self.gate_down, self.gate_up = self.linear(d, self.rank), self.linear(self.rank, d)
        self.gate_bias = nn.Parameter(torch.zeros(d))  # GLA's zero start: σ(0)^(1/16) ≈ 0.96, ~23 steps

    def log_decay(self, x, W=None):
        if W is None:
            z = self.gate_up(self.gate_down(x)) + self.gate_bias
        else:
            z = x @ W["gate_down.weight"].T @ W["gate_up.weight"].T + W["gate_bias"]
        return heads_of(F.logsigmoid(z) / self.temperature, self.heads)
