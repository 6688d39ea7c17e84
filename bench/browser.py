"""The app served on a loopback port, and the one meaning of "this page is drawn", for the benchmarks that
walk the app in Chromium and for the browser tests (tests/browser.py).

Idle means: a run of the app's script that began after the last interaction has ended whole, no
script or fragment is running now, no element is stale, and every chart is drawn and the same on two
polls in a row.  The server says when a run ends and how (a run cut short for a rerun, the router's
first one or a widget moved mid-run, does not count): a watcher installed in every page before the
app's own code (:func:`watch`) reads that from the app's websocket, so a run that starts and ends
between two polls is not missed, and a page read before its rerun has even begun is not taken for
idle.  Streamlit's root says whether a script is running (``data-test-script-state``).  Waiting for
idle is a liveness wait: its bound only tells a stuck app from a slow one.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
# Liveness only: a server that is not up, or a page that has not finished, by then is stuck (ten times
# what a loaded 2-core machine needs; never a speed target).
WAIT_S = 600
WAIT_MS = WAIT_S * 1000
# How often the idle condition is polled; a chart must be the same on two polls in a row.
POLL_MS = 250


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


def watch(page) -> None:
    """Count the app's whole runs in every document ``page`` opens from now on (before its first goto)."""
    page.add_init_script(COUNT_RUNS)


def settle(page, after: int = 0) -> None:
    """Wait (liveness) until the app is idle after a run that ended later than ``after`` runs had."""
    page.wait_for_function(IDLE, arg=after, polling=POLL_MS, timeout=WAIT_MS)


@contextlib.contextmanager
def rerun(page):
    """Around an interaction that reruns the app: on leaving, the page is idle after that rerun."""
    before = runs_ended(page)
    yield
    settle(page, before)


