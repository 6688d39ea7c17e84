"""Dilution in depth, trained: small language models whose residual stream follows each rule, at several depths.

One run is a grid of cells (rule × depth × seed, :mod:`ema_core.depth.residual`): each cell trains
the model of its rule and depth on the lm study's corpus and tokenizer (:mod:`ema_core.lm.data`)
with the lm study's loop (:func:`ema_core.lm.train.train_lm`), then reads its held-out loss and bits
per byte and probes what its last block's stream still holds (:mod:`ema_core.depth.probes`: the
input token's identity, block 1's output), on the trained model and on the same model at its
initialisation.  At one (depth, seed) every rule starts from the same body (the same draws for
every block) and sees the same batches: rules differ only in how the stream adds its blocks up.
Each rule trains at its own rate, chosen on dev (:data:`AUTO_LR`).  Cells are independent and a pure
function of (config, seed, cell): a run resumes cell by cell, and cells train in parallel over
``workers`` processes (or a cluster's, :mod:`ema_core.experiments.cells`).

Result tables:

* ``depth_results``: one row per cell — rule, depth, seed, d, params, lr, tokens, train_loss,
  val_loss (nats/token), val_bpb, probe_token, probe_token_chance, probe_early, probe_token_init,
  probe_early_init, seconds;
* ``depth_weights``: the weight each block's stream gives each earlier output (rule, depth, seed,
  layer 1..L, source 0..layer, weight): the learned α for ``static``, the per-token weights averaged
  over the probe tokens for ``dynamic`` and ``select``, 1 on its own output for ``sum``.

The summary holds ``cells``, ``seconds`` and ``map`` {rule: {depth: {"val_loss", "val_bpb",
"probe_token", "probe_early"}}} (means over seeds), ``params`` {rule: {depth: count}},
``param_gap`` (the largest relative difference in parameters between rules at one depth), ``lr``
{rule: rate}, ``seeds`` and ``tuned_on``.
"""
from __future__ import annotations

import time
from typing import Literal, NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ema_core.config import seed_field
from ema_core.depth import RULES, Rule
from ema_core.depth.probes import frequent_tokens, probe_all
from ema_core.depth.residual import DepthConfig as ModelConfig
from ema_core.depth.residual import DepthLM, depth_weights, params
from ema_core.experiments.cells import one_thread, run_cells, run_parallel, run_serial, stop_requested
from ema_core.lm.data import LMDataConfig, prepare
from ema_core.lm.gpt import NORMS
from ema_core.lm.rates import AUTO, Auto
from ema_core.lm.train import Streams, TrainConfig, train_lm
from ema_core.mixers.causality import check_causal
from ema_core.protocol import Cancelled, Experiment, NullReporter, Reporter

KIND = "depth"
CHECKPOINT_FORMAT = 1
# Parameters may differ between rules by at most this fraction at one depth (the 1 %).
PARAM_TOLERANCE = 0.01
# Each rule's peak rate where ``train.lr`` is "auto": chosen on a dev slice of the training text (never
# the held-out novel) by ``python -m bench.depth_lr`` at the quick budget and 8 blocks, lowest mean dev
# loss over seeds 0 and 1, from 1e-3, 3e-3 and 1e-2: 3e-3 for every rule (1e-2 diverged on seed 1 for
# each; dynamic's chosen the same way when it was added; docs/benchmarks.md, The depth comparison's rates).
AUTO_LR: dict[str, float] = {"sum": 3e-3, "static": 3e-3, "dynamic": 3e-3, "select": 3e-3}


