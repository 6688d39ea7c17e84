"""One palette, keyed by meaning: every colour of every chart comes from ema_core/palette.py by key.

No colour is written anywhere else (the charts' and pages' source); every colour a chart builder draws
is one of the palette's; a series keeps its colour whichever other series are shown; a slider's trace
keeps its colour while its α moves; one mechanism has one colour on every page, and rates a family of
their own.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from ema_core import palette
from ema_core.studies.boundary.findings import TASKS
from ema_core.studies.content.gap import class_gaps
from ema_core.studies.content.growth import GROWTH_POOLS, gap_growth
from ema_core.dilution import ALL_RATES, analytic_frame, rate_label
from ema_core.studies.boundary.figures import (crossing_chart, dev_curve_chart, heat_map, mqar_chart, recall_state_chart,
                                       recall_state_frame)
from ema_core.studies.content.figures import (class_gap_chart, class_gap_frame, growth_chart, lm_ablation_chart,
                                      lm_ablation_frame, lm_curve_chart, lm_curve_frame)
from ema_core.studies.dilution.figures import horizon_frame, identity_chart, lag_weight_chart, rate_roles, sir_chart
from ema_core.studies.structure.figures import (probe_control_chart, probe_control_frame, role_accuracy_chart,
                                        role_accuracy_frame)
from ema_core.mixers import MIXER_NAMES
from test_content_growth import _rows as growth_rows

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "ema_core" / "figures").glob("*.py"), *(ROOT / "pages").glob("*.py")])
HEX = re.compile(r"#(?:[0-9a-fA-F]{3}){1,2}\b")
COLOR_CHANNELS = ("color", "fill", "stroke")


# -- small frames of every study, and every chart drawn from them ----------------------------------------

ALPHAS = (0.5, 0.1, 0.02)


def _dilution(alphas=ALPHAS, roles=None) -> list:
    analytic = analytic_frame(alphas, 6)
    features = [rate_label(a) for a in alphas] + [ALL_RATES]
    acc = pd.DataFrame([(f, lag, 1 / (lag + 1)) for f in features for lag in range(7)],
                       columns=["feature", "lag", "accuracy"])
    limits = pd.DataFrame({"feature": features, "analytic_horizon": [2.0 + i for i in range(len(features))],
                           "measured_horizon": [1 + i for i in range(len(features))]})
    return [lag_weight_chart(analytic, roles), sir_chart(analytic, roles),
            identity_chart(acc, 1 / 64, "linear", horizon_frame(limits, 6), roles)]


ROLE_SETS = ("instantaneous", "traces", "ngram", "bigru")
CONTROL_MEASURES = ("trained", "untrained", "control", "control_prev", "control_pos")


def _structure(sets=ROLE_SETS, measures=CONTROL_MEASURES) -> list:
    stats = pd.DataFrame([("test", fs, role, 3, 0.8, 0.02) for fs in sets for role in ("overall", "patient_det", "verb_intrans")],
                         columns=["split", "feature_set", "role", "n", "accuracy_mean", "accuracy_std"])
    control = pd.DataFrame([(m, fs, 3, 0.5, 0.03) for m in measures for fs in ("traces", "ngram")],
                           columns=["measure", "feature_set", "n", "value_mean", "value_std"])
    return [role_accuracy_chart(role_accuracy_frame(stats, "test"), "test"), probe_control_chart(probe_control_frame(control))]


VARIANTS = list(palette.LM_VARIANTS)


def _content(variants=VARIANTS) -> list:
    curves = pd.DataFrame([(f"{m}-{p}-{a}-{s}", s, m, p, a, step, 64 * step, 5.0 - step / 10)
                           for m, p, a in variants for s in (0, 1) for step in (2, 4, 6)],
                          columns=["run_id", "seed", "model", "predictor", "attn_input", "step", "tokens", "value"])
    stats = pd.DataFrame([(m, p, a, 2, 5.0, 0.01) for m, p, a in variants],
                         columns=["model", "predictor", "attn_input", "n", "loss_mean", "loss_std"])
    rows = growth_rows(noise=0.02)
    split = class_gaps(rows, "class")
    fits = [gap_growth(rows, pool) for pool in GROWTH_POOLS]
    return [lm_curve_chart(lm_curve_frame(curves)), lm_ablation_chart(lm_ablation_frame(stats), 4.0),
            class_gap_chart(class_gap_frame(split), split.variant), growth_chart(fits)]


def _boundary_rows(mixers=MIXER_NAMES) -> pd.DataFrame:
    rows = []
    for i, m in enumerate(mixers):
        for task in TASKS:
            for level in (1, 8):
                difficulty = f"pairs={level},T=16" if task == "mqar" else f"k={level}"
                for seed in (0, 1):
                    rows.append(dict(mixer=m, task=task, difficulty=difficulty, level=level, seq_len=16, seed=seed,
                                     accuracy=0.5 + 0.05 * i, chance=0.25, exclusion_floor=0.3,
                                     state_floats=16 * (i + 1)))
    return pd.DataFrame(rows)


def _recall_rows(mixers=MIXER_NAMES) -> pd.DataFrame:
    return pd.DataFrame([dict(run_id="r", seed=s, mixer=m, difficulty="pairs=4,T=64", d=d, accuracy=0.3 + 0.01 * i,
                              dev_accuracy=0.3, chance=1 / 128, lr=1e-3, state_floats=d * 8 * (i + 1), params=1000)
                         for i, m in enumerate(mixers) for d in (8, 16) for s in (0, 1)])


def _dev_rows(lrs=(3e-2, 1e-2, 3e-3, 1e-3)) -> pd.DataFrame:
    return pd.DataFrame([dict(lr=lr, step=step, dev_accuracy=0.1 * step, seed=0) for lr in lrs for step in (1, 2, 3)])


def _boundary(mixers=MIXER_NAMES, lrs=(3e-2, 1e-2, 3e-3, 1e-3)) -> list:
    rows = _boundary_rows(mixers)
    return [heat_map(rows), crossing_chart(rows), mqar_chart(rows),
            recall_state_chart(recall_state_frame(_recall_rows(mixers))), dev_curve_chart(_dev_rows(lrs))]


def _depth(rules=("sum", "static", "select")) -> list:
    from ema_core.studies.depth.figures import depth_frame, depth_metric_chart, weights_frame, weights_map
    from test_figures import _depth_rows, _depth_weight_rows

    frame = depth_frame(_depth_rows(rules))
    return [depth_metric_chart(frame, "val_loss"), depth_metric_chart(frame, "probe_early"),
            weights_map(weights_frame(_depth_weight_rows(rules), 4), 4)]


def every_chart() -> list:
    return [*_dilution(), *_dilution(roles=rate_roles(ALPHAS)), *_structure(), *_content(), *_boundary(), *_depth()]


# -- reading colours out of a chart's spec ---------------------------------------------------------------

def _walk(node, found: list, series: dict) -> None:
    """Every colour ``node`` draws into ``found`` (with where), and every colour scale's series -> colour
    into ``series``."""
    if isinstance(node, list):
        for item in node:
            _walk(item, found, series)
        return
    if not isinstance(node, dict):
        return
    mark = node.get("mark")
    if isinstance(mark, dict):
        found += [(mark[k], f"mark.{k}") for k in COLOR_CHANNELS if isinstance(mark.get(k), str)]
    for channel, enc in node.get("encoding", {}).items():
        if channel not in COLOR_CHANNELS:
            continue
        conditions = enc.get("condition", [])
        for c in conditions if isinstance(conditions, list) else [conditions]:
            if "value" in c:
                found.append((c["value"], f"{channel}.condition"))
        if "value" in enc:
            found.append((enc["value"], f"{channel}.value"))
        if "field" in enc:
            scale = enc.get("scale") or {}
            assert "scheme" not in scale, f"{channel} takes a named scheme: {scale}"
            # A field without an explicit range would take Vega's default scheme, colour by position.
            assert isinstance(scale.get("range"), list), f"{channel} of {enc['field']} has no range of its own"
            found += [(c, f"{channel}.scale.range") for c in scale["range"]]
            if "domain" in scale and len(scale["domain"]) == len(scale["range"]):
                series.update(zip(map(str, scale["domain"]), scale["range"]))
    for key, value in node.items():
        if key not in ("encoding", "mark", "datasets", "data", "config"):
            _walk(value, found, series)


def _colours(chart) -> tuple[list, dict]:
    found, series = [], {}
    _walk(json.loads(chart.to_json()), found, series)
    return found, series


# -- the tests ---------------------------------------------------------------------------------------------

def _colour_literals(source: str) -> list[tuple[int, str]]:
    """Colours written in ``source``: hex literals, a string given to a colour setting or to alt.value,
    a named Vega scheme."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and HEX.search(node.value):
            bad.append((node.lineno, node.value))
        elif isinstance(node, ast.keyword) and node.arg == "scheme":
            bad.append((node.value.lineno, "scheme="))
        elif isinstance(node, ast.keyword) and node.arg in COLOR_CHANNELS and _written(node.value):
            bad.append((node.value.lineno, f"{node.arg}={_written(node.value)!r}"))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "condition":
            # alt.condition(test, if_true, if_false): both are colours where it sets a colour channel
            bad += [(arg.lineno, f"condition({_written(arg)!r})") for arg in node.args[1:] if _written(arg)]
    return bad


