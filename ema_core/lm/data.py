"""Text for the language-model experiment: corpus → tokenizer → token streams (PAPER.md §3, §5 item 8).

The paper trains on FineWeb-Edu (8B tokens) and reports C4 perplexity; neither is reachable offline,
so the default is embedded: Jane Austen's six novels (``data/austen/``, public domain), five for
training and one whole novel held out.  Each step is cached by content hash, so workers share work::

    corpus  = load_corpus("austen")                            # train: 5 novels, val: Persuasion
    tok     = cached_bpe(corpus, 8192, default_cache_dir())     # trained on corpus.train only
    streams = token_streams(corpus, tok, default_cache_dir())  # (N,) uint16 arrays, memory-mapped
    bpb     = bits_per_byte(val_loss, streams.val.size, streams.val_bytes)

``prepare(LMDataConfig(...))`` does the three in one call.

Corpus specs (``load_corpus``)
    "austen"            one document per novel; val = the novel ``val_doc`` (default "persuasion"),
                        train = the other five (file-name order).  No validation text is ever trained on.
                        ``max_chars`` bounds the training text only (quick runs); ``max_docs`` is unused.
    a local path        a file or a folder (searched recursively; other files such as README are
                        skipped) of ``.txt`` (cut into documents by ``doc_sep``, below),
                        ``.jsonl``/``.json`` (one document per record, ``text`` field) or ``.parquet``
                        (``text`` column), each optionally ``.gz``; read with HF ``datasets``' "text" /
                        "json" / "parquet" builders, one file at a time so an error names its file.
    "owner/name[:cfg]"  a hub dataset (e.g. "HuggingFaceFW/fineweb-edu", "allenai/c4:en"), streamed,
                        its "train" split read up to ``max_docs`` / ``max_chars`` (default
                        ``HUB_DEFAULT_MAX_CHARS``).  Offline it fails at once with one line.
    ``doc_sep`` (``.txt`` files only; Austen's novels are always one document each):
        "blank"     (default) a run of blank lines (whitespace only) or a form feed ends a document
        "formfeed"  a form feed ends a document (pages of a PDF-to-text dump)
        "line"      every non-blank line is a document
        "none"      the whole file is one document, byte for byte
        other text  a literal separator, e.g. "<|endoftext|>" (TinyStories' text files)
    A document keeps its own last line break; the blank lines around a separator are dropped and
    the end-of-document token stands where they were.
    Non-Austen splits are deterministic: the last ``val_fraction`` of the documents
    (``floor(n·val_fraction)`` of them) when that is at least one document, else the last
    ``val_fraction`` of the text (the cut moved to a line start when the last document has one).

Token streams (``token_streams``)
    Each split is one 1-D array: every document's tokens followed by the end-of-document token,
    ``doc₁ EOT doc₂ EOT …``.  dtype uint16 when every id fits (vocab ≤ 65 536), else int32.
    ``train_bytes`` / ``val_bytes`` count the UTF-8 bytes of the text a stream covers (EOT adds none),
    so bits per byte is tokenizer-independent::

        bpb = mean_loss_nats_per_token · n_tokens / (n_bytes · ln 2)

    Worked example: a mean loss of ln 2 nats over 1000 tokens covering 4000 bytes is 0.25 bit per
    byte (each token costs one bit and carries four bytes).

Cache (under a caller-given folder, by default ``$EMALAB_HOME/cache``)
    tokenizers/bpe<V>-<corpus hash>.json     the trained BPE, as the run will store it
    tokens/<key>/{train.npy,val.npy,meta.json}  key = hash(corpus content, tokenizer JSON)
    "Corpus content" is the list of documents of each split, each length-prefixed
    (``Corpus.fingerprint``): where the documents begin and end is part of it, so a file cut by
    another ``doc_sep`` (another stream: the EOT tokens move) never reuses a stale entry.
    Both are built under a file lock (concurrent workers build once) and published by an atomic
    rename, so a reader sees a complete entry or none — never a torn file.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import filelock
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ema_core.messages import one_line
from ema_core.paths import PROJECT_ROOT, cache_home
from ema_core.rundir import atomic_write

AUSTEN_DIR = PROJECT_ROOT / "data" / "austen"
AUSTEN_NOVELS = ("emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility")
EOT = "<|endoftext|>"  # GPT-2's name, so our BPE and a GPT-2 tokenizer mark documents alike
# A bound for streamed hub corpora when none is given: ≈ 25 M tokens, what a 2-core machine can hold.
HUB_DEFAULT_MAX_CHARS = 100_000_000
HUB_PROBE_SECONDS = 3.0
# How a .txt file is cut into documents (``LMDataConfig.doc_sep``); any other value is a literal separator.
DOC_SEP_MODES = ("blank", "formfeed", "line", "none")
# Bumped whenever the trained tokenizer or the stream layout changes, so old cache entries are ignored.
BPE_FORMAT = 1
STREAMS_FORMAT = 1

# extension → HF builder; ".gz" may follow any of them (datasets decompresses by extension).
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
_EOT_CANDIDATES = (EOT, "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]")


class CorpusError(ValueError):
    """A corpus or tokenizer spec that cannot be used: the message is one line naming the culprit."""


class HubUnreachable(ConnectionError):
    """A hub name was given but the Hugging Face Hub cannot be reached (no network, offline mode)."""


# ---------------------------------------------------------------------------------------------
# Config


class LMDataConfig(BaseModel):
    """What text the language model reads and how it is cut into tokens."""

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

    @model_validator(mode="after")
    def _austen_novel(self) -> LMDataConfig:
        if self.corpus == "austen":
            _check_val_doc(self.val_doc)
        elif looks_like_path(self.corpus) and not Path(self.corpus).expanduser().exists():
            # Checked when the config is built, so `emalab run` refuses it before a run folder exists.
            raise ValueError(f"corpus {self.corpus!r}: no such file or folder")
        return self


# ---------------------------------------------------------------------------------------------
# Corpora


@dataclass(frozen=True, eq=False)
class Corpus:
    """Documents, split.  ``fingerprint`` hashes the content of both splits (not the spec), so the
    same text reached by another path shares cache entries."""

    name: str                 # the spec it was loaded from
    train: tuple[str, ...]
    val: tuple[str, ...]
    fingerprint: str          # sha256 hex
    description: str          # one line for logs and the store

    @property
    def n_chars(self) -> tuple[int, int]:
        return sum(map(len, self.train)), sum(map(len, self.val))


def load_corpus(spec: str = "austen", *, val_doc: str = "persuasion", val_fraction: float = 0.05,
                max_docs: int | None = None, max_chars: int | None = None, doc_sep: str = "blank") -> Corpus:
    """Read and split a corpus; see the module docstring for the specs.  Raises :class:`CorpusError`
    (a ValueError) for anything wrong with local files, :class:`HubUnreachable` offline."""
    if not 0 < val_fraction <= 0.5:
        raise CorpusError(f"val_fraction must be in (0, 0.5], got {val_fraction}")
    spec = spec.strip()
    if spec == "austen":
        return _load_austen(val_doc, max_chars)
    path = Path(spec).expanduser()
    if path.exists():
        docs = _bounded(_iter_local(path, doc_sep), max_docs, max_chars)
        source = f"{len(docs)} documents from {path.name or spec}"
    elif looks_like_path(spec):
        raise CorpusError(f"{spec}: no such file or folder")
    else:
        if max_docs is None and max_chars is None:
            max_chars = HUB_DEFAULT_MAX_CHARS
        docs = _bounded(_iter_hub(spec), max_docs, max_chars)
        source = f"{len(docs)} documents streamed from the hub dataset {spec}"
    if not docs:
        raise CorpusError(f"{spec}: no text")
    train, val, how = _split(docs, val_fraction)
    return _corpus(spec, train, val, f"{source}; validation = {how}")


def _load_austen(val_doc: str, max_chars: int | None) -> Corpus:
    val_doc = _check_val_doc(val_doc)
    if not AUSTEN_DIR.is_dir():
        raise CorpusError(f"{AUSTEN_DIR}: the embedded Austen corpus is missing (install the project "
                          "with `pip install -e .` from its checkout)")
    # Whole files, whatever doc_sep says: one document per novel is what "validation = a whole novel" means.
    novels = {name: _read_file(AUSTEN_DIR / f"{name}.txt.gz", "none") for name in AUSTEN_NOVELS}
    train = [doc for name in AUSTEN_NOVELS if name != val_doc for doc in novels[name]]
    if max_chars is not None:  # a smaller training set for quick runs; the held-out novel stays whole
        train = _bounded(iter(train), None, max_chars)
    return _corpus("austen", train, novels[val_doc],
                   f"Jane Austen, {len(AUSTEN_NOVELS) - 1} novels; validation = {val_doc} (whole novel)")


def _check_val_doc(val_doc: str) -> str:
    name = val_doc.strip().lower().replace(" ", "").replace("_", "")
    if name not in AUSTEN_NOVELS:
        raise CorpusError(f"val_doc {val_doc!r} is not one of Austen's novels: {', '.join(AUSTEN_NOVELS)}")
    return name


def _corpus(name: str, train: Sequence[str], val: Sequence[str], description: str) -> Corpus:
    digest = hashlib.sha256()
    # Length-prefixed, split-tagged: moving a document between splits changes the hash.
    for tag, docs in ((b"train", train), (b"val", val)):
        digest.update(tag + len(docs).to_bytes(8, "little"))
        for doc in docs:
            raw = doc.encode("utf-8")
            digest.update(len(raw).to_bytes(8, "little") + raw)
    return Corpus(name, tuple(train), tuple(val), digest.hexdigest(), description)


def looks_like_path(spec: str) -> bool:
    """Whether ``spec`` is shaped as a local path rather than a hub name; shared with the app's
    source check (``pages/_sources.py``), which must read a setting as the loaders will."""
    # A hub name is "owner/name" or "name", optionally ":config"; anything path-shaped that does
    # not exist is a missing path, not a hub name (so a typo fails fast and says so).
    if spec.startswith(("/", "./", "../", "~", ".\\")) or spec.endswith(("/", os.sep)):
        return True
    lowered = spec.lower().removesuffix(".gz")
    return any(lowered.endswith(ext) for ext in BUILDERS) or spec.count("/") > 1


def _split(docs: list[str], val_fraction: float) -> tuple[list[str], list[str], str]:
    """Deterministic split: the last whole documents when there are enough, else the text's tail."""
    n_val = math.floor(len(docs) * val_fraction + 1e-9)  # 20 × 0.05 is one document, not 0.999…
    if n_val >= 1:
        return docs[:-n_val], docs[-n_val:], f"last {n_val} of {len(docs)} documents"
    # Too few documents to hold out whole ones at this fraction: hold out the last val_fraction of
    # the characters.  Documents wholly inside the tail go to val; the one the cut falls in is split.
    total = sum(map(len, docs))
    need = max(1, math.ceil(total * val_fraction))
    train, val, held = list(docs), [], 0
    while len(train) > 1 and held + len(train[-1]) <= need:
        held += len(train[-1])
        val.insert(0, train.pop())
    rest = need - held
    if rest > 0:
        last = train[-1]
        cut = len(last) - rest
        if cut <= 0:
            raise CorpusError(f"too little text to hold out {val_fraction:.0%} for validation")
        # Start the held-out text at a line start when one is near (in the first half of the part
        # held out), so that neither side ends mid-word.
        newline = last.find("\n", cut, cut + rest // 2)
        if newline != -1 and newline < len(last) - 1:
            cut = newline + 1
        train[-1] = last[:cut]
        val.insert(0, last[cut:])
    return train, val, f"last {val_fraction:.0%} of the text"


def _bounded(docs: Iterator[str], max_docs: int | None, max_chars: int | None) -> list[str]:
    out, chars = [], 0
    for doc in docs:
        if max_docs is not None and len(out) >= max_docs:
            break
        if max_chars is not None and chars + len(doc) > max_chars:
            if max_chars - chars > 0:
                out.append(doc[: max_chars - chars])
            break
        out.append(doc)
        chars += len(doc)
    return out


def _file_kind(path: Path) -> str:
    """The builder for a file, from its extension (".gz" allowed after it)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    ext = suffixes[-1] if suffixes else ""
    if ext not in BUILDERS:
        raise CorpusError(f"{path}: unsupported file type {''.join(path.suffixes) or '(none)'!r}; "
                          f"use .txt, .jsonl, .json or .parquet, optionally .gz")
    return BUILDERS[ext]


def _iter_local(path: Path, doc_sep: str = "blank") -> Iterator[str]:
    if path.is_file():
        yield from _read_file(path, doc_sep)
        return
    files = sorted(p for p in path.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(path).parts))
    usable = []
    for p in files:
        try:
            _file_kind(p)
            usable.append(p)
        except CorpusError:
            continue  # README, PROVENANCE, licences… live beside the data
    if not usable:
        raise CorpusError(f"{path}: no .txt, .jsonl, .json or .parquet files (optionally .gz) in this folder")
    for p in usable:
        yield from _read_file(p, doc_sep)


def _read_file(path: Path, doc_sep: str = "blank") -> list[str]:
    """All documents of one local file, checked; every failure names the file and says what is wrong.
    A text file is cut by ``doc_sep`` (:func:`split_documents`); a record of the others is one document."""
    builder = _file_kind(path)
    if path.stat().st_size == 0:
        raise CorpusError(f"{path}: empty file")
    if path.suffix.lower() == ".gz":
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                raise CorpusError(f"{path}: not a gzip file (the name ends in .gz)")
    kwargs: dict[str, Any] = {"sample_by": "document"} if builder == "text" else {}
    try:
        rows = list(_load_dataset(builder, data_files=str(path.resolve()), split="train", streaming=True,
                                  **kwargs))
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x}: {e.reason})") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise CorpusError(f"{path}: corrupt gzip data ({one_line(e, limit=300)})") from None
    except StopIteration:
        raise CorpusError(f"{path}: no records") from None
    except Exception as e:  # pyarrow / json parse errors: the library's own words, on one line
        raise CorpusError(f"{path}: cannot be read as {builder} ({type(e).__name__}: {one_line(e, limit=300)})") from None
    docs = []
    for i, row in enumerate(rows):
        if "text" not in row:
            raise CorpusError(f"{path}: no 'text' field (record {i} has: {', '.join(map(str, row)) or 'nothing'})")
        text = row["text"]
        if text is None:
            continue
        if not isinstance(text, str):
            raise CorpusError(f"{path}: 'text' of record {i} is {type(text).__name__}, not a string")
        if "\x00" in text:
            raise CorpusError(f"{path}: binary content (NUL byte in record {i}), not text")
        if builder == "text":
            docs.extend(split_documents(text, doc_sep))
        elif text.strip():
            docs.append(text)
    if not docs:
        raise CorpusError(f"{path}: no text (only empty or blank documents)")
    return docs


# A document boundary under "blank": a form feed, or one or more whitespace-only lines (each with its
# line break) that follow a line break — so the line before keeps its own "\n".  [^\S\n\f] is
# whitespace other than a line break or a form feed ("\r" included: CRLF files split alike).
_BLANK_SEP = re.compile(r"\f|(?<=\n)(?:[^\S\n\f]*\n)+")
_LEADING_BLANK = re.compile(r"\A(?:[^\S\n]*\n)+")
_TRAILING_BLANK = re.compile(r"\n(?:[^\S\n]*\n)*[^\S\n]*\Z")


def split_documents(text: str, doc_sep: str = "blank") -> list[str]:
    """The documents of one text file under ``doc_sep`` (see the module docstring); blank ones dropped.

    Each document loses the blank lines at its edges but keeps its last line break, so a file with
    no separator in it is one document, unchanged, whatever the mode.
    """
    if doc_sep == "none":
        return [text] if text.strip() else []
    if doc_sep == "blank":
        pieces = _BLANK_SEP.split(text)
    elif doc_sep == "formfeed":
        pieces = text.split("\f")
    elif doc_sep == "line":
        return [line.strip("\r\f") for line in text.split("\n") if line.strip()]
    else:
        pieces = text.split(doc_sep)
    if len(pieces) == 1:
        return [text] if text.strip() else []
    docs = []
    for piece in pieces:
        if piece.strip():
            docs.append(_TRAILING_BLANK.sub("\n", _LEADING_BLANK.sub("", piece)))
    return docs


def _iter_hub(spec: str) -> Iterator[str]:
    name, _, config = spec.partition(":")
    require_hub(f"corpus {spec!r}")
    try:
        ds = _load_dataset(name, config or None, split="train", streaming=True)
        for i, row in enumerate(ds):
            text = row.get("text")
            if not isinstance(text, str):
                raise CorpusError(f"corpus {spec!r}: record {i} has no 'text' string (fields: {', '.join(row)})")
            if text.strip():
                yield text
    except (CorpusError, HubUnreachable):
        raise
    except ConnectionError as e:
        raise HubUnreachable(_offline_message(f"corpus {spec!r}", one_line(e, limit=300))) from None
    except Exception as e:
        raise CorpusError(f"corpus {spec!r}: the hub dataset cannot be read ({type(e).__name__}: {one_line(e, limit=300)})") from None


def _load_dataset(*args, **kwargs):
    import datasets  # 0.6 s: only a file or hub corpus needs it; Austen (the default) and the registry do not

    # Streaming writes no Arrow files, only lock files and hub metadata: keep them with our other
    # rebuildable data rather than in the user's ~/.cache.
    return datasets.load_dataset(*args, cache_dir=str(cache_home() / "hf_datasets"), **kwargs)


# ---------------------------------------------------------------------------------------------
# The hub, offline


def _offline_message(what: str, reason: str) -> str:
    return (f'{what}: the Hugging Face Hub cannot be reached ({reason}); a local path or "austen" '
            f"works offline")


def _hub_unreachable_reason() -> str | None:
    """None when the hub answers a TCP connect within HUB_PROBE_SECONDS, else why not.

    Without this, ``datasets``/``huggingface_hub`` retry for ≈ 25 s before failing on a machine with
    no network.  The probe runs in a thread so that even a hanging DNS lookup cannot hold us longer.
    """
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return f"{var} is set"
    # Through a proxy when one is configured (the hub itself is then reached by the proxy).
    target = (os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
              or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    url = urlsplit(target if "//" in target else f"http://{target}")
    host = url.hostname or "huggingface.co"
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return f"bad address {target!r}"
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
            outcome.append(None)
        except OSError as e:
            outcome.append(e)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(HUB_PROBE_SECONDS + 0.5)
    if not outcome:
        return f"no answer from {host} within {HUB_PROBE_SECONDS:g} s"
    if outcome[0] is not None:
        return f"no connection to {host}: {one_line(outcome[0], limit=300)}"
    return None


def require_hub(what: str) -> None:
    """Raise :class:`HubUnreachable` at once (≤ ~3 s) when the hub cannot be reached."""
    reason = _hub_unreachable_reason()
    if reason is not None:
        raise HubUnreachable(_offline_message(what, reason))


# ---------------------------------------------------------------------------------------------
# Tokenizers


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
    # breaks (see _chunks) leaves the word counts, hence the merges, unchanged.
    tok.train_from_iterator((piece for text in texts for piece in _chunks(text, 1 << 20)), trainer)
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
        with _lock(path):
            if not path.is_file():  # another worker may have trained it while we waited
                atomic_write(path, tokenizer_json(train_bpe(corpus.train, vocab_size)))
    return load_tokenizer(path)


def get_tokenizer(spec: str, corpus: Corpus, vocab_size: int, cache_dir: str | os.PathLike) -> Tokenizer:
    """"bpe" → the cached BPE of this corpus; anything else → :func:`load_tokenizer`."""
    return cached_bpe(corpus, vocab_size, cache_dir) if spec == "bpe" else load_tokenizer(spec)


# ---------------------------------------------------------------------------------------------
# Token streams


@dataclass(frozen=True, eq=False)
class TokenStreams:
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
    with _lock(entry):
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
    (``_chunks``), so encoding runs on every core and memory stays bounded.  Text that happens to
    spell the EOT token is encoded as text: only the boundaries we add are EOT.
    """
    pieces_ok = _chunk_safe(tok)
    special = tok.encode_special_tokens
    tok.encode_special_tokens = True
    parts: list[np.ndarray] = []
    n_bytes = 0
    eot_arr = np.array([eot], dtype=dtype)
    try:
        for doc in docs:
            n_bytes += len(doc.encode("utf-8"))
            pieces = list(_chunks(doc, chunk_chars)) if pieces_ok else [doc]
            for start in range(0, len(pieces), 64):
                for enc in tok.encode_batch_fast(pieces[start:start + 64], add_special_tokens=False):
                    parts.append(np.asarray(enc.ids, dtype=dtype))
            parts.append(eot_arr)
    finally:
        tok.encode_special_tokens = special
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)), n_bytes


