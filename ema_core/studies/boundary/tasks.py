"""The boundary map's tasks and its one training cell: structure against content at a controlled distance.

Four tasks, each a pure function of (config, seed, split); every label sits at a position of the
sequence (``-100`` where nothing is scored), so one small causal model (:class:`MixerNet`) reads
them all::

    agree_structure  k=…,rho=…   the category of the word k tokens back (four classes)
    agree_content    k=…,rho=…   a balanced two-class map of that word within its category (the same sequences)
    agree_content4   k=…,rho=…   a balanced four-class map of it: as many labels as the category has
    mqar             pairs=…,T=…   zoology's multi-query associative recall: name the value bound to each key
    lag_identity     k=…         the token k steps back, in a uniform random stream

**The redundancy dial.**  Each agreement sequence is drawn from sentence templates with probability
ρ (the difficulty's ``redundancy``), and from the independent stream otherwise.  In the independent
stream (ρ = 0) the category of every position is drawn afresh, uniform over four, and the word
uniform within its category: the category k back is said by that position alone, so a model that
does not hold it cannot name it.  In the templates (ρ = 1) the categories around t − k name the one
at t − k most of the time: what a grammar's redundancy gives away.  The content labels are maps of
the word's identity balanced inside every category: the category says nothing of them, and they are
said by position t − k alone at every ρ.  At ρ = 0 ``agree_structure`` and ``agree_content4`` are
the same task up to a relabelling of the words (a four-way map of the word k back, 16 words a
class): any difference between them there is noise or a bug, which is what makes the label-count
control.  :func:`exclusion_floor` measures, per cell, the best accuracy reachable without position
t − k; it rises with ρ for the category and stays at chance for the content maps.

``chance`` for every task is one rule: the better of guessing uniformly (1 / classes) and always
naming the training split's most frequent label (scored on test).
"""
from __future__ import annotations

import functools
import math
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ema_core.studies.boundary.findings import TASKS  # declared where the store reads it without torch
from ema_core.schedule import warmup_cosine

SPLITS = ("train", "dev", "test")
IGNORE = -100  # a position with nothing to score (F.cross_entropy's ignore_index)
LR_FLOOR = 0.1  # each cell's cosine ends at this fraction of its learning rate

# The agreement tasks' words: four categories of ``words_per_category`` words each, after the full
# stop (token 0, which only the templates use).  The templates' sentence grammar: five templates,
# each sentence closed by a full stop.
CATEGORIES = ("det", "adj", "noun", "verb")
TEMPLATES = ((0, 2, 3, 0, 2), (0, 1, 2, 3), (2, 3, 0, 1, 2), (0, 2, 3), (1, 2, 3, 2))
STOP = 0
# Below this many words per category the content label is a property of a handful of tokens rather
# than of a word's identity among many: the least a stream with independent rows (ρ < 1) takes.
MIN_WORDS_INDEPENDENT = 16
# The agreement tasks: what of the word k back each names, and in how many classes.
AGREEMENT_CLASSES = {"agree_structure": len(CATEGORIES), "agree_content": 2, "agree_content4": 4}

# MQAR as zoology draws its query positions: the i-th free slot after the key-value block (i = 1, 2,
# …) is chosen with probability ∝ a·i^(a−1) (without replacement), a = 0.01: most queries come soon
# after their pairs, a few far (the gap between repeated bigrams in text follows a power law).
MQAR_POWER_A = 0.01

# The exclusion floor's count tables: the positions around t − k they read, by radius (both sides,
# causal), the radius chosen on dev.
FLOOR_RADII = (0, 1, 2, 3, 4)


