"""The boundary map: every context mixer on every task, distance by distance (:mod:`ema_core.studies.boundary.tasks`).

One run is a grid of cells (mixer × task × difficulty × seed, and for recall against state size
mixer × MQAR size × width × seed).  A cell trains the small model of :mod:`ema_core.mixers.model`
(2 layers, d = 64, a short causal conv before each mixer: the same body around each) once per
learning rate of ``train.lrs``, scores every rate on dev every ``train.eval_every`` steps, keeps the
rate best on dev at ``choose_at`` of the steps (the end by default, never before half way), and
reports that model's test accuracy.  Cells are independent and each is a pure function of (config,
seed, cell): a run resumes cell by cell (a cancel keeps the cells done; the cell it interrupted
starts again).  Before any cell trains, every mixer of the config is probed for causality
(:mod:`ema_core.mixers.causality`): a mixer that reads ahead is refused, not mapped.

Result tables:

* ``boundary_accuracy`` (the map, at the body's width): mixer, task, difficulty, level (k, or MQAR's
  pairs), seq_len, seed, accuracy (test), dev_accuracy, chance, exclusion_floor (the best accuracy
  reachable without the position the label is about: :func:`ema_core.studies.boundary.tasks.exclusion_floor`),
  lr (chosen on dev), train_loss, state_floats, params, d (the model width);
* ``boundary_dev_curve``: every rate's dev accuracy at every evaluation of every cell (mixer, task,
  difficulty, seed, d, lr, step, dev_accuracy);
* ``boundary_recall_state``: MQAR for each recurrent mixer at each of ``recall_widths``, softmax and
  the window at the body's width beside them (mixer, difficulty, d, seed, accuracy, dev_accuracy,
  chance, lr, state_floats, params); the map's own cell is the one at the body's width.

The summary holds ``cells``, ``seconds`` and the map as nested objects: ``map`` {mixer: {task:
{difficulty: accuracy}}} (mean over seeds), ``chance`` {task: value}, ``state_floats`` {mixer: floats
per sequence at the agreement tasks' length}, ``recall_vs_state`` {mixer: {state floats: MQAR
accuracy}} (mean over seeds and MQAR sizes); ``tuned_on`` says where the rates were chosen.
"""
from __future__ import annotations

import time
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ema_core.studies.boundary.tasks import (AGREEMENT_CLASSES, Difficulty, TaskConfig, Trainer, accuracy, chance, check_words,
                               exclusion_floor, make_data, mqar_fits, task_seed)
from ema_core.studies.boundary.findings import TASKS, TaskName
from ema_core.learning_rates import resolve
from ema_core.studies.boundary import learning_rates as rate_tables
from ema_core.cells import (Device, cell_device, grid_axis, one_thread, run_cells, run_parallel, run_serial,
                             stop_requested)
from ema_core.config import seed_field
from ema_core.mixers import MIXER_NAMES, MixerName
from ema_core.mixers.causality import check_causal
from ema_core.mixers.model import MixerNet
from ema_core.protocol import Experiment, Reporter
from ema_core.studies.boundary import KIND

# 2: a cell's checkpointed outcome holds its row and its dev curve (1 held the row alone); 3: the
# agreement cells carry their redundancy (the grid, and so a cell's index, changed with it).
CHECKPOINT_FORMAT = 3
# The reference points of recall against state size, at the body's width only: the window keeps
# nothing past its reach and softmax keeps the whole sequence, so neither has a state to vary.  The
# trace sequence's attention (ema3_seq) keeps a sequence too: it is not among them.  Every other
# mixer, a bring-your-own one included, is taken as recurrent: its state is set by its width.
RECALL_REFERENCES = ("window_k", "softmax")
NOT_RECURRENT = (*RECALL_REFERENCES, "ema3_seq")
# The causality probe's length before a run: past two chunks of every chunked mixer (16 steps, the
# delta rule's 32) and inside a third.
CAUSAL_T = 70


