import doctest
import io
from collections import Counter, defaultdict

import numpy as np
import pydantic
import pytest
import torch

from ema_core import bigru
from ema_core.bigru import N_ROWS, PAD, UNK, BiGRUConfig, BiGRUTagger, encode, predict, train_bigru
from ema_core.protocol import Cancelled
from ema_core.grammar import (
    N_ROLES,
    N_WORDS,
    ROLE_INDEX,
    GrammarConfig,
    Sentence,
    from_text,
    sample_sentences,
    stream,
)

# Small enough that three trainings take a second or two; dropout, word dropout and two layers
# on, so that every random path of training is covered by the determinism tests.
TINY = BiGRUConfig(embed=8, hidden=16, layers=2, dropout=0.2, unk_dropout=0.1, batch=32, max_epochs=3)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # What the caller of train_bigru guarantees (one thread, deterministic algorithms); put back after.
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(det)
    torch.set_num_threads(threads)


def _splits(n_train: int, n_dev: int, seed: int = 0):
    # dev is the tail of a longer train draw: the train distribution, disjoint sentences' draws
    drawn = sample_sentences(GrammarConfig(), n_train + n_dev, seed, "train")
    return drawn[:n_train], drawn[n_train:]


@pytest.fixture(scope="module")
def tiny_data():
    return _splits(200, 50)


@pytest.fixture(scope="module")
def trained():
    """The default config (fewer epochs) on 600 sentences: the model the accuracy tests read."""
    train, dev = _splits(600, 150)
    events = []
    model, info = train_bigru(BiGRUConfig(max_epochs=12), train, dev, 0, log=lambda s, m: events.append((s, m)))
    return model, info, train, dev, events


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- config and documentation -------------------------------------------------------------------

def test_config_is_strict_and_bounded():
    cfg = BiGRUConfig()
    assert (cfg.embed, cfg.hidden, cfg.layers, cfg.unk_dropout) == (32, 64, 1, 0.05)
    with pytest.raises(pydantic.ValidationError):
        BiGRUConfig(seed=1)  # the seed is an argument, not a setting
    for bad in (dict(hidden=0), dict(dropout=1.0), dict(unk_dropout=-0.1), dict(lr=0), dict(patience=0)):
        with pytest.raises(pydantic.ValidationError):
            BiGRUConfig(**bad)
    with pytest.raises(pydantic.ValidationError):
        cfg.hidden = 8  # frozen
    assert all(f.description for f in BiGRUConfig.model_fields.values())


def test_docstring_examples_run():
    assert doctest.testmod(bigru).failed == 0


# --- unknown words ------------------------------------------------------------------------------

def test_every_unseen_id_is_unk():
    ids = np.array([0, 5, N_WORDS - 1, N_WORDS, N_WORDS + 1, 272, 10**9])
    assert encode(ids).tolist() == [0, 5, N_WORDS - 1, UNK, UNK, UNK, UNK]
    assert UNK == N_WORDS and PAD == N_WORDS + 1 and N_ROWS == N_WORDS + 2
    with pytest.raises(ValueError):
        encode([3, -1])
    novel = sample_sentences(GrammarConfig(), 200, 0, "novel")
    tokens, _, _ = stream(novel)
    assert (tokens >= N_WORDS).any()
    assert set(encode(tokens[tokens >= N_WORDS]).tolist()) == {UNK}


def test_unseen_words_never_touch_a_word_embedding():
    model = BiGRUTagger(TINY, torch.Generator().manual_seed(3)).eval()
    # A sentence made of unseen ids only: the gradient of every output reaches the UNK row and no other.
    tokens = torch.tensor([[N_WORDS, N_WORDS + 1, 200, 10**6, 5000]])
    model(tokens, torch.tensor([5])).sum().backward()
    touched = model.embedding.weight.grad.abs().sum(1).nonzero().flatten().tolist()
    assert touched == [UNK]
    # forward clamps too: a caller bypassing encode cannot reach a trained row either
    same = model(torch.full((1, 5), UNK), torch.tensor([5]))
    torch.testing.assert_close(model(tokens, torch.tensor([5])), same, rtol=0, atol=0)


