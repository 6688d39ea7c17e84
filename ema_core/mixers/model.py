"""The small model every mixer is compared in: the same body around each, only the context mixer differs.

    tokens (B, T) → embedding (B, T, d)
    × layers:  x = x + mixer(conv(LN(x)));  x = x + MLP(LN(x))      MLP: d → mlp·d → d, GELU
    → LN → head (B, T, n_classes)

Pre-norm residual blocks as in the language models of :mod:`ema_core.lm`; the MLP mixes channels
at one position only, so everything a position knows of the past comes through the mixers and
the short convolutions before them (the model is as causal as they are: tested exactly).  The
boundary study uses d = 64, 2 layers.

``conv`` (zoology's recipe, 0 = none) is a depthwise causal convolution of that width over time
before every mixer: y_t = b + Σ_j w_j ⊙ x_{t−j}, j < conv, zeros before the start, one filter per
channel.  It gives every mixer the same few tokens of exact local memory (``conv − 1`` back per
layer), which is what lets a recurrent state or an attention head bind a token to its neighbour
(MQAR's key to its value) in one layer.  With ``conv=0`` there is no module and no step: the model
is the one without it, bit for bit.

``mlp`` is the MLP's expansion (4 by default, as in a GPT; 0: no MLP, as in zoology's MQAR models,
whose blocks are mixers only).  At d = 64 on a CPU the MLP is most of a step's arithmetic.

``positions=True`` adds fixed sinusoidal position codes to the embeddings (the same for every
mixer): without them softmax attention cannot tell the token k steps back from any other, and a
fixed code, unlike a learned table, lets a query find "k back" by one linear map of its own code
(a rotation per frequency), at every position alike.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
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


class ShortConv(nn.Module):
    """A depthwise causal convolution over time, ``width`` steps, one filter and bias per channel."""

    # Its own random stream, apart from every mixer's (a mixer's is its block's seed, and block seeds
    # stay far below 2^62): so adding the conv draws nothing a mixer or the rest of the model draws.
    STREAM = 1 << 62

    def __init__(self, d: int, width: int, seed: int):
        super().__init__()
        if width < 1:
            raise ValueError(f"conv must be 0 (none) or a width of at least 1, got {width}")
        self.width = width
        gen = torch.Generator().manual_seed(self.STREAM + int(seed))
        bound = 1.0 / math.sqrt(width)  # nn.Conv1d's uniform bound for a depthwise filter (fan-in = width)
        self.weight = nn.Parameter((torch.rand(d, 1, width, generator=gen) * 2 - 1) * bound)
        self.bias = nn.Parameter((torch.rand(d, generator=gen) * 2 - 1) * bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, D): zeros before the start, so y_t reads x_{t−width+1}..x_t and nothing later
        padded = F.pad(x.transpose(1, 2), (self.width - 1, 0))
        return F.conv1d(padded, self.weight, self.bias, groups=x.shape[-1]).transpose(1, 2)

    def state_floats(self) -> int:
        """The last ``width − 1`` inputs of every channel: what it needs to go on."""
        return (self.width - 1) * self.weight.shape[0]


class MixerBlock(nn.Module):
    def __init__(self, mixer: str, d: int, seed: int, conv: int = 0, mlp: int = 4, **options):
        super().__init__()
        if mlp < 0:
            raise ValueError(f"mlp must be 0 (none) or an expansion of at least 1, got {mlp}")
        self.norm1 = nn.LayerNorm(d)
        self.mixer = build_mixer(mixer, d, seed=seed, **options)
        # no MLP: no module and no parameter for it (the norm before it included)
        self.norm2 = nn.LayerNorm(d) if mlp else None
        self.mlp = nn.Sequential(nn.Linear(d, mlp * d), nn.GELU(), nn.Linear(mlp * d, d)) if mlp else None
        self.conv = ShortConv(d, conv, seed) if conv else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        if self.conv is not None:
            h = self.conv(h)
        x = x + self.mixer(h)
        return x if self.mlp is None else x + self.mlp(self.norm2(x))

    def state_floats(self, T: int) -> int:
        return self.mixer.state_floats(T) + (self.conv.state_floats() if self.conv is not None else 0)


class MixerNet(nn.Module):
    def __init__(self, mixer: str, vocab: int, n_classes: int, d: int = 64, layers: int = 2, seed: int = 0,
                 positions: bool = False, conv: int = 0, mlp: int = 4, **options):
        super().__init__()
        if vocab < 1 or n_classes < 2 or layers < 1:
            raise ValueError(f"a model needs vocab ≥ 1, n_classes ≥ 2 and layers ≥ 1, got {vocab}, {n_classes}, {layers}")
        if conv < 0:
            raise ValueError(f"conv must be 0 (none) or a width of at least 1, got {conv}")
        self.mixer_name = mixer
        self.positions = positions
        self.conv = conv
        # The embedding, MLPs and head from ``seed`` (each mixer seeds its own parts), without
        # touching the caller's global random state.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(MixerBlock(mixer, d, seed * 1000 + i, conv, mlp, **options)
                                        for i in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_classes)

    @classmethod
    def from_settings(cls, mixer: str, body: Any, vocab: int, n_classes: int, seed: int) -> "MixerNet":
        """The model a config's ``body`` describes: its ``d``, ``layers``, ``positions``, ``conv`` (none
        where the body has no such setting), ``mlp`` (4 where it has none), and whichever of its
        settings the mixer declares it takes (:attr:`ema_core.mixers.base.Mixer.settings`)."""
        return cls(mixer, vocab, n_classes, d=body.d, layers=body.layers, seed=seed, positions=body.positions,
                   conv=getattr(body, "conv", 0), mlp=getattr(body, "mlp", 4), **mixer_options(mixer, body))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.positions:
            x = x + sinusoidal_positions(tokens.shape[1], x.shape[-1]).to(x.device, x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def state_floats(self, T: int) -> int:
        """Floats per sequence the model keeps after T steps to go on from there, all layers: each mixer's
        state and each short conv's last ``conv − 1`` inputs (the conv is memory too, and a recall-
        against-state comparison that left it out would credit it to the mixer)."""
        return sum(block.state_floats(T) for block in self.blocks)

    def params(self) -> int:
        return sum(p.numel() for p in self.parameters())
