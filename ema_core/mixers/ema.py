"""EMA mixers: fixed-decay traces through the project's scan (:mod:`ema_core.scan`).

    ema        h_t = (1 − α)·h_{t−1} + α·x_t on every channel, one rate; y_t = W h_t
    ema3       SPEN's three rates (0.5, 0.1, 0.02); y_t = W [h_t^(1); h_t^(2); h_t^(3)]
    ema3_seq   the same traces, then causal softmax attention over the sequence of past trace
               states: an EMA sequence is invertible (x_t = (h_t − (1 − α) h_{t−1}) / α), so what
               the current state has blurred, the sequence still holds (the paper's caveat, measured)
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ema_core.mixers.base import Mixer, check_input, heads_of, merge_heads
from ema_core.scan import ema_scan

SPEN_RATES = (0.5, 0.1, 0.02)


def _traces_reference(x: torch.Tensor, rates: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T, K, D) traces and the last state, one step at a time."""
    B, T, D = x.shape
    h = x.new_zeros(B, len(rates), D)
    a = torch.tensor(rates, dtype=x.dtype, device=x.device)[:, None]  # (K, 1)
    out = []
    for t in range(T):
        h = (1 - a) * h + a * x[:, t, None, :]
        out.append(h)
    return (torch.stack(out, 1) if out else x.new_zeros(B, 0, len(rates), D)), h


class EMA(Mixer):
    """One fixed rate on every channel, a linear read-out of the current state."""

    name = "ema"
    rates: tuple[float, ...] = (0.1,)

    def __init__(self, d: int, seed: int = 0):
        super().__init__(d, seed)
        self.out = self.linear(len(self.rates) * d, d)

    def scan(self, x):
        check_input(x, self.d)
        traces, last = ema_scan(x, self.rates)  # (B, T, K, D), (B, K, D)
        return self.out(traces.flatten(2)), last

    def reference(self, x):
        check_input(x, self.d)
        traces, last = _traces_reference(x, self.rates)
        return traces.flatten(2) @ self.weights(x)["out.weight"].T, last

    def state_floats(self, T: int) -> int:
        return len(self.rates) * self.d


class EMA3(EMA):
    """SPEN's three fixed rates, a linear read-out of the concatenated current states."""

    name = "ema3"
    rates = SPEN_RATES


class EMA3Seq(Mixer):
    """SPEN's traces, then causal softmax attention over the sequence of trace states."""

    name = "ema3_seq"
    rates = SPEN_RATES
    settings = {"heads": "heads"}  # the model's ``heads`` setting, as softmax attention's

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed)
        if d % heads:
            raise ValueError(f"d ({d}) must be divisible by heads ({heads})")
        self.heads = heads
        K = len(self.rates)
        self.q, self.k, self.v = (self.linear(K * d, d) for _ in range(3))
        self.out = self.linear(d, d)

    def scan(self, x):
        check_input(x, self.d)
        traces, last = ema_scan(x, self.rates)
        H = traces.flatten(2)  # (B, T, K·D)
        q, k, v = (heads_of(p(H), self.heads) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # masked keys weigh exactly 0
        return self.out(merge_heads(y)), (last, merge_heads(k), merge_heads(v))

    def reference(self, x):
        check_input(x, self.d)
        W = self.weights(x)
        traces, last = _traces_reference(x, self.rates)
        H = traces.flatten(2)
        q, k, v = (H @ W[f"{n}.weight"].T for n in "qkv")
        y = attention_reference(q, k, v, self.heads) @ W["out.weight"].T
        return y, (last, k, v)

    def state_floats(self, T: int) -> int:
        return len(self.rates) * self.d + 2 * T * self.d  # the current traces, and every key and value


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Causal softmax attention, one query at a time over the keys so far: (B, T, D) each."""
    B, T, D = q.shape
    dh = D // heads
    qh, kh, vh = (heads_of(t, heads) for t in (q, k, v))  # (B, H, T, dh)
    out = []
    for t in range(T):
        scores = (qh[:, :, t:t + 1] @ kh[:, :, :t + 1].transpose(-1, -2)) / math.sqrt(dh)  # (B, H, 1, t+1)
        out.append(torch.softmax(scores, -1) @ vh[:, :, :t + 1])  # (B, H, 1, dh)
    y = torch.cat(out, 2) if out else qh
    return merge_heads(y)
