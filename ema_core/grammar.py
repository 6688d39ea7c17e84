"""The synthetic grammar of the paper's small-scale study (§2): 147 words, 6 structures, 20 roles.

The paper gives only the three counts; the lists below are ours (PAPER.md §5 item 5).

Words (147, ids 0..146 in this order, 10 categories)
    det       6   the a this every some no
    noun     50   dog cat bird horse fox wolf bear mouse rabbit lion tiger sheep goat cow duck owl
                  frog snake fish deer man woman boy girl child teacher doctor farmer king queen
                  baker pilot nurse sailor artist student judge singer driver hunter friend
                  neighbour stranger soldier poet chef writer monkey eagle whale
    adj      20   old young big small happy sad quick slow tall short brave shy clever lazy angry
                  calm hungry sleepy kind proud
    verb_i   20   slept ran laughed cried smiled jumped danced sang swam fell waited arrived left
                  sneezed yawned shouted whispered rested vanished froze
    verb_t   30   chased saw liked helped followed found pushed pulled kicked bit fed met called
                  watched heard loved hated visited painted caught carried thanked praised blamed
                  warned greeted hugged scared admired ignored
    verb_c    6   said thought knew believed claimed noticed      (take a clause as object)
    prep     10   near under behind beside above inside with without beyond around
    rel       2   who which
    comp      2   that whether
    end       1   .

Structures (6; each a fixed template of (category, role) slots; depth-1 form shown)
    0 intransitive        det noun verb_i .
    1 transitive          det noun verb_t det noun .
    2 transitive_adj      det adj noun verb_t det adj noun .
    3 prepositional       det noun verb_i prep det noun .
    4 relative (embedded) det noun rel verb_t det noun verb_i .
    5 complement (embd.)  det noun verb_c comp det noun verb_t det noun .

Roles (20; L = lexical, S = structure-dependent)
     0 agent_det S         5 patient_det S      10 pobj_noun S         15 emb_agent_noun S
     1 agent_adj S         6 patient_adj S      11 rel_pronoun L       16 emb_verb S
     2 agent_noun S        7 patient_noun S     12 complementiser L    17 emb_patient_det S
     3 verb_intrans L      8 prep L             13 verb_comp L         18 emb_patient_noun S
     4 verb_trans S        9 pobj_det S         14 emb_agent_det S     19 end L

A role is *lexical* when the word class that fills it fills no other role, so the word alone
decides it; it is *structure-dependent* when the same word class takes different roles by position
(a determiner is agent_det, patient_det, pobj_det, emb_agent_det or emb_patient_det depending on
where it stands; a transitive verb is verb_trans in a main clause, emb_verb in an embedded one).
The flags are written out, and a test re-derives them from the templates.

Worked example (structure 4, relative clause; ids are the vocabulary indices above):

>>> s = from_text("the dog who chased a cat slept .", structure=4)
>>> s.tokens
(0, 6, 142, 96, 1, 7, 76, 146)
>>> for tok, r in zip(s.tokens, s.roles):
...     print(f"{vocabulary()[tok].text:6} {ROLES[r].name}")
the    agent_det
dog    agent_noun
who    rel_pronoun
chased emb_verb
a      emb_patient_det
cat    emb_patient_noun
slept  verb_intrans
.      end

"the" is agent_det here but would be patient_det in "a cat chased the dog .": same word,
different role — a structure-dependent role. "who" is rel_pronoun wherever it appears — lexical.

Splits.  ``sample_sentences(cfg, n, seed, split)`` is a pure function of (cfg, n, seed, split):
    train   the six structures at depth 1, drawn with ``cfg.structure_weights``.
    test    the same distribution, held-out sentences only (within-grammar test set).
    novel   the same distribution, but every open-class slot (noun, adj, verb_i, verb_t, verb_c)
            is filled from a pool of new word ids 147..272 (same categories, never seen in training);
            closed-class words (det, prep, rel, comp, end) keep their ids.
    novel_dev
            the same as novel, but from a second, disjoint pool of new ids 273..398 (the *tuning
            pool*): novel words to choose settings on (SPCN's context gain, the probes' penalty)
            that never appear in the scored novel split, so no setting is chosen on a word the
            transfer test scores.
    deep    structures 4 and 5 only, equally often, with ``cfg.deep_depth`` nested clauses:
            relatives stack on the embedded patient ("the dog who chased a cat who saw a fox
            slept ."), complements stack on verb_c ("the man said that a boy thought that the dog
            chased a cat ."); nested clauses reuse the emb_* roles, so no new roles appear.

Disjointness, two layers.  (1) Each split draws from its own random stream,
``SeedSequence(seed, spawn_key=(split index,))``, so no split's randomness overlaps another's for
any seed (novel_dev was added after the others and takes the next index, so the older splits'
draws are unchanged).  (2) Since independent streams can still produce the same sentence, the sentence space
itself is partitioned: a sentence is *held out* when a fixed hash (blake2b) of its token ids falls
in the first ``held_out_fraction`` of the hash range.  train keeps only non-held-out sentences,
test and deep only held-out ones (rejection sampling), so no token sequence can be in both train
and a test set — for any seeds, as long as the config is the same.  novel and novel_dev sentences
contain ids ≥ 147 and so can never equal a train sentence, nor each other (disjoint pools).

``stream(sentences)`` concatenates sentences into flat arrays plus a ``sentence_start`` mask: the
reset mask for EMA traces when traces are reset at sentence boundaries (PAPER.md §5 item 3);
``positions`` and ``previous_category`` read a stream's position in its sentence and the category of
the word before (the context keys of the probes' control tasks and the n-gram window baseline).
"""
from __future__ import annotations

