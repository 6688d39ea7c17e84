"""The depth study's verdicts: the paper's claims and the probes' sanity check, judged on hand-made rows with
known answers by the shared rule (paired by seed, strictly beyond 2 × std, 3 seeds or more); each claim can
come out reproduced, not reproduced or inconclusive, and rows that lack a rule or a depth are not measured."""
import doctest
import math
import statistics
import subprocess
import sys

import pandas as pd
import pytest

from ema_core.studies.depth import findings as df_module
from ema_core.depth import RULE_LABELS, RULES
from ema_core.studies.depth.findings import (CLAIMS, PREDICTED_ORDER, PROBE_CEILING, REMIX_SHARE, SANITY_CHECKS, VERDICT_RULE,
                                     by_budget, claim_verdicts, claims_and_checks, depth_statement, grid,
                                     measured_order, trained_deep)
from ema_core.verdicts import RULE_AS_TEST, VERDICT_MIN_SEEDS

SEEDS = (1, 2, 3)
DEPTHS = (4, 8, 16)
CHANCE = 0.25
# Per-seed Δ that the rule reads each way: all above 0 well beyond their spread, all below, and across 0.
DELTAS = {"reproduced": (0.05, 0.06, 0.07), "not_reproduced": (-0.05, -0.06, -0.07),
          "inconclusive": (0.05, -0.04, 0.01)}


def row(rule, depth, seed, val_loss=5.0, probe_early=0.5, probe_token_init=0.6, **kw):
    return {"rule": rule, "depth": depth, "seed": seed, "d": 64, "params": 1000, "lr": 3e-3, "tokens": 4096,
            "train_loss": val_loss + 0.1, "val_loss": val_loss, "val_bpb": val_loss / 0.7, "probe_token": 0.5,
            "probe_token_chance": CHANCE, "probe_early": probe_early, "probe_token_init": probe_token_init,
            "probe_early_init": 0.7, "probe_early_resid": 0.5, "probe_early_resid_init": 0.6, "probe_prev": 0.4,
            "probe_prev_init": 0.1, "probe_prev_chance": 0.05, "seconds": 1.0, **kw}


# Every model 0.02 nats/token better per block of depth (so the deep models have trained past the
# shallow ones, and "the gap grows" is judged); pairing within a depth cancels it.
SLOPE = 0.02


def flat(seeds=SEEDS, depths=DEPTHS, rules=RULES, tweak=None):
    """Every rule at every depth and seed, equal within a (depth, seed) (each seed offset by 0.1 nats, each
    block by −SLOPE, which pairing cancels); ``tweak(r, i)`` changes row ``r`` of the i-th seed in place."""
    rows = []
    for i, s in enumerate(seeds):
        for L in depths:
            for rule in rules:
                r = row(rule, L, s, val_loss=5.0 + 0.1 * i - SLOPE * L)
                if tweak:
                    tweak(r, i)
                rows.append(r)
    return rows


def remix_of(rows, tweak=None):
    """``depth_remix`` rows for every (depth, seed) holding a fixed sum: static and dynamic fitted on it,
    each remixed model as good as the sum it was fitted on (it recovered nothing); ``tweak(m, i)`` changes
    the remix row of the i-th seed (in SEEDS order) in place."""
    out = []
    for r in rows:
        if r["rule"] == "sum":
            for rule in ("static", "dynamic"):
                m = {"rule": rule, "depth": r["depth"], "seed": r["seed"], "steps": 300, "lr": 3e-3,
                     "val_loss": r["val_loss"], "base_loss": r["val_loss"], "tokens": r["tokens"]}
                if tweak:
                    tweak(m, SEEDS.index(r["seed"]) if r["seed"] in SEEDS else 0)
                out.append(m)
    return out


def paper_like(seeds=SEEDS, depths=DEPTHS):
    """The fixed sum worse than the rest the deeper it is, static weights half as much, selection not at
    all; the sum's last stream loses block 1's own write and the previous token with depth; the frozen
    sum remixed recovers a tenth of the joint gain; a small per-seed wobble (known numbers)."""
    def tweak(r, i):
        L, rule = r["depth"], r["rule"]
        r["val_loss"] += {"sum": 0.01 * L + 0.001 * i, "static": 0.005 * L, "dynamic": 0.0, "select": 0.0}[rule]
        r["probe_early_resid"] = 0.9 - 0.02 * L - 0.001 * i * L / 4 if rule == "sum" else 0.8
        r["probe_prev"] = 0.5 - 0.01 * L - 0.0005 * i * L / 4 if rule == "sum" else 0.5
        r["probe_token_init"] = 0.7 + 0.01 * i
        r["probe_early"] = 0.6 + 0.01 * i
    return flat(seeds, depths, tweak=tweak)