def test_novel_predictions_do_not_depend_on_which_unseen_id(trained):
    model = trained[0]
    novel = sample_sentences(GrammarConfig(), 100, 0, "novel")
    relabelled = [Sentence(tuple(t if t < N_WORDS else t * 1000 + 7 for t in s.tokens), s.roles, s.structure)
                  for s in novel]
    np.testing.assert_array_equal(predict(model, novel), predict(model, relabelled))


# --- padding ------------------------------------------------------------------------------------

def test_padding_and_batch_mates_do_not_change_a_sentence():
    model = BiGRUTagger(TINY, torch.Generator().manual_seed(4)).eval()
    short = from_text("the dog slept .", structure=0)
    long_ = from_text("the dog who chased a cat slept .", structure=4)
    deep = sample_sentences(GrammarConfig(), 5, 1, "deep")  # the longest sentences there are
    n = len(short.tokens)
    with torch.no_grad():
        alone = model(torch.tensor([short.tokens]), torch.tensor([n]))[0]
        L = max(len(s.tokens) for s in deep) + 3
        # the short sentence in the middle of a batch, padded far past its end with real word ids
        # (not PAD) as garbage: neither the padding length nor its content may reach it
        batch = [list(s.tokens) for s in deep[:2]] + [list(short.tokens)] + [list(long_.tokens)]
        padded = torch.tensor([b + [7] * (L - len(b)) for b in batch])
        lengths = torch.tensor([len(b) for b in batch])
        mixed = model(padded, lengths)[2, :n]
    torch.testing.assert_close(mixed, alone, rtol=1e-5, atol=1e-6)
    assert torch.equal(mixed.argmax(-1), alone.argmax(-1))
    # the public path: predict on a sentence alone equals its slice of a mixed batch
    together = predict(model, [*deep, short, long_])
    start = sum(len(s.tokens) for s in deep)
    np.testing.assert_array_equal(together[start : start + n], predict(model, [short]))


# --- determinism --------------------------------------------------------------------------------

def test_same_seed_same_model_other_seed_other_model(tiny_data):
    train, dev = tiny_data
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(1)
        m1, info1 = train_bigru(TINY, train, dev, seed=11)
        torch.manual_seed(2)  # the global RNG is not read ...
        rng_before = torch.get_rng_state()
        m2, info2 = train_bigru(TINY, train, dev, seed=11)
        assert torch.equal(torch.get_rng_state(), rng_before)  # ... nor moved
        m3, _ = train_bigru(TINY, train, dev, seed=12)
    finally:
        torch.set_rng_state(saved)
    assert _same_state(m1.state_dict(), m2.state_dict())
    np.testing.assert_array_equal(predict(m1, dev), predict(m2, dev))
    assert {k: v for k, v in info1.items() if k != "seconds"} == {k: v for k, v in info2.items() if k != "seconds"}
    s1, s3 = m1.state_dict(), m3.state_dict()
    assert not any(torch.equal(s1[k], s3[k]) for k in s1 if k != "embedding.weight")
    assert not torch.equal(s1["embedding.weight"], s3["embedding.weight"])


def test_initialisation_comes_from_the_generator_alone():
    before = torch.get_rng_state()
    a = BiGRUTagger(TINY, torch.Generator().manual_seed(1)).state_dict()
    assert torch.equal(torch.get_rng_state(), before)
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(99)
        b = BiGRUTagger(TINY, torch.Generator().manual_seed(1)).state_dict()
    finally:
        torch.set_rng_state(saved)
    c = BiGRUTagger(TINY, torch.Generator().manual_seed(2)).state_dict()
    assert _same_state(a, b) and not _same_state(a, c)
    assert not a["embedding.weight"][PAD].any()  # the padding row is zero


def test_state_dict_round_trips_as_plain_tensors(trained):
    model, _, _, dev, _ = trained
    state = model.state_dict()
    assert all(type(v) is torch.Tensor for v in state.values())
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    again = BiGRUTagger(model.cfg)
    again.load_state_dict(torch.load(buf, weights_only=True))
    np.testing.assert_array_equal(predict(again, dev), predict(model, dev))


# --- it learns ----------------------------------------------------------------------------------

