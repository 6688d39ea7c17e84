"""Content: a language model trained on real text — SPEN (EMA traces only) or the same-size GPT.

One run is one (model, predictor, attention input, size, corpus, seed).  The corpus is read through
HF ``datasets`` and cut by a BPE trained on its training split (:mod:`ema_core.lm.data`, cached by
content hash); the model comes from :mod:`ema_core.lm.presets` (the GPT is the one matched in size
to the SPEN of the same settings); :func:`ema_core.lm.train.train_lm` trains it, checkpoints it and
evaluates it on the held-out text.

Results: one ``lm_eval`` row (split "val": loss in nats per token, perplexity, bits per byte), the
validation curve as ``val/*`` metrics, and a summary with the keys ``emalab run lm --json`` promises.
"""
from __future__ import annotations

import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ema_core.experiments.protocol import Experiment, Reporter

KIND = "lm"
MODELS = ("spen", "gpt")
PREDICTORS = ("linear", "linear_attention", "softmax_attention")
ATTN_INPUTS = ("state", "sequence", "tokens")
SIZES = ("tiny", "small", "paper")


class LMConfig(BaseModel):
    """A language model (SPEN or its same-size GPT) on a corpus; every setting the run depends on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field("spen", description=f"one of {', '.join(MODELS)}")
    predictor: str = Field("linear", description=f"SPEN's predictor: one of {', '.join(PREDICTORS)}")
    attn_input: str = Field("state", description="what an attention predictor reads: state (current traces), "
                                                 "sequence (past trace states) or tokens (raw inputs: the control)")
    size: str = Field("tiny", description=f"model size: one of {', '.join(SIZES)}")
    # data
    corpus: str = Field("austen", min_length=1, max_length=1000,
                        description='"austen", a local file or folder, or a hub dataset "owner/name[:config]"')
    val_doc: str = Field("persuasion", description="Austen only: the novel held out whole for validation")
    val_fraction: float = Field(0.05, gt=0, le=0.5, description="other corpora: the share held out")
    max_chars: int | None = Field(None, ge=1000, le=100_000_000_000, description="read at most this many characters")
    tokenizer: str = Field("bpe", min_length=1, max_length=1000, description='"bpe" (trained here) or a tokenizer')
    vocab_size: int = Field(4096, ge=257, le=262_144, description="BPE vocabulary")
    # training
    steps: int = Field(1000, ge=1, le=10_000_000, description="optimiser steps")
    batch: int = Field(16, ge=1, le=65_536, description="sequences per step (per process under DDP)")
    seq_len: int = Field(256, ge=2, le=131_072, description="tokens per sequence")
    lr: float = Field(3e-3, gt=0.0, le=10.0, description="peak learning rate (AdamW, warm-up, cosine)")
    warmup: int = Field(100, ge=0, le=10_000_000, description="warm-up steps")
    weight_decay: float = Field(0.1, ge=0.0, le=10.0, description="AdamW decay on weight matrices")
    grad_clip: float = Field(1.0, ge=0.0, le=1e6, description="max global gradient norm (0: none)")
    eval_every: int = Field(100, ge=1, le=10_000_000, description="steps between validation evaluations")
    eval_tokens: int = Field(32_768, ge=1, le=10**10, description="validation tokens per periodic evaluation")
    final_eval_tokens: int = Field(0, ge=0, le=10**10, description="validation tokens at the end (0: all)")
    log_every: int = Field(10, ge=1, le=10_000_000, description="steps between logged training losses")
    checkpoint_every: int = Field(200, ge=1, le=10_000_000, description="steps between checkpoints")
    device: str = Field("auto", description="auto (CUDA when present), cpu or cuda")
    threads: int = Field(0, ge=0, le=1024, description="torch CPU threads (0: torch's default)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the initialisation and of the batches")

    @model_validator(mode="after")
    def _choices(self) -> "LMConfig":
        for name, allowed in (("model", MODELS), ("predictor", PREDICTORS), ("attn_input", ATTN_INPUTS),
                              ("size", SIZES), ("device", ("auto", "cpu", "cuda"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.predictor == "linear" and self.attn_input != "state":
            raise ValueError(f"attn_input={self.attn_input!r} needs an attention predictor; the linear predictor "
                             "reads the current trace state only")
        if self.warmup > self.steps:
            raise ValueError(f"warmup ({self.warmup}) is longer than the run ({self.steps} steps)")
        self.data_config()  # the corpus settings' own checks (an unknown Austen novel) at config time
        return self

    def data_config(self):
        from ema_core.lm.data import LMDataConfig

        return LMDataConfig(corpus=self.corpus, val_doc=self.val_doc, val_fraction=self.val_fraction,
                            max_chars=self.max_chars, tokenizer=self.tokenizer, vocab_size=self.vocab_size)

    def train_config(self):
        from ema_core.lm.train import TrainConfig

        return TrainConfig(steps=self.steps, batch=self.batch, seq_len=self.seq_len, lr=self.lr, warmup=self.warmup,
                           weight_decay=self.weight_decay, grad_clip=self.grad_clip, eval_every=self.eval_every,
                           eval_tokens=self.eval_tokens, final_eval_tokens=self.final_eval_tokens,
                           log_every=self.log_every, checkpoint_every=self.checkpoint_every)


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
    import torch

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
    import torch

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA device is visible")
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _run(cfg: LMConfig, reporter: Reporter, t_start: float) -> dict:
    from ema_core.lm.data import prepare, tokenizer_json
    from ema_core.lm.presets import build_model
    from ema_core.lm.train import Streams, init_distributed, train_lm

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
    import os

    return int(os.environ.get("WORLD_SIZE", "1")) > 1


EXPERIMENT = Experiment(
    kind=KIND,
    config_cls=LMConfig,
    presets=PRESETS,
    run=run,
    description="A language model on real text: SPEN (EMA traces only, a predictor ablation) or the same-size GPT.",
)
