"""A fixture's real run trains once per test run, whichever test (or pytest-xdist worker) asks first.

``trained(kind, key, compute)`` returns what ``compute()`` returned the first time any process of this
test run asked for ``(kind, key)``: it is pickled into the run's cache folder (``$EMALAB_TEST_RUNS``,
made by tests/conftest.py before any worker starts and removed at the end) and unpickled, a fresh copy,
for every later caller.  ``compute`` runs with ``$EMALAB_HOME`` at one data folder of the cache's own,
so the corpus, tokenizer and token streams it caches are made once too (the experiments' caches are
shared by concurrent jobs already), and a result never depends on the data folder of the test that
happened to ask first.  A process that asks for a run another is training waits, then reads it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock

ENV = "EMALAB_TEST_RUNS"


@contextlib.contextmanager
def home(folder: Path):
    """``$EMALAB_HOME`` at ``folder`` for the block (the experiments keep their caches under it)."""
    before = os.environ.get("EMALAB_HOME")
    os.environ["EMALAB_HOME"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("EMALAB_HOME", None)
        else:
            os.environ["EMALAB_HOME"] = before


def _folder() -> Path:
    if not os.environ.get(ENV):  # a helper imported outside pytest: a folder of this process's own
        os.environ[ENV] = tempfile.mkdtemp(prefix="emalab_test_runs_")
    return Path(os.environ[ENV])


def trained(kind: str, key: Any, compute: Callable[[], Any]) -> Any:
    """``compute()``'s value for ``(kind, key)`` in this test run: computed once, a fresh copy each call."""
    folder = _folder()
    digest = hashlib.sha256(json.dumps([kind, key], sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = folder / f"{kind}-{digest}.pkl"
    with FileLock(str(path.with_suffix(".lock"))):
        if not path.exists():
            with home(folder / "home"):
                value = compute()
            partial = path.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(value))
            partial.replace(path)  # whole or absent: a reader never sees half a result
    return pickle.loads(path.read_bytes())
