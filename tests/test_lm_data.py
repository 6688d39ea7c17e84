"""The LM data layer, one section per module: corpora (``ema_core.lm.corpus``: local, embedded Austen,
hub offline), the BPE (``tokenizer``), cached token streams and bpb (``stream``), and ``prepare``
composing them (``data``)."""
import gzip
import json
import math
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from ema_core.lm import corpus as C
from ema_core.lm import data as D
from ema_core.lm import stream as S
from ema_core.lm import tokenizer as T

# Liveness only: how long a wait for something that must happen may last before the test gives up.
PATIENCE = 600
TEXTS = ["It is a truth universally acknowledged.\n", "Café — naïve façade, 東京 and émoji 🙂.\n",
         "  whitespace\t\truns   and\n\n\n  blank lines  \n"]


@pytest.fixture(scope="module")
def austen(tmp_path_factory):
    # Module-scoped fixtures run before conftest's per-test EMALAB_HOME: isolate this one by hand
    # (datasets keeps its lock files under $EMALAB_HOME/cache).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMALAB_HOME", str(tmp_path_factory.mktemp("lm_home")))
        return C.load_corpus("austen")


@pytest.fixture(scope="module")
def bpe512(austen):
    # One novel is plenty for a 512-token vocabulary, and keeps the module fast.
    return T.train_bpe(austen.train[:1], 512)



def test_a_built_corpus_is_read_by_its_name_once_built_and_refused_naming_its_command_before(tmp_path, monkeypatch):
    folder = tmp_path / "text"
    monkeypatch.setitem(C.BUILT_CORPORA, "free_prose", (folder, "make corpus-free-prose"))
    with pytest.raises(C.CorpusError, match=r"free_prose: the corpus is not built yet; `make corpus-free-prose`"):
        C.load_corpus("free_prose")
    folder.mkdir()
    (folder / "01_a.txt").write_text("".join(f"Paragraph {i} of the first work.\n\n" for i in range(19)))
    (folder / "99_heldout.txt").write_text("The held-out tail.\n")
    (folder / ".manifest.json").write_text("{}")  # hidden: never read as text
    corpus = C.load_corpus("free_prose")
    assert corpus.name == "free_prose" and len(corpus.train) == 19 and corpus.val == ("The held-out tail.\n",)
    # The same text reached by its path is the same corpus (one cache entry).
    assert C.load_corpus(str(folder)).fingerprint == corpus.fingerprint

