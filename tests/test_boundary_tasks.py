"""The boundary study's tasks: pure, shared where they should be, MQAR as zoology draws it, and floors that
say what a cell must beat before its accuracy speaks of memory k back."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from ema_core.boundary import (CATEGORIES, IGNORE, MQAR_POWER_A, STOP, Difficulty, TaskConfig, category_of, chance,
                               content_map, count_table_accuracy, exclusion_floor, make_data, mqar_fits)

SMALL = TaskConfig(seq_len=24, lag_vocab=16, mqar_vocab=64, n_train=64, n_dev=16, n_test=32)
GRAMMAR = SMALL.model_copy(update={"structure": "templates", "words_per_category": 8})
# Enough positions for a count table to tell 0.25 from 0.45 (the floors' tests).
FLOORED = TaskConfig(seq_len=32, n_train=2048, n_dev=256, n_test=512)
FLOORED_GRAMMAR = FLOORED.model_copy(update={"structure": "templates"})


def agree(task: str, k: int, cfg: TaskConfig = SMALL) -> Difficulty:
    return Difficulty(task, k=k, seq_len=cfg.seq_len)


@pytest.mark.parametrize("cfg", [SMALL, GRAMMAR], ids=["independent", "templates"])
def test_every_task_is_a_pure_function_of_config_seed_and_split(cfg):
    for d in (agree("agree_structure", 2, cfg), agree("agree_content", 2, cfg), agree("lag_identity", 3, cfg),
              Difficulty("mqar", pairs=4, seq_len=24)):
        a, b = make_data(d, cfg, 5, "train"), make_data(d, cfg, 5, "train")
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
        other_split, other_seed = make_data(d, cfg, 5, "test"), make_data(d, cfg, 6, "train")
        assert not torch.equal(a.tokens[:32], other_split.tokens[:32])
        assert not torch.equal(a.tokens, other_seed.tokens)
        assert a.tokens.dtype == torch.int64 and a.tokens.shape == (cfg.n_train, d.seq_len)
        assert 0 <= int(a.tokens.min()) and int(a.tokens.max()) < a.vocab and int(a.targets.max()) < a.n_classes


@pytest.mark.parametrize("cfg", [SMALL, GRAMMAR], ids=["independent", "templates"])
def test_the_two_agreement_variants_share_sequences_and_positions_and_differ_only_in_the_label(cfg):
    s = make_data(agree("agree_structure", 3, cfg), cfg, 1, "dev")
    c = make_data(agree("agree_content", 3, cfg), cfg, 1, "dev")
    assert torch.equal(s.tokens, c.tokens)
    assert torch.equal(s.targets == IGNORE, c.targets == IGNORE)
    tok = s.tokens.numpy()
    cats = category_of(tok, cfg.words_per_category)
    scored = s.targets.numpy() != IGNORE
    t_idx = np.nonzero(scored)
    # the label at t is the category (or the map) of the token 3 back, and never of a full stop
    back = tok[t_idx[0], t_idx[1] - 3]
    assert (back != STOP).all() and (t_idx[1] >= 3).all()
    assert (s.targets.numpy()[t_idx] == cats[t_idx[0], t_idx[1] - 3]).all()
    assert (c.targets.numpy()[t_idx] == content_map(cfg, 1)[back]).all()
    assert s.n_classes == len(CATEGORIES) and c.n_classes == 2


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


def test_mqar_query_gaps_follow_zoologys_power_law():
    # The first key of the block is queried at the first slot drawn: p(slot i) ∝ (i + 1)^(a − 1) over
    # the row's free slots (i = 0 is right after the block).
    P, T = 2, 64
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
    with pytest.raises(ValidationError, match="words_per_category: the independent structure needs at least 16"):
        TaskConfig(words_per_category=8)
    TaskConfig(words_per_category=8, structure="templates")  # the grammar takes fewer


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
    for cfg, at_most, at_least in ((FLOORED, 0.28, 0.0), (FLOORED_GRAMMAR, 1.0, 0.65)):
        d = agree("agree_structure", k, cfg)
        for offsets in (tuple(range(1, k + 1)), (-2, -1, 1, 2), (1,)):
            acc = count_table_accuracy(d, cfg, 0, [(), offsets])
            assert at_least <= acc <= at_most, (cfg.structure, offsets, acc)


def test_the_exclusion_floor_is_chance_where_nothing_else_says_the_label_and_above_it_under_the_templates():
    for task, classes in (("agree_structure", 4), ("agree_content", 2), ("lag_identity", FLOORED.lag_vocab)):
        for k in (1, 8):
            floor = exclusion_floor(agree(task, k, FLOORED), FLOORED, 0)
            assert abs(floor - 1 / classes) < 0.03, (task, k, floor)
    structure = agree("agree_structure", 8, FLOORED_GRAMMAR)
    train, test = make_data(structure, FLOORED_GRAMMAR, 0, "train"), make_data(structure, FLOORED_GRAMMAR, 0, "test")
    assert exclusion_floor(structure, FLOORED_GRAMMAR, 0) > chance(train, test) + 0.2
    assert abs(exclusion_floor(agree("agree_content", 8, FLOORED_GRAMMAR), FLOORED_GRAMMAR, 0) - 0.5) < 0.03
    # MQAR: everything but the queried value seen; it is uniform over the values the row has not used
    assert exclusion_floor(Difficulty("mqar", pairs=8, seq_len=64), SMALL, 0) == pytest.approx(1 / (32 - 7))
    with pytest.raises(ValueError, match="4·pairs"):
        exclusion_floor(Difficulty("mqar", pairs=20, seq_len=64), SMALL, 0)
