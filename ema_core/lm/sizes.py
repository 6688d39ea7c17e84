"""Named sizes of the content experiment, and the GPT baseline sized to match a SPEN.

>>> spen = spen_config("tiny", vocab_size=4096, predictor="softmax_attention", attn_input="sequence")
>>> gpt = matched_gpt_config(spen)          # same d, depth, heads, vocab; d_ff chosen to match
>>> abs(param_count(gpt) / param_count(spen) - 1) < 0.05
True
>>> model = build_model("spen", "tiny", vocab_size=4096, seed=0)   # or "gpt"

* ``tiny``  — trains on two CPU cores (d = 128, 4 blocks).
* ``small`` — one GPU, or a patient CPU (d = 384, 6 blocks).
* ``paper`` — the paper's SPEN: 12 blocks, d = 768, GPT-2's vocabulary, ≈ 130M parameters with
  the linear predictor.  Its sparse FFN is 3·d wide, the width that lands the count on the
  paper's 130M once the Context Mix (4·d²) and predictor (3·d²) are in.

Every SPEN's FFN is 3·d wide; the matched GPT's comes out near 4.5·d for the linear predictor
(a transformer block spends 4·d² on attention, SPEN spends 7·d² on predictor and mix).
Parameter counts come from building the model on the meta device: exact, and free of memory.
"""
from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from ema_core.lm.gpt import GPT, GPTConfig, count_params
from ema_core.lm.spen import SPEN, SPENConfig

MODELS = ("spen", "gpt")


class ModelSize(BaseModel):
    """The dimensions a model size fixes; everything else keeps its config default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d_model: int = Field(..., ge=8, le=8192, description="d: width of the residual stream")
    n_layers: int = Field(..., ge=1, le=96, description="blocks")
    n_heads: int = Field(..., ge=1, le=128, description="heads (GPT, and SPEN's attention predictors)")
    d_ff: int = Field(..., ge=1, le=131_072, description="SPEN's sparse FFN width (GPT's is matched)")
    vocab_size: int = Field(..., ge=2, le=1_000_000, description="default V, when the tokenizer does not say")
    seq_len: int = Field(..., ge=1, le=131_072, description="training context (GPT's positional table)")


SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(d_model=128, n_layers=4, n_heads=4, d_ff=384, vocab_size=4096, seq_len=256),
    "small": ModelSize(d_model=384, n_layers=6, n_heads=6, d_ff=1152, vocab_size=8192, seq_len=512),
    "paper": ModelSize(d_model=768, n_layers=12, n_heads=12, d_ff=2304, vocab_size=50257, seq_len=1024),
}


def get_size(name: str) -> ModelSize:
    """The named size, or a ValueError listing the names; shared with ``bench.lm``."""
    if name not in SIZES:
        raise ValueError(f"size must be one of {tuple(SIZES)}, got {name!r}")
    return SIZES[name]


def spen_config(size: str, *, vocab_size: int | None = None, predictor: str = "linear",
                attn_input: str = "state", **overrides) -> SPENConfig:
    """A size's SPEN; ``overrides`` set any other :class:`SPENConfig` field."""
    p = get_size(size)
    fields = dict(d_model=p.d_model, n_layers=p.n_layers, n_heads=p.n_heads, d_ff=p.d_ff,
                  vocab_size=vocab_size or p.vocab_size, predictor=predictor, attn_input=attn_input)
    return SPENConfig(**{**fields, **overrides})


def param_count(cfg: SPENConfig | GPTConfig) -> int:
    """Exact parameter count of the model a config builds (on the meta device: no memory, no init)."""
    with torch.device("meta"):
        model = SPEN(cfg) if isinstance(cfg, SPENConfig) else GPT(cfg)
    return count_params(model)


def matched_gpt_config(spen: SPENConfig, *, seq_len: int = 1024, multiple: int = 32) -> GPTConfig:
    """The GPT of SPEN's width, depth, heads, vocabulary and norm whose d_ff brings it closest to SPEN's size.

    The count is affine in d_ff (2·d·n_layers per unit), so two meta builds give the line;
    d_ff is rounded to a multiple of ``multiple`` (a matmul-friendly width).
    """
    base = dict(vocab_size=spen.vocab_size, d_model=spen.d_model, n_layers=spen.n_layers, n_heads=spen.n_heads,
                seq_len=seq_len, norm=spen.norm, dropout=spen.dropout)
    target = param_count(spen)
    p1, p2 = (param_count(GPTConfig(**base, d_ff=f)) for f in (1, 2))
    d_ff = 1 + (target - p1) / (p2 - p1)
    if d_ff < multiple / 2:
        raise ValueError(f"SPEN ({target:,} parameters) is smaller than a GPT of the same width with no FFN ({p1:,})")
    return GPTConfig(**base, d_ff=max(multiple, multiple * round(d_ff / multiple)))


def gpt_config(size: str, *, vocab_size: int | None = None, predictor: str = "linear",
               attn_input: str = "state", seq_len: int | None = None, **spen_overrides) -> GPTConfig:
    """The baseline matched to ``spen_config(size, ...)`` with the same arguments."""
    spen = spen_config(size, vocab_size=vocab_size, predictor=predictor, attn_input=attn_input, **spen_overrides)
    return matched_gpt_config(spen, seq_len=seq_len or get_size(size).seq_len)


def build_model(model: str, size: str, *, vocab_size: int | None = None, predictor: str = "linear",
                attn_input: str = "state", seq_len: int | None = None, seed: int = 0, **spen_overrides) -> nn.Module:
    """``"spen"`` or ``"gpt"`` at a size, initialised from ``seed``; the GPT is the one matched to that SPEN."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    spen = spen_config(size, vocab_size=vocab_size, predictor=predictor, attn_input=attn_input, **spen_overrides)
    if model == "spen":
        return SPEN(spen, seed=seed)
    return GPT(matched_gpt_config(spen, seq_len=seq_len or get_size(size).seq_len), seed=seed)
