"""Dilution sweep: identity decoding over a grid of rates and lags, by a decoder trained with gradients.

The measurement of :mod:`ema_core.dilution` (same token stream, same EMA traces, same feature
sets), with the closed-form ridge decoder replaced by a linear softmax classifier trained by Adam
on minibatches.  That makes it a real training loop: long enough to be worth a job, with model,
optimiser and data-order state to checkpoint and resume bit for bit.

Per feature set (each rate alone, then all rates together)::

    X (n, p)  standardised trace features, p = window·K_set·D
    logits = X W + b           W (p, (L+1)·V) → viewed (n, L+1, V): one V-way classifier per lag
    loss = Σ_lag CE(logits[:, lag], token at t − lag)

Accuracy per lag is scored on the held-out later stretch of the stream; chance is 1/V.

``decoder="peel"`` measures instead the decoder that knows the embedding table and the rates
(:func:`ema_core.dilution.peel_accuracy`): no training, so no Adam steps and no checkpoints but one
at a set boundary when a cancel arrives; the ``train`` settings are then unused.  Either way the
summary says, per feature set, its measured and analytic horizons and which limit applies
(:func:`ema_core.dilution.limit_frame`), from the stored trace's ``stream.precision`` and ``stream.noise``.
"""
from __future__ import annotations

import contextlib
import functools
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ema_core.config import PAPER_ALPHAS, check_rates, seed_field
from ema_core.dilution_config import Decoder, StreamConfig, check_decoder_window
from ema_core.protocol import Cancelled, Experiment, Reporter, StoredConfig, check_checkpoint, moved_into_groups
from ema_core.studies.dilution import KIND

GRID_ALPHAS = (0.5, 0.2, 0.1, 0.05, 0.02)
CHECKPOINT_FORMAT = 1


class SweepTrainConfig(BaseModel):
    """How each decoder is trained: Adam on minibatches drawn with replacement."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(500, ge=1, le=1_000_000, description="gradient steps per decoder")
    batch: int = Field(256, ge=1, le=65_536, description="training rows per step, drawn with replacement")
    lr: float = Field(1e-2, gt=0, le=10.0, description="Adam step size")
    log_every: int = Field(10, ge=1, le=1_000_000, description="steps between logged losses")
    checkpoint_every: int = Field(100, ge=1, le=1_000_000, description="steps between checkpoints")


class DilutionSweepConfig(BaseModel):
    """Identity decoding from EMA traces over a grid of rates and lags, decoders trained by Adam."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decoder: Decoder = Field("linear", description="linear: a softmax read-out trained by Adam; "
                                                   "peel: knows the embeddings and rates, no training")
    alphas: tuple[float, ...] = Field(GRID_ALPHAS, min_length=1, max_length=16, description="the grid of rates, each in (0, 1]")
    include_all: bool = Field(True, description="also train one decoder on all rates together")
    # The stream keeps the closed-form measurement's settings and bounds: the same class.
    stream: StreamConfig = StreamConfig()
    train: SweepTrainConfig = SweepTrainConfig()
    seed: int = seed_field("seed of the stream, the decoders' initialisation and their minibatches")

    @field_validator("alphas")
    @classmethod
    def _rates(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        return check_rates(v, distinct=True)

    @model_validator(mode="after")
    def _peel_reads_one_state(self) -> "DilutionSweepConfig":
        check_decoder_window(self.decoder, self.stream.window, "stream.window")
        return self


PRESETS: dict[str, dict] = {
    # ≈ 10 s on 2 cores, most of it the worker's imports: enough to see lag-0 decoding fade with lag.
    "quick": {"alphas": (0.5, 0.1, 0.02), "stream.vocab": 32, "stream.dim": 32, "stream.max_lag": 8,
              "stream.n_train": 4096, "stream.n_test": 1024, "train.steps": 200, "train.batch": 256,
              "train.lr": 0.02, "train.log_every": 10, "train.checkpoint_every": 50},
    # The paper's three rates inside a wider grid, at the page's sizes: minutes on 2 cores.
    "paper": {"alphas": tuple(sorted({*PAPER_ALPHAS, 0.3, 0.2, 0.05, 0.01}, reverse=True)), "stream.vocab": 64,
              "stream.dim": 64, "stream.max_lag": 24, "stream.n_train": 32_768, "stream.n_test": 8192,
              "train.steps": 2000, "train.batch": 512, "train.lr": 0.01, "train.log_every": 20,
              "train.checkpoint_every": 250},
}


def run(cfg: DilutionSweepConfig, reporter: Reporter) -> dict:
    t_start = time.perf_counter()
    with deterministic_torch():
        return _run(cfg, reporter, t_start)


@contextlib.contextmanager
def deterministic_torch():
    """One torch thread and deterministic algorithms while the block runs; shared with the structure
    experiment, whose resumed runs must match too."""
    # One intra-op thread: a float sum split over threads is added in an order that depends on the
    # thread count, and a resumed run may land in a process with another count (a Ray worker sets
    # OMP_NUM_THREADS=1, a local worker sees every core).  With one thread every matmul and
    # reduction has a single order, so killed-and-resumed equals uninterrupted bit for bit.  The
    # decoder is small (p ≤ a few hundred): more threads would buy little.
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)


