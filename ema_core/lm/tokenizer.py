"""Tokenizers for the language model: train, load and store the tokenizer a run reads its text with.

One job: a :class:`tokenizers.Tokenizer` for a corpus — our byte-level BPE trained on
``Corpus.train`` (:mod:`ema_core.lm.corpus`) and cached by the corpus' content hash, or a tokenizer
JSON file, or a hub tokenizer — with its JSON text (stored with each run), its fingerprint (part of
the token-stream cache key in :mod:`ema_core.lm.stream`) and its end-of-document id.  How a text may
be cut into pieces without changing its tokens (``chunks``) is a property of the pre-tokenizer, so
it is declared here; the BPE trainer and the stream encoder both cut by it.

Cache (under a caller-given folder, by default ``$EMALAB_HOME/cache``)
    tokenizers/bpe<V>-f<format>-<corpus hash>.json     the trained BPE, as the run will store it
    built under a file lock (``cache_lock``: concurrent workers train once) and published by an
    atomic write, so a reader sees a complete file or none.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import filelock
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ema_core.lm.corpus import Corpus, CorpusError, looks_like_path, require_hub
from ema_core.messages import one_line
from ema_core.rundir import atomic_write

EOT = "<|endoftext|>"  # GPT-2's name, so our BPE and a GPT-2 tokenizer mark documents alike
# Bumped whenever the trained tokenizer changes, so old cache entries are ignored.
BPE_FORMAT = 1
_EOT_CANDIDATES = (EOT, "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]")


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer, no normaliser: decode(encode(s)) == s for any s)
    with one special token, EOT, at id 0.  Deterministic: the same texts give the same JSON."""
    if vocab_size < 257:
        raise CorpusError(f"vocab_size {vocab_size} < 257 (256 byte tokens + EOT)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Pieces of ≤ 1 MB: the trainer counts words per piece in parallel, and cutting at safe line
    # breaks (see chunks) leaves the word counts, hence the merges, unchanged.
    tok.train_from_iterator((piece for text in texts for piece in chunks(text, 1 << 20)), trainer)
    return tok


def load_tokenizer(spec_or_path: str | os.PathLike) -> Tokenizer:
    """A tokenizer from its JSON file (or a folder holding ``tokenizer.json``), or a hub name."""
    spec = str(spec_or_path).strip()
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.is_file():
        try:
            return Tokenizer.from_file(str(path))
        except Exception as e:
            raise CorpusError(f"{path}: not a tokenizer JSON file ({one_line(e, limit=300)})") from None
    if looks_like_path(spec) or path.exists():
        raise CorpusError(f"{spec}: no such tokenizer file")
    require_hub(f"tokenizer {spec!r}")
    try:
        return Tokenizer.from_pretrained(spec)
    except Exception as e:
        raise CorpusError(f"tokenizer {spec!r}: cannot be loaded from the hub ({one_line(e, limit=300)})") from None


def tokenizer_json(tok: Tokenizer) -> str:
    """The tokenizer as the JSON text a run stores with its results (``Tokenizer.from_str`` reads it)."""
    return tok.to_str()


def tokenizer_fingerprint(tok: Tokenizer) -> str:
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()


def eot_id(tok: Tokenizer) -> int:
    """The id that ends a document: our EOT, or a hub tokenizer's own end-of-text token."""
    for name in _EOT_CANDIDATES:
        i = tok.token_to_id(name)
        if i is not None:
            return i
    raise CorpusError(f"the tokenizer has no end-of-document token (tried {', '.join(_EOT_CANDIDATES)})")


def cached_bpe(corpus: Corpus, vocab_size: int, cache_dir: str | os.PathLike) -> Tokenizer:
    """``train_bpe(corpus.train, vocab_size)``, trained once per (corpus content, vocab_size)."""
    path = Path(cache_dir) / "tokenizers" / f"bpe{vocab_size}-f{BPE_FORMAT}-{corpus.fingerprint[:20]}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with cache_lock(path):
            if not path.is_file():  # another worker may have trained it while we waited
                atomic_write(path, tokenizer_json(train_bpe(corpus.train, vocab_size)))
    return load_tokenizer(path)


def get_tokenizer(spec: str, corpus: Corpus, vocab_size: int, cache_dir: str | os.PathLike) -> Tokenizer:
    """"bpe" → the cached BPE of this corpus; anything else → :func:`load_tokenizer`."""
    return cached_bpe(corpus, vocab_size, cache_dir) if spec == "bpe" else load_tokenizer(spec)


def chunk_safe(tok: Tokenizer) -> bool:
    """Whether :func:`chunks` may cut text for ``tok``: its pieces' tokens then concatenate to the whole's."""
    # Cutting is proven safe only for a byte-level pre-tokenizer without normaliser or prefix space
    # (ours, GPT-2's); a SentencePiece-style tokenizer would add a "▁" at every cut.
    spec = json.loads(tok.to_str())
    pre = spec.get("pre_tokenizer") or {}
    return (spec.get("normalizer") is None and pre.get("type") == "ByteLevel"
            and not pre.get("add_prefix_space", False) and pre.get("use_regex", True))


def chunks(text: str, size: int) -> Iterator[str]:
    """Pieces of about ``size`` characters or more, cut only after a "\\n" that has a
    non-space character on each side.

    Why that is safe: GPT-2's pre-tokenizer regex splits "x\\nW" into "x", "\\n", "W" both in the
    whole text and when cut after the "\\n" (a lone "\\n" is its own pre-token either way, and no
    pattern reaches across it).  Inside a whitespace run it would not be: "\\n\\nW" splits as
    "\\n", "\\n", "W", but a piece ending in "\\n\\n" keeps that run as one pre-token.
    """
    start, n = 0, len(text)
    while n - start > size:
        cut = text.find("\n", start + size)
        while cut != -1 and (cut == 0 or cut + 1 >= n or text[cut - 1].isspace() or text[cut + 1].isspace()):
            cut = text.find("\n", cut + 1)
        if cut == -1:
            break
        yield text[start:cut + 1]
        start = cut + 1
    yield text[start:]


def cache_lock(path: Path) -> filelock.FileLock:
    """The lock beside a cache entry (``<path>.lock``) under which it is built; the token-stream
    cache (:mod:`ema_core.lm.stream`) takes the same kind."""
    return filelock.FileLock(str(path) + ".lock")