class DepthModelConfig(BaseModel):
    """The body every rule shares: GPT-2's blocks at the lm study's tiny width."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d_model: int = Field(128, ge=8, le=8192, description="d: width of the residual stream")
    n_heads: int = Field(4, ge=1, le=128, description="attention heads (must divide d_model)")
    d_ff: int = Field(512, ge=1, le=131_072, description="the MLP's width")
    norm: Literal[NORMS] = Field("layernorm", description="the pre-norms, select's gate norms and the final norm")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the residual branches, training only")

    @model_validator(mode="after")
    def _heads(self) -> "DepthModelConfig":
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        return self


class DepthProbeConfig(BaseModel):
    """The probes of the last block's stream (:mod:`ema_core.depth.probes`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    windows: int = Field(48, ge=3, le=4096, description="held-out windows of train.seq_len tokens probed "
                                                        "(half fit the probe, a quarter choose its penalty, a "
                                                        "quarter score it)")
    classes: int = Field(64, ge=2, le=65_536, description="the token probe reads the identity of the positions "
                                                          "holding one of this many most frequent tokens")


class DepthConfig(BaseModel):
    """Residual rules × depths: does fixed accumulation in depth lose more as the stack grows?"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: tuple[Rule, ...] = Field(RULES, description=f"of {', '.join(RULES)}")
    depths: tuple[int, ...] = Field((4, 8, 16), max_length=16, description="blocks of each model")
    seeds: int = Field(1, ge=1, le=32, description="seeds per cell: seed, seed + 1, …")
    workers: int = Field(1, ge=1, le=64, description="cells trained at once (processes, one thread each)")
    device: Literal["cpu", "cuda", "auto"] = Field("cpu", description="cpu, cuda, or auto (CUDA when present)")
    data: LMDataConfig = LMDataConfig()
    model: DepthModelConfig = DepthModelConfig()
    train: TrainConfig = TrainConfig(lr=AUTO)
    probe: DepthProbeConfig = DepthProbeConfig()
    seed: int = seed_field("first seed of the models' initialisation and of their batches")

    @field_validator("rules", "depths")
    @classmethod
    def _listed(cls, v: tuple) -> tuple:
        if not v:
            raise ValueError("none given; name at least one")
        repeated = [x for x in dict.fromkeys(v) if v.count(x) > 1]
        if repeated:
            raise ValueError(f"{', '.join(map(str, repeated))} given more than once; each may appear once")
        return v

    @field_validator("depths")
    @classmethod
    def _depths(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 1 <= L <= 96 for L in v):
            raise ValueError("every depth must be 1 to 96 blocks")
        return tuple(sorted(v))

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v == "cuda" and not torch.cuda.is_available():
            raise ValueError("no CUDA device is visible on this machine; use auto or cpu")
        return v

    @model_validator(mode="after")
    def _matched(self) -> "DepthConfig":
        # Refused here, before a run folder exists: a comparison of rules whose sizes differ by more
        # than the tolerance would credit a rule with its extra parameters.
        gap = param_gap(self, self.data.vocab_size)
        if gap > PARAM_TOLERANCE:
            raise ValueError(f"the rules' parameter counts differ by {gap:.2%} at one depth (at most "
                             f"{PARAM_TOLERANCE:.0%}); widen the model or drop the deepest depth")
        return self

    def lr(self, rule: str) -> float:
        """The peak rate ``rule`` trains at: ``train.lr``, or for "auto" the rate chosen for it on dev."""
        return AUTO_LR[rule] if self.train.lr == AUTO else float(self.train.lr)


def model_config(cfg: DepthConfig, rule: str, depth: int, vocab: int):
    """The :class:`ema_core.depth.residual.DepthConfig` of one cell."""

    return ModelConfig(**cfg.model.model_dump(), vocab_size=vocab, n_layers=depth, seq_len=cfg.train.seq_len,
                       rule=rule)


def param_counts(cfg: DepthConfig, vocab: int) -> dict[str, dict[int, int]]:
    """{rule: {depth: parameters}} for every rule of ``RULES`` (the tolerance holds against all of them)."""

    return {rule: {L: params(model_config(cfg, rule, L, vocab)) for L in cfg.depths} for rule in RULES}


def param_gap(cfg: DepthConfig, vocab: int) -> float:
    """The largest relative difference in parameters between the config's rules at one depth."""
    counts = param_counts(cfg, vocab)
    gaps = [max(counts[r][L] for r in cfg.rules) / min(counts[r][L] for r in cfg.rules) - 1 for L in cfg.depths]
    return max(gaps)


