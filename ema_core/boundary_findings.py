"""The boundary study's verdicts: the hierarchy the paper argues (PAPER.md §4.4), judged by the shared rule.

Pure arithmetic on the rows of ``boundary_accuracy`` (no torch, no pandas, no store), so that the
page, the store and a benchmark script judge the same rows the same way.  The tasks are declared
here, where the store reads them without loading torch (the mixers' names, likewise, in
:data:`ema_core.mixers.MIXER_NAMES`).

Every claim is a difference Δ formed within one seed (every mixer of that seed sees the same
sequences; its weights and minibatch order are drawn from the seed and the cell's names), then averaged over the seeds and judged by
:func:`ema_core.verdicts.judge` ("Δ > 0" beyond the seeds' spread).  A cell that two runs both hold
(the same seed of the same config run twice) is averaged: give the rows of one config.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping

from ema_core.mixers import MIXER_NAMES
from ema_core.verdicts import VERDICT_K, VERDICT_MIN_SEEDS, VERDICT_WORDS, Spread, judge, spread

# The study's tasks, declared here (ema_core.boundary, which builds them, reads this): structure,
# then content, at a distance; associative recall; identity at a lag.
TASKS = ("agree_structure", "agree_content", "mqar", "lag_identity")
TaskName = Literal[TASKS]  # a setting that names a task takes one of these (the boundary config's ``tasks``)
TASK_ORDER = TASKS
# The paper's argued order, weakest first: EMA < fixed-decay linear attention (key-value binding) <
# input-dependent selection (gated) < softmax attention.
PAPER_HIERARCHY = ("ema", "decay_linear_attn", "gated_linear_attn", "softmax")

SOFTMAX_LEVEL = 0.95  # what "softmax solves every task" is read as: at least this accuracy in every cell
# Recall claims compare mechanisms, not training speeds: an MQAR size counts only where softmax attention
# (which can recall exactly) got at least this far from chance to perfect; below it the size is
# under-trained at the run's budget and every mixer's number there says how fast it learns, not what it holds.
TRAINED_LEVEL = 0.5
FAR = 8               # "at a distance": k ≥ FAR (or the largest distance measured, where none is that far)
NEAR_CHANCE = 0.1     # "at chance": less than this much of the way from chance to perfect
FLOOR_MIXER = "window_k"  # the no-long-memory floor every claim about memory at a distance is set against


def window_reach(window: int, layers: int) -> int:
    """The farthest lag window_k can see: each of its ``layers`` layers reaches ``window − 1`` steps back."""
    return layers * (window - 1)


# The default body's reach (BoundaryModelConfig: window 4, 2 layers): 6 tokens back.  A run with
# another window or depth passes its own to claim_verdicts.
DEFAULT_WINDOW_REACH = window_reach(4, 2)


def normalised(acc: float, chance: float) -> float:
    """Accuracy above chance, (acc − chance) / (1 − chance): 0 at chance, 1 perfect, below 0 worse than
    chance.  NaN where it is undefined (a missing number, or a chance of 1 that leaves nothing to learn)."""
    if acc is None or chance is None:
        return math.nan
    acc, chance = float(acc), float(chance)
    if not (math.isfinite(acc) and math.isfinite(chance)) or chance >= 1.0:
        return math.nan
    return (acc - chance) / (1.0 - chance)


# -- the rows, as cells per seed ---------------------------------------------------------------------------

Key = tuple[str, str, str]  # (mixer, task, difficulty)


@dataclass(frozen=True)
class Cell:
    accuracy: float
    chance: float
    dev: float | None = None  # dev accuracy: what a choice about the cells may look at (never test)

    @property
    def above_chance(self) -> float:
        return normalised(self.accuracy, self.chance)


@dataclass(frozen=True)
class Grid:
    """The rows as cells: ``seeds[seed][key]``, and each (task, difficulty)'s level (k, or MQAR's pairs)."""

    seeds: Mapping[int, Mapping[Key, Cell]]
    levels: Mapping[tuple[str, str], int]

    @property
    def keys(self) -> set[Key]:
        return {k for cells in self.seeds.values() for k in cells}

    def levels_of(self, mixer: str, task: str) -> dict[str, int]:
        """difficulty -> level of the cells of ``mixer`` on ``task`` (any seed)."""
        return {d: self.levels[(t, d)] for m, t, d in self.keys if m == mixer and t == task}


def _records(rows: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    # A DataFrame iterates over its column names; its records are what is meant.
    to_dict = getattr(rows, "to_dict", None)
    return to_dict("records") if callable(to_dict) else rows


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def level_of(level: Any, difficulty: str) -> int:
    """The row's level, or where it has none, the number its difficulty names first ("k=8", "pairs=16,T=64")."""
    if _finite(level) is not None:
        return int(float(level))
    found = re.search(r"=(\d+)", difficulty)
    return int(found.group(1)) if found else 0