class TaskConfig(BaseModel):
    """The tasks' sizes (the distances and MQAR sizes are the study's grid, not here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq_len: int = Field(64, ge=8, le=4096, description="tokens per sequence of the agreement and lag tasks")
    words_per_category: int = Field(16, ge=4, le=1024, description="open-class words in each of the 4 categories "
                                                                   "(at least 16 where any row is independent, ρ < 1)")
    lag_vocab: int = Field(64, ge=2, le=4096, description="tokens in lag_identity's random stream")
    mqar_vocab: int = Field(256, ge=8, le=65_536, description="MQAR's vocabulary, even: keys from its first half, "
                                                              "values from its second")
    n_train: int = Field(16_384, ge=16, le=1_000_000, description="training sequences per cell")
    n_dev: int = Field(256, ge=16, le=1_000_000, description="dev sequences: what each cell's learning rate is chosen on")
    n_test: int = Field(512, ge=16, le=1_000_000, description="test sequences: what the map shows")

    @field_validator("mqar_vocab")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError(f"must be even (keys are its first half, values its second), got {v}")
        return v


def check_words(cfg: TaskConfig, redundancy: float) -> None:
    """Refuse a stream with independent rows (ρ < 1) over fewer than MIN_WORDS_INDEPENDENT words a category."""
    if redundancy < 1 and cfg.words_per_category < MIN_WORDS_INDEPENDENT:
        raise ValueError(f"data.words_per_category: a redundancy below 1 (independent rows) needs at least "
                         f"{MIN_WORDS_INDEPENDENT} words per category, got {cfg.words_per_category}")


@dataclass(frozen=True)
class Difficulty:
    """One column of the map: a task at one distance (``k``) and, for the agreement tasks, one redundancy
    (``redundancy``, ρ), or one MQAR size (``pairs``, ``seq_len``)."""

    task: str
    k: int | None = None
    pairs: int | None = None
    seq_len: int | None = None
    redundancy: float = 0.0  # the agreement tasks' share of template rows; the other tasks have none

    @property
    def label(self) -> str:
        if self.task == "mqar":
            return f"pairs={self.pairs},T={self.seq_len}"
        if self.task in AGREEMENT_CLASSES:
            return f"k={self.k},rho={self.redundancy:g}"
        return f"k={self.k}"

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


def content_map(cfg: TaskConfig, seed: int, classes: int = 2) -> np.ndarray:
    """Word id → class (0 … classes − 1), balanced inside every category (each category's words shuffled
    and cut into ``classes`` runs of W // classes, the remainder to class 0); the same for every split
    (it is the task).  Two classes give the map runs before the four-class one held (its own seed)."""
    W = cfg.words_per_category
    if not 2 <= classes <= W:
        raise ValueError(f"a content map takes 2 to words_per_category ({W}) classes, got {classes}")
    rng = np.random.default_rng(task_seed(seed, "content_map" if classes == 2 else f"content_map{classes}"))
    labels = np.zeros(1 + 4 * W, dtype=np.int64)
    for c in range(len(CATEGORIES)):
        rank = np.empty(W, dtype=np.int64)
        rank[rng.permutation(W)] = np.arange(W)
        labels[1 + c * W: 1 + (c + 1) * W] = classes - 1 - np.minimum(rank // (W // classes), classes - 1)
    return labels


def category_of(tokens: np.ndarray, W: int) -> np.ndarray:
    """Category index of each word (−1 for the full stop)."""
    return np.where(tokens == STOP, -1, (tokens - 1) // W)


def independent_stream(cfg: TaskConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, T) words whose categories are drawn independently per position, uniform over the four, and
    each word uniform within its category: no position says anything of another."""
    T, W = cfg.seq_len, cfg.words_per_category
    cats = rng.integers(len(CATEGORIES), size=(n, T))
    return 1 + cats * W + rng.integers(W, size=(n, T))


def grammar_stream(cfg: TaskConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, T) sentences of the templates, words uniform in their category, each sentence ended by a stop;
    every row starts at a random point of its first sentence, so position says nothing of the phase."""
    T, W = cfg.seq_len, cfg.words_per_category
    lengths = np.array([len(t) + 1 for t in TEMPLATES])  # each with its full stop
    longest, shortest = int(lengths.max()), int(lengths.min())
    need = T + longest
    m = -(-need // shortest)  # sentences per row: enough even if every one is the shortest
    table = np.full((len(TEMPLATES), longest), -1, dtype=np.int64)  # -1: the stop (and the padding past it)
    for i, t in enumerate(TEMPLATES):
        table[i, : len(t)] = t
    which = rng.integers(len(TEMPLATES), size=(n, m))
    ends = np.cumsum(lengths[which], axis=1)
    # The sentence each position falls in: one searchsorted over all rows at once, each row's ends
    # lifted by a multiple of a bound on them so that the flattened ends stay sorted.
    bound = m * longest + 1
    rows = np.arange(n)[:, None]
    pos = np.arange(need)[None, :]
    sentence = (np.searchsorted((ends + rows * bound).ravel(), (pos + rows * bound).ravel(), side="right")
                .reshape(n, need) - rows * m)
    within = pos - (np.take_along_axis(ends, sentence, axis=1) - np.take_along_axis(lengths[which], sentence, axis=1))
    cats = table[np.take_along_axis(which, sentence, axis=1), within]
    words = np.where(cats < 0, STOP, 1 + cats * W + rng.integers(W, size=(n, need)))
    start = rng.integers(longest, size=(n, 1))
    return np.take_along_axis(words, start + np.arange(T)[None, :], axis=1)


def agreement_stream(cfg: TaskConfig, redundancy: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, T) rows, each from the templates with probability ``redundancy`` and independent otherwise; at
    0 and 1 only the one stream is drawn."""
    if not 0 <= redundancy <= 1:
        raise ValueError(f"redundancy must be in [0, 1], got {redundancy}")
    check_words(cfg, redundancy)
    if redundancy == 0:
        return independent_stream(cfg, n, rng)
    if redundancy == 1:
        return grammar_stream(cfg, n, rng)
    templated = rng.random(n) < redundancy
    return np.where(templated[:, None], grammar_stream(cfg, n, rng), independent_stream(cfg, n, rng))


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
    if d.task in AGREEMENT_CLASSES:
        # The variants draw the very same sequences: the stream's seed does not name the variant.
        rng = np.random.default_rng(task_seed(seed, "agree", d.label, split))
        tokens = agreement_stream(cfg, d.redundancy, n, rng)
        W = cfg.words_per_category
        cats = category_of(tokens, W)
        n_classes = AGREEMENT_CLASSES[d.task]
        labels = np.maximum(cats, 0) if d.task == "agree_structure" else content_map(cfg, seed, n_classes)[tokens]
        targets = lagged_targets(labels, d.k, cats >= 0)
        vocab = 1 + 4 * W
    elif d.task == "lag_identity":
        tokens = rng.integers(cfg.lag_vocab, size=(n, cfg.seq_len))
        targets = lagged_targets(tokens, d.k, np.ones_like(tokens, dtype=bool))
        vocab = n_classes = cfg.lag_vocab
    elif d.task == "mqar":
        tokens, targets, _, _ = mqar_rows(cfg.mqar_vocab, d.pairs, d.seq_len, n, rng)
        vocab, n_classes = cfg.mqar_vocab, cfg.mqar_vocab // 2
    else:
        raise ValueError(f"unknown task {d.task!r}; tasks: {', '.join(TASKS)}")
    return TaskData(torch.from_numpy(tokens), torch.from_numpy(targets), vocab, n_classes)


def mqar_fits(pairs: int, T: int, vocab: int | None = None) -> bool:
    """Whether an MQAR size can be drawn: its pairs and a free slot for each query fit in T (4·pairs ≤ T,
    zoology's bound), and, given a vocabulary, there are as many distinct keys (its first half, less
    token 0)."""
    return pairs >= 1 and 4 * pairs <= T and (vocab is None or pairs <= vocab // 2 - 1)


def _mqar_refusal(pairs: int, T: int, vocab: int) -> str | None:
    """The plain line an MQAR size that :func:`mqar_fits` rejects is refused with (None: it fits)."""
    if pairs < 1:
        return f"mqar: pairs must be at least 1, got {pairs}"
    if 4 * pairs > T:
        return f"mqar: {pairs} pairs need T ≥ {4 * pairs} (4·pairs), got T={T}"
    if pairs > vocab // 2 - 1:
        return (f"mqar: {pairs} pairs need data.mqar_vocab ≥ {2 * pairs + 2} ({pairs} distinct keys in its first "
                f"half, token 0 apart), got {vocab}")
    return None


def _distinct(rng: np.random.Generator, n: int, population: int, size: int) -> np.ndarray:
    """(n, size) draws without replacement from range(population) per row, in random order: Floyd's
    algorithm across rows at once (memory n·size, not n·population: the full preset's 4,096 values)."""
    chosen = np.empty((n, size), dtype=np.int64)
    for i, j in enumerate(range(population - size, population)):
        t = rng.integers(j + 1, size=n)
        taken = (chosen[:, :i] == t[:, None]).any(axis=1)
        chosen[:, i] = np.where(taken, j, t)
    return np.take_along_axis(chosen, np.argsort(rng.random((n, size)), axis=1), axis=1)


def mqar_rows(V: int, pairs: int, T: int, n: int, rng: np.random.Generator):
    """Zoology's multi-query associative recall (``multiquery_ar``, arXiv 2312.04927), with the block moved.

    Each row holds ``pairs`` distinct keys (tokens 1 … V/2 − 1) each followed by its value (distinct
    too, tokens V/2 … V − 1), as one block that starts at a random offset (uniform over 0 … T − 4·pairs)
    instead of at 0.  Each key is queried once, at an even slot after the block, the slots drawn with
    zoology's power law (:data:`MQAR_POWER_A`) over the free slots; the target at a query is its
    value's class (value − V/2).  Every other position holds a random token of the vocabulary that is
    not one of the row's keys, so a key occurs exactly twice: bound, then queried.

    Returns (tokens, targets, offset (n, 1): where each row's block starts, queries (n, pairs): where
    the j-th key of the block is queried)."""
    refusal = _mqar_refusal(pairs, T, V)
    if refusal:
        raise ValueError(refusal)
    half = V // 2
    keys = 1 + _distinct(rng, n, half - 1, pairs)
    values = half + _distinct(rng, n, half, pairs)
    rows = np.arange(n)[:, None]
    offset = rng.integers(T - 4 * pairs + 1, size=(n, 1))
    # Query slots: the even offsets after the block, as many as fit in the row's remaining length.
    slots_max = (T - 2 * pairs) // 2
    free = (T - offset - 2 * pairs) // 2
    slot = np.arange(slots_max)[None, :]
    weight = MQAR_POWER_A * (slot + 1.0) ** (MQAR_POWER_A - 1)
    # Weighted draws without replacement, in the order successive draws would make them: the largest
    # log(u)/w first (Efraimidis–Spirakis), so the j-th key gets the j-th slot drawn, as in zoology.
    score = np.where(slot < free, np.log(rng.random((n, slots_max))) / weight, -np.inf)
    drawn = np.argsort(-score, axis=1, kind="stable")[:, :pairs]
    queries = offset + 2 * pairs + 2 * drawn
    # Fillers: uniform over the V − pairs tokens that are not this row's keys; u ↦ u + #{keys ≤ it}
    # through one sorted search over all rows (each row's thresholds lifted by a multiple of V).
    u = rng.integers(V - pairs, size=(n, T))
    thresholds = np.sort(keys, axis=1) - np.arange(pairs)[None, :]
    below = np.searchsorted((thresholds + rows * V).ravel(), (u + rows * V).ravel(), side="right").reshape(n, T)
    tokens = u + below - rows * pairs
    block = offset + np.arange(2 * pairs)[None, :]
    np.put_along_axis(tokens, block[:, 0::2], keys, axis=1)
    np.put_along_axis(tokens, block[:, 1::2], values, axis=1)
    np.put_along_axis(tokens, queries, keys, axis=1)
    targets = np.full((n, T), IGNORE, dtype=np.int64)
    np.put_along_axis(targets, queries, values - half, axis=1)
    return tokens, targets, offset, queries


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


def exclusion_floor(d: Difficulty, cfg: TaskConfig, seed: int) -> float:
    """The best test accuracy reachable without position t − k: what a cell must beat before its accuracy
    says anything of memory k back (the map colours by accuracy above max(chance, this)).

    Agreement and lag tasks: measured, by :func:`count_table_accuracy` over the positions within
    radius r of t − k on both sides (those the model at t can see: ≤ t), r of :data:`FLOOR_RADII`
    chosen on dev.  In the independent stream (ρ = 0) and in the lag stream it comes out at chance
    (nothing else says what stood at t − k); it rises with ρ for the category.  MQAR: the best rule
    that binds no key to its value (:func:`mqar_no_binding_accuracy`), measured likewise: runs
    before it stored 1 / (V/2 − pairs + 1), what a model that knew nothing of the row's order gets."""
    return _measured_floor(d, cfg, seed)


@functools.lru_cache(maxsize=256)  # the same for every mixer of a (difficulty, seed): one fit per process
def _measured_floor(d: Difficulty, cfg: TaskConfig, seed: int) -> float:
    if d.task == "mqar":
        return mqar_no_binding_accuracy(d, cfg, seed)
    radii = [tuple(range(-r, 0)) + tuple(range(1, r + 1)) for r in FLOOR_RADII]
    return count_table_accuracy(d, cfg, seed, radii)


def count_table_accuracy(d: Difficulty, cfg: TaskConfig, seed: int, contexts: Sequence[Sequence[int]]) -> float:
    """Test accuracy of the best of a chain of count tables that read positions around t − k, never t − k.

    Each context is a set of offsets from t − k (0 excluded); a position outside the sequence or after
    t reads as a symbol of its own (the model at t knows it is near the start, and cannot see the
    future).  What is read at a position is its category (and the full stop) for the agreement tasks,
    which loses nothing: given the categories every word is drawn independently; the token itself
    for lag_identity.  Each table is fitted on train (the most frequent label of each context seen);
    a context unseen in train backs off to the previous table of the chain, the first of which should
    be ``()`` (the training majority).  The table scored on test is the one best on dev."""
    if d.task not in (*AGREEMENT_CLASSES, "lag_identity"):
        raise ValueError(f"count tables read the agreement and lag tasks, not {d.task!r}")
    if any(0 in c for c in contexts):
        raise ValueError("a context may not read position t − k itself (offset 0)")
    split_data = [make_data(d, cfg, seed, s) for s in SPLITS]
    if d.task == "lag_identity":
        base = cfg.lag_vocab + 1
        read = [s.tokens.numpy() for s in split_data]
    else:
        base = len(CATEGORIES) + 2  # the stop, the four categories, outside
        read = [category_of(s.tokens.numpy(), cfg.words_per_category) + 1 for s in split_data]
    outside = base - 1
    # Every scored position of the three splits in one array, so that a context has one code in all.
    rows, ts, ys, part = [], [], [], []
    for i, s in enumerate(split_data):
        r, t = np.nonzero(s.targets.numpy() != IGNORE)
        rows.append(r)
        ts.append(t)
        ys.append(s.targets.numpy()[r, t])
        part.append(np.full(len(r), i))
    y, which = np.concatenate(ys), np.concatenate(part)
    T = split_data[0].tokens.shape[1]

    def codes():
        for offsets in contexts:
            code = np.zeros(len(y), dtype=np.int64)
            for o in offsets:
                col = []
                for i, sym in enumerate(read):
                    p = ts[i] - d.k + o
                    ok = (p >= 0) & (p <= ts[i])
                    col.append(np.where(ok, sym[rows[i], np.clip(p, 0, T - 1)], outside))
                code = code * base + np.concatenate(col)
                if code.max() > 2 ** 40:  # kept dense, so that no chain of offsets overflows
                    code = _dense(code)
            yield code

    return best_table_accuracy(codes(), y, which, split_data[0].n_classes)


def _dense(code: np.ndarray) -> np.ndarray:
    return np.unique(code, return_inverse=True)[1].reshape(-1).astype(np.int64)


def best_table_accuracy(codes: Iterable[np.ndarray], y: np.ndarray, which: np.ndarray, n_classes: int) -> float:
    """Test accuracy of the best of a chain of count tables, each keyed by one of ``codes`` (a context's
    code at every position of the three splits; ``which`` names the split, 0 train, 1 dev, 2 test):
    each table names the label most frequent with its context on train (ties to the smaller label),
    a context unseen in train backs off to the previous table of the chain, and the table best on dev
    (a tie keeps the earlier, smaller context) is scored on test."""
    train, dev, test = (which == i for i in range(3))
    best_on_dev, best_acc = -1.0, math.nan
    previous = None
    for code in codes:
        code = _dense(code)
        joint, counts = np.unique(code[train] * n_classes + y[train], return_counts=True)
        ctx, lab = joint // n_classes, joint % n_classes
        order = np.lexsort((lab, -counts, ctx))  # per context: most frequent label first, ties to the smaller
        first = order[np.r_[True, ctx[order][1:] != ctx[order][:-1]]]
        table = np.full(int(code.max()) + 1, -1, dtype=np.int64)
        table[ctx[first]] = lab[first]
        pred = table[code]
        if previous is not None:
            pred = np.where(pred >= 0, pred, previous)
        previous = pred
        right = pred == y
        on_dev = float(right[dev].mean()) if dev.any() else math.nan
        if on_dev > best_on_dev:
            best_on_dev, best_acc = on_dev, float(right[test].mean()) if test.any() else math.nan
    return best_acc


# The no-binding floor's contexts: what a model may read at a query without binding its key to a value,
# as columns of :func:`mqar_no_binding_accuracy` (its query's rank among the row's queries so far, and
# its slot after the block), alone and together; the first, (), names the most frequent block rank.
MQAR_FLOOR_CONTEXTS = ((), ("rank",), ("slot",), ("rank", "slot"))


def mqar_no_binding_accuracy(d: Difficulty, cfg: TaskConfig, seed: int,
                             contexts: Sequence[Sequence[str]] = MQAR_FLOOR_CONTEXTS) -> float:
    """MQAR's floor that knows the task: the best test accuracy of a rule that never binds a key to its value.

    Such a rule can still see the block (which tokens are the row's values, and in what order), which
    of the queries this is (``rank``: how many queries came before it; queries are told apart from
    fillers by their key having occurred) and where it stands after the block (``slot``).  Zoology's
    draw makes these worth something: the j-th key of the block is queried at the j-th slot drawn,
    and the power law draws early slots first, so the first query often asks for the first pair.
    Each rule is a count table from a context to the block rank of the answer (the value at that rank
    is named), fitted on train, chosen on dev, scored on test (:func:`best_table_accuracy`).  A guess
    among the row's values is the table of the empty context: about 1 / pairs."""
    refusal = _mqar_refusal(d.pairs, d.seq_len, cfg.mqar_vocab)
    if refusal:
        raise ValueError(refusal)
    columns: dict[str, list[np.ndarray]] = {"rank": [], "slot": []}
    ys, part = [], []
    n_split = {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test}
    for i, split in enumerate(SPLITS):
        # The very rows make_data draws: the same generator, seeded alike.
        rng = np.random.default_rng(task_seed(seed, d.task, d.label, split))
        _, _, offset, queries = mqar_rows(cfg.mqar_vocab, d.pairs, d.seq_len, n_split[split], rng)
        columns["rank"].append(np.argsort(np.argsort(queries, axis=1), axis=1).ravel())
        columns["slot"].append(((queries - offset - 2 * d.pairs) // 2).ravel())
        ys.append(np.tile(np.arange(d.pairs), len(queries)))  # the answer's block rank: key j's value is the j-th
        part.append(np.full(queries.size, i))
    read = {name: np.concatenate(c) for name, c in columns.items()}
    y = np.concatenate(ys)
    bound = d.seq_len + 1  # every column is below T

    def codes():
        for names in contexts:
            if unknown := [n for n in names if n not in read]:
                raise ValueError(f"the no-binding floor reads {', '.join(read)}, not {', '.join(unknown)}")
            code = np.zeros(len(y), dtype=np.int64)
            for name in names:
                code = code * bound + read[name]
            yield code

    return best_table_accuracy(codes(), y, np.concatenate(part), d.pairs)


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
        # foreach: one fused update over every tensor, not a loop of small ones (at d = 64 the loop's
        # per-tensor overhead is a sizeable part of a step on a CPU; docs/benchmarks.md)
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, foreach=True)
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
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0, foreach=True)
            self.opt.step()
            self.loss = float(loss.detach())
            self.done = step + 1
        return True
