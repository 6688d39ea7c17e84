"""Where SPEN's gap to the GPT lives (ema_core.studies.content.gap): the share arithmetic, the pairing by seed
and settings, the pre-registered claims judged by the shared rule, and empty classes.  Hand-made rows of
the store's ``lm_token_class_pairs`` (pure arithmetic: synthetic inputs, never results)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from ema_core.studies.content.gap import (COMMON_BIGRAM_RECALL, FAR_RECALL, FAR_RECALL_MATCHED, GAP_CLAIMS, NEAR_RECALL,
                                          NEAR_RECALL_MATCHED, NOT_RECALL, RARE_BIGRAM_RECALL, class_gaps, class_label,
                                          gap_verdicts, variant_class_deltas)
from ema_core.studies.content.shared import ALL_TOKENS, RECALL, gap_variant
from ema_core.lm.token_classes import BANDS, BIGRAM_COUNT_CLASSES, CLASSES, POSITION_CLASSES, RECALL_EDGES
from ema_core.verdicts import VERDICT_K, VERDICT_WORDS, judge, spread

# Tokens per class of one held-out text (the same on every seed): two recall classes empty, as in
# windows of 64 tokens.
TOKENS = {"recall_1_16": 100, "recall_17_64": 50, "recall_65_256": 0, "recall_257_plus": 0, "first": 200, "other": 150}
GPT = {"recall_1_16": 2.0, "recall_17_64": 2.5, "recall_65_256": None, "recall_257_plus": None, "first": 4.0,
       "other": 3.0}
# SPEN − GPT per token on every class, before a seed's own shift on recall_1_16.
GAP = {"recall_1_16": 1.0, "recall_17_64": 1.5, "first": 0.1, "other": 0.2}
SHIFT = (0.0, 0.1, -0.05)  # seed s's extra gap on recall_1_16


def _rows(run_id, model, seed, per_token, *, predictor="linear", attn_input="state", gpt=None, group="g",
          partition="class", tokens=TOKENS, evaluation="final"):
    """One run's rows of lm_token_class_pairs: loss = tokens × nats per token (0 on an empty class)."""
    return [dict(run_id=run_id, group_id=group, model=model, predictor=predictor, attn_input=attn_input, seed=seed,
                 gpt_run_id=gpt, evaluation=evaluation, step=6, partition=partition, **{"class": name}, tokens=t,
                 loss=t * per_token[name] if t else 0.0)
            for name, t in tokens.items()]


def _spen(seed, shift=0.0, gap=GAP):
    return {n: (GPT[n] + gap[n] + (shift if n == "recall_1_16" else 0.0)) if n in gap else None for n in GPT}


def _pairs(seeds=(0, 1, 2), **spen_kwargs):
    rows = []
    for s in seeds:
        rows += _rows(f"gpt-{s}", "gpt", s, GPT)
        rows += _rows(f"lin-{s}", "spen", s, _spen(s, SHIFT[s]), gpt=f"gpt-{s}", **spen_kwargs)
    return rows


def _pooled(per_token, names, tokens=TOKENS):
    n = sum(tokens[c] for c in names)
    return sum(tokens[c] * per_token[c] for c in names if tokens[c]) / n


# -- the definitions ---------------------------------------------------------------------------------------