def paper_like_remix(rows):
    """A tenth of each rule's joint gain over the sum, recovered by the remix (at every depth and seed)."""
    joint = {(r["rule"], r["depth"], r["seed"]): r["val_loss"] for r in rows}

    def tweak(m, i):
        gain = m["base_loss"] - joint[m["rule"], m["depth"], m["seed"]]
        m["val_loss"] = m["base_loss"] - 0.1 * gain
    return remix_of(rows, tweak)


def judged(rows, remix=None):
    """The verdicts of ``rows`` with their remix rows (by default, those that recovered nothing)."""
    return claim_verdicts(rows, remix_of(rows) if remix is None else remix)


def by_key(verdicts):
    return {v.claim.key: v for v in verdicts}


# How each claim's per-seed Δ is planted: row r of the i-th seed gets δ where the claim reads it.
def _plant_static_beats_sum(r, i, d):
    if r["rule"] == "sum" and r["depth"] == DEPTHS[-1]:
        r["val_loss"] += d


def _plant_dynamic_beats_static(r, i, d):
    if r["rule"] == "dynamic" and r["depth"] == DEPTHS[-1]:
        r["val_loss"] -= d


def _plant_select_beats_static(r, i, d):
    if r["rule"] == "static" and r["depth"] == DEPTHS[-1]:
        r["val_loss"] += d


def _plant_gap_grows(r, i, d):
    if r["rule"] == "select" and r["depth"] == DEPTHS[-1]:  # gap(deepest) = δ, gap(shallowest) = 0
        r["val_loss"] -= d


def _plant_early_lost(r, i, d):
    if r["rule"] == "sum" and r["depth"] == DEPTHS[0]:
        r["probe_early_resid"] += d


def _plant_prev_lost(r, i, d):
    if r["rule"] == "sum" and r["depth"] == DEPTHS[0]:
        r["probe_prev"] += d


def _plant_probe_reads_tokens(r, i, d):
    r["probe_token_init"] = CHANCE + d


def _plant_early_readable(r, i, d):
    r["probe_early"] = d


def _plant_remix(rule):
    def plant(m, i, d):  # the remixed sum worse by δ: it recovered −δ, so Δ = ½ · 0 − (−δ) = δ
        if m["rule"] == rule and m["depth"] == DEPTHS[-1]:
            m["val_loss"] += d
    return plant


# key -> (which rows the plant tweaks: "rows" of depth_results or "remix" rows, the tweak)
PLANT = {"static_beats_sum": ("rows", _plant_static_beats_sum),
         "dynamic_beats_static": ("rows", _plant_dynamic_beats_static),
         "select_beats_static": ("rows", _plant_select_beats_static),
         "gap_grows_with_depth": ("rows", _plant_gap_grows), "sum_loses_early_block": ("rows", _plant_early_lost),
         "sum_loses_prev_token": ("rows", _plant_prev_lost),
         "remix_short_of_static": ("remix", _plant_remix("static")),
         "remix_short_of_dynamic": ("remix", _plant_remix("dynamic")),
         "probe_reads_tokens": ("rows", _plant_probe_reads_tokens),
         "early_block_readable": ("rows", _plant_early_readable)}


def planted(key, deltas, **kw):
    """(rows, remix rows) with the per-seed Δ ``deltas`` planted where ``key`` reads it."""
    where, plant = PLANT[key]
    if where == "rows":
        rows = flat(tweak=lambda r, i: plant(r, i, deltas[i]), **kw)
        return rows, remix_of(rows)
    rows = flat(**kw)
    return rows, remix_of(rows, lambda m, i: plant(m, i, deltas[i]))


