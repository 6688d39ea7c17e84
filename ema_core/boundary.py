"""The boundary map's tasks and its one training cell: structure against content at a controlled distance.

Four tasks, each a pure function of (config, seed, split); every label sits at a position of the
sequence (``-100`` where nothing is scored), so one small causal model (:class:`MixerNet`) reads
them all::

    agree_structure  k=…   the category of the word k tokens back          (sentence grammar)
    agree_content    k=…   a random two-class map of that word's identity  (the same sequences)
    mqar             pairs=…,T=…   key–value pairs, then queries: name the value bound to each key
    lag_identity     k=…   the token k steps back, in a uniform random stream

**Why a grammar.**  A fixed function of one token (its category, or any fixed map of its identity)
is, to a model with a learned embedding, one direction: in a stream of independent words the two
agreement variants would be the same task with another partition of the vocabulary.  What tells
structure from content is redundancy: the words follow sentence templates over four categories, so
the category k tokens back is constrained by the categories around it (and by the sentence the
model is in), while which word of its category stood there is drawn afresh and is said by nothing
else.  The content map is balanced inside each category (half the words of every category are
class 1), so a category says nothing of it.  Same sequences, same positions scored; only what must
be remembered differs (``docs/decisions.md``).

``chance`` for every task is one rule: the better of guessing uniformly (1 / classes) and always
naming the training split's most frequent label (scored on test).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from ema_core.boundary_findings import TASKS  # declared where the store reads it without torch
from ema_core.schedule import warmup_cosine

SPLITS = ("train", "dev", "test")
IGNORE = -100  # a position with nothing to score (F.cross_entropy's ignore_index)
LR_FLOOR = 0.1  # each cell's cosine ends at this fraction of its learning rate

# The sentence grammar of the agreement tasks: four categories, five templates, a full stop (token 0).
CATEGORIES = ("det", "adj", "noun", "verb")
TEMPLATES = ((0, 2, 3, 0, 2), (0, 1, 2, 3), (2, 3, 0, 1, 2), (0, 2, 3), (1, 2, 3, 2))
STOP = 0


class TaskConfig(BaseModel):
    """The tasks' sizes (the distances and MQAR sizes are the study's grid, not here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq_len: int = Field(64, ge=8, le=4096, description="tokens per sequence of the agreement and lag tasks")
    words_per_category: int = Field(16, ge=2, le=1024, description="open-class words in each of the 4 categories")
    lag_vocab: int = Field(64, ge=2, le=4096, description="tokens in lag_identity's random stream")
    mqar_keys: int = Field(128, ge=4, le=4096, description="MQAR's keys (and as many values): vocabulary 2·keys + 1")
    n_train: int = Field(2048, ge=16, le=1_000_000, description="training sequences per cell")
    n_dev: int = Field(256, ge=16, le=1_000_000, description="dev sequences: what each cell's learning rate is chosen on")
    n_test: int = Field(512, ge=16, le=1_000_000, description="test sequences: what the map shows")


@dataclass(frozen=True)
class Difficulty:
    """One column of the map: a task at one distance (``k``) or one MQAR size (``pairs``, ``seq_len``)."""

    task: str
    k: int | None = None
    pairs: int | None = None
    seq_len: int | None = None

    @property
    def label(self) -> str:
        return f"pairs={self.pairs},T={self.seq_len}" if self.task == "mqar" else f"k={self.k}"

    @property
    def level(self) -> int:
        """What the curves put on the x axis: the distance k, or MQAR's number of pairs."""
        return self.pairs if self.task == "mqar" else self.k


@dataclass(frozen=True)
class TaskData:
    tokens: torch.Tensor   # (N, T) int64
    targets: torch.Tensor  # (N, T) int64, IGNORE where nothing is scored
    vocab: int
    n_classes: int

    def to(self, device) -> "TaskData":
        return TaskData(self.tokens.to(device), self.targets.to(device), self.vocab, self.n_classes)


