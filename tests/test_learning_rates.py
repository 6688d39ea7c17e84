"""The one form of the learning rates chosen on dev (ema_core.learning_rates): every study's tables, how ``auto``
reads them and refuses, and ``emalab learning-rates``."""
from __future__ import annotations

import dataclasses
import json

import pytest

from ema_core.experiments import build_config
from ema_core.learning_rates import AUTO, RateTable, flat_settings, rate_source, resolve
from ema_core.studies import STUDIES
from jobs import cli

RATED = {name: study for name, study in STUDIES.items() if study.learning_rates}
TABLE = RateTable(name="t", cell=("model", "depth"), rates={"a|4": 0.01, "b|4": 0.02},
                  tuned_for={"train.steps": 300, "model.d": 64, "data.lens": [8, 16]}, sweep="python -m bench.x",
                  source="python -m bench.x --seed 0", unrecorded=("model.",), budget="300 steps")
OTHER = RateTable(name="u", cell=("model", "depth"), rates={"a|4": 0.5}, tuned_for={"train.steps": 900},
                  sweep="python -m bench.x", source="python -m bench.x --steps 900", binding=("train.steps",),
                  budget="900 steps")


def _config(steps=300, d=64, **more):
    return {"train": {"steps": steps, "lr": AUTO}, "model": {"d": d, **more}, "data": {"lens": (8, 16)}}


def test_every_study_that_says_auto_declares_its_tables_in_its_folder_and_each_fits_its_config():
    assert set(RATED) == {"content", "depth", "boundary"}
    for name, study in RATED.items():
        tables = study.rate_tables()
        assert tables and len({t.name for t in tables}) == len(tables), name
        settings = flat_settings(build_config(study.kind).model_dump(mode="json"))
        for t in tables:
            # every setting it records is one the study's config has (a renamed setting would refuse every run)
            assert set(t.tuned_for) <= set(settings), (name, t.name, set(t.tuned_for) - set(settings))
            assert set(t.binding or ()) <= set(t.tuned_for), (name, t.name)
            assert t.rates and all(0 < r < 1 for r in t.rates.values()), (name, t.name)
            assert all(len(k.split("|")) <= len(t.cell) for k in t.rates), (name, t.name)
            assert t.source.startswith(t.sweep) and t.budget, (name, t.name)
        # the study's quick preset reads one of its tables where it says auto
        quick = build_config(study.kind, preset="quick").model_dump(mode="json")
        if quick["train"].get("lr") == AUTO:
            assert resolve(tables, quick).matched, name


def test_auto_reads_the_table_whose_settings_a_config_shares_and_refuses_one_it_does_not():
    got = resolve((TABLE, OTHER), _config(), [("a", 4), ("b", 4)])
    assert (got.table, got.rates, got.matched) == (TABLE, {("a", 4): 0.01, ("b", 4): 0.02}, True)
    # OTHER binds on train.steps alone: a config at 900 steps reads it, and is not "matched" elsewhere
    assert resolve((TABLE, OTHER), _config(steps=900), [("a", 4)]).table is OTHER
    with pytest.raises(ValueError, match=r"^train.lr: auto, but no rates were chosen at these settings \(t: "
                                         r"train.steps 300 there, 50 here; u: train.steps 900 there, 50 here\); "
                                         r"set train.lr to a number$"):
        resolve((TABLE, OTHER), _config(steps=50))
    # a model setting the table never recorded is a body it never saw
    with pytest.raises(ValueError, match=r"t: model.heads None there, 2 here"):
        resolve((TABLE,), _config(heads=2))
    # named on purpose, a table is read at other settings, and the result says it did not match
    read = resolve((TABLE,), _config(steps=50), [("a", 4)], read="t")
    assert (read.rates, read.matched) == ({("a", 4): 0.01}, False)
    with pytest.raises(ValueError, match=r"^no rate table named 'v' \(tables: t, u\)$"):
        resolve((TABLE, OTHER), _config(), read="v")


def test_a_cell_without_a_rate_is_refused_or_left_to_a_choice_on_dev_as_the_table_says():
    with pytest.raises(ValueError, match=r"no rate for model c depth 4 \(it holds model a, b; depth 4\); choose "
                                         r"them on dev with python -m bench.x, or set train.lr to a number$"):
        resolve((TABLE,), _config(), [("c", 4)])
    dev = dataclasses.replace(TABLE, missing="dev")
    assert resolve((dev,), _config(), [("a", 4), ("c", 4)]).rates == {("a", 4): 0.01}  # c chooses on dev
    with pytest.raises(ValueError, match="the t rate table is empty"):
        resolve((dataclasses.replace(dev, rates={}),), _config())


def test_the_rates_source_says_where_a_runs_rates_came_from():
    assert rate_source((TABLE,), _config()).startswith("From the `t` rate table, chosen on dev at these very settings")
    assert rate_source((TABLE,), _config(steps=50, heads=2), {"rate_table": "t", "rates_matched": False}) == (
        "From the `t` rate table: rates chosen on dev at other settings (300 steps), read here on purpose "
        "(train.steps 300 there, 50 here, model.heads None there, 2 here)")
    assert "no longer holds" in rate_source((TABLE,), _config(), {"rate_table": "gone"})
    assert rate_source((TABLE,), {"train": {"lr": 3e-3}}) == "Set in the config: train.lr = 0.003, the same for every cell"


def test_emalab_learning_rates_prints_every_studys_tables(capsys):
    assert cli.main(["learning-rates", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["studies"]) == set(RATED)
    tiny = next(t for t in report["studies"]["content"] if t["name"] == "tiny")
    assert tiny["rates"] == {"spen": 0.01, "gpt": 0.003} and tiny["binding"] == ["size"]
    assert cli.main(["learning-rates", "--study", "depth"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("depth / quick: a rate per rule × depth, 12 rates") and "  sum|8: 0.004" in text
    assert cli.main(["learning-rates", "--study", "dilution"]) == 2  # it chooses no rates: not a choice
    assert "invalid choice: 'dilution'" in capsys.readouterr().err
