"""The structure study's claims and verdicts: the paper's numbers, its claims judged, and what the
numbers show stated, by one rule.

Pure arithmetic on per-seed values (no torch, no pandas, no store): the store calls it on the runs
a page shows, ``bench/structure.py`` on the summaries it collects, and both get the same verdicts
and sentences; the page only draws them.  The study's names (which feature set is "SPCN", the
n-gram window, the controls, the splits, the structure-dependent roles) and the paper's numbers
(:data:`PAPER`) are declared here, where the experiment, the store and the page read them without
loading torch.

Every comparison is a difference formed within a run (one seed: the same sentences, the same
SPCN), then averaged across seeds; its spread is the sample std of that difference across seeds
(``Spread``).  ``VERDICT_RULE`` says, in the words the page shows, what the spread decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from ema_core.grammar import ROLES
from ema_core.scoreboard import Score, delta_text, outcome, plain
from ema_core.verdicts import (RULE_AS_TEST, VERDICT_K, VERDICT_MIN_SEEDS, VERDICT_WORDS, Spread, judge, not_judged,
                               paired, spread, verdict_word)

SPLITS_SCORED = ("test", "novel", "deep")
# The splits settings are chosen on: dev (cut from the training sentences) and novel_dev (the
# tuning pool's new words).  Their rows are recorded too, as the numbers the choices were made on.
SPLITS_TUNING = ("dev", "novel_dev")
# The SPCN feature set that stands for "SPCN" where the paper compares one number with the BiGRU:
# the traces, the paper's headline representation (0.960 within the grammar).
SPCN_HEADLINE = "traces"
# The n-gram window baseline: one-hot identities of the last w words plus the position in the
# sentence, no EMA and no SPCN.  "ngram" (w = 3) is the baseline the summary and the page compare
# with; ngram1 and ngram2 show how much each further word of context adds.
NGRAM_SETS: dict[str, int] = {"ngram1": 1, "ngram2": 2, "ngram": 3}
NGRAM_BASELINE = "ngram"
# The control tasks (Hewitt & Liang 2019): random labels drawn from the role distribution, keyed
# on the word type alone, on word × the previous word's category, on word × position.  Each is its
# own random stream (control_labels' ``stream``); the word-keyed one keeps the stream it always had.
CONTROLS: dict[str, int] = {"control": 0xC7A1, "control_prev": 0xC7A2, "control_pos": 0xC7A3}
# The roles decided by position rather than by the word (the same determiner is agent_det or
# patient_det): the structure-dependent roles the paper's claims are about.
STRUCTURAL_ROLES = tuple(r.name for r in ROLES if not r.lexical)


# -- the rule ------------------------------------------------------------------------------------------

VERDICT_RULE = (
    "**The rule.** Every comparison is a difference Δ formed within each run (the same seed, the same "
    "sentences), then averaged over the seeds. Δ is *beyond the seeds' spread* when |mean Δ| > "
    f"{VERDICT_K:g} × the sample standard deviation of Δ across the seeds; a claim is judged on at least "
    f"{VERDICT_MIN_SEEDS} seeds. A claim that one number is above another (or above the paper's level) is "
    "**reproduced** when Δ > 0 beyond the spread; **not reproduced** when Δ < 0 beyond the spread; "
    f"**inconclusive** when Δ is within the spread (Δ = 0 on every seed included); **not judged** below "
    f"{VERDICT_MIN_SEEDS} seeds.\n\n" + RULE_AS_TEST
)


@dataclass(frozen=True)
class StructureClaim:
    measure: str      # the per-seed measure (``claim_measures``; the store's structure_headlines)
    what: str         # the claim in words
    paper: str        # the paper's numbers
    source: str
    level: float = 0.0  # the claim is "measure > level"


# The paper's claims that its own numbers make directional (PAPER.md §2): each is "measure > level".
CLAIMS: tuple[StructureClaim, ...] = (
    StructureClaim("spcn_minus_instantaneous", "Traces carry more of the roles than instantaneous activations "
          "(within grammar: traces − instantaneous > 0)", "0.960 vs 0.795", "[S]"),
    StructureClaim("spcn_over_bigru", "Label-free SPCN reaches 96 % of the supervised BiGRU within the grammar "
          "(SPCN / BiGRU − 0.96 > 0)", "≈ 0.96", "[A] [S]", level=0.96),
    StructureClaim("structural_gap", "SPCN beats the BiGRU on structure-dependent roles within the grammar "
          "(SPCN − BiGRU > 0)", "positive", "[S]"),
    StructureClaim("novel_structural_gap", "SPCN beats the BiGRU on structure-dependent roles of novel words "
          "(SPCN − BiGRU > 0)", "positive", "[S]"),
    StructureClaim("novel_agent_det_gap", "SPCN keeps agent determiners among novel words better than the BiGRU "
          "(SPCN − BiGRU > 0)", "1.000 vs 0.759", "[S]"),
)


@dataclass(frozen=True)
class StructureClaimVerdict:
    claim: StructureClaim
    delta: Spread   # of measure − level
    verdict: str    # a key of VERDICT_WORDS

    @property
    def word(self) -> str:
        return verdict_word(self.verdict, self.delta.n, VERDICT_WORDS)

    @property
    def sentence(self) -> str:
        d = self.delta
        if d.n == 0:
            return f"{self.claim.what}: not measured by these runs — {self.word}."
        if d.n < VERDICT_MIN_SEEDS:
            return f"{self.claim.what}: Δ = {d.mean:+.4f} — {self.word}."
        return (f"{self.claim.what}: Δ = {d.mean:+.4f}, std {d.std:.4f} across {d.n} seeds (threshold "
                f"{VERDICT_K:g} × std = {VERDICT_K * d.std:.4f}) — {self.word}.")


@dataclass(frozen=True)
class PaperNumber:
    measure: str  # of the store's structure_headlines (ours, per seed, then across seeds)
    what: str
    paper: str    # the paper's number ("—": it has none)
    source: str   # where the paper says it ([A] abstract, [S] seed summaries, [U] unverified extraction; "ours")
    how: str      # how ours is measured


_N = len(STRUCTURAL_ROLES)
# The paper's numbers beside ours, in the order the page's table lists them.
PAPER: tuple[PaperNumber, ...] = (
    PaperNumber("within_instantaneous", "Within grammar: probe on instantaneous activations", "0.795", "[S]",
                "overall token accuracy, test split"),
    PaperNumber("within_traces", "Within grammar: probe on traces", "0.960", "[S]; [U] Within A 96",
                "overall token accuracy, test split"),
    PaperNumber("spcn_minus_instantaneous", "Within grammar: traces − instantaneous", "0.165 (0.960 − 0.795)", "[S]",
                "per seed: traces − instantaneous overall accuracy, test split"),
    PaperNumber("within_ngram", "Within grammar: n-gram window (no EMA)", "—", "ours",
                "the last 3 word identities and the position, one-hot, the same probe; test split"),
    PaperNumber("spcn_over_bigru", "SPCN / BiGRU, overall", "≈ 0.96", "[A] [S]",
                "per seed: SPCN (traces) ÷ BiGRU overall accuracy, test split"),
    PaperNumber("structural_spcn", "Structure-dependent roles: SPCN", "—", "",
                f"mean over the {_N} structure-dependent roles, test split"),
    PaperNumber("structural_bigru", "Structure-dependent roles: BiGRU", "—", "",
                f"mean over the {_N} structure-dependent roles, test split"),
    PaperNumber("structural_gap", "Structure-dependent roles: SPCN − BiGRU", "positive", "[S]",
                "per seed, over the roles both scored, test split (the paper names no split)"),
    PaperNumber("novel_structural_spcn", "Novel vocabulary, structure-dependent roles: SPCN", "—", "",
                f"mean over the {_N} structure-dependent roles, novel split"),
    PaperNumber("novel_structural_bigru", "Novel vocabulary, structure-dependent roles: BiGRU", "—", "",
                f"mean over the {_N} structure-dependent roles, novel split"),
    PaperNumber("novel_structural_gap", "Novel vocabulary, structure-dependent roles: SPCN − BiGRU", "positive",
                "[S]", "per seed, over the roles both scored, novel split (the paper names no split)"),
    PaperNumber("novel_agent_det_spcn", "Novel vocabulary, agent determiners: SPCN", "1.000", "[S]",
                "role agent_det, novel split"),
    PaperNumber("novel_agent_det_bigru", "Novel vocabulary, agent determiners: BiGRU", "0.759", "[S]",
                "role agent_det, novel split"),
    PaperNumber("novel_agent_det_gap", "Novel vocabulary, agent determiners: SPCN − BiGRU", "0.241 (1.000 − 0.759)",
                "[S]", "per seed, role agent_det, novel split"),
    PaperNumber("novel_overall_spcn", "Transfer (novel vocabulary): SPCN overall", "0.618", "[U] Transfer B 61.8",
                "overall, novel split (the paper's transfer condition is unknown)"),
    PaperNumber("novel_overall_bigru", "Transfer (novel vocabulary): BiGRU overall", "—", "", "overall, novel split"),
    PaperNumber("novel_overall_ngram", "Transfer (novel vocabulary): n-gram window overall", "—", "ours",
                "overall, novel split (every novel word in one unknown column)"),
    PaperNumber("deep_overall_spcn", "Deep embedding: SPCN overall", "0.84", "[U] Deep-embedded roles 84",
                "overall, deep split (nested clauses)"),
    PaperNumber("deep_overall_bigru", "Deep embedding: BiGRU overall", "—", "", "overall, deep split (nested clauses)"),
    PaperNumber("deep_overall_ngram", "Deep embedding: n-gram window overall", "—", "ours",
                "overall, deep split (positions past the training sentences' carry no weight)"),
)


def paper_beside_ours(measures: Mapping[str, Spread], claims: Iterable["StructureClaimVerdict"]) -> list[dict]:
    """One row per :data:`PAPER` number: the paper's, ours across seeds (``ours_mean``/``ours_std``, NaN
    where these runs lack it), the seeds, and the verdict where the number is one of CLAIMS."""
    verdict_of = {v.claim.measure: v for v in claims}
    rows = []
    for p in PAPER:
        ours = measures.get(p.measure)
        rows.append({"measure": p.what, "paper": p.paper,
                     "ours_mean": ours.mean if ours else math.nan, "ours_std": ours.std if ours else math.nan,
                     "seeds": ours.n if ours else 0,
                     "verdict": verdict_of[p.measure].word if ours and p.measure in verdict_of else "",
                     "source": p.source, "ours measured as": p.how if ours else f"{p.how} — not in these runs"})
    return rows


def claim_measures(summary: Mapping) -> dict[str, float | None]:
    """One run's value of each claim's measure, from its summary (what bench/structure.py judges;
    the store computes the same from the rows, in SQL)."""
    def get(*path):
        v = summary
        for k in path:
            v = v.get(k) if isinstance(v, Mapping) else None
        return v

    def diff(a, b):
        return a - b if a is not None and b is not None else None

    return {
        "spcn_minus_instantaneous": diff(get("within", SPCN_HEADLINE), get("within", "instantaneous")),
        "spcn_over_bigru": get("spcn_over_bigru"),
        "structural_gap": diff(get("structural_roles_within", "spcn"), get("structural_roles_within", "bigru")),
        "novel_structural_gap": diff(get("structural_roles", "spcn"), get("structural_roles", "bigru")),
        "novel_agent_det_gap": diff(get("agent_det_transfer", "spcn"), get("agent_det_transfer", "bigru")),
    }


def claim_verdicts(measures: Mapping[str, Spread]) -> list[StructureClaimVerdict]:
    """Each of CLAIMS judged by VERDICT_RULE from its measure's spread across seeds."""
    out = []
    for c in CLAIMS:
        s = measures.get(c.measure, Spread(math.nan, math.nan, 0)).shifted(c.level)
        out.append(StructureClaimVerdict(c, s, judge(s) if s.n else "inconclusive"))
    return out


