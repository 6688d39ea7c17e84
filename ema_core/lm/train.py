"""Training and evaluation of the language models (SPEN, GPT): one loop for both, CPU or GPU, one or many processes.

* AdamW (weight decay on matrices only), linear warm-up then cosine decay to ``min_lr_frac``·lr
  (``schedule`` "cosine"), or held at lr until a final 1 − sqrt decay over ``decay_frac`` of the steps
  ("wsd": the long runs, whose intermediate evaluations are then at one rate),
  gradient clipping by global norm, bf16 autocast on CUDA (weights and optimiser stay float32).
* Batches are a pure function of (seed, rank, step): each step draws ``batch`` windows of
  ``seq_len + 1`` tokens from the training stream with a generator seeded from those three numbers.
  A checkpoint therefore needs no data-loader state — the step is the position — and a resumed run
  draws exactly the batches the uninterrupted one would have.
* Evaluation: the held-out stream cut into consecutive windows of ``seq_len + 1`` tokens (each
  window starts with an empty context, for SPEN and GPT alike), mean cross-entropy per predicted
  token in nats; perplexity = e^loss; bits per byte = loss · tokens / (bytes · ln 2), where bytes are
  the UTF-8 bytes of exactly the predicted tokens — comparable across tokenizers.
* Many processes: under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in
  ``DistributedDataParallel``; each rank draws its own ``batch`` windows (the global batch is
  ``batch × world``), gradients are averaged by DDP, and rank 0 alone evaluates, logs and
  checkpoints.  The CPU test runs two processes over gloo.

A run is bit-identical when resumed on CPU from any checkpoint, given the same thread count
(``torch.use_deterministic_algorithms`` is on while training).
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Callable, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ema_core.learning_rates import Auto
from ema_core.lm.token_classes import SPLITS, TrainCounts, partition_codes, partition_sums
from ema_core.protocol import Cancelled, NullReporter, check_checkpoint, stored
from ema_core.schedule import SCHEDULES, warmup_cosine, warmup_stable_decay, wsd_decay

CHECKPOINT_FORMAT = 1
# The loss splits every evaluation of a run reports (:func:`evaluate`'s ``token_classes``): a curve
# entry of a checkpoint written before them lacks these keys, and still resumes.
CLASS_SPLITS = tuple(s.key for s in SPLITS)


class TrainConfig(BaseModel):
    """The optimisation of one language model; the seed is passed beside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(1000, ge=1, le=10_000_000, description="optimiser steps")
    batch: int = Field(16, ge=1, le=65_536, description="sequences per step (per process under DDP)")
    seq_len: int = Field(256, ge=2, le=131_072, description="tokens per training sequence (and per eval window)")
    lr: Annotated[float, Field(gt=0.0, le=10.0)] | Auto = Field(
        3e-3, description="peak learning rate, or auto: the rate chosen on dev (ema_core.learning_rates: "
                          "each study's table), resolved by the run, which records the number it used")
    min_lr_frac: float = Field(0.1, ge=0.0, le=1.0, description="the schedule ends at this fraction of lr")
    schedule: Literal[SCHEDULES] = Field(
        "cosine", description="cosine: warm-up then cosine decay; wsd: warm-up, constant, then a 1 - sqrt decay "
                              "over the last decay_frac of the steps")
    decay_frac: float = Field(0.2, ge=0.0, le=1.0, description="wsd: the fraction of the steps that decays")
    warmup: int = Field(100, ge=0, le=10_000_000, description="steps of linear warm-up")
    weight_decay: float = Field(0.1, ge=0.0, le=10.0, description="AdamW decay on weight matrices")
    beta2: float = Field(0.95, gt=0.0, lt=1.0, description="AdamW β2 (β1 = 0.9)")
    grad_clip: float = Field(1.0, ge=0.0, le=1e6, description="max global gradient norm (0: no clipping)")
    eval_every: int = Field(100, ge=1, le=10_000_000, description="steps between validation evaluations")
    eval_tokens: int = Field(32_768, ge=1, le=10**10, description="validation tokens per periodic evaluation")
    final_eval_tokens: int = Field(0, ge=0, le=10**10, description="validation tokens at the end (0: all of them)")
    log_every: int = Field(10, ge=1, le=10_000_000, description="steps between logged training losses")
    checkpoint_every: int = Field(200, ge=1, le=10_000_000, description="steps between checkpoints")

    @field_validator("lr", mode="wrap")
    @classmethod
    def _rate(cls, v, handler):
        try:
            return handler(v)
        except ValidationError:  # one line, rather than one per member of the union
            raise ValueError("expects a number in (0, 10] or auto") from None

    @model_validator(mode="after")
    def _warmup_fits(self) -> "TrainConfig":
        if self.warmup > self.steps:
            raise ValueError(f"warmup ({self.warmup}) is longer than the run ({self.steps} steps)")
        return self


