"""Dilution in depth, trained: small language models whose residual stream follows each rule, at several depths.

One run is a grid of cells (rule × depth × seed, :mod:`ema_core.depth.residual`): each cell trains
the model of its rule and depth on the lm study's corpus and tokenizer (:mod:`ema_core.lm.data`)
with the lm study's loop (:func:`ema_core.lm.train.train_lm`), then reads its held-out loss and bits
per byte and probes what its last block's stream still holds (:mod:`ema_core.depth.probes`), on the
trained model and on the same model at its initialisation.  At one (depth, seed) every rule starts
from the same body (the same draws for every block) and sees the same batches: rules differ only in
how the stream adds its blocks up.  Each (rule, depth) trains at its own rate, chosen on dev
(:mod:`ema_core.studies.depth.learning_rates`).  A ``sum`` cell also runs the remix test: its trained body frozen, only
the mixing weights of ``remix.fitted`` fitted on top.  Cells are independent and a pure function of
(config, seed, cell): a run resumes cell by cell, and cells train in parallel over ``workers``
processes (or a cluster's, :mod:`ema_core.cells`).

Result tables:

* ``depth_results``: one row per cell — rule, depth, seed, d, params, lr, tokens, train_loss,
  val_loss (nats/token), val_bpb, the probes (probe_token with probe_token_chance, probe_early,
  probe_early_resid, probe_prev with probe_prev_chance) and each probe at initialisation (``*_init``),
  mix_entropy, seconds;
* ``depth_weights``: the weight each block's stream gives each earlier output (rule, depth, seed,
  layer 1..L, source 0..layer, weight) at the end: the learned α for ``static``, the per-token weights
  averaged over the probe tokens for ``dynamic`` and ``select``, 1 on its own output for ``sum``;
* ``depth_weight_steps``: the same at every evaluation (``step``, 0 the initialisation) for every rule
  but ``sum``, averaged over the first ``probe.trajectory_windows`` windows;
* ``depth_remix``: per (depth, seed) and fitted rule, the frozen sum model's held-out loss
  (``base_loss``) and the remixed one's (``val_loss``), the steps and rate of the fit.

The summary holds ``cells``, ``seconds``, ``tokens`` (per model), ``map`` {rule: {depth: {…}}} (means
over seeds of :data:`SUMMARY_KEYS`), ``remix`` {rule: {depth: {"val_loss", "base_loss", "recovered",
"joint_gap"}}}, ``params``, ``param_gap``, ``lr`` {rule: {depth: rate}}, ``rate_table`` and
``rates_matched``, ``seeds`` and ``tuned_on``.
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
from ema_core.depth.residual import DepthLM, DepthLMConfig, depth_weights, mix_entropy, params
from ema_core.cells import (Device, cell_device, grid_axis, one_thread, run_cells, run_parallel, run_serial,
                             stop_requested)
from ema_core.lm.data import LMDataConfig, prepare
from ema_core.lm.gpt import NORMS
from ema_core.lm.train import Streams, TrainConfig, train_lm
from ema_core.mixers.causality import check_causal
from ema_core.learning_rates import AUTO, Resolved, find, resolve
from ema_core.protocol import Cancelled, Experiment, NullReporter, Reporter
from ema_core.studies.depth import KIND
from ema_core.studies.depth import learning_rates as rate_tables

# 2: a cell's outcome holds its weight trajectory and its remixes beside its row and weights.
CHECKPOINT_FORMAT = 2
# Parameters may differ between rules by at most this fraction at one depth (the 1 %).
PARAM_TOLERANCE = 0.01
# The quick budget, the default (the one the rate table was chosen at, so "auto" has a rate): 300 steps
# of 8 × 128 tokens, a third of them warm-up, evaluated every 100 steps on 8,192 tokens and at the end
# on 32,768; no checkpoint inside a cell (a cell is the unit of resume).
QUICK_TRAIN = TrainConfig(lr=AUTO, steps=300, batch=8, seq_len=128, warmup=100, eval_every=100, eval_tokens=8192,
                          final_eval_tokens=32_768, checkpoint_every=1_000_000)
# The rules a frozen ``sum`` model is remixed with by default: static weights, then input-dependent ones.
REMIX_RULES = ("static", "dynamic")


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
    classes: int = Field(64, ge=2, le=65_536, description="the token probes read the identity of the positions "
                                                          "holding one of this many most frequent tokens")
    trajectory_windows: int = Field(8, ge=1, le=4096, description="held-out windows the mixing weights are "
                                                                  "averaged over at each evaluation")


class DepthRemixConfig(BaseModel):
    """The remix test: a trained ``sum`` model frozen, only depth weights fitted on top of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Not ``rules``: the grid's own rules sit beside it at the top of the config.
    fitted: tuple[Rule, ...] = Field(REMIX_RULES, description="the rules whose mixing weights are fitted on the "
                                                              "frozen sum model (empty: no remix)")
    steps: int | None = Field(None, ge=1, le=10_000_000, description="optimiser steps of the fit (none: as many "
                                                                     "as the models trained, on the same batches)")

    @field_validator("fitted")
    @classmethod
    def _mixing(cls, v: tuple) -> tuple:
        if "sum" in v:
            raise ValueError("sum has no mixing weights to fit; remix with static, dynamic or select")
        if len(set(v)) != len(v):
            raise ValueError("a rule is given more than once")
        return v