import hashlib
import numbers
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

N_WORDS, N_STRUCTURES, N_ROLES = 147, 6, 20  # the paper's counts (§2)

CATEGORY_WORDS: dict[str, tuple[str, ...]] = {
    "det": ("the", "a", "this", "every", "some", "no"),
    "noun": (
        "dog", "cat", "bird", "horse", "fox", "wolf", "bear", "mouse", "rabbit", "lion",
        "tiger", "sheep", "goat", "cow", "duck", "owl", "frog", "snake", "fish", "deer",
        "man", "woman", "boy", "girl", "child", "teacher", "doctor", "farmer", "king", "queen",
        "baker", "pilot", "nurse", "sailor", "artist", "student", "judge", "singer", "driver", "hunter",
        "friend", "neighbour", "stranger", "soldier", "poet", "chef", "writer", "monkey", "eagle", "whale",
    ),
    "adj": (
        "old", "young", "big", "small", "happy", "sad", "quick", "slow", "tall", "short",
        "brave", "shy", "clever", "lazy", "angry", "calm", "hungry", "sleepy", "kind", "proud",
    ),
    "verb_i": (
        "slept", "ran", "laughed", "cried", "smiled", "jumped", "danced", "sang", "swam", "fell",
        "waited", "arrived", "left", "sneezed", "yawned", "shouted", "whispered", "rested", "vanished", "froze",
    ),
    "verb_t": (
        "chased", "saw", "liked", "helped", "followed", "found", "pushed", "pulled", "kicked", "bit",
        "fed", "met", "called", "watched", "heard", "loved", "hated", "visited", "painted", "caught",
        "carried", "thanked", "praised", "blamed", "warned", "greeted", "hugged", "scared", "admired", "ignored",
    ),
    "verb_c": ("said", "thought", "knew", "believed", "claimed", "noticed"),
    "prep": ("near", "under", "behind", "beside", "above", "inside", "with", "without", "beyond", "around"),
    "rel": ("who", "which"),
    "comp": ("that", "whether"),
    "end": (".",),
}
# Open-class categories get new words in the novel split; closed-class ones are the scaffolding
# the transfer test keeps fixed (the paper's novel set keeps agent determiners scorable).
OPEN_CLASS = ("noun", "adj", "verb_i", "verb_t", "verb_c")


@dataclass(frozen=True)
class Word:
    id: int
    text: str
    category: str


@dataclass(frozen=True)
class Role:
    name: str
    lexical: bool


@dataclass(frozen=True)
class Structure:
    name: str
    slots: tuple[tuple[str, str], ...]  # (category, role name), depth-1 form
    embedded: bool


