"""Mixers without a recurrence: causal softmax attention (the ceiling) and a fixed window (the floor).

    softmax    multi-head causal softmax attention over the inputs; its "state" is the key/value
               cache, 2·T·D floats, growing with T
    window_k   y_t = W [x_t; x_{t−1}; …; x_{t−k+1}] (zeros before the start): no memory beyond k
               steps, the floor every claim about a longer memory must beat
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ema_core.mixers.base import Mixer, check_input, heads_of, merge_heads
from ema_core.mixers.ema import attention_reference


class Softmax(Mixer):
    name = "softmax"
    settings = {"heads": "heads"}  # the model's ``heads`` setting (zoology's MQAR attention has one)

    def __init__(self, d: int, seed: int = 0, heads: int = 4):
        super().__init__(d, seed)
        if d % heads:
            raise ValueError(f"d ({d}) must be divisible by heads ({heads})")
        self.heads = heads
        self.q, self.k, self.v, self.out = (self.linear(d, d) for _ in range(4))

    def scan(self, x):
        check_input(x, self.d)
        q, k, v = self.q(x), self.k(x), self.v(x)
        y = F.scaled_dot_product_attention(*(heads_of(t, self.heads) for t in (q, k, v)), is_causal=True)
        return self.out(merge_heads(y)), (k, v)

    def reference(self, x):
        check_input(x, self.d)
        W = self.weights(x)
        q, k, v = (x @ W[f"{n}.weight"].T for n in "qkv")
        return attention_reference(q, k, v, self.heads) @ W["out.weight"].T, (k, v)

    def state_floats(self, T: int) -> int:
        return 2 * T * self.d


class Window(Mixer):
    """The last ``k`` inputs, concatenated, through one linear map."""

    name = "window_k"
    settings = {"k": "window"}  # its width is the model's ``window`` setting

    def __init__(self, d: int, seed: int = 0, k: int = 4):
        super().__init__(d, seed)
        if k < 1:
            raise ValueError(f"window k must be at least 1, got {k}")
        self.k = k
        self.out = self.linear(k * d, d)

    def scan(self, x):
        check_input(x, self.d)
        B, T, D = x.shape
        padded = F.pad(x, (0, 0, self.k - 1, 0))  # (B, T + k − 1, D): zeros before the start
        # lag j of step t sits at padded[t + k − 1 − j]: stack lags 0..k−1 along the features
        lagged = torch.cat([padded[:, self.k - 1 - j: self.k - 1 - j + T] for j in range(self.k)], -1)
        return self.out(lagged), padded[:, T:]  # the state: the last k − 1 inputs

    def reference(self, x):
        check_input(x, self.d)
        B, T, D = x.shape
        W = self.weights(x)["out.weight"]
        zero = x.new_zeros(B, D)
        ys = []
        for t in range(T):
            window = [x[:, t - j] if t - j >= 0 else zero for j in range(self.k)]
            ys.append(torch.cat(window, -1) @ W.T)
        last = torch.stack([x[:, t] if t >= 0 else zero for t in range(T - self.k + 1, T)], 1) \
            if self.k > 1 else x.new_zeros(B, 0, D)
        return (torch.stack(ys, 1) if ys else x.new_zeros(B, 0, D)), last

    def state_floats(self, T: int) -> int:
        return (self.k - 1) * self.d
