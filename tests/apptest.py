"""The app through Streamlit's AppTest, as a browser would open it: the router first, then a page."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
# Liveness only: a script run that has not ended by then is stuck, however busy the machine.
TIMEOUT = 600


def ok(at: AppTest) -> AppTest:
    """``at`` after checking that its last run raised nothing (the exceptions' texts if it did)."""
    assert not at.exception, [e.value for e in at.exception]
    return at


def open_page(path: str | None = None) -> AppTest:
    """The app run once (the router, its sidebar), then switched to ``path`` (a file under pages/)."""
    at = ok(AppTest.from_file(APP, default_timeout=TIMEOUT).run())
    if path:
        ok(at.switch_page(path).run())
    return at