@dataclass(frozen=True)
class Sentence:
    tokens: tuple[int, ...]
    roles: tuple[int, ...]  # indices into ROLES, one per token
    structure: int


ROLES: tuple[Role, ...] = (
    Role("agent_det", False),
    Role("agent_adj", False),
    Role("agent_noun", False),
    Role("verb_intrans", True),
    Role("verb_trans", False),
    Role("patient_det", False),
    Role("patient_adj", False),
    Role("patient_noun", False),
    Role("prep", True),
    Role("pobj_det", False),
    Role("pobj_noun", False),
    Role("rel_pronoun", True),
    Role("complementiser", True),
    Role("verb_comp", True),
    Role("emb_agent_det", False),
    Role("emb_agent_noun", False),
    Role("emb_verb", False),
    Role("emb_patient_det", False),
    Role("emb_patient_noun", False),
    Role("end", True),
)
ROLE_INDEX = {r.name: i for i, r in enumerate(ROLES)}

_AGENT = (("det", "agent_det"), ("noun", "agent_noun"))
_PATIENT = (("det", "patient_det"), ("noun", "patient_noun"))
_EMB_AGENT = (("det", "emb_agent_det"), ("noun", "emb_agent_noun"))
_EMB_PATIENT = (("det", "emb_patient_det"), ("noun", "emb_patient_noun"))
_END = (("end", "end"),)
_REL_LINK = (("rel", "rel_pronoun"), ("verb_t", "emb_verb")) + _EMB_PATIENT
_COMP_LINK = (("verb_c", "verb_comp"), ("comp", "complementiser"))

STRUCTURES: tuple[Structure, ...] = (
    Structure("intransitive", _AGENT + (("verb_i", "verb_intrans"),) + _END, False),
    Structure("transitive", _AGENT + (("verb_t", "verb_trans"),) + _PATIENT + _END, False),
    Structure(
        "transitive_adj",
        (("det", "agent_det"), ("adj", "agent_adj"), ("noun", "agent_noun"), ("verb_t", "verb_trans"),
         ("det", "patient_det"), ("adj", "patient_adj"), ("noun", "patient_noun")) + _END,
        False,
    ),
    Structure(
        "prepositional",
        _AGENT + (("verb_i", "verb_intrans"), ("prep", "prep"), ("det", "pobj_det"), ("noun", "pobj_noun")) + _END,
        False,
    ),
    Structure("relative", _AGENT + _REL_LINK + (("verb_i", "verb_intrans"),) + _END, True),
    Structure("complement", _AGENT + _COMP_LINK + _EMB_AGENT + (("verb_t", "emb_verb"),) + _EMB_PATIENT + _END, True),
)
EMBEDDED_STRUCTURES = tuple(i for i, s in enumerate(STRUCTURES) if s.embedded)


