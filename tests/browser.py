"""Driving the real app in headless Chromium: one server per data folder, pages that say when they are idle.

Two kinds of wait, and only two:

- **Liveness** (``WAIT_MS``): something that must happen, however busy the machine, such as the server
  coming up, a job ending or the app finishing a script run.  Its bound only tells a stuck run from a
  slow one, so it is ten times what a loaded 2-core machine needs.
- **Checks** (``CHECK_MS``): what a settled page shows (a text, a count, where a box lies).  They run
  only once the app is idle (:func:`settle`), so the answer does not depend on timing, and a wrong
  answer fails within a minute rather than after the liveness bound.

Idle means: a run of the app's script that began after the last interaction has ended whole, no
script or fragment is running now, no element is stale, and every chart is drawn and the same on two
polls in a row.  The server says when a run ends and how (a run cut short for a rerun, the router's
first one or a widget moved mid-run, does not count): a watcher installed in every page before the
app's own code reads that from the app's websocket, so a run that starts and ends between two polls is
not missed, and a page read before its rerun has even begun is not taken for idle.  Streamlit's root
says whether a script is running (``data-test-script-state``).
"""
from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import pytest

from bench.app_memory import serve

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "artifacts" / "e2e"
CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHARTS = '[data-testid="stVegaLiteChart"]'
EXCEPTIONS = '[data-testid="stException"]'
# Liveness only (see above): never a speed target.
WAIT_S = 600
WAIT_MS = WAIT_S * 1000
# A check on a settled page: long enough for a layout pass on a loaded machine, short enough that a
# wrong page fails in under a minute.
CHECK_MS = 45_000
# How often the idle condition is polled; a chart must be the same on two polls in a row.
POLL_MS = 250

# Installed in every document before the app's scripts: counts the app's script runs that end whole.
# The server says so in its ForwardMsg's `script_finished` (field 6, a varint): FINISHED_SUCCESSFULLY (0,
# st.stop included) or with a compile error (1) end a run; FINISHED_EARLY_FOR_RERUN (2) is a run cut
# short for another that follows (the router's first run, a widget moved mid-run), and
# FINISHED_FRAGMENT_RUN_SUCCESSFULLY (3) a fragment's run (the Jobs page's list, every second); neither
# means the page is drawn.  Only the top-level fields of each message are read.
COUNT_RUNS = """
(() => {
  window.__emalabRunsEnded = 0;
  const varint = (b, i) => {
    let v = 0, shift = 0, x;
    do { x = b[i++]; v += (x & 0x7f) * 2 ** shift; shift += 7; } while (x & 0x80);
    return [v, i];
  };
  const finished = buffer => {
    const b = new Uint8Array(buffer);
    let i = 0, tag, n;
    while (i < b.length) {
      [tag, i] = varint(b, i);
      const field = Math.floor(tag / 8), wire = tag & 7;
      if (wire === 0) { [n, i] = varint(b, i); if (field === 6) return n; }
      else if (wire === 2) { [n, i] = varint(b, i); i += n; }
      else if (wire === 1) i += 8;
      else if (wire === 5) i += 4;
      else return null;
    }
    return null;
  };
  const seen = data => {
    const status = finished(data);
    if (status === 0 || status === 1) window.__emalabRunsEnded += 1;
  };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', e => {
        if (e.data instanceof ArrayBuffer) seen(e.data);
        else if (e.data instanceof Blob) e.data.arrayBuffer().then(seen);
      });
    }
  };
})();
"""

# True once the app is idle after ``after`` whole runs (see the module's docstring).  A chart counts as
# drawn when vega has put marks in its svg (or sized its canvas); its drawing is fingerprinted by its
# box and texts, which must match the previous poll's (vega draws the titles after the marks).
IDLE = """after => {
  const app = document.querySelector('[data-testid="stApp"]');
  const idle = app && app.getAttribute('data-test-connection-state') === 'CONNECTED'
    && app.getAttribute('data-test-script-state') === 'notRunning'
    && window.__emalabRunsEnded > after
    && !document.querySelector('[data-stale="true"]')
    && !document.querySelector('[data-testid="stSkeleton"]');
  // A chart in a closed expander is not laid out, and is drawn once it is opened.
  const shown = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].filter(c => c.getClientRects().length);
  const charts = shown.map(chart => {
    const svg = chart.querySelector('svg.marks');
    const canvas = chart.querySelector('canvas');
    const drawn = svg ? svg.querySelector('g') !== null : canvas ? canvas.width > 0 : false;
    const box = (svg || canvas || chart).getBoundingClientRect();
    return drawn ? [box.width, box.height, box.top, chart.textContent].join('|') : null;
  });
  const print = JSON.stringify(charts);
  const same = print === window.__emalabLastPrint;
  window.__emalabLastPrint = print;
  return Boolean(idle && same && !charts.includes(null));
}"""


def runs_ended(page) -> int:
    """How many of the app's script runs have ended whole in this page's document so far."""
    return page.evaluate("() => window.__emalabRunsEnded || 0")


def settle(page, after: int = 0) -> None:
    """Wait (liveness) until the app is idle after a run that ended later than ``after`` runs had."""
    page.wait_for_function(IDLE, arg=after, polling=POLL_MS, timeout=WAIT_MS)


@contextlib.contextmanager
def rerun(page):
    """Around an interaction that reruns the app: on leaving, the page is idle after that rerun."""
    before = runs_ended(page)
    yield
    settle(page, before)


def goto(page, url: str) -> None:
    """Open ``url`` and wait until the app has run it and is idle."""
    page.goto(url)
    settle(page)


def no_exception(page) -> None:
    assert page.locator(EXCEPTIONS).count() == 0, page.locator(EXCEPTIONS).first.inner_text()


def scroll_to_top(locator) -> None:
    """Scroll ``locator``'s element to the top of the view (the app is idle: nothing moves it after)."""
    locator.evaluate("e => e.scrollIntoView({block: 'start'})")


def open_export_table(page, app_url: str, table: str) -> None:
    """The Export page with ``table`` picked, idle."""
    goto(page, app_url + "/export")
    page.get_by_role("heading", name="Export").wait_for()
    page.get_by_test_id("stSelectbox").filter(has_text="Table").click()
    with rerun(page):
        page.get_by_role("option", name=re.compile(rf"^{table}")).click()


@contextlib.contextmanager
def serve_app(home: Path, log: Path):
    """``streamlit run app.py`` on a free loopback port with ``EMALAB_HOME=home``; yields its URL."""
    try:
        with serve(home, log) as (url, _):
            yield url
    except RuntimeError as exc:
        if "did not come up" not in str(exc):
            raise
        pytest.fail(str(exc))


class Browser:
    """Headless Chromium whose pages count their script runs and check within ``CHECK_MS``.

    Anything not given a timeout of its own (a click, a locator's wait, an ``expect``) is a check; a
    liveness wait names ``WAIT_MS``.
    """

    def __init__(self, browser):
        self._browser = browser

    def new_page(self, **kwargs):
        page = self._browser.new_page(**kwargs)
        page.add_init_script(COUNT_RUNS)
        page.set_default_timeout(CHECK_MS)
        return page