def _data_seed(seed: int, set_index: int) -> int:
    # Independent minibatch orders per feature set, all fixed by the config's seed.
    return int(np.random.SeedSequence((seed, 7, set_index)).generate_state(1)[0])


def _dilution():
    """:mod:`ema_core.dilution`: the measurement whose stream, traces and feature sets this sweep decodes."""
    # The registry imports this module, so every CLI command and every worker of any kind would pay for it.
    from ema_core import dilution  # start-up: scipy and numba, 0.6 s on top of the registry: a dilution run only

    return dilution


def _run(cfg: DilutionSweepConfig, reporter: Reporter, t_start: float) -> dict:
    if cfg.decoder == "peel":
        return _run_peel(cfg, reporter, t_start)
    dilution = _dilution()
    sets = dilution.feature_sets(cfg.alphas, cfg.stream.window, cfg.stream.dim, include_all=cfg.include_all)
    total = len(sets) * cfg.train.steps
    # first: a bad checkpoint fails before any work
    resumed, start_set, start_step, rows, summary, elapsed_before = _restore(cfg, reporter)
    reporter.progress((start_set * cfg.train.steps + start_step) / total, "building the token stream and its traces")
    Xtr_all, Xte_all, Ytr, Yte = _build_data(cfg)
    checkpoint = functools.partial(_checkpoint, cfg, reporter, t_start, elapsed_before, rows, summary)
    for si, (name, cols) in enumerate(sets):
        if si < start_set:
            continue
        model, opt, gen = _new_decoder(cfg, si, len(cols))
        first_step = 0
        if si == start_set and resumed is not None and start_step > 0:  # stopped inside this set
            _load_decoder(resumed, model, opt, gen)
            first_step = start_step
        loss_value = _train_decoder(cfg, reporter, si, name, Xtr_all[:, cols], Ytr, model, opt, gen, first_step, total,
                                    checkpoint)
        acc = _score_decoder(cfg, model, Xte_all[:, cols], Yte)
        _record(cfg, reporter, si, name, acc, loss_value, rows, summary)
        if si + 1 < len(sets):  # a finished decoder is never trained again
            checkpoint(si + 1, 0)
    return _result(cfg, reporter, sets, rows, summary, elapsed_before + time.perf_counter() - t_start)