def grid(rows: Iterable[Mapping[str, Any]]) -> Grid:
    """Cells per seed from table rows; rows without a finite accuracy, chance and seed are left out."""
    sums: dict[int, dict[Key, list[float]]] = {}
    levels: dict[tuple[str, str], int] = {}
    for r in _records(rows):
        acc, chance, seed = _finite(r.get("accuracy")), _finite(r.get("chance")), _finite(r.get("seed"))
        if acc is None or chance is None or seed is None:
            continue
        dev = _finite(r.get("dev_accuracy"))
        key = (str(r["mixer"]), str(r["task"]), str(r["difficulty"]))
        s = sums.setdefault(int(seed), {}).setdefault(key, [0.0, 0.0, 0, 0.0, 0])
        s[0], s[1], s[2] = s[0] + acc, s[1] + chance, s[2] + 1
        if dev is not None:
            s[3], s[4] = s[3] + dev, s[4] + 1
        levels[(key[1], key[2])] = level_of(r.get("level"), key[2])
    seeds = {seed: {k: Cell(a / n, c / n, dv / m if m else None) for k, (a, c, n, dv, m) in cells.items()}
             for seed, cells in sums.items()}
    return Grid(seeds, levels)


# -- the claims ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    key: str
    what: str        # the claim in words, with the Δ it is judged by
    paper: str       # what the paper says
    source: str      # PAPER.md's tags
    needs: str       # what rows it needs, for the sentence when they are absent ({reach}: the window's)
    # The cells the claim compares, chosen from every seed's (so that each seed is judged on the
    # same cells), with the text that names them; and Δ of one seed from those cells.
    select: Callable[[Grid, int], tuple[tuple[Key, ...], str]]
    delta: Callable[[Mapping[Key, Cell]], float]
    recall: bool = False  # judged on MQAR sizes softmax was trained on only (TRAINED_LEVEL)


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return math.fsum(xs) / len(xs)


def _softmax_cells(g: Grid, reach: int) -> tuple[tuple[Key, ...], str]:
    keys = tuple(sorted(k for k in g.keys if k[0] == "softmax"))
    tasks = [t for t in TASK_ORDER if any(k[1] == t for k in keys)]
    tasks += sorted({k[1] for k in keys} - set(tasks))
    return keys, f"{len(keys)} cells of {', '.join(tasks)}"


def _softmax_delta(cells: Mapping[Key, Cell]) -> float:
    return min(c.accuracy for c in cells.values()) - SOFTMAX_LEVEL


def _far(levels: Mapping[str, int]) -> list[str]:
    far = [d for d, k in levels.items() if k >= FAR]
    if not far and levels:
        top = max(levels.values())
        far = [d for d, k in levels.items() if k == top]
    return sorted(far, key=lambda d: levels[d])


_AGREE = ("agree_structure", "agree_content")


