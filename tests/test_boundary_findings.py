"""The boundary study's verdicts: the paper's claims and the harness's sanity checks, judged on hand-made
rows with known answers, by the shared rule (paired by seed, strictly beyond 2 × std, 3 seeds or more)."""
import math
import subprocess
import sys

import pandas as pd
import pytest

from ema_core.studies.boundary import findings as bf
from ema_core.studies.boundary.findings import (CLAIMS, DEFAULT_WINDOW_REACH, PAPER_HIERARCHY, SANITY_CHECKS, TASK_ORDER,
                                        VERDICT_RULE, above_floor, claim_verdicts, claims_and_checks, measured_order,
                                        normalised, reach_of, recall_frontier, window_reach)
from ema_core.verdicts import (RULE_AS_TEST, VERDICT_K, VERDICT_MIN_SEEDS, Spread, judge, not_judged, one_sided_p,
                               spread, t_threshold)

SEEDS = (1, 2, 3)  # the confirming run's seeds: none of them informed a threshold


AGREEMENT = ("agree_structure", "agree_content", "agree_content4")


def row(mixer, task, level, seed, accuracy, chance=0.5, difficulty=None, floor=None, rho=0.0):
    rho = rho if task in AGREEMENT else None
    difficulty = difficulty or (f"pairs={level},T=64" if task == "mqar" else
                                f"k={level},rho={rho:g}" if rho is not None else f"k={level}")
    return {"mixer": mixer, "task": task, "difficulty": difficulty, "level": level, "seq_len": 64, "seed": seed,
            "accuracy": accuracy, "dev_accuracy": accuracy, "chance": chance, "exclusion_floor": floor,
            "lr": 0.01, "train_loss": 1.0, "state_floats": 64, "params": 1000, "d": 64, "redundancy": rho}


def paper_like(seeds=SEEDS):
    """A map shaped as the paper argues, with a small per-seed wobble (known numbers).  The default
    body's window reaches 10 tokens back, so k = 16 and 32 are "at a distance".  The agreement tasks at
    ρ = 0 (structure and the four-way map alike, as a relabelling has them) and at ρ = 1 (structure's
    floor high, content's at chance)."""
    rows = []
    for i, s in enumerate(seeds):
        w = 0.01 * i
        for task in ("agree_structure", "agree_content4", "lag_identity"):
            for k in (1, 8, 16, 32):
                rows.append(row("softmax", task, k, s, 0.99 - w / 2, chance=0.25, floor=0.25))
        rows.append(row("softmax", "mqar", 4, s, 0.98 - w / 2, chance=0.01, floor=0.2))
        for m in ("ema", "ema3"):
            for k in (1, 8, 16, 32):
                # ρ = 0: structure (0.4 + w − 0.25) / 0.75 = 0.2 + 4w/3 above its floor (chance), content4
                # within 0.01 of it (the label-count control); ρ = 1: structure above chance (0.95 − 0.25)
                # / 0.75 ≈ 0.933 (its floor 0.9), content4 0.1 + w above chance at a distance
                far = k > 8
                rows.append(row(m, "agree_structure", k, s, (0.4 if far else 0.9) + w, chance=0.25, floor=0.25))
                rows.append(row(m, "agree_content4", k, s, (0.4 if far else 0.9) + w / 2, chance=0.25, floor=0.25))
                rows.append(row(m, "agree_structure", k, s, 0.95, chance=0.25, floor=0.9, rho=1.0))
                rows.append(row(m, "agree_content4", k, s, (0.325 if far else 0.9) + 0.75 * w, chance=0.25,
                                floor=0.25, rho=1.0))
        for k in (1, 8, 16, 32):
            rows += [row("ema3_seq", "agree_content4", k, s, 0.8 + w, chance=0.25),
                     row("ema3_seq", "lag_identity", k, s, 0.8 + w), row("ema3", "lag_identity", k, s, 0.6)]
        for m, acc in (("ema", 0.1), ("decay_linear_attn", 0.4), ("gated_linear_attn", 0.7)):
            rows.append(row(m, "mqar", 4, s, acc + w, chance=0.01))
        for k in (1, 8, 16, 32):  # the window: perfect within its reach, at chance beyond it
            rows.append(row("window_k", "agree_content4", k, s, 1.0 if k <= 8 else 0.25 + w / 10, chance=0.25,
                            floor=0.25))
    return rows