# -- what the numbers show: per-seed differences of overall accuracies -------------------------------

# (a, b, split): Δ = overall accuracy of feature set a − of b on split, formed per run.
FINDING_PAIRS: tuple[tuple[str, str, str], ...] = (
    *((SPCN_HEADLINE, f"untrained/{SPCN_HEADLINE}", s) for s in SPLITS_SCORED),
    *((SPCN_HEADLINE, NGRAM_BASELINE, s) for s in SPLITS_SCORED),
    ("bigru", NGRAM_BASELINE, "novel"),
    *((fs, f"{c}/{fs}", "test") for fs in (SPCN_HEADLINE, NGRAM_BASELINE) for c in CONTROLS),
)
SPLIT_WORDS = {"test": "within the grammar", "novel": "on novel words", "deep": "on deep embedding"}
CONTROL_WORDS = {  # control -> (what its labels are keyed on, what it rules out: "This control …")
    "control": ("word-keyed (each word type → a random role)",
                "rules out nothing where the features hold word identity: a probe that tells word types apart "
                "learns any labelling of them by heart"),
    "control_prev": ("keyed on word × the previous word's category",
                     "rules out that the roles are read only because the features tell every (word, previous "
                     "category) pair apart: such features would read any labelling of those pairs, this random "
                     "one included"),
    "control_pos": ("keyed on word × position in the sentence",
                    "rules out that the roles are read only because the features tell every (word, position) pair "
                    "apart: traces reset at each sentence start carry the position"),
}


