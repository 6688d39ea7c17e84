"""The depth study's verdicts: what fixed accumulation over depth loses (PAPER.md §1, §4 item 5), judged by
the shared rule.

Pure arithmetic on the rows of ``depth_results`` (no torch, no pandas, no store), so that the page, the
store and a benchmark script judge the same rows the same way.  The rules' names and their predicted
order come from :mod:`ema_core.depth` (torch-free at import).

Every claim is a difference Δ formed within one seed: at one (depth, seed) every rule starts from the
same body and sees the same batches (:mod:`ema_core.studies.depth.experiment`), so the seed's draw cancels in
Δ and what is left is what the rule changes.  Δ is then averaged over the seeds and judged by
:func:`ema_core.verdicts.judge` ("Δ > 0" beyond the seeds' spread, on 3 seeds or more).  The paper's
claims (:data:`CLAIMS`) can come out either way; the sanity check (:data:`SANITY_CHECKS`) holds by
construction and says whether the probes can be read at all.

The depths a claim reads are the runs' own extremes: "the deepest depth" is the deepest at which every
rule the claim compares was measured (in any seed), "the shallowest" likewise; a seed counts only when
it holds every cell the claim reads.  A cell that two runs both hold (the same seed of the same config
run twice) is averaged: give the rows of one config.  Missing and non-finite values are left out, cell
by cell and metric by metric; a rule or depth the runs lack makes a claim "not measured", never an error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ema_core.depth import RULE_LABELS, RULES
from ema_core.scoreboard import Score, delta_text, outcome, plain
from ema_core.verdicts import (RULE_AS_TEST, SANITY_WORDS, VERDICT_K, VERDICT_MIN_SEEDS, VERDICT_WORDS, Spread,
                               finite, judge, not_judged, records, spread, t_threshold)

# The paper's predicted order, worst first, in tiers: the fixed sum below static learned weights, below
# input-dependent weights.  The paper does not order its two input-dependent forms (``dynamic``, static
# plus a per-token increment, and ``select``, a per-token softmax) against each other: they share a tier.
PREDICTED_ORDER: tuple[tuple[str, ...], ...] = (("sum",), ("static",), ("dynamic", "select"))

# The per-cell numbers the claims read (the rest of a row is carried by the store, never judged).
METRICS = ("val_loss", "train_loss", "probe_early", "probe_early_init", "probe_early_resid", "probe_early_resid_init",
           "probe_prev", "probe_prev_init", "probe_prev_chance", "probe_token_init", "probe_token_chance")
# A remix row (``depth_remix``) enters the grid as the cell (REMIX + its fitted rule, depth).
REMIX = "remix:"
# A probe that reads at least this much on the model at initialisation has no room to show a loss: its
# claim is "not measurable" and nothing rests on it (the early-block probe's 0.998–0.999 was such a one).
PROBE_CEILING = 0.99
# The remix claim's threshold, fixed before its confirming run: the share of the jointly trained gap a
# remix of the frozen sum must stay below for the loss to be in the stream rather than in its read.
REMIX_SHARE = 0.5

Key = tuple[str, int]  # (rule, depth in blocks)


# -- the rows, as cells per seed ---------------------------------------------------------------------------

@dataclass(frozen=True)
class DepthGrid:
    """The rows as cells: ``seeds[seed][(rule, depth)][metric]`` holds the finite values only, and the
    widths and token budgets the rows were trained at (one of each for the rows of one config)."""

    seeds: Mapping[int, Mapping[Key, Mapping[str, float]]]
    widths: frozenset[int] = frozenset()
    tokens: frozenset[int] = frozenset()

    def depths(self, metric: str, *rules: str) -> list[int]:
        """The depths at which every one of ``rules`` has ``metric`` in some seed, shallowest first."""
        held: dict[str, set[int]] = {r: set() for r in rules}
        for cells in self.seeds.values():
            for (rule, depth), values in cells.items():
                if rule in held and metric in values:
                    held[rule].add(depth)
        return sorted(set.intersection(*held.values())) if held else []

    def value(self, seed: int, rule: str, depth: int, metric: str) -> float | None:
        return self.seeds.get(seed, {}).get((rule, depth), {}).get(metric)


def grid(rows: Iterable[Mapping[str, Any]], remix: Iterable[Mapping[str, Any]] = ()) -> DepthGrid:
    """Cells per seed from ``depth_results`` rows (dicts, or a DataFrame), and from ``depth_remix`` rows as
    the cells (REMIX + rule, depth) holding the remixed model's ``val_loss``.  A row without a rule, a
    finite depth or a finite seed is left out; within a row, each metric that is missing or not finite
    is left out alone (the cell's other numbers still count)."""
    sums: dict[int, dict[Key, dict[str, list[float]]]] = {}
    widths: set[int] = set()
    tokens: set[int] = set()
    remixed = [{**r, "rule": REMIX + str(r.get("rule")), "tokens": None} for r in records(remix)]
    for r in [*records(rows), *remixed]:
        rule, depth, seed = r.get("rule"), finite(r.get("depth")), finite(r.get("seed"))
        if not isinstance(rule, str) or depth is None or seed is None:
            continue
        cell = sums.setdefault(int(seed), {}).setdefault((rule, int(depth)), {})
        for m in METRICS:
            v = finite(r.get(m))
            if v is not None:
                s = cell.setdefault(m, [0.0, 0])
                s[0], s[1] = s[0] + v, s[1] + 1
        if (d := finite(r.get("d"))) is not None:
            widths.add(int(d))
        if (t := finite(r.get("tokens"))) is not None:
            tokens.add(int(t))
    seeds = {seed: {k: {m: total / n for m, (total, n) in cell.items()} for k, cell in cells.items()}
             for seed, cells in sums.items()}
    return DepthGrid(seeds, frozenset(widths), frozenset(tokens))


def _as_grid(rows_or_grid, remix=()) -> DepthGrid:
    g = rows_or_grid if isinstance(rows_or_grid, DepthGrid) else grid(rows_or_grid, remix)
    if len(g.tokens) > 1:
        raise ValueError(f"these rows hold {len(g.tokens)} budgets ({', '.join(f'{t:,}' for t in sorted(g.tokens))} "
                         "training tokens per model); judge each apart (by_budget)")
    return g


def by_budget(rows, remix=()) -> dict[int | None, tuple[list[dict], list[dict]]]:
    """The rows and remix rows of each budget (training tokens per model; None where a row does not say),
    smallest first.  A remix row goes with its budget by its own ``tokens`` (the store's reader joins it
    from the sum model's row); one without goes with the only budget, or nowhere when there are several."""
    out: dict[int | None, tuple[list[dict], list[dict]]] = {}
    for r in records(rows):
        t = finite(r.get("tokens"))
        out.setdefault(None if t is None else int(t), ([], []))[0].append(r)
    for m in records(remix):
        t = finite(m.get("tokens"))
        key = int(t) if t is not None else (next(iter(out)) if len(out) == 1 else "drop")
        if key in out:
            out[key][1].append(m)
    return dict(sorted(out.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return math.fsum(xs) / len(xs)


def blocks(depth: int) -> str:
    """A depth in words.

    >>> blocks(1), blocks(16)
    ('1 block', '16 blocks')
    """
    return f"{depth} block{'' if depth == 1 else 's'}"


# -- what a claim measures ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    """What one claim reads from the grid: Δ per seed, the numbers it is formed from (per seed, on the
    same seeds), and where, read after "Δ = …" ("at 16 blocks", "from 4 blocks to 16 blocks"); empty where
    the runs lack the cells."""

    deltas: Mapping[int, float]
    numbers: tuple[tuple[str, Mapping[int, float]], ...] = ()
    over: str = ""
    # Why the claim cannot be judged on these runs though Δ exists: the probe reads ≥ PROBE_CEILING at
    # initialisation ("not measurable"), or the deep models have not trained past the shallow ones.
    unmeasurable: str = ""
    untrained: str = ""
    note: str = ""  # a caveat beside a verdict the rule still gives


NOTHING = Measured({})


def _per_seed(g: DepthGrid, cells: Mapping[str, tuple[str, int, str]],
              delta: Callable[[Mapping[str, float]], float]) -> tuple[dict[int, float], dict[str, dict[int, float]]]:
    """Δ of every seed that holds all ``cells`` (name -> (rule, depth, metric)), and each cell's value on
    those seeds."""
    deltas, values = {}, {name: {} for name in cells}
    for seed in sorted(g.seeds):
        got = {name: g.value(seed, *cell) for name, cell in cells.items()}
        if any(v is None for v in got.values()):
            continue
        deltas[seed] = delta(got)
        for name, v in got.items():
            values[name][seed] = v
    return deltas, values


def _beats(worse: str, better: str) -> Callable[[DepthGrid], Measured]:
    """held-out loss(worse) − loss(better) at the deepest depth both were measured at."""
    def measure(g: DepthGrid) -> Measured:
        depths = g.depths("val_loss", worse, better)
        if not depths:
            return NOTHING
        L = depths[-1]
        deltas, v = _per_seed(g, {worse: (worse, L, "val_loss"), better: (better, L, "val_loss")},
                              lambda c: c[worse] - c[better])
        return Measured(deltas, ((RULE_LABELS[worse], v[worse]), (RULE_LABELS[better], v[better])), f"at {blocks(L)}",
                        note=_trains_worse(g, better, worse, L, deltas))

    return measure


def _trains_worse(g: DepthGrid, rule: str, other: str, depth: int, deltas: Mapping[int, float]) -> str:
    """Where ``rule`` loses on held-out text (mean Δ < 0) and its training loss at the end is higher than
    ``other``'s too (mean over the same seeds), the caveat that it fits the training text worse: the
    difference is one of training (a rate, an unstable form), not of what its stream can hold."""
    if not deltas or _mean(deltas.values()) >= 0:
        return ""
    _, v = _per_seed(g, {"a": (rule, depth, "train_loss"), "b": (other, depth, "train_loss")}, lambda c: 0.0)
    if not v["a"] or _mean(v["a"].values()) <= _mean(v["b"].values()):
        return ""
    return (f"At {blocks(depth)} {RULE_LABELS[rule]} also ends with a higher training loss than "
            f"{RULE_LABELS[other]} ({_mean(v['a'].values()):.4f} against {_mean(v['b'].values()):.4f}): it fits "
            "the training text worse, so its held-out deficit is one of training, not of what its stream can hold.")


def _gap_grows(g: DepthGrid) -> Measured:
    """gap(L) = loss(sum, L) − loss(select, L); Δ = gap(deepest) − gap(shallowest).  Judged only where the
    fixed sum's deepest model beats its shallowest (mean held-out loss over the same seeds): below that
    budget a deeper stack is merely harder to train, and a mix that shortens it would "win" for that."""
    depths = g.depths("val_loss", "sum", "select")
    if len(depths) < 2:
        return NOTHING
    lo, hi = depths[0], depths[-1]
    cells = {f"{r}{L}": (r, L, "val_loss") for r in ("sum", "select") for L in (lo, hi)}
    deltas, v = _per_seed(g, cells, lambda c: (c[f"sum{hi}"] - c[f"select{hi}"]) - (c[f"sum{lo}"] - c[f"select{lo}"]))
    gaps = tuple((f"gap at {blocks(L)}", {s: v[f"sum{L}"][s] - v[f"select{L}"][s] for s in deltas}) for L in (lo, hi))
    untrained = ""
    if deltas:
        shallow, deep = _mean(v[f"sum{lo}"].values()), _mean(v[f"sum{hi}"].values())
        if not deep < shallow:
            untrained = (f"the fixed sum's deepest model does not beat its shallowest at this budget ({blocks(hi)} "
                         f"{deep:.4f} against {blocks(lo)} {shallow:.4f} nats/token): deep models not yet trained")
    return Measured(deltas, gaps, f"from {blocks(lo)} to {blocks(hi)}", untrained=untrained)


def trained_deep(rows) -> dict[str, Any] | None:
    """Whether the fixed sum's deepest model beats its shallowest in these rows (one budget): {"shallow",
    "deep" (depths), "shallow_loss", "deep_loss" (means over the seeds holding both), "beats", "seeds"}, or
    None where the rows hold the fixed sum at fewer than two depths."""
    g = _as_grid(rows)
    depths = g.depths("val_loss", "sum")
    if len(depths) < 2:
        return None
    lo, hi = depths[0], depths[-1]
    _, v = _per_seed(g, {"lo": ("sum", lo, "val_loss"), "hi": ("sum", hi, "val_loss")}, lambda c: 0.0)
    if not v["lo"]:
        return None
    shallow, deep = _mean(v["lo"].values()), _mean(v["hi"].values())
    return {"shallow": lo, "deep": hi, "shallow_loss": shallow, "deep_loss": deep, "beats": deep < shallow,
            "seeds": len(v["lo"])}


def _probe_lost(metric: str, what: str) -> Callable[[DepthGrid], Measured]:
    """``metric`` read from the fixed sum's last stream: shallowest − deepest depth.  "Not measurable" where
    the same probe at initialisation reads ≥ PROBE_CEILING at either depth (mean over the seeds)."""
    def measure(g: DepthGrid) -> Measured:
        depths = g.depths(metric, "sum")
        if len(depths) < 2:
            return NOTHING
        lo, hi = depths[0], depths[-1]
        deltas, v = _per_seed(g, {"lo": ("sum", lo, metric), "hi": ("sum", hi, metric)}, lambda c: c["lo"] - c["hi"])
        numbers = [(f"{what} at {blocks(lo)}", v["lo"]), (f"{what} at {blocks(hi)}", v["hi"])]
        # The same probe on the same model at its initialisation: the baseline training moved it from,
        # shown beside the trained numbers (never part of Δ), and the test of whether it has room.
        ceiling = []
        for L in (lo, hi):
            init = {s: x for s in deltas if (x := g.value(s, "sum", L, f"{metric}_init")) is not None}
            if init:
                numbers.append((f"{what} at initialisation, {blocks(L)}", init))
                if _mean(init.values()) >= PROBE_CEILING:
                    ceiling.append(f"{_mean(init.values()):.4f} at {blocks(L)}")
        why = (f"the probe reads {' and '.join(ceiling)} already at initialisation (≥ {PROBE_CEILING:g}): no room "
               "to show a loss" if ceiling else "")
        return Measured(deltas, tuple(numbers), f"from {blocks(lo)} to {blocks(hi)}", unmeasurable=why)

    return measure


def _remix_short(rule: str) -> Callable[[DepthGrid], Measured]:
    """At the deepest depth: REMIX_SHARE × (loss(sum) − loss(rule), jointly trained) − (loss(sum) −
    loss(the frozen sum remixed with rule's weights))."""
    fitted = REMIX + rule

    def measure(g: DepthGrid) -> Measured:
        depths = g.depths("val_loss", "sum", rule, fitted)
        if not depths:
            return NOTHING
        L = depths[-1]
        deltas, v = _per_seed(g, {"sum": ("sum", L, "val_loss"), "joint": (rule, L, "val_loss"),
                                  "remix": (fitted, L, "val_loss")},
                              lambda c: REMIX_SHARE * (c["sum"] - c["joint"]) - (c["sum"] - c["remix"]))
        joint = {s: v["sum"][s] - v["joint"][s] for s in deltas}
        recovered = {s: v["sum"][s] - v["remix"][s] for s in deltas}
        return Measured(deltas, (("jointly trained gain", joint), ("remix gain", recovered)), f"at {blocks(L)}")

    return measure


def _early_readable(g: DepthGrid) -> Measured:
    """Per seed, the mean over its cells of block 1's write read from the last stream (R², trained)."""
    deltas = {}
    for seed in sorted(g.seeds):
        vals = [c["probe_early"] for c in g.seeds[seed].values() if "probe_early" in c]
        if vals:
            deltas[seed] = _mean(vals)
    if not deltas:
        return NOTHING
    return Measured(deltas, (("R²", dict(deltas)),), "over every rule and depth")


def _probe_reads_tokens(g: DepthGrid) -> Measured:
    """Per seed, the mean over its cells of token-probe accuracy at initialisation − chance."""
    deltas, init, chance = {}, {}, {}
    for seed in sorted(g.seeds):
        pairs = [(c["probe_token_init"], c["probe_token_chance"]) for c in g.seeds[seed].values()
                 if "probe_token_init" in c and "probe_token_chance" in c]
        if pairs:
            init[seed], chance[seed] = _mean(a for a, _ in pairs), _mean(b for _, b in pairs)
            deltas[seed] = init[seed] - chance[seed]
    if not deltas:
        return NOTHING
    return Measured(deltas, (("accuracy at initialisation", init), ("chance", chance)), "over every rule and depth")


# -- the claims and the sanity check ----------------------------------------------------------------------

@dataclass(frozen=True)
class DepthClaim:
    key: str
    what: str       # the claim in words, with the Δ it is judged by in its last parentheses
    paper: str      # what the paper says (a sanity check: what it checks)
    source: str     # PAPER.md's tags ("harness" for a sanity check)
    needs: str      # what rows it needs, for the sentence when they are absent
    quantity: str   # what the numbers beside Δ are, in words
    unit: str       # Δ's unit
    measure: Callable[[DepthGrid], Measured]
    # A sanity check holds by construction: judged by the same rule, shown apart from the paper's
    # claims, and never counted as one reproduced.  A failure says the harness is wrong, not the paper.
    sanity: bool = False


_DILUTION = "fixed-coefficient accumulation dilutes across depth (fixed residual sums)"

CLAIMS: tuple[DepthClaim, ...] = (
    DepthClaim("static_beats_sum", "Static learned weights beat the fixed sum (held-out loss at the deepest depth, "
          "sum − static > 0)", f"{_DILUTION}; predicted order: fixed sum < static weights < selection", "[A] [S]",
          "the fixed sum and static weights at a shared depth", "held-out loss", "nats/token",
          _beats("sum", "static")),
    # Input dependence alone: dynamic is static plus a per-token increment, nothing else changed (no
    # softmax, the same starting point, parameters as select's).
    DepthClaim("dynamic_beats_static", "Input-dependent weights beat static ones (held-out loss at the deepest depth, "
          "static − dynamic > 0)", "only learned, input-dependent selection fixes the dilution", "[A] [S]",
          "static and input-dependent (dynamic) weights at a shared depth", "held-out loss", "nats/token",
          _beats("static", "dynamic")),
    # The convex variant: input-dependent and normalised at once, so it cannot be pinned on either.
    DepthClaim("select_beats_static", "Convex input-dependent selection beats static weights (held-out loss at the "
          "deepest depth, static − select > 0)", "only learned, input-dependent selection fixes the dilution",
          "[A] [S]", "static weights and selection at a shared depth", "held-out loss", "nats/token",
          _beats("static", "select")),
    DepthClaim("gap_grows_with_depth", "Fixed accumulation loses more to selection as the stack deepens (gap = held-out "
          "loss, sum − select; gap at the deepest depth − gap at the shallowest > 0)",
          f"{_DILUTION}, and the dilution is irreversible: it grows with the number of writes added up",
          "[A] [S]", "the fixed sum and selection at two depths or more", "sum − select", "nats/token", _gap_grows),
    DepthClaim("sum_loses_early_block", "Fixed accumulation loses what block 1 added with depth (R² of block 1's write, "
          "less what the embedding explains, read from the fixed sum's last stream, shallowest − deepest depth > 0)",
          f"{_DILUTION}: each write's share of the stream shrinks as more are added", "[A] [S]",
          "the fixed sum's residual early-block probe at two depths or more",
          "block 1's own write in the fixed sum's last stream", "R²", _probe_lost("probe_early_resid", "R²")),
    DepthClaim("sum_loses_prev_token", "Fixed accumulation loses the previous token with depth (accuracy of reading the "
          "previous token's identity from the fixed sum's last stream, shallowest − deepest depth > 0)",
          f"{_DILUTION}: what an early block wrote is a smaller share of the stream the deeper it is", "[A] [S]",
          "the fixed sum's previous-token probe at two depths or more", "the previous token in the fixed sum's "
          "last stream", "accuracy", _probe_lost("probe_prev", "accuracy")),
    # The remix test: fitted on a frozen, trained sum model, depth weights can only re-read what its stream
    # holds.  The paper's irreversible dilution predicts they recover little of what the same weights gain
    # when trained with the body; the threshold (half) was fixed before the confirming run.  Reproduced
    # refutes "the rule only changes access"; it does not tell information lost from the sum's stream
    # from a different training path (the body co-adapting with its mix): both recover nothing.
    *(DepthClaim(f"remix_short_of_{rule}", f"A better read of the fixed sum's stream does not give the gain: {label} "
            f"fitted on a frozen fixed sum recover less than half of what they gain trained jointly (held-out loss at "
            f"the deepest depth, {REMIX_SHARE:g} × (sum − {rule}) − (sum − remixed sum) > 0)",
            "the dilution is irreversible: once added up, an early write cannot be read back out", "[A] [S]",
            f"the fixed sum, {rule} and the sum remixed with {rule}'s weights at a shared depth",
            "held-out loss below the fixed sum's", "nats/token", _remix_short(rule))
      for rule, label in (("static", "static weights"), ("dynamic", "input-dependent weights"))),
)

SANITY_CHECKS: tuple[DepthClaim, ...] = (
    DepthClaim("probe_reads_tokens", "The token probe reads identity where the stream holds it (at initialisation, "
          "token-probe accuracy − chance, mean over every rule and depth, > 0)",
          "the stream at initialisation carries the input embedding whole, by construction, so a probe that "
          "works reads the token above chance", "harness", "the probes at initialisation",
          "the token probe", "accuracy", _probe_reads_tokens, sanity=True),
    # The early-block probe before the embedding's part is removed: at its ceiling (0.998–0.999, trained or
    # not), so it checks the regression works, never the paper.
    DepthClaim("early_block_readable", "The early-block probe reads block 1's write whole (R² of block 1's write read "
          "from the last stream, mean over every rule and depth, > 0)",
          "the write is mostly a function of the current token, which every stream keeps, so a regression that "
          "works reads it", "harness", "the early-block probe", "block 1's write", "R²", _early_readable,
          sanity=True),
)

VERDICT_RULE = (
    "**The rule.** Every claim is a difference Δ formed within each seed (at one depth and seed every rule "
    "starts from the same body and sees the same batches), then averaged over the seeds. Δ is *beyond the "
    f"seeds' spread* when |mean Δ| > {VERDICT_K:g} × the sample standard deviation of Δ across the seeds; a "
    f"claim is judged on at least {VERDICT_MIN_SEEDS} seeds. A claim \"Δ > 0\" is **reproduced** when Δ > 0 "
    "beyond the spread; **not reproduced** when Δ < 0 beyond the spread; **inconclusive** when Δ is within "
    f"the spread; **not judged** below {VERDICT_MIN_SEEDS} seeds; **not measured** when the runs lack a rule or "
    "a depth it reads. *The deepest depth* and *the shallowest* are the runs' own. \"The gap grows with depth\" "
    "is judged only at a budget where the fixed sum's deepest model beats its shallowest (elsewhere: **not judged: "
    "deep models not yet trained**); a probe's claim is **not measurable** where the probe reads "
    f"≥ {PROBE_CEILING:g} already at initialisation. Runs of different budgets (training tokens per model) are "
    "judged apart. The **sanity checks** are judged by the same rule and shown apart: they hold by construction, "
    "so they say whether the probes can be read, not whether the paper is right.\n\n" + RULE_AS_TEST
)

# What a result sentence says after the numbers, by verdict (a sanity check: whether it holds).
_PHRASES = {"reproduced": "beyond the seeds' spread, as the paper predicts",
            "not_reproduced": "beyond the seeds' spread, against the paper",
            "inconclusive": "within the seeds' spread: no difference can be told at this scale"}
_SANITY_PHRASES = {"reproduced": "beyond the seeds' spread: the check holds",
                   "not_reproduced": "beyond the seeds' spread the wrong way: the check fails, so the harness is wrong",
                   "inconclusive": "within the seeds' spread: the check cannot tell"}


@dataclass(frozen=True)
class DepthClaimVerdict:
    claim: DepthClaim
    delta: Spread   # of the claim's per-seed Δ
    verdict: str    # a key of VERDICT_WORDS, or "not_measured" (no seed holds the cells)
    over: str = ""  # where Δ is formed, read after it ("at 16 blocks"); empty where not measured
    numbers: tuple[tuple[str, Spread], ...] = ()  # what Δ is formed from, across the same seeds
    note: str = ""  # a caveat about what these runs can show of the claim (said once on the page)

    @property
    def paper(self) -> str:
        return self.claim.paper

    @property
    def measured(self) -> bool:
        return self.delta.n > 0

    @property
    def word(self) -> str:
        if not self.measured:
            return "not measured"
        if self.verdict in SPECIAL_WORDS:
            return SPECIAL_WORDS[self.verdict]
        if self.verdict == "not_judged":
            return not_judged(self.delta.n)
        return (SANITY_WORDS if self.claim.sanity else VERDICT_WORDS)[self.verdict]

    @property
    def sentence(self) -> str:
        """The claim with its formula, Δ, std, the threshold and t: the detail the rule is read from."""
        d, what = self.delta, self.claim.what
        if d.n == 0:
            return f"{what}: not measured by these runs (it needs {self.claim.needs})."
        over = f" {self.over}" if self.over else ""
        if self.verdict in SPECIAL_WORDS:
            return f"{what}: Δ = {d.mean:+.4f}{over} — {self.word}: {self.note}."
        if d.n < VERDICT_MIN_SEEDS:
            return f"{what}: Δ = {d.mean:+.4f}{over} — {self.word}."
        return (f"{what}: Δ = {d.mean:+.4f}{over}, std {d.std:.4f} across {d.n} seeds (threshold "
                f"{VERDICT_K:g} × std = {VERDICT_K * d.std:.4f}; paired t = {d.t:.2f} against "
                f"{t_threshold(d.n):.2f}) — {self.word}.")

    @property
    def result(self) -> str:
        """One plain sentence: where, the numbers, Δ and what the rule makes of it."""
        d, c = self.delta, self.claim
        if d.n == 0:
            return f"Not measured: these runs hold no {c.needs}."
        numbers = ", ".join(f"{label} {s.mean:.4f}" for label, s in self.numbers)
        spread_text = f" ± {d.std:.4f}" if d.n > 1 and math.isfinite(d.std) else ""
        seeds = f"{d.n} seed{'' if d.n == 1 else 's'}"
        if self.verdict in SPECIAL_WORDS:
            phrase = f"on {seeds}: {self.word}, since {self.note}"
        elif self.verdict == "not_judged":
            phrase = f"on {seeds}, fewer than the {VERDICT_MIN_SEEDS} the rule needs: not judged"
        else:
            phrase = f"across {seeds}, " + (_SANITY_PHRASES if c.sanity else _PHRASES)[self.verdict]
        where = self.over[:1].upper() + self.over[1:]
        return f"{where}, {c.quantity}: {numbers}; Δ = {d.mean:+.4f}{spread_text} {c.unit} {phrase}."


# Verdicts a claim gets though Δ was formed, and their words: the probe had no room at initialisation,
# or the deep models had not trained past the shallow ones (the reason is the verdict's note).
SPECIAL_WORDS = {"not_measurable": "not measurable", "not_trained": "not judged: deep models not yet trained"}


def _verdict(claim: DepthClaim, g: DepthGrid) -> DepthClaimVerdict:
    m = claim.measure(g)
    d = spread(m.deltas.values())
    if d.n == 0:
        return DepthClaimVerdict(claim, d, "not_measured")
    numbers = tuple((label, spread(per_seed.values())) for label, per_seed in m.numbers)
    if m.unmeasurable:
        return DepthClaimVerdict(claim, d, "not_measurable", m.over, numbers, m.unmeasurable)
    if m.untrained:
        return DepthClaimVerdict(claim, d, "not_trained", m.over, numbers, m.untrained)
    return DepthClaimVerdict(claim, d, judge(d), m.over, numbers, m.note)


def claim_verdicts(rows, remix=()) -> list[DepthClaimVerdict]:
    """Each of CLAIMS, then each of SANITY_CHECKS, judged by the shared rule from the ``depth_results`` rows
    (dicts, or a DataFrame) and ``depth_remix`` rows of one budget, or their :class:`DepthGrid`; rows of several
    budgets are refused (judge each of :func:`by_budget` apart)."""
    g = _as_grid(rows, remix)
    return [_verdict(c, g) for c in (*CLAIMS, *SANITY_CHECKS)]


def claims_and_checks(verdicts: Iterable[DepthClaimVerdict]) -> tuple[list[DepthClaimVerdict], list[DepthClaimVerdict]]:
    """The paper's claims and the sanity checks, apart, each in its declared order."""
    verdicts = list(verdicts)
    return [v for v in verdicts if not v.claim.sanity], [v for v in verdicts if v.claim.sanity]


def measured_order(rows, depth: int) -> list[tuple[str, float]]:
    """The rules at ``depth`` by mean held-out loss over seeds (each seed's cell once), worst (highest loss)
    first as PREDICTED_ORDER is; ties in RULES's order, a rule of no RULES after them by name.  Empty
    where no rule was measured at that depth."""
    losses: dict[str, list[float]] = {}
    for cells in _as_grid(rows).seeds.values():
        for (rule, L), values in cells.items():
            if L == depth and "val_loss" in values:
                losses.setdefault(rule, []).append(values["val_loss"])

    def rank(rule: str) -> tuple[int, str]:
        return (RULES.index(rule) if rule in RULES else len(RULES), rule)

    means = [(rule, _mean(v)) for rule, v in losses.items()]
    return sorted(means, key=lambda rv: (-rv[1], rank(rv[0])))


# -- the study in one sentence ------------------------------------------------------------------------------

def _gap_at(g: DepthGrid, depth: int) -> Spread:
    per_seed = {}
    for seed in g.seeds:
        a, b = g.value(seed, "sum", depth, "val_loss"), g.value(seed, "select", depth, "val_loss")
        if a is not None and b is not None:
            per_seed[seed] = a - b
    return spread(per_seed.values())


def _gap_text(d: Spread, depth: int) -> str:
    spread_text = f" ± {d.std:.4f}" if d.n > 1 and math.isfinite(d.std) else ""
    return f"{d.mean:+.4f}{spread_text} nats/token at {blocks(depth)} (perplexity × {math.exp(d.mean):.3f})"


def depth_statement(rows) -> str:
    """Whether fixed accumulation loses more with depth in these runs, at their scale, and by how much:
    the gap (the fixed sum's held-out loss − selection's) at the shallowest and the deepest depth, with
    its std across seeds, in nats/token and as a ratio of perplexities, and the rule's word on its growth."""
    g = _as_grid(rows)
    depths = g.depths("val_loss", "sum", "select")
    if not depths:
        return ("These runs hold no fixed sum and input-dependent selection at a shared depth: whether fixed "
                "accumulation loses more with depth is not measured.")
    scale = [f"d = {next(iter(g.widths))}"] if len(g.widths) == 1 else []
    scale += [f"{next(iter(g.tokens)):,} training tokens per model"] if len(g.tokens) == 1 else []
    at_scale = f"At this scale ({', '.join(scale)})" if scale else "At this scale"
    lo, hi = depths[0], depths[-1]
    if lo == hi:
        return (f"{at_scale}, the fixed sum's held-out loss minus selection's is {_gap_text(_gap_at(g, lo), lo)}; "
                "these runs hold one depth, so whether fixed accumulation loses more with depth is not measured.")
    growth = _verdict(next(c for c in CLAIMS if c.key == "gap_grows_with_depth"), g)
    d = growth.delta
    said = (f"{at_scale}, the fixed sum's held-out loss minus selection's is {_gap_text(_gap_at(g, lo), lo)} and "
            f"{_gap_text(_gap_at(g, hi), hi)}")
    if d.n == 0:
        return f"{said}; no seed holds both rules at both depths, so its growth is not measured."
    change = f"{d.mean:+.4f}" + (f" ± {d.std:.4f}" if d.n > 1 and math.isfinite(d.std) else "")
    seeds = f"{d.n} seed{'' if d.n == 1 else 's'}"
    verdict = {
        "reproduced": f"fixed accumulation loses more with depth here: the gap grows by {change} nats/token from "
                      f"{blocks(lo)} to {blocks(hi)}, beyond the seeds' spread ({seeds})",
        "not_reproduced": f"fixed accumulation loses less with depth here: the gap changes by {change} nats/token from "
                          f"{blocks(lo)} to {blocks(hi)}, beyond the seeds' spread ({seeds})",
        "inconclusive": f"whether fixed accumulation loses more with depth cannot be told here: the gap changes by "
                        f"{change} nats/token from {blocks(lo)} to {blocks(hi)}, within the seeds' spread ({seeds})",
        "not_judged": f"the gap changes by {change} nats/token from {blocks(lo)} to {blocks(hi)}, on {seeds}: "
                      f"{not_judged(d.n)}, the rule needs {VERDICT_MIN_SEEDS}",
        "not_trained": f"whether fixed accumulation loses more with depth is not judged here: {growth.note}",
    }[growth.verdict]
    return f"{said}: {verdict}."

# -- the scoreboard's lines (ema_core.scoreboard.Score): the same verdicts, in the board's one shape --

def scores(verdicts: Iterable[DepthClaimVerdict]) -> list[Score]:
    out = []
    for v in verdicts:
        c, d = v.claim, v.delta
        measured = delta_text(d, 4, c.unit) + (f" {v.over}" if v.over and d.n else "")
        # Not judged for want of trained deep models counts as not judged; a probe with no room, as
        # nothing measured.  Either way the reason is the note.
        said = "not_judged" if v.verdict == "not_trained" else outcome(v.verdict, d.n)
        out.append(Score("depth", c.key, plain(c.what), c.paper, measured, d, said, v.word,
                         v.sentence, note=v.note, sanity=c.sanity))
    return out