def _run_peel(cfg: DilutionSweepConfig, reporter: Reporter, t_start: float) -> dict:
    """The peel decoder on every feature set: measured directly on the held-out stretch, no training."""
    dilution = _dilution()
    sets = dilution.rate_sets(cfg.alphas, include_all=cfg.include_all)
    # A checkpoint exists only where a cancel came between two sets: the sets done, kept.
    _, start_set, _, rows, summary, elapsed_before = _restore(cfg, reporter)
    reporter.progress(start_set / len(sets), "building the token stream and its traces")
    # The stream of the linear decoder's runs, by the same path (see _build_data), scored on the same steps.
    stream = dilution.random_stream(cfg.stream, cfg.alphas, cfg.seed, backend="torch")
    test = np.arange(stream.first + cfg.stream.n_train, len(stream.tokens))
    checkpoint = functools.partial(_checkpoint, cfg, reporter, t_start, elapsed_before, rows, summary)
    a = np.asarray(cfg.alphas, dtype=np.float64)
    for si, (name, ks) in enumerate(sets):
        if si < start_set:
            continue
        if reporter.should_stop():
            checkpoint(si, 0)
            raise Cancelled(si * cfg.train.steps)
        reporter.progress(si / len(sets), f"{name}: peeling")
        acc = torch.from_numpy(dilution.peel_set_accuracy(stream, test, cfg.stream, a, ks))
        _record(cfg, reporter, si, name, acc, None, rows, summary)
    return _result(cfg, reporter, sets, rows, summary, elapsed_before + time.perf_counter() - t_start)


def _restore(cfg: DilutionSweepConfig, reporter: Reporter) -> tuple[dict | None, int, int, list[dict], dict, float]:
    """The checkpoint, set index, step, rows, summary and elapsed to resume from (torch RNG restored)."""
    ckpt = reporter.load_checkpoint()
    if ckpt is None:
        return None, 0, 0, [], {}, 0.0
    _, resumed = ckpt
    check_checkpoint(resumed, what="dilution-sweep checkpoint", fmt=CHECKPOINT_FORMAT,
                     keys=("set_index", "step", "model", "optim", "data_rng", "torch_rng", "rows", "summary",
                           "elapsed"), expect={"config": StoredConfig(KIND, cfg)})
    start_set, start_step = int(resumed["set_index"]), int(resumed["step"])
    rows, summary = list(resumed["rows"]), dict(resumed["summary"])
    elapsed_before = float(resumed["elapsed"])
    torch.set_rng_state(resumed["torch_rng"])
    return resumed, start_set, start_step, rows, summary, elapsed_before


def _build_data(cfg: DilutionSweepConfig):
    """Standardised train and test features (all rates) and their targets at every lag."""
    dilution = _dilution()
    K, D, L, Wn = len(cfg.alphas), cfg.stream.dim, cfg.stream.max_lag, cfg.stream.window
    # The stream of ``dilution._measure``, by the torch path, on the one thread this run holds: the
    # numba path splits a long stream by its thread count (which changes the traces' last bits, and a
    # resumed run must see the very same features), and its OpenMP pool spin-waits on cores that
    # other workers need (measured: two concurrent workers took 10x longer than one).
    stream = dilution.random_stream(cfg.stream, cfg.alphas, cfg.seed, backend="torch")
    tokens, traces, first = stream.tokens, stream.traces, stream.first
    steps_all = np.arange(first, len(tokens))
    train, test = steps_all[: cfg.stream.n_train], steps_all[cfg.stream.n_train :]
    Ftr = dilution.window_features(traces, train, Wn, K, D)  # (n, p) raw trace states
    Fte = dilution.window_features(traces, test, Wn, K, D)  # (m, p)
    # Standardised with the training stretch's statistics, as the closed-form decoder does: a slow
    # trace's scale is ~6x below a fast one's (energy α/(2 − α)), and one step size then suits all.
    mu = Ftr.mean(0, dtype=np.float64)
    sd = Ftr.std(0, dtype=np.float64) + 1e-12
    Xtr_all = ((Ftr - mu) / sd).astype(np.float32)
    Xte_all = ((Fte - mu) / sd).astype(np.float32)
    lags = np.arange(L + 1)
    Ytr = torch.from_numpy(tokens[train[:, None] - lags[None, :]])  # (n, L + 1)
    Yte = torch.from_numpy(tokens[test[:, None] - lags[None, :]])  # (m, L + 1)
    return Xtr_all, Xte_all, Ytr, Yte


