"""Content: a language model trained on real text — SPEN (EMA traces only) or the same-size GPT.

One run is one (model, predictor, attention input, size, corpus, seed).  The corpus is read through
HF ``datasets`` and cut by a BPE trained on its training split (:mod:`ema_core.lm.data`, cached by
content hash); the model comes from :mod:`ema_core.lm.sizes` (the GPT is the one matched in size
to the SPEN of the same settings); :func:`ema_core.lm.train.train_lm` trains it, checkpoints it and
evaluates it on the held-out text.

Results: one ``lm_eval`` row (split "val": loss in nats per token, perplexity, bits per byte), the
validation curve as ``val/*`` metrics, and a summary with the keys ``emalab run lm --json`` promises.
"""
from __future__ import annotations

import os
import time

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ema_core.config import field_like
from ema_core.lm.data import LMDataConfig, prepare, tokenizer_json
from ema_core.lm import predictors, sizes
from ema_core.lm.sizes import build_model
from ema_core.lm.train import Streams, TrainConfig, init_distributed, train_lm
from ema_core.protocol import Experiment, Reporter

KIND = "lm"
# The choice lists come from the registries that build the models (one declaration each).
MODELS = sizes.MODELS
PREDICTORS = tuple(predictors.PREDICTORS)
ATTN_INPUTS = predictors.ATTN_INPUTS
SIZES = tuple(sizes.SIZES)


