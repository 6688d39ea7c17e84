"""Bringing your own mixer, as the README says: its module, one registry line, and nothing else.

The README's example module is read from the README itself (so the example cannot rot), registered
in ``MIXERS``, held to the contract every mixer meets (reference, gradients, exact causality, the
comparison model), trained on the boundary study's tasks, ingested, and found on the Boundary map
page and in the export, with no change to generic code.
"""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

import test_mixers
from apptest import ok, open_page
from ema_core.experiments import REGISTRY, NullReporter, build_config
from ema_core.mixers import MIXERS
from finished_run import write_finished_run
from store import export_table, ingest

README = Path(__file__).resolve().parents[1] / "README.md"
NAME = "cumulative_mean"


def readme_module() -> str:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(# ema_core/mixers/mine\.py\n.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "the README holds one example mixer module"
    return blocks[0]


@pytest.fixture
def registered(monkeypatch):
    """The README's module imported as ema_core.mixers.mine and its one registry line applied."""
    module = types.ModuleType("ema_core.mixers.mine")
    exec(compile(readme_module(), "ema_core/mixers/mine.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "ema_core.mixers.mine", module)
    monkeypatch.setitem(MIXERS, NAME, module.CumulativeMean)
    return module.CumulativeMean


@pytest.mark.parametrize("check", [
    test_mixers.test_the_fast_path_equals_its_reference_in_float64,
    test_mixers.test_float32_stays_near_the_float64_reference,
    test_mixers.test_gradients_equal_the_reference_gradients,
    test_mixers.test_causality_is_exact,
    test_mixers.test_state_size_is_said_and_only_attention_grows_with_length,
    test_mixers.test_the_comparison_model_is_as_causal_as_its_mixer_and_learns,
])
def test_the_readme_mixer_meets_the_contract_every_mixer_meets(registered, check):
    check(NAME)


def test_the_readme_mixer_is_trained_stored_shown_and_exported(registered, tmp_path, monkeypatch):
    home = tmp_path / "home"
    overrides = {"mixers": f"ema,{NAME}", "distances": "1,2", "mqar_pairs": "2", "mqar_len": "16",
                 "data.seq_len": 16, "data.n_train": 32, "data.n_dev": 16, "data.n_test": 16,
                 "train.steps": 4, "train.lrs": "0.01", "model.d": 16}
    cfg = build_config("boundary", overrides=overrides)
    result = REGISTRY["boundary"].run(cfg, NullReporter())  # in this process: the registry line is here
    assert NAME in result["summary"]["map"] and result["summary"]["state_floats"][NAME] == 2 * 16
    run_id = write_finished_run(home, "boundary", cfg.model_dump(mode="json"), 0, [], result)
    report = ingest(home, [run_id])
    assert report["errors"] == [], report["errors"]

    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = open_page("pages/boundary.py")
    ok(at)
    shown = " ".join(str(x.value) for x in [*at.markdown, *at.caption]) + " ".join(
        d.value.to_string() for d in at.dataframe)
    assert NAME in shown
    path = export_table("boundary_accuracy", "csv", run_ids=[run_id], home=home)
    assert NAME in Path(path).read_text(encoding="utf-8")
