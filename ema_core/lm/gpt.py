"""The attention baseline: a GPT-2-style causal transformer of the same width, depth and vocabulary as SPEN.

PAPER.md §4 item 2 asks for SPEN against "a same-size attention LM on the same data and tokenizer".
Per token, with x the residual stream::

    x = wte[idx] + wpe[t]                                  learned positional embedding (GPT-2)
    for each of n_layers blocks:                           pre-norm
        x = x + W_o · CausalSelfAttention(norm_1(x))       scaled_dot_product_attention(is_causal=True)
        x = x + W_2 · gelu(W_1 · norm_2(x))                dense FFN, width d_ff
    logits = norm_f(x) · wteᵀ                              tied input/output embeddings

``d_ff`` is the knob that makes the sizes equal: :func:`ema_core.lm.sizes.matched_gpt_config`
picks it so that the total parameter count lies within a few percent of the SPEN it is compared to.

The helpers at the top (norm, init, parameter count) are shared with SPEN, so that the two models
differ only in how a token sees its context.  Linear layers carry no bias (nanoGPT's
``bias=False``); a norm has its weight and bias.  Init is GPT-2's: N(0, 0.02) for every matrix and
embedding, N(0, 0.02/√(residual adds)) for each projection that writes into the residual stream.
It is drawn from a local generator seeded by ``seed``: the global RNGs are neither read nor changed.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

NORMS = ("layernorm", "rmsnorm")


def make_norm(kind: str, d: int) -> nn.Module:
    return nn.LayerNorm(d) if kind == "layernorm" else nn.RMSNorm(d)


def init_weights(model: nn.Module, seed: int, residual_std: float) -> None:
    """GPT-2 init from a local generator; ``residual_std`` for every parameter named ``*.c_proj.weight``."""
    g = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied weight is visited once
            if p.is_meta or p.dim() < 2 or name.endswith(".r"):
                continue  # meta (counting only); norms keep ones/zeros; rate embeddings start at zero
            std = residual_std if name.endswith("c_proj.weight") else 0.02
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std)


def count_params(model: nn.Module) -> int:
    """Trainable parameters, a tied weight once."""
    return sum(p.numel() for p in model.parameters())


class ModelShape(BaseModel):
    """What SPEN and its matched GPT share, declared once: vocabulary, width, depth, heads, FFN
    width, norm and dropout.  Each model's config adds its own settings; a model size fixes these."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(..., ge=2, le=1_000_000, description="V: tokenizer vocabulary (shared by both models)")
    d_model: int = Field(128, ge=8, le=8192, description="d: width of the residual stream")
    n_layers: int = Field(4, ge=1, le=96, description="blocks (the paper: 12)")
    n_heads: int = Field(4, ge=1, le=128, description="attention heads (GPT's, and SPEN's attention predictors'); "
                                                      "must divide d_model")
    d_ff: int = Field(384, ge=1, le=131_072, description="FFN width: SPEN's sparse FFN; the GPT's dense one is "
                                                         "sized to match SPEN's parameters (ema_core.lm.sizes)")
    norm: Literal["layernorm", "rmsnorm"] = Field("layernorm", description="the pre-norms of every block and the final norm")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the residual branches (and GPT's attention "
                                                            "weights), training only")


class GPTConfig(ModelShape):
    """Size of the baseline; the seed is passed beside it."""

    seq_len: int = Field(256, ge=1, le=131_072, description="longest context: rows of the positional embedding")

    @model_validator(mode="after")
    def _heads(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        return self


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_heads, self.dropout = cfg.n_heads, cfg.dropout
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x):
        B, T, d = x.shape
        H = self.n_heads
        q, k, v = self.c_attn(x).split(d, dim=2)  # (B, T, 3d) -> 3 × (B, T, d)
        q, k, v = (z.reshape(B, T, H, d // H).transpose(1, 2) for z in (q, k, v))  # (B, H, T, dh)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, d))  # (B, H, T, dh) -> (B, T, d)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.c_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm_1 = make_norm(cfg.norm, cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.norm_2 = make_norm(cfg.norm, cfg.d_model)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.norm_1(x)))
        return x + self.drop(self.mlp(self.norm_2(x)))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):  # the default inits below are overwritten anyway
            self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
            self.drop = nn.Dropout(cfg.dropout)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
            self.norm_f = make_norm(cfg.norm, cfg.d_model)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        init_weights(self, seed, residual_std=0.02 / math.sqrt(2 * cfg.n_layers))  # two residual adds per block

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) token ids -> logits (B, T, V); position t sees tokens ≤ t only."""
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the positional embedding ({self.cfg.seq_len} rows)")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, d)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm_f(x))  # (B, T, V)
