"""Notes and tags on runs (store/notes.py, migration 5) in a real store file, and the config diff of two runs."""
import pytest

from ema_core.rundir import RunDir
from store import config_diff, ingest, run_notes, set_note, tags_in_use
from store.db import open_store
from store.ingest import forget_seen
from store.notes import MAX_NOTE_CHARS, UnknownRunError, normalise_tags
from store.queries import ABSENT


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _run(home, run_id: str, state: str = "running") -> RunDir:
    rd = RunDir.for_id(run_id, home)
    rd.create("dilution", {"alphas": [0.5], "seed": 0}, 0)
    rd.append_events([{"seq": 0, "step": 1, "metrics": {"loss/α=0.5": 2.0}}])
    rd.write_status(state=state, started="2026-01-01T00:00:00+00:00")
    return rd


def _note_rows(home) -> list[tuple]:
    with open_store(readonly=True, home=home) as conn:
        return conn.execute("SELECT run_id, note, tags FROM run_notes ORDER BY run_id").fetchall()


def test_a_note_and_its_tags_are_kept_and_read_back(home):
    _run(home, "dilution-aaaaaaaaaaaa-s0")
    _run(home, "dilution-bbbbbbbbbbbb-s0")
    assert ingest(home)["errors"] == []
    row = set_note("dilution-aaaaaaaaaaaa-s0", "fast rate only", " baseline, lr sweep ,baseline,, ", home=home)
    assert row["tags"] == ["baseline", "lr sweep"]
    set_note("dilution-bbbbbbbbbbbb-s0", tags=["Gpt", "gpt"], home=home)
    notes = run_notes(home=home).set_index("run_id")
    assert notes.loc["dilution-aaaaaaaaaaaa-s0", "note"] == "fast rate only"
    assert notes.loc["dilution-aaaaaaaaaaaa-s0", "tags"] == ["baseline", "lr sweep"]
    assert notes.loc["dilution-bbbbbbbbbbbb-s0"].tolist()[:2] == ["", ["Gpt", "gpt"]]
    assert list(run_notes(["dilution-bbbbbbbbbbbb-s0"], home=home)["run_id"]) == ["dilution-bbbbbbbbbbbb-s0"]
    assert run_notes([], home=home).empty
    assert tags_in_use(home=home) == ["baseline", "Gpt", "gpt", "lr sweep"]

    # None leaves a part as it was; text replaces it, and an empty text clears it.
    set_note("dilution-aaaaaaaaaaaa-s0", note="fast rate only; rerun at seed 3", home=home)
    set_note("dilution-bbbbbbbbbbbb-s0", note="", tags="", home=home)
    assert _note_rows(home) == [
        ("dilution-aaaaaaaaaaaa-s0", "fast rate only; rerun at seed 3", ["baseline", "lr sweep"]),
        ("dilution-bbbbbbbbbbbb-s0", "", []),
    ]


def test_a_note_on_a_run_the_store_does_not_hold_is_refused_by_its_id(home):
    _run(home, "dilution-aaaaaaaaaaaa-s0")
    ingest(home)
    with pytest.raises(UnknownRunError, match=r"no run 'dilution-typo-s0' in the store"):
        set_note("dilution-typo-s0", "lost", "x", home=home)
    # A run folder the store has not taken in yet is unknown to it too.
    _run(home, "dilution-cccccccccccc-s0")
    with pytest.raises(UnknownRunError, match="dilution-cccccccccccc-s0"):
        set_note("dilution-cccccccccccc-s0", "too soon", home=home)
    assert _note_rows(home) == []
    for bad, message in ((None, "run id"), ("  ", "run id")):
        with pytest.raises(ValueError, match=message):
            set_note(bad, "x", home=home)
    with pytest.raises(ValueError, match="a note is text"):
        set_note("dilution-aaaaaaaaaaaa-s0", 3, home=home)
    with pytest.raises(ValueError, match=f"at most {MAX_NOTE_CHARS:,}"):
        set_note("dilution-aaaaaaaaaaaa-s0", "x" * (MAX_NOTE_CHARS + 1), home=home)
    assert _note_rows(home) == []


