"""The Depth dilution page's frames and charts on synthetic rows: the rates and where they came from, the
weights as they train, the remix test and the budget axis (no training: the page's tests read real runs)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from ema_core import palette
from ema_core.studies.depth.findings import claim_verdicts, trained_deep
from ema_core.experiments import build_config
from ema_core.figures import chart_to_svg
from ema_core.studies.depth.figures import (budget_chart, budget_frame, budget_loss_frame, rate_source, rates_frame,
                                    remix_frame, source_label, trajectory_chart, trajectory_frame)
from test_palette import _colours

QUICK_TOKENS = 300 * 8 * 128  # the quick table's budget, per model


def _rows(tokens=QUICK_TOKENS, rules=("sum", "static", "dynamic", "select"), depths=(4, 16), seeds=(0, 1, 2),
          deep_sum=4.0) -> pd.DataFrame:
    """``depth_results`` rows: every rule's loss falls with depth, the fixed sum's deepest at ``deep_sum``."""
    out = []
    for i, rule in enumerate(rules):
        for L in depths:
            for seed in seeds:
                loss = (5.0 if L == depths[0] else deep_sum) - 0.1 * i + 0.01 * seed
                out.append(dict(run_id=f"depth-{tokens}-s0", seed=seed, rule=rule, depth=L, tokens=tokens,
                                lr=1e-3 * (i + 1) * (2 if L == depths[-1] else 1), val_loss=loss))
    return pd.DataFrame(out)


def test_the_rates_table_has_a_row_per_rule_in_the_papers_order_and_a_column_per_depth():
    rows = _rows(rules=("select", "sum", "static"))
    table = rates_frame(rows)
    assert list(table.columns) == ["rule", "4 blocks", "16 blocks"]
    assert list(table["rule"]) == ["sum", "static", "select"]
    assert table.loc[table["rule"] == "static", "16 blocks"].item() == "0.006"
    # Two configs that trained a cell at different rates: both shown, never averaged.
    both = pd.concat([rows, rows.assign(lr=rows["lr"] / 2, run_id="other")])
    assert rates_frame(both).loc[lambda t: t["rule"] == "sum", "4 blocks"].item() == "0.001, 0.002"


@pytest.mark.parametrize("preset, says", [
    ("quick", "From the `quick` rate table, chosen on dev at these very settings"),
    ("long", "From the `quick` rate table: rates chosen on dev at other settings (300 cosine steps of 8 × 128 tokens), "
             "read here on purpose (train.steps 300 there, 2400 here"),
    ("full", "read here on purpose (train.steps 300 there, 1200 here"),
])
def test_the_rates_source_says_when_another_budgets_table_was_read_on_purpose(preset, says):
    config = build_config("depth", preset=preset).model_dump(mode="json")
    assert says in rate_source(config)  # from the config alone (a run stored before its summary said)
    # The run's own record wins over what the config would give today.
    matched = {"rate_table": "quick", "rates_matched": True}
    assert "chosen on dev at these very settings" in rate_source(config, matched)
    assert "read here on purpose" in rate_source(config, {**matched, "rates_matched": False})
    config["train"]["lr"] = 0.002
    assert rate_source(config) == "Set in the config: train.lr = 0.002, the same for every cell"


def _steps(rule="select", depth=2, seeds=(0, 1)) -> pd.DataFrame:
    return pd.DataFrame([dict(run_id="r", seed=s, rule=rule, depth=depth, step=step, layer=layer, source=src,
                              weight=0.1 * src + 0.01 * step + 0.001 * s)
                         for s in seeds for step in (0, 100, 200) for layer in range(1, depth + 1)
                         for src in range(layer + 1)])


def test_the_weights_as_they_train_are_the_mean_over_seeds_one_panel_per_block():
    steps = pd.concat([_steps(), _steps(rule="static"), _steps(depth=4)])
    frame = trajectory_frame(steps, "select", 2)
    assert len(frame) == 3 * (2 + 3) and set(frame["n"]) == {2}  # (layer, source) pairs at three steps
    cell = frame[(frame["layer"] == 2) & (frame["source"] == 1) & (frame["step"] == 100)].iloc[0]
    assert cell.weight == pytest.approx(0.1 + 1.0 + 0.0005) and cell.source_label == "block 1"
    assert source_label(0) == "0: the embedding"
    chart = trajectory_chart(frame, "select", 2)
    spec = json.loads(chart.to_json())
    assert spec["facet"]["field"] == "layer" and spec["columns"] == 2
    found, series = _colours(chart)
    # The palette's ordered ramp, the embedding at its dark end and the last block at its light end.
    assert series == {"0: the embedding": palette.RAMP_COLORS[0], "block 1": palette.RAMP_COLORS[32],
                      "block 2": palette.RAMP_COLORS[-1]}
    assert {c for c, _ in found} <= palette.COLORS
    deep = trajectory_chart(trajectory_frame(steps, "select", 4), "select", 4)
    assert "<svg" in chart_to_svg(deep)


def test_the_remix_table_forms_both_gains_within_a_seed_and_the_share_of_their_means():
    rows = _rows(depths=(4,))
    loss = rows.set_index(["rule", "seed"])["val_loss"]
    remix = pd.DataFrame([dict(run_id="r", seed=s, rule=rule, depth=4, steps=300, lr=1e-3,
                               base_loss=loss[("sum", s)], val_loss=loss[("sum", s)] - gain * (1 + s))
                          for rule, gain in (("static", 0.05), ("dynamic", -0.01)) for s in (0, 1, 2)])
    table = remix_frame(rows, remix)
    assert list(table["rule"]) == ["static", "dynamic"] and list(table["seeds"]) == [3, 3]
    static = table.iloc[0]
    assert static.remix_gain_mean == pytest.approx(0.05 * 2) and static.joint_gain_mean == pytest.approx(0.1)
    assert static.share == pytest.approx(1.0)
    dynamic = table.iloc[1]
    assert dynamic.joint_gain_mean == pytest.approx(0.2) and dynamic.share == pytest.approx(-0.1)
    # Where the jointly trained rule gains nothing, there is nothing to recover: no share.
    worse = rows.assign(val_loss=rows["val_loss"].where(rows["rule"] != "static", rows["val_loss"] + 1))
    assert pd.isna(remix_frame(worse, remix).iloc[0]["share"])
    # A seed without its jointly trained cells is left out of both gains.
    assert list(remix_frame(rows[rows["seed"] != 2], remix)["seeds"]) == [2, 2]
    assert remix_frame(rows, remix.iloc[0:0]).empty


def test_the_budget_axis_judges_depth_only_where_the_fixed_sums_deepest_beats_its_shallowest():
    short = _rows(tokens=QUICK_TOKENS, deep_sum=5.5)  # deeper is worse: not yet trained
    long = _rows(tokens=8 * QUICK_TOKENS, deep_sum=4.0)
    rows = pd.concat([long, short])
    table = budget_frame(rows)
    assert list(table["tokens per model"]) == [QUICK_TOKENS, 8 * QUICK_TOKENS]
    assert list(table["deepest beats shallowest"]) == ["no", "yes"]
    assert table["gap grows with depth"].iloc[0] == "not judged: deep models not yet trained"
    assert table["gap grows with depth"].iloc[1] == next(
        v.word for v in claim_verdicts(long) if v.claim.key == "gap_grows_with_depth")
    deep = trained_deep(short)
    assert table.iloc[0]["sum at deepest"] == pytest.approx(deep["deep_loss"])
    assert (table.iloc[0]["shallowest"], table.iloc[0]["deepest"], table.iloc[0]["seeds"]) == (4, 16, 3)
    # One depth: nothing to compare, said as such.
    one = budget_frame(_rows(depths=(4,)))
    assert one.iloc[0]["deepest beats shallowest"] == "—" and one.iloc[0]["gap grows with depth"] == "not measured"
    frame = budget_loss_frame(rows)
    assert set(frame["budget"]) == {"307,200 tokens per model", "2,457,600 tokens per model"}
    chart = budget_chart(frame)
    spec = json.loads(chart.to_json())
    assert spec["facet"]["field"] == "budget" and spec["facet"]["sort"] == ["307,200 tokens per model",
                                                                            "2,457,600 tokens per model"]
    assert spec["resolve"]["scale"]["y"] == "independent"
    found, _ = _colours(chart)
    assert {c for c, _ in found} <= palette.COLORS
    assert "<svg" in chart_to_svg(chart)