@dataclass
class Streams:
    """Token ids of the training and held-out text, and how to count the bytes of held-out tokens."""

    train: np.ndarray  # (N,) ints
    val: np.ndarray  # (M,) ints
    val_bytes: Callable[[np.ndarray], int]  # UTF-8 bytes of the text these val tokens spell

    @cached_property
    def counts(self) -> TrainCounts | None:
        """The training split's bands and bigram counts, counted once per stream (every evaluation reads
        them); None without training text."""
        train = np.asarray(self.train if self.train is not None else [], dtype=np.int64)
        if not train.size:
            return None
        # Any vocabulary that holds every id gives the same classes (unseen types rank last, as rare).
        return TrainCounts.of(train, int(max(train.max(), np.max(self.val))) + 1)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimiser step ``step`` (0-based): linear warm-up, then ``cfg.schedule``'s decay to
    min_lr_frac·lr."""
    if cfg.schedule == "wsd":
        decay = wsd_decay(cfg.steps, cfg.decay_frac)
        return cfg.lr * warmup_stable_decay(step, cfg.steps, cfg.warmup, decay, cfg.min_lr_frac)
    return cfg.lr * warmup_cosine(step, cfg.steps, cfg.warmup, cfg.min_lr_frac)


def batch_at(train: torch.Tensor, step: int, cfg: TrainConfig, seed: int, rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y), each (batch, seq_len): windows drawn by a generator seeded from (seed, rank, step)."""
    n = train.numel() - cfg.seq_len - 1
    if n < 1:
        raise ValueError(f"the training stream ({train.numel()} tokens) is shorter than seq_len + 1 ({cfg.seq_len + 1})")
    g = torch.Generator().manual_seed(int(np.random.SeedSequence((seed, rank, step)).generate_state(1)[0]))
    starts = torch.randint(0, n + 1, (cfg.batch,), generator=g)  # (B,)
    idx = starts[:, None] + torch.arange(cfg.seq_len + 1)  # (B, T + 1)
    w = train[idx]
    return w[:, :-1], w[:, 1:]


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """The AdamW of :func:`train_lm`; shared with ``bench.lm``, which times the very same step."""
    # Decay the matrices (embeddings, projections); not biases, norm gains or other vectors.
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2), eps=1e-8)


