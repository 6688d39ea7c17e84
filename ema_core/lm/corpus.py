"""Corpora for the language model: read a corpus spec into documents, split into train and validation.

One job: text in, :class:`Corpus` out (documents per split and a content hash); nothing here knows
tokens.  :mod:`ema_core.lm.tokenizer` trains its BPE on ``Corpus.train`` and :mod:`ema_core.lm.stream`
turns both splits into token streams, each cached under the ``Corpus.fingerprint`` computed here;
:mod:`ema_core.lm.data` composes the three for a config.

The paper trains on FineWeb-Edu (8B tokens) and reports C4 perplexity; neither is reachable offline,
so the default is embedded: Jane Austen's six novels (``data/austen/``, public domain), five for
training and one whole novel held out.

Corpus specs (``load_corpus``)
    "austen"            one document per novel; val = the novel ``val_doc`` (default "persuasion"),
                        train = the other five (file-name order).  No validation text is ever trained on.
                        ``max_chars`` bounds the training text only (quick runs); ``max_docs`` is unused.
    "free_prose"        a corpus one command builds into ``data/free_prose/text/`` (``BUILT_CORPORA``;
                        12.3M training tokens of free English prose, data/free_prose/README.md), read
                        as a local folder; refused, naming the command, until it is built.
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

Content hash (``Corpus.fingerprint``)
    The list of documents of each split, each length-prefixed: where the documents begin and end
    is part of it, so a file cut by another ``doc_sep`` (another stream: the EOT tokens move) never
    reuses a stale cache entry, while the same text reached by another path shares them.

The hub's reachability (``require_hub``) lives here too: a hub tokenizer name
(:func:`ema_core.lm.tokenizer.load_tokenizer`) is checked by the same probe before the hub
libraries' slow retries start.
"""
from __future__ import annotations

import gzip
import hashlib
import math
import os
import re
import socket
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ema_core.messages import one_line
from ema_core.paths import PROJECT_ROOT, cache_home

AUSTEN_DIR = PROJECT_ROOT / "data" / "austen"
AUSTEN_NOVELS = ("emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility")
# Corpora a command builds into the project's data/ folder (not in git): name -> (folder, the command).
BUILT_CORPORA = {"free_prose": (PROJECT_ROOT / "data" / "free_prose" / "text", "make corpus-free-prose")}
# A bound for streamed hub corpora when none is given: ≈ 25 M tokens, what a 2-core machine can hold.
HUB_DEFAULT_MAX_CHARS = 100_000_000
HUB_PROBE_SECONDS = 3.0
# How a .txt file is cut into documents (``LMDataConfig.doc_sep``); any other value is a literal separator.
DOC_SEP_MODES = ("blank", "formfeed", "line", "none")

# extension → HF builder; ".gz" may follow any of them (datasets decompresses by extension).
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class CorpusError(ValueError):
    """A corpus or tokenizer spec that cannot be used: the message is one line naming the culprit."""


class HubUnreachable(ConnectionError):
    """A hub name was given but the Hugging Face Hub cannot be reached (no network, offline mode)."""


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

    @classmethod
    def from_documents(cls, name: str, train: Sequence[str], val: Sequence[str], description: str) -> Corpus:
        """The corpus of these documents, with its fingerprint."""
        digest = hashlib.sha256()
        # Length-prefixed, split-tagged: moving a document between splits changes the hash.
        for tag, docs in ((b"train", train), (b"val", val)):
            digest.update(tag + len(docs).to_bytes(8, "little"))
            for doc in docs:
                raw = doc.encode("utf-8")
                digest.update(len(raw).to_bytes(8, "little") + raw)
        return cls(name, tuple(train), tuple(val), digest.hexdigest(), description)


def load_corpus(spec: str = "austen", *, val_doc: str = "persuasion", val_fraction: float = 0.05,
                max_docs: int | None = None, max_chars: int | None = None, doc_sep: str = "blank") -> Corpus:
    """Read and split a corpus; see the module docstring for the specs.  Raises :class:`CorpusError`
    (a ValueError) for anything wrong with local files, :class:`HubUnreachable` offline."""
    if not 0 < val_fraction <= 0.5:
        raise CorpusError(f"val_fraction must be in (0, 0.5], got {val_fraction}")
    spec = spec.strip()
    if spec == "austen":
        return _load_austen(val_doc, max_chars)
    if spec in BUILT_CORPORA:
        folder, command = BUILT_CORPORA[spec]
        if not folder.is_dir():
            raise CorpusError(f"{spec}: the corpus is not built yet; `{command}` builds it "
                              f"(data/{spec}/README.md)")
        docs = _bounded(_iter_local(folder, doc_sep), max_docs, max_chars)
        train, val, how = _split(docs, val_fraction)
        return Corpus.from_documents(spec, train, val, f"{len(docs)} documents of {spec}; validation = {how}")
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
    return Corpus.from_documents(spec, train, val, f"{source}; validation = {how}")


def _load_austen(val_doc: str, max_chars: int | None) -> Corpus:
    val_doc = check_val_doc(val_doc)
    if not AUSTEN_DIR.is_dir():
        raise CorpusError(f"{AUSTEN_DIR}: the embedded Austen corpus is missing (install the project "
                          "with `pip install -e .` from its checkout)")
    # Whole files, whatever doc_sep says: one document per novel is what "validation = a whole novel" means.
    novels = {name: _read_file(AUSTEN_DIR / f"{name}.txt.gz", "none") for name in AUSTEN_NOVELS}
    train = [doc for name in AUSTEN_NOVELS if name != val_doc for doc in novels[name]]
    if max_chars is not None:  # a smaller training set for quick runs; the held-out novel stays whole
        train = _bounded(iter(train), None, max_chars)
    return Corpus.from_documents("austen", train, novels[val_doc],
                                 f"Jane Austen, {len(AUSTEN_NOVELS) - 1} novels; validation = {val_doc} (whole novel)")


def check_val_doc(val_doc: str) -> str:
    """The novel ``val_doc`` names, as its file is named; :class:`CorpusError` when it names none."""
    name = val_doc.strip().lower().replace(" ", "").replace("_", "")
    if name not in AUSTEN_NOVELS:
        raise CorpusError(f"val_doc {val_doc!r} is not one of Austen's novels: {', '.join(AUSTEN_NOVELS)}")
    return name


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
    import datasets  # 0.6 s: only reading a corpus needs it (Austen's files too), not importing the registry

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

