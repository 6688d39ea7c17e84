"""The boundary study's tasks: pure, shared where they should be, MQAR as zoology draws it, and floors that
say what a cell must beat before its accuracy speaks of memory k back."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from ema_core.studies.boundary.tasks import (CATEGORIES, IGNORE, MQAR_POWER_A, STOP, Difficulty, TaskConfig, category_of, chance,
                               content_map, count_table_accuracy, exclusion_floor, make_data, mqar_fits,
                               mqar_no_binding_accuracy, task_seed)

SMALL = TaskConfig(seq_len=24, lag_vocab=16, mqar_vocab=64, n_train=64, n_dev=16, n_test=32)
GRAMMAR = SMALL.model_copy(update={"words_per_category": 8})  # the templates (ρ = 1) take fewer words
# Enough positions for a count table to tell 0.25 from 0.45 (the floors' tests).
FLOORED = TaskConfig(seq_len=32, n_train=2048, n_dev=256, n_test=512)
# ρ of each config above when a test reads it as a stream: SMALL and FLOORED independent, GRAMMAR templates.
RHO = {id(SMALL): 0.0, id(GRAMMAR): 1.0, id(FLOORED): 0.0}


def agree(task: str, k: int, cfg: TaskConfig = SMALL, rho: float | None = None) -> Difficulty:
    return Difficulty(task, k=k, seq_len=cfg.seq_len, redundancy=RHO[id(cfg)] if rho is None else rho)


@pytest.mark.parametrize("cfg", [SMALL, GRAMMAR], ids=["independent", "templates"])
def test_every_task_is_a_pure_function_of_config_seed_and_split(cfg):
    for d in (agree("agree_structure", 2, cfg), agree("agree_content", 2, cfg), agree("agree_content4", 2, cfg),
              agree("lag_identity", 3, cfg), Difficulty("mqar", pairs=4, seq_len=24)):
        a, b = make_data(d, cfg, 5, "train"), make_data(d, cfg, 5, "train")
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
        other_split, other_seed = make_data(d, cfg, 5, "test"), make_data(d, cfg, 6, "train")
        assert not torch.equal(a.tokens[:32], other_split.tokens[:32])
        assert not torch.equal(a.tokens, other_seed.tokens)
        assert a.tokens.dtype == torch.int64 and a.tokens.shape == (cfg.n_train, d.seq_len)
        assert 0 <= int(a.tokens.min()) and int(a.tokens.max()) < a.vocab and int(a.targets.max()) < a.n_classes


@pytest.mark.parametrize("cfg", [SMALL, GRAMMAR], ids=["independent", "templates"])
def test_the_agreement_variants_share_sequences_and_positions_and_differ_only_in_the_label(cfg):
    s = make_data(agree("agree_structure", 3, cfg), cfg, 1, "dev")
    c = make_data(agree("agree_content", 3, cfg), cfg, 1, "dev")
    c4 = make_data(agree("agree_content4", 3, cfg), cfg, 1, "dev")
    assert torch.equal(s.tokens, c.tokens) and torch.equal(s.tokens, c4.tokens)
    assert torch.equal(s.targets == IGNORE, c.targets == IGNORE) and torch.equal(s.targets == IGNORE, c4.targets == IGNORE)
    tok = s.tokens.numpy()
    cats = category_of(tok, cfg.words_per_category)
    scored = s.targets.numpy() != IGNORE
    t_idx = np.nonzero(scored)
    # the label at t is the category (or the map) of the token 3 back, and never of a full stop
    back = tok[t_idx[0], t_idx[1] - 3]
    assert (back != STOP).all() and (t_idx[1] >= 3).all()
    assert (s.targets.numpy()[t_idx] == cats[t_idx[0], t_idx[1] - 3]).all()
    assert (c.targets.numpy()[t_idx] == content_map(cfg, 1)[back]).all()
    assert (c4.targets.numpy()[t_idx] == content_map(cfg, 1, 4)[back]).all()
    assert s.n_classes == len(CATEGORIES) == c4.n_classes and c.n_classes == 2


def test_the_independent_structure_has_no_stops_and_every_category_and_word_uniform():
    d = make_data(agree("agree_structure", 1), SMALL.model_copy(update={"n_train": 4096}), 0, "train")
    tok = d.tokens.numpy()
    assert (tok != STOP).all()  # every position is scored from t ≥ k on
    assert (d.targets.numpy()[:, 1:] != IGNORE).all()
    counts = np.bincount(tok.ravel() - 1, minlength=4 * SMALL.words_per_category) / tok.size
    assert np.allclose(counts, 1 / counts.size, rtol=0.1)


def test_the_templates_keep_their_grammar():
    tok = make_data(agree("agree_structure", 1, GRAMMAR), GRAMMAR, 0, "train").tokens.numpy()
    cats = category_of(tok, GRAMMAR.words_per_category)
    allowed = {(0, 2), (2, 3), (3, 0), (0, 1), (1, 2), (3, -1), (2, -1), (-1, 0), (-1, 2), (-1, 1), (3, 2)}
    pairs = set(zip(cats[:, :-1].ravel().tolist(), cats[:, 1:].ravel().tolist()))
    assert pairs <= allowed and (cats == -1).any()


def test_the_content_map_is_balanced_inside_every_category_so_a_category_says_nothing_of_it():
    m = content_map(SMALL, 3)
    W = SMALL.words_per_category
    assert m[STOP] == 0
    for c in range(len(CATEGORIES)):
        assert m[1 + c * W: 1 + (c + 1) * W].sum() == W // 2
    assert not np.array_equal(m, content_map(SMALL, 4))  # the map is drawn from the seed
    # the four-way map: as many labels as the category, W / 4 words of each in every category
    m4 = content_map(SMALL, 3, 4)
    for c in range(len(CATEGORIES)):
        assert np.bincount(m4[1 + c * W: 1 + (c + 1) * W], minlength=4).tolist() == [W // 4] * 4
    assert not np.array_equal(m4 % 2, m)  # its own draw, not a refinement of the two-way map
    with pytest.raises(ValueError, match="2 to words_per_category"):
        content_map(SMALL, 3, 1)


def test_the_two_way_map_is_the_one_runs_stored_before_the_four_way_one():
    # The map of an odd number of words as the earlier code drew it: W // 2 words of class 1.
    cfg = TaskConfig(words_per_category=17)
    rng = np.random.default_rng(task_seed(2, "content_map"))
    for c in range(len(CATEGORIES)):
        half = np.zeros(17, dtype=np.int64)
        half[rng.permutation(17)[: 17 // 2]] = 1
        assert content_map(cfg, 2)[1 + c * 17: 1 + (c + 1) * 17].tolist() == half.tolist()


def test_redundancy_mixes_the_two_streams_row_by_row():
    cfg = FLOORED.model_copy(update={"n_train": 4000})
    shares = []
    for rho in (0.0, 0.25, 0.5, 1.0):
        tok = make_data(agree("agree_structure", 2, cfg, rho), cfg, 0, "train").tokens.numpy()
        templated = (tok == STOP).any(axis=1)  # a template row holds a full stop; an independent one never
        shares.append(templated.mean())
    assert shares[0] == 0 and shares[-1] == 1
    assert abs(shares[1] - 0.25) < 0.03 and abs(shares[2] - 0.5) < 0.03
    with pytest.raises(ValueError, match=r"redundancy must be in \[0, 1\]"):
        make_data(agree("agree_structure", 2, cfg, 1.5), cfg, 0, "train")
    with pytest.raises(ValueError, match="words_per_category: a redundancy below 1"):
        make_data(agree("agree_structure", 2, GRAMMAR, 0.5), GRAMMAR, 0, "train")


def test_lag_identity_names_the_token_k_back():
    d = make_data(agree("lag_identity", 4), SMALL, 0, "train")
    assert (d.targets[:, :4] == IGNORE).all()
    assert torch.equal(d.targets[:, 4:], d.tokens[:, :-4])


def test_mqar_binds_distinct_keys_of_the_first_half_to_distinct_values_of_the_second_and_queries_each_once():
    P, T, V = 5, 40, SMALL.mqar_vocab
    q = make_data(Difficulty("mqar", pairs=P, seq_len=T), SMALL, 0, "train")
    assert q.vocab == V and q.n_classes == V // 2
    offsets = set()
    for row, target in zip(q.tokens.tolist(), q.targets.tolist()):
        # the block starts where the first queried key was bound (fillers may look like pairs, never like
        # one of the row's keys)
        scored = [t for t in range(T) if target[t] != IGNORE]
        o = min(row.index(row[t]) for t in scored)
        offsets.add(o)
        keys, values = row[o: o + 2 * P: 2], row[o + 1: o + 2 * P: 2]
        assert len(set(keys)) == P and all(1 <= k < V // 2 for k in keys)
        assert len(set(values)) == P and all(V // 2 <= v < V for v in values)
        bound = dict(zip(keys, values))
        # every key occurs twice, bound then queried; only the queries are scored, with the value's class
        assert sorted(row[t] for t in scored) == sorted(keys)
        assert all(row.count(k) == 2 for k in keys)
        assert all(t >= o + 2 * P and (t - o) % 2 == 0 for t in scored)
        assert all(target[t] == bound[row[t]] - V // 2 for t in scored)
    assert len(offsets) > 5  # the block is not at fixed positions
    assert max(offsets) <= T - 4 * P


@pytest.mark.parametrize("P, T", [(2, 64), (8, 64)], ids=["2 pairs", "the quick size"])
def test_mqar_query_gaps_follow_zoologys_power_law(P, T):
    # The first key of the block is queried at the first slot drawn: p(slot i) ∝ (i + 1)^(a − 1) over
    # the row's free slots (i = 0 is right after the block).  At the quick size (4·pairs = T/2) the
    # free slots outnumber the queries, so the draw is not a permutation of every slot.
    cfg = SMALL.model_copy(update={"n_train": 8000})
    q = make_data(Difficulty("mqar", pairs=P, seq_len=T), cfg, 0, "train")
    tok, tgt = q.tokens.numpy(), q.targets.numpy()
    seen = np.zeros((T - 2 * P) // 2)
    expected = np.zeros_like(seen)
    w = (np.arange(len(seen)) + 1.0) ** (MQAR_POWER_A - 1)
    for row, target in zip(tok, tgt):
        scored = np.nonzero(target != IGNORE)[0]
        bound_at = [int(np.argmax(row == row[t])) for t in scored]  # each queried key's first occurrence
        o = min(bound_at)  # the block starts with the first key
        first_key_query = scored[bound_at.index(o)]
        seen[(first_key_query - o - 2 * P) // 2] += 1
        free = (T - o - 2 * P) // 2
        expected[:free] += w[:free] / w[:free].sum()
    seen, expected = seen / len(tok), expected / len(tok)
    assert np.abs(seen - expected).sum() / 2 < 0.05  # total variation
    assert seen[0] > 2.5 * seen[5]  # most queries soon after the block, as the power law has it


def test_an_mqar_size_that_does_not_fit_is_refused_plainly():
    assert mqar_fits(16, 64) and not mqar_fits(17, 64) and not mqar_fits(0, 64)
    assert mqar_fits(31, 128, vocab=64) and not mqar_fits(32, 128, vocab=64)
    with pytest.raises(ValueError, match=r"mqar: 20 pairs need T ≥ 80 \(4·pairs\), got T=64"):
        make_data(Difficulty("mqar", pairs=20, seq_len=64), SMALL, 0, "train")
    with pytest.raises(ValueError, match=r"mqar: 40 pairs need data.mqar_vocab ≥ 82"):
        make_data(Difficulty("mqar", pairs=40, seq_len=256), SMALL, 0, "train")
    with pytest.raises(ValueError, match="mqar_vocab"):
        TaskConfig(mqar_vocab=255)
    with pytest.raises(ValidationError, match="words_per_category"):
        TaskConfig(words_per_category=3)


def test_chance_is_the_training_majority_label_scored_on_test():
    d = agree("agree_structure", 1, GRAMMAR)
    train, test = make_data(d, GRAMMAR, 0, "train"), make_data(d, GRAMMAR, 0, "test")
    y = train.targets[train.targets != IGNORE]
    majority = int(torch.bincount(y).argmax())
    t = test.targets[test.targets != IGNORE]
    assert chance(train, test) == pytest.approx(max(0.25, float((t == majority).double().mean())))
    assert 1 / len(CATEGORIES) <= chance(train, test) < 1
    q = Difficulty("mqar", pairs=2, seq_len=8)
    few = TaskConfig(mqar_vocab=128, n_train=16, n_dev=16, n_test=16)
    assert chance(make_data(q, few, 0, "train"), make_data(q, few, 0, "test")) >= 1 / 64  # never below a guess


def test_under_the_independent_structure_no_other_position_says_the_category_k_back():
    # A count table over the categories after t − k (what the grammar gave away: 0.76 at k = 8)
    # and on both sides of it: at chance here, well above it under the templates.
    k = 8
    for rho, at_most, at_least in ((0.0, 0.28, 0.0), (1.0, 1.0, 0.65)):
        d = agree("agree_structure", k, FLOORED, rho)
        for offsets in (tuple(range(1, k + 1)), (-2, -1, 1, 2), (1,)):
            acc = count_table_accuracy(d, FLOORED, 0, [(), offsets])
            assert at_least <= acc <= at_most, (rho, offsets, acc)


def test_the_exclusion_floor_is_chance_where_nothing_else_says_the_label_and_rises_with_redundancy():
    for task, classes in (("agree_structure", 4), ("agree_content", 2), ("agree_content4", 4),
                          ("lag_identity", FLOORED.lag_vocab)):
        for k in (1, 8):
            floor = exclusion_floor(agree(task, k, FLOORED), FLOORED, 0)
            assert abs(floor - 1 / classes) < 0.03, (task, k, floor)
    # the category's floor rises with ρ; the content maps' stay at chance, as the category says nothing of them
    floors = [exclusion_floor(agree("agree_structure", 8, FLOORED, rho), FLOORED, 0) for rho in (0, 0.5, 1)]
    assert floors[0] < 0.3 and floors[0] + 0.15 < floors[1] < floors[2] - 0.15, floors
    structure = agree("agree_structure", 8, FLOORED, 1.0)
    train, test = make_data(structure, FLOORED, 0, "train"), make_data(structure, FLOORED, 0, "test")
    assert floors[2] > chance(train, test) + 0.2
    for task, classes in (("agree_content", 2), ("agree_content4", 4)):
        assert abs(exclusion_floor(agree(task, 8, FLOORED, 1.0), FLOORED, 0) - 1 / classes) < 0.03
    with pytest.raises(ValueError, match="4·pairs"):
        exclusion_floor(Difficulty("mqar", pairs=20, seq_len=64), SMALL, 0)


def test_mqars_floor_knows_the_task_a_rule_without_binding_reads_the_query_order():
    # The issue's degenerate size (8 pairs, T = 32, every even slot after the block a query): "query i
    # asks for pair i" scores about 0.21, a guess among the row's values 1/8; the analytic floor runs
    # stored before was 1 / (V/2 − pairs + 1) ≈ 0.008.
    cfg = TaskConfig(n_dev=256, n_test=512)
    d = Difficulty("mqar", pairs=8, seq_len=32)
    guess = mqar_no_binding_accuracy(d, cfg, 0, [()])
    assert abs(guess - 1 / 8) < 0.02
    assert 0.18 < exclusion_floor(d, cfg, 0) == mqar_no_binding_accuracy(d, cfg, 0) < 0.25
    # at the quick size (4·pairs ≤ T/2) still well above the old floor, and above 0.05
    wide = exclusion_floor(Difficulty("mqar", pairs=8, seq_len=64), cfg, 0)
    assert 0.05 < wide < 0.25
    # the rule knows no binding: on rows where every query asked for its pair in order it would be
    # perfect; it is not, since the power law leaves the order partly random
    assert exclusion_floor(d, cfg, 0) < 0.5
    with pytest.raises(ValueError, match="reads rank, slot, not value"):
        mqar_no_binding_accuracy(d, cfg, 0, [(), ("value",)])
