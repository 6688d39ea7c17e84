"""Runs made while configs were flat still open, resume, ingest and export once configs are nested.

An older run folder is made here exactly as the older code left it: config.json holding the flat
config (``"steps"``, ``"hebbian_lr"``), and checkpoints whose stored config is the flat JSON.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import torch

import store
from ema_core.config import flatten
from ema_core.experiments import REGISTRY, NullReporter, build_config
from ema_core.protocol import StoredConfig
from ema_core.rundir import OLDER_SHAPES, RunDir, atomic_write, current_config, wait_for
from jobs.runner import LocalRunner, job_label

LONG = dict(alphas="0.5,0.1", vocab=16, dim=16, max_lag=4, n_train=512, n_test=256, steps=1000, batch=32,
            checkpoint_every=200, log_every=50)
PATIENCE = 600  # liveness only


def flat_form(kind: str, config: dict) -> dict:
    """``config`` (nested, as dumped today) in the flat form the older code wrote, key order kept.

    Settings a group has that the flat config did not (``bigru.layers``) are left out, as they were:
    the older code ran them at their defaults, and the tests keep them there.
    """
    back = {path: name for name, path in REGISTRY[kind].older_paths.items()}
    return {back.get(path, path): value for path, value in flatten(config).items() if "." not in back.get(path, path)}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("kind, overrides", [
    ("dilution", {"steps": 7, "vocab": 20}),
    ("structure", {"hebbian_lr": 0.2, "bigru_hidden": 16, "units": 64, "k": 4, "deep_depth": 4}),
    # older lm runs read a .txt corpus whole: they are read back with doc_sep "none" (see below)
    ("content", {"model": "gpt", "steps": 20, "warmup": 2, "corpus": "austen", "vocab_size": 512, "doc_sep": "none"}),
])
def test_an_older_flat_config_reads_as_the_same_config(kind, overrides):
    cfg = build_config(kind, overrides=overrides)
    old = flat_form(kind, cfg.model_dump(mode="json"))
    assert not any("." in key for key in old) and set(old) != set(cfg.model_dump())
    assert type(cfg).model_validate(current_config(kind, old)) == cfg
    # a checkpoint of the older code names the same config; one of another config does not
    assert StoredConfig(kind, cfg).matches(json.dumps(old))
    assert StoredConfig(kind, cfg).matches(cfg.model_dump_json())
    other = build_config(kind, overrides={**overrides, "seed": 1})
    assert not StoredConfig(kind, other).matches(json.dumps(old))
    assert not StoredConfig(kind, cfg).matches("not json") and not StoredConfig(kind, cfg).matches(None)


def test_a_setting_added_since_reads_as_what_the_older_run_did():
    # data.doc_sep came after runs that read a .txt corpus as one document: such a run resumes so
    older = current_config("content", {"model": "spen", "data": {"corpus": "notes.txt"}, "train": {"steps": 5}})
    assert older["data"] == {"corpus": "notes.txt", "doc_sep": "none"}
    flat = current_config("content", {"model": "spen", "corpus": "notes.txt", "steps": 5})
    assert flat["data"]["doc_sep"] == "none" and flat["train"] == {"steps": 5}
    today = {"model": "spen", "data": {"corpus": "notes.txt", "doc_sep": "blank"}}
    assert current_config("content", today) is today
    assert current_config("dilution", {"alphas": [0.5]}) == {"alphas": [0.5]}


def test_a_config_of_today_passes_as_it_is():
    cfg = build_config("content", preset="quick").model_dump(mode="json")
    assert current_config("content", cfg) is cfg
    assert current_config("some-later-kind", {"steps": 3}) == {"steps": 3}


def test_each_kind_declares_its_older_shapes_in_its_experiment():
    # What the readers of run folders use is what each experiment declared, and nothing else.
    assert {kind: (dict(e.older_paths), dict(e.older_behaviour)) for kind, e in REGISTRY.items()} == OLDER_SHAPES
    assert REGISTRY["structure"].older_paths["hebbian_lr"] == "spcn.lr"
    assert REGISTRY["content"].older_behaviour == {"data.doc_sep": "none"}
    assert not REGISTRY["boundary"].older_paths  # made after configs were nested


def test_the_store_reads_an_older_run_without_its_caller_loading_an_experiment(tmp_path):
    # A notebook or script that imports only the store: importing it loads no torch, and its ingest
    # still reads an older flat config in today's shape (it loads the experiments' declarations).
    home = tmp_path / "home"
    cfg = build_config("dilution", overrides={"steps": 7, "vocab": 20})
    rd = RunDir.for_id("dilution-000000000000-s0", home)
    rd.create("dilution", flat_form("dilution", cfg.model_dump(mode="json")), 0)
    code = ("import json, sys; from pathlib import Path; import store; "
            "print('torch' in sys.modules); store.ingest(home=Path(sys.argv[1])); "
            "print(json.loads(store.list_runs(home=Path(sys.argv[1])).loc[0, 'config'])['train']['steps'])")
    out = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "7"]


def _make_older(rd: RunDir) -> None:
    """Rewrite a stopped run folder as the older code would have left it."""
    record = json.loads(rd.config_path.read_text())
    record["config"] = flat_form(record["kind"], record["config"])
    atomic_write(rd.config_path, json.dumps(record, indent=2, sort_keys=True))
    for _, path in rd.checkpoints():
        state = torch.load(path, map_location="cpu", weights_only=True)
        state["config"] = json.dumps(flat_form(record["kind"], json.loads(state["config"])))
        buf = io.BytesIO()
        torch.save(state, buf)
        atomic_write(path, buf.getvalue())


def test_an_older_run_resumes_bit_exact_ingests_nested_and_exports(home):
    reference = REGISTRY["dilution"].run(build_config("dilution", overrides=LONG, seed=3), NullReporter())
    runner = LocalRunner(home=home, grace_s=PATIENCE)
    try:
        run_id = runner.submit("dilution", LONG, seed=3)
        rd = RunDir.for_id(run_id, home)
        assert wait_for(lambda: rd.checkpoints() and rd.read_status().get("state") == "running", PATIENCE, 0.01)
        assert runner.cancel(run_id) == "cancelled"
        _make_older(rd)
        assert "steps" in json.loads(rd.config_path.read_text())["config"]  # flat on disk, as before

        # listed and labelled as before: the flat names read in today's shape
        row = next(r for r in runner.list() if r["run_id"] == run_id)
        assert row["state"] == "cancelled" and row["config"]["train"]["steps"] == 1000
        assert job_label("dilution", row["config"], None)["changes"]["stream.vocab"] == 16
        assert "vocab=16" in job_label("dilution", row["config"], None)["label"]

        runner.resume(run_id)
        assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    finally:
        runner.close()
    result = rd.read_result()
    drop = lambda r: (r["tables"], {k: v for k, v in r["summary"].items() if k != "seconds"})  # noqa: E731
    assert drop(result) == drop(reference)
    assert "passed over" not in rd.log_path.read_text()  # the flat checkpoint was this run's, and used

    store.ingest(home=home)
    stored = store.list_runs(home=home)
    assert json.loads(stored.loc[0, "config"])["train"]["steps"] == 1000
    path = store.export_table("dilution_accuracy", "csv", home=home)
    assert path.stat().st_size > 0 and "0.5" in path.read_text()