# Recall against state: each mixer's MQAR accuracy at its widths, by the state floats each keeps (EMA's
# grow with the width, the linear attentions' with its square), at one size.
EMA_STATES, KV_STATES = (48, 96, 192, 384), (64, 192, 640, 2304)


def recall_row(mixer, seed, floats, accuracy, size="pairs=4,T=64"):
    return {"mixer": mixer, "difficulty": size, "d": 8, "seed": seed, "accuracy": accuracy,
            "dev_accuracy": accuracy, "chance": 0.01, "lr": 0.01, "state_floats": floats, "params": 1000}


def recall_like(seeds=SEEDS, size="pairs=4,T=64"):
    """decay_linear_attn above ema at every matched state (by 0.3 + w beyond the overlap's start), and
    gated_linear_attn 0.2 + w above decay_linear_attn at every width (their states are equal)."""
    rows = []
    for i, s in enumerate(seeds):
        w = 0.01 * i
        rows += [recall_row("ema", s, x, 0.05 + 0.01 * j, size) for j, x in enumerate(EMA_STATES)]
        rows += [recall_row("decay_linear_attn", s, x, 0.4 + w + 0.1 * j, size) for j, x in enumerate(KV_STATES)]
        rows += [recall_row("gated_linear_attn", s, x, 0.6 + 2 * w + 0.1 * j, size) for j, x in enumerate(KV_STATES)]
    return rows


def judged(rows=None, recall=None, **kw):
    return by_key(claim_verdicts(paper_like() if rows is None else rows,
                                 recall=recall_like() if recall is None else recall, **kw))


def by_key(verdicts):
    return {v.claim.key: v for v in verdicts}


def test_the_names_and_the_reach_match_the_torch_side():
    from ema_core.studies.boundary.tasks import TASKS
    from ema_core.studies.boundary.experiment import BoundaryModelConfig
    from ema_core.mixers import MIXER_NAMES

    assert TASK_ORDER == TASKS
    assert set(PAPER_HIERARCHY) | {bf.FLOOR_MIXER} <= set(MIXER_NAMES)
    body = BoundaryModelConfig()
    assert body.conv == bf.DEFAULT_CONV
    assert DEFAULT_WINDOW_REACH == window_reach(body.window, body.layers, body.conv) == 10
    assert reach_of(body.model_dump()) == 10


def test_the_reach_counts_the_window_and_the_conv_of_every_layer():
    assert window_reach(4, 2) == window_reach(4, 2, 0) == window_reach(4, 2, 1) == 6  # no conv
    assert window_reach(4, 2, 3) == 10 and window_reach(4, 2, 4) == 12 and window_reach(2, 3, 3) == 9
    # A config stored before the body had a conv ran without one.
    assert reach_of({"window": 4, "layers": 2}) == 6 and reach_of({"window": 4, "layers": 2, "conv": 3}) == 10
    assert reach_of({"d": 64}) is None and reach_of(None) is None


