"""Every chart fits its column, in the real app in headless Chromium, at 1100 and 1400 px wide.

One server over one data folder that holds a structure run (three seeds), real tiny language-model
runs (GPT, SPEN linear and three attention predictors, two seeds each), a real tiny boundary run of
every mixer and a real tiny depth run (every rule at two depths, three seeds).  Each result page (and
the Export page's figures) is opened at both widths; for every chart drawn, its drawing must end
inside its column and inside the window, no text of it may be cut
(Vega ends a label cut at its limit with "…"), and the boundary map's legends must name every mixer.
A screenshot of each page at each width is kept in artifacts/e2e/layout_<page>_<width>.png.
"""
from __future__ import annotations

import pytest

from browser import CHARTS, SHOTS, goto, no_exception, open_export_table, serve_app, settle

WIDTHS = (1100, 1400)
# page: (url path, heading, charts it draws over this folder, window height: the whole page in view,
# since Streamlit scrolls an inner element and a full-page screenshot would show the window only).
PAGES = {
    "dilution": ("dilution", "Trace dilution", 3, 2400),
    "depth_explorer": ("depth_explorer", "Depth explorer", 7, 5200),  # needs no runs: its own measurement
    "structure": ("structure", "Structure", 2, 3400),
    "content": ("content", "Content", 4, 6400),
    "boundary": ("boundary", "Boundary map", 5, 5200),  # the dial's, and the dev curve's once its expander is open
    "depth": ("depth", "Depth dilution", 10, 10000),  # loss, bpb, four probes, the weights map and trajectory, entropy, the budget axis
    "export": ("export", "Export", 3, 2600),  # the boundary run's map, crossing and MQAR figures
}
# Each chart's drawing against its column and the window, and every text of it (titles, axes, legends).
MEASURE = """sel => [...document.querySelectorAll(sel)].map(chart => {
  const drawn = chart.querySelector('svg.marks') || chart.querySelector('canvas');
  const column = chart.closest('[data-testid="stElementContainer"]') || chart.parentElement;
  const box = drawn ? drawn.getBoundingClientRect() : null;
  const texts = el => [...chart.querySelectorAll(el)].map(t => t.textContent);
  return {title: texts('.role-title-text text').join(' ') || texts('text').slice(0, 3).join(' '),
          right: box ? box.right : null, width: box ? box.width : 0,
          column: column.getBoundingClientRect().right, window: window.innerWidth,
          texts: texts('text'), legend: texts('.role-legend-label text')};
})"""


@pytest.fixture(scope="module")
def layout_url(tmp_path_factory):
    from boundary_fixture import make_boundary_runs
    from depth_fixture import make_depth_runs
    from ema_core.mixers import MIXER_NAMES
    from lm_fixture import make_lm_runs
    from structure_fixture import make_structure_runs

    home = tmp_path_factory.mktemp("layout_home")
    make_structure_runs(home, (0, 1, 2))
    make_lm_runs(home, ("gpt", "linear", "softmax_state", "softmax_tokens", "linear_attention_state"), (0, 1))
    # Every mixer: the crossing chart's legend must hold all eight.
    make_boundary_runs(home, (0,), overrides={"mixers": ",".join(MIXER_NAMES)})
    make_depth_runs(home, (0,))
    with serve_app(home, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


def _open(page, url: str, name: str) -> int:
    """Open the page ``name`` and wait until it is idle, every chart drawn; how many it should draw."""
    path, heading, n, _ = PAGES[name]
    if name == "export":
        open_export_table(page, url, "boundary_accuracy")
    else:
        goto(page, f"{url}/{path}")
        page.get_by_role("heading", name=heading, exact=True).wait_for()
    if name == "boundary":
        page.get_by_text("Dev accuracy per learning rate", exact=True).click()
        settle(page)  # the chart in the expander, drawn now that it is open
    return n


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(PAGES))
def test_every_chart_fits_its_column_and_cuts_no_label(layout_url, chromium_browser, name, width):
    from ema_core.mixers import MIXER_NAMES

    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium_browser.new_page(viewport={"width": width, "height": PAGES[name][3]})
    try:
        n = _open(page, layout_url, name)
        page.screenshot(path=str(SHOTS / f"layout_{name}_{width}.png"))
        no_exception(page)
        charts = page.evaluate(MEASURE, CHARTS)
        assert len(charts) == n, [c["title"] for c in charts]
        for c in charts:
            where = f"{name} at {width} px, chart {c['title']!r}"
            assert c["width"] > 0, f"{where}: not drawn"
            assert c["right"] <= c["column"] + 1, f"{where}: ends at {c['right']:.0f} px, its column at {c['column']:.0f}"
            assert c["right"] <= c["window"], f"{where}: ends at {c['right']:.0f} px, past the window"
            cut = [t for t in c["texts"] if t.endswith("…")]
            assert not cut, f"{where}: text cut {cut}"
        if name in ("boundary", "export"):  # the crossing chart: a legend entry for every mixer
            crossing = next(c for c in charts if c["title"].startswith("Structure against content"))
            assert set(MIXER_NAMES) <= set(crossing["legend"]), crossing["legend"]
    finally:
        page.close()
