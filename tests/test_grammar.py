import doctest
from collections import Counter, defaultdict

import numpy as np
import pydantic
import pytest

from ema_core import grammar
from ema_core.grammar import (
    CATEGORY_WORDS,
    EMBEDDED_STRUCTURES,
    N_WORDS,
    OPEN_CLASS,
    ROLE_INDEX,
    ROLES,
    SPLITS,
    STRUCTURES,
    GrammarConfig,
    from_text,
    is_held_out,
    novel_vocabulary,
    positions,
    previous_category,
    sample_sentences,
    stream,
    template,
    vocabulary,
)

SMALL = GrammarConfig()
N = 600


def test_the_papers_counts():
    vocab = vocabulary()
    assert len(vocab) == 147 == N_WORDS
    assert [w.id for w in vocab] == list(range(147))
    assert len({w.text for w in vocab}) == 147
    assert sum(len(v) for v in CATEGORY_WORDS.values()) == 147
    assert len(STRUCTURES) == 6
    assert len(ROLES) == 20 and len({r.name for r in ROLES}) == 20


def test_docstring_worked_example_runs():
    assert doctest.testmod(grammar).failed == 0


def _role_categories(depths=(1, 2, 3)):
    """role -> categories that fill it, over every template the sampler can use."""
    fills = defaultdict(set)
    for s in range(len(STRUCTURES)):
        for d in depths:
            for cat, role in template(s, d):
                fills[role].add(cat)
    return fills


def test_every_role_used_and_lexical_flags_follow_the_definition():
    fills = _role_categories()
    assert set(fills) == {r.name for r in ROLES}
    roles_of_category = defaultdict(set)
    for role, cats in fills.items():
        for c in cats:
            roles_of_category[c].add(role)
    for r in ROLES:
        # lexical <=> the word class filling it fills nothing else, so the word decides the role
        derived = all(roles_of_category[c] == {r.name} for c in fills[r.name])
        assert r.lexical == derived, r.name
    structure_dependent = {r.name for r in ROLES if not r.lexical}
    assert {"agent_det", "patient_det", "agent_noun", "patient_noun", "emb_verb", "verb_trans"} <= structure_dependent
    assert {r.name for r in ROLES if r.lexical} == {
        "verb_intrans", "prep", "rel_pronoun", "complementiser", "verb_comp", "end"}


def test_sentences_follow_their_templates():
    vocab = vocabulary() + novel_vocabulary() + novel_vocabulary("tuning")
    for split in SPLITS:
        for s in sample_sentences(SMALL, N, 0, split):
            depth = SMALL.deep_depth if split == "deep" else 1
            t = template(s.structure, depth)
            assert [vocab[i].category for i in s.tokens] == [c for c, _ in t]
            assert list(s.roles) == [ROLE_INDEX[r] for _, r in t]


def test_deterministic_per_config_seed_split():
    for split in SPLITS:
        assert sample_sentences(SMALL, N, 7, split) == sample_sentences(SMALL, N, 7, split)
        assert sample_sentences(SMALL, N, 7, split) != sample_sentences(SMALL, N, 8, split)
    # asking for more sentences extends the same draw rather than reshuffling it
    more = sample_sentences(SMALL, 650, 7, "train")
    assert more[:600] == sample_sentences(SMALL, N, 7, "train")


def test_no_sentence_shared_between_train_and_test_sets():
    cfg, n = GrammarConfig(), 3000
    train = {s.tokens for seed in (0, 1) for s in sample_sentences(cfg, n, seed, "train")}
    for seed in (0, 1, 2):
        for split in ("test", "deep", "novel"):
            assert train.isdisjoint(s.tokens for s in sample_sentences(cfg, n, seed, split))
    # by construction, not by luck: the partition is a property of the tokens
    assert not any(is_held_out(t, cfg.held_out_fraction) for t in train)
    # the short structures are small enough that draws repeat, so disjointness needs the partition
    assert len(train) < 2 * n


def test_novel_words_are_new_ids_of_the_same_categories_and_unseen_in_train():
    novel = novel_vocabulary()
    assert [w.id for w in novel] == list(range(147, 147 + len(novel)))
    assert Counter(w.category for w in novel) == Counter({c: len(CATEGORY_WORDS[c]) for c in OPEN_CLASS})
    assert not {w.text for w in novel} & {w.text for w in vocabulary()}
    cat = {w.id: w.category for w in vocabulary() + novel}
    novel_ids = {w.id for w in novel}
    seen = {t for seed in (0, 1) for s in sample_sentences(SMALL, N, seed, "train") for t in s.tokens}
    used = set()
    for s in sample_sentences(SMALL, N, 0, "novel"):
        for t in s.tokens:
            assert (t >= 147) == (cat[t] in OPEN_CLASS)
            used.add(t)
    assert used & novel_ids and not used & novel_ids & seen
    assert max(seen) < 147