def _written(node) -> str | None:
    """The string of ``"white"`` or of ``alt.value("white")``; None for anything else (a field, ``"mixer:N"``;
    how a scale is resolved, ``"shared"``)."""
    if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "value" and node.args
            and isinstance(node.args[0], ast.Constant)):
        node = node.args[0]
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    return None if ":" in node.value or node.value in ("shared", "independent") else node.value


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_colour_is_written_outside_the_palette(path):
    """(a) No colour is written in the charts' or the pages' source: one written there would not be keyed
    by what it stands for."""
    bad = _colour_literals(path.read_text())
    assert not bad, f"{path.relative_to(ROOT)}: colours written outside ema_core/palette.py: {bad}"


def test_the_scan_finds_each_kind_of_colour_it_forbids():
    for text in ('c = "#4c78a8"', 'alt.Scale(scheme="viridis")', 'chart.mark_rule(color="white")',
                 'alt.condition("datum.a", alt.value("white"), alt.value("black"))', 'x.encode(color=alt.value("red"))',
                 'alt.Color("x:N", scale=alt.Scale(range=["#fff", "#000"]))'):
        assert _colour_literals(text), text
    assert not _colour_literals('chart.mark_rule(color=palette.REFERENCE_COLOR)  # "#888888" in a comment')
    assert not _colour_literals('chart.encode(shape=alt.value("circle"))')