def test_the_pre_registered_pools_are_the_token_classes():
    # Fixed by name; held here to ema_core.lm.token_classes so that a change there fails loudly.
    assert set(RECALL) | set(NOT_RECALL) == set(CLASSES) and not set(RECALL) & set(NOT_RECALL)
    assert all(c.startswith("recall_") for c in RECALL)
    assert set(FAR_RECALL) | set(NEAR_RECALL) <= set(RECALL)
    assert RECALL_EDGES[0] == 16 and RECALL_EDGES[1] == 64  # 1–16 near, more than 64 far
    assert FAR_RECALL == tuple(CLASSES[2:4]) and NEAR_RECALL == (CLASSES[0],)
    assert [c.key for c in GAP_CLAIMS] == ["concentrates", "grows_with_distance", "grows_with_distance_matched",
                                           "rare_bigram", "copy_closes_recall"]
    claims = {c.key: c for c in GAP_CLAIMS}
    assert (claims["concentrates"].more, claims["concentrates"].less) == (RECALL, NOT_RECALL)
    assert (claims["grows_with_distance"].more, claims["grows_with_distance"].less) == (FAR_RECALL, NEAR_RECALL)
    matched = claims["grows_with_distance_matched"]
    assert matched.partition == "recall_by_position" and set(matched.more) | set(matched.less) <= set(POSITION_CLASSES)
    assert all(c.split("_at_")[0] in FAR_RECALL for c in FAR_RECALL_MATCHED)
    assert NEAR_RECALL_MATCHED == ("recall_1_16_at_65_128", "recall_1_16_at_129_256", "recall_1_16_at_257_512",
                                   "recall_1_16_at_513_plus")
    rare = claims["rare_bigram"]
    assert rare.partition == "recall_by_bigram_count"
    assert set(RARE_BIGRAM_RECALL) | set(COMMON_BIGRAM_RECALL) == set(BIGRAM_COUNT_CLASSES) - {"not_recall"}
    copy = claims["copy_closes_recall"]
    assert (copy.more, copy.less, copy.closed_by) == (RECALL, NOT_RECALL, "copy_mix")
    assert [class_label(c) for c in CLASSES] == ["recall 1–16", "recall 17–64", "recall 65–256", "recall 257+",
                                                "first", "other"]
    assert class_label("recall_65_256_at_129_256") == "recall 65–256 at 129–256"
    assert class_label("recall_bigram_10_plus") == "recall, bigram seen 10+× in training"
    assert class_label("recall_bigram_0") == "recall, bigram seen 0× in training"
    assert class_label("not_recall") == "not recall"


# -- the gap and its shares ----------------------------------------------------------------------------------

def test_gap_and_share_per_class_are_formed_within_each_seed():
    split = class_gaps(_pairs())
    assert split.variant == "SPEN linear" and split.partition == "class" and split.seeds == 3
    got = {c.name: c for c in split.classes}
    assert list(got) == list(CLASSES)
    shares = {n: [] for n in CLASSES}
    for s in range(3):
        spen = _spen(s, SHIFT[s])
        weighted = {n: TOKENS[n] * (spen[n] - GPT[n]) if TOKENS[n] else 0.0 for n in CLASSES}
        whole = sum(weighted.values())
        for n in CLASSES:
            shares[n].append(weighted[n] / whole)
        assert sum(weighted[n] / whole for n in CLASSES) == pytest.approx(1.0)
    gaps = [GAP["recall_1_16"] + d for d in SHIFT]
    assert got["recall_1_16"].gap.mean == pytest.approx(sum(gaps) / 3)
    assert got["recall_1_16"].gap.std == pytest.approx(pd.Series(gaps).std())
    assert got["first"].gap.mean == pytest.approx(0.1) and got["first"].gap.std == pytest.approx(0.0, abs=1e-12)
    assert got["recall_1_16"].spen.mean == pytest.approx(3.0 + sum(SHIFT) / 3)
    assert got["recall_1_16"].gpt.mean == pytest.approx(2.0)
    for n in CLASSES:
        assert got[n].share.mean == pytest.approx(sum(shares[n]) / 3), n
        assert got[n].share.n == 3
    # The mean shares sum to 1 too (the mean is linear), and the tokens' shares are the text's.
    assert sum(c.share.mean for c in split.classes) == pytest.approx(1.0)
    assert got["first"].token_share == pytest.approx(200 / 500) and got["first"].tokens == 200
    # Every class pooled: the whole loss per token, and a share of 1.
    spen_all = [_pooled(_spen(s, SHIFT[s]), [n for n in CLASSES if TOKENS[n]]) for s in range(3)]
    gpt_all = _pooled(GPT, [n for n in CLASSES if TOKENS[n]])
    assert split.overall.name == ALL_TOKENS and split.overall.tokens == 500
    assert split.overall.gap.mean == pytest.approx(sum(spen_all) / 3 - gpt_all)
    assert split.overall.share.mean == 1.0


