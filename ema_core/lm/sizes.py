"""Named sizes of the content experiment, and the GPT baseline sized to match a SPEN.

>>> choice = ModelChoice(model="spen", size="tiny", predictor="softmax_attention", attn_input="sequence")
>>> spen = spen_config(choice, vocab_size=4096)
>>> gpt = matched_gpt_config(spen)          # same d, depth, heads, vocab; d_ff chosen to match
>>> abs(param_count(gpt) / param_count(spen) - 1) < 0.05
True
>>> model = build_model(ModelChoice(model="gpt"), vocab_size=4096, seed=0)   # sized to the tiny linear SPEN

* ``micro`` — a third of tiny (d = 64, 4 blocks): the content gap's growth at a second size.
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

from typing import Literal, get_args

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from ema_core.lm.gpt import GPT, GPTConfig, ModelShape, count_params
from ema_core.lm.predictors import PredictorChoice
from ema_core.lm.spen import SPEN, SPENConfig

Model = Literal["spen", "gpt"]
MODELS: tuple[str, ...] = get_args(Model)


class ModelSize(BaseModel):
    """What a model size fixes: the models' shape (everything else keeps its config default) and
    the training context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: ModelShape  # its vocab_size is the default V, for when no tokenizer says
    seq_len: int = Field(..., ge=1, le=131_072, description="training context (GPT's positional table)")


def _size(d: int, layers: int, heads: int, vocab: int, seq_len: int) -> ModelSize:
    # SPEN's sparse FFN is 3·d wide at every size (see the module's note)
    return ModelSize(shape=ModelShape(d_model=d, n_layers=layers, n_heads=heads, d_ff=3 * d, vocab_size=vocab),
                     seq_len=seq_len)


SIZES: dict[str, ModelSize] = {
    # A third of tiny's parameters (0.48M against 1.38M, the same depth): the growth study's second size.
    "micro": _size(64, 4, 4, 4096, 256),
    "tiny": _size(128, 4, 4, 4096, 256),
    "small": _size(384, 6, 6, 8192, 512),
    "paper": _size(768, 12, 12, 50257, 1024),
}


Size = Literal[tuple(SIZES)]  # the registry's names, typed: a name not in it is refused by the config


def get_size(name: str) -> ModelSize:
    """The named size, or a ValueError listing the names; shared with ``bench.lm``."""
    if name not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {name!r}")
    return SIZES[name]


class ModelChoice(PredictorChoice):
    """Which model is built: SPEN or the GPT matched to it, at a named size, with SPEN's predictor
    (a GPT keeps the predictor of the SPEN it is sized to).  The lm experiment's config inherits it,
    so :func:`build_model` takes that config as it is."""

    model: Model = Field("spen", description=f"one of {', '.join(MODELS)}")
    size: Size = Field("tiny", description=f"model size: one of {', '.join(SIZES)}")


def spen_config(choice: ModelChoice, *, vocab_size: int | None = None, **overrides) -> SPENConfig:
    """The SPEN of ``choice``'s size and predictor (whichever its model); ``overrides`` set any other
    :class:`SPENConfig` field."""
    shape = SIZES[choice.size].shape
    fields = dict(shape.model_dump(), vocab_size=vocab_size or shape.vocab_size, predictor=choice.predictor,
                  attn_input=choice.attn_input)
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
    base = dict({name: getattr(spen, name) for name in ModelShape.model_fields if name != "d_ff"}, seq_len=seq_len)
    target = param_count(spen)
    p1, p2 = (param_count(GPTConfig(**base, d_ff=f)) for f in (1, 2))
    d_ff = 1 + (target - p1) / (p2 - p1)
    if d_ff < multiple / 2:
        raise ValueError(f"SPEN ({target:,} parameters) is smaller than a GPT of the same width with no FFN ({p1:,})")
    return GPTConfig(**base, d_ff=max(multiple, multiple * round(d_ff / multiple)))


def gpt_config(choice: ModelChoice, *, vocab_size: int | None = None, seq_len: int | None = None,
               **spen_overrides) -> GPTConfig:
    """The baseline matched to ``spen_config(choice, ...)`` with the same arguments."""
    spen = spen_config(choice, vocab_size=vocab_size, **spen_overrides)
    return matched_gpt_config(spen, seq_len=seq_len or SIZES[choice.size].seq_len)


def build_model(choice: ModelChoice, *, vocab_size: int | None = None, seq_len: int | None = None, seed: int = 0,
                **spen_overrides) -> nn.Module:
    """``choice.model`` at its size, initialised from ``seed``; the GPT is the one matched to that SPEN."""
    spen = spen_config(choice, vocab_size=vocab_size, **spen_overrides)
    if choice.model == "spen":
        return SPEN(spen, seed=seed)
    return GPT(matched_gpt_config(spen, seq_len=seq_len or SIZES[choice.size].seq_len), seed=seed)