# The presets' rules: every rule but ``dynamic``, until it has a rate per depth.  At the one rate chosen
# for it at 8 blocks (3e-3) it trains best of the four at 4 and 8 blocks and diverges at 16 (dev seed 0:
# 6.33 nats/token against 5.33–5.40; docs/benchmarks.md).  ``rules=…,dynamic`` runs it on request.
PRESET_RULES = tuple(r for r in RULES if r != "dynamic")

PRESETS: dict[str, dict] = {
    # Three rules at 4, 8 and 16 blocks of the tiny width (d = 128), one seed, under 30 minutes on 2
    # cores (docs/benchmarks.md): 300 steps of 8 × 128 tokens (0.3M tokens) per model, two cells at a
    # time; each rule at its own rate (auto), the warm-up a third of the run.
    "quick": {"rules": PRESET_RULES, "seeds": 1, "workers": 2, "data.vocab_size": 4096, "train.seq_len": 128,
              "train.batch": 8, "train.steps": 300, "train.warmup": 100, "train.lr": AUTO, "train.eval_every": 100,
              "train.eval_tokens": 8192, "train.final_eval_tokens": 32_768, "train.checkpoint_every": 1_000_000,
              "probe.windows": 48},
    # The same grid, three seeds, eight times the tokens per model (4× the steps, 2× the context): a night on
    # 2 cores, an hour on a GPU.
    "full": {"rules": PRESET_RULES, "seeds": 3, "workers": 2, "data.vocab_size": 4096, "train.seq_len": 256,
             "train.batch": 8, "train.steps": 1200, "train.warmup": 200, "train.lr": AUTO, "train.eval_every": 200,
             "train.eval_tokens": 16_384, "train.final_eval_tokens": 65_536, "train.checkpoint_every": 1_000_000,
             "probe.windows": 64},
}


class Cell(NamedTuple):
    rule: str
    depth: int
    seed: int


def cells(cfg: DepthConfig) -> list[Cell]:
    """Every cell, seeds outermost (a run cut short holds whole grids first), then depth, then rule."""
    return [Cell(rule, L, cfg.seed + s) for s in range(cfg.seeds) for L in cfg.depths for rule in cfg.rules]


class _CellReporter(NullReporter):
    """What a cell's training loop reports to: nothing kept (a cell restarts whole on resume), and a
    stop asked by the run."""

    def __init__(self, should_stop):
        super().__init__()
        self._should_stop = should_stop

    def should_stop(self) -> bool:
        return self._should_stop()

    def save_checkpoint(self, step: int, state: dict) -> None:  # a cell is the unit of resume
        pass


def run_cell(cfg: DepthConfig, rule: str, depth: int, seed: int, should_stop=lambda: False, *,
             streams=None, probes: bool = True) -> dict | None:
    """One cell: its model trained, evaluated and probed; ``{"row": …, "weights": [...]}``, or None when
    ``should_stop`` answered yes first.  ``streams`` (:class:`ema_core.lm.train.Streams`) replaces the
    config's corpus split: the rate sweep passes a dev slice of the training text in the held-out
    text's place (``bench.depth_lr``); ``probes`` False leaves the probes and weights out."""

    t0 = time.perf_counter()
    if streams is None:
        streams = lm_streams(cfg)
    vocab = _vocab(cfg)
    device = torch.device("cuda" if cfg.device != "cpu" and torch.cuda.is_available() else "cpu")
    model = DepthLM(model_config(cfg, rule, depth, vocab), seed=seed).to(device)
    if probes:
        windows = probe_windows(streams.val, cfg.train.seq_len, cfg.probe.windows)
        frequent = frequent_tokens(streams.train, cfg.probe.classes)
        init = _probe(model, windows, frequent, device)
    cell_reporter = _CellReporter(should_stop)
    try:
        out = train_lm(model, streams, cfg.train.model_copy(update={"lr": cfg.lr(rule)}), seed, cell_reporter,
                       device=device)
    except Cancelled:
        return None
    train_loss = [m["train/loss"] for _, m in cell_reporter.events if "train/loss" in m]
    final = out["final"]
    row = {"rule": rule, "depth": depth, "seed": seed, "d": cfg.model.d_model,
           "params": sum(p.numel() for p in model.parameters()), "lr": cfg.lr(rule), "tokens": out["tokens"],
           "train_loss": train_loss[-1], "val_loss": final["loss"], "val_bpb": final["bpb"]}
    if not probes:
        return {"row": {**row, "seconds": time.perf_counter() - t0}, "weights": []}
    row.update(_probe(model, windows, frequent, device))
    row.update(probe_token_init=init["probe_token"], probe_early_init=init["probe_early"],
               seconds=time.perf_counter() - t0)
    weights = [{"rule": rule, "depth": depth, "seed": seed, **w}
               for w in depth_weights(model, torch.as_tensor(windows, device=device))]
    return {"row": row, "weights": weights}