@dataclass(frozen=True)
class PairStat:
    a: Spread       # the first feature set's overall accuracy across the seeds that have both
    b: Spread
    delta: Spread   # a − b, per run


def pair_stats(runs: Iterable[Iterable[Mapping]], pairs=FINDING_PAIRS) -> dict[tuple[str, str, str], PairStat]:
    """Per-seed differences of overall accuracies: ``runs`` is each run's probe_accuracy rows (one run
    is one seed, keyed here by its place in ``runs``)."""
    acc = [{(r["feature_set"], r["split"]): r["accuracy"] for r in rows if r["role"] == "overall"} for rows in runs]
    out = {}
    for a, b, split in pairs:
        side_a = {i: run.get((a, split)) for i, run in enumerate(acc)}
        side_b = {i: run.get((b, split)) for i, run in enumerate(acc)}
        delta = paired(side_a, side_b)
        if delta.n:
            both = [i for i in side_a if _finite(side_a[i]) and _finite(side_b[i])]  # the seeds Δ was formed on
            out[(a, b, split)] = PairStat(spread(side_a[i] for i in both), spread(side_b[i] for i in both), delta)
    return out


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(float(v))


@dataclass(frozen=True)
class Finding:
    topic: str
    sentence: str
    delta: Spread


def _d(s: Spread) -> str:
    """Δ with its spread and what the rule makes of it, for a sentence."""
    if s.n < VERDICT_MIN_SEEDS:
        return f"Δ = {s.mean:+.3f}, {not_judged(s.n)}"
    where = "beyond" if s.beyond else "within"
    return f"Δ = {s.mean:+.3f} ± {s.std:.3f} over {s.n} seeds, {where} the seeds' spread"