def _structure_minus_content(mixer: str):
    """Structure kept minus content kept, each above the window's.  The grammar's sentences are short,
    so the category k back is partly readable from the last few tokens: a window with no memory past
    its reach scores well above chance on structure at k = 8 while content, which nothing nearby
    predicts, is at chance.  Subtracting the window's own structure − content at the same k leaves what
    the mixer keeps beyond a short context (the window scores 0 by construction)."""
    def select(g: Grid, reach: int) -> tuple[tuple[Key, ...], str]:
        levels = [g.levels_of(m, t) for m in (mixer, FLOOR_MIXER) for t in _AGREE]
        shared = {d: k for d, k in levels[0].items() if all(d in other for other in levels[1:])}
        far = _far(shared)
        return tuple((m, t, d) for d in far for m in (mixer, FLOOR_MIXER) for t in _AGREE), ", ".join(far)

    def gap(cells: Mapping[Key, Cell], m: str, d: str) -> float:
        return cells[(m, "agree_structure", d)].above_chance - cells[(m, "agree_content", d)].above_chance

    def delta(cells: Mapping[Key, Cell]) -> float:
        far = sorted({d for _, _, d in cells})
        return _mean(gap(cells, mixer, d) - gap(cells, FLOOR_MIXER, d) for d in far)

    return select, delta


_CONTENT_TASKS = ("agree_content", "lag_identity")


def _sequence_cells(g: Grid, reach: int) -> tuple[tuple[Key, ...], str]:
    keys, where = [], []
    for task in _CONTENT_TASKS:
        a, b = g.levels_of("ema3_seq", task), g.levels_of("ema3", task)
        shared = {d: k for d, k in a.items() if d in b and k > 0}
        if shared:
            d = max(shared, key=shared.get)
            keys += [("ema3_seq", task, d), ("ema3", task, d)]
            where.append(f"{task} {d}")
    return tuple(keys), ", ".join(where)


def _sequence_delta(cells: Mapping[Key, Cell]) -> float:
    tasks = sorted({(t, d) for _, t, d in cells})
    return _mean(cells[("ema3_seq", t, d)].accuracy - cells[("ema3", t, d)].accuracy for t, d in tasks)


def mqar_training(g: Grid) -> dict[str, float]:
    """MQAR size -> softmax attention's *dev* accuracy above chance there, averaged over the seeds
    (empty where the runs hold no softmax MQAR cell with a dev accuracy): how far training got on a
    size any mixer could solve.  Dev, not test: which sizes the claims count is a choice."""
    got: dict[str, list[float]] = {}
    for cells in g.seeds.values():
        for (m, t, d), cell in cells.items():
            above = normalised(cell.dev, cell.chance)
            if m == "softmax" and t == "mqar" and math.isfinite(above):
                got.setdefault(d, []).append(above)
    return {d: _mean(v) for d, v in got.items()}


def _as_grid(rows_or_grid) -> Grid:
    return rows_or_grid if isinstance(rows_or_grid, Grid) else grid(rows_or_grid)


def undertrained_mqar(rows_or_grid) -> dict[str, float]:
    """The MQAR sizes whose softmax cells stayed below TRAINED_LEVEL (size -> how far they got)."""
    g = _as_grid(rows_or_grid)
    return {d: v for d, v in mqar_training(g).items() if v < TRAINED_LEVEL}


def undertrained_text(rows_or_grid) -> str:
    """One sentence naming the under-trained MQAR sizes, smallest first; empty when there are none."""
    g = _as_grid(rows_or_grid)
    under = undertrained_mqar(g)
    if not under:
        return ""
    order = sorted(under, key=lambda d: (g.levels.get(("mqar", d), 0), d))
    got = ", ".join(f"{under[d]:.2f} at {d}" for d in order)
    return (f"MQAR is under-trained at this budget: softmax attention, which can recall exactly, got only {got} "
            f"of the way from chance to perfect on dev (a size counts from {TRAINED_LEVEL:g}), so the recall claims "
            "leave these sizes out; train longer (train.steps) to judge them.")


