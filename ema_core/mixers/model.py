"""The small model every mixer is compared in: the same body around each, only the context mixer differs.

    tokens (B, T) → embedding (B, T, d)
    × layers:  x = x + mixer(LN(x));  x = x + MLP(LN(x))      MLP: d → 4d → d, GELU
    → LN → head (B, T, n_classes)

Pre-norm residual blocks as in the language models of :mod:`ema_core.lm`; the MLP mixes channels
at one position only, so everything a position knows of the past comes through the mixers (the
model is as causal as its mixer: tested exactly).  The boundary study uses d = 64, 2 layers.

``positions=True`` adds fixed sinusoidal position codes to the embeddings (the same for every
mixer): without them softmax attention cannot tell the token k steps back from any other, and a
fixed code, unlike a learned table, lets a query find "k back" by one linear map of its own code
(a rotation per frequency), at every position alike.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ema_core.mixers.registry import build_mixer, mixer_options


def sinusoidal_positions(T: int, d: int) -> torch.Tensor:
    """(T, d) position codes: sin and cos of t / 10000^(2i/d) (the Transformer's)."""
    t = torch.arange(T, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10_000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(t * freq)
    pe[:, 1::2] = torch.cos(t * freq)[:, : d // 2]
    return pe


class MixerBlock(nn.Module):
    def __init__(self, mixer: str, d: int, seed: int, **options):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mixer = build_mixer(mixer, d, seed=seed, **options)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class MixerNet(nn.Module):
    def __init__(self, mixer: str, vocab: int, n_classes: int, d: int = 64, layers: int = 2, seed: int = 0,
                 positions: bool = False, **options):
        super().__init__()
        if vocab < 1 or n_classes < 2 or layers < 1:
            raise ValueError(f"a model needs vocab ≥ 1, n_classes ≥ 2 and layers ≥ 1, got {vocab}, {n_classes}, {layers}")
        self.mixer_name = mixer
        self.positions = positions
        # The embedding, MLPs and head from ``seed`` (each mixer seeds its own parts), without
        # touching the caller's global random state.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(MixerBlock(mixer, d, seed * 1000 + i, **options) for i in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_classes)

    @classmethod
    def from_settings(cls, mixer: str, body: Any, vocab: int, n_classes: int, seed: int) -> "MixerNet":
        """The model a config's ``body`` describes: its ``d``, ``layers`` and ``positions``, and whichever
        of its settings the mixer declares it takes (:attr:`ema_core.mixers.base.Mixer.settings`)."""
        return cls(mixer, vocab, n_classes, d=body.d, layers=body.layers, seed=seed, positions=body.positions,
                   **mixer_options(mixer, body))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.positions:
            x = x + sinusoidal_positions(tokens.shape[1], x.shape[-1]).to(x.device, x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def state_floats(self, T: int) -> int:
        """Floats per sequence the mixers keep after T steps (all layers)."""
        return sum(block.mixer.state_floats(T) for block in self.blocks)

    def params(self) -> int:
        return sum(p.numel() for p in self.parameters())
