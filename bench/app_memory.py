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
import json
import sys
from pathlib import Path

from bench.browser import CHROMIUM, CHROMIUM_ARGS, serve, settle, watch
from ema_core.rundir import emalab_home

TARGET_MIB = 700


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid`` in MiB (Linux: /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def walk(home: Path) -> dict:
    """Every page of the navigation in turn over ``home``; the server's memory before and after each.

    Returns {"start_mib", "end_mib", "peak_mib", "target_mib", "pass", "pages": {stem: mib after it},
    "exceptions": [page stems whose script raised]}."""
    from playwright.sync_api import sync_playwright  # the browser driver: only when a walk runs, not on import

    from pages._router import NAV  # imports Streamlit: only when a walk runs, not on import

    if CHROMIUM is None:
        raise RuntimeError("the memory walk needs chromium on PATH (make chromium installs it)")
    with serve(home) as (url, proc), sync_playwright() as p:
        start = rss_mib(proc.pid)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        after: dict[str, float] = {}
        raised: list[str] = []
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            watch(page)
            for i, (stem, _, _) in enumerate(NAV):
                # One session, as a visitor clicking through: a URL per page keeps the walk's order exact.
                page.goto(url + ("/" if i == 0 else f"/{stem}"))
                settle(page)
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