class DepthConfig(BaseModel):
    """Residual rules × depths: does fixed accumulation in depth lose more as the stack grows?"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: tuple[Rule, ...] = Field(RULES, description=f"of {', '.join(RULES)}")
    depths: tuple[int, ...] = Field((4, 8, 16), max_length=16, description="blocks of each model")
    seeds: int = Field(1, ge=1, le=32, description="seeds per cell: seed, seed + 1, …")
    workers: int = Field(1, ge=1, le=64, description="cells trained at once (processes, one thread each)")
    device: Device = "cpu"
    data: LMDataConfig = LMDataConfig()
    model: DepthModelConfig = DepthModelConfig()
    train: TrainConfig = QUICK_TRAIN
    probe: DepthProbeConfig = DepthProbeConfig()
    remix: DepthRemixConfig = DepthRemixConfig()
    rates_from: str | None = Field(None, description="train.lr auto: the rate table read (none: the one chosen at "
                                                      "this config's budget; a name reads that table's rates here on "
                                                      "purpose, and the run says so)")
    seed: int = seed_field("first seed of the models' initialisation and of their batches")

    @field_validator("rules", "depths")
    @classmethod
    def _listed(cls, v: tuple) -> tuple:
        return grid_axis(v)

    @field_validator("depths")
    @classmethod
    def _depths(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 1 <= L <= 96 for L in v):
            raise ValueError("every depth must be 1 to 96 blocks")
        return tuple(sorted(v))

    @model_validator(mode="after")
    def _matched(self) -> "DepthConfig":
        # Refused here, before a run folder exists: a comparison of rules whose sizes differ by more
        # than the tolerance would credit a rule with its extra parameters.
        gap = param_gap(self, self.data.vocab_size)
        if gap > PARAM_TOLERANCE:
            raise ValueError(f"the rules' parameter counts differ by {gap:.2%} at one depth (at most "
                             f"{PARAM_TOLERANCE:.0%}); widen the model or drop the deepest depth")
        return self

    @model_validator(mode="after")
    def _rates(self) -> "DepthConfig":
        # Refused here, before a run folder exists: auto names a rate per (rule, depth) or none at all.
        if self.rates_from is not None:
            try:
                find(rate_tables.TABLES, self.rates_from)
            except ValueError as exc:
                raise ValueError(f"rates_from: {exc}") from None
        if self.train.lr == AUTO:
            self._auto([(r, L) for r in self._trained_rules() for L in self.depths])
        return self

    def _trained_rules(self) -> tuple[str, ...]:
        """Every rule a model is trained or fitted with: the grid's, and the remix's where sum is in it."""
        return tuple(dict.fromkeys((*self.rules, *(self.remix.fitted if "sum" in self.rules else ()))))

    def _auto(self, cells) -> Resolved:
        return resolve(rate_tables.TABLES, self.model_dump(mode="json"), cells, read=self.rates_from,
                       instead="set train.lr to a number, or rates_from to a table's name to read its rates here "
                               "on purpose")

    def rate_table(self) -> Resolved | None:
        """What "auto" reads: the table, and whether it was chosen at this config's settings (None for a
        numeric ``train.lr``)."""
        return None if self.train.lr != AUTO else self._auto(())

    def lr(self, rule: str, depth: int) -> float:
        """The peak rate ``rule`` trains at with ``depth`` blocks: ``train.lr``, or for "auto" the rate chosen
        for that (rule, depth) on dev (:mod:`ema_core.studies.depth.learning_rates`)."""
        if self.train.lr != AUTO:
            return float(self.train.lr)
        return self._auto([(rule, depth)]).rates[rule, depth]


def model_config(cfg: DepthConfig, rule: str, depth: int, vocab: int):
    """The :class:`ema_core.depth.residual.DepthLMConfig` of one cell."""

    return DepthLMConfig(**cfg.model.model_dump(), vocab_size=vocab, n_layers=depth, seq_len=cfg.train.seq_len,
                       rule=rule)


def param_counts(cfg: DepthConfig, vocab: int) -> dict[str, dict[int, int]]:
    """{rule: {depth: parameters}} for every rule of ``RULES`` (the tolerance holds against all of them)."""

    return {rule: {L: params(model_config(cfg, rule, L, vocab)) for L in cfg.depths} for rule in RULES}


def param_gap(cfg: DepthConfig, vocab: int) -> float:
    """The largest relative difference in parameters between the config's rules at one depth."""
    counts = param_counts(cfg, vocab)
    gaps = [max(counts[r][L] for r in cfg.rules) / min(counts[r][L] for r in cfg.rules) - 1 for L in cfg.depths]
    return max(gaps)