class BoundaryModelConfig(BaseModel):
    """The body every mixer sits in (:class:`ema_core.mixers.model.MixerNet`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d: int = Field(64, ge=4, le=4096, description="model width (divisible by heads, and by 4: the linear "
                                                  "attentions' heads)")
    layers: int = Field(2, ge=1, le=24, description="mixer + MLP blocks")
    # One head, as zoology's MQAR attention: measured on dev (quick MQAR, seeds 1, 21, 22), four heads
    # of 16 left softmax on its recall plateau (0.17–0.24) through 1,000 steps at every rate where one
    # head of 64 reached 0.999 (docs/decisions.md).
    heads: int = Field(1, ge=1, le=64, description="heads of the softmax attentions (softmax, ema3_seq)")
    # The MLP is most of a step's arithmetic at d = 64; zoology's MQAR models have none.
    mlp: int = Field(4, ge=0, le=8, description="the MLP's expansion: d → mlp·d → d (0: no MLP)")
    window: int = Field(4, ge=1, le=256, description="the window mixer's width: the inputs each of its layers sees")
    positions: bool = Field(True, description="add fixed sinusoidal position codes to the embeddings (every mixer)")
    conv: int = Field(3, ge=0, le=8, description="width of the short causal depthwise conv before each mixer "
                                                 "(0: none; else 2 to 8)")

    @field_validator("d")
    @classmethod
    def _four(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"d must be divisible by 4 (the linear attentions' heads), got {v}")
        return v

    @model_validator(mode="after")
    def _heads(self) -> "BoundaryModelConfig":
        if self.d % self.heads:
            raise ValueError(f"heads: d ({self.d}) must be divisible by heads, got {self.heads}")
        return self

    @field_validator("conv")
    @classmethod
    def _conv(cls, v: int) -> int:
        if v == 1:  # a width-1 conv is a per-channel scale: no memory, only a second name for "off"
            raise ValueError("0 (no conv) or a width of 2 to 8, got 1")
        return v


class BoundaryTrainConfig(BaseModel):
    """How each cell trains: AdamW, warm-up then cosine, one model per learning rate of the grid."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(400, ge=1, le=1_000_000, description="gradient steps per model")
    # Recall is learned late and at once (an induction circuit forms, then accuracy jumps): MQAR
    # needs several times the steps the agreement and lag tasks need to settle.
    mqar_steps: int | None = Field(None, ge=1, le=1_000_000, description="gradient steps per model on MQAR "
                                                                         "(none: steps)")
    batch: int = Field(32, ge=1, le=65_536, description="sequences per step, drawn with replacement")
    # Log-spaced: a recurrent mixer trains in a narrow window of rates, and a grid with one point
    # per half-decade finds it where a grid of two does not.  Zoology's MQAR grid, largest first:
    # rates are tried in this order and a tie keeps the first, so a rate already perfect on dev at
    # the choice settles the cell without training the slower ones (run_cell).
    lrs: tuple[float, ...] = Field((3e-2, 1e-2, 3e-3, 1e-3), min_length=1, max_length=8,
                                   description="learning rates tried per cell, in order (a tie on dev keeps the "
                                               "first); the one best on dev is kept")
    warmup: int = Field(20, ge=0, le=1_000_000, description="steps of linear warm-up")
    # Not before half way: early on every rate can still be at chance (a quarter of the way kept a
    # rate that ends far below another on MQAR), and a large rate leads early and falls behind.
    choose_at: float = Field(1.0, ge=0.5, le=1, description="fraction of the steps at which the rate best on dev "
                                                            "is kept and the others stop (1: at the end)")
    eval_every: int = Field(100, ge=1, le=1_000_000, description="steps between the dev evaluations of every rate "
                                                                 "(each is also scored where it stops)")
    # Choosing in every cell trains every rate (2.5 times a cell's steps at choose_at 0.5); the table
    # holds the rate each (mixer, task) chose on dev at a dev seed, at the settings it was made at
    # (ema_core.studies.boundary.learning_rates), so that a cell trains once.
    lr_choice: Literal["dev", "table"] = Field("dev", description="dev: train every rate of lrs in every cell, keep "
                                                                  "the best on dev; table: the rate chosen on dev at a "
                                                                  "dev seed (ema_core/studies/boundary/learning_rates.py)")

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
    # (grid_axis: no cell is trained twice).
    mixers: tuple[MixerName, ...] = Field(MIXER_NAMES, description=f"of {', '.join(MIXER_NAMES)}")
    tasks: tuple[TaskName, ...] = Field(TASKS, description=f"of {', '.join(TASKS)}")
    distances: tuple[int, ...] = Field((1, 2, 4, 8, 16, 32), max_length=32,
                                       description="k of the agreement and lag tasks")
    # The redundancy dial: how much the rest of the sequence says of the category at t − k.  0 is the
    # independent stream (only position t − k says it), 1 the sentence templates (its neighbours say
    # it nearly always); each cell's exclusion floor measures what its ρ gives away.
    redundancy: tuple[float, ...] = Field((0.0,), max_length=11,
                                          description="ρ of the agreement tasks: the share of their sequences "
                                                      "drawn from sentence templates (0: every position "
                                                      "independent; 1: all templates), each in [0, 1]")
    mqar_pairs: tuple[int, ...] = Field((4, 8, 16, 32), max_length=16, description="MQAR's key-value pairs")
    mqar_len: tuple[int, ...] = Field((64, 128, 256), max_length=8,
                                      description="MQAR's sequence lengths (a size runs where 4·pairs ≤ T)")
    recall_widths: tuple[int, ...] = Field((32, 64, 128), max_length=8,
                                           description="model widths of recall against state size (MQAR, each "
                                                       "recurrent mixer; none: not measured)")
    seeds: int = Field(1, ge=1, le=32, description="seeds per cell: seed, seed + 1, …")
    # How many cells train at once, each in its own process on one thread: a small model gains more
    # from a second process than from a second thread (measured in docs/benchmarks.md).  Every cell
    # runs on one thread whatever this is, so the map does not depend on it.
    workers: int = Field(1, ge=1, le=64, description="cells trained at once (processes)")
    device: Device = "cpu"
    data: TaskConfig = TaskConfig()
    model: BoundaryModelConfig = BoundaryModelConfig()
    train: BoundaryTrainConfig = BoundaryTrainConfig()
    seed: int = seed_field("first seed of the tasks' data, the models' initialisation and their minibatches")

    @model_validator(mode="before")
    @classmethod
    def _older_mqar_keys(cls, v):
        # Runs made before MQAR's vocabulary was a setting stored ``data.mqar_keys`` K: keys 1..K and
        # values K+1..2K after token 0, a vocabulary of 2K + 1.  Read in today's terms (an even
        # vocabulary whose first half, less token 0, holds the keys) as 2K + 2, the one with K keys,
        # so that their stored config still loads (a run folder's config is never rewritten).
        data = v.get("data") if isinstance(v, dict) else None
        if isinstance(data, dict) and "mqar_keys" in data and "mqar_vocab" not in data:
            rest = {key: value for key, value in data.items() if key != "mqar_keys"}
            v = {**v, "data": {**rest, "mqar_vocab": 2 * int(data["mqar_keys"]) + 2}}
        return v

    @model_validator(mode="before")
    @classmethod
    def _older_structure(cls, v):
        # Runs made between the structure setting and the redundancy dial stored ``data.structure``:
        # "independent" is ρ = 0 and "templates" ρ = 1, read as today's axis (it was their only
        # value).  Runs from before either ran the templates: older_behaviour gives them ρ = 1.
        data = v.get("data") if isinstance(v, dict) else None
        if isinstance(data, dict) and "structure" in data:
            structure = data["structure"]
            if structure not in ("independent", "templates"):
                raise ValueError(f"data.structure: an older run's structure is independent or templates, "
                                 f"got {structure!r}")
            v = {**v, "data": {key: value for key, value in data.items() if key != "structure"},
                 "redundancy": (0.0 if structure == "independent" else 1.0,)}
        return v

    @field_validator("mixers", "tasks")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return grid_axis(v)

    @field_validator("distances", "mqar_pairs", "mqar_len")
    @classmethod
    def _positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(x < 1 for x in v):
            raise ValueError("every value must be a positive integer")
        return grid_axis(v)

    @field_validator("redundancy")
    @classmethod
    def _redundancy(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= r <= 1 for r in v):
            raise ValueError("every ρ must be in [0, 1]")
        return grid_axis(tuple(float(r) for r in v))

    @field_validator("recall_widths")
    @classmethod
    def _widths(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v:  # none: recall against state size is not measured
            return v
        if any(w < 4 or w % 4 for w in v):
            raise ValueError("every width must be a multiple of 4 (the attention mixers' heads), at least 4")
        return grid_axis(v)

    @model_validator(mode="after")
    def _fits(self) -> "BoundaryConfig":
        T = self.data.seq_len
        if any(k >= T for k in self.distances):
            raise ValueError(f"distances: every k must be below data.seq_len ({T}), got {list(self.distances)}")
        if any(t in AGREEMENT_CLASSES for t in self.tasks):
            try:
                check_words(self.data, min(self.redundancy))
            except ValueError as exc:
                raise ValueError(f"{exc} (redundancy {min(self.redundancy):g})") from None
        if "mqar" in self.tasks:
            _check_mqar_sizes(self.mqar_pairs, self.mqar_len)
            keys = mqar_keys(self.data)
            if max(self.mqar_pairs) > keys:
                raise ValueError(f"mqar_pairs: at most {keys} pairs, the keys of data.mqar_vocab "
                                 f"({self.data.mqar_vocab}), got {max(self.mqar_pairs)}")
        if self.train.lr_choice == "table":
            # Refused here, before a run folder exists: a table chosen at other settings is not read.
            resolve(rate_tables.TABLES, self.model_dump(mode="json"), what="train.lr_choice: table",
                    instead="choose on dev at these (train.lr_choice=dev)")
        return self


def _check_mqar_sizes(pairs: tuple[int, ...], lens: tuple[int, ...]) -> None:
    """The MQAR sizes run are every (pairs, T) of the two lists with 4·pairs ≤ T (zoology's bound: the
    key–value block takes at most half the sequence, and each of its keys is queried once after it).
    Every value given must run somewhere: a pair count no length holds, or a length that holds no
    pair count, is refused by name rather than dropped from the map."""
    for p in pairs:
        if not any(mqar_fits(p, T) for T in lens):
            raise ValueError(f"mqar_pairs: {p} pairs need T ≥ {4 * p} (4·pairs), and the longest of mqar_len "
                             f"is {max(lens)}")
    for T in lens:
        if not any(mqar_fits(p, T) for p in pairs):
            raise ValueError(f"mqar_len: T = {T} holds none of mqar_pairs {list(pairs)} (4·pairs ≤ T needs pairs "
                             f"≤ {T // 4})")


def mqar_keys(data: TaskConfig) -> int:
    """How many keys MQAR draws from: the first half of its vocabulary, less token 0."""
    return data.mqar_vocab // 2 - 1


def mqar_sizes(cfg: BoundaryConfig) -> list[tuple[int, int]]:
    """The MQAR sizes of the map: every (pairs, T) given with 4·pairs ≤ T, by length then pairs."""
    return [(p, T) for T in cfg.mqar_len for p in cfg.mqar_pairs if mqar_fits(p, T)]


def difficulties(cfg: BoundaryConfig) -> list[Difficulty]:
    """The map's columns, task by task in the config's order."""
    out: list[Difficulty] = []
    for task in cfg.tasks:
        if task == "mqar":
            out.extend(Difficulty(task, pairs=p, seq_len=T) for p, T in mqar_sizes(cfg))
        elif task in AGREEMENT_CLASSES:
            out.extend(Difficulty(task, k=k, seq_len=cfg.data.seq_len, redundancy=r)
                       for r in cfg.redundancy for k in cfg.distances)
        else:
            out.extend(Difficulty(task, k=k, seq_len=cfg.data.seq_len) for k in cfg.distances)
    return out


def recall_widths(cfg: BoundaryConfig, mixer: str) -> tuple[int, ...]:
    """The widths at which ``mixer``'s MQAR recall is set against its state: ``recall_widths`` for a
    recurrent mixer, the body's width for the references, none for the trace sequence's attention.
    Nothing without MQAR among the tasks or without widths."""
    if "mqar" not in cfg.tasks or not cfg.recall_widths or mixer == "ema3_seq":
        return ()
    return (cfg.model.d,) if mixer in RECALL_REFERENCES else cfg.recall_widths


class BoundaryCell(NamedTuple):
    """One trained cell: a mixer on one difficulty at one seed, in a body ``width`` wide."""

    mixer: str
    difficulty: Difficulty
    seed: int
    width: int


def cells(cfg: BoundaryConfig) -> list[BoundaryCell]:
    """Every cell, seeds outermost (a run cut short holds whole maps first); within a seed the map's
    cells (at the body's width), then recall against state size at the other widths (the map's MQAR
    cell is that mixer's point at the body's width, not trained twice)."""
    out: list[BoundaryCell] = []
    recall = [d for d in difficulties(cfg) if d.task == "mqar"]
    for s in (cfg.seed + i for i in range(cfg.seeds)):
        out.extend(BoundaryCell(m, d, s, cfg.model.d) for m in cfg.mixers for d in difficulties(cfg))
        out.extend(BoundaryCell(m, d, s, w) for m in cfg.mixers for w in recall_widths(cfg, m) if w != cfg.model.d
                   for d in recall)
    return out


PRESETS: dict[str, dict] = {
    # The whole map at one seed on 2 CPU cores in about a quarter of an hour (docs/benchmarks.md;
    # estimated by `python -m bench.boundary`).  The agreement tasks at distance 16 (T = 32), beyond
    # the window's reach (layers·((window − 1) + (conv − 1)) = 10 tokens), at three redundancies
    # (ρ 0, 0.5, 0.9: the dial).  Not ρ = 1 at this budget: with every row a template, every row has
    # the grammar's mix of categories, a uniform read of the context says nothing of t − k, and no
    # mixer's gradient finds position t − k in 400 steps (softmax sat at the majority label at every
    # rate from 3e-2 to 1.9e-3 at dev seed 20; at ρ = 0.9 the independent tenth of the rows points
    # it there: 0.97; docs/decisions.md).  Structure against the four-way content map (the
    # label-count control; the two-way map is the full preset's).  MQAR at 8 pairs in T = 64, so that
    # 4·pairs ≤ T/2 (at T = 32 every slot after the block was a query), trained longer than the rest,
    # with recall against state at four widths (the body's, 64, among them).
    # For time, an MLP of 2·d (zoology's MQAR models have none; at d = 64 the MLP is most of a
    # step), and each cell trains once at the rate its (mixer, task) chose on dev at the end of
    # training at dev seed 20 (ema_core/studies/boundary/learning_rates.py): of four rates a factor of 2 apart, from
    # 3e-2 (where EMA trains) down to 3.75e-3.  Chosen at the end, not half way: half way chose
    # another rate in 51 of 101 cells at seed 20, at a test cost up to 0.34 (docs/benchmarks.md).
    "quick": {"tasks": ("agree_structure", "agree_content4", "mqar", "lag_identity"), "redundancy": (0.0, 0.5, 0.9),
              "distances": (16,), "mqar_pairs": (8,), "mqar_len": (64,), "recall_widths": (8, 16, 32, 64),
              "seeds": 1, "workers": 2, "data.seq_len": 32, "data.n_dev": 256, "data.n_test": 512,
              "model.mlp": 2, "train.lrs": (3e-2, 1.5e-2, 7.5e-3, 3.75e-3), "train.lr_choice": "table",
              "train.steps": 400, "train.mqar_steps": 1000, "train.choose_at": 1.0, "train.batch": 32,
              "train.warmup": 20, "train.eval_every": 100},
    # The whole grid at three seeds, for a GPU (or a long night on a CPU): the dial at five
    # redundancies, MQAR as zoology sizes it (a vocabulary of 8,192, pairs up to T/4), recall against
    # state at four widths and every size; rates chosen at the end.
    "full": {"seeds": 3, "redundancy": (0.0, 0.25, 0.5, 0.75, 1.0), "mqar_pairs": (4, 8, 16, 32, 64),
             "mqar_len": (64, 128, 256), "recall_widths": (16, 32, 64, 128), "data.mqar_vocab": 8192,
             "train.steps": 2000, "train.mqar_steps": 4000, "train.batch": 64, "train.eval_every": 200,
             "data.n_dev": 512, "data.n_test": 1024, "data.seq_len": 128},
}


def run(cfg: BoundaryConfig, reporter: Reporter) -> dict:
    t_start = time.perf_counter()
    check_mixers(cfg)  # before any cell trains, and again on resume: the code may have changed since
    grid = cells(cfg)

    def report(i: int, outcome: dict, n_done: int) -> None:
        cell, row = grid[i], outcome["row"]
        d = cell.difficulty
        other_width = cell.width != cfg.model.d  # a cell of recall against state: its width is said
        reporter.log(n_done, {f"accuracy/{cell.mixer}/{d.task}/{d.label}"
                              f"{f'/d={cell.width}' if other_width else ''}": row["accuracy"]})
        reporter.progress(n_done / len(grid), f"{n_done}/{len(grid)} cells: {cell.mixer} · {d.task} {d.label}"
                                              f"{f' · d={cell.width}' if other_width else ''} "
                                              f"→ {row['accuracy']:.3f}")

    done, seconds = run_cells(cfg, grid, reporter, kind=KIND, fmt=CHECKPOINT_FORMAT, t_start=t_start, report=report,
                              serial=lambda todo, fin: _run_serial(cfg, grid, todo, reporter, fin),
                              parallel=lambda todo, fin: _run_parallel(cfg, grid, todo, reporter, fin))
    outcomes = [(grid[i], done[i]) for i in range(len(grid))]
    rows = [o["row"] for c, o in outcomes if c.width == cfg.model.d]
    recall = [{key: o["row"][key] for key in RECALL_COLUMNS} for c, o in outcomes
              if c.difficulty.task == "mqar" and c.width in recall_widths(cfg, c.mixer)]
    curves = [{"mixer": c.mixer, "task": c.difficulty.task, "difficulty": c.difficulty.label, "seed": c.seed,
               "d": c.width, **point} for c, o in outcomes for point in o["curve"]]
    return {"summary": summarise(cfg, rows, seconds, recall),
            "tables": {"boundary_accuracy": rows, "boundary_dev_curve": curves, "boundary_recall_state": recall}}


RECALL_COLUMNS = ("mixer", "difficulty", "d", "seed", "accuracy", "dev_accuracy", "chance", "lr", "state_floats",
                  "params")


def check_mixers(cfg: BoundaryConfig) -> None:
    """Refuse a mixer of the config that is not causal, before any cell trains: the exact probe the
    tests use (:func:`ema_core.mixers.causality.check_causal`), on the body the map builds around it.
    A mixer that reads x_{t+1} would score as if it remembered what it only reads ahead."""
    with one_thread():
        for mixer in cfg.mixers:
            model = MixerNet.from_settings(mixer, cfg.model, vocab=16, n_classes=2, seed=0)
            try:
                check_causal(model, T=CAUSAL_T)
            except ValueError as exc:
                raise ValueError(f"mixers: {exc}; the map trains causal mixers only") from None


def _run_serial(cfg, grid, todo, reporter, finished) -> bool:
    def describe(i: int) -> str:
        cell = grid[i]
        return f"{cell.mixer} · {cell.difficulty.task} {cell.difficulty.label} · seed {cell.seed}"

    # ``run_cell`` is looked up now, not bound at import: a test replaces it on this module.
    return run_serial([(i, (cfg, *grid[i])) for i in todo], len(grid), reporter, finished, run_cell, describe)


def _run_parallel(cfg, grid, todo, reporter, finished) -> bool:
    # The longest cells first (MQAR's, at its length and steps): a long cell handed out last would
    # leave the other workers idle while it finishes.  Rows do not depend on the order.
    order = sorted(todo, key=lambda i: -cell_size(cfg, grid[i]))
    # ``_worker_cell`` is looked up now, not bound at import: a test replaces it on this module.
    return run_parallel([(i, (cfg, *grid[i])) for i in order], cfg.workers, reporter, finished, _worker_cell)


def _worker_cell(cfg: BoundaryConfig, mixer: str, d: Difficulty, seed: int, width: int) -> dict | None:
    # A local pool's worker checks the shared stop event; a cluster's is stopped by its pool instead.
    with one_thread():
        return run_cell(cfg, mixer, d, seed, width, stop_requested)


def cell_steps(cfg: BoundaryConfig, d: Difficulty) -> int:
    """The steps each model of a cell on ``d`` trains for."""
    return (cfg.train.mqar_steps or cfg.train.steps) if d.task == "mqar" else cfg.train.steps


def cell_size(cfg: BoundaryConfig, cell: BoundaryCell) -> int:
    """A cell's work in token-steps, to hand out the longest first (an order, not a time).  Not times
    the width: at d ≤ 64 a step costs about as much at any width (measured: MQAR at d = 16 took 60–100 s
    a cell, at d = 64 90–140 s), and counting width put the narrow MQAR cells last, where one
    worker finished them alone."""
    return cell_steps(cfg, cell.difficulty) * cell.difficulty.seq_len


def eval_steps(start: int, stop: int, every: int) -> list[int]:
    """The steps after ``start`` up to ``stop`` at which a model is scored on dev: each multiple of
    ``every``, and ``stop`` itself (where it stops, or where the rates are compared)."""
    return [s for s in range(start + 1, stop) if s % every == 0] + ([stop] if stop > start else [])


def run_cell(cfg: BoundaryConfig, mixer: str, d: Difficulty, seed: int, width: int | None = None,
             should_stop=lambda: False) -> dict | None:
    """One cell: a model per learning rate, each scored on dev every ``eval_every`` steps; at
    ``choose_at`` of the steps the one best on dev goes on to the end (the others stop) and is scored
    on test.  Returns ``{"row": …, "curve": [{lr, step, dev_accuracy}, …]}``, or None when
    ``should_stop`` answered yes first.  ``width`` is the model's d (the body's by default)."""
    width = cfg.model.d if width is None else width
    steps = cell_steps(cfg, d)
    body = cfg.model if width == cfg.model.d else cfg.model.model_copy(update={"d": width})
    device = cell_device(cfg.device)
    train, dev, test = (make_data(d, cfg.data, seed, split).to(device) for split in ("train", "dev", "test"))
    # The same initial weights' seed and minibatch order at every width: widths differ only in width.
    init = task_seed(seed, "model", mixer, d.task, d.label) % 2**31
    trainers = []
    # The table's rate where it has one; a cell it has none for chooses on dev, as lr_choice=dev does.
    tabled = None
    if cfg.train.lr_choice == "table":
        key = rate_tables.rate_key(mixer, d.task, width)
        tabled = resolve(rate_tables.TABLES, cfg.model_dump(mode="json"), [key]).rates.get(key)
    rates = cfg.train.lrs if tabled is None else (tabled,)
    for lr in rates:
        # every rate starts from the same initial weights and sees the same minibatches
        model = MixerNet.from_settings(mixer, body, train.vocab, train.n_classes, seed=init).to(device)
        trainers.append(Trainer(model, train, steps=steps, batch=cfg.train.batch, lr=lr,
                                warmup=cfg.train.warmup, seed=task_seed(seed, "batches", mixer, d.task, d.label)))
    curve: list[dict] = []

    def train_to(tr: Trainer, until: int) -> float | None:
        """Train ``tr`` to step ``until``, scoring it on dev at each evaluation; its last dev score."""
        score = None
        for step in eval_steps(tr.done, until, cfg.train.eval_every):
            if not tr.advance(step, should_stop):
                return None
            score = accuracy(tr.model, dev)
            curve.append({"lr": tr.lr, "step": step, "dev_accuracy": score})
        return score

    choose = max(1, round(cfg.train.choose_at * steps))
    scores = []
    for tr in trainers:
        if (score := train_to(tr, choose)) is None:
            return None
        scores.append(score)
        if score == 1.0:
            # Perfect on dev: a rate after it could at best tie, and a tie keeps the first, so the
            # choice is made and the rest of the grid is not trained (its dev curves are absent).
            break
    j = max(range(len(scores)), key=lambda i: (scores[i], -i))  # a tie keeps the grid's first
    best = trainers[j]
    dev_acc = scores[j] if best.done >= steps else train_to(best, steps)
    if dev_acc is None:
        return None
    row = {
        "mixer": mixer, "task": d.task, "difficulty": d.label, "level": d.level, "seq_len": d.seq_len,
        "seed": seed, "accuracy": accuracy(best.model, test), "dev_accuracy": dev_acc,
        "chance": chance(train, test), "exclusion_floor": exclusion_floor(d, cfg.data, seed), "lr": best.lr,
        "train_loss": best.loss, "state_floats": best.model.state_floats(d.seq_len), "params": best.model.params(),
        "d": width, "redundancy": d.redundancy if d.task in AGREEMENT_CLASSES else None,
    }
    return {"row": row, "curve": curve}


def summarise(cfg: BoundaryConfig, rows: list[dict], seconds: float, recall: list[dict] = ()) -> dict:
    """The nested map the CLI prints, from the cells' rows (means over seeds)."""
    acc: dict[str, dict[str, dict[str, list[float]]]] = {}
    chances: dict[str, list[float]] = {}
    state: dict[str, int] = {}
    for r in rows:
        acc.setdefault(r["mixer"], {}).setdefault(r["task"], {}).setdefault(r["difficulty"], []).append(r["accuracy"])
        chances.setdefault(r["task"], []).append(r["chance"])
        if r["task"] != "mqar":
            state[r["mixer"]] = int(r["state_floats"])
    by_state: dict[str, dict[str, list[float]]] = {}
    for r in recall:
        by_state.setdefault(r["mixer"], {}).setdefault(str(int(r["state_floats"])), []).append(r["accuracy"])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "cells": len(rows),
        "seconds": seconds,
        "map": {m: {t: {k: mean(v) for k, v in by.items()} for t, by in tasks.items()} for m, tasks in acc.items()},
        "chance": {t: mean(v) for t, v in chances.items()},
        "state_floats": state,
        # Smallest state first, as the chart's axis runs.
        "recall_vs_state": {m: {s: mean(v) for s, v in sorted(by.items(), key=lambda kv: int(kv[0]))}
                            for m, by in by_state.items()},
        "seeds": cfg.seeds,
        "tuned_on": "dev",
    }