def test_the_module_loads_neither_torch_nor_pandas():
    code = ("import sys, ema_core.studies.boundary.findings; "
            "print(sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_normalised_is_accuracy_above_chance():
    assert normalised(0.5, 0.5) == 0.0
    assert normalised(1.0, 0.25) == 1.0
    assert normalised(0.625, 0.25) == 0.5
    assert normalised(0.1, 0.25) == pytest.approx(-0.2)
    assert math.isnan(normalised(1.0, 1.0)) and math.isnan(normalised(None, 0.5))
    assert math.isnan(normalised(float("nan"), 0.5))


def test_the_exclusion_floor_is_what_accuracy_is_set_against_where_it_is_above_chance():
    assert above_floor(0.8, 0.5, 0.6) == pytest.approx(0.5)     # (0.8 − 0.6) / (1 − 0.6)
    assert above_floor(0.6, 0.5, 0.6) == 0.0                    # at the floor: nothing held of t − k
    assert above_floor(0.75, 0.5, 0.3) == pytest.approx(0.5)    # a floor below chance: chance
    for missing in (None, float("nan")):                        # a run stored before the floor: chance
        assert above_floor(0.75, 0.5, missing) == pytest.approx(0.5)
    assert math.isnan(above_floor(0.9, 0.5, 1.0))               # nothing left to learn
    assert bf.MapCell(0.8, 0.5, floor=0.6).above_floor == pytest.approx(0.5)
    assert bf.MapCell(0.8, 0.5).above_floor == bf.MapCell(0.8, 0.5).above_chance == pytest.approx(0.6)


def test_claims_and_sanity_checks_are_apart():
    assert not any(c.sanity for c in CLAIMS) and all(c.sanity for c in SANITY_CHECKS)
    assert {c.key for c in SANITY_CHECKS} == {"recipe_works", "label_count_symmetry", "window_at_chance",
                                              "sequence_recovers_content"}
    assert {c.key for c in CLAIMS} == {"ema_structure_beyond_repetition", "ema3_structure_beyond_repetition",
                                       "ema_structure_over_content4", "ema3_structure_over_content4",
                                       "gated_above_decay", "decay_above_ema"}
    claims, checks = claims_and_checks(claim_verdicts(paper_like(), recall=recall_like()))
    assert [v.claim.key for v in claims] == [c.key for c in CLAIMS]
    assert [v.claim.key for v in checks] == [c.key for c in SANITY_CHECKS]
    # A check that holds is worded as holding, not as a paper claim reproduced.
    assert {v.word for v in checks} == {"holds"} and {v.word for v in claims} == {"reproduced"}


def test_every_claim_of_a_paper_shaped_map_is_reproduced_and_every_check_holds():
    v = judged()
    assert {k: x.verdict for k, x in v.items()} == dict.fromkeys(v, "reproduced")
    # structure above its floor at ρ = 0, at k = 16 and 32 (beyond the reach of 10; k = 8 is within it
    # and left out): 0.2 + 4w/3, w = 0, 0.01, 0.02
    ema = v["ema_structure_beyond_repetition"]
    assert ema.over == "k=16,rho=0, k=32,rho=0" and ema.delta.mean == pytest.approx(0.2 + 0.04 / 3) and ema.delta.n == 3
    assert ema.note == ""  # every cell holds its floor
    # where the context repeats (ρ = 1): structure above chance 0.7 / 0.75, content4 0.1 + w
    rep = v["ema_structure_over_content4"]
    assert rep.over == "k=16,rho=1, k=32,rho=1" and rep.delta.mean == pytest.approx(0.7 / 0.75 - 0.11)
    # the label-count control: 0.1 − |structure − content4| above the floor = 0.1 − 2w/3
    sym = v["label_count_symmetry"]
    assert sym.delta.mean == pytest.approx(0.1 - 0.02 / 3) and sym.verdict == "reproduced" and sym.word == "holds"
    # the recipe: softmax's weakest cell per seed, minus 0.95: 0.03, 0.025, 0.02
    rec = v["recipe_works"]
    assert rec.delta.mean == pytest.approx(0.025) and rec.delta.std == pytest.approx(0.005)
    assert rec.over == "13 cells of agree_structure, agree_content4, mqar, lag_identity"
    seq = v["sequence_recovers_content"]
    assert seq.over == "agree_content4 k=32,rho=0, lag_identity k=32" and seq.delta.mean == pytest.approx(0.3075)
    # gated − decay at their four shared states, 0.2 + w at each
    gated = v["gated_above_decay"]
    assert gated.delta.mean == pytest.approx(0.21) and gated.over.startswith("4 matched states")
    assert "beyond the spread above 0 at 4, below 0 at 0" in gated.over
    # decay − ema where their curves overlap (64 … 384 floats): 64, 96, 192, 384
    decay = v["decay_above_ema"]
    assert decay.over.startswith("4 matched states (pairs=4,T=64 at 64 floats") and "at 384 floats" in decay.over
    assert "at 2,304 floats" not in decay.over  # beyond EMA's widest: never extrapolated
    # the window beyond its reach: 0.1 − accuracy above chance (w / 7.5)
    win = v["window_at_chance"]
    assert win.over == "agree_content4 k=16,rho=0, k=32,rho=0" and win.delta.mean == pytest.approx(0.1 - 0.01 / 7.5)
    assert "across 3 seeds (threshold 2 × std" in win.sentence and f"against {t_threshold(3):.2f})" in win.sentence
    assert win.sentence.endswith("— holds.")


def _two_widths(gains, base=0.5):
    """gated and decay at the same two states; gated ahead by ``gains`` (one per seed) at both."""
    rows = []
    for s, gain in zip(SEEDS, gains):
        for x in (64, 192):
            rows += [recall_row("gated_linear_attn", s, x, base + gain), recall_row("decay_linear_attn", s, x, base)]
    return rows


def test_beyond_is_strict_at_exactly_two_stds():
    # Δ = 0.125, 0.25, 0.375 (exact in binary): mean 0.25 = 2 × std 0.125 exactly, which is not beyond.
    at = spread([0.125, 0.25, 0.375])
    assert at.mean == 2 * at.std and at.beyond is False and judge(at) == "inconclusive"
    assert judge(Spread(-0.25, 0.125, 3)) == "inconclusive"
    recall = _two_widths((0.125, 0.25, 0.375))
    v = judged(recall=recall)["gated_above_decay"]
    assert v.delta.mean == 2 * v.delta.std and v.verdict == "inconclusive"
    # A hair more on one seed and the same Δ is beyond at both states: the rule is not vacuous at the edge.
    recall = _two_widths((0.125 + 1 / 64, 0.25, 0.375))
    v = judged(recall=recall)["gated_above_decay"]
    assert v.delta.mean > 2 * v.delta.std and v.verdict == "reproduced"
    # Seeds agreeing exactly on Δ = 0: the test rejects neither side.
    assert judge(Spread(0.0, 0.0, 5)) == "inconclusive"


def test_a_recall_claim_needs_two_matched_states_beyond_the_spread():
    # Ahead at one state only (the other within the spread): not reproduced, not "reproduced" either.
    recall = []
    for s, w in zip(SEEDS, (0.0, 0.01, 0.02)):
        recall += [recall_row("gated_linear_attn", s, 64, 0.8 + w), recall_row("decay_linear_attn", s, 64, 0.5),
                   recall_row("gated_linear_attn", s, 192, 0.5 + (0.1, -0.1, 0.05)[SEEDS.index(s)]),
                   recall_row("decay_linear_attn", s, 192, 0.5)]
    v = judged(recall=recall)["gated_above_decay"]
    assert v.verdict == "inconclusive" and "above 0 at 1, below 0 at 0" in v.over
    # One width per mixer: no curve to match on, not measured.
    one = [r for r in recall if r["state_floats"] == 64]
    v = judged(recall=one)["gated_above_decay"]
    assert not v.measured and "two widths or more" in v.sentence


def test_accuracy_at_a_matched_state_is_read_off_each_curve_in_log_state():
    # EMA at 48 and 96 floats (0.05, 0.06) read at 64: 0.05 + 0.01 · log(64/48) / log 2
    got = bf.matched_deltas(recall_like(), "decay_linear_attn", "ema")
    assert [x for _, x in got] == [64, 96, 192, 384]
    ema_64 = 0.05 + 0.01 * math.log(64 / 48) / math.log(2)
    assert got[("pairs=4,T=64", 64)][0] == pytest.approx(0.4 - ema_64)
    decay_96 = 0.4 + 0.1 * math.log(96 / 64) / math.log(3)
    assert got[("pairs=4,T=64", 96)][0] == pytest.approx(decay_96 - 0.06)
    assert bf._at_state([(10, 0.1), (20, 0.2)], 40) is None and bf._at_state([(10, 0.1), (20, 0.2)], 5) is None


def test_no_claim_is_judged_on_fewer_than_three_seeds():
    assert VERDICT_MIN_SEEDS == 3
    for seeds, words in (((7,), "not judged: 1 seed"), ((7, 8), "not judged: 2 seeds")):
        v = judged(paper_like(seeds=seeds), recall_like(seeds=seeds))
        assert all(x.verdict == "not_judged" and x.word == words and x.delta.n == len(seeds) for x in v.values())
        assert v["gated_above_decay"].delta.mean == pytest.approx(0.2 + 0.005 * (len(seeds) - 1))  # shown, not judged
        assert v["gated_above_decay"].sentence.endswith(f"— {words}.")
    # Two seeds whose Δ agree perfectly would pass the old two-seed rule; they are not judged now.
    assert judge(Spread(0.3, 0.0, 2)) == "not_judged" and judge(Spread(0.3, 0.0, 3)) == "reproduced"
    assert not_judged(2) == "not judged: 2 seeds"


def test_the_rule_is_a_paired_t_test_and_says_its_level():
    # |mean| > 2 std  ⇔  t = mean / (std / √n) > 2 √n
    s = Spread(0.3, 0.1, 3)
    assert s.t == pytest.approx(0.3 / (0.1 / math.sqrt(3))) and t_threshold(3) == pytest.approx(2 * math.sqrt(3))
    assert (abs(s.mean) > VERDICT_K * s.std) == (abs(s.t) > t_threshold(s.n))
    assert one_sided_p(t_threshold(3), 2) == pytest.approx(0.0370899501, abs=1e-9)
    assert one_sided_p(-1.0, 4) == pytest.approx(1 - one_sided_p(1.0, 4))
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 10):
        for t in (0.2, 1.0, 2.83, 3.46, 6.0):
            assert one_sided_p(t, df) == pytest.approx(stats.t.sf(t, df), abs=1e-12), (t, df)
    assert "t > 3.46 at 2 degrees of freedom, a one-sided level of 0.037" in RULE_AS_TEST
    assert 'rejects "Δ ≤ 0"' in RULE_AS_TEST and 'rejects "Δ ≥ 0"' in RULE_AS_TEST


