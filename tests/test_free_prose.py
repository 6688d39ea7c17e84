"""The free-prose corpus builder (data/free_prose/build.py): its cleaning, de-duplication and held-out
steps on small inline samples.  No network, no downloads: the builder's readers are fed hand-made
bytes in the packages' formats."""
import base64
import importlib.util
import struct
import sys
import zlib
from pathlib import Path

import pytest

from ema_core.lm.corpus import _split, split_documents

ROOT = Path(__file__).resolve().parents[1]


def _load_builder():
    spec = importlib.util.spec_from_file_location("free_prose_build", ROOT / "data" / "free_prose" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


B = _load_builder()


def test_paragraphs_are_what_the_apps_blank_doc_sep_cuts():
    text = ("First line\r\nsecond\u00a0 line  \r\n \t\r\n\r\nNext\fsame\u2028para\n\n\n\nLast\x00 one\n   \n")
    pars = B.paragraphs(text)
    assert pars == ["First line\nsecond line", "Next same para", "Last one"]
    # Rendered, the app's own splitter finds exactly these documents (no form feed or blank line inside).
    assert [d.rstrip("\n") for d in split_documents(B.render(pars), "blank")] == pars


def test_gutenberg_boilerplate_is_cut_at_both_markers():
    text = ("Header junk\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\nThe story.\n\n"
            "End of Project Gutenberg's X, by Y\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nLicence text.\n")
    out = B.strip_gutenberg_boilerplate(text)
    assert "The story." in out
    assert "Header junk" not in out and "Licence" not in out and "End of Project" not in out


@pytest.mark.parametrize("par", ["[Moby Dick by Herman Melville 1851]", "CHAPTER 1", "Chapter XII.", "BOOK I.",
                                 "Actus Primus. Scoena Prima.", "Scaena Sexta.", "Verses 1-6", "IV.", "ETYMOLOGY.",
                                 "THE ORPHANS.", "Loomings", "Chapter Outline", "Psalm 1 OVERVIEW"])
def test_headings_are_recognised(par):
    assert B.is_heading(par)


@pytest.mark.parametrize("par", ["Exeunt.", '"Yes," said he.', "Call me Ishmael.", "Jesus wept.",
                                 "Part of the crew stayed aboard while the rest went ashore that night",
                                 "Tyger Tyger, burning bright\nIn the forests of the night"])
def test_prose_is_not_a_heading(par):
    assert not B.is_heading(par)


def test_plain_books_lose_titles_headings_and_verse_numbers():
    text = ("[The King James Bible]\n\nCHAPTER 1\n\n1:1 In the beginning God created the heaven and the earth.\n\n"
            "1:2 And the earth was without form: 1:3 And God said, Let there be light.\n\n"
            "}  One's-Self I Sing\n\nOne's-self I sing, a simple separate person.\n")
    assert B.clean_plain(text, bible=True) == [
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form: And God said, Let there be light.",
        "One's-self I sing, a simple separate person."]
    # Outside a Bible a chapter-and-verse inside a line is a reference, and stays.
    assert B.clean_plain("See Genesis 1:1 In the text.\n") == ["See Genesis 1:1 In the text."]


def test_sotu_drops_audience_reactions_and_is_one_document():
    text = "Thank you. [Applause] We meet tonight. [laughter] Our union is strong [p.3] and growing.\n"
    assert B.clean_sotu(text) == ["Thank you. We meet tonight. Our union is strong and growing."]


def test_osis_markup_strongs_notes_and_titles_go_paragraphs_stay():
    verse1 = ('<div sID="g1" type="x-p"/><title type="x-s">The Creation</title> <w lemma="strong:H7225">In</w> '
              '<w lemma="strong:H0430">the beginning</w><note type="x-footnote">Or, at first</note> God created '
              'the &amp; heavens<note>n</note>, Yahweh’s<note>a</note><w>word</w>. ')
    verse2 = ('<div type="x-milestone" subType="x-preverse" sID="pv1"/>The earth was formless.<div eID="g1" '
              'type="x-p"/> <div sID="g2" type="x-p"/><l level="1" sID="l1"/>Praise him,<l eID="l1" level="1"/>'
              '<l level="1" sID="l2"/>all his hosts!<l eID="l2" level="1"/>')
    assert B.clean_osis([verse1, verse2], " ") == [
        "In the beginning God created the & heavens, Yahweh’s word. The earth was formless.",
        "Praise him,\nall his hosts!"]
    # A commentary's notes are paragraphs of their own; outline tables, "{1}" note calls and
    # Scofield's cross-references go, and so does "Verse 1." before the text.
    notes = ['<table><row><cell>Outline</cell></row></table><hi type="bold">Verse 1.</hi> Blessed is the man{1}.',
             'See the note (See Scofield "<reference osisRef="x">Exodus 16:35</reference>"). Then more.']
    assert B.clean_osis(notes, "\n\n") == ["Blessed is the man.", "See the note. Then more."]


def _sword_module(tmp_path, entries, width):
    """A one-block zText module whose verse index has ``width``-byte records (10 or 12); the last
    record links to the previous entry (as a commentary's verse range does)."""
    body = "".join(entries).encode()
    block = zlib.compress(body)
    (tmp_path / "ot.bzs").write_bytes(struct.pack("<III", 0, len(block), len(body)))
    (tmp_path / "ot.bzz").write_bytes(block)
    recs, start = [(0, 0, 0)], 0
    for e in entries:
        recs.append((0, start, len(e.encode())))
        start += len(e.encode())
    recs.append(recs[-1])
    fmt = "<III" if width == 12 else "<IIH"
    (tmp_path / "ot.bzv").write_bytes(b"".join(struct.pack(fmt, *r) for r in recs))
    return tmp_path


@pytest.mark.parametrize("width", [10, 12])
def test_sword_entries_read_either_index_width_and_linked_entries_once(tmp_path, width):
    entries = ["<w>First</w> verse. ", "Second verse. ", "Third, with é. "]
    assert B.sword_entries(_sword_module(tmp_path, entries, width)) == entries


def _b64(n):
    digits = ""
    while True:
        digits = B._B64[n % 64] + digits
        n //= 64
        if not n:
            return digits


def test_dictd_entries_once_each_without_database_records():
    a = "00-database-info\nThis file was made by dictfmt.\n\n"
    b = "hack\n /hak/, n.\n\n    Work on {something} quickly.\n\n"
    data = (a + b).encode()
    off_b = len(a.encode())
    index = (f"00-database-info\t{_b64(0)}\t{_b64(len(a))}\n"
             f"hack\t{_b64(off_b)}\t{_b64(len(b))}\nhacking\t{_b64(off_b)}\t{_b64(len(b))}\n")
    assert B.dictd_entries(index, data) == [("hack", b)]
    assert B.dictd_number(base64.b64encode(b"\x00\x01\x00").decode().rstrip("=")) == 256


def test_dictd_entry_cleaning():
    foldoc = ("compiler\nCompiled HTML\n\n   <programming, tool> A program that converts {source code}\n"
              "   to {machine language}. {(http://x.org/y)}\n\n   See __also__ {linker}.\n\n   (1997-07-23)\n")
    assert B.clean_dict_entry(foldoc, categories=True) == [
        "A program that converts source code\nto machine language.", "See also linker."]
    # The Jargon File's "<dollar sign>" is text; only FOLDOC's subject tags go.
    assert B.clean_dict_entry("$\n\n    Common: <dollar sign>; buck.\n") == ["Common: <dollar sign>; buck."]
    # The Devil's Dictionary: the headword is the start of its sentence.
    devil = "ABSURDITY, n.  A statement or belief manifestly inconsistent with\none's own opinion.\n\n"
    assert B.clean_dict_entry(devil, drop_head=False) == [
        "ABSURDITY, n. A statement or belief manifestly inconsistent with\none's own opinion."]


def test_dedup_keeps_the_first_across_works_ignoring_case_and_whitespace():
    w1 = B.Work("a", "a", ["Alpha beta.", "Gamma  delta.", "alpha BETA."])
    w2 = B.Work("b", "b", ["gamma\ndelta.", "Epsilon."])
    assert B.dedup([w1, w2]) == 2
    assert w1.paragraphs == ["Alpha beta.", "Gamma  delta."] and w1.dropped == 1
    assert w2.paragraphs == ["Epsilon."] and w2.dropped == 1


def test_heldout_allocation_matches_the_apps_split():
    sizes = [233, 40000, 27000, 4800, 3900, 12000, 1400, 3900, 26000]
    take = B.allocate_heldout(sizes, 0.05)
    assert sum(take) == int(sum(sizes) * 0.05)
    assert all(abs(t - s * 0.05) <= 1 for t, s in zip(take, sizes))
    # Written as the builder writes them, the app's split holds out exactly the last file.
    works = [[f"w{i} p{j}." for j in range(n)] for i, n in enumerate([7, 30, 3, 45])]
    take = B.allocate_heldout([len(w) for w in works], 0.05)
    train = "\n".join(B.render(w[:len(w) - k]) for w, k in zip(works, take))  # one file each, in the build
    held = B.render([p for w, k in zip(works, take) for p in w[len(w) - k:]])
    docs = split_documents(train, "blank") + split_documents(held, "blank")
    _, val, _ = _split(docs, 0.05)
    assert val == split_documents(held, "blank") and len(val) == sum(take) == 4
    # 85 documents -> 4 held out: 0.33, 1.41, 0.14, 2.12 of them -> floors 0, 1, 0, 2 and the largest
    # remainder (w1's) gets the fourth; each work gives its last paragraphs.
    assert [v.strip() for v in val] == ["w1 p28.", "w1 p29.", "w3 p43.", "w3 p44."]
    assert len(docs) == 85


def test_near_duplicates_are_paragraphs_mostly_made_of_earlier_8grams():
    pars = ["a b c d e f g h i j", "x a b c d e f g h i", "a b c d e f g h q r s t u v", "short a b c"]
    # 2 of 3 8-grams seen before: dropped; 1 of 7: kept; too short to judge: kept.  A paragraph
    # repeating itself inside is not a repeat of anything earlier.
    assert B.near_duplicates(pars) == [False, True, False, False]
    assert B.near_duplicates(["a b c d e f g h a b c d e f g h"]) == [False]
    w1, w2 = B.Work("a", "a", pars[:2]), B.Work("b", "b", pars[2:])
    assert B.near_dedup([w1, w2]) == 1 and w1.paragraphs == pars[:1] and w1.near_dropped == 1
    assert w2.paragraphs == pars[2:]


def test_repeated_ngram_share():
    pars = ["a b c d e f g h i", "x a b c d e f g h", "short one"]
    stats = B.repeated_ngram_share(pars, 8, split=1)
    assert stats["ngrams"] == 4
    assert stats["repeated_share"] == pytest.approx(0.5)
    assert stats["heldout_in_train_share"] == pytest.approx(0.5)
    assert B.repeated_ngram_share(["a b c d e f g h i j"], 8)["repeated_share"] == 0.0


def test_no_austen_anywhere():
    assert B.EXCLUDED_BOOK.search("austen-persuasion.txt") and not B.EXCLUDED_BOOK.search("melville-moby_dick.txt")
    assert not any("austen" in s.package.name for s in B.SOURCES)
    files = [s.file for s in B.SOURCES] + [B.HELDOUT_FILE]
    assert files == sorted(files) and B.HELDOUT_FILE == max(files)  # the held-out file is read last
    assert not B.MANIFEST.endswith((".txt", ".json")) or B.MANIFEST.startswith(".")  # never read as a corpus
