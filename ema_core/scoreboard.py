"""The claims scoreboard: every claim the project judges, from every study, in one shape.

Each study judges its claims in its own findings module (``ema_core/studies/<study>/findings.py``), by
the one rule of :mod:`ema_core.verdicts`.  Their verdict records differ in
what they carry beside Δ (the cells a boundary claim reads, the SPEN variant a gap claim is about); a reader who
wants to know *what reproduced* needs one line per claim with the same parts.  :class:`Score` is that
line, and each study's ``findings.scores`` turns its verdicts into it, without judging anything again
(with :func:`delta_text` and :func:`outcome` from here).

Pure (no pandas, no store, no study): the store picks the runs (:mod:`store.scoreboard`), the Overview draws the
board, and each study's page draws its own claims with the same one-line sentence.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable

from ema_core.verdicts import VERDICT_K, VERDICT_MIN_SEEDS, Spread, strength

# What a verdict says in one word on the board, and the order the board sorts by: the verdicts a
# reader acts on first (a claim contradicted, then one that needs seeds) before those that are settled.
OUTCOMES = ("not_reproduced", "reproduced", "inconclusive", "not_judged", "not_measured")


@dataclass(frozen=True)
class Score:
    """One judged claim, as the board and the pages state it."""

    study: str        # a key of ema_core.studies.STUDIES
    key: str          # the claim's key within its study
    claim: str        # the claim in plain words, without its formula
    paper: str        # what the paper says
    measured: str     # what these runs measured, in plain words and numbers
    delta: Spread     # the Δ the rule judged (mean, std and seeds)
    verdict: str      # a key of OUTCOMES
    word: str         # the verdict as the study words it ("holds" for a sanity check, "not judged: 1 seed")
    detail: str       # the study's full sentence: the formula, Δ, its std, the threshold and t
    note: str = ""    # a caveat about the runs (under-training, a missing floor): said once per page
    sanity: bool = False  # a check of the harness, not a claim of the paper

    @property
    def seeds(self) -> int:
        return self.delta.n

    @property
    def strength(self) -> float:
        """|mean Δ| / the rule's threshold (NaN: not judged); see :func:`ema_core.verdicts.strength`."""
        return strength(self.delta)

    @property
    def evidence(self) -> str:
        """The strength of the evidence in words: how far Δ sits from the threshold, or why nothing is said."""
        n = self.delta.n
        if n == 0:
            return "no run measures it"
        if n < VERDICT_MIN_SEEDS:
            return f"{n} seed{'' if n == 1 else 's'} of the {VERDICT_MIN_SEEDS} the rule needs"
        s = self.strength
        if math.isinf(s):
            return f"all {n} seeds agree exactly"
        return f"|Δ| = {s:.1f}× the threshold, {n} seeds"

    @property
    def line(self) -> str:
        """One plain sentence: what was expected and what was measured, with the strength of the evidence
        (the verdict's word goes before it, as its badge: :func:`pages._verdicts.badge`)."""
        return f"{self.claim}. Paper: {self.paper}. Here: {self.measured} ({self.evidence})."


def plain(what: str) -> str:
    """A claim's words without the formula in its last parentheses (the detail keeps it).

    >>> plain("Traces carry more of the roles (within grammar: traces − instantaneous > 0)")
    'Traces carry more of the roles'
    """
    return re.sub(r"\s*\((?:[^()]|\([^()]*\))*\)\s*$", "", what).strip() or what


def delta_text(d: Spread, digits: int, unit: str = "") -> str:
    """``+0.165 ± 0.012`` (the ± only with two seeds or more), with a unit."""
    u = f" {unit}" if unit else ""
    if d.n == 0:
        return "not measured"
    spread_text = f" ± {d.std:.{digits}f}" if d.n > 1 and math.isfinite(d.std) else ""
    return f"Δ = {d.mean:+.{digits}f}{spread_text}{u}"


def outcome(verdict: str, n: int) -> str:
    if verdict in OUTCOMES:
        return verdict if n else "not_measured"
    return "not_measured"  # a study's own "untested" or "not measured": nothing was judged


# -- the seeds a claim lacks ---------------------------------------------------------------------------

def missing_seeds(held: Iterable[int], span: int = 1, wanted: int = VERDICT_MIN_SEEDS) -> list[int]:
    """The first seeds of new runs that bring ``held`` seeds up to ``wanted``: the smallest free ones, each
    run covering ``span`` consecutive seeds (a boundary or depth run covers its ``seeds``) none of which is held.

    >>> missing_seeds([0]), missing_seeds([0, 1, 2]), missing_seeds([0], span=2), missing_seeds([1])
    ([1, 2], [], [1], [0, 2])
    """
    have = set(int(s) for s in held)
    span = max(int(span), 1)
    out: list[int] = []
    s = 0
    while len(have) < wanted:
        block = range(s, s + span)
        if not have.intersection(block):
            out.append(s)
            have.update(block)
            s += span
        else:
            s += 1
    return out


RULE_LINE = (f"A claim is a difference Δ formed within each seed; it is judged on {VERDICT_MIN_SEEDS} seeds or "
             f"more, reproduced when Δ > {VERDICT_K:g} × its std across seeds, not reproduced when Δ < −{VERDICT_K:g} "
             "× that std, inconclusive in between.")