def _chunk_safe(tok: Tokenizer) -> bool:
    # Cutting is proven safe only for a byte-level pre-tokenizer without normaliser or prefix space
    # (ours, GPT-2's); a SentencePiece-style tokenizer would add a "▁" at every cut.
    spec = json.loads(tok.to_str())
    pre = spec.get("pre_tokenizer") or {}
    return (spec.get("normalizer") is None and pre.get("type") == "ByteLevel"
            and not pre.get("add_prefix_space", False) and pre.get("use_regex", True))


def _chunks(text: str, size: int) -> Iterator[str]:
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


def bits_per_byte(mean_loss_nats: float, n_tokens: int, n_bytes: int) -> float:
    """Bits per UTF-8 byte from a mean next-token loss in nats: the tokenizer-independent measure.

    >>> round(bits_per_byte(math.log(2), 1000, 4000), 6)
    0.25
    """
    if n_bytes <= 0:
        raise ValueError("n_bytes must be positive")
    return mean_loss_nats * n_tokens / (n_bytes * math.log(2))


# ---------------------------------------------------------------------------------------------
# Everything at once


@dataclass(frozen=True, eq=False)
class LMData:
    corpus: Corpus
    tokenizer: Tokenizer
    streams: TokenStreams


def prepare(cfg: LMDataConfig, cache_dir: str | os.PathLike | None = None) -> LMData:
    """Corpus, tokenizer and token streams for a config, every step cached under ``cache_dir``."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    corpus = load_corpus(cfg.corpus, val_doc=cfg.val_doc, val_fraction=cfg.val_fraction,
                         max_docs=cfg.max_docs, max_chars=cfg.max_chars, doc_sep=cfg.doc_sep)
    tok = get_tokenizer(cfg.tokenizer, corpus, cfg.vocab_size, cache_dir)
    return LMData(corpus, tok, token_streams(corpus, tok, cache_dir))


def default_cache_dir() -> Path:
    """``$EMALAB_HOME/cache`` (see :mod:`ema_core.paths`)."""
    return cache_home()


# ---------------------------------------------------------------------------------------------
# Files


def _lock(path: Path):
    return filelock.FileLock(str(path) + ".lock")



