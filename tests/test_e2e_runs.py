"""The Jobs page's notes and the results pages' picks, in headless Chromium against the real app.

A finished run's bar has its state's colour; a note written on the Jobs page is still there after the
server restarts on the same data folder; a results page opened from a URL that names runs (the first
request of that fresh server, so through the deep-link router) shows those runs picked.  The runs are finished structure runs written as a job
leaves them (tests/structure_fixture.py): nothing trains here.
"""
from __future__ import annotations

import re

import pytest

# One way to serve the app and drive Chromium for every browser test (tests/test_e2e.py).
from test_e2e import WAIT_MS, _no_exception, _serve, chromium_browser  # noqa: F401

pytestmark = pytest.mark.e2e


def _page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.set_default_timeout(WAIT_MS)
    return page


def _settled(page) -> None:
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')", timeout=WAIT_MS)


def _open_notes_of(page, app_url: str, run_id: str) -> None:
    """The Jobs page's Table tab, with ``run_id`` picked in its notes form."""
    page.goto(app_url + "/jobs")
    page.get_by_role("heading", name="Jobs").wait_for(timeout=WAIT_MS)
    page.get_by_role("tab", name="Table").click()
    page.locator(".st-key-note_run").wait_for(timeout=WAIT_MS)
    _settled(page)
    page.locator(".st-key-note_run").click()
    page.get_by_role("option", name=re.compile(re.escape(run_id))).click()
    from playwright.sync_api import expect

    expect(page.locator(".st-key-note_run input")).to_have_value(re.compile(re.escape(run_id)))
    _settled(page)


def test_a_note_outlives_a_restart_and_a_url_picks_runs(tmp_path, chromium_browser):
    from playwright.sync_api import expect

    from structure_fixture import make_structure_runs

    home = tmp_path / "home"
    base = make_structure_runs(home, (0, 1))
    other = make_structure_runs(home, (0,), {"preset": "test", "n_sentences": 300})[0]
    note, tags = "seed 1 of the 200-sentence grammar: the one to compare", "baseline, seeds"

    with _serve(home, tmp_path / "first.log") as app_url:
        page = _page(chromium_browser)
        try:
            # A finished run's bar is its state's colour (Streamlit's green), not the theme's blue.
            page.goto(app_url + "/jobs")
            fill = page.locator(f'.st-key-job_{base[1]} [data-testid="stProgressBarTrack"] > div')
            fill.wait_for(timeout=WAIT_MS)
            assert fill.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(33, 195, 84)"
            _open_notes_of(page, app_url, base[1])
            page.locator(".st-key-note_text textarea").fill(note)
            page.locator(".st-key-note_tags input").fill(" seeds,baseline , seeds")
            page.get_by_role("button", name="Save note").click()
            page.get_by_text(f"Saved the note and tags of {base[1]}.").wait_for(timeout=WAIT_MS)
            _no_exception(page)
        finally:
            page.close()

    # The same data folder, a new server: its first visitor follows a link that names two runs.
    with _serve(home, tmp_path / "second.log") as app_url:
        page = _page(chromium_browser)
        try:
            page.goto(f"{app_url}/structure?structure_runs={other},{base[1]},structure-gone-s0")
            page.get_by_role("heading", name="Structure", exact=True).wait_for(timeout=WAIT_MS)
            picker = page.locator(".st-key-structure_runs")
            expect(picker).to_contain_text(other)
            expect(picker).to_contain_text(base[1])
            expect(picker).not_to_contain_text(base[0])
            expect(picker).not_to_contain_text("structure-gone-s0")
            _settled(page)
            assert f"structure_runs={other}%2C{base[1]}" in page.url or f"structure_runs={other},{base[1]}" in page.url
            _no_exception(page)

            _open_notes_of(page, app_url, base[1])
            expect(page.locator(".st-key-note_text textarea")).to_have_value(note)
            expect(page.locator(".st-key-note_tags input")).to_have_value("seeds, baseline")
            _no_exception(page)
        finally:
            page.close()