def _persuasion() -> str:
    with gzip.open(C.AUSTEN_DIR / "persuasion.txt.gz", "rt", encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# Corpora (ema_core.lm.corpus): local files, good


def _write_all_kinds(folder):
    (folder / "a.txt").write_text(TEXTS[0], encoding="utf-8")
    with gzip.open(folder / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write(TEXTS[1])
    (folder / "c.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)),
                                    encoding="utf-8")
    with gzip.open(folder / "d.json.gz", "wt", encoding="utf-8") as f:
        json.dump([{"text": t} for t in TEXTS[:2]], f)
    pq.write_table(pa.table({"text": TEXTS, "n": [1, 2, 3]}), folder / "e.parquet")


@pytest.mark.parametrize("name, expected", [
    ("a.txt", TEXTS[:1]),               # a text file is one document, kept byte for byte
    ("b.txt.gz", TEXTS[1:2]),
    ("c.jsonl", TEXTS),                 # one document per record
    ("d.json.gz", TEXTS[:2]),           # a JSON array of records, gzip'd
    ("e.parquet", TEXTS),
])
def test_local_file_of_each_type(tmp_path, name, expected):
    _write_all_kinds(tmp_path)
    docs = list(C._iter_local(tmp_path / name))
    assert docs == expected


def test_local_folder_reads_every_supported_file_in_name_order(tmp_path):
    _write_all_kinds(tmp_path)
    (tmp_path / "README.md").write_text("not data")      # skipped, like data/austen/PROVENANCE.md
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.txt").write_text("nested\n")
    (tmp_path / ".hidden.txt").write_text("skipped\n")
    docs = list(C._iter_local(tmp_path))
    assert docs == [*TEXTS[:1], *TEXTS[1:2], *TEXTS, *TEXTS[:2], *TEXTS, "nested\n"]
    corpus = C.load_corpus(str(tmp_path), val_fraction=0.2)
    assert corpus.train + corpus.val == tuple(docs)         # 12 documents: the last 2 held out
    assert corpus.val == tuple(docs[-2:])
    assert C.load_corpus(str(tmp_path), val_fraction=0.2).fingerprint == corpus.fingerprint


def test_single_document_is_split_by_text(tmp_path):
    text = "".join(f"line {i} of a single long document\n" for i in range(400))
    (tmp_path / "one.txt").write_text(text)
    corpus = C.load_corpus(str(tmp_path / "one.txt"), val_fraction=0.05)
    assert len(corpus.train) == len(corpus.val) == 1
    assert corpus.train[0] + corpus.val[0] == text
    assert corpus.val[0].startswith("line ")                 # the cut moved to a line start
    assert 0.03 < len(corpus.val[0]) / len(text) <= 0.05


PAGES = "Page one, line 1\nline 2\n\n\n  \nPage two\n\nPage three\n\fPage four\n\f\nPage five\n\n"


@pytest.mark.parametrize("doc_sep, expected", [
    # a run of blank lines (whitespace-only ones too) or a form feed; each keeps its last line break
    ("blank", ["Page one, line 1\nline 2\n", "Page two\n", "Page three\n", "Page four\n", "Page five\n"]),
    ("formfeed", ["Page one, line 1\nline 2\n\n\n  \nPage two\n\nPage three\n", "Page four\n", "Page five\n"]),
    ("line", ["Page one, line 1", "line 2", "Page two", "Page three", "Page four", "Page five"]),
    ("none", [PAGES]),
    ("Page t", ["Page one, line 1\nline 2\n", "wo\n", "hree\n\fPage four\n\f\nPage five\n"]),  # a literal
])
def test_text_file_is_cut_into_documents(doc_sep, expected):
    assert C.split_documents(PAGES, doc_sep) == expected
    # A file with no separator in it is one document, byte for byte, whatever the mode.
    assert C.split_documents(TEXTS[0], doc_sep if doc_sep != "line" else "none") == [TEXTS[0]]
    assert C.split_documents(" \n\n\f \n", doc_sep) == []


def test_txt_corpus_documents_end_with_eot_and_the_cache_follows_the_cut(tmp_path):
    # Twenty pages in one file: cut by the default, each page is a document with EOT after it and the
    # last one is held out whole; read whole, the file was one document cut through its text.
    pages = [f"Page {i}: " + " ".join(f"word{j}" for j in range(i, i + 30)) + ".\n" for i in range(20)]
    (tmp_path / "pages.txt").write_text("\n".join(pages), encoding="utf-8")  # one blank line between
    spec, cache = str(tmp_path / "pages.txt"), tmp_path / "cache"
    split = D.prepare(D.LMDataConfig(corpus=spec, vocab_size=300), cache)
    assert D.LMDataConfig().doc_sep == "blank"
    assert split.corpus.train == tuple(pages[:19]) and split.corpus.val == (pages[19],)
    eot = split.streams.eot_id
    assert int((split.streams.train == eot).sum()) == 19 and int((split.streams.val == eot).sum()) == 1
    assert split.streams.train_bytes == sum(len(p.encode()) for p in pages[:19])
    whole = D.prepare(D.LMDataConfig(corpus=spec, vocab_size=300, doc_sep="none"), cache)
    assert len(whole.corpus.train) == len(whole.corpus.val) == 1
    assert whole.corpus.fingerprint != split.corpus.fingerprint
    # Another cut is another stream: it is tokenized afresh, never read from the other's cache entry.
    assert not whole.streams.from_cache and whole.streams.key != split.streams.key
    assert int((whole.streams.train == T.eot_id(whole.tokenizer)).sum()) == 1
    again = D.prepare(D.LMDataConfig(corpus=spec, vocab_size=300), cache)
    assert again.streams.from_cache and again.streams.key == split.streams.key


def test_doc_sep_is_checked_and_has_a_default():
    with pytest.raises(ValidationError):
        D.LMDataConfig(doc_sep="")
    # A stored config from before the setting existed still validates, with the default.
    assert D.LMDataConfig.model_validate({"corpus": "austen", "vocab_size": 4096}).doc_sep == "blank"


def test_bounds_and_document_split(tmp_path):
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": f"doc {i}\n"}) + "\n" for i in range(100)))
    corpus = C.load_corpus(str(tmp_path / "docs.jsonl"), max_docs=40)
    assert corpus.train == tuple(f"doc {i}\n" for i in range(38))   # 40 × 0.05 = the last 2 documents
    assert corpus.val == ("doc 38\n", "doc 39\n")
    capped = C.load_corpus(str(tmp_path / "docs.jsonl"), max_chars=300)
    assert sum(capped.n_chars) == 300      # the last document read is cut to fit


# ---------------------------------------------------------------------------------------------
# Corpora: local files, bad: one line, naming the file and what is wrong


def _bad_files(folder):
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blank.txt").write_text("  \n\n \n")
    (folder / "nul.txt").write_bytes(b"PK\x03\x04\x00\x00binary\x00stuff")
    (folder / "latin1.txt").write_bytes("café au lait\n".encode("latin-1"))
    (folder / "body.jsonl").write_text('{"body": "no text field"}\n')
    (folder / "number.jsonl").write_text('{"text": 5}\n')
    (folder / "broken.jsonl").write_text('{"text": "unterminated\n')
    (folder / "fake.txt.gz").write_bytes(b"plain text, not gzip")
    (folder / "notes.csv").write_text("text\nhello\n")
    pq.write_table(pa.table({"body": ["a"]}), folder / "body.parquet")
    (folder / "nothing").mkdir()
    (folder / "nothing" / "README.md").write_text("no data here")


@pytest.mark.parametrize("name, words", [
    ("empty.txt", "empty file"),
    ("blank.txt", "no text"),
    ("nul.txt", "binary content"),
    ("latin1.txt", "not UTF-8"),
    ("body.jsonl", "no 'text' field (record 0 has: body)"),
    ("number.jsonl", "not a string"),
    ("broken.jsonl", "cannot be read as json"),
    ("fake.txt.gz", "not a gzip file"),
    ("notes.csv", "unsupported file type '.csv'"),
    ("body.parquet", "no 'text' field"),
    ("nothing", "no .txt, .jsonl, .json or .parquet files"),
    ("missing.txt", "no such file"),
])
def test_bad_local_files_fail_with_one_clear_line(tmp_path, name, words):
    _bad_files(tmp_path)
    with pytest.raises(ValueError) as info:
        C.load_corpus(str(tmp_path / name))
    message = str(info.value)
    assert name in message and words in message
    assert "\n" not in message


def test_missing_path_is_not_mistaken_for_a_hub_name():
    for spec in ("./nope", "~/nowhere/corpus", "some/deep/folder", "corpus.jsonl.gz"):
        with pytest.raises(C.CorpusError, match="no such file"):
            C.load_corpus(spec)


# ---------------------------------------------------------------------------------------------
# Corpora: the hub, offline: fail at once, with one line


def _check_offline(error, spec):
    message = str(error)
    assert "\n" not in message
    assert spec in message and "Hub cannot be reached" in message
    assert "local path" in message and '"austen"' in message


# "Fails fast" is checked by what is called, not by a clock: the hub library (which retries for
# ~25 s before it gives up) is never reached, and the only network call is the probe's one bounded
# connect.


@pytest.fixture
def hub_calls(monkeypatch):
    """Every TCP connect made (each still goes through), and every call that reached the hub library."""
    calls = {"connect": [], "library": []}
    real_connect = C.socket.create_connection

    def connect(address, timeout=None, *args, **kwargs):
        calls["connect"].append((address, timeout))
        return real_connect(address, timeout, *args, **kwargs)

    def library(*args, **kwargs):
        calls["library"].append(args)
        raise ConnectionError("the test stands in for the hub library")

    monkeypatch.setattr(C.socket, "create_connection", connect)
    monkeypatch.setattr(C, "_load_dataset", library)
    return calls


def _no_hub_env(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(var, raising=False)


def test_hub_corpus_offline_mode_fails_at_once(monkeypatch, hub_calls):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(C.HubUnreachable) as info:
        C.load_corpus("allenai/c4:en", max_docs=10)
    _check_offline(info.value, "allenai/c4:en")
    assert "HF_HUB_OFFLINE is set" in str(info.value)
    assert hub_calls == {"connect": [], "library": []}  # the flag alone decides: not even a probe


def test_hub_unreachable_without_offline_flag_fails_fast(monkeypatch, hub_calls):
    # No offline flag: the probe itself must notice.  Port 9 on loopback refuses at once, online or
    # not, so this checks the probe (not the machine's network) and never hangs.
    _no_hub_env(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(C.HubUnreachable) as info:
        C.load_corpus("HuggingFaceFW/fineweb-edu")
    _check_offline(info.value, "HuggingFaceFW/fineweb-edu")
    assert "no connection to 127.0.0.1" in str(info.value)
    with pytest.raises(C.HubUnreachable) as info:  # from_pretrained would fail as a CorpusError instead
        T.load_tokenizer("gpt2")
    _check_offline(info.value, "gpt2")
    # One bounded connect per call, and the library's retrying client never started.
    assert hub_calls["connect"] == [(("127.0.0.1", 9), C.HUB_PROBE_SECONDS)] * 2
    assert hub_calls["library"] == []


def test_a_hub_probe_that_never_answers_is_given_up(monkeypatch, hub_calls):
    # A connect (or DNS lookup) that hangs: the probe stops waiting after its bound, while the
    # connect is still hanging, and says so.  Were the probe to wait for the connect, the call
    # would only return once the connect is let go, PATIENCE seconds on, and the check below fails.
    _no_hub_env(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.invalid")
    monkeypatch.setattr(C, "HUB_PROBE_SECONDS", 0.2)
    release, returned = threading.Event(), threading.Event()

    def hanging_connect(address, timeout=None, *args, **kwargs):
        try:
            release.wait(PATIENCE)
            raise OSError("let go by the test")
        finally:
            returned.set()

    monkeypatch.setattr(C.socket, "create_connection", hanging_connect)
    try:
        with pytest.raises(C.HubUnreachable) as info:
            C.load_corpus("HuggingFaceFW/fineweb-edu")
        assert not returned.is_set(), "the probe waited for a connect that never answered"
    finally:
        release.set()
    _check_offline(info.value, "HuggingFaceFW/fineweb-edu")
    assert "no answer from hub.invalid within 0.2 s" in str(info.value)
    assert hub_calls["library"] == []


# ---------------------------------------------------------------------------------------------
# Corpora: Austen, one whole novel held out


def test_austen_validation_is_exactly_persuasion(austen):
    persuasion = _persuasion()
    assert austen.val == (persuasion,)
    assert len(austen.train) == 5 and persuasion not in austen.train
    assert all(len(doc) > 400_000 for doc in austen.train)
    assert "Persuasion" in persuasion[:100]


def test_austen_novels_stay_whole_whatever_doc_sep(austen):
    # Austen's novels hold thousands of blank lines: the default cut must not reach them.
    assert "\n\n" in austen.val[0]
    for doc_sep in ("blank", "line"):
        assert C.load_corpus("austen", doc_sep=doc_sep).fingerprint == austen.fingerprint


def test_austen_other_novel_and_bad_name():
    emma = C.load_corpus("austen", val_doc="Emma")
    assert emma.val[0].startswith("EMMA") and len(emma.train) == 5
    with pytest.raises(ValueError, match="not one of Austen's novels: emma, mansfieldpark"):
        C.load_corpus("austen", val_doc="ulysses")
    with pytest.raises(ValidationError, match="ulysses"):
        D.LMDataConfig(val_doc="ulysses")


def test_embedded_corpus_ships_with_its_provenance():
    files = sorted(p.name for p in C.AUSTEN_DIR.iterdir())
    assert files == ["PROVENANCE.md", *(f"{n}.txt.gz" for n in C.AUSTEN_NOVELS)]
    assert "Persuasion" in (C.AUSTEN_DIR / "PROVENANCE.md").read_text()


# ---------------------------------------------------------------------------------------------
# Tokenizer (ema_core.lm.tokenizer)


def test_bpe_round_trip(austen, bpe512):
    samples = [austen.val[0][:20_000], austen.train[2][-5000:], *TEXTS, "", " ", "\n\n\n", "\t \t",
               "a  b   c    d", "ſ ﬁ ẞ \u200b zero-width, \U0001F600 and \x01 control", T.EOT + " literal EOT text"]
    for text in samples:
        ids, _ = S.encode_documents(bpe512, [text], T.eot_id(bpe512))
        assert ids[-1] == 0 and 0 not in ids[:-1]      # only the boundary we add is EOT
        assert bpe512.decode(list(ids[:-1])) == text


def test_bpe_is_deterministic_and_survives_json(tmp_path, austen, bpe512):
    texts = [austen.train[1][:100_000], austen.train[3][:100_000]]
    first, second = T.train_bpe(texts, 512), T.train_bpe(texts, 512)
    assert T.tokenizer_json(first) == T.tokenizer_json(second)
    assert T.tokenizer_fingerprint(first) == T.tokenizer_fingerprint(second)
    assert first.get_vocab_size() == 512 and T.eot_id(first) == 0
    (tmp_path / "tok.json").write_text(T.tokenizer_json(bpe512))
    loaded = T.load_tokenizer(tmp_path / "tok.json")
    assert T.tokenizer_fingerprint(loaded) == T.tokenizer_fingerprint(bpe512)
    assert loaded.encode(texts[0][:3000]).ids == bpe512.encode(texts[0][:3000]).ids
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(C.CorpusError, match="bad.json: not a tokenizer JSON file"):
        T.load_tokenizer(tmp_path / "bad.json")


def test_chunked_encoding_equals_whole_encoding(austen, bpe512):
    # Awkward line breaks included: the cut must never fall inside a whitespace run.
    text = austen.val[0][:60_000] + "\n\n  x\n \ny\n\t\nz\n" * 50 + austen.train[0][:20_000]
    whole = bpe512.encode(text).ids
    pieces = list(T.chunks(text, 500))
    assert len(pieces) > 50 and "".join(pieces) == text
    chunked, n_bytes = S.encode_documents(bpe512, [text], 0, chunk_chars=500)
    assert list(chunked[:-1]) == whole and n_bytes == len(text.encode())


# ---------------------------------------------------------------------------------------------
# Token streams and their cache (ema_core.lm.stream), composed by prepare (ema_core.lm.data)


def test_token_streams_cached_by_corpus_and_tokenizer(tmp_path, monkeypatch, austen):
    # The one full-size run: the 8192 BPE on five novels, then every token.
    tok = T.cached_bpe(austen, 8192, tmp_path)
    assert tok.get_vocab_size() == 8192
    streams = S.token_streams(austen, tok, tmp_path)
    assert not streams.from_cache
    assert streams.train.dtype == np.uint16 and streams.train.ndim == 1
    assert int((streams.train == streams.eot_id).sum()) == 5 and int((streams.val == streams.eot_id).sum()) == 1
    assert streams.val[-1] == streams.eot_id
    assert streams.train_bytes == sum(len(d.encode()) for d in austen.train)
    assert streams.val_bytes == len(_persuasion().encode())
    assert 3.5 < streams.bytes_per_token("val") < 4.5
    assert tok.decode(streams.val[:-1].tolist()) == austen.val[0]

    # Second time round nothing is trained or tokenized again.
    def boom(*args, **kwargs):
        raise AssertionError("recomputed instead of reading the cache")

    monkeypatch.setattr(T, "train_bpe", boom)
    monkeypatch.setattr(S, "encode_documents", boom)
    again = S.token_streams(austen, T.cached_bpe(austen, 8192, tmp_path), tmp_path)
    assert again.from_cache and again.path == streams.path
    assert np.array_equal(again.train, streams.train) and np.array_equal(again.val, streams.val)
    meta = json.loads((streams.path / "meta.json").read_text())
    assert meta["val_tokens"] == streams.val.size and meta["val_bytes"] == streams.val_bytes
    # Only finished entries are visible: no temporary folder or file is left behind.
    assert not [p for p in tmp_path.rglob(".*") if not p.name.endswith(".lock")]


def test_cache_key_follows_content(tmp_path, bpe512):
    a = C.Corpus.from_documents("x", ["one document\n"], ["held out\n"], "")
    b = C.Corpus.from_documents("y", ["one document\n"], ["held out\n"], "")          # same text, other name
    c = C.Corpus.from_documents("x", ["one document\n", "held out\n"], [], "")        # same text, other split
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert S.token_streams(a, bpe512, tmp_path).key == S.token_streams(b, bpe512, tmp_path).key


def test_prepare_on_a_local_corpus(tmp_path):
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": f"Sentence number {i}.\n"}) + "\n"
                                              for i in range(60)))
    data = D.prepare(D.LMDataConfig(corpus=str(tmp_path / "c.jsonl"), vocab_size=300), tmp_path / "cache")
    assert len(data.corpus.train) == 57 and len(data.corpus.val) == 3
    assert data.streams.val_bytes == sum(len(t) for t in data.corpus.val)
    assert (tmp_path / "cache" / "tokenizers").is_dir()


# ---------------------------------------------------------------------------------------------
# Bits per byte, paths, imports


def test_bits_per_byte_known_case():
    # ln 2 nats per token = 1 bit per token; 4 bytes per token → 0.25 bit per byte.
    assert S.bits_per_byte(math.log(2), 1000, 4000) == pytest.approx(0.25)
    # A uniform guess over 256 byte-tokens, one byte each: 8 bits per byte.
    assert S.bits_per_byte(math.log(256), 10, 10) == pytest.approx(8.0)
    with pytest.raises(ValueError):
        S.bits_per_byte(1.0, 10, 0)


def test_default_cache_dir_follows_emalab_home(tmp_path, monkeypatch):
    from ema_core.rundir import emalab_home as jobs_home

    from ema_core.paths import emalab_home

    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    assert D.default_cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("EMALAB_HOME")
    assert emalab_home() == jobs_home()


def test_data_modules_import_light():
    # A fresh interpreter (this one has imported everything), one for both modules: the corpus module
    # first, checked alone, then the data module, checked with it.  What the data module imports alone
    # is within what both import, so a heavy library it pulls in is still caught.
    # The app's source check reads looks_like_path from the corpus module: no tokenizer library with it.
    code = ("import sys, ema_core.lm.corpus; "
            "bad = [m for m in ('tokenizers', 'datasets', 'torch') if m in sys.modules]; "
            "assert not bad, ('ema_core.lm.corpus', bad); "
            "import ema_core.lm.data; "
            "bad = [m for m in ('streamlit', 'duckdb', 'jobs', 'datasets', 'torch') if m in sys.modules]; "
            "assert not bad, ('ema_core.lm.data', bad)")
    subprocess.run([sys.executable, "-c", code], check=True)