def test_tags_are_stripped_split_at_commas_and_kept_once():
    assert normalise_tags(None) == [] and normalise_tags("") == [] and normalise_tags(" , ,") == []
    assert normalise_tags("a,b , a") == ["a", "b"]
    assert normalise_tags(["lr  sweep", "x,y", " x "]) == ["lr sweep", "x", "y"]  # no tag holds a comma
    assert normalise_tags("B, b") == ["B", "b"]  # as written: a tag's case is the user's
    with pytest.raises(ValueError, match="a tag is text, got 3"):
        normalise_tags(["a", 3])
    with pytest.raises(ValueError, match="at most 64"):
        normalise_tags("x" * 65)


def test_ingest_never_deletes_or_overwrites_a_note(home):
    rd = _run(home, "dilution-aaaaaaaaaaaa-s0")
    ingest(home)
    set_note(rd.run_id, "watch the loss", "keep", home=home)
    # The run goes on and finishes: new events, a result, a final state; ingested twice over, and
    # once more from scratch as a restarted app would.
    rd.append_events([{"seq": 1, "step": 2, "metrics": {"loss/α=0.5": 1.0}}])
    rd.write_result({"summary": {"horizon/α=0.5": 2}, "tables": {}})
    rd.write_status(state="done", ended="2026-01-01T00:01:00+00:00", progress=1.0)
    assert ingest(home)["errors"] == []
    forget_seen()
    assert ingest(home)["errors"] == []
    assert _note_rows(home) == [(rd.run_id, "watch the loss", ["keep"])]
    with open_store(readonly=True, home=home) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("done",)]


# -- two runs' settings side by side (store.queries.config_diff) -------------------------------------

def test_the_config_diff_lines_up_two_runs_settings():
    a = ("content", {"model": "spen", "seed": 0, "train": {"lr": 0.003, "steps": 700}, "data": {"corpus": "austen"},
                "mqar": None})
    b = ("content", {"model": "gpt", "seed": 1, "train": {"lr": 0.003, "steps": 700}, "data": {"corpus": "austen"},
                "mqar": None, "device": "cpu"})
    diff = config_diff(a, b)
    assert list(diff.columns) == ["setting", "a", "b", "same"]
    rows = {r.setting: (r.a, r.b, r.same) for r in diff.itertuples()}
    assert list(rows) == ["kind", "seed", "model", "train.lr", "train.steps", "data.corpus", "mqar", "device"]
    assert rows["kind"] == ("content", "content", True) and rows["seed"] == ("0", "1", False)
    assert rows["model"] == ("spen", "gpt", False)
    assert rows["train.lr"] == ("0.003", "0.003", True) and rows["data.corpus"] == ("austen", "austen", True)
    assert rows["mqar"] == ("null", "null", True)
    assert rows["device"] == (ABSENT, "cpu", False)  # a setting only one run has differs, whatever its value
    assert [r.setting for r in diff[~diff["same"]].itertuples()] == ["seed", "model", "device"]


def test_the_config_diff_compares_runs_of_two_studies_by_their_settings_paths():
    diff = config_diff(("boundary", {"seed": 0, "device": "cpu", "mixers": ["ema", "softmax"], "absent": None}),
                       ("structure", {"seed": 0, "device": "cpu", "n_train": 400}))
    rows = {r.setting: (r.a, r.b, r.same) for r in diff.itertuples()}
    assert rows["kind"] == ("boundary", "structure", False)
    assert rows["seed"] == ("0", "0", True) and rows["device"] == ("cpu", "cpu", True)
    assert rows["mixers"] == ('["ema","softmax"]', ABSENT, False) and rows["n_train"] == (ABSENT, "400", False)
    assert rows["absent"] == ("null", ABSENT, False)  # null in one run, no such setting in the other