def test_every_colour_every_chart_draws_is_the_palettes():
    """(b) Every colour of every chart builder's output (scale ranges, values, conditions, marks) is one of
    the palette's, and every colour scale names its own range (no default scheme, no position)."""
    charts = every_chart()
    assert len(charts) == 20
    for chart in charts:
        found, _ = _colours(chart)
        assert found, "every chart draws in some colour"
        stray = [(c, where) for c, where in found if str(c).lower() not in palette.COLORS]
        assert not stray, f"{json.dumps(json.loads(chart.to_json()).get('title'))}: {stray}"


@pytest.mark.parametrize("full, part", [
    (lambda: _dilution(), lambda: _dilution((0.1, 0.02))),
    (lambda: _dilution(roles=rate_roles(ALPHAS)), lambda: _dilution((0.5, 0.02), rate_roles((0.5, 0.02), ("fast", "slow")))),
    (lambda: _structure(), lambda: _structure(("traces", "bigru"), ("control_pos", "untrained"))),
    (lambda: _content(), lambda: _content([VARIANTS[5], VARIANTS[1]])),
    (lambda: _boundary(), lambda: _boundary(("softmax", "ema3_seq", "window_k"), (1e-3, 3e-2))),
    (lambda: _depth(), lambda: _depth(("select", "sum"))),
], ids=["dilution", "dilution-sliders", "structure", "content", "boundary", "depth"])
def test_a_series_keeps_its_colour_whichever_others_are_shown(full, part):
    """(c) The same chart of fewer series gives each of them the colour it had among all."""
    compared = 0
    for whole, fewer in zip(full(), part()):
        _, every = _colours(whole)
        _, some = _colours(fewer)
        if not every:  # one series in one colour (the gap of one variant): nothing to compare
            continue
        shared = set(every) & set(some)
        assert shared, "the subset shows some series of the whole"
        assert {s: some[s] for s in shared} == {s: every[s] for s in shared}
        compared += len(shared)
    assert compared