def test_empty_classes_have_no_gap_and_no_share_and_do_not_crash():
    split = class_gaps(_pairs())
    far = {c.name: c for c in split.classes}["recall_257_plus"]
    assert far.tokens == 0 and far.gap.n == 0 and math.isnan(far.gap.mean) and far.spen.n == 0
    assert far.share.mean == 0.0 and far.share.n == 3  # carries nothing, so the shares still sum to 1
    # Through a frame, as the page hands them over: NaN for a null loss per token and a missing GPT id.
    frame = pd.DataFrame(_pairs()).assign(loss_per_token=lambda d: d["loss"] / d["tokens"].where(d["tokens"] > 0))
    again = class_gaps(frame.to_dict("records"))
    assert [c.gap.mean for c in again.classes if c.tokens] == pytest.approx(
        [c.gap.mean for c in split.classes if c.tokens])
    # A seed whose whole gap is exactly 0 has no shares (0/0), but still its gaps.
    flat = {n: 0.0 for n in GAP}
    rows = _rows("gpt-0", "gpt", 0, GPT) + _rows("lin-0", "spen", 0, _spen(0, 0.0, flat), gpt="gpt-0")
    zero = class_gaps(rows)
    assert all(c.share.n == 0 for c in zero.classes if c.tokens) and zero.overall.gap.mean == 0.0
    # A partition with no tokens at all.
    empty = {n: 0 for n in TOKENS}
    rows = _rows("gpt-0", "gpt", 0, GPT, tokens=empty) + _rows("lin-0", "spen", 0, GPT, gpt="gpt-0", tokens=empty)
    nothing = class_gaps(rows)
    assert nothing.overall.gap.n == 0 and math.isnan(nothing.classes[0].token_share)
    assert {v.word for v in gap_verdicts(rows)} == {"not measured"}


def test_bands_are_a_partition_of_their_own():
    band_tokens = {"frequent": 300, "middle": 150, "rare": 50}
    gpt = {"frequent": 3.0, "middle": 5.0, "rare": 7.0}
    spen = {"frequent": 3.1, "middle": 5.6, "rare": 8.0}
    rows = (_pairs() + _rows("gpt-0", "gpt", 0, gpt, partition="band", tokens=band_tokens)
            + _rows("lin-0", "spen", 0, spen, gpt="gpt-0", partition="band", tokens=band_tokens))
    split = class_gaps(rows, "band")
    # Seeds 1 and 2 hold classes but no bands: not seeds of the band split, rather than zeros in it.
    assert [c.name for c in split.classes] == list(BANDS) and split.seeds == 1
    assert split.classes[0].tokens == 300 and split.overall.tokens == 500
    weighted = {n: band_tokens[n] * (spen[n] - gpt[n]) for n in BANDS}
    for c in split.classes:
        assert c.share.mean == pytest.approx(weighted[c.name] / sum(weighted.values()))
        assert math.isnan(c.share.std)  # one seed: no spread
    with pytest.raises(ValueError):
        class_gaps(rows, "bands")


def test_only_final_rows_are_read():
    periodic = [{**r, "evaluation": "periodic", "loss": r["loss"] * 3} for r in _pairs()]
    assert class_gaps(periodic) is None
    mixed = class_gaps(_pairs() + periodic)
    assert mixed.classes[0].gap.mean == pytest.approx(class_gaps(_pairs()).classes[0].gap.mean)


# -- pairing -------------------------------------------------------------------------------------------