def test_a_reversed_hierarchy_is_not_reproduced():
    recall = [r for r in recall_like() if r["mixer"] != "ema"]
    for i, s in enumerate(SEEDS):  # EMA far ahead at every state it reaches
        recall += [recall_row("ema", s, x, 0.9 + 0.01 * i) for x in (64, 192, 384)]
    v = judged(recall=recall)["decay_above_ema"]
    assert v.verdict == "not_reproduced" and v.word == "not reproduced" and v.delta.n == 3
    assert "above 0 at 0, below 0 at 3" in v.over
    assert v.sentence.startswith("Key–value binding beats EMA at recall, at matched state")


def test_a_difference_within_the_spread_is_inconclusive():
    recall = []
    for s, d in zip(SEEDS, (0.1, -0.1, 0.05)):
        for x in (64, 192):
            recall += [recall_row("gated_linear_attn", s, x, 0.5 + d), recall_row("decay_linear_attn", s, x, 0.5)]
    v = judged(recall=recall)["gated_above_decay"]
    assert v.verdict == "inconclusive" and v.delta.n == 3 and v.delta.mean == pytest.approx(0.05 / 3)


def test_recall_claims_leave_out_the_sizes_softmax_did_not_learn():
    # A second MQAR size, 16 pairs, where softmax got a fifth of the way from chance (under-trained):
    # the recall claims keep to 4 pairs, and say which size they left out and why.
    rows = paper_like()
    recall = recall_like()
    for s in SEEDS:
        # test accuracy high, dev low: dev decides (which sizes count is a choice, never made on test)
        rows += [dict(row("softmax", "mqar", 16, s, 0.99, chance=0.01), dev_accuracy=0.208)]
        recall += [recall_row(m, s, x, acc, "pairs=16,T=64") for m, xs, acc in
                   (("ema", EMA_STATES, 0.9), ("decay_linear_attn", KV_STATES, 0.1),  # would reverse if counted
                    ("gated_linear_attn", KV_STATES, 0.05)) for x in xs]
    assert bf.undertrained_mqar(rows) == {"pairs=16,T=64": pytest.approx(0.2)}
    v = judged(rows, recall)
    for key in ("gated_above_decay", "decay_above_ema"):
        assert v[key].verdict == "reproduced" and "pairs=16" not in v[key].over, key
        assert "MQAR is under-trained at this budget" in v[key].sentence and "0.20 at pairs=16,T=64" in v[key].sentence
    assert v["window_at_chance"].note == ""  # reads no MQAR cell
    assert v["recipe_works"].note == v["decay_above_ema"].note  # keeps the sizes, says why it fails there
    # Every size under-trained: the recall claims are not judged, and say why (not "not measured").
    low = [dict(r, dev_accuracy=0.1) if (r["mixer"], r["task"]) == ("softmax", "mqar") else r for r in rows]
    v = judged(low, recall)
    for key in ("gated_above_decay", "decay_above_ema"):
        assert v[key].verdict == "inconclusive" and v[key].delta.n == 0
        assert "not judged" in v[key].sentence and "under-trained" in v[key].sentence
        assert "not measured by these runs" not in v[key].sentence and v[key].word == "not judged"
    assert bf.undertrained_text(paper_like()) == ""