# A preset names every setting of its budget (a preset's dotted settings replace the defaults of the
# whole ``train`` part, so the quick budget is spelled out, from QUICK_TRAIN).
_QUICK = {f"train.{k}": v for k, v in QUICK_TRAIN.model_dump().items()}

PRESETS: dict[str, dict] = {
    # Every rule at 4, 8 and 16 blocks of the tiny width (d = 128), one seed, under 10 minutes on 2 cores
    # (docs/benchmarks.md): the default budget, 300 steps of 8 × 128 tokens (0.3M tokens) per model, two
    # cells at a time, each (rule, depth) at its own rate (auto: the quick table); the frozen sum remixed
    # with static and dynamic weights for as many steps.
    "quick": {"rules": RULES, "seeds": 1, "workers": 2, **_QUICK},
    # The budget axis: the same grid at 8× the tokens per model (2,400 steps of the same batch), with a
    # warm-up, a plateau and a cool-down over the last fifth (wsd, the content study's long schedule).
    # Its rates are the quick table's, read on purpose (rates_from): choosing them at this budget would
    # cost 8× the sweep; the page and the summary say so.  The remix fits its few weights for a quarter of
    # the steps (600: twice the quick budget's whole run).  About an hour a seed on 2 cores.
    "long": {"rules": RULES, "seeds": 1, "workers": 2, **_QUICK, "train.steps": 2400, "train.schedule": "wsd",
             "train.decay_frac": 0.2, "train.eval_every": 400, "rates_from": "quick", "remix.steps": 600},
    # The same grid, three seeds, eight times the tokens per model (4× the steps, 2× the context), at the
    # quick table's rates read on purpose: a night on 2 cores, an hour on a GPU.
    "full": {"rules": RULES, "seeds": 3, "workers": 2, **_QUICK, "train.seq_len": 256, "train.steps": 1200,
             "train.warmup": 200, "train.eval_every": 200, "train.eval_tokens": 16_384,
             "train.final_eval_tokens": 65_536, "probe.windows": 64, "rates_from": "quick"},
}


