"""The real app in headless Chromium: the dilution page renders and follows a slider moved by keyboard."""
from __future__ import annotations

import os
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
# vega-embed renders each chart as an svg (or a canvas): its presence means the chart was drawn.
DRAWN_CHARTS = f"{CHARTS} svg.marks, {CHARTS} canvas"
FAST_HALF_LIFE = '.st-key-rate_fast [data-testid="stMetricValue"]'


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


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "EMALAB_HOME": str(tmp_path_factory.mktemp("emalab_home"))}
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "streamlit", "run", "app.py",
                "--server.headless", "true",
                "--server.address", "127.0.0.1",
                "--server.port", str(port),
                "--browser.gatherUsageStats", "false",
            ],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
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
def chromium_browser():
    if CHROMIUM is None:
        pytest.skip("no chromium on the PATH (`make chromium` installs Debian's)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _wait_for_charts(page, n: int = 3) -> None:
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length >= n", arg=[DRAWN_CHARTS, n], timeout=60_000
    )


def _wait_until_settled(page) -> None:
    # The screenshot should show the page as a person sees it: download buttons drawn (they
    # arrive after the charts) and no element still greyed out as stale by a running rerun.
    page.get_by_role("button", name="LaTeX").wait_for(timeout=60_000)
    page.wait_for_function(
        "() => !document.querySelector('[data-stale=\"true\"]') && document.querySelectorAll('[data-testid=\"stDownloadButton\"]').length >= 9",
        timeout=60_000,
    )
    page.wait_for_timeout(500)


def test_dilution_page_follows_the_fast_rate_slider(app_url, chromium_browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    # Tall enough that the whole page is in view: Streamlit scrolls an inner element, so a
    # full-page screenshot would only show the viewport.
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 2100})
    try:
        page.goto(app_url + "/dilution")
        # Streamlit draws over a websocket after the load event: wait for the page's own text.
        page.get_by_role("heading", name="Trace dilution").wait_for(timeout=60_000)
        _wait_for_charts(page)
        page.get_by_text("Measured in").wait_for(timeout=60_000)
        before = page.locator(FAST_HALF_LIFE).first.inner_text()
        assert before == "1.00 steps"  # α = 0.5
        _wait_until_settled(page)
        page.screenshot(path=str(SHOTS / "dilution.png"))

        slider = page.get_by_role("slider", name="α fast")
        slider.focus()
        for _ in range(5):
            page.keyboard.press("ArrowLeft")
        deadline = time.monotonic() + 20
        after = before
        while after == before and time.monotonic() < deadline:
            page.wait_for_timeout(250)
            after = page.locator(FAST_HALF_LIFE).first.inner_text()
        assert after != before, "the half-life did not follow the slider"
        assert slider.get_attribute("aria-valuetext") == "0.495"  # five steps of 0.001
        assert after == "1.01 steps"  # ln ½ / ln 0.505

        # All three legends, the measured one included, name the new rate once the rerun is done.
        page.wait_for_function(
            "([sel, text]) => [...document.querySelectorAll(sel)].filter(c => c.textContent.includes(text)).length >= 3",
            arg=[CHARTS, "α=0.495"],
            timeout=60_000,
        )
        _wait_for_charts(page)
        assert page.locator(CHARTS).count() == 3
        _wait_until_settled(page)
        page.screenshot(path=str(SHOTS / "dilution_after.png"))
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        page.close()


def test_downloads_are_generated_on_click(app_url, chromium_browser):
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 2100}, accept_downloads=True)
    try:
        page.goto(app_url + "/dilution")
        page.get_by_text("Measured in").wait_for(timeout=60_000)
        buttons = page.locator('[data-testid="stDownloadButton"]')
        expected = {"SVG": ("lag_weights.svg", b"<svg"), "LaTeX": ("identity_accuracy.tex", b"\\begin{table}")}
        for label, (name, head) in expected.items():
            with page.expect_download(timeout=60_000) as info:
                buttons.filter(has_text=label).first.click()
            download = info.value
            assert download.suggested_filename == name
            assert Path(download.path()).read_bytes().lstrip().startswith(head)
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        page.close()