def test_a_mixer_that_holds_nothing_of_t_minus_k_beyond_the_floor_does_not_keep_structure():
    # ema's structure at ρ = 0 at (or just under) its floor: it keeps nothing of position t − k, though
    # where the context repeats the category (ρ = 1) structure survives and content does not.
    def ema_at_floor(under):
        rows = [r for r in paper_like() if not (r["mixer"] == "ema" and r["task"] == "agree_structure"
                                                and r["redundancy"] == 0)]
        for s, u in zip(SEEDS, under):
            for k in (1, 8, 16, 32):
                rows.append(row("ema", "agree_structure", k, s, 0.25 - u, chance=0.25, floor=0.25))
        return by_key(claim_verdicts(rows))

    v = ema_at_floor((0.0, 0.0, 0.0))
    kept = v["ema_structure_beyond_repetition"]
    assert kept.delta.mean == 0 and kept.delta.std == 0 and kept.verdict == "inconclusive"  # rejects neither side
    assert v["ema_structure_over_content4"].verdict == "reproduced"  # the statement, explained by repetition
    v = ema_at_floor((0.015, 0.0225, 0.03))
    assert v["ema_structure_beyond_repetition"].verdict == "not_reproduced"
    assert v["ema_structure_beyond_repetition"].delta.mean == pytest.approx(-0.0225 / 0.75)
    # and the control no longer holds: ema's structure sits far below the four-way map it mirrors
    assert v["label_count_symmetry"].delta.mean < 0 and v["label_count_symmetry"].word != "holds"


