"""The ``data`` section of the lm config, and the one call that turns it into what a run reads.

One job: compose the three steps — :mod:`ema_core.lm.corpus` (text, split, content-hashed),
:mod:`ema_core.lm.tokenizer` (the BPE trained on the training split, or a given tokenizer) and
:mod:`ema_core.lm.stream` (both splits as cached token ids, with their byte counts) — for an
:class:`LMDataConfig`.  Each step is cached by content hash, so workers share work (the three
modules' functions, one after the other)::

    corpus  = load_corpus("austen")                            # train: 5 novels, val: Persuasion
    tok     = cached_bpe(corpus, 8192, default_cache_dir())     # trained on corpus.train only
    streams = token_streams(corpus, tok, default_cache_dir())  # (N,) uint16 arrays, memory-mapped
    bpb     = bits_per_byte(val_loss, streams.val.size, streams.val_bytes)

``prepare(LMDataConfig(...))`` does the three in one call (PAPER.md §3, §5 item 8).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tokenizers import Tokenizer

from ema_core.lm.corpus import Corpus, check_val_doc, load_corpus, looks_like_path
from ema_core.lm.stream import TokenStreams, token_streams
from ema_core.lm.tokenizer import get_tokenizer
from ema_core.paths import cache_home


class CorpusConfig(BaseModel):
    """What text is read and how it is split into training and held-out documents (no tokens yet).

    The ``data`` group of a run that reads text with a tokenizer it already has (``lm_eval``: a finished
    run's own); :class:`LMDataConfig` adds the tokenizer a training run builds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    corpus: str = Field("austen", min_length=1, max_length=1000,
                        description='"austen", a local file or folder, or a hub dataset "owner/name[:config]"')
    val_doc: str = Field("persuasion", description="Austen only: the novel held out whole for validation")
    val_fraction: float = Field(0.05, gt=0, le=0.5, description="other corpora: the share held out (last documents)")
    max_docs: int | None = Field(None, ge=1, le=1_000_000_000, description="read at most this many documents")
    max_chars: int | None = Field(None, ge=1000, le=100_000_000_000,
                                  description="read at most this many characters (hub default: 1e8)")
    # Default "blank": plain-text dumps mark a document (or a page) by an empty line or a form
    # feed, and a file read whole loses every boundary: no end-of-document token between pages and
    # a validation cut through running text.  Over-splitting a book into paragraphs costs only an
    # end-of-document token where the blank line stood (nothing resets there: both models read
    # across it), so splitting is the safer default.  See docs/decisions.md.
    doc_sep: str = Field("blank", min_length=1, max_length=100,
                         description='.txt files: what ends a document: "blank" (a run of blank lines or a '
                                     'form feed), "formfeed", "line", "none" (the file is one document) or a '
                                     'literal separator such as "<|endoftext|>"; Austen\'s novels are one each')

    @model_validator(mode="after")
    def _austen_novel(self) -> CorpusConfig:
        if self.corpus == "austen":
            check_val_doc(self.val_doc)
        elif looks_like_path(self.corpus) and not Path(self.corpus).expanduser().exists():
            # Checked when the config is built, so `emalab run` refuses it before a run folder exists.
            raise ValueError(f"corpus {self.corpus!r}: no such file or folder")
        return self

    def load(self) -> Corpus:
        """The corpus these settings name, split (:func:`ema_core.lm.corpus.load_corpus`)."""
        return load_corpus(self.corpus, val_doc=self.val_doc, val_fraction=self.val_fraction,
                           max_docs=self.max_docs, max_chars=self.max_chars, doc_sep=self.doc_sep)


class LMDataConfig(CorpusConfig):
    """What text the language model reads and how it is cut into tokens."""

    tokenizer: str = Field("bpe", min_length=1, max_length=1000,
                           description='"bpe": byte-level BPE trained on the training split; else a tokenizer '
                                       'JSON file or a hub tokenizer name')
    vocab_size: int = Field(4096, ge=257, le=262_144, description="BPE vocabulary (256 bytes + EOT + merges)")

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_file(cls, v: str) -> str:
        # A path that is not there fails at config time, so `emalab run` refuses it before a run
        # folder exists (a hub name is only tried when the run starts: it may need the network).
        path = Path(v.strip()).expanduser()
        if v.strip() == "bpe" or not (looks_like_path(v.strip()) or path.exists()):
            return v
        if path.is_dir() and not (path / "tokenizer.json").is_file():
            raise ValueError("a folder without a tokenizer.json")
        if not path.exists():
            raise ValueError("no such tokenizer file")
        return v


@dataclass(frozen=True, eq=False)
class LMData:
    """What :func:`prepare` gives a run: the corpus, its tokenizer and both token streams."""

    corpus: Corpus
    tokenizer: Tokenizer
    streams: TokenStreams


def prepare(cfg: LMDataConfig, cache_dir: str | os.PathLike | None = None) -> LMData:
    """Corpus, tokenizer and token streams for a config, every step cached under ``cache_dir``."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    corpus = cfg.load()
    tok = get_tokenizer(cfg.tokenizer, corpus, cfg.vocab_size, cache_dir)
    return LMData(corpus, tok, token_streams(corpus, tok, cache_dir))


def default_cache_dir() -> Path:
    """``$EMALAB_HOME/cache`` (see :mod:`ema_core.paths`)."""
    return cache_home()