def _above_on_mqar(better: str, worse: str):
    def select(g: Grid, reach: int) -> tuple[tuple[Key, ...], str]:
        a, b = g.levels_of(better, "mqar"), g.levels_of(worse, "mqar")
        under = undertrained_mqar(g)
        shared = sorted((d for d in a if d in b and d not in under), key=lambda d: (a[d], d))
        return tuple((m, "mqar", d) for d in shared for m in (better, worse)), ", ".join(shared)

    def delta(cells: Mapping[Key, Cell]) -> float:
        sizes = sorted({d for _, _, d in cells})
        return _mean(cells[(better, "mqar", d)].accuracy - cells[(worse, "mqar", d)].accuracy for d in sizes)

    return select, delta


def _window_cells(g: Grid, reach: int) -> tuple[tuple[Key, ...], str]:
    levels = g.levels_of(FLOOR_MIXER, "agree_content")
    beyond = sorted((d for d, k in levels.items() if k > reach), key=levels.get)
    return tuple((FLOOR_MIXER, "agree_content", d) for d in beyond), ", ".join(beyond)


def _window_delta(cells: Mapping[Key, Cell]) -> float:
    return NEAR_CHANCE - _mean(c.above_chance for c in cells.values())


CLAIMS: tuple[Claim, ...] = (
    Claim("softmax_solves", f"Softmax attention solves every task (min over its cells of accuracy − "
          f"{SOFTMAX_LEVEL:g} > 0)", "the top of the hierarchy", "[D]",
          "softmax rows", _softmax_cells, _softmax_delta),
    *(Claim(f"{m}_structure_not_content", f"{m} keeps structure while losing content at a distance, beyond "
            f"what the window reads (accuracy above chance, agree_structure − agree_content, minus the same "
            f"for {FLOOR_MIXER}, at k ≥ {FAR} > 0)",
            "EMA keeps structure, destroys content", "[A] [S]",
            f"{m} and {FLOOR_MIXER} on agree_structure and agree_content at a shared distance",
            *_structure_minus_content(m))
      for m in ("ema", "ema3")),
    Claim("sequence_recovers_content", "Attention over the trace sequence recovers content (ema3_seq − ema3 "
          "accuracy on agree_content and lag_identity at the largest k > 0)",
          "an EMA sequence is invertible (PAPER.md §5.9)", "[D]",
          "ema3_seq and ema3 on agree_content or lag_identity at a shared distance",
          _sequence_cells, _sequence_delta),
    Claim("gated_above_decay", "Input-dependent selection beats fixed decay at recall (MQAR accuracy, "
          "gated_linear_attn − decay_linear_attn > 0)", "EMA < fixed decay < gated < softmax", "[A] [S]",
          "gated_linear_attn and decay_linear_attn on a shared MQAR size",
          *_above_on_mqar("gated_linear_attn", "decay_linear_attn"), recall=True),
    Claim("decay_above_ema", "Key–value binding beats EMA at recall (MQAR accuracy, decay_linear_attn − "
          "ema > 0)", "EMA < fixed decay < gated < softmax", "[A] [S]",
          "decay_linear_attn and ema on a shared MQAR size", *_above_on_mqar("decay_linear_attn", "ema"),
          recall=True),
    Claim("window_at_chance", f"The window falls to chance beyond its reach ({NEAR_CHANCE:g} − agree_content "
          "accuracy above chance, past the window's reach, > 0)", "no memory beyond the window", "[D]",
          "window_k on agree_content at a distance beyond its reach (k > {reach})", _window_cells, _window_delta),
)

VERDICT_RULE = (
    "**The rule.** Every claim is a difference Δ formed within each seed (every mixer of a seed sees the "
    "same sequences), then averaged over the seeds. Δ is *beyond the seeds' spread* when "
    f"|mean Δ| ≥ {VERDICT_K:g} × the sample standard deviation of Δ across the seeds; it needs at least "
    f"{VERDICT_MIN_SEEDS} seeds. A claim \"Δ > 0\" is **reproduced** when Δ > 0 beyond the spread; **not "
    "reproduced** when Δ ≤ 0 beyond the spread; **inconclusive** when Δ is within the spread, with one seed, "
    "or when the runs do not measure it. *Accuracy above chance* is (accuracy − chance) / (1 − chance): 0 at "
    "chance, 1 perfect."
)