def autocast(device: torch.device):
    """bf16 autocast on CUDA, nothing on the CPU; shared with ``bench.lm``, which times the very same step."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: torch.nn.Module, streams: Streams, seq_len: int, max_tokens: int = 0, batch: int = 16,
             device: torch.device | str = "cpu", *, token_classes: bool = False,
             keep_losses: bool = False) -> dict[str, float | dict]:
    """Mean loss (nats per token), perplexity and bits per byte over the first ``max_tokens`` held-out tokens (0: all).

    ``token_classes`` adds the loss split by token under every partition of
    :data:`ema_core.lm.token_classes.SPLITS`, each under its key (``token_classes``: associative recall by
    distance, first sight, other; ``recall_by_position``; and, when ``streams.train`` holds tokens,
    ``token_bands`` and ``recall_by_bigram_count``).  Each maps a class to ``{"tokens", "loss"}``, the loss
    summed in nats, so a partition's losses add up to ``loss · tokens``; ``loss`` itself is the same number
    as without the split.  ``keep_losses`` also returns the scored ``windows`` (n, seq_len + 1) and each
    target's loss, ``token_losses`` (n, seq_len), for what mixes something into the model's predictions.
    """
    device = torch.device(device)
    val = torch.as_tensor(np.asarray(streams.val, dtype=np.int64))
    n_windows = (val.numel() - 1) // seq_len
    if max_tokens:
        n_windows = min(n_windows, max(1, max_tokens // seq_len))
    if n_windows < 1:
        raise ValueError(f"the held-out stream ({val.numel()} tokens) is shorter than seq_len + 1 ({seq_len + 1})")
    per_target = token_classes or keep_losses
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    per_token, windows = [], []
    try:
        for w0 in range(0, n_windows, batch):
            w = torch.arange(w0, min(n_windows, w0 + batch))
            idx = w[:, None] * seq_len + torch.arange(seq_len + 1)  # (b, T + 1)
            chunk = val[idx]
            if per_target:
                windows.append(chunk.numpy())
            chunk = chunk.to(device)
            with autocast(device):
                logits = model(chunk[:, :-1])  # (b, T, V)
            logits, y = logits.float().flatten(0, 1), chunk[:, 1:].flatten()
            if per_target:
                # cross_entropy is log_softmax then nll_loss: the same two ops give the same sum as
                # without the split, and the per-token losses from one log_softmax.
                logp = F.log_softmax(logits, dim=-1)
                loss = F.nll_loss(logp, y, reduction="sum")
                per_token.append(F.nll_loss(logp, y, reduction="none").cpu().numpy().reshape(len(w), seq_len))
            else:
                loss = F.cross_entropy(logits, y, reduction="sum")
            total += float(loss)
            count += chunk[:, 1:].numel()
    finally:
        model.train(was_training)
    targets = np.asarray(streams.val[1: 1 + n_windows * seq_len])  # exactly the predicted tokens
    n_bytes = streams.val_bytes(targets)
    loss = total / count
    out = {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "bpb": loss * count / (max(n_bytes, 1) * math.log(2)),
           "tokens": count, "bytes": n_bytes}
    if per_target:
        scored, losses = np.concatenate(windows), np.concatenate(per_token)
        if token_classes:
            out.update(partition_sums(losses, partition_codes(scored, streams.counts)))
        if keep_losses:
            out.update(windows=scored, token_losses=losses)
    return out


def _dist() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def train_lm(model: torch.nn.Module, streams: Streams, cfg: TrainConfig, seed: int,
             reporter=None, *, device: torch.device | str = "cpu",
             extra_state: dict | None = None) -> dict:
    """Train ``model`` in place; returns the final evaluation and the run's figures.

    Every evaluation, each entry of the validation curve and the final one, carries its loss split by
    token class and frequency band (:func:`evaluate` with ``token_classes``; keys ``CLASS_SPLITS``),
    except curve entries restored from a checkpoint written before the split.
    ``reporter`` receives ``train/loss`` and ``train/lr`` every ``log_every`` steps, ``val/loss``,
    ``val/ppl`` and ``val/bpb`` every ``eval_every`` steps (rank 0 only), progress, and checkpoints;
    ``should_stop()`` is polled every step (a checkpoint is written, then :class:`Cancelled` raised).
    ``extra_state`` is stored in every checkpoint and must equal the stored one on resume (the caller's
    identity of the run: its config, as a :class:`~ema_core.protocol.StoredConfig`).  ``cfg.lr`` is a
    number: "auto" names no rate until the caller resolves it for its model (``ema_core.learning_rates.resolve``).
    """
    if isinstance(cfg.lr, str):
        raise ValueError(f"train_lm trains at a number; resolve train.lr={cfg.lr} first (ema_core.learning_rates.resolve)")
    reporter = reporter or NullReporter()
    device = torch.device(device)
    rank, world = _dist()
    main = rank == 0
    net, opt = _place_model(model, cfg, device, world)
    train = torch.as_tensor(np.asarray(streams.train, dtype=np.int64))
    extra_state = extra_state or {}
    start, curve, tokens_done, train_seconds = _restore(model, opt, reporter, extra_state, main, world)

    net.train()
    for step in range(start, cfg.steps):
        if _stop_requested(reporter, main, world):
            _checkpoint(reporter, main, step, model, opt, curve, tokens_done, train_seconds, extra_state)
            raise Cancelled(step)
        loss, step_tokens, step_seconds = _train_step(net, model, opt, train, step, cfg, seed, rank, device)
        train_seconds += step_seconds
        tokens_done += step_tokens * world
        done = step + 1
        loss_value = loss.item()
        if main:
            _report_step(model, streams, cfg, reporter, done, loss_value, curve, tokens_done, device)
        if done % cfg.checkpoint_every == 0 and done < cfg.steps:
            _checkpoint(reporter, main, done, model, opt, curve, tokens_done, train_seconds, extra_state)
    if world > 1:
        _check_ranks_agree(model)
    # The final evaluation keeps each target's loss (``windows``, ``token_losses``): what mixes a copy
    # mechanism into the model's predictions reads them (ema_core.lm.ngram.copy_mix_evaluation).
    final = (evaluate(model, streams, cfg.seq_len, cfg.final_eval_tokens, device=device, token_classes=True,
                      keep_losses=True) if main else {})
    return {"final": final, "curve": curve, "tokens": tokens_done, "train_seconds": train_seconds,
            "tokens_per_s": tokens_done / train_seconds if train_seconds > 0 else float("nan")}


def _place_model(model: torch.nn.Module, cfg: TrainConfig, device: torch.device,
                 world: int) -> tuple[torch.nn.Module, torch.optim.AdamW]:
    """Move ``model`` to ``device``; the module to train through (DDP-wrapped across ranks) and its optimiser."""
    model.to(device)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return net, build_optimizer(model, cfg)


def _restore(model: torch.nn.Module, opt: torch.optim.Optimizer, reporter, extra_state: dict, main: bool,
             world: int) -> tuple[int, list, int, float]:
    """Resume from the run's checkpoint if it has one; (start step, curve, tokens, train seconds)."""
    ckpt = reporter.load_checkpoint() if main or world == 1 else None
    if world > 1:  # every rank resumes from rank 0's checkpoint
        holder = [ckpt]
        torch.distributed.broadcast_object_list(holder, src=0)
        ckpt = holder[0]
    if ckpt is None:
        return 0, [], 0, 0.0
    _, state = ckpt
    check_checkpoint(state, what="language-model checkpoint of this run", fmt=CHECKPOINT_FORMAT,
                     keys=("step", "model", "optim", "curve", "tokens", "train_seconds"), expect=extra_state)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    return int(state["step"]), list(state["curve"]), int(state["tokens"]), float(state["train_seconds"])