def _checkpoint(cfg: DilutionSweepConfig, reporter: Reporter, t_start: float, elapsed_before: float, rows: list[dict],
                summary: dict, set_index: int, step: int, model=None, opt=None, gen=None) -> None:
    """Save the sweep's state at ``step`` of feature set ``set_index`` (a set's decoder only mid-set)."""
    state = {
        "format": CHECKPOINT_FORMAT,
        "config": cfg.model_dump_json(),
        "set_index": set_index,
        "step": step,  # steps done in this feature set: the data position with data_rng
        "model": model.state_dict() if model is not None else {},
        "optim": opt.state_dict() if opt is not None else {},
        "data_rng": gen.get_state() if gen is not None else torch.empty(0, dtype=torch.uint8),
        "torch_rng": torch.get_rng_state(),
        "rows": rows,
        "summary": summary,
        "elapsed": elapsed_before + time.perf_counter() - t_start,
    }
    reporter.save_checkpoint(set_index * cfg.train.steps + step, state)


def _new_decoder(cfg: DilutionSweepConfig, set_index: int, n_cols: int):
    """A zeroed linear decoder over ``n_cols`` features, its Adam and its minibatch generator."""
    # nn.Linear's own initialisation draws from the global torch RNG (kept in checkpoints) before the
    # zeros overwrite it: a resumed run must draw the same, so the construction stays as it is.
    model = torch.nn.Linear(n_cols, (cfg.stream.max_lag + 1) * cfg.stream.vocab)
    with torch.no_grad():  # a convex problem: zeros are a fine start and need no RNG
        model.weight.zero_()
        model.bias.zero_()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr)
    gen = torch.Generator().manual_seed(_data_seed(cfg.seed, set_index))
    return model, opt, gen


def _load_decoder(resumed: dict, model, opt, gen: torch.Generator) -> None:
    """Restore a decoder stopped mid-set: weights, optimiser and data position."""
    model.load_state_dict(resumed["model"])
    opt.load_state_dict(resumed["optim"])
    gen.set_state(resumed["data_rng"])


def _train_decoder(cfg: DilutionSweepConfig, reporter: Reporter, si: int, name: str, X: np.ndarray, Ytr: torch.Tensor,
                   model, opt, gen: torch.Generator, first_step: int, total: int, checkpoint) -> float:
    """Adam steps ``first_step``..``steps`` on feature set ``si``; the last logged loss (nan if none)."""
    L, V = cfg.stream.max_lag, cfg.stream.vocab
    Xtr = torch.from_numpy(np.ascontiguousarray(X))  # (n, p_set)
    n = len(Ytr)
    loss_value = float("nan")
    for step in range(first_step, cfg.train.steps):
        if reporter.should_stop():
            checkpoint(si, step, model, opt, gen)
            raise Cancelled(si * cfg.train.steps + step)
        idx = torch.randint(n, (cfg.train.batch,), generator=gen)  # the data order: gen's state is the position
        logits = model(Xtr[idx]).view(cfg.train.batch * (L + 1), V)  # (B·(L+1), V)
        loss = F.cross_entropy(logits, Ytr[idx].reshape(-1)) * (L + 1)  # Σ over lags of each lag's mean
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done = step + 1
        if done % cfg.train.log_every == 0 or done == cfg.train.steps:
            loss_value = loss.item()
            reporter.log(si * cfg.train.steps + done, {f"loss/{name}": loss_value})
        reporter.progress((si * cfg.train.steps + done) / total, f"{name}: step {done}/{cfg.train.steps}")
        if done % cfg.train.checkpoint_every == 0 and done < cfg.train.steps:
            checkpoint(si, done, model, opt, gen)
    return loss_value