def test_the_label_count_control_fails_when_a_task_is_built_wrong():
    # A four-way map that a neighbour gives away (or one of the wrong size) scores far from structure at
    # ρ = 0: the control fails instead of quietly holding.
    rows = [dict(r, accuracy=min(1.0, r["accuracy"] + 0.3)) if r["task"] == "agree_content4" and r["redundancy"] == 0
            else r for r in paper_like()]
    v = by_key(claim_verdicts(rows))["label_count_symmetry"]
    assert v.verdict == "not_reproduced" and v.word == "fails" and v.delta.mean < -0.2
    # Within the tolerance on one seed and beyond it on the others: not a pass.
    rows = [dict(r, accuracy=r["accuracy"] + (0.0 if r["seed"] == 1 else 0.12))
            if r["task"] == "agree_content4" and r["redundancy"] == 0 and r["mixer"] in ("ema", "ema3") else r
            for r in paper_like()]
    assert by_key(claim_verdicts(rows))["label_count_symmetry"].verdict != "reproduced"


def test_a_missing_floor_falls_back_to_chance_and_says_so():
    rows = [dict(r, exclusion_floor=None) if (r["mixer"], r["task"], r["level"], r["redundancy"]) ==
            ("ema", "agree_structure", 32, 0) else r for r in paper_like()]
    v = by_key(claim_verdicts(rows))
    ema = v["ema_structure_beyond_repetition"]
    assert ema.delta.mean == pytest.approx(0.2 + 0.04 / 3)  # the floor was chance here anyway
    assert "no exclusion floor for agree_structure k=32,rho=0" in ema.note and "set against chance alone" in ema.sentence
    assert v["ema3_structure_beyond_repetition"].note == ""


