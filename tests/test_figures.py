"""Figures render through vl_convert, and the table formatters write valid Markdown and booktabs."""
from __future__ import annotations

import json
import math

import altair as alt
import numpy as np
import pandas as pd
import pytest

from ema_core.dilution import ALL_RATES, analytic_frame, rate_label
from ema_core.figures import (
    SIR_CLIP_DB,
    chart_to_png,
    chart_to_svg,
    identity_chart,
    lag_weight_chart,
    sir_chart,
)
from ema_core.tables import latex_escape, to_latex_booktabs, to_markdown

ALPHAS = (0.5, 0.1, 0.02)


@pytest.fixture(scope="module")
def analytic():
    # α = 1 puts an infinite SIR at lag 0 and zero weights after it: the edge cases of both charts.
    return analytic_frame(ALPHAS + (1.0,), 12)


@pytest.fixture(scope="module")
def accuracy():
    rows = [(rate_label(a), lag, float(np.exp(-a * lag))) for a in ALPHAS for lag in range(13)]
    rows += [(ALL_RATES, lag, 1.0) for lag in range(13)]
    return pd.DataFrame(rows, columns=["feature", "lag", "accuracy"])


def _spec(chart) -> dict:
    # to_json goes through the strict JSON encoder: a NaN or ±inf left in the data would fail here.
    return json.loads(chart.to_json())


def _colour_map(spec: dict) -> dict:
    layers = spec.get("layer", [spec])
    scale = layers[0]["encoding"]["color"]["scale"]
    return dict(zip(scale["domain"], scale["range"]))


def test_charts_build_and_share_colours(analytic, accuracy):
    weights, sir, ident = lag_weight_chart(analytic), sir_chart(analytic), identity_chart(accuracy, 1 / 64)
    assert isinstance(weights, alt.Chart) and isinstance(sir, alt.Chart)
    maps = [_colour_map(_spec(c)) for c in (weights, sir, ident)]
    rates = [rate_label(a) for a in ALPHAS]
    for r in rates:
        assert maps[0][r] == maps[1][r] == maps[2][r]
    assert list(maps[0]) == rates + [rate_label(1.0)]  # the order the rates were given
    assert ALL_RATES in maps[2] and maps[2][ALL_RATES] not in [maps[2][r] for r in rates]


def test_weight_chart_is_log_and_drops_zero_weights(analytic):
    spec = _spec(lag_weight_chart(analytic))
    assert spec["encoding"]["y"]["scale"]["type"] == "log"
    values = next(iter(spec["datasets"].values()))
    assert values and all(v["weight"] > 0 for v in values)


def test_sir_chart_clips_infinities(analytic):
    assert np.isinf(analytic["sir_db"]).any()
    spec = _spec(sir_chart(analytic))
    values = next(iter(spec["datasets"].values()))
    shown = [v["sir_db_shown"] for v in values]
    assert all(math.isfinite(s) and abs(s) <= SIR_CLIP_DB for s in shown)
    assert max(shown) == SIR_CLIP_DB
    assert any(v["sir_text"] == "+∞ dB" for v in values)
    assert "clipped" in spec["encoding"]["y"]["title"]


def test_identity_chart_has_chance_rule(accuracy):
    spec = _spec(identity_chart(accuracy, 1 / 64))
    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]
    assert marks == ["line", "rule"]
    dash = spec["layer"][1]["encoding"]["strokeDash"]
    assert dash["scale"]["range"] == [[6, 4]] and dash["scale"]["domain"][0].startswith("chance 1/V")
    data = json.dumps(spec["datasets"])
    assert "chance 1/V" in data and str(1 / 64) in data


def test_chart_to_svg_and_png(analytic, accuracy):
    for chart in (lag_weight_chart(analytic), sir_chart(analytic), identity_chart(accuracy, 0.5)):
        svg = chart_to_svg(chart)
        assert isinstance(svg, str) and svg.lstrip().startswith("<svg")
        png = chart_to_png(chart, scale=1)
        assert isinstance(png, bytes) and png[:4] == b"\x89PNG"
    assert "chance 1/V" in chart_to_svg(identity_chart(accuracy, 0.5))


@pytest.fixture
def table():
    return pd.DataFrame(
        {
            "feature": ["α=0.5", "a_b", "50% & more", "#1 | pipe"],
            "lag": [0, 1, 2, 3],
            "accuracy": [1.0, 0.123456, np.nan, 0.0156],
        }
    )


def test_markdown(table):
    md = to_markdown(table)
    lines = md.strip().splitlines()
    assert lines[0] == "| feature | lag | accuracy |"
    assert lines[1] == "| :--- | ---: | ---: |"
    assert len(lines) == 2 + len(table)
    assert lines[2] == "| α=0.5 | 0 | 1 |"
    assert "0.1235" in lines[3]
    assert r"#1 \| pipe" in lines[5]  # a bare | would split the cell
    assert lines[4].endswith("|  |")  # NaN is an empty cell


def test_latex_booktabs(table):
    tex = to_latex_booktabs(table)
    for rule in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert tex.count(rule) == 1
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
    assert r"\begin{tabular}{lrr}" in tex
    assert r"a\_b" in tex and r"50\% \& more" in tex and r"\#1" in tex
    assert r"$\alpha$=0.5" in tex
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == len(table) and all(line.endswith(r"\\") for line in body)
    # Unescaped specials would break the document: none may be left outside their escapes.
    stripped = tex.replace(r"\_", "").replace(r"\%", "").replace(r"\&", "").replace(r"\#", "")
    body_text = stripped.split(r"\midrule")[1]
    assert "_" not in body_text and "%" not in body_text and "#" not in body_text
    assert body_text.count("&") == 2 * len(table)  # only the column separators


def test_latex_float_and_escaping_of_caption():
    tex = to_latex_booktabs(pd.DataFrame({"x": [1]}), caption="rate_1 at 5%", label="tab:x_y")
    assert tex.startswith(r"\begin{table}") and tex.rstrip().endswith(r"\end{table}")
    assert r"\caption{rate\_1 at 5\%}" in tex
    assert r"\label{tab:x_y}" in tex
    assert latex_escape(r"a\b{c}~^") == r"a\textbackslash{}b\{c\}\textasciitilde{}\textasciicircum{}"