def _score_decoder(cfg: DilutionSweepConfig, model, X: np.ndarray, Yte: torch.Tensor) -> torch.Tensor:
    """Held-out accuracy at each lag, (L + 1,)."""
    Xte = torch.from_numpy(np.ascontiguousarray(X))  # (m, p_set)
    with torch.no_grad():
        pred = model(Xte).view(-1, cfg.stream.max_lag + 1, cfg.stream.vocab).argmax(-1)  # (m, L + 1)
        return (pred == Yte).double().mean(0)


def _record(cfg: DilutionSweepConfig, reporter: Reporter, si: int, name: str, acc: torch.Tensor,
            loss_value: float | None, rows: list[dict], summary: dict) -> None:
    """Add feature set ``si``'s rows and summary entries, and log its accuracies (no loss: the peel)."""
    L, chance = cfg.stream.max_lag, 1.0 / cfg.stream.vocab
    rows.extend({"feature": name, "lag": lag, "accuracy": float(acc[lag]), "chance": chance} for lag in range(L + 1))
    summary[f"acc_lag0/{name}"] = float(acc[0])
    summary[f"acc_lag{L}/{name}"] = float(acc[L])
    if loss_value is not None:
        summary[f"final_loss/{name}"] = loss_value
    reporter.log((si + 1) * cfg.train.steps, {f"acc_lag0/{name}": float(acc[0]), f"acc_lag{L}/{name}": float(acc[L])})


def _result(cfg: DilutionSweepConfig, reporter: Reporter, sets, rows: list[dict], summary: dict, seconds: float) -> dict:
    """The run's result: the summary completed (with each feature set's horizons and limit), the accuracy table."""
    dilution = _dilution()
    limits = dilution.limit_frame(cfg.stream, cfg.alphas, cfg.decoder, pd.DataFrame(rows))
    for r in limits.itertuples():
        summary[f"horizon/{r.feature}"] = int(r.measured_horizon)
        summary[f"analytic_horizon/{r.feature}"] = float(r.analytic_horizon)
        summary[f"limit/{r.feature}"] = r.limit
        if r.feature != dilution.ALL_RATES:
            summary[f"sigma/{r.feature}"] = float(r.sigma)
    summary["chance"] = 1.0 / cfg.stream.vocab
    summary["feature_sets"] = ", ".join(name for name, _ in sets)
    summary["seconds"] = seconds
    reporter.progress(1.0, "done")
    return {"summary": summary, "tables": {"dilution_accuracy": rows}}


def headline(summary: dict) -> str:
    """A finished run in one line (its Jobs card, the run table): each feature set's measured horizon,
    the last lag decoded above chance; older runs without horizons, the lag-0 accuracy."""
    def per_set(prefix: str) -> dict[str, float]:
        return {k[len(prefix):]: v for k, v in summary.items()
                if k.startswith(prefix) and isinstance(v, (int, float)) and not isinstance(v, bool)}

    if horizons := per_set("horizon/"):
        return "horizon (lags): " + " · ".join(f"{name} {v:g}" for name, v in horizons.items())
    if lag0 := per_set("acc_lag0/"):
        return "lag-0 accuracy: " + " · ".join(f"{name} {v:.3f}" for name, v in lag0.items())
    return ""


EXPERIMENT = Experiment(
    kind=KIND, presets=PRESETS, run=run, headline=headline,
    config_cls=DilutionSweepConfig,
    description="Identity decoding from EMA traces over a grid of rates and lags (decoders trained by Adam).",
    # Runs made before configs were nested: the stream's and the training's settings were flat.
    older_paths=moved_into_groups(stream="vocab dim max_lag window n_train n_test",
                                  train="steps batch lr log_every checkpoint_every"),
)