class LMConfig(BaseModel):
    """A language model (SPEN or its same-size GPT) on a corpus; every setting the run depends on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field("spen", description=f"one of {', '.join(MODELS)}")
    predictor: str = Field("linear", description=f"SPEN's predictor: one of {', '.join(PREDICTORS)}")
    attn_input: str = Field("state", description="what an attention predictor reads: state (current traces), "
                                                 "sequence (past trace states) or tokens (raw inputs: the control)")
    size: str = Field("tiny", description=f"model size: one of {', '.join(SIZES)}")
    # data: the fields of LMDataConfig (one definition of each bound)
    corpus: str = field_like(LMDataConfig, "corpus")
    val_doc: str = field_like(LMDataConfig, "val_doc")
    val_fraction: float = field_like(LMDataConfig, "val_fraction")
    max_docs: int | None = field_like(LMDataConfig, "max_docs")
    max_chars: int | None = field_like(LMDataConfig, "max_chars")
    tokenizer: str = field_like(LMDataConfig, "tokenizer")
    vocab_size: int = field_like(LMDataConfig, "vocab_size", default=4096)
    # training: the fields of TrainConfig
    steps: int = field_like(TrainConfig, "steps")
    batch: int = field_like(TrainConfig, "batch")
    seq_len: int = field_like(TrainConfig, "seq_len")
    lr: float = field_like(TrainConfig, "lr")
    min_lr_frac: float = field_like(TrainConfig, "min_lr_frac")
    warmup: int = field_like(TrainConfig, "warmup")
    weight_decay: float = field_like(TrainConfig, "weight_decay")
    beta2: float = field_like(TrainConfig, "beta2")
    grad_clip: float = field_like(TrainConfig, "grad_clip")
    eval_every: int = field_like(TrainConfig, "eval_every")
    eval_tokens: int = field_like(TrainConfig, "eval_tokens")
    final_eval_tokens: int = field_like(TrainConfig, "final_eval_tokens")
    log_every: int = field_like(TrainConfig, "log_every")
    checkpoint_every: int = field_like(TrainConfig, "checkpoint_every")
    device: str = Field("auto", description="auto (CUDA when present), cpu or cuda")
    threads: int = Field(0, ge=0, le=1024, description="torch CPU threads (0: torch's default)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the initialisation and of the batches")

    @field_validator("device")
    @classmethod
    def _device_present(cls, v: str) -> str:
        # Refused with the config, before a run folder exists, rather than by the run a moment later.
        if v == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("no CUDA device is visible on this machine; use auto or cpu")
        return v

    @model_validator(mode="after")
    def _choices(self) -> "LMConfig":
        for name, allowed in (("model", MODELS), ("predictor", PREDICTORS), ("attn_input", ATTN_INPUTS),
                              ("size", SIZES), ("device", ("auto", "cpu", "cuda"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.predictor == "linear" and self.attn_input != "state":
            raise ValueError(f"attn_input={self.attn_input!r} needs an attention predictor; the linear predictor "
                             "reads the current trace state only")
        # The component configs' own checks (an unknown novel, a missing corpus file, a warm-up
        # longer than the run) at config time, before a run folder exists.
        self.data_config()
        self.train_config()
        return self

    def data_config(self) -> LMDataConfig:
        return LMDataConfig(**{name: getattr(self, name) for name in LMDataConfig.model_fields})

    def train_config(self) -> TrainConfig:
        return TrainConfig(**{name: getattr(self, name) for name in TrainConfig.model_fields})


PRESETS: dict[str, dict] = {
    # A few minutes on 2 cores: the one-click reproduction and the predictor ablation's budget
    # (0.6M training tokens, under one pass over the five novels).
    "quick": dict(size="tiny", vocab_size=4096, seq_len=256, batch=8, steps=300, warmup=30, lr=3e-3,
                  eval_every=50, eval_tokens=16_384, final_eval_tokens=65_536),
    # Two CPU cores, about ten minutes, to a validation loss that has stopped moving.
    "tiny": dict(size="tiny", vocab_size=4096, seq_len=256, batch=8, steps=1200, warmup=100, lr=3e-3,
                 eval_every=100, eval_tokens=16_384),
    # One GPU (or a patient CPU).
    "small": dict(size="small", vocab_size=8192, seq_len=512, batch=32, steps=5000, warmup=250, lr=1.5e-3,
                  eval_every=250, eval_tokens=131_072),
    # The paper's size: 12 blocks, d = 768, ≈ 130M parameters with GPT-2's vocabulary size; for a GPU.
    "paper": dict(size="paper", vocab_size=50_257, seq_len=1024, batch=32, steps=20_000, warmup=1000, lr=6e-4,
                  eval_every=500, eval_tokens=262_144, checkpoint_every=1000),
}


def run(cfg: LMConfig, reporter: Reporter) -> dict:
    t_start = time.perf_counter()
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # Bit-identical resume on CPU; on CUDA, warn-only (some kernels have no deterministic form).
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return _run(cfg, reporter, t_start)
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


def _device(cfg: LMConfig):
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA device is visible")
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _run(cfg: LMConfig, reporter: Reporter, t_start: float) -> dict:
    reporter.progress(0.0, "reading the corpus and its tokenizer")
    data = prepare(cfg.data_config())
    tok = data.tokenizer
    # The tokenizer travels with the run: its numbers mean nothing without it.
    reporter.save_artifact("tokenizer.json", tokenizer_json(tok).encode())
    rank, world, device = init_distributed() if _under_torchrun() else (0, 1, _device(cfg))
    model = build_model(cfg.model, cfg.size, vocab_size=tok.get_vocab_size(), predictor=cfg.predictor,
                        attn_input=cfg.attn_input, seq_len=cfg.seq_len, seed=cfg.seed)
    params = sum(p.numel() for p in model.parameters())

    def val_bytes(ids: np.ndarray) -> int:
        return len(tok.decode(np.asarray(ids).tolist(), skip_special_tokens=True).encode("utf-8"))

    streams = Streams(train=np.array(data.streams.train), val=np.array(data.streams.val), val_bytes=val_bytes)
    reporter.progress(0.0, f"training {cfg.model} ({params:,} parameters)")
    out = train_lm(model, streams, cfg.train_config(), cfg.seed, reporter, device=device,
                   extra_state={"config": cfg.model_dump_json()})
    final = out["final"]
    summary = {
        "model": cfg.model,
        "predictor": cfg.predictor if cfg.model == "spen" else None,
        "attn_input": cfg.attn_input if cfg.model == "spen" and cfg.predictor != "linear" else None,
        # The GPT is sized to the SPEN of the same settings: which one, so that its size is explained.
        "matched_to": None if cfg.model == "spen" else f"spen/{cfg.predictor}/{cfg.attn_input}",
        "size": cfg.size,
        "params": params,
        "tokens": out["tokens"],
        "val_loss": final.get("loss"),
        "val_ppl": final.get("ppl"),
        "val_bpb": final.get("bpb"),
        "val_tokens": final.get("tokens"),
        "tokens_per_s": out["tokens_per_s"],
        "corpus": data.corpus.name,
        "vocab_size": tok.get_vocab_size(),
        "device": str(device),
        "world_size": world,
    }
    summary["seconds"] = time.perf_counter() - t_start
    reporter.progress(1.0, "done")
    rows = [{"split": "val", "loss": final["loss"], "ppl": final["ppl"], "bpb": final["bpb"]}] if final else []
    return {"summary": summary, "tables": {"lm_eval": rows}}


def _under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


EXPERIMENT = Experiment(
    kind=KIND,
    config_cls=LMConfig,
    presets=PRESETS,
    run=run,
    description="A language model on real text: SPEN (EMA traces only, a predictor ablation) or the same-size GPT.",
    identity=("model", "predictor", "attn_input", "corpus"),
)