def test_at_a_distance_is_beyond_the_reach_of_the_runs_body_never_a_fixed_k():
    rows = paper_like()
    # A run without the conv reaches 6 back: k = 8 is then at a distance too (content at 1.0 there).
    v = by_key(claim_verdicts(rows, reach=window_reach(4, 2, 0)))
    assert v["ema_structure_beyond_repetition"].over == "k=8,rho=0, k=16,rho=0, k=32,rho=0"
    assert v["window_at_chance"].over == "agree_content4 k=8,rho=0, k=16,rho=0, k=32,rho=0"
    assert v["window_at_chance"].verdict == "not_reproduced"
    # No k beyond the reach: not measured (no falling back to the largest k), and the sentence says the reach.
    near = [r for r in rows if r["level"] <= 8]
    v = by_key(claim_verdicts(near))
    for key in ("ema_structure_beyond_repetition", "ema_structure_over_content4", "window_at_chance",
                "label_count_symmetry"):
        assert v[key].delta.n == 0 and "beyond" in v[key].sentence and "(k > 10)" in v[key].sentence, key
    # A seed that lost one of the cells compared is left out, not judged on fewer cells.
    cut = [r for r in rows if not (r["seed"] == 3 and r["mixer"] == "ema" and r["task"] == "agree_structure"
                                   and r["level"] == 32 and r["redundancy"] == 0)]
    v = by_key(claim_verdicts(cut))["ema_structure_beyond_repetition"]
    assert v.delta.n == 2 and v.verdict == "not_judged" and v.word == "not judged: 2 seeds"


def test_the_claims_read_the_redundancy_they_name():
    rows = paper_like()
    # Only ρ = 0 measured: the statement where the context repeats is not measured; the rest stand.
    v = by_key(claim_verdicts([r for r in rows if r["redundancy"] in (None, 0)]))
    assert not v["ema_structure_over_content4"].measured and "at one ρ > 0" in v["ema_structure_over_content4"].sentence
    assert v["ema_structure_beyond_repetition"].verdict == "reproduced"
    # Only ρ = 1: nothing at ρ = 0 to judge structure beyond repetition or the control on.
    v = by_key(claim_verdicts([r for r in rows if r["redundancy"] in (None, 1)]))
    assert not v["ema_structure_beyond_repetition"].measured and not v["label_count_symmetry"].measured
    assert v["ema_structure_over_content4"].verdict == "reproduced"
    # ρ read from the difficulty where a row has no column for it (an export read back)
    bare = [{k: val for k, val in r.items() if k != "redundancy"} for r in rows]
    assert [x.delta for x in claim_verdicts(bare)] == [x.delta for x in claim_verdicts(rows)]
    # The largest ρ measured decides the statement: a ρ = 0.5 beside it changes nothing
    half = rows + [dict(r, difficulty=r["difficulty"].replace("rho=1", "rho=0.5"), redundancy=0.5, accuracy=0.3)
                   for r in rows if r["redundancy"] == 1]
    assert by_key(claim_verdicts(half))["ema_structure_over_content4"].delta.mean == pytest.approx(0.7 / 0.75 - 0.11)


def test_claims_the_runs_do_not_hold_are_not_measured():
    rows = [r for r in paper_like() if r["mixer"] in ("window_k", "ema")]
    v = by_key(claim_verdicts(rows))
    for key in ("recipe_works", "ema3_structure_beyond_repetition", "ema3_structure_over_content4",
                "sequence_recovers_content", "gated_above_decay", "decay_above_ema"):
        assert v[key].verdict == "inconclusive" and v[key].delta.n == 0 and not v[key].measured
        assert "not measured by these runs" in v[key].sentence and v[key].word == "not measured"
    assert "(it needs softmax rows)" in v["recipe_works"].sentence
    # The structure claims need no window: they are judged against the floor and the content map.
    assert v["ema_structure_beyond_repetition"].verdict == "reproduced"
    assert v["ema_structure_over_content4"].verdict == "reproduced"