def _compared(d: Spread, more: str, less: str, same: str, unknown: str) -> str:
    """The word for Δ's direction by VERDICT_RULE: beyond the spread and positive/negative, within, or not
    judged (too few seeds)."""
    beyond = d.beyond
    if beyond is None:
        return unknown
    return (more if d.mean > 0 else less) if beyond else same


def findings(stats: Mapping[tuple[str, str, str], PairStat]) -> list[Finding]:
    """What the numbers show, as sentences computed from ``pair_stats``: how much learning adds over
    the untrained code, how far the traces are above the n-gram window, the selectivity under each
    control.  A comparison these runs lack is left out."""
    out: list[Finding] = []
    h, ng = SPCN_HEADLINE, NGRAM_BASELINE
    for split in SPLITS_SCORED:
        p = stats.get((h, f"untrained/{h}", split))
        if p:
            effect = _compared(p.delta, f"adds {abs(p.delta.mean):.3f} to", f"takes {abs(p.delta.mean):.3f} from",
                               "changes nothing beyond the seeds' spread in", "changes")
            out.append(Finding("learning", (
                f"Hebbian learning {effect} the trace probe's accuracy {SPLIT_WORDS[split]}: trained "
                f"{p.a.mean:.3f} vs untrained (W = 0) {p.b.mean:.3f} ({_d(p.delta)})."), p.delta))
    for split in SPLITS_SCORED:
        p = stats.get((h, ng, split))
        if p:
            rel = _compared(p.delta, "above", "below", "level with (within the spread of)", "beside")
            out.append(Finding("n-gram window", (
                f"{SPLIT_WORDS[split].capitalize()}, the trace probe is {rel} the n-gram window (the last 3 word "
                f"identities and the position, no EMA): {p.a.mean:.3f} vs {p.b.mean:.3f} ({_d(p.delta)})."), p.delta))
    p = stats.get(("bigru", ng, "novel"))
    if p:
        rel = _compared(p.delta, "above", "below", "level with (within the spread of)", "beside")
        out.append(Finding("n-gram window", (
            f"On novel words the BiGRU is {rel} the n-gram window: {p.a.mean:.3f} vs {p.b.mean:.3f} "
            f"({_d(p.delta)})."), p.delta))
    for c, (keyed, rules_out) in CONTROL_WORDS.items():
        t, n = stats.get((h, f"{c}/{h}", "test")), stats.get((ng, f"{c}/{ng}", "test"))
        if not t:
            continue
        beside = (f"; the n-gram window's selectivity: {n.delta.mean:+.3f} (control {n.b.mean:.3f})" if n else "")
        out.append(Finding("selectivity", (
            f"Control {keyed}: the trace probe's selectivity = real − control accuracy = "
            f"{t.a.mean:.3f} − {t.b.mean:.3f} ({_d(t.delta)}){beside}. This control {rules_out}."), t.delta))
    return out


