"""The claims scoreboard: every claim the project judges, from every study, in one shape.

Each study judges its claims in its own findings module, by the one rule of :mod:`ema_core.verdicts`
(structure_findings, boundary_findings, content_findings, depth_findings).  Their verdict records differ in
what they carry beside Δ (the cells a boundary claim reads, the SPEN variant a gap claim is about); a reader who
wants to know *what reproduced* needs one line per claim with the same parts.  :class:`Score` is that
line, and ``*_scores`` turn each study's verdicts into it, without judging anything again.

Pure (no pandas, no store): the store picks the runs (:mod:`store.scoreboard`), the Overview draws the
board, and each study's page draws its own claims with the same one-line sentence.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable

from ema_core import boundary_findings, content_findings, depth_findings, structure_findings
from ema_core.verdicts import VERDICT_K, VERDICT_MIN_SEEDS, Spread, strength


@dataclass(frozen=True)
class Study:
    title: str   # as the navigation names its page
    kind: str    # the experiment kind whose runs it judges
    page: str    # the page that shows the claims with their charts


# The studies whose claims are judged, in the order the Overview lists them (the trace-dilution page
# computes in closed form and judges nothing: its limits hold by construction).
STUDIES: dict[str, Study] = {
    "structure": Study("Structure", "structure", "pages/structure.py"),
    "content": Study("Content", "lm", "pages/content.py"),
    "boundary": Study("Boundary map", "boundary", "pages/boundary.py"),
    "depth": Study("Depth dilution", "depth", "pages/depth.py"),
}

# What a verdict says in one word on the board, and the order the board sorts by: the verdicts a
# reader acts on first (a claim contradicted, then one that needs seeds) before those that are settled.
OUTCOMES = ("not_reproduced", "reproduced", "inconclusive", "not_judged", "not_measured")


@dataclass(frozen=True)
class Score:
    """One judged claim, as the board and the pages state it."""

    study: str        # a key of STUDIES
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


def _pm(d: Spread, digits: int, unit: str = "") -> str:
    """``+0.165 ± 0.012`` (the ± only with two seeds or more), with a unit."""
    u = f" {unit}" if unit else ""
    if d.n == 0:
        return "not measured"
    spread_text = f" ± {d.std:.{digits}f}" if d.n > 1 and math.isfinite(d.std) else ""
    return f"Δ = {d.mean:+.{digits}f}{spread_text}{u}"


def _outcome(verdict: str, n: int) -> str:
    if verdict in OUTCOMES:
        return verdict if n else "not_measured"
    return "not_measured"  # a study's own "untested" or "not measured": nothing was judged


# -- the studies ---------------------------------------------------------------------------------------

def structure_scores(claims: Iterable[structure_findings.ClaimVerdict]) -> list[Score]:
    out = []
    for v in claims:
        c, d = v.claim, v.delta
        if c.level and d.n:  # "measure > level": the measure itself is what a reader compares with the paper
            measured = f"{d.mean + c.level:.3f}" + (f" ± {d.std:.3f}" if d.n > 1 else "")
        else:
            measured = _pm(d, 3)
        out.append(Score("structure", c.measure, plain(c.what), c.paper, measured, d, _outcome(v.verdict, d.n),
                         v.word, v.sentence))
    return out


def boundary_scores(verdicts: Iterable[boundary_findings.ClaimVerdict]) -> list[Score]:
    out = []
    for v in verdicts:
        c, d = v.claim, v.delta
        measured = _pm(d, 3) + (f" over {v.over}" if v.over and d.n else "")
        # The caveat is said once beside the lines (Score.note), not again at the end of each detail.
        detail = v.sentence.removesuffix(f" {v.note}") if v.note else v.sentence
        out.append(Score("boundary", c.key, plain(c.what), c.paper, measured, d, _outcome(v.verdict, d.n), v.word,
                         detail, note=v.note, sanity=c.sanity))
    return out


def depth_scores(verdicts: Iterable[depth_findings.ClaimVerdict]) -> list[Score]:
    out = []
    for v in verdicts:
        c, d = v.claim, v.delta
        measured = _pm(d, 4, c.unit) + (f" {v.over}" if v.over and d.n else "")
        # Not judged for want of trained deep models counts as not judged; a probe with no room, as
        # nothing measured.  Either way the reason is the note.
        outcome = "not_judged" if v.verdict == "not_trained" else _outcome(v.verdict, d.n)
        out.append(Score("depth", c.key, plain(c.what), c.paper, measured, d, outcome, v.word,
                         v.sentence, note=v.note, sanity=c.sanity))
    return out


def headline_score(headline: content_findings.HeadlineVerdict) -> Score:
    d = headline.delta
    return Score("content", "spen_below_gpt", plain(content_findings.HEADLINE_WHAT), content_findings.HEADLINE_PAPER,
                 (f"perplexity ÷ GPT {content_findings.ratio_text(headline.ratio)} ({_pm(d, 3, 'nats/token')})"
                  if d.n else "not measured"), d, _outcome(headline.verdict, d.n), headline.word, headline.sentence)


def ablation_score(ablation: content_findings.AblationVerdict) -> Score:
    claim = [c for c in ablation.comparisons if c.role == "claim"]
    # The ablation's claim is "no difference": its Δ on the board is the comparison farthest from 0
    # relative to its threshold, the one that decides the verdict.
    widest = max(claim, key=lambda c: abs(c.delta.mean) / c.threshold if c.threshold > 0 else math.inf,
                 default=None)
    d = widest.delta if widest is not None else Spread(math.nan, math.nan, 0)
    return Score(
        "content", "predictor_irrelevant",
        "Swapping SPEN's predictor for attention on the trace state changes nothing",
        "perplexity unchanged across predictors",
        (f"largest {_pm(d, 4, 'nats/token')} ({widest.variant} − SPEN linear)" if widest is not None and d.n
         else "not measured"),
        d, _outcome(ablation.verdict, d.n), ablation.word, ablation.sentence)


def gap_scores(gaps: Iterable[content_findings.GapVerdict]) -> list[Score]:
    return [Score("content", v.claim.key, plain(v.claim.what), GAP_PAPER, _pm(v.delta, 4, "nats/token"), v.delta,
                  _outcome(v.verdict, v.delta.n), v.word, v.sentence) for v in gaps]


def content_scores(headline: content_findings.HeadlineVerdict, ablation: content_findings.AblationVerdict,
                   gaps: Iterable[content_findings.GapVerdict]) -> list[Score]:
    """The content study's claims in the order its page reads them: SPEN ÷ GPT, the ablation, the gap."""
    return [headline_score(headline), ablation_score(ablation), *gap_scores(gaps)]


# Where the gap lives is not measured in the paper: its argument predicts it, as zoology found it for
# attention-free models (82 % of the gap on recall tokens).
GAP_PAPER = "not measured there; its argument predicts it"


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
