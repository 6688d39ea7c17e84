"""The Boundary map page through AppTest: empty store, launch, a real tiny run drawn and judged, exports."""
from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from apptest import ok, open_page
from boundary_fixture import MIXERS as RUN_MIXERS, make_boundary_runs

from ema_core import palette
from ema_core.boundary import TASKS
from ema_core.boundary_findings import (PAPER_HIERARCHY, VERDICT_RULE, claim_verdicts, measured_order,
                                       undertrained_text)
from ema_core.experiments import build_config
from ema_core.mixers import MIXER_NAMES
from store.boundary import boundary_accuracy
from store.export import mean_std

PAGE = "pages/boundary.py"


def _page() -> AppTest:
    return open_page(PAGE)


def _charts(at: AppTest) -> list[tuple[dict, pd.DataFrame]]:
    """Each chart's spec and its data, every dataset stacked (they travel as Arrow beside the spec)."""
    out = []
    for c in at.get("vega_lite_chart"):
        frames = [pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in c.proto.datasets]
        out.append((json.loads(c.proto.spec), pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()))
    return out


@pytest.fixture(scope="module")
def boundary_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("boundary") / "home"
    return home, make_boundary_runs(home, (0,))


@pytest.fixture
def runs(boundary_home, monkeypatch):
    home, run_ids = boundary_home
    monkeypatch.setenv("EMALAB_HOME", str(home))
    return run_ids


def test_empty_store_shows_an_empty_state_and_the_launch_section(empty_home):
    at = _page()
    assert at.title[0].value == "Boundary map"
    assert "structure" in at.markdown[0].value and "content" in at.markdown[0].value
    assert any("No finished boundary runs" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == [] and len(at.dataframe) == len(at.table) == 0
    assert any(s.value == "Launch" for s in at.subheader)
    assert at.multiselect(key="boundary_mixers").options == list(MIXER_NAMES)
    assert at.multiselect(key="boundary_mixers").value == list(MIXER_NAMES)


def test_launch_submits_one_run_of_the_mixers_and_tasks_picked(empty_home, registered):
    at = _page()
    assert at.selectbox(key="boundary_preset").options == ["quick", "full"]
    at.multiselect(key="boundary_mixers").set_value(["softmax", "ema"])  # in the order clicked
    at.multiselect(key="boundary_tasks").set_value(["mqar", "agree_content"])
    at.number_input(key="boundary_seed").set_value(4)
    next(b for b in at.button if b.label == "Launch").click()
    ok(at.run())
    expected = build_config("boundary", preset="quick", seed=4,
                            overrides={"mixers": ["ema", "softmax"], "tasks": ["agree_content", "mqar"]})
    assert registered == [("boundary", expected.model_dump(), "quick")]
    assert any("boundary-x-s4" in s.value for s in at.success)
    at.multiselect(key="boundary_mixers").set_value([])
    next(b for b in at.button if b.label == "Launch").click()
    ok(at.run())
    assert len(registered) == 1 and any("at least one mixer" in w.value for w in at.warning)


def test_a_real_run_draws_the_map_the_curves_and_the_mqar_chart(runs):
    at = _page()
    assert at.multiselect(key="boundary_runs").value == runs
    assert any("1 run(s) · seeds 0, 1" in c.value for c in at.caption)
    (map_spec, cells), (cross_spec, curves), (mqar_spec, mqar) = _charts(at)
    assert "boundary map" in json.dumps(map_spec["title"])
    assert set(cells["mixer"]) == set(RUN_MIXERS) and set(cells["task"]) == set(TASKS)
    assert "Structure against content" in json.dumps(cross_spec["title"])
    assert set(curves["mixer"].dropna()) == set(RUN_MIXERS)
    line = next(layer for layer in cross_spec["layer"] if "color" in layer.get("encoding", {}))
    scale = line["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"])) == {m: palette.mixer_color(m) for m in RUN_MIXERS}
    assert "MQAR" in json.dumps(mqar_spec["title"]) and set(mqar["task"]) == {"mqar"}
    # The map's numbers are the store's: the mean over seeds of each cell.
    rows = boundary_accuracy(runs)
    cell = rows[(rows["mixer"] == "softmax") & (rows["task"] == "agree_structure") & (rows["difficulty"] == "k=8")]
    shown = cells[(cells["mixer"] == "softmax") & (cells["task"] == "agree_structure") & (cells["difficulty"] == "k=8")]
    assert shown["mean"].iloc[0] == pytest.approx(cell["accuracy"].mean())
    # Under the MQAR chart, the sizes softmax did not learn, in the findings' own words (none: no box).
    under = undertrained_text(rows)
    assert [w.value for w in at.warning if w.value.startswith("MQAR is under-trained")] == ([under] if under else [])


def test_the_page_sets_the_papers_hierarchy_beside_the_measured_one_and_judges_each_claim(runs):
    at = _page()
    assert any(s.value == "The paper's hierarchy and the measured one" for s in at.subheader)
    text = "\n".join(m.value for m in at.markdown)
    for name in PAPER_HIERARCHY:
        assert f"`{name}`" in text
    rows = boundary_accuracy(runs)
    assert at.radio(key="boundary_order_task").value == "mqar"
    for name, acc in measured_order(rows, "mqar", mixers=PAPER_HIERARCHY):
        assert f"`{name}` — {acc:.3f}" in text
    assert VERDICT_RULE in text
    assert "**Chance**" in text and "**The window**" in text
    # Every claim: its verdict word in the table, its sentence in a box of the verdict's colour.
    verdicts = claim_verdicts(rows)
    table = next(t.value for t in at.table if "verdict" in t.value.columns)
    assert list(table["claim"]) == [v.claim.what for v in verdicts]
    assert list(table["verdict"]) == [v.word for v in verdicts]
    boxes = {"reproduced": at.success, "not_reproduced": at.error, "inconclusive": at.warning}
    for v in verdicts:
        assert any(b.value == v.sentence for b in boxes[v.verdict]), v.sentence
    # The measured order follows the task picked.
    at.radio(key="boundary_order_task").set_value("agree_content")
    ok(at.run())
    text = "\n".join(m.value for m in at.markdown)
    assert "Measured on agreement: content" in text


def test_every_chart_and_the_table_have_their_downloads(runs):
    at = _page()
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("SVG") == labels.count("PNG") == 3  # map, crossing, MQAR
    assert labels.count("CSV") == labels.count("Markdown") == labels.count("LaTeX") == 1
    table = next(d.value for d in at.dataframe if "above_chance" in d.value.columns)
    rows = boundary_accuracy(runs)
    cell = rows[(rows["mixer"] == "ema") & (rows["task"] == "agree_content") & (rows["difficulty"] == "k=1")]
    row = table[(table["mixer"] == "ema") & (table["task"] == "agree_content") & (table["difficulty"] == "k=1")].iloc[0]
    assert row["accuracy"].replace("\u00a0", " ") == mean_std(cell["accuracy"].mean(), cell["accuracy"].std(ddof=1))
    assert row["seeds"] == 2


def test_no_run_picked_says_so(runs):
    at = _page()
    at.multiselect(key="boundary_runs").set_value([])
    ok(at.run())
    assert any("Pick at least one run" in i.value for i in at.info)
    assert at.get("vega_lite_chart") == []


def test_the_export_page_draws_a_runs_boundary_figures(runs):
    at = open_page("pages/export.py")
    at.selectbox(key="export_table").set_value("boundary_accuracy")
    ok(at.run())
    assert any(s.value == "Figure" for s in at.subheader)
    assert len(at.get("vega_lite_chart")) == 3