class DepthCell(NamedTuple):
    rule: str
    depth: int
    seed: int


def cells(cfg: DepthConfig) -> list[DepthCell]:
    """Every cell, seeds outermost (a run cut short holds whole grids first), then depth, then rule."""
    return [DepthCell(rule, L, cfg.seed + s) for s in range(cfg.seeds) for L in cfg.depths for rule in cfg.rules]


class _CellReporter(NullReporter):
    """What a cell's training loop reports to: nothing kept (a cell restarts whole on resume), a stop
    asked by the run, and ``on_eval(step)`` after each evaluation (where the mixing weights are read)."""

    def __init__(self, should_stop, on_eval=None):
        super().__init__()
        self._should_stop = should_stop
        self._on_eval = on_eval

    def should_stop(self) -> bool:
        return self._should_stop()

    def log(self, step: int, metrics: dict) -> None:
        super().log(step, metrics)
        if self._on_eval is not None and "val/loss" in metrics:
            self._on_eval(step)

    def save_checkpoint(self, step: int, state: dict) -> None:  # a cell is the unit of resume
        pass


def run_cell(cfg: DepthConfig, rule: str, depth: int, seed: int, should_stop=lambda: False, *,
             streams=None, probes: bool = True) -> dict | None:
    """One cell: its model trained, evaluated and probed; ``{"row": …, "weights": [...], "trajectory": [...],
    "remix": [...]}``, or None when ``should_stop`` answered yes first.  ``streams``
    (:class:`ema_core.lm.train.Streams`) replaces the config's corpus split: the rate sweep passes a dev
    slice of the training text in the held-out text's place (``bench.depth_lr``); ``probes`` False leaves
    the probes, the weights and the remix out (the row holds the losses only)."""

    t0 = time.perf_counter()
    if streams is None:
        streams = lm_streams(cfg)
    vocab = _vocab(cfg)
    device = cell_device(cfg.device)
    model = DepthLM(model_config(cfg, rule, depth, vocab), seed=seed).to(device)
    lr = cfg.lr(rule, depth)
    trajectory: list[dict] = []
    on_eval = None
    if probes:
        windows = probe_windows(streams.val, cfg.train.seq_len, cfg.probe.windows)
        frequent = frequent_tokens(streams.train, cfg.probe.classes)
        init = _probe(model, windows, frequent, device)
        if rule != "sum":  # the fixed sum's weights never move: 1 on each block's own output
            few = torch.as_tensor(windows[: cfg.probe.trajectory_windows], device=device)

            def on_eval(step: int) -> None:
                trajectory.extend({"rule": rule, "depth": depth, "seed": seed, "step": step, **w}
                                  for w in depth_weights(model, few))

            on_eval(0)
    cell_reporter = _CellReporter(should_stop, on_eval)
    try:
        out = train_lm(model, streams, cfg.train.model_copy(update={"lr": lr}), seed, cell_reporter, device=device)
    except Cancelled:
        return None
    train_loss = [m["train/loss"] for _, m in cell_reporter.events if "train/loss" in m]
    final = out["final"]
    row = {"rule": rule, "depth": depth, "seed": seed, "d": cfg.model.d_model,
           "params": sum(p.numel() for p in model.parameters()), "lr": lr, "tokens": out["tokens"],
           "train_loss": train_loss[-1], "val_loss": final["loss"], "val_bpb": final["bpb"]}
    if not probes:
        return {"row": {**row, "seconds": time.perf_counter() - t0}, "weights": [], "trajectory": [], "remix": []}
    row.update(_probe(model, windows, frequent, device))
    row.update({f"{k}_init": init[k] for k in INIT_PROBES})
    idx = torch.as_tensor(windows, device=device)
    if (entropy := mix_entropy(model, idx)) is not None:  # the fixed sum has no weights to spread
        row["mix_entropy"] = entropy
    weights = [{"rule": rule, "depth": depth, "seed": seed, **w} for w in depth_weights(model, idx)]
    remixed = []
    if rule == "sum":
        for fitted in cfg.remix.fitted:
            got = remix(cfg, model, fitted, depth, seed, streams, device, should_stop)
            if got is None:
                return None
            remixed.append({**got, "base_loss": row["val_loss"]})
    row["seconds"] = time.perf_counter() - t0
    return {"row": row, "weights": weights, "trajectory": trajectory, "remix": remixed}


