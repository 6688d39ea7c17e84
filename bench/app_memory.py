"""How much memory the app process holds as a visitor walks through every page.

    python -m bench.app_memory [--home DIR] [--json]

Starts ``streamlit run app.py`` on a free loopback port over a data folder (``--home``; by default
``$EMALAB_HOME``), opens every page of the navigation in turn in headless Chromium, waits until the
page has finished running, and reads the server process's resident memory (VmRSS) before the walk
and after each page.  The target: under 700 MiB after the whole walk.  ``bench.pages --json``
reports the same walk over the data folder it fills.

Memory is the server's alone: a job launched from a page runs in its own worker process.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_MIB = 700
# Liveness only: a server that is not up, or a page that has not finished, by then is stuck.
WAIT_S = 600
# A page counts as finished when Streamlit's "running" indicator has been gone this long (it
# flickers between a page's script run and a fragment's).
SETTLED_S = 2.0


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid`` in MiB (Linux: /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


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
def serve(home: Path, log: Path | None = None):
    """``streamlit run app.py`` on a free loopback port with ``EMALAB_HOME=home``: yields (url, server
    process).  Its output goes to ``log`` (else nowhere); a server that does not come up raises with
    the log's tail.  The browser tests serve the app with it too."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") if log is not None else contextlib.nullcontext(subprocess.DEVNULL) as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
             # No reloading: an edit anywhere in the checkout would make Streamlit re-import the project's
             # modules under the cached job runner.
             "--server.fileWatcherType", "none"],
            cwd=ROOT, env={**os.environ, "EMALAB_HOME": str(home)}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
                raise RuntimeError(f"streamlit did not come up on {url}:\n{tail}")
            time.sleep(0.5)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _settle(page) -> None:
    """Wait until the page's script (and its first fragment runs) have finished."""
    page.get_by_test_id("stMain").wait_for(timeout=WAIT_S * 1000)
    deadline = time.monotonic() + WAIT_S
    quiet_since = None
    while time.monotonic() < deadline:
        running = page.locator('[data-testid="stStatusWidget"]').count() > 0
        if running:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLED_S:
            return
        page.wait_for_timeout(250)
    raise RuntimeError(f"{page.url} did not finish running")


def walk(home: Path) -> dict:
    """Every page of the navigation in turn over ``home``; the server's memory before and after each.

    Returns {"start_mib", "end_mib", "peak_mib", "target_mib", "pass", "pages": {stem: mib after it},
    "exceptions": [page stems whose script raised]}."""
    from playwright.sync_api import sync_playwright

    from pages._router import NAV

    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError("the memory walk needs chromium on PATH (make chromium installs it)")
    with serve(home) as (url, proc), sync_playwright() as p:
        start = rss_mib(proc.pid)
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        after: dict[str, float] = {}
        raised: list[str] = []
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for i, (stem, _, _) in enumerate(NAV):
                # One session, as a visitor clicking through: a URL per page keeps the walk's order exact.
                page.goto(url + ("/" if i == 0 else f"/{stem}"))
                _settle(page)
                if page.locator('[data-testid="stException"]').count():
                    raised.append(stem)
                after[stem] = round(rss_mib(proc.pid), 1)
        finally:
            browser.close()
        end = rss_mib(proc.pid)
    return {"start_mib": round(start, 1), "end_mib": round(end, 1), "peak_mib": max([start, end, *after.values()]),
            "target_mib": TARGET_MIB, "pass": end < TARGET_MIB and not raised, "pages": after, "exceptions": raised}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, help="the data folder to walk over (default: $EMALAB_HOME)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.home is not None:
        home = args.home.resolve()
    else:
        from ema_core.rundir import emalab_home

        home = emalab_home()
    report = {**walk(home), "home_runs": len(list((home / "runs").glob("*/"))) if (home / "runs").exists() else 0}
    if args.json:
        print(json.dumps(report))
    else:
        for stem, mib in report["pages"].items():
            print(f"{stem:12s} {mib:8.1f} MiB")
        print(f"start {report['start_mib']} MiB → end {report['end_mib']} MiB (target < {TARGET_MIB} MiB): "
              f"{'PASS' if report['pass'] else 'FAIL'}")
    return 0 if not report["exceptions"] else 1


if __name__ == "__main__":
    sys.exit(main())