def test_a_spen_pairs_with_the_gpt_the_store_named_and_only_that_one():
    rows = _pairs(seeds=(0, 1))
    # A GPT of another seed with a very different loss is never read; nor is one the store did not name.
    rows += _rows("gpt-9", "gpt", 0, {n: (v + 10 if v else v) for n, v in GPT.items()})
    # A SPEN whose GPT was not picked (its id is not among the rows), and one with none: left out.
    rows += _rows("lin-5", "spen", 5, _spen(5), gpt="gpt-5") + _rows("lin-6", "spen", 6, _spen(6))
    split = class_gaps(rows)
    assert split.seeds == 2
    assert split.classes[0].gap.mean == pytest.approx(1.0 + (SHIFT[0] + SHIFT[1]) / 2)
    # Two runs of one (settings, seed) (say, another thread count) add up: the same per token.
    twice = rows + [{**r, "run_id": "lin-0b"} for r in rows if r["run_id"] == "lin-0"]
    assert class_gaps(twice).classes[0].gap.mean == pytest.approx(split.classes[0].gap.mean)
    assert class_gaps(twice).seeds == 2


def test_the_variant_judged_is_spen_linear_else_the_first_spen_with_a_gpt():
    assert gap_variant(_pairs()) == ("linear", "state")
    only_tokens = _pairs(predictor="softmax_attention", attn_input="tokens")
    assert gap_variant(only_tokens) == ("softmax_attention", "tokens")
    assert class_gaps(only_tokens).variant == "SPEN softmax attention (tokens)"
    no_gpt = [r for r in _pairs() if r["model"] == "spen"]
    assert gap_variant(no_gpt) is None and class_gaps(no_gpt) is None and gap_verdicts(no_gpt) == []
    assert class_gaps([]) is None


def test_every_variant_against_spen_linear_within_settings_and_seed():
    rows = _pairs()
    # The raw-token control: far better on recall 1–16 (−0.5), a little worse on first (+0.05): flat overall?
    control = {"recall_1_16": -0.5, "recall_17_64": 0.0, "first": 0.05, "other": 0.0}
    for s in range(3):
        lin = _spen(s, SHIFT[s])
        tok = {n: (lin[n] + control[n]) if lin[n] is not None else None for n in lin}
        rows += _rows(f"tok-{s}", "spen", s, tok, predictor="softmax_attention", attn_input="tokens", gpt=f"gpt-{s}")
    # Seed 0 of other settings never pairs with the linear runs of group "g".
    rows += _rows("tok-h", "spen", 0, GPT, predictor="softmax_attention", attn_input="tokens", group="h")
    (d,) = variant_class_deltas(rows)
    assert d.variant == "SPEN softmax attention (tokens)" and d.seeds == 3
    by = dict(d.by_class)
    assert by["recall_1_16"].mean == pytest.approx(-0.5) and by["recall_1_16"].n == 3
    assert by["first"].mean == pytest.approx(0.05) and by["recall_257_plus"].n == 0
    assert d.overall.mean == pytest.approx((100 * -0.5 + 200 * 0.05) / 500)
    assert variant_class_deltas([r for r in rows if r["predictor"] != "linear"]) == []  # no reference


# -- the verdicts ----------------------------------------------------------------------------------------

def _verdict(rows, key):
    return next(v for v in gap_verdicts(rows) if v.claim.key == key)


def test_the_claims_are_judged_by_the_shared_rule_at_three_seeds():
    v = {x.claim.key: x for x in gap_verdicts(_pairs())}
    concentrates, grows = v["concentrates"], v["grows_with_distance"]
    deltas = [_pooled(_spen(s, SHIFT[s]), RECALL[:2]) - _pooled(GPT, RECALL[:2])
              - (_pooled(_spen(s, SHIFT[s]), NOT_RECALL) - _pooled(GPT, NOT_RECALL)) for s in range(3)]
    d = spread(deltas)
    assert concentrates.delta.mean == pytest.approx(d.mean) and concentrates.delta.std == pytest.approx(d.std)
    assert concentrates.verdict == judge(concentrates.delta) == "reproduced" and concentrates.word == "reproduced"
    assert concentrates.threshold == pytest.approx(VERDICT_K * d.std)
    assert concentrates.sentence.startswith("The gap concentrates on recall tokens")
    assert f"Δ = {d.mean:.4f}" in concentrates.sentence and "across 3 seeds" in concentrates.sentence
    assert concentrates.sentence.endswith("— reproduced.")
    # Nothing more than 64 back in these windows: not measured, and said why.
    assert grows.delta.n == 0 and grows.verdict == "not_measured" and grows.word == "not measured"
    assert "not measured by these runs" in grows.sentence and "train.seq_len" in grows.sentence


