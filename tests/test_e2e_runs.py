"""The Jobs page's notes and the results pages' picks, in headless Chromium against the real app.

A finished run's bar has its state's colour; a note written on the Jobs page is still there after the
server restarts on the same data folder; a results page opened from a URL that names runs (the first
request of that fresh server, so through the deep-link router) shows those runs picked.  The runs are finished structure runs written as a job
leaves them (tests/structure_fixture.py): nothing trains here.
"""
from __future__ import annotations

import re

from playwright.sync_api import expect

# One way to serve the app and drive Chromium for every browser test, and the one meaning of "idle".
from browser import goto, no_exception, rerun, serve_app, settle


def _page(browser):
    return browser.new_page(viewport={"width": 1400, "height": 1600})


def _open_notes_of(page, app_url: str, run_id: str) -> None:
    """The Jobs page's Table tab, with ``run_id`` picked in its notes form."""
    goto(page, app_url + "/jobs")
    page.get_by_role("heading", name="Jobs").wait_for()
    with rerun(page):  # the open tab lives in the URL: a rerun draws it
        page.get_by_role("tab", name="Table").click()
    page.locator(".st-key-note_run").click()
    with rerun(page):
        page.get_by_role("option", name=re.compile(re.escape(run_id))).click()
    expect(page.locator(".st-key-note_run input")).to_have_value(re.compile(re.escape(run_id)))
    settle(page)


def test_a_note_outlives_a_restart_and_a_url_picks_runs(tmp_path, chromium_browser):
    from structure_fixture import make_structure_runs

    home = tmp_path / "home"
    base = make_structure_runs(home, (0, 1))
    other = make_structure_runs(home, (0,), {"preset": "test", "n_sentences": 300})[0]
    note, tags = "seed 1 of the 200-sentence grammar: the one to compare", "baseline, seeds"

    with serve_app(home, tmp_path / "first.log") as app_url:
        page = _page(chromium_browser)
        try:
            # A finished run's bar is its state's colour (Streamlit's green), not the theme's blue.
            goto(page, app_url + "/jobs")
            fill = page.locator(f'.st-key-job_{base[1]} [data-testid="stProgressBarTrack"] > div')
            assert fill.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(33, 195, 84)"
            _open_notes_of(page, app_url, base[1])
            page.locator(".st-key-note_text textarea").fill(note)
            page.locator(".st-key-note_tags input").fill(" seeds,baseline , seeds")
            with rerun(page):
                page.get_by_role("button", name="Save note").click()
            page.get_by_text(f"Saved the note and tags of {base[1]}.").wait_for()
            no_exception(page)
        finally:
            page.close()

    # The same data folder, a new server: its first visitor follows a link that names two runs.
    with serve_app(home, tmp_path / "second.log") as app_url:
        page = _page(chromium_browser)
        try:
            goto(page, f"{app_url}/structure?structure_runs={other},{base[1]},structure-gone-s0")
            page.get_by_role("heading", name="Structure", exact=True).wait_for()
            picker = page.locator(".st-key-structure_runs")
            expect(picker).to_contain_text(other)
            expect(picker).to_contain_text(base[1])
            expect(picker).not_to_contain_text(base[0])
            expect(picker).not_to_contain_text("structure-gone-s0")
            assert f"structure_runs={other}%2C{base[1]}" in page.url or f"structure_runs={other},{base[1]}" in page.url
            no_exception(page)

            _open_notes_of(page, app_url, base[1])
            expect(page.locator(".st-key-note_text textarea")).to_have_value(note)
            expect(page.locator(".st-key-note_tags input")).to_have_value("seeds, baseline")
            no_exception(page)
        finally:
            page.close()
