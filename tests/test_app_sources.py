"""The Jobs page reads a corpus or tokenizer only from the data folder, the project's data/ or the hub.

A job reads its corpus with the server's rights for whoever reaches the app: a path outside those
folders is refused before anything is built, with one message whether or not it exists.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from jobs.runner import LocalRunner

APP = str(Path(__file__).resolve().parents[1] / "app.py")
DATA = Path(__file__).resolve().parents[1] / "data"
# Liveness only: a script run that has not ended by then is stuck, however busy the machine.
TIMEOUT = 600


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def submitted(monkeypatch):
    # What the page hands to the runner, without starting a worker: an accepted path is the point
    # here, not a language model trained on it.
    calls = []

    def submit(self, kind, cfg, preset=None, **kwargs):
        calls.append((kind, cfg))
        return f"{kind}-accepted-s{len(calls)}"

    monkeypatch.setattr(LocalRunner, "submit", submit)
    return calls


def _jobs_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page("pages/jobs.py").run()
    at.selectbox(key="launch_kind").set_value("content").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _launch(at: AppTest, overrides: str) -> list[str]:
    """Launch with ``overrides``; the page's error messages."""
    at.text_area(key="launch_overrides").set_value(overrides)
    next(b for b in at.button if b.label == "Launch").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return [e.value for e in at.error]


def test_only_the_data_folders_and_the_hub_are_read_and_refusals_are_alike(home, tmp_path, submitted):
    outside = tmp_path / "outside.txt"
    outside.write_text("a secret the server can read\n")
    (home / "link.txt").symlink_to(outside)
    (home / "folder").mkdir()
    (home / "folder" / "a.txt").write_text("fine\n")
    (home / "folder" / "b.txt").symlink_to(outside)  # a folder corpus reads every file under it
    cases = {
        "an existing system file": "corpus=/etc/passwd",
        "a missing file": f"corpus={tmp_path / 'missing' / 'nothing.txt'}",
        "an existing file": f"corpus={outside}",
        "a .. escape": f"corpus={home}/../outside.txt",
        "a symlink out": f"corpus={home / 'link.txt'}",
        "a folder holding a symlink out": f"corpus={home / 'folder'}",
        "a JSON string": 'corpus="/etc/passwd"',
        "its dotted path": "data.corpus=/etc/passwd",
        "its dotted path, spaced": " data.corpus =/etc/passwd",
        "a tokenizer file": "tokenizer=/etc/passwd",
        "a tokenizer by its path": "data.tokenizer=/etc/passwd",
        "a missing tokenizer file": f"tokenizer={tmp_path / 'missing.json'}",
    }
    at = _jobs_page()
    messages = {}
    for what, overrides in cases.items():
        errors = _launch(at, overrides)
        assert len(errors) == 1, (what, errors)
        messages[what] = errors[0]
    for what, message in messages.items():
        assert "the app reads only" in message, (what, message)
        assert str(tmp_path) not in message and "passwd" not in message, (what, message)
    said = {m for what, m in messages.items() if "tokenizer" not in what}
    # One message, existing or not: the refusal tells nothing about the file system.
    assert len(said) == 1 and next(iter(said)).startswith("Not launched: corpus:"), said
    tokenizer = {messages["a tokenizer file"], messages["a missing tokenizer file"], messages["a tokenizer by its path"]}
    assert len(tokenizer) == 1 and next(iter(tokenizer)).startswith("Not launched: tokenizer:"), tokenizer
    assert submitted == []
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())

    # Inside the data folder or the project's data/, and hub names: accepted and handed to the runner.
    corpus = home / "corpora" / "notes.txt"
    corpus.parent.mkdir()
    corpus.write_text("One document of plain text.\n\nAnd another.\n")
    (home / "same.txt").symlink_to(corpus)  # a symlink that stays inside is fine
    accepted = {
        f"corpus={corpus}": ("corpus", str(corpus)),
        f"corpus={home}/corpora/../same.txt": ("corpus", f"{home}/corpora/../same.txt"),
        f"corpus={DATA / 'austen'}": ("corpus", str(DATA / "austen")),
        "corpus=austen": ("corpus", "austen"),
        "corpus=allenai/c4:en": ("corpus", "allenai/c4:en"),
        "corpus=HuggingFaceFW/fineweb-edu\ntokenizer=gpt2": ("tokenizer", "gpt2"),
    }
    for n, (overrides, (field, value)) in enumerate(accepted.items(), start=1):
        assert _launch(at, overrides) == [], overrides
        assert len(submitted) == n and getattr(submitted[-1][1].data, field) == value, overrides
        assert any("content-accepted" in s.value for s in at.success), overrides