def template(structure: int, depth: int = 1) -> tuple[tuple[str, str], ...]:
    """(category, role) slots of a structure with ``depth`` nested clauses (depth only matters if embedded)."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    name = STRUCTURES[structure].name
    if name == "relative":
        # right-branching: each further relative clause hangs off the previous embedded patient,
        # so the main verb_intrans lands ever further from its agent.
        return _AGENT + _REL_LINK * depth + (("verb_i", "verb_intrans"),) + _END
    if name == "complement":
        # each extra level is "det noun verb_c comp" inside the previous clause; verb_c stays
        # lexical (only verb_c words fill it), the embedded agents reuse emb_agent_*.
        inner = (_EMB_AGENT + _COMP_LINK) * (depth - 1)
        return _AGENT + _COMP_LINK + inner + _EMB_AGENT + (("verb_t", "emb_verb"),) + _EMB_PATIENT + _END
    return STRUCTURES[structure].slots


@lru_cache(maxsize=1)
def _vocab() -> tuple[Word, ...]:
    words: list[Word] = []
    for cat, texts in CATEGORY_WORDS.items():
        words += [Word(len(words) + j, t, cat) for j, t in enumerate(texts)]
    return tuple(words)


def vocabulary() -> list[Word]:
    """The 147 training words, id = position."""
    return list(_vocab())


def _pseudo_word(i: int) -> str:
    # deterministic made-up words (CVCVC), so the novel pool needs no randomness and no
    # English word list; mixed radix over the letters makes every index distinct.
    onsets, vowels, codas = "bdfgklmnprstvz", "aeiou", "gkmnptx"
    out = ""
    for alphabet in (onsets, vowels, onsets, vowels, codas):
        i, r = divmod(i, len(alphabet))
        out += alphabet[r]
    return out


N_NOVEL = sum(len(CATEGORY_WORDS[c]) for c in OPEN_CLASS)  # 126 new words per pool
# The two pools of new words: "novel" is scored (the transfer test), "tuning" chooses settings.
NOVEL_POOLS = ("novel", "tuning")


@lru_cache(maxsize=2)
def _novel(pool: str = "novel") -> tuple[Word, ...]:
    # Pool p holds ids N_WORDS + p·N_NOVEL ..; its spellings continue the same stride, so the two
    # pools never share a spelling (7919 is prime to the 34,300 spellings, so every index differs).
    first = NOVEL_POOLS.index(pool) * N_NOVEL
    words: list[Word] = []
    for cat in OPEN_CLASS:
        for _ in CATEGORY_WORDS[cat]:
            k = first + len(words)
            words.append(Word(N_WORDS + k, _pseudo_word(k * 7919 + 13), cat))  # stride spreads spellings
    return tuple(words)


def novel_vocabulary(pool: str = "novel") -> list[Word]:
    """New words, as many per open-class category as training has: the scored novel split's pool
    (ids 147..272) or, with ``pool="tuning"``, the novel_dev split's (ids 273..398)."""
    if pool not in NOVEL_POOLS:
        raise ValueError(f"pool must be one of {NOVEL_POOLS}, got {pool!r}")
    return list(_novel(pool))


def _pools(pool: str | None) -> dict[str, np.ndarray]:
    """Word ids per category: the training words, with the open classes from a novel pool if named."""
    novel = pool is not None
    src = [w for w in _vocab() if not (novel and w.category in OPEN_CLASS)] + (list(_novel(pool)) if novel else [])
    return {c: np.array([w.id for w in src if w.category == c], dtype=np.int64) for c in CATEGORY_WORDS}


