"""The app through Streamlit's AppTest: the dilution page renders, reacts to its widgets and survives bad state."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field
from streamlit.testing.v1 import AppTest

import ema_core.dilution_config
from ema_core.dilution import ALL_RATES

APP = Path(__file__).resolve().parents[1] / "app.py"
# Liveness only: a script run that has not ended by then is stuck, however busy the machine.
TIMEOUT = 600  # a busy 2-core box measures the default settings in about a second


def _app() -> AppTest:
    # The home page is the overview: run the router once, then move to the dilution page (a
    # switch before the first run would run the page without the router and its sidebar).
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page("pages/dilution.py")
    return at


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    # Three cards (fast, medium, slow) of three metrics each, in page order.
    labels = ("Half-life", "95 % window", "Interference α/(2−α)")
    assert [m.label for m in at.metric] == list(labels) * 3
    names = [f"{rate} {label}" for rate in ("fast", "medium", "slow") for label in labels]
    return dict(zip(names, (m.value for m in at.metric)))


def _charts(at: AppTest):
    return at.get("vega_lite_chart")


def _colour_domains(at: AppTest) -> list[list[str]]:
    # The chart's data travels as Arrow beside the spec; the colour scale names the rates.
    specs = [json.loads(c.proto.spec) for c in _charts(at)]
    return [s.get("layer", [s])[0]["encoding"]["color"]["scale"]["domain"] for s in specs]


def _table(at: AppTest):
    assert len(at.dataframe) == 1
    return at.dataframe[0].value


@pytest.fixture(scope="module")
def default_app() -> AppTest:
    return _ok(_app().run())


def test_page_renders(default_app):
    at = default_app
    assert at.title[0].value == "Trace dilution"
    assert "whatever the token" in at.markdown[0].value
    assert len(_charts(at)) == 3
    metrics = _metrics(at)
    assert metrics["fast Half-life"] == "1.00 steps"  # α = 0.5 halves every step
    assert metrics["medium Interference α/(2−α)"] == f"{0.1 / 1.9:.4f}"
    assert metrics["slow 95 % window"] == "149 steps"
    table = _table(at)
    assert list(table.columns) == ["lag", "α=0.5", "α=0.1", "α=0.02", ALL_RATES]
    assert len(table) == 25  # lags 0..24
    assert table.loc[0, "α=0.5"] == pytest.approx(1.0)  # the newest token is always readable
    # A single fast trace names the most recent token and falls to about chance (1/64) at lag 1.
    assert table.loc[1, "α=0.5"] < 0.05
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("SVG") == 3 and labels.count("PNG") == 3
    assert {"CSV", "Markdown", "LaTeX"} <= set(labels)
    assert any(c.value.startswith("Measured in") for c in at.caption)


def test_charts_carry_the_rates(default_app):
    rates = ["α=0.5", "α=0.1", "α=0.02"]
    assert _colour_domains(default_app) == [rates, rates, rates + [ALL_RATES]]
    identity = json.loads(_charts(default_app)[2].proto.spec)
    assert [layer["mark"]["type"] for layer in identity["layer"]] == ["line", "rule"]


def test_moving_alpha_fast_changes_metrics_and_measurement():
    at = _ok(_app().run())
    before_metrics, before_table = _metrics(at), _table(at)
    at.slider(key="alpha_fast").set_value(0.2)
    _ok(at.run())
    after_metrics, after_table = _metrics(at), _table(at)
    assert after_metrics["fast Half-life"] == "3.11 steps"  # ln ½ / ln 0.8
    assert after_metrics["fast Half-life"] != before_metrics["fast Half-life"]
    assert after_metrics["fast Interference α/(2−α)"] != before_metrics["fast Interference α/(2−α)"]
    assert after_metrics["slow Half-life"] == before_metrics["slow Half-life"]
    assert "α=0.2" in after_table.columns and "α=0.5" not in after_table.columns
    # The slower fast trace keeps lag 1 readable; the measured numbers really moved.
    assert after_table.loc[1, "α=0.2"] > before_table.loc[1, "α=0.5"] + 0.05
    assert not after_table[ALL_RATES].equals(before_table[ALL_RATES])
    assert all(d[0] == "α=0.2" for d in _colour_domains(at))


def test_window_mode_recovers_recent_lags():
    at = _ok(_app().run())
    assert "window" not in [s.key for s in at.slider]
    at.toggle(key="window_mode").set_value(True)
    _ok(at.run())
    assert at.slider(key="window").value == 8
    table = _table(at)
    # The paper's caveat: from the last w states an EMA sequence is invertible, so lags
    # 0..w−2 come back exactly even from the fast trace that alone fell to chance at lag 1.
    assert (table.loc[0:6, "α=0.5"] > 0.99).all()
    assert any("window 8" in c.value for c in at.caption)
    at.toggle(key="window_mode").set_value(False)
    _ok(at.run())
    assert "window" not in [s.key for s in at.slider]
    assert _table(at).loc[1, "α=0.5"] < 0.05


def test_equal_rates_and_alpha_one():
    at = _app().run()
    for key in ("alpha_fast", "alpha_medium", "alpha_slow"):
        at.slider(key=key).set_value(0.1)
    _ok(at.run())
    assert any("same rate" in i.value for i in at.info)
    assert list(_table(at).columns) == ["lag", "α=0.1"]  # decoded once, no "all rates" of one
    assert len(_charts(at)) == 3
    at.slider(key="alpha_fast").set_value(1.0)  # infinite SIR at lag 0, zero weight after it
    _ok(at.run())
    assert _metrics(at)["fast Half-life"] == "0.00 steps"
    assert len(_charts(at)) == 3


def _order_warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "out of order" in w.value]


def test_a_slow_rate_faster_than_the_fast_one_is_warned(default_app):
    assert _order_warnings(default_app) == []  # the paper's 0.5 ≥ 0.1 ≥ 0.02
    at = _app().run()
    at.slider(key="alpha_slow").set_value(0.7)
    _ok(at.run())
    (warning,) = _order_warnings(at)
    # Which values, and what it means; medium (0.1) stays slower than fast, so only slow is named.
    assert "α slow = 0.700 is faster than α fast = 0.500" in warning
    assert "α slow = 0.700 is faster than α medium = 0.100" in warning
    assert "medium = 0.100 is faster" not in warning
    assert "A larger α forgets sooner" in warning
    assert len(_charts(at)) == 3  # warned, not refused: the grid is still measured
    at.slider(key="alpha_slow").set_value(0.01)
    _ok(at.run())
    assert _order_warnings(at) == []


def test_smallest_settings():
    at = _app().run()
    for key, value in (("vocab", 2), ("dim", 1), ("max_lag", 1)):
        at.slider(key=key).set_value(value)
    _ok(at.run())
    assert len(_table(at)) == 2 and len(_charts(at)) == 3


def test_out_of_range_state_is_reset_not_raised():
    at = _app()
    at.session_state["alpha_fast"] = 0.0
    at.session_state["seed"] = -1
    at.session_state["vocab"] = "many"
    _ok(at.run())
    assert at.slider(key="alpha_fast").value == 0.5 and at.number_input(key="seed").value == 0
    assert any("reset to their defaults" in i.value for i in at.info)
    assert len(_charts(at)) == 3


def test_oversized_measurement_is_refused():
    at = _app().run()
    for key, value in (("vocab", 512), ("dim", 256), ("max_lag", 128)):
        at.slider(key=key).set_value(value)
    at.toggle(key="window_mode").set_value(True)
    _ok(at.run())
    at.slider(key="window").set_value(32)
    _ok(at.run())
    assert any("GiB" in w.value for w in at.warning)
    assert len(at.dataframe) == 0
    assert len(_charts(at)) == 2  # the analytic side still draws


def test_invalid_config_is_an_error_message(monkeypatch):
    # The widgets' ranges sit inside the config's, so tighten the config to reach the error path.
    class Tight(ema_core.dilution_config.DilutionConfig):
        vocab: int = Field(64, ge=2, le=16)

    monkeypatch.setattr(ema_core.dilution_config, "DilutionConfig", Tight)
    at = _ok(_app().run())
    assert len(at.error) == 1
    assert "vocab" in at.error[0].value and "16" in at.error[0].value
    assert "Traceback" not in at.error[0].value
    assert len(_charts(at)) == 0