def test_doctests_and_the_declared_names():
    assert doctest.testmod(df_module).failed == 0
    assert RULES == ("sum", "static", "dynamic", "select")
    # The paper orders sum < static < input-dependent, and not its two input-dependent forms.
    assert PREDICTED_ORDER == (("sum",), ("static",), ("dynamic", "select"))
    assert [c.key for c in CLAIMS] == ["static_beats_sum", "dynamic_beats_static", "select_beats_static",
                                       "gap_grows_with_depth", "sum_loses_early_block", "sum_loses_prev_token",
                                       "remix_short_of_static", "remix_short_of_dynamic"]
    assert [c.key for c in SANITY_CHECKS] == ["probe_reads_tokens", "early_block_readable"]
    assert all(c.sanity for c in SANITY_CHECKS)
    assert not any(c.sanity for c in CLAIMS) and set(PLANT) == {c.key for c in (*CLAIMS, *SANITY_CHECKS)}
    assert VERDICT_RULE.endswith(RULE_AS_TEST)


def test_the_module_loads_neither_torch_nor_pandas():
    code = ("import sys, ema_core.studies.depth.findings; "
            "print(sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("outcome", list(DELTAS))
@pytest.mark.parametrize("key", list(PLANT))
def test_every_claim_can_come_out_each_way(key, outcome):
    deltas = DELTAS[outcome]
    v = by_key(claim_verdicts(*planted(key, deltas)))[key]
    assert v.verdict == outcome and v.delta.n == 3
    assert v.delta.mean == pytest.approx(statistics.mean(deltas))
    assert v.delta.std == pytest.approx(statistics.stdev(deltas))
    words = {"reproduced": "holds", "not_reproduced": "fails"} if v.claim.sanity else {}
    assert v.word == words.get(outcome, outcome.replace("_", " "))
    assert v.word in v.sentence and "paired t" in v.sentence
    # The plain sentence says where, the numbers, Δ and what the rule made of it.
    assert f"Δ = {statistics.mean(deltas):+.4f} ± {statistics.stdev(deltas):.4f}" in v.result
    assert ("within the seeds' spread" if outcome == "inconclusive" else "beyond the seeds' spread") in v.result
    assert v.paper == v.claim.paper and v.numbers


def test_the_other_claims_stay_where_they_were():
    """A Δ planted for one claim moves no claim that reads other cells (paired Δ cancels each seed's offset)."""
    verdicts = by_key(judged(flat(tweak=lambda r, i: _plant_early_lost(r, i, 0.05 + 0.01 * i))))
    for key in ("static_beats_sum", "dynamic_beats_static", "select_beats_static", "gap_grows_with_depth",
                "sum_loses_prev_token", "remix_short_of_static", "remix_short_of_dynamic"):
        v = verdicts[key]
        assert v.delta.n == 3 and v.delta.mean == pytest.approx(0.0, abs=1e-12) and v.verdict == "inconclusive"


def test_paper_like_rows_reproduce_every_claim_with_the_numbers_beside_delta():
    rows = paper_like()
    verdicts = by_key(claim_verdicts(rows, paper_like_remix(rows)))
    assert {k: v.verdict for k, v in verdicts.items()} == {k: "reproduced" for k in PLANT}
    s = verdicts["static_beats_sum"]
    assert s.over == "at 16 blocks"
    assert s.delta.mean == pytest.approx(0.16 - 0.08 + 0.001)  # the wobble 0.001 i averages to 0.001
    (sum_label, sum_loss), (static_label, static_loss) = s.numbers
    assert (sum_label, static_label) == (RULE_LABELS["sum"], RULE_LABELS["static"])
    base = 5.1 - SLOPE * 16
    assert sum_loss.mean == pytest.approx(base + 0.16 + 0.001) and static_loss.mean == pytest.approx(base + 0.08)
    gap = verdicts["gap_grows_with_depth"]
    assert gap.over == "from 4 blocks to 16 blocks" and gap.delta.mean == pytest.approx(0.16 - 0.04)
    assert [label for label, _ in gap.numbers] == ["gap at 4 blocks", "gap at 16 blocks"]
    early = verdicts["sum_loses_early_block"]
    assert early.delta.mean == pytest.approx((0.9 - 0.08) - (0.9 - 0.32) + 0.001 * 1 * (16 - 4) / 4)
    # The same probe at initialisation is shown beside the trained numbers, never part of Δ.
    assert [label for label, _ in early.numbers][2:] == ["R² at initialisation, 4 blocks",
                                                        "R² at initialisation, 16 blocks"]
    prev = verdicts["sum_loses_prev_token"]
    assert prev.delta.mean == pytest.approx(0.12 + 0.0005 * 1 * 12 / 4)
    # The remix recovers a tenth of the joint gain: Δ = (½ − 0.1) × the gain, at the deepest depth.
    remix = verdicts["remix_short_of_static"]
    assert REMIX_SHARE == 0.5 and remix.over == "at 16 blocks"
    assert remix.delta.mean == pytest.approx(0.4 * (0.16 - 0.08 + 0.001))
    assert [label for label, _ in remix.numbers] == ["jointly trained gain", "remix gain"]
    assert remix.numbers[1][1].mean == pytest.approx(0.1 * (0.16 - 0.08 + 0.001))
    claims, checks = claims_and_checks(verdicts.values())
    assert [v.claim.key for v in claims] == [c.key for c in CLAIMS]
    assert [v.claim.key for v in checks] == ["probe_reads_tokens", "early_block_readable"]
    assert {c.word for c in checks} == {"holds"}


def test_a_remix_that_recovers_the_whole_gap_refutes_the_irreversible_dilution():
    rows = paper_like()
    joint = {(r["rule"], r["depth"], r["seed"]): r["val_loss"] for r in rows}
    whole = remix_of(rows, lambda m, i: m.update(val_loss=joint[m["rule"], m["depth"], m["seed"]]))
    v = by_key(claim_verdicts(rows, whole))["remix_short_of_static"]
    assert v.verdict == "not_reproduced" and v.delta.mean == pytest.approx(-0.5 * (0.16 - 0.08 + 0.001))


def test_the_deepest_and_shallowest_depths_are_those_every_compared_rule_holds():
    rows = paper_like()
    # The fixed sum also at 32 blocks, worse than ever: static weights were not run there, so the claims
    # comparing the two stay at 16; the fixed sum's own probe reaches 32.
    rows += [row("sum", 32, s, val_loss=9.0, probe_early=0.0) for s in SEEDS]
    v = by_key(claim_verdicts(rows))
    assert v["static_beats_sum"].over == "at 16 blocks"
    assert v["gap_grows_with_depth"].over == "from 4 blocks to 16 blocks"
    assert v["sum_loses_early_block"].over == "from 4 blocks to 32 blocks"


def test_fewer_than_three_seeds_are_not_judged():
    for seeds in ((1, 2), (1,)):
        n = len(seeds)
        rows = paper_like(seeds)
        for v in claim_verdicts(rows, paper_like_remix(rows)):
            assert v.verdict == "not_judged" and v.delta.n == n
            assert v.word == f"not judged: {n} seed{'' if n == 1 else 's'}" and v.word in v.sentence
            assert f"fewer than the {VERDICT_MIN_SEEDS} the rule needs" in v.result


def test_a_missing_rule_or_depth_is_not_measured_never_an_error():
    no_select = by_key(judged(flat(rules=("sum", "static"))))
    assert no_select["static_beats_sum"].delta.n == 3
    for key in ("dynamic_beats_static", "select_beats_static", "gap_grows_with_depth", "remix_short_of_dynamic"):
        v = no_select[key]
        assert v.verdict == "not_measured" and v.word == "not measured" and not v.measured and v.numbers == ()
        assert v.sentence.endswith(f"not measured by these runs (it needs {v.claim.needs}).")
        assert v.result == f"Not measured: these runs hold no {v.claim.needs}."
    one_depth = by_key(claim_verdicts(flat(depths=(8,))))
    assert one_depth["static_beats_sum"].over == "at 8 blocks" and one_depth["static_beats_sum"].delta.n == 3
    assert one_depth["gap_grows_with_depth"].word == one_depth["sum_loses_early_block"].word == "not measured"
    nothing = claim_verdicts([])
    assert [v.verdict for v in nothing] == ["not_measured"] * len(PLANT)
    assert measured_order([], 16) == []


def test_missing_and_non_finite_values_are_left_out_cell_by_cell():
    def hole(r, i):
        if i == 2 and r["rule"] == "static" and r["depth"] == 16:
            r["val_loss"] = float("nan")  # this seed's static cell cannot be compared at 16 blocks
        if i == 1 and r["rule"] == "sum" and r["depth"] == 4:
            r["probe_early_resid"] = None
    rows = flat(tweak=hole)
    rows.append({"rule": "sum", "depth": None, "seed": 1, "val_loss": 1.0})   # no depth: left out whole
    rows.append({"rule": None, "depth": 16, "seed": 1, "val_loss": 1.0})      # no rule
    rows.append({"rule": "sum", "depth": 16, "seed": "x", "val_loss": 1.0})   # no seed
    v = by_key(claim_verdicts(rows))
    assert v["static_beats_sum"].delta.n == v["select_beats_static"].delta.n == v["dynamic_beats_static"].delta.n == 2
    assert v["static_beats_sum"].verdict == "not_judged"
    assert v["gap_grows_with_depth"].delta.n == 3  # reads neither hole
    assert v["sum_loses_early_block"].delta.n == 2
    assert v["probe_reads_tokens"].delta.n == 3
    # The second seed's (2) cell lost its probe, and keeps its other numbers.
    assert grid(rows).value(2, "sum", 4, "probe_early_resid") is None
    assert grid(rows).value(2, "sum", 4, "val_loss") == pytest.approx(5.1 - SLOPE * 4)


def test_a_cell_two_runs_hold_is_averaged_and_a_dataframe_reads_as_its_rows():
    rows = paper_like()
    twice = rows + [{**r, "val_loss": r["val_loss"] + 0.2} for r in rows if r["seed"] == 1]
    v = by_key(claim_verdicts(twice))
    assert grid(twice).value(1, "sum", 16, "val_loss") == pytest.approx(5.0 + 0.16 + 0.1 - SLOPE * 16)
    once = by_key(claim_verdicts(rows))["static_beats_sum"]
    assert v["static_beats_sum"].delta.mean == pytest.approx(once.delta.mean)
    frame = pd.DataFrame(rows)
    assert [(x.verdict, x.delta) for x in claim_verdicts(frame)] == [(x.verdict, x.delta) for x in claim_verdicts(rows)]


def test_the_measured_order_is_worst_first_as_the_prediction():
    order = measured_order(paper_like(), 16)
    assert [r for r, _ in order] == [r for tier in PREDICTED_ORDER for r in tier]
    assert order[0][1] == pytest.approx(5.1 + 0.16 + 0.001 - SLOPE * 16)  # mean over seeds of the sum's loss
    # Selection worst at 4 blocks here: the order follows the numbers, not the prediction.
    rows = flat(depths=(4,), tweak=lambda r, i: r.update(val_loss=r["val_loss"] + (0.5 if r["rule"] == "select"
                                                                                        else 0.0)))
    rows += [row("mine", 4, s, val_loss=0.0) for s in SEEDS]
    assert [r for r, _ in measured_order(rows, 4)] == ["select", "sum", "static", "dynamic", "mine"]  # ties in RULES order
    assert measured_order(rows, 16) == []


def test_the_statement_says_whether_fixed_accumulation_loses_more_with_depth_and_by_how_much():
    text = depth_statement(paper_like())
    gap4 = statistics.mean(0.04 + 0.001 * i for i in range(3))
    gap16 = statistics.mean(0.16 + 0.001 * i for i in range(3))
    assert text.startswith("At this scale (d = 64, 4,096 training tokens per model)")
    assert f"{gap4:+.4f} ± 0.0010 nats/token at 4 blocks (perplexity × {math.exp(gap4):.3f})" in text
    assert f"{gap16:+.4f} ± 0.0010 nats/token at 16 blocks (perplexity × {math.exp(gap16):.3f})" in text
    assert "fixed accumulation loses more with depth here: the gap grows by +0.1200 ± 0.0000" in text
    shrinks = depth_statement(flat(tweak=lambda r, i: _plant_gap_grows(r, i, DELTAS["not_reproduced"][i])))
    assert "fixed accumulation loses less with depth here" in shrinks
    noisy = depth_statement(flat(tweak=lambda r, i: _plant_gap_grows(r, i, DELTAS["inconclusive"][i])))
    assert "cannot be told here" in noisy and "within the seeds' spread (3 seeds)" in noisy
    assert "not judged: 2 seeds, the rule needs 3" in depth_statement(paper_like(seeds=(1, 2)))
    assert "these runs hold one depth" in depth_statement(flat(depths=(8,)))
    assert "not measured" in depth_statement(flat(rules=("sum", "static"))) and depth_statement([])


def test_a_probe_at_its_ceiling_at_initialisation_is_not_measurable():
    """A probe that reads ≥ 0.99 before any training has no room to show a loss: its claim says "not
    measurable" with the reason, whatever Δ is; below the ceiling it is judged as usual."""
    def high(r, i):
        r["probe_prev"] += 0.05 if (r["rule"], r["depth"]) == ("sum", 4) else 0.0
        r["probe_early_resid"] += (0.05 + 0.01 * i) if (r["rule"], r["depth"]) == ("sum", 4) else 0.0
        if r["rule"] == "sum" and r["depth"] == 16:
            r["probe_early_resid_init"] = PROBE_CEILING + 0.001
    v = by_key(judged(flat(tweak=high)))
    early = v["sum_loses_early_block"]
    assert early.verdict == "not_measurable" and early.word == "not measurable"
    assert "0.9910 at 16 blocks already at initialisation" in early.note and early.note in early.sentence
    assert v["sum_loses_prev_token"].verdict == "reproduced" and v["sum_loses_prev_token"].note == ""


def test_the_gap_is_judged_only_where_the_deep_fixed_sum_has_trained_past_the_shallow_one():
    """Every model worse the deeper it is (too few tokens to train a deep stack): the gap's growth is
    "not judged: deep models not yet trained", with the fixed sum's two losses, whatever Δ says."""
    def harder(r, i):
        r["val_loss"] += 2 * SLOPE * r["depth"]  # now +0.02 nats a block: deeper is worse
        _plant_gap_grows(r, i, DELTAS["reproduced"][i])
    rows = flat(tweak=harder)
    v = by_key(judged(rows))["gap_grows_with_depth"]
    assert v.verdict == "not_trained" and v.word == "not judged: deep models not yet trained"
    assert v.delta.mean == pytest.approx(0.06)
    assert "16 blocks 5.4200 against 4 blocks 5.1800" in v.note and v.note in v.result
    assert "not judged here: the fixed sum's deepest model does not beat" in depth_statement(rows)
    info = trained_deep(rows)
    assert (info["shallow"], info["deep"], info["beats"], info["seeds"]) == (4, 16, False, 3)
    assert trained_deep(flat())["beats"] is True and trained_deep(flat(depths=(8,))) is None


def test_rows_of_several_budgets_are_judged_apart():
    quick = flat()
    long = [{**r, "tokens": 8 * r["tokens"]} for r in flat(tweak=lambda r, i: _plant_static_beats_sum(r, i, 0.1))]
    with pytest.raises(ValueError, match="2 budgets .*4,096, 32,768.*judge each apart"):
        claim_verdicts(quick + long)
    parts = by_budget(quick + long, remix_of(quick) + remix_of(long))
    assert list(parts) == [4096, 32768]
    assert [len(rows) for rows, _ in parts.values()] == [len(quick), len(long)]
    assert all(len(remix) == 2 * len(DEPTHS) * len(SEEDS) for _, remix in parts.values())
    verdicts = {t: by_key(claim_verdicts(*part)) for t, part in parts.items()}
    assert verdicts[4096]["static_beats_sum"].verdict == "inconclusive"
    assert verdicts[32768]["static_beats_sum"].verdict == "reproduced"


def test_a_rule_that_loses_and_fits_its_training_text_worse_is_said_to_train_worse():
    """Δ < 0 with the losing rule's training loss higher too: the verdict stands and carries the caveat that
    the deficit is one of training; with its training loss lower (it fits, then generalises worse), none."""
    def worse(by_train):
        def tweak(r, i):
            if r["rule"] == "dynamic" and r["depth"] == DEPTHS[-1]:
                r["val_loss"] += DELTAS["reproduced"][i]
                r["train_loss"] += by_train
        return by_key(judged(flat(tweak=tweak)))["dynamic_beats_static"]

    v = worse(0.2)
    assert v.verdict == "not_reproduced"
    assert v.note.startswith(f"At 16 blocks {RULE_LABELS['dynamic']} also ends with a higher training loss than "
                             f"{RULE_LABELS['static']}") and "one of training" in v.note
    assert worse(-0.2).note == "" and worse(-0.2).verdict == "not_reproduced"
    assert by_key(judged(paper_like()))["dynamic_beats_static"].note == ""  # Δ > 0: nothing to excuse