class GrammarConfig(BaseModel):
    """The grammar's sampling settings; how many sentences, and the seed, are passed beside it per draw."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    structure_weights: tuple[float, ...] = Field(
        (1.0,) * N_STRUCTURES, min_length=N_STRUCTURES, max_length=N_STRUCTURES,
        description="relative frequency of the six structures (train, test, novel)",
    )
    held_out_fraction: float = Field(0.2, ge=0.05, le=0.5, description="share of sentence space reserved for test sets")
    deep_depth: int = Field(3, ge=2, le=6, description="nested clauses per sentence in the deep split")

    @field_validator("structure_weights")
    @classmethod
    def _weights(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(w < 0 or not np.isfinite(w) for w in v) or sum(v) <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all zero, got {list(v)}")
        return tuple(float(w) for w in v)


Split = Literal["train", "test", "novel", "deep", "novel_dev"]
# The order fixes each split's random stream (its index): a new split is appended, never inserted.
SPLITS: tuple[str, ...] = ("train", "test", "novel", "deep", "novel_dev")
_SPLIT_POOL = {"novel": "novel", "novel_dev": "tuning"}


def is_held_out(tokens: tuple[int, ...], fraction: float) -> bool:
    """The fixed partition of sentence space: a property of the token ids alone, never of the seed."""
    h = hashlib.blake2b(np.asarray(tokens, dtype="<i8").tobytes(), digest_size=8).digest()
    return int.from_bytes(h, "little") < fraction * 2**64


MAX_SENTENCES = 1_000_000


def sample_sentences(cfg: GrammarConfig, n: int, seed: int, split: Split) -> list[Sentence]:
    """``n`` sentences of one split; a pure function of (cfg, n, seed, split)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= MAX_SENTENCES:
        raise ValueError(f"n must be a whole number of sentences in [1, {MAX_SENTENCES:,}], got {n!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(SPLITS.index(split),)))
    pools = _pools(_SPLIT_POOL.get(split))
    if split == "deep":
        structs, depth = np.array(EMBEDDED_STRUCTURES), cfg.deep_depth
        p = np.full(len(structs), 1.0 / len(structs))
    else:
        structs, depth = np.arange(N_STRUCTURES), 1
        w = np.asarray(cfg.structure_weights)
        p = w / w.sum()
    templates = {int(s): template(int(s), depth) for s in structs}
    sizes = {s: np.array([len(pools[c]) for c, _ in t]) for s, t in templates.items()}
    roles = {s: tuple(ROLE_INDEX[r] for _, r in t) for s, t in templates.items()}
    # novel sentences cannot collide with train (new ids), so they skip the partition
    want_held_out = None if split in _SPLIT_POOL else split != "train"

    out: list[Sentence] = []
    while len(out) < int(n):
        s = int(rng.choice(structs, p=p))
        t = templates[s]
        for _ in range(10_000):  # a structure's held-out share is ~fraction; this never runs out
            picks = rng.integers(0, sizes[s])
            tokens = tuple(int(pools[c][k]) for (c, _), k in zip(t, picks))
            if want_held_out is None or is_held_out(tokens, cfg.held_out_fraction) == want_held_out:
                break
        else:
            raise RuntimeError(f"no {split} sentence found for structure {s}")
        out.append(Sentence(tokens, roles[s], s))
    return out


def from_text(text: str, structure: int, depth: int = 1) -> Sentence:
    """Encode a whitespace-separated sentence of training words against a structure's template."""
    by_text = {w.text: w for w in _vocab()}
    t = template(structure, depth)
    words = text.split()
    if len(words) != len(t):
        raise ValueError(f"structure {structure} at depth {depth} has {len(t)} slots, got {len(words)} words")
    for w, (cat, _) in zip(words, t):
        if w not in by_text or by_text[w].category != cat:
            raise ValueError(f"{w!r} is not a {cat}")
    return Sentence(tuple(by_text[w].id for w in words), tuple(ROLE_INDEX[r] for _, r in t), structure)


def stream(sentences: list[Sentence]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate sentences: (tokens (T,), roles (T,), sentence_start (T,) bool — the trace reset mask)."""
    lengths = np.array([len(s.tokens) for s in sentences], dtype=np.int64)
    tokens = np.fromiter((t for s in sentences for t in s.tokens), dtype=np.int64, count=int(lengths.sum()))
    roles = np.fromiter((r for s in sentences for r in s.roles), dtype=np.int64, count=int(lengths.sum()))
    start = np.zeros(int(lengths.sum()), dtype=bool)
    start[np.cumsum(lengths) - lengths] = True  # first token of each sentence
    return tokens, roles, start


def positions(sentence_start: np.ndarray) -> np.ndarray:
    """(T,) each token's index in its sentence (0 at a sentence start) for a stream's start mask."""
    start = np.asarray(sentence_start, dtype=bool)
    idx = np.arange(len(start))
    # the index of the latest start at or before t; a stream that does not begin with a start
    # counts from its first token
    last = np.maximum.accumulate(np.where(start, idx, 0)) if len(start) else idx
    return idx - last


CATEGORIES: tuple[str, ...] = tuple(CATEGORY_WORDS)
SENTENCE_START = len(CATEGORIES)  # the "category" before a sentence's first word


@lru_cache(maxsize=1)
def _category_table() -> np.ndarray:
    vocab = list(_vocab()) + [w for p in NOVEL_POOLS for w in _novel(p)]
    table = np.empty(len(vocab), dtype=np.int64)
    for w in vocab:
        table[w.id] = CATEGORIES.index(w.category)
    return table


def category_of(tokens: np.ndarray) -> np.ndarray:
    """(T,) each word id's category index in ``CATEGORIES`` (training words and both novel pools)."""
    return _category_table()[np.asarray(tokens, dtype=np.int64)]


def previous_category(tokens: np.ndarray, sentence_start: np.ndarray) -> np.ndarray:
    """(T,) the category of the word before each token in its sentence; ``SENTENCE_START`` at a start."""
    cats = category_of(tokens)
    prev = np.full(len(cats), SENTENCE_START, dtype=np.int64)
    prev[1:] = cats[:-1]
    prev[np.asarray(sentence_start, dtype=bool)] = SENTENCE_START
    return prev