def test_far_recall_measured_and_the_gap_shrinking_with_distance_is_not_reproduced():
    tokens = {**TOKENS, "recall_65_256": 40, "recall_257_plus": 10}
    gap = {**GAP, "recall_65_256": 0.4, "recall_257_plus": 0.2}
    gpt = {**GPT, "recall_65_256": 3.0, "recall_257_plus": 3.0}
    rows = []
    for s in range(4):
        rows += _rows(f"gpt-{s}", "gpt", s, gpt, tokens=tokens)
        spen = {n: gpt[n] + gap[n] + (0.01 * s if n == "recall_1_16" else 0.0) for n in gpt}
        rows += _rows(f"lin-{s}", "spen", s, spen, gpt=f"gpt-{s}", tokens=tokens)
    grows = _verdict(rows, "grows_with_distance")
    far = (40 * 0.4 + 10 * 0.2) / 50
    expected = [far - (1.0 + 0.01 * s) for s in range(4)]
    assert grows.delta.n == 4 and grows.delta.mean == pytest.approx(sum(expected) / 4)
    assert grows.verdict == "not_reproduced" and grows.word == VERDICT_WORDS["not_reproduced"]


@pytest.mark.parametrize("seeds, word", [((0,), "not judged: 1 seed"), ((0, 1), "not judged: 2 seeds")])
def test_fewer_than_three_seeds_are_not_judged(seeds, word):
    concentrates = _verdict(_pairs(seeds=seeds), "concentrates")
    assert concentrates.verdict == "not_judged" and concentrates.word == word
    assert concentrates.delta.n == len(seeds) and concentrates.sentence.endswith(f"— {word}.")
    assert "Δ = " in concentrates.sentence


def test_a_gap_within_the_seeds_spread_is_inconclusive():
    rows = []
    for s, shift in enumerate((-0.8, 0.9, -0.2)):  # the recall gap swings across zero from seed to seed
        rows += _rows(f"gpt-{s}", "gpt", s, GPT)
        gap = {**GAP, "recall_1_16": shift, "recall_17_64": 0.0}
        rows += _rows(f"lin-{s}", "spen", s, _spen(s, 0.0, gap), gpt=f"gpt-{s}")
    concentrates = _verdict(rows, "concentrates")
    assert concentrates.verdict == "inconclusive" and concentrates.delta.n == 3


def test_the_n_gram_baselines_come_from_the_gpt_runs_rows_beside_the_gap():
    rows = _pairs()
    assert class_gaps(rows).baselines == {}  # runs stored before the baselines: no columns, nothing invented
    bigram = {n: 4.0 + i for i, n in enumerate(GPT)}
    for s in (0, 1, 2):  # the same windows on every seed; a SPEN's own rows are never read
        rows += _rows(f"gpt-{s}", "gpt", s, bigram, evaluation="bigram")
        rows += _rows(f"lin-{s}", "spen", s, {n: 99.0 for n in GPT}, evaluation="bigram")
    split = class_gaps(rows)
    assert set(split.baselines) == {"bigram"}
    for n, v in split.baselines["bigram"].items():
        if n == "all tokens":
            assert v == pytest.approx(_pooled(bigram, [c for c in GPT if TOKENS[c]]))
        else:
            assert v == (pytest.approx(bigram[n]) if TOKENS[n] else None), n
    # the gap itself is untouched by the baseline rows
    assert [c.gap.mean for c in split.classes] == [c.gap.mean for c in class_gaps(_pairs()).classes]