def test_the_tuning_pool_is_a_second_set_of_new_words_disjoint_from_the_scored_one():
    novel, tuning = novel_vocabulary(), novel_vocabulary("tuning")
    assert [w.id for w in tuning] == list(range(147 + len(novel), 147 + 2 * len(novel)))
    assert [w.category for w in tuning] == [w.category for w in novel]
    texts = [w.text for w in vocabulary() + novel + tuning]
    assert len(set(texts)) == len(texts)  # no spelling shared by any two words
    tuning_ids, novel_ids = {w.id for w in tuning}, {w.id for w in novel}
    for seed in (0, 1):
        used = {t for s in sample_sentences(SMALL, N, seed, "novel_dev") for t in s.tokens if t >= 147}
        assert used and used <= tuning_ids
        scored = {t for s in sample_sentences(SMALL, N, seed, "novel") for t in s.tokens if t >= 147}
        assert scored <= novel_ids
    # Appending the split left the other splits' draws as they were (each split's stream is its index).
    assert SPLITS[:4] == ("train", "test", "novel", "deep")
    with pytest.raises(ValueError, match="pool"):
        novel_vocabulary("test")


def test_positions_and_previous_categories_of_a_stream():
    sents = [from_text("the dog slept .", structure=0), from_text("a cat saw the bird .", structure=1)]
    tokens, _, start = stream(sents)
    assert positions(start).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]
    cats = [grammar.CATEGORIES[c] if c < len(grammar.CATEGORIES) else "start"
            for c in previous_category(tokens, start)]
    assert cats == ["start", "det", "noun", "verb_i", "start", "det", "noun", "verb_t", "det", "noun"]
    novel = sample_sentences(SMALL, 5, 0, "novel_dev")
    t, _, st = stream(novel)
    assert (previous_category(t, st)[st] == grammar.SENTENCE_START).all()  # every pool's words have a category


def test_deep_split_nests_embedded_clauses():
    cfg = GrammarConfig(deep_depth=3)
    deep = sample_sentences(cfg, 200, 0, "deep")
    assert {s.structure for s in deep} == set(EMBEDDED_STRUCTURES)
    emb = {ROLE_INDEX[r] for r in ("emb_verb", "emb_patient_det", "emb_patient_noun")}
    for s in deep:
        # one clause-introducing word per nested clause
        link = "rel_pronoun" if STRUCTURES[s.structure].name == "relative" else "complementiser"
        assert s.roles.count(ROLE_INDEX[link]) == 3
        assert emb <= set(s.roles)
    train_len = max(len(s.tokens) for s in sample_sentences(SMALL, N, 0, "train"))
    assert min(len(s.tokens) for s in deep) > train_len


def test_stream_concatenates_and_marks_sentence_starts():
    sents = sample_sentences(SMALL, N, 3, "train")
    tokens, roles, start = stream(sents)
    assert tokens.shape == roles.shape == start.shape == (sum(len(s.tokens) for s in sents),)
    assert start.dtype == bool and start.sum() == len(sents)
    # every sentence ends with "." and the next begins right after it
    end_id = vocabulary()[-1].id
    assert np.array_equal(start[1:], tokens[:-1] == end_id)
    assert start[0]
    pieces = np.split(tokens, np.flatnonzero(start)[1:])
    assert [tuple(p) for p in pieces] == [s.tokens for s in sents]
    assert tuple(roles[: len(sents[0].roles)]) == sents[0].roles
    t, r, m = stream([])
    assert t.shape == r.shape == m.shape == (0,)


def test_structure_weights_are_respected():
    only_transitive = GrammarConfig(structure_weights=(0, 1, 0, 0, 0, 0))
    assert {s.structure for s in sample_sentences(only_transitive, 100, 0, "test")} == {1}


def test_from_text_rejects_words_in_the_wrong_slot():
    with pytest.raises(ValueError, match="not a noun"):
        from_text("the slept dog .", structure=0)
    with pytest.raises(ValueError, match="slots"):
        from_text("the dog slept", structure=0)


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"n_sentences": 600}, "n_sentences"),  # how many is an argument of each draw, not a setting
        ({"structure_weights": (1, 1, 1)}, "structure_weights"),
        ({"structure_weights": (0,) * 6}, "structure_weights"),
        ({"structure_weights": (1, 1, 1, 1, 1, -1)}, "structure_weights"),
        ({"held_out_fraction": 0.9}, "held_out_fraction"),
        ({"deep_depth": 1}, "deep_depth"),
        ({"depth": 3}, "depth"),
    ],
)
def test_invalid_config_names_the_field(bad, field):
    with pytest.raises(pydantic.ValidationError, match=field):
        GrammarConfig(**bad)


def test_unknown_split_is_rejected():
    with pytest.raises(ValueError, match="split"):
        sample_sentences(SMALL, N, 0, "validation")


@pytest.mark.parametrize("n", [0, -1, 2.5, True, 10**7])
def test_a_count_of_sentences_that_is_not_one_is_refused(n):
    with pytest.raises(ValueError, match="n must be a whole number"):
        sample_sentences(SMALL, n, 0, "train")