@dataclass(frozen=True)
class StructureVerdicts:
    claims: list[StructureClaimVerdict]   # each of the paper's directional claims, judged by VERDICT_RULE
    findings: list[Finding]      # what the numbers show, one sentence each, computed from them
    paper: list[dict]            # the paper's numbers beside ours (paper_beside_ours)
    rule: str = VERDICT_RULE


def structure_verdicts(headlines: Iterable[Mapping], overall: Iterable[Mapping]) -> StructureVerdicts:
    """The paper's claims judged, and the findings stated, from the store's rows for some runs.

    ``headlines``: ``store.structure.structure_headlines``' rows (measure, value_mean, value_std, n:
    each measure per run, then across runs), which the claims read; ``overall``: the runs'
    ``probe_accuracy`` rows of role "overall" (run_id, feature_set, split, accuracy), whose per-run
    differences the findings read.  The same rule ``bench/structure.py`` applies to its summaries.
    """
    def number(v) -> float:
        return float(v) if v is not None and math.isfinite(float(v)) else math.nan

    measures = {r["measure"]: Spread(float(r["value_mean"]), number(r["value_std"]), int(r["n"])) for r in headlines}
    by_run: dict[str, list[Mapping]] = {}
    for r in overall:
        by_run.setdefault(r["run_id"], []).append(r)
    claims = claim_verdicts(measures)
    return StructureVerdicts(claims, findings(pair_stats(by_run[k] for k in sorted(by_run))),
                             paper_beside_ours(measures, claims))

# -- the scoreboard's lines (ema_core.scoreboard.Score): the same verdicts, in the board's one shape --

def scores(claims: Iterable[StructureClaimVerdict]) -> list[Score]:
    out = []
    for v in claims:
        c, d = v.claim, v.delta
        if c.level and d.n:  # "measure > level": the measure itself is what a reader compares with the paper
            measured = f"{d.mean + c.level:.3f}" + (f" ± {d.std:.3f}" if d.n > 1 else "")
        else:
            measured = delta_text(d, 3)
        out.append(Score("structure", c.measure, plain(c.what), c.paper, measured, d, outcome(v.verdict, d.n),
                         v.word, v.sentence))
    return out