def test_the_matched_distance_and_rare_bigram_claims_read_their_own_partitions():
    # At matched positions (≥ 65) the far gap is smaller than the near one, although unmatched it was larger:
    # the claim reads the recall_by_position rows alone.
    pos_tokens = {n: 0 for n in POSITION_CLASSES}
    pos_tokens.update({"recall_1_16_at_65_128": 40, "recall_1_16_at_129_256": 60, "recall_65_256_at_65_128": 10,
                       "recall_65_256_at_129_256": 30, "not_recall": 360})
    big_tokens = {"recall_bigram_0": 20, "recall_bigram_1_9": 30, "recall_bigram_10_plus": 100, "not_recall": 350}
    gpt_pos = {n: 3.0 for n in POSITION_CLASSES}
    gpt_big = {n: 3.0 for n in BIGRAM_COUNT_CLASSES}
    rows = []
    for s in range(3):
        spen_pos = {n: 3.0 + (0.5 + 0.01 * s if n.startswith("recall_1_16") else 0.2) for n in POSITION_CLASSES}
        spen_big = {"recall_bigram_0": 4.0, "recall_bigram_1_9": 3.8 + 0.02 * s, "recall_bigram_10_plus": 3.1,
                    "not_recall": 3.05}
        rows += _rows(f"gpt-{s}", "gpt", s, GPT) + _rows(f"lin-{s}", "spen", s, _spen(s, SHIFT[s]), gpt=f"gpt-{s}")
        for part, tokens, gpt, spen in (("recall_by_position", pos_tokens, gpt_pos, spen_pos),
                                        ("recall_by_bigram_count", big_tokens, gpt_big, spen_big)):
            rows += _rows(f"gpt-{s}", "gpt", s, gpt, partition=part, tokens=tokens)
            rows += _rows(f"lin-{s}", "spen", s, spen, gpt=f"gpt-{s}", partition=part, tokens=tokens)
    matched = _verdict(rows, "grows_with_distance_matched")
    assert matched.delta.n == 3 and matched.delta.mean == pytest.approx(0.2 - (0.5 + 0.01))
    assert matched.verdict == "not_reproduced" and "position ≥ 65" in matched.sentence
    rare = _verdict(rows, "rare_bigram")
    expected = [(20 * 1.0 + 30 * (0.8 + 0.02 * s)) / 50 - 0.1 for s in range(3)]
    assert rare.delta.mean == pytest.approx(sum(expected) / 3) and rare.verdict == "reproduced"
    # Runs stored before the partitions: not measured, and said why.
    old = {v.claim.key: v for v in gap_verdicts(_pairs())}
    assert old["rare_bigram"].verdict == old["grows_with_distance_matched"].verdict == "not_measured"
    assert "runs stored before the split" in old["rare_bigram"].sentence


def test_copy_closes_recall_is_the_gap_closed_by_each_models_copy_mix():
    rows = _pairs()
    assert _verdict(rows, "copy_closes_recall").verdict == "not_measured"  # no copy_mix rows yet
    for s in range(3):
        # With the copy mixed in, both models gain on recall 1–16; SPEN gains 0.6 more there, 0.05 more on first.
        gpt_mix = {n: (v - 0.5 if n.startswith("recall") else v) if v is not None else None for n, v in GPT.items()}
        spen = _spen(s, SHIFT[s])
        spen_mix = {n: (v - 1.1 - 0.01 * s if n.startswith("recall") else v - (0.05 if n == "first" else 0.0))
                    if v is not None else None for n, v in spen.items()}
        rows += _rows(f"gpt-{s}", "gpt", s, gpt_mix, evaluation="copy_mix")
        rows += _rows(f"lin-{s}", "spen", s, spen_mix, gpt=f"gpt-{s}", evaluation="copy_mix")
    v = _verdict(rows, "copy_closes_recall")
    closed_rest = 200 * 0.05 / 350  # only first (200 of the 350 first-or-other tokens) closes 0.05
    expected = [(0.6 + 0.01 * s) - closed_rest for s in range(3)]
    assert v.delta.n == 3 and v.delta.mean == pytest.approx(sum(expected) / 3)
    assert v.verdict == "reproduced"
    # the copy rows never enter the final gap
    assert class_gaps(rows).classes[0].gap.mean == pytest.approx(class_gaps(_pairs()).classes[0].gap.mean)
