"""The boundary map: every context mixer on every task, distance by distance (:mod:`ema_core.boundary`).

One run is a grid of cells (mixer × task × difficulty × seed).  A cell trains the small model of
:mod:`ema_core.mixers.model` (2 layers, d = 64: the same body around each mixer) once per learning
rate of ``train.lrs``, keeps the rate whose model scores best on the dev split, and reports that
model's test accuracy.  Cells are independent and each is a pure function of (config, seed, cell):
a run resumes cell by cell (a cancel keeps the cells done; the cell it interrupted starts again).

Result rows (``boundary_accuracy``): mixer, task, difficulty, level (k, or MQAR's pairs), seq_len,
seed, accuracy (test), dev_accuracy, chance, lr (chosen on dev), state_floats, params.  The summary
holds ``cells``, ``seconds`` and the map as nested objects: ``map`` {mixer: {task: {difficulty:
accuracy}}} (mean over seeds), ``chance`` {task: value}, ``state_floats`` {mixer: floats per
sequence at the agreement tasks' length}; ``tuned_on`` says where the rates were chosen.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ema_core.boundary import Difficulty, TaskConfig, Trainer, accuracy, chance, make_data, task_seed
from ema_core.boundary_findings import TASKS, TaskName
from ema_core.config import seed_field
from ema_core.mixers import MIXER_NAMES, MixerName
from ema_core.protocol import Cancelled, Experiment, Reporter, StoredConfig, check_checkpoint

KIND = "boundary"
CHECKPOINT_FORMAT = 1


class BoundaryModelConfig(BaseModel):
    """The body every mixer sits in (:class:`ema_core.mixers.model.MixerNet`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d: int = Field(64, ge=4, le=4096, description="model width (divisible by the attention mixers' 4 heads)")
    layers: int = Field(2, ge=1, le=24, description="mixer + MLP blocks")
    window: int = Field(4, ge=1, le=256, description="the window mixer's width: the inputs each of its layers sees")
    positions: bool = Field(True, description="add fixed sinusoidal position codes to the embeddings (every mixer)")

    @field_validator("d")
    @classmethod
    def _heads(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"d must be divisible by 4 (the attention mixers' heads), got {v}")
        return v


class BoundaryTrainConfig(BaseModel):
    """How each cell trains: AdamW, warm-up then cosine, one model per learning rate of the grid."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(400, ge=1, le=1_000_000, description="gradient steps per model")
    batch: int = Field(32, ge=1, le=65_536, description="sequences per step, drawn with replacement")
    lrs: tuple[float, ...] = Field((1e-3, 3e-3, 1e-2), min_length=1, max_length=8,
                                   description="learning rates tried per cell; the one best on dev is kept")
    warmup: int = Field(20, ge=0, le=1_000_000, description="steps of linear warm-up")
    choose_at: float = Field(0.25, gt=0, le=1, description="fraction of the steps after which the rate best on "
                                                           "dev is kept and the others stop")

    @field_validator("lrs")
    @classmethod
    def _positive(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < lr <= 1 for lr in v):
            raise ValueError("every learning rate must be in (0, 1]")
        return v


class BoundaryConfig(BaseModel):
    """Every mixer on every task, distance by distance: where each keeps structure and loses content."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The grid's axes.  Names are typed from their lists (a Literal: an unknown one is refused where
    # the config is typed, with the names allowed); every axis holds at least one value, each once
    # (_listed: no cell is trained twice).
    mixers: tuple[MixerName, ...] = Field(MIXER_NAMES, description=f"of {', '.join(MIXER_NAMES)}")
    tasks: tuple[TaskName, ...] = Field(TASKS, description=f"of {', '.join(TASKS)}")
    distances: tuple[int, ...] = Field((1, 2, 4, 8, 16, 32), max_length=32,
                                       description="k of the agreement and lag tasks")
    mqar_pairs: tuple[int, ...] = Field((4, 8, 16, 32), max_length=16, description="MQAR's key-value pairs")
    mqar_len: tuple[int, ...] = Field((64, 128, 256), max_length=8,
                                      description="MQAR's sequence lengths (a size runs where 2·pairs < T)")
    seeds: int = Field(1, ge=1, le=32, description="seeds per cell: seed, seed + 1, …")
    # How many cells train at once, each in its own process on one thread: a small model gains more
    # from a second process than from a second thread (measured in docs/benchmarks.md).  Every cell
    # runs on one thread whatever this is, so the map does not depend on it.
    workers: int = Field(1, ge=1, le=64, description="cells trained at once (processes)")
    device: Literal["cpu", "cuda", "auto"] = Field("cpu", description="cpu, cuda, or auto (CUDA when present)")
    data: TaskConfig = TaskConfig()
    model: BoundaryModelConfig = BoundaryModelConfig()
    train: BoundaryTrainConfig = BoundaryTrainConfig()
    seed: int = seed_field("first seed of the tasks' data, the models' initialisation and their minibatches")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        # Refused with the config, before a run folder exists (as the lm kind does).
        if v == "cuda" and not torch.cuda.is_available():
            raise ValueError("no CUDA device is visible on this machine; use auto or cpu")
        return v

    @field_validator("mixers", "tasks")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _listed(v)

    @field_validator("distances", "mqar_pairs", "mqar_len")
    @classmethod
    def _positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(x < 1 for x in v):
            raise ValueError("every value must be a positive integer")
        return _listed(v)

    @model_validator(mode="after")
    def _fits(self) -> "BoundaryConfig":
        T = self.data.seq_len
        if any(k >= T for k in self.distances):
            raise ValueError(f"distances: every k must be below data.seq_len ({T}), got {list(self.distances)}")
        if "mqar" in self.tasks:
            if not mqar_sizes(self):
                raise ValueError(f"mqar: no size with 2·pairs < T among mqar_pairs {list(self.mqar_pairs)} and "
                                 f"mqar_len {list(self.mqar_len)}")
            if max(self.mqar_pairs) > self.data.mqar_keys:
                raise ValueError(f"mqar_pairs: at most data.mqar_keys ({self.data.mqar_keys}) pairs")
        return self


def _listed(v: tuple) -> tuple:
    """An axis of the grid: at least one value, each once.  The message names no setting and shows no
    value: config_error puts the setting's name before it and the value after it."""
    if not v:
        raise ValueError("none given; name at least one")
    repeated = [x for x in dict.fromkeys(v) if v.count(x) > 1]
    if repeated:
        raise ValueError(f"{', '.join(map(str, repeated))} given more than once; each may appear once")
    return v


def mqar_sizes(cfg: BoundaryConfig) -> list[tuple[int, int]]:
    return [(p, T) for T in cfg.mqar_len for p in cfg.mqar_pairs if 2 * p < T]


def difficulties(cfg: BoundaryConfig) -> list[Difficulty]:
    """The map's columns, task by task in the config's order."""
    out: list[Difficulty] = []
    for task in cfg.tasks:
        if task == "mqar":
            out.extend(Difficulty(task, pairs=p, seq_len=T) for p, T in mqar_sizes(cfg))
        else:
            out.extend(Difficulty(task, k=k, seq_len=cfg.data.seq_len) for k in cfg.distances)
    return out


def cells(cfg: BoundaryConfig) -> list[tuple[str, Difficulty, int]]:
    """Every (mixer, difficulty, seed), seeds outermost: a run cut short holds whole maps first."""
    seeds = [cfg.seed + i for i in range(cfg.seeds)]
    return [(m, d, s) for s in seeds for m in cfg.mixers for d in difficulties(cfg)]


PRESETS: dict[str, dict] = {
    # The whole map at one seed on 2 CPU cores in under 30 minutes (docs/benchmarks.md): every mixer
    # and task, 4 distances, 2 MQAR sizes; two learning rates per cell.
    "quick": {"distances": (1, 2, 4, 8), "mqar_pairs": (4, 16), "mqar_len": (64,), "seeds": 1, "workers": 2,
              "data.seq_len": 48, "data.n_train": 1024, "data.n_dev": 128, "data.n_test": 256,
              "train.steps": 600, "train.batch": 32, "train.lrs": (3e-3, 1e-2), "train.warmup": 20},
    # The whole grid at three seeds, for a GPU (or a long night on a CPU).
    "full": {"seeds": 3, "train.steps": 2000, "train.batch": 64, "data.n_train": 8192, "data.n_dev": 512,
             "data.n_test": 1024, "data.seq_len": 128},
}


def run(cfg: BoundaryConfig, reporter: Reporter) -> dict:
    t_start = time.perf_counter()
    grid = cells(cfg)
    done, elapsed_before = _restore(cfg, reporter)

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - t_start

    def finished(i: int, row: dict) -> None:
        done[i] = row
        mixer, d, _ = grid[i]
        reporter.log(len(done), {f"accuracy/{mixer}/{d.task}/{d.label}": row["accuracy"]})
        reporter.progress(len(done) / len(grid), f"{len(done)}/{len(grid)} cells: {mixer} · {d.task} {d.label} "
                                                 f"→ {row['accuracy']:.3f}")
        if len(done) < len(grid):
            _checkpoint(cfg, reporter, done, elapsed())

    todo = [i for i in range(len(grid)) if i not in done]
    complete = (_run_parallel if cfg.workers > 1 and len(todo) > 1 else _run_serial)(cfg, grid, todo, reporter,
                                                                                      finished)
    if not complete:  # stopped: the cells done are kept, the ones cut short start again on resume
        _checkpoint(cfg, reporter, done, elapsed())
        raise Cancelled(len(done))
    reporter.progress(1.0, "done")
    rows = [done[i] for i in range(len(grid))]
    return {"summary": summarise(cfg, rows, elapsed()), "tables": {"boundary_accuracy": rows}}


def _run_serial(cfg, grid, todo, reporter, finished) -> bool:
    with one_thread():
        for i in todo:
            mixer, d, seed = grid[i]
            reporter.progress(i / len(grid), f"cell {i + 1}/{len(grid)}: {mixer} · {d.task} {d.label} · seed {seed}")
            row = run_cell(cfg, mixer, d, seed, reporter.should_stop)
            if row is None:
                return False
            finished(i, row)
    return True


def _run_parallel(cfg, grid, todo, reporter, finished) -> bool:
    """The cells in ``cfg.workers`` processes; a stop is passed to them through one shared event."""
    # Spawned, not forked: the parent may hold torch's thread pools (or a Ray worker's state), which
    # a forked child inherits half-initialised.
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    pool = ProcessPoolExecutor(max_workers=min(cfg.workers, len(todo)), mp_context=ctx, initializer=_worker_init,
                               initargs=(stop,))
    futures = {pool.submit(_worker_cell, cfg, *grid[i]): i for i in todo}
    seen = set()  # the futures whose outcome was read (a row goes to ``finished`` once)

    def keep(fut) -> None:
        seen.add(fut)
        if (row := fut.result()) is not None:  # a cell's exception is the run's
            finished(futures[fut], row)

    try:
        pending = set(futures)
        while pending:
            ready, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in ready:
                keep(fut)
            if pending and reporter.should_stop():
                stop.set()
                for fut in pending:
                    fut.cancel()
                for fut in pending:  # the running cells see the event at their next step
                    if not fut.cancelled():
                        keep(fut)
                return False
        return True
    except BaseException:
        # A cell failed (or the parent was interrupted): without this the pool's exit would train
        # every queued cell before the error surfaced, hours on a full map, and record none of them.
        # Queued cells are cancelled, running ones stop at their next step, finished ones are kept.
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        for fut in futures:
            if fut not in seen and not fut.cancelled() and fut.exception() is None:
                with contextlib.suppress(Exception):  # the cell's error is the one to raise
                    keep(fut)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_STOP = None


def _worker_init(stop) -> None:
    global _STOP
    _STOP = stop
    torch.set_num_threads(1)


def _worker_cell(cfg: BoundaryConfig, mixer: str, d: Difficulty, seed: int) -> dict | None:
    with one_thread():
        return run_cell(cfg, mixer, d, seed, _STOP.is_set)


@contextlib.contextmanager
def one_thread():
    """Every cell on one torch thread: a float sum split over threads is added in an order that
    depends on their number, and the map must not depend on ``workers`` or on the machine's cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_cell(cfg: BoundaryConfig, mixer: str, d: Difficulty, seed: int, should_stop=lambda: False) -> dict | None:
    """One cell: a model per learning rate, trained for ``choose_at`` of the steps; the one best on dev
    goes on to the end and is scored on test.  None when ``should_stop`` answered yes first."""
    # MixerNet pulls in the scan (numba): imported where a cell runs, not when the registry loads.
    from ema_core.mixers.model import MixerNet

    device = torch.device("cuda" if cfg.device != "cpu" and torch.cuda.is_available() else "cpu")
    train, dev, test = (make_data(d, cfg.data, seed, split).to(device) for split in ("train", "dev", "test"))
    init = task_seed(seed, "model", mixer, d.task, d.label) % 2**31
    trainers = []
    for lr in cfg.train.lrs:
        # every rate starts from the same initial weights and sees the same minibatches
        model = MixerNet.from_settings(mixer, cfg.model, train.vocab, train.n_classes, seed=init).to(device)
        trainers.append(Trainer(model, train, steps=cfg.train.steps, batch=cfg.train.batch, lr=lr,
                                warmup=cfg.train.warmup, seed=task_seed(seed, "batches", mixer, d.task, d.label)))
    choose = max(1, round(cfg.train.choose_at * cfg.train.steps))
    scores = []
    for tr in trainers:
        if not tr.advance(choose, should_stop):
            return None
        scores.append(accuracy(tr.model, dev))
    best = trainers[max(range(len(trainers)), key=lambda j: (scores[j], -j))]  # a tie keeps the grid's first
    if not best.advance(cfg.train.steps, should_stop):
        return None
    return {
        "mixer": mixer, "task": d.task, "difficulty": d.label, "level": d.level, "seq_len": d.seq_len,
        "seed": seed, "accuracy": accuracy(best.model, test), "dev_accuracy": accuracy(best.model, dev),
        "chance": chance(train, test), "lr": best.lr, "train_loss": best.loss,
        "state_floats": best.model.state_floats(d.seq_len), "params": best.model.params(),
    }


def summarise(cfg: BoundaryConfig, rows: list[dict], seconds: float) -> dict:
    """The nested map the CLI prints, from the cells' rows (means over seeds)."""
    acc: dict[str, dict[str, dict[str, list[float]]]] = {}
    chances: dict[str, list[float]] = {}
    state: dict[str, int] = {}
    for r in rows:
        acc.setdefault(r["mixer"], {}).setdefault(r["task"], {}).setdefault(r["difficulty"], []).append(r["accuracy"])
        chances.setdefault(r["task"], []).append(r["chance"])
        if r["task"] != "mqar":
            state[r["mixer"]] = int(r["state_floats"])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "cells": len(rows),
        "seconds": seconds,
        "map": {m: {t: {k: mean(v) for k, v in by.items()} for t, by in tasks.items()} for m, tasks in acc.items()},
        "chance": {t: mean(v) for t, v in chances.items()},
        "state_floats": state,
        "seeds": cfg.seeds,
        "tuned_on": "dev",
    }


def _restore(cfg: BoundaryConfig, reporter: Reporter) -> tuple[dict[int, dict], float]:
    """The cells done (by their index in ``cells(cfg)``) and the seconds spent, from the checkpoint."""
    ckpt = reporter.load_checkpoint()
    if ckpt is None:
        return {}, 0.0
    _, state = ckpt
    check_checkpoint(state, what="boundary checkpoint", fmt=CHECKPOINT_FORMAT, keys=("done", "elapsed"),
                     expect={"config": StoredConfig(KIND, cfg)})
    return {int(i): dict(row) for i, row in state["done"]}, float(state["elapsed"])


def _checkpoint(cfg: BoundaryConfig, reporter: Reporter, done: dict[int, dict], elapsed: float) -> None:
    reporter.save_checkpoint(len(done), {"format": CHECKPOINT_FORMAT, "config": cfg.model_dump_json(),
                                         "done": sorted(done.items()), "elapsed": elapsed})


EXPERIMENT = Experiment(
    kind=KIND,
    config_cls=BoundaryConfig,
    presets=PRESETS,
    run=run,
    description="Every context mixer on structure and content tasks at controlled distances (the boundary map).",
    one_click=False,  # half an hour on 2 cores: launched from its page, not with the paper's quick reproduction
)