def headline(summary: dict) -> str:
    """A finished map in one line (its Jobs card, the run table): its cells, and the mixers with the
    best and the worst accuracy averaged over every task and distance of the map."""
    means = {}
    for mixer, tasks in (summary.get("map") or {}).items():
        accs = [a for by in (tasks or {}).values() for a in (by or {}).values() if isinstance(a, (int, float))]
        if accs:
            means[mixer] = sum(accs) / len(accs)
    parts = [f"{summary['cells']} cells"] if isinstance(summary.get("cells"), int) else []
    if means:
        best, worst = max(means, key=means.get), min(means, key=means.get)
        parts.append(f"mean accuracy: best {best} {means[best]:.3f}"
                     + (f", worst {worst} {means[worst]:.3f}" if worst != best else ""))
    return " · ".join(parts)


EXPERIMENT = Experiment(
    kind=KIND, presets=PRESETS, run=run, headline=headline,
    config_cls=BoundaryConfig,
    description="Every context mixer on structure and content tasks at controlled distances (the boundary map).",
    one_click=False,  # about 12 minutes on 2 cores (a long job): launched from its page, not with the paper's quick reproduction
    # Runs made before these settings ran without a conv, on the sentence templates (ρ = 1: the
    # entry once read "data.structure": "templates", the setting the dial replaced; runs that stored
    # a structure read it through BoundaryConfig._older_structure), without recall against state size
    # (their MQAR vocabulary: BoundaryConfig._older_mqar_keys), and with four softmax heads.
    older_behaviour={"model.conv": 0, "redundancy": [1.0], "recall_widths": [], "model.heads": 4},
)