def _checkpoint(reporter, main: bool, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer, curve: list,
                tokens_done: int, train_seconds: float, extra_state: dict) -> None:
    """Save the state to resume from at ``step`` (rank 0 writes; every rank holds the same)."""
    if main:
        reporter.save_checkpoint(step, {
            "format": CHECKPOINT_FORMAT, "step": step, "model": model.state_dict(), "optim": opt.state_dict(),
            "curve": curve, "tokens": tokens_done, "train_seconds": train_seconds, **stored(extra_state),
        })


def _stop_requested(reporter, main: bool, world: int) -> bool:
    """Whether rank 0's reporter asks to stop, agreed by every rank."""
    flag = torch.tensor([1 if (main and reporter.should_stop()) else 0])
    if world > 1:
        torch.distributed.all_reduce(flag)  # every rank stops at the same step
    return bool(flag.item())


def _train_step(net: torch.nn.Module, model: torch.nn.Module, opt: torch.optim.Optimizer, train: torch.Tensor,
                step: int, cfg: TrainConfig, seed: int, rank: int,
                device: torch.device) -> tuple[torch.Tensor, int, float]:
    """One optimiser step on this rank's batch of ``step``; (loss, the batch's tokens, its seconds)."""
    t0 = time.perf_counter()
    for group in opt.param_groups:
        group["lr"] = lr_at(step, cfg)
    x, y = batch_at(train, step, cfg, seed, rank)
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    with autocast(device):
        logits = net(x)  # (B, T, V)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return loss, x.numel(), time.perf_counter() - t0


def _report_step(model: torch.nn.Module, streams: Streams, cfg: TrainConfig, reporter, done: int, loss_value: float,
                 curve: list, tokens_done: int, device: torch.device) -> None:
    """Rank 0's logs after ``done`` steps: the training loss, the validation curve when due, progress."""
    if done % cfg.log_every == 0 or done == cfg.steps:
        reporter.log(done, {"train/loss": loss_value, "train/lr": lr_at(done - 1, cfg)})
    if done % cfg.eval_every == 0 or done == cfg.steps:
        ev = evaluate(model, streams, cfg.seq_len, cfg.eval_tokens, device=device, token_classes=True)
        # The class sums ride in the checkpointed curve, so a resumed run reports the steps before its
        # checkpoint as the uninterrupted one did (plain dicts of ints and floats: weights_only loads them).
        curve.append({"step": done, "tokens": tokens_done, **{k: ev[k] for k in ("loss", "ppl", "bpb")},
                      **{k: ev[k] for k in CLASS_SPLITS if k in ev}})
        reporter.log(done, {"val/loss": ev["loss"], "val/ppl": ev["ppl"], "val/bpb": ev["bpb"]})
    reporter.progress(done / cfg.steps, f"step {done}/{cfg.steps} · loss {loss_value:.3f}")


def _check_ranks_agree(model: torch.nn.Module) -> None:
    """DDP keeps replicas equal by construction; a cheap fingerprint checks it did, on every rank."""
    with torch.no_grad():
        fp = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1).cpu()
    prints = [torch.zeros(1, dtype=torch.float64) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(prints, fp)
    if any(not torch.equal(p, prints[0]) for p in prints):
        raise RuntimeError(f"the DDP replicas diverged: parameter fingerprints {[float(p) for p in prints]}")


def init_distributed() -> tuple[int, int, torch.device]:
    """Join the process group torchrun set up (gloo on CPU, nccl on GPU); (rank, world, device)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, torch.device("cuda" if torch.cuda.is_available() else "cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.distributed.is_initialized():  # the launcher joined already (jobs.ddp)
        device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
        return torch.distributed.get_rank(), torch.distributed.get_world_size(), device
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        torch.distributed.init_process_group("nccl")
        return torch.distributed.get_rank(), world, torch.device("cuda", local)
    torch.distributed.init_process_group("gloo")
    return torch.distributed.get_rank(), world, torch.device("cpu")
