"""Driving the real app in headless Chromium: one server per data folder, pages that say when they are idle.

Two kinds of wait, and only two:

- **Liveness** (``WAIT_MS``): something that must happen, however busy the machine, such as the server
  coming up, a job ending or the app finishing a script run.  Its bound only tells a stuck run from a
  slow one, so it is ten times what a loaded 2-core machine needs.
- **Checks** (``CHECK_MS``): what a settled page shows (a text, a count, where a box lies).  They run
  only once the app is idle (:func:`settle`), so the answer does not depend on timing, and a wrong
  answer fails within a minute rather than after the liveness bound.

What idle means, and how the app's own runs are counted, is bench/browser.py's, shared with the
benchmarks that walk the app.
"""
from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

# One way to serve the app and tell when a page is drawn, shared with the benchmarks that walk it.
from bench.browser import CHROMIUM, CHROMIUM_ARGS, ROOT, WAIT_MS, WAIT_S, runs_ended, serve, settle, watch  # noqa: F401

SHOTS = ROOT / "artifacts" / "e2e"
CHARTS = '[data-testid="stVegaLiteChart"]'
EXCEPTIONS = '[data-testid="stException"]'
# A check on a settled page: long enough for a layout pass on a loaded machine, short enough that a
# wrong page fails in under a minute.
CHECK_MS = 45_000
# Where a box lies, read on an idle page: nothing moves it any more, so a wrong layout fails in seconds.
LAYOUT_MS = 5_000


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


def in_view_below(page, anchor, texts) -> None:
    """Once the app is idle, scrolled to ``anchor``: every one of ``texts`` (exact) lies in the window."""
    settle(page)
    scroll_to_top(anchor)
    for text in texts:
        expect(page.get_by_text(text, exact=True)).to_be_in_viewport(timeout=LAYOUT_MS)


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
        watch(page)
        page.set_default_timeout(CHECK_MS)
        return page