@dataclass(frozen=True)
class ClaimVerdict:
    claim: Claim
    delta: Spread   # of the claim's per-seed Δ
    verdict: str    # a key of VERDICT_WORDS
    over: str = ""  # the cells Δ is formed from, in words ("k=8, k=16"); empty where not measured
    reach: int = DEFAULT_WINDOW_REACH
    note: str = ""  # what the runs left out and why (undertrained_text), said after the verdict

    @property
    def word(self) -> str:
        return VERDICT_WORDS[self.verdict]

    @property
    def measured(self) -> bool:
        return self.delta.n > 0

    @property
    def sentence(self) -> str:
        note = f" {self.note}" if self.note else ""
        d, what = self.delta, self.claim.what
        if d.n == 0:
            if self.note:  # the cells are there, but none was trained enough to compare
                return f"{what}: not judged — {self.word}.{note}"
            return (f"{what}: not measured by these runs (it needs {self.claim.needs.format(reach=self.reach)}) "
                    f"— {self.word}.")
        over = f" over {self.over}" if self.over else ""
        if d.n < VERDICT_MIN_SEEDS:
            return f"{what}: Δ = {d.mean:+.4f}{over} (one seed: no spread) — {self.word}.{note}"
        return (f"{what}: Δ = {d.mean:+.4f}{over}, std {d.std:.4f} across {d.n} seeds (threshold "
                f"{VERDICT_K:g} × std = {VERDICT_K * d.std:.4f}) — {self.word}.{note}")


def claim_verdicts(rows: Iterable[Mapping[str, Any]], *, reach: int = DEFAULT_WINDOW_REACH) -> list[ClaimVerdict]:
    """Each of CLAIMS judged by VERDICT_RULE from ``boundary_accuracy`` rows (dicts, or a DataFrame).

    ``reach``: how far back window_k sees in these runs (:func:`window_reach` of the run's window and
    layers).  A seed counts for a claim only when it holds every cell the claim compares.
    """
    g = grid(rows)
    under = undertrained_text(g)
    out = []
    for c in CLAIMS:
        keys, over = c.select(g, reach)
        deltas = []
        if keys:
            for seed in sorted(g.seeds):
                cells = g.seeds[seed]
                if all(k in cells for k in keys):
                    deltas.append(c.delta({k: cells[k] for k in keys}))
        s = spread(deltas)
        # The under-training note goes with every claim that reads MQAR cells: the recall claims,
        # which leave those sizes out, and softmax's, which keeps them (it is the claim that softmax
        # solves every task at this budget, and it does not).
        reads_mqar = c.recall or any(k[1] == "mqar" for k in keys)
        out.append(ClaimVerdict(c, s, judge(s) if s.n else "inconclusive", over if s.n else "", reach,
                                under if reads_mqar else ""))
    return out


def measured_order(rows: Iterable[Mapping[str, Any]], task: str = "mqar", *,
                   mixers: Iterable[str] | None = None) -> list[tuple[str, float]]:
    """The mixers on ``task`` by mean accuracy over their cells (seeds and difficulties), weakest first
    as PAPER_HIERARCHY is; ties in MIXER_NAMES's order.  ``mixers``: only these (e.g. PAPER_HIERARCHY)."""
    wanted = None if mixers is None else set(mixers)
    accs: dict[str, list[float]] = {}
    for seed_cells in grid(rows).seeds.values():
        for (m, t, _), cell in seed_cells.items():
            if t == task and (wanted is None or m in wanted):
                accs.setdefault(m, []).append(cell.accuracy)

    def rank(m: str) -> tuple[int, str]:
        return (MIXER_NAMES.index(m) if m in MIXER_NAMES else len(MIXER_NAMES), m)

    means = [(m, _mean(v)) for m, v in accs.items()]
    return sorted(means, key=lambda mv: (mv[1], rank(mv[0])))