def lm_streams(cfg: DepthConfig):
    """The corpus's training and held-out token streams, with the held-out bytes counted by its tokenizer."""

    data = prepare(cfg.data)
    tok = data.tokenizer

    def val_bytes(ids: np.ndarray) -> int:
        return len(tok.decode(np.asarray(ids).tolist(), skip_special_tokens=True).encode("utf-8"))

    return Streams(train=np.array(data.streams.train), val=np.array(data.streams.val), val_bytes=val_bytes)


def _vocab(cfg: DepthConfig) -> int:

    return prepare(cfg.data).tokenizer.get_vocab_size()


def probe_windows(val: np.ndarray, seq_len: int, n: int) -> np.ndarray:
    """(n, seq_len) int64: the held-out stream's first ``n`` consecutive windows (each starts a context)."""
    val = np.asarray(val, dtype=np.int64)
    if val.size < n * seq_len:
        raise ValueError(f"probe.windows: the held-out stream ({val.size} tokens) holds fewer than {n} windows of "
                         f"{seq_len} tokens")
    return val[: n * seq_len].reshape(n, seq_len)


@torch.no_grad()
def _probe(model, windows: np.ndarray, frequent: np.ndarray, device: torch.device) -> dict[str, float]:
    """Both probes of the last block's stream (:func:`ema_core.depth.probes.probe_all`)."""

    was = model.training
    model.eval()
    try:
        finals, earlies = [], []
        for chunk in np.array_split(windows, max(1, len(windows) // 16)):
            s = model.streams(torch.as_tensor(chunk, device=device))
            finals.append(s["final"].float().cpu().numpy())
            # block 1's write: what it added to the embedding (its output less x_0)
            earlies.append((s["outputs"][1] - s["outputs"][0]).float().cpu().numpy())
    finally:
        model.train(was)
    return probe_all(np.concatenate(finals), np.concatenate(earlies), windows, frequent)


def summarise(cfg: DepthConfig, rows: list[dict], seconds: float, vocab: int) -> dict:
    """The nested map the CLI prints, from the cells' rows (means over seeds)."""
    keys = ("val_loss", "val_bpb", "probe_token", "probe_early")
    acc: dict[str, dict[str, dict[str, list[float]]]] = {}
    for r in rows:
        by = acc.setdefault(r["rule"], {}).setdefault(str(r["depth"]), {})
        for k in keys:
            by.setdefault(k, []).append(float(r[k]))
    counts = param_counts(cfg, vocab)
    return {
        "cells": len(rows),
        "seconds": seconds,
        "map": {rule: {L: {k: float(np.mean(v)) for k, v in by.items()} for L, by in depths.items()}
                for rule, depths in acc.items()},
        "params": {rule: {str(L): counts[rule][L] for L in cfg.depths} for rule in cfg.rules},
        "param_gap": param_gap(cfg, vocab),
        "lr": {rule: cfg.lr(rule) for rule in cfg.rules},
        "lr_auto": cfg.train.lr == AUTO,
        "seeds": cfg.seeds,
        "vocab_size": vocab,
        "tuned_on": "dev",
    }


def run(cfg: DepthConfig, reporter: Reporter) -> dict:
    t_start = time.perf_counter()
    # The corpus and its tokenizer once, here: the cells' processes then read them from the cache
    # instead of each building the same tokenizer at once.
    reporter.progress(0.0, "reading the corpus and its tokenizer")
    vocab = _vocab(cfg)
    gap = param_gap(cfg, vocab)
    if gap > PARAM_TOLERANCE:  # the tokenizer's own vocabulary may differ from the config's
        raise ValueError(f"the rules' parameter counts differ by {gap:.2%} at one depth with this tokenizer's "
                         f"vocabulary ({vocab}); at most {PARAM_TOLERANCE:.0%}")
    check_rules(cfg)
    grid = cells(cfg)

    def report(i: int, outcome: dict, n_done: int) -> None:
        cell, row = grid[i], outcome["row"]
        reporter.log(n_done, {f"{m}/{cell.rule}/{cell.depth}": row[m]
                              for m in ("val_loss", "probe_token", "probe_early")})
        reporter.progress(n_done / len(grid), f"{n_done}/{len(grid)} cells: {cell.rule} · {cell.depth} blocks · seed "
                                              f"{cell.seed} → val loss {row['val_loss']:.3f}")

    def parallel(todo: list[int], finished) -> bool:
        # The deepest cells first: a long cell handed out last would leave the other workers idle.
        order = sorted(todo, key=lambda i: -grid[i].depth)
        return run_parallel([(i, (cfg, *grid[i])) for i in order], cfg.workers, reporter, finished, _worker_cell)

    def serial(todo: list[int], finished) -> bool:
        return run_serial([(i, (cfg, *grid[i])) for i in todo], len(grid), reporter, finished, run_cell,
                          lambda i: f"{grid[i].rule} · {grid[i].depth} blocks · seed {grid[i].seed}")

    done, seconds = run_cells(cfg, grid, reporter, kind=KIND, fmt=CHECKPOINT_FORMAT, t_start=t_start, report=report,
                              serial=serial, parallel=parallel)
    rows = [done[i]["row"] for i in range(len(grid))]
    weights = [w for i in range(len(grid)) for w in done[i]["weights"]]
    return {"summary": summarise(cfg, rows, seconds, vocab),
            "tables": {"depth_results": rows, "depth_weights": weights}}


def check_rules(cfg: DepthConfig) -> None:
    """Refuse a rule that reads ahead, before any cell trains: the exact probe the tests use, on a
    small model of each rule (:func:`ema_core.mixers.causality.check_causal`)."""

    with one_thread():
        for rule in cfg.rules:
            small = model_config(cfg, rule, min(cfg.depths), 16).model_copy(update={"seq_len": 40})
            try:
                check_causal(DepthLM(small, seed=0))
            except ValueError as exc:
                raise ValueError(f"rules: {exc}; the comparison trains causal models only") from None


def _worker_cell(cfg: DepthConfig, rule: str, depth: int, seed: int) -> dict | None:
    with one_thread():
        return run_cell(cfg, rule, depth, seed, stop_requested)


def headline(summary: dict) -> str:
    """A finished run in one line: its cells, and at the deepest depth each rule's held-out loss."""
    m = summary.get("map") or {}
    parts = [f"{summary['cells']} cells"] if isinstance(summary.get("cells"), int) else []
    depths = sorted({int(L) for by in m.values() for L in (by or {})})
    if depths:
        deep = str(depths[-1])
        losses = [f"{rule} {by[deep]['val_loss']:.3f}" for rule, by in m.items()
                  if isinstance((by or {}).get(deep, {}).get("val_loss"), (int, float))]
        if losses:
            parts.append(f"val loss at {deep} blocks: " + ", ".join(losses))
    return " · ".join(parts)


EXPERIMENT = Experiment(
    kind=KIND,
    config_cls=DepthConfig,
    presets=PRESETS,
    run=run,
    description="Dilution in depth: language models whose residual stream sums, weighs or selects its blocks, "
                "at several depths.",
    one_click=False,  # about 20 minutes a seed on 2 cores: launched from its page
    headline=headline,
)
