"""Token streams for the language model: a corpus under a tokenizer, as cached arrays of token ids.

One job: ``token_streams(corpus, tokenizer)`` — both splits of a :class:`~ema_core.lm.corpus.Corpus`
encoded by a tokenizer from :mod:`ema_core.lm.tokenizer`, cached by (corpus content, tokenizer)
hash — with the byte counts the stream covers, which bits per byte needs.  The training loop reads
these arrays; :mod:`ema_core.lm.data` composes corpus → tokenizer → streams for a config.

Token streams
    Each split is one 1-D array: every document's tokens followed by the end-of-document token,
    ``doc₁ EOT doc₂ EOT …``.  dtype uint16 when every id fits (vocab ≤ 65 536), else int32.
    ``train_bytes`` / ``val_bytes`` count the UTF-8 bytes of the text a stream covers (EOT adds none),
    so bits per byte is tokenizer-independent::

        bpb = mean_loss_nats_per_token · n_tokens / (n_bytes · ln 2)

    Worked example: a mean loss of ln 2 nats over 1000 tokens covering 4000 bytes is 0.25 bit per
    byte (each token costs one bit and carries four bytes).

Cache (under a caller-given folder, by default ``$EMALAB_HOME/cache``)
    tokens/<key>/{train.npy,val.npy,meta.json}  key = hash(corpus content, tokenizer JSON)
    Built under a file lock (concurrent workers build once) and published by an atomic rename, so
    a reader sees a complete entry or none — never a torn file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ema_core.lm.corpus import Corpus
from ema_core.lm.tokenizer import cache_lock, chunk_safe, chunks, eot_id, tokenizer_fingerprint
from ema_core.rundir import atomic_write

# Bumped whenever the stream layout changes, so old cache entries are ignored.
STREAMS_FORMAT = 1


@dataclass(frozen=True, eq=False)
class TokenStreams:
    """Both splits of a corpus as token ids, with the bytes they cover; see the module docstring."""

    train: np.ndarray          # (N_train,) uint16 | int32, read-only memory map of the cache
    val: np.ndarray            # (N_val,)
    train_bytes: int           # UTF-8 bytes of the training text
    val_bytes: int
    eot_id: int
    vocab_size: int            # the tokenizer's size, special tokens included
    key: str                   # cache key: hash(corpus content, tokenizer)
    path: Path                 # the cache entry
    from_cache: bool           # False when this call tokenized

    def bytes_per_token(self, split: str = "val") -> float:
        return (self.train_bytes / self.train.size) if split == "train" else (self.val_bytes / self.val.size)


def token_streams(corpus: Corpus, tok: Tokenizer, cache_dir: str | os.PathLike) -> TokenStreams:
    """Both splits tokenized, from the cache when this (corpus, tokenizer) was seen before."""
    tok_fp = tokenizer_fingerprint(tok)
    key = hashlib.sha256(f"{STREAMS_FORMAT}|{corpus.fingerprint}|{tok_fp}".encode()).hexdigest()[:24]
    entry = Path(cache_dir) / "tokens" / key
    cached = _read_streams(entry, key)
    if cached is not None:
        return cached
    entry.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(entry):
        cached = _read_streams(entry, key)  # built by another worker while we waited
        if cached is not None:
            return cached
        if entry.exists():  # unreadable (damaged by hand): rebuild
            shutil.rmtree(entry, ignore_errors=True)
        t0 = time.perf_counter()
        vocab = tok.get_vocab_size(with_added_tokens=True)
        top = max(tok.get_vocab(with_added_tokens=True).values(), default=0)
        dtype = np.uint16 if top <= np.iinfo(np.uint16).max else np.int32
        eot = eot_id(tok)
        train, train_bytes = encode_documents(tok, corpus.train, eot, dtype)
        val, val_bytes = encode_documents(tok, corpus.val, eot, dtype)
        meta = dict(format=STREAMS_FORMAT, key=key, corpus=corpus.name, corpus_fingerprint=corpus.fingerprint,
                    tokenizer_fingerprint=tok_fp, dtype=np.dtype(dtype).name, eot_id=eot, vocab_size=vocab,
                    train_tokens=int(train.size), val_tokens=int(val.size), train_bytes=train_bytes,
                    val_bytes=val_bytes, train_docs=len(corpus.train), val_docs=len(corpus.val),
                    seconds=round(time.perf_counter() - t0, 3))
        # Written into a hidden sibling folder, then renamed into place in one step.
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=entry.parent))
        try:
            for name, arr in (("train", train), ("val", val)):
                with open(tmp / f"{name}.npy", "wb") as f:
                    np.save(f, arr)
                    f.flush()
                    os.fsync(f.fileno())
            atomic_write(tmp / "meta.json", json.dumps(meta, indent=1))
            try:
                os.rename(tmp, entry)
            except OSError:
                if _read_streams(entry, key) is None:  # not a concurrent twin (a lock that does not
                    raise                              # hold across machines): a real failure
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    out = _read_streams(entry, key)
    assert out is not None
    return dataclasses.replace(out, from_cache=False)


def _read_streams(entry: Path, key: str) -> TokenStreams | None:
    try:
        meta = json.loads((entry / "meta.json").read_text())
        train = np.load(entry / "train.npy", mmap_mode="r")
        val = np.load(entry / "val.npy", mmap_mode="r")
    except (OSError, ValueError):
        return None
    if (meta.get("format") != STREAMS_FORMAT or train.shape != (meta["train_tokens"],)
            or val.shape != (meta["val_tokens"],) or train.dtype.name != meta["dtype"]):
        return None
    return TokenStreams(train, val, meta["train_bytes"], meta["val_bytes"], meta["eot_id"], meta["vocab_size"],
                        key, entry, True)


def encode_documents(tok: Tokenizer, docs: Sequence[str], eot: int, dtype=np.int32,
                     chunk_chars: int = 1 << 16) -> tuple[np.ndarray, int]:
    """``doc₁ EOT doc₂ EOT …`` as one (N,) array, and the UTF-8 bytes of the documents.

    Long documents are cut into pieces whose tokens concatenate to the whole document's tokens
    (:func:`~ema_core.lm.tokenizer.chunks`), so encoding runs on every core and memory stays
    bounded.  Text that happens to spell the EOT token is encoded as text: only the boundaries we
    add are EOT.
    """
    pieces_ok = chunk_safe(tok)
    special = tok.encode_special_tokens
    tok.encode_special_tokens = True
    parts: list[np.ndarray] = []
    n_bytes = 0
    eot_arr = np.array([eot], dtype=dtype)
    try:
        for doc in docs:
            n_bytes += len(doc.encode("utf-8"))
            pieces = list(chunks(doc, chunk_chars)) if pieces_ok else [doc]
            for start in range(0, len(pieces), 64):
                for enc in tok.encode_batch_fast(pieces[start:start + 64], add_special_tokens=False):
                    parts.append(np.asarray(enc.ids, dtype=dtype))
            parts.append(eot_arr)
    finally:
        tok.encode_special_tokens = special
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)), n_bytes


def bits_per_byte(mean_loss_nats: float, n_tokens: int, n_bytes: int) -> float:
    """Bits per UTF-8 byte from a mean next-token loss in nats: the tokenizer-independent measure.

    >>> round(bits_per_byte(math.log(2), 1000, 4000), 6)
    0.25
    """
    if n_bytes <= 0:
        raise ValueError("n_bytes must be positive")
    return mean_loss_nats * n_tokens / (n_bytes * math.log(2))