def _majority_per_word(train: list[Sentence], sentences: list[Sentence]) -> np.ndarray:
    counts: dict[int, Counter] = defaultdict(Counter)
    for s in train:
        for t, r in zip(s.tokens, s.roles):
            counts[t][r] += 1
    overall = Counter(r for s in train for r in s.roles).most_common(1)[0][0]
    best = {t: c.most_common(1)[0][0] for t, c in counts.items()}
    tokens, _, _ = stream(sentences)
    return np.array([best.get(int(t), overall) for t in tokens])


def test_learns_the_roles_beyond_word_identity(trained):
    model, info, train, dev, _ = trained
    test = sample_sentences(GrammarConfig(), 300, 0, "test")
    _, roles, _ = stream(test)
    pred = predict(model, test)
    assert pred.shape == roles.shape and pred.dtype.kind == "i"
    assert pred.min() >= 0 and pred.max() < N_ROLES
    acc = float((pred == roles).mean())
    baseline = float((_majority_per_word(train, test) == roles).mean())
    assert baseline < 0.9  # determiners and transitive verbs are ambiguous by word alone
    assert acc > 0.95 and acc > baseline + 0.05, (acc, baseline)
    # structure-dependent roles in particular: the determiners' five roles
    dets = np.isin(roles, [ROLE_INDEX[r] for r in ("agent_det", "patient_det", "pobj_det",
                                                   "emb_agent_det", "emb_patient_det")])
    assert float((pred[dets] == roles[dets]).mean()) > 0.95


def test_info_log_and_best_weights(trained):
    model, info, _, dev, events = trained
    assert set(info) >= {"epochs", "best_epoch", "best_dev_acc", "seconds", "params"}
    assert 1 <= info["best_epoch"] <= info["epochs"] <= 12
    assert info["params"] == sum(p.numel() for p in model.parameters())
    assert [s for s, _ in events] == list(range(1, info["epochs"] + 1))
    assert all({"bigru/loss", "bigru/dev_acc"} <= set(m) for _, m in events)
    assert events[-1][1]["bigru/loss"] < events[0][1]["bigru/loss"]
    # the returned weights are the best epoch's: they score what was logged for that epoch
    _, roles, _ = stream(dev)
    acc = float((predict(model, dev) == roles).mean())
    assert acc == info["best_dev_acc"] == events[info["best_epoch"] - 1][1]["bigru/dev_acc"]
    assert not model.training


def test_early_stopping_restores_the_best_epoch(tiny_data):
    # dev labels drawn at random: fitting train only makes dev worse, so the best epoch is an
    # early one, patience ends the run, and the weights returned must be that epoch's
    train, dev = tiny_data
    rng = np.random.default_rng(0)
    noise = [Sentence(s.tokens, tuple(int(r) for r in rng.integers(0, N_ROLES, len(s.roles))), s.structure)
             for s in dev]
    events = []
    cfg = TINY.model_copy(update=dict(max_epochs=8, patience=2))
    model, info = train_bigru(cfg, train, noise, 0, log=lambda s, m: events.append(m))
    assert info["best_epoch"] < info["epochs"] == info["best_epoch"] + cfg.patience < cfg.max_epochs
    best = events[info["best_epoch"] - 1]
    _, roles, _ = stream(noise)
    assert float((predict(model, noise) == roles).mean()) == best["bigru/dev_acc"] == info["best_dev_acc"]


# --- cancellation -------------------------------------------------------------------------------

def test_should_stop_raises_cancelled(tiny_data):
    train, dev = tiny_data
    with pytest.raises(Cancelled) as exc:
        train_bigru(TINY, train, dev, 0, should_stop=lambda: True)
    assert exc.value.step == 0
    # polled between batches: a stop during the second epoch reports one finished epoch
    per_epoch = -(-len(train) // TINY.batch)
    calls = iter(range(10**6))
    logged = []
    with pytest.raises(Cancelled) as exc:
        train_bigru(TINY, train, dev, 0, log=lambda s, m: logged.append(s),
                    should_stop=lambda: next(calls) >= per_epoch + 2)
    assert exc.value.step == 1 and logged == [1]


def test_rejects_empty_data(tiny_data):
    train, _ = tiny_data
    with pytest.raises(ValueError):
        train_bigru(TINY, train, [], 0)