def test_a_slider_keeps_its_colour_while_its_rate_moves():
    """(d) The explorer's fast trace is the same colour at α = 0.5 and at 0.501 (and wherever the slider
    goes), on all three charts; at the defaults it is α = 0.5's colour in an exported sweep too."""
    sliders = ("fast", "medium", "slow")
    for alphas in ((0.501, 0.1, 0.02), (0.9, 0.1, 0.02), (0.02, 0.1, 0.5)):
        before = [_colours(c)[1] for c in _dilution(ALPHAS, rate_roles(ALPHAS, sliders))]
        after = [_colours(c)[1] for c in _dilution(alphas, rate_roles(alphas, sliders))]
        for b, a in zip(before, after):
            assert a[rate_label(alphas[0])] == b[rate_label(0.5)] == palette.rate_role_color("fast")
            assert a[rate_label(alphas[2])] == b[rate_label(0.02)] == palette.rate_role_color("slow")
    assert palette.rate_role_color("fast") == palette.rate_color(0.5)  # the page at its defaults, and an export
    # Two sliders on one rate: drawn once, as the first slider.
    assert rate_roles((0.1, 0.1, 0.02), sliders) == {rate_label(0.1): "fast", rate_label(0.02): "slow"}


def test_one_mechanism_has_one_colour_and_rates_a_family_of_their_own():
    variant = {key: colour for key, (_, colour) in palette.LM_VARIANTS.items()}
    # Softmax attention and linear attention: the boundary map's mixer and the content study's predictor alike.
    assert variant[("spen", "softmax_attention", "state")] == palette.mixer_color("softmax")
    assert variant[("spen", "linear_attention", "state")] == palette.mixer_color("decay_linear_attn")
    # EMA traces read as they are: the ema mixer, SPEN linear, the probe on SPCN's traces.
    assert variant[("spen", "linear", "state")] == palette.mixer_color("ema") == palette.PROBE_COLORS["traces"]
    assert palette.PROBE_COLORS["ngram"] == palette.mixer_color("window_k")  # a fixed window
    # Within each study, one colour per series.
    for colours in (list(palette.MIXER_COLORS.values()), list(variant.values()), list(palette.PROBE_COLORS.values()),
                    list(palette.CONDITION_COLORS.values()), list(palette.RATE_ROLE_COLORS.values())):
        assert len(set(colours)) == len(colours)
    # No rate is drawn in a model's colour, nor a condition or a pool of tokens in a mechanism's.
    models = {*palette.MIXER_COLORS.values(), *variant.values(), *palette.PROBE_COLORS.values()}
    assert not set(palette.RAMP_COLORS) & models
    assert not set(palette.CONDITION_COLORS.values()) & models
    assert palette.TOKEN_POOL_COLORS["recall"] not in models
    # The map's heat scale is no mixer's colour either: a cell never reads as softmax or as EMA.
    assert not set(palette.ABOVE_CHANCE_COLORS) & models
    # Rates: light to dark as α falls, so fast and slow are told apart in greyscale too.
    lightness = [sum(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in map(palette.rate_color, (1.0, 0.3, 0.1, 0.02))]
    assert lightness == sorted(lightness, reverse=True)