# The probes also read on the model at its initialisation (``<name>_init`` in a row).
INIT_PROBES = ("probe_token", "probe_early", "probe_early_resid", "probe_prev")


def remix(cfg: DepthConfig, trained: DepthLM, rule: str, depth: int, seed: int, streams, device: torch.device,
          should_stop=lambda: False) -> dict | None:
    """The remix test for one rule: a model of ``rule`` given ``trained``'s body (a ``sum`` model: every
    block, the embeddings and the final norm), frozen, and only its mixing weights fitted on the training
    text, for ``remix.steps`` steps (default: as many as the models trained, on the same batches) at the
    rule's own rate at this depth.  Its mix starts as the identity, so at step 0 it is the sum model
    exactly; what the fit gains is what a better read of the *same* stream recovers.  None when stopped."""
    model = DepthLM(model_config(cfg, rule, depth, trained.cfg.vocab_size), seed=seed).to(device)
    missing, unexpected = model.load_state_dict(trained.state_dict(), strict=False)
    if unexpected or any(not k.startswith("mix.") for k in missing):
        raise ValueError(f"remix: {rule}'s body does not match the trained sum model's ({unexpected or missing})")
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("mix."))
    steps = cfg.remix.steps or cfg.train.steps
    lr = cfg.lr(rule, depth)
    train = cfg.train.model_copy(update={"lr": lr, "steps": steps, "warmup": min(cfg.train.warmup, steps - 1),
                                         "eval_every": steps, "eval_tokens": cfg.train.seq_len})
    try:
        out = train_lm(model, streams, train, seed, _CellReporter(should_stop), device=device)
    except Cancelled:
        return None
    return {"rule": rule, "depth": depth, "seed": seed, "steps": steps, "lr": lr, "val_loss": out["final"]["loss"]}


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
    """Every probe of the last block's stream (:func:`ema_core.depth.probes.probe_all`)."""

    was = model.training
    model.eval()
    try:
        finals, earlies, embeds = [], [], []
        for chunk in np.array_split(windows, max(1, len(windows) // 16)):
            s = model.streams(torch.as_tensor(chunk, device=device))
            finals.append(s["final"].float().cpu().numpy())
            # block 1's write: what it added to the embedding (its output less x_0)
            earlies.append((s["outputs"][1] - s["outputs"][0]).float().cpu().numpy())
            embeds.append(s["outputs"][0].float().cpu().numpy())
    finally:
        model.train(was)
    return probe_all(np.concatenate(finals), np.concatenate(earlies), np.concatenate(embeds), windows, frequent)


# The per-cell numbers the summary's map averages over seeds (the CLI's promise).
SUMMARY_KEYS = ("val_loss", "val_bpb", "probe_token", "probe_early", "probe_early_resid", "probe_prev",
                *(f"{k}_init" for k in ("probe_early_resid", "probe_prev")), "mix_entropy")


def _means(rows: list[dict], by: tuple[str, str], keys) -> dict:
    """{row[by[0]]: {str(row[by[1]]): {key: mean over the rows}}}; a missing or None value is left out."""
    acc: dict[str, dict[str, dict[str, list[float]]]] = {}
    for r in rows:
        cell = acc.setdefault(r[by[0]], {}).setdefault(str(r[by[1]]), {})
        for k in keys:
            if r.get(k) is not None:
                cell.setdefault(k, []).append(float(r[k]))
    return {a: {b: {k: float(np.mean(v)) for k, v in cell.items()} for b, cell in inner.items()}
            for a, inner in acc.items()}


def summarise(cfg: DepthConfig, rows: list[dict], seconds: float, vocab: int, remixed: list[dict] = ()) -> dict:
    """The nested map the CLI prints, from the cells' rows (means over seeds): the map, the rate every
    (rule, depth) trained at and the table it came from, and the remix beside the joint models' gap."""
    counts = param_counts(cfg, vocab)
    joint = {(r["rule"], r["depth"], r["seed"]): r["val_loss"] for r in rows}
    remix_rows = [{**m, "recovered": m["base_loss"] - m["val_loss"],
                   "joint_gap": (m["base_loss"] - joint[(m["rule"], m["depth"], m["seed"])]
                                 if (m["rule"], m["depth"], m["seed"]) in joint else None)} for m in remixed]
    table = cfg.rate_table()
    return {
        "cells": len(rows),
        "seconds": seconds,
        "tokens": sorted({int(r["tokens"]) for r in rows}),
        "map": _means(rows, ("rule", "depth"), SUMMARY_KEYS),
        "remix": _means(remix_rows, ("rule", "depth"), ("val_loss", "base_loss", "recovered", "joint_gap")),
        "params": {rule: {str(L): counts[rule][L] for L in cfg.depths} for rule in cfg.rules},
        "param_gap": param_gap(cfg, vocab),
        "lr": {rule: {str(L): cfg.lr(rule, L) for L in cfg.depths} for rule in cfg._trained_rules()},
        "lr_auto": cfg.train.lr == AUTO,
        # Which table auto read, and whether it was chosen at this very budget (False: read on purpose
        # at another, as the long preset reads the quick one).
        "rate_table": table.table.name if table else None,
        "rates_matched": table is not None and table.matched,
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
                              for m in ("val_loss", "probe_early_resid", "probe_prev")})
        reporter.progress(n_done / len(grid), f"{n_done}/{len(grid)} cells: {cell.rule} · {cell.depth} blocks · seed "
                                              f"{cell.seed} → val loss {row['val_loss']:.3f}")

    def parallel(todo: list[int], finished) -> bool:
        # The longest cells first (the deepest; a sum cell also fits its remixes, each about two thirds of
        # a cell): a long cell handed out last would leave the other workers idle.
        def cost(i: int) -> float:
            return grid[i].depth * (1 + 0.7 * len(cfg.remix.fitted) * (grid[i].rule == "sum"))

        order = sorted(todo, key=lambda i: -cost(i))
        return run_parallel([(i, (cfg, *grid[i])) for i in order], cfg.workers, reporter, finished, _worker_cell)

    def serial(todo: list[int], finished) -> bool:
        return run_serial([(i, (cfg, *grid[i])) for i in todo], len(grid), reporter, finished, run_cell,
                          lambda i: f"{grid[i].rule} · {grid[i].depth} blocks · seed {grid[i].seed}")

    done, seconds = run_cells(cfg, grid, reporter, kind=KIND, fmt=CHECKPOINT_FORMAT, t_start=t_start, report=report,
                              serial=serial, parallel=parallel)
    rows = [done[i]["row"] for i in range(len(grid))]
    every = [done[i] for i in range(len(grid))]
    remixed = [m for o in every for m in o["remix"]]
    return {"summary": summarise(cfg, rows, seconds, vocab, remixed),
            "tables": {"depth_results": rows, "depth_weights": [w for o in every for w in o["weights"]],
                       "depth_weight_steps": [w for o in every for w in o["trajectory"]],
                       "depth_remix": remixed}}


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
    kind=KIND, presets=PRESETS, run=run, headline=headline,
    config_cls=DepthConfig,
    description="Dilution in depth: language models whose residual stream sums, weighs or selects its blocks, "
                "at several depths.",
    one_click=False,  # about 10 minutes a seed on 2 cores: launched from its page
)