def test_the_mqar_recipe_fails_by_seed_where_softmax_misses_its_bar():
    rows = paper_like()  # softmax's MQAR cell at 0.98 − w/2: below 0.99 at every seed
    assert bf.recipe_failures(rows) == {1: pytest.approx(0.98), 2: pytest.approx(0.975), 3: pytest.approx(0.97)}
    rows = [dict(r, accuracy=0.995) if (r["mixer"], r["task"], r["seed"]) in {("softmax", "mqar", 1), ("softmax", "mqar", 3)}
            else r for r in rows]
    assert bf.recipe_failures(rows) == {2: pytest.approx(0.975)}
    assert bf.recipe_failures_text(rows).startswith("The MQAR recipe failed for seed 2 (0.975)")
    assert bf.recipe_failures_text([dict(r, accuracy=0.999) if r["task"] == "mqar" else r for r in rows]) == ""


def test_a_frame_reads_as_its_rows_and_unscored_rows_are_left_out():
    rows = paper_like()
    expected = [x.delta for x in claim_verdicts(rows)]
    assert [x.delta for x in claim_verdicts(pd.DataFrame(rows))] == expected
    # A cell the run could not score (no accuracy), or a row with no seed, changes nothing.
    holes = [row("softmax", "mqar", 4, 9, None), dict(row("softmax", "mqar", 4, 1, 0.1), seed=float("nan"))]
    assert [x.delta for x in claim_verdicts(pd.DataFrame(rows + holes))] == expected


def test_measured_order_ranks_weakest_first():
    rows = paper_like()
    assert [m for m, _ in measured_order(rows)] == ["ema", "decay_linear_attn", "gated_linear_attn", "softmax"]
    order = dict(measured_order(rows))
    assert order["ema"] == pytest.approx(0.11) and order["softmax"] == pytest.approx(0.975)
    tied = [row("softmax", "lag_identity", 1, 0, 0.5), row("window_k", "lag_identity", 1, 0, 0.5),
            row("ema", "lag_identity", 1, 0, 0.2)]
    assert measured_order(tied, "lag_identity") == [("ema", 0.2), ("window_k", 0.5), ("softmax", 0.5)]
    assert measured_order(tied, "lag_identity", mixers=PAPER_HIERARCHY) == [("ema", 0.2), ("softmax", 0.5)]
    assert measured_order(tied, "mqar") == []


def test_the_smallest_state_reaching_the_recall_bar_per_mixer():
    def r(m, floats, seed, acc, size="pairs=4,T=64"):
        return {"mixer": m, "difficulty": size, "d": floats // 4, "seed": seed, "accuracy": acc, "state_floats": floats}

    rows = [r("ema", 128, s, 0.3) for s in SEEDS] + [r("ema", 512, s, 0.5) for s in SEEDS]
    rows += [r("gated_linear_attn", 256, s, a) for s, a in zip(SEEDS, (0.8, 0.9, 0.95))]   # mean 0.883: not yet
    rows += [r("gated_linear_attn", 1024, s, a) for s, a in zip(SEEDS, (0.9, 0.92, 0.94))]  # mean 0.92: first
    rows += [r("gated_linear_attn", 4096, s, 0.99) for s in SEEDS]
    rows += [r("softmax", 8192, s, 1.0) for s in SEEDS] + [r("softmax", 8192, 1, None, "pairs=8,T=64")]
    assert recall_frontier(rows) == {("gated_linear_attn", "pairs=4,T=64"): 1024, ("softmax", "pairs=4,T=64"): 8192}
    assert recall_frontier(pd.DataFrame(rows), level=0.4)[("ema", "pairs=4,T=64")] == 512


def test_the_rule_says_its_threshold():
    assert f"|mean Δ| > {VERDICT_K:g} × the sample standard deviation" in VERDICT_RULE
    assert f"at least {VERDICT_MIN_SEEDS} seeds" in VERDICT_RULE and "**not judged**" in VERDICT_RULE
    assert "(accuracy − chance) / (1 − chance)" in VERDICT_RULE and "max(chance, exclusion floor)" in VERDICT_RULE
    assert "**Sanity checks**" in VERDICT_RULE and RULE_AS_TEST in VERDICT_RULE