def task_seed(seed: int, *parts) -> int:
    """A seed for one (task, difficulty, split, ...) from the run's seed: stable across processes and
    independent of which other cells a grid holds (crc32 of the names, not Python's salted hash)."""
    words = [zlib.crc32(str(p).encode()) for p in parts]
    return int(np.random.SeedSequence([int(seed), *words]).generate_state(1)[0])


def content_map(cfg: TaskConfig, seed: int) -> np.ndarray:
    """Word id → class (0/1), balanced inside every category; the same for every split (it is the task)."""
    W = cfg.words_per_category
    rng = np.random.default_rng(task_seed(seed, "content_map"))
    labels = np.zeros(1 + 4 * W, dtype=np.int64)
    for c in range(len(CATEGORIES)):
        half = np.zeros(W, dtype=np.int64)
        half[rng.permutation(W)[: W // 2]] = 1
        labels[1 + c * W: 1 + (c + 1) * W] = half
    return labels


def category_of(tokens: np.ndarray, W: int) -> np.ndarray:
    """Category index of each word (−1 for the full stop)."""
    return np.where(tokens == STOP, -1, (tokens - 1) // W)


def grammar_stream(cfg: TaskConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, T) sentences of the templates, words uniform in their category, each sentence ended by a stop;
    every row starts at a random point of its first sentence, so position says nothing of the phase."""
    T, W = cfg.seq_len, cfg.words_per_category
    longest = max(len(t) for t in TEMPLATES) + 1
    need = T + longest
    rows = np.empty((n, T), dtype=np.int64)
    for i in range(n):
        cats: list[int] = []
        while len(cats) < need:
            cats.extend(TEMPLATES[rng.integers(len(TEMPLATES))])
            cats.append(-1)
        cats_arr = np.asarray(cats[:need])
        words = np.where(cats_arr < 0, STOP, 1 + cats_arr * W + rng.integers(W, size=need))
        start = rng.integers(longest)
        rows[i] = words[start: start + T]
    return rows


def lagged_targets(labels: np.ndarray, k: int, scored: np.ndarray) -> np.ndarray:
    """targets[:, t] = labels[:, t − k] where t ≥ k and ``scored[:, t − k]``; IGNORE elsewhere."""
    out = np.full(labels.shape, IGNORE, dtype=np.int64)
    if k < labels.shape[1]:
        out[:, k:] = np.where(scored[:, : labels.shape[1] - k], labels[:, : labels.shape[1] - k], IGNORE)
    return out


def make_data(d: Difficulty, cfg: TaskConfig, seed: int, split: str) -> TaskData:
    """The sequences and targets of one task at one difficulty, for one split."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    n = {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test}[split]
    rng = np.random.default_rng(task_seed(seed, d.task, d.label, split))
    if d.task in ("agree_structure", "agree_content"):
        # The two variants draw the very same sequences: the stream's seed does not name the variant.
        rng = np.random.default_rng(task_seed(seed, "agree", d.label, split))
        tokens = grammar_stream(cfg, n, rng)
        W = cfg.words_per_category
        cats = category_of(tokens, W)
        if d.task == "agree_structure":
            labels, n_classes = np.maximum(cats, 0), len(CATEGORIES)
        else:
            labels, n_classes = content_map(cfg, seed)[tokens], 2
        targets = lagged_targets(labels, d.k, cats >= 0)
        vocab = 1 + 4 * W
    elif d.task == "lag_identity":
        tokens = rng.integers(cfg.lag_vocab, size=(n, cfg.seq_len))
        targets = lagged_targets(tokens, d.k, np.ones_like(tokens, dtype=bool))
        vocab = n_classes = cfg.lag_vocab
    elif d.task == "mqar":
        tokens, targets = _mqar(cfg.mqar_keys, d.pairs, d.seq_len, n, rng)
        vocab, n_classes = 1 + 2 * cfg.mqar_keys, cfg.mqar_keys
    else:
        raise ValueError(f"unknown task {d.task!r}; tasks: {', '.join(TASKS)}")
    return TaskData(torch.from_numpy(tokens), torch.from_numpy(targets), vocab, n_classes)


def _mqar(K: int, pairs: int, T: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Zoology's multi-query associative recall: ``pairs`` distinct keys each followed by its value
    (keys 1..K, values K+1..2K), then T − 2·pairs queries, each a key of this sequence; the target at a
    query is its value's index.  Nothing before the queries is scored."""
    if 2 * pairs >= T or pairs > K:
        raise ValueError(f"MQAR needs 2·pairs < T and pairs ≤ keys, got pairs={pairs}, T={T}, keys={K}")
    tokens = np.empty((n, T), dtype=np.int64)
    targets = np.full((n, T), IGNORE, dtype=np.int64)
    for i in range(n):
        keys = rng.choice(K, size=pairs, replace=False)
        values = rng.integers(K, size=pairs)
        tokens[i, 0: 2 * pairs: 2] = 1 + keys
        tokens[i, 1: 2 * pairs: 2] = 1 + K + values
        which = rng.integers(pairs, size=T - 2 * pairs)
        tokens[i, 2 * pairs:] = 1 + keys[which]
        targets[i, 2 * pairs:] = values[which]
    return tokens, targets


def chance(train: TaskData, test: TaskData) -> float:
    """The better of a uniform guess and always naming the training split's most frequent label (on test).

    The uniform guess is the floor: with many classes and few test positions (MQAR's values) the
    training majority may never occur on test, and a chance of 0 would flatter every model."""
    y = train.targets[train.targets != IGNORE]
    majority = int(torch.bincount(y, minlength=train.n_classes).argmax())
    t = test.targets[test.targets != IGNORE]
    if not len(t):
        return math.nan
    return max(1.0 / train.n_classes, float((t == majority).double().mean()))


def accuracy(model: torch.nn.Module, data: TaskData, batch: int = 256) -> float:
    """Accuracy over every scored position."""
    right = total = 0
    model.eval()
    with torch.no_grad():
        for a in range(0, len(data.tokens), batch):
            y = data.targets[a: a + batch]
            keep = y != IGNORE
            pred = model(data.tokens[a: a + batch]).argmax(-1)
            right += int((pred[keep] == y[keep]).sum())
            total += int(keep.sum())
    model.train()
    return right / total if total else math.nan


class Trainer:
    """One model's training on one task: AdamW on minibatches drawn with replacement from ``seed``, a
    linear warm-up then a cosine decay to a tenth over ``steps``.  It runs in stretches
    (:meth:`advance`), so a cell can train every candidate rate for a while, keep the best on dev and
    carry only that one on: the kept model's run is exactly the run it would have had alone."""

    def __init__(self, model: torch.nn.Module, data: TaskData, *, steps: int, batch: int, lr: float, warmup: int,
                 seed: int):
        self.model, self.data = model, data
        self.steps, self.batch, self.lr, self.warmup = steps, batch, lr, warmup
        self.gen = torch.Generator().manual_seed(seed)
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        self.done = 0
        self.loss = math.nan

    def advance(self, until: int, should_stop=lambda: False) -> bool:
        """Train up to step ``until``; False when ``should_stop`` answered yes first."""
        for step in range(self.done, min(until, self.steps)):
            if should_stop():
                return False
            for group in self.opt.param_groups:
                group["lr"] = self.lr * warmup_cosine(step, self.steps, self.warmup, LR_FLOOR)
            # drawn on the CPU generator whatever the device: the same minibatches on CPU and CUDA
            idx = torch.randint(len(self.data.tokens), (self.batch,), generator=self.gen).to(self.data.tokens.device)
            logits = self.model(self.data.tokens[idx])
            loss = F.cross_entropy(logits.flatten(0, 1), self.data.targets[idx].flatten(), ignore_index=IGNORE)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.loss = float(loss.detach())
            self.done = step + 1
        return True
