"""The Jobs page's notes and the results pages' picks, in headless Chromium against the real app.

A finished run's bar has its state's colour; a note written on the Jobs page is still there after the
server restarts on the same data folder; a results page opened from a URL that names runs (the first
request of that fresh server, so through the deep-link router) shows those runs picked.  The runs are finished structure runs written as a job
leaves them (tests/structure_fixture.py): nothing trains here.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EXCEPTIONS = '[data-testid="stException"]'
# Liveness only: how long to wait for something that must happen (the server up, a page drawn) before
# calling it stuck; never a speed target.
WAIT_S = 600
WAIT_MS = WAIT_S * 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.read().decode().strip() == "ok"
    except OSError:
        return False


@contextlib.contextmanager
def _serve(home: Path, log: Path):
    """``streamlit run app.py`` on a free loopback port with ``EMALAB_HOME=home``; yields its URL."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "EMALAB_HOME": str(home)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
             # No reloading while the test runs: an edit anywhere in the checkout would re-import modules.
             "--server.fileWatcherType", "none"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + WAIT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not come up on {url}:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        pytest.skip("no chromium on the PATH (`make chromium` installs Debian's)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.set_default_timeout(WAIT_MS)
    return page


def _settled(page) -> None:
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')", timeout=WAIT_MS)


def _no_exception(page) -> None:
    assert page.locator(EXCEPTIONS).count() == 0, page.locator(EXCEPTIONS).first.inner_text()


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


def test_a_note_outlives_a_restart_and_a_url_picks_runs(tmp_path, chromium):
    from playwright.sync_api import expect

    from structure_fixture import make_structure_runs

    home = tmp_path / "home"
    base = make_structure_runs(home, (0, 1))
    other = make_structure_runs(home, (0,), {"preset": "test", "n_sentences": 300})[0]
    note, tags = "seed 1 of the 200-sentence grammar: the one to compare", "baseline, seeds"

    with _serve(home, tmp_path / "first.log") as app_url:
        page = _page(chromium)
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
        page = _page(chromium)
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
