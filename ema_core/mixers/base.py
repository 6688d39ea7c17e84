"""The context-mixer contract: one causal map (B, T, D) → (B, T, D), a fast path and its reference.

    >>> mixer = build_mixer("gated_linear_attn", d=32, seed=0)   # ema_core.mixers.registry
    >>> y = mixer(x)                      # (B, T, D), the fast path (what a model trains through)
    >>> y, state = mixer.scan(x)          # and the state after the last step
    >>> y_ref, state_ref = mixer.reference(x.double())   # a naive loop over t, float64
    >>> mixer.state_floats(T)             # floats per sequence the mixer carries (or caches) after T steps

Every mixer:

* is **causal**, exactly: its output at t is a function of x_0..x_t only, bit for bit (a masked
  term is multiplied by an exact zero; no prefix is formed by subtracting a later term), which
  :func:`ema_core.mixers.causality.check_causal` probes, in the tests and before every boundary run;
* has a **reference**: the recurrence written step by step, in the parameters' own maths, run in
  float64; the fast path must match it (outputs, final state, gradients);
* says its **state size**: the floats per sequence it must keep to continue from step T (a
  recurrent state is constant in T; attention's key/value cache grows with T).

A mixer holds its own parameters (input/output projections included), initialised from ``seed``,
so that two mixers built with one seed are the same model.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class Mixer(nn.Module):
    """Base of every context mixer; subclasses implement :meth:`scan`, :meth:`reference`, :meth:`state_floats`."""

    name = ""  # its name in ema_core.mixers.MIXER_NAMES
    # The settings of the model it sits in that its constructor takes besides (d, seed), as
    # {constructor argument: setting name}, e.g. the window's {"k": "window"}: the code that builds a
    # mixer reads them from the config by this (registry.mixer_options) and never asks which mixer it is.
    settings: dict[str, str] = {}

    def __init__(self, d: int, seed: int = 0):
        super().__init__()
        if d < 1:
            raise ValueError(f"d must be a positive width, got {d}")
        self.d = d
        self._gen = torch.Generator().manual_seed(int(seed))

    def linear(self, d_in: int, d_out: int) -> nn.Linear:
        """A bias-free projection initialised from the mixer's seed (uniform ±1/√d_in, as nn.Linear)."""
        layer = nn.Linear(d_in, d_out, bias=False)
        bound = 1.0 / math.sqrt(d_in)
        with torch.no_grad():
            layer.weight.copy_(torch.rand(d_out, d_in, generator=self._gen) * 2 * bound - bound)
        return layer

    def parameter(self, *shape: int, low: float = -1.0, high: float = 1.0) -> nn.Parameter:
        return nn.Parameter(torch.rand(*shape, generator=self._gen) * (high - low) + low)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scan(x)[0]

    def scan(self, x: torch.Tensor) -> tuple[torch.Tensor, object]:
        """(y (B, T, D), the state after the last step): the fast path."""
        raise NotImplementedError

    def reference(self, x: torch.Tensor) -> tuple[torch.Tensor, object]:
        """The same, as a loop over t (pass float64 inputs; parameters are cast to x's dtype)."""
        raise NotImplementedError

    def state_floats(self, T: int) -> int:
        """Floats per sequence the mixer keeps after T steps to go on from there."""
        raise NotImplementedError

    def weights(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every parameter in x's dtype and device, by name: what a reference computes with."""
        return {name: p.to(dtype=x.dtype, device=x.device) for name, p in self.named_parameters()}


def check_input(x: torch.Tensor, d: int) -> None:
    if x.ndim != 3 or x.shape[-1] != d:
        raise ValueError(f"a mixer of width {d} takes (B, T, {d}) inputs, got shape {tuple(x.shape)}")


def causal_mask(T: int, device, dtype=torch.bool) -> torch.Tensor:
    """(T, T) with True (or 1) where s ≤ t: what position t may read."""
    return torch.ones(T, T, device=device, dtype=torch.bool).tril().to(dtype)


def heads_of(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, T, D) → (B, H, T, D/H)."""
    B, T, D = x.shape
    return x.view(B, T, heads, D // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, Dh) → (B, T, H·Dh)."""
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)
