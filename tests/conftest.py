import os
import sys
from pathlib import Path

# Thread pools, before numpy or torch is loaded (both read these once, at load): the tests' arrays
# are small, and on a shared 2-core machine threads that spin while they wait cost far more than
# they return (measured on a loaded machine: the structure experiment's ridge probes 6x slower with
# two OpenBLAS threads, torch's gradcheck 10x slower with libgomp spinning).  OMP_WAIT_POLICY is
# what the runner gives every worker already; workers and commands started by tests inherit both.
# Neither changes a result a test checks.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import _posixsubprocess  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import runcache  # noqa: E402
from browser import CHECK_MS, CHROMIUM, CHROMIUM_ARGS, Browser  # noqa: E402
from playwright.sync_api import expect, sync_playwright  # noqa: E402
from tiers import tiers  # noqa: E402

# Property tests are checked on their examples, never on the clock: no per-example deadline and no
# "generation too slow" health check (both fail a correct test on a busy machine).  A test's own
# @settings changes only what it names, so these hold everywhere.
settings.register_profile("emalab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("emalab")


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        # An xdist worker has one core of its own: torch's pool of one thread per core would make two
        # workers fight over both (the tests that set threads themselves restore this after).
        torch.set_num_threads(1)
    # One folder for the real runs the fixtures train (tests/runcache.py), made before any xdist worker
    # starts so that every worker inherits it and each run trains once per test run.
    if not os.environ.get(runcache.ENV):
        os.environ[runcache.ENV] = tempfile.mkdtemp(prefix="emalab_test_runs_")
        config._emalab_runs = os.environ[runcache.ENV]


def pytest_unconfigure(config):
    made = getattr(config, "_emalab_runs", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(runcache.ENV, None)


@pytest.fixture(scope="session")
def chromium_browser():
    """One headless Chromium for every browser test (its pages: tests/browser.py's ``Browser``)."""
    if CHROMIUM is None:
        pytest.skip("no chromium on the PATH (`make chromium` installs Debian's)")
    expect.set_options(timeout=CHECK_MS)  # an expectation is a check on a settled page
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield Browser(b)
        b.close()


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch is a hard dependency
        return False


def pytest_collection_modifyitems(config, items):
    # Every test's tier, from its code (tests/tiers.py).
    for item in items:
        for tier in tiers(item):
            item.add_marker(tier)
    # GPU tests run where a CUDA device is present (`pytest -m gpu` on a GPU machine) and are
    # reported as skipped, with the reason, everywhere else.
    if _cuda():
        return
    skip = pytest.mark.skipif(True, reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class _StartedAProcess(AssertionError):
    pass


# The system's own probes that the standard library runs (platform.processor() runs `uname -p`): a
# program of a few milliseconds, not an interpreter, a server or a worker.
SYSTEM_PROBES = frozenset({"uname"})


@pytest.fixture(autouse=True)
def _only_its_tier_starts_processes(request, monkeypatch):
    # The tiers are read from the code (tests/tiers.py); here they are held to what a test does.  A test
    # outside the browser and subprocess tiers that starts a process fails, naming it, so `make test-fast`
    # never starts one, and a new way of starting one is added to tiers.SPAWNS the first time it is used.
    if request.node.get_closest_marker("subprocess") or request.node.get_closest_marker("browser"):
        yield
        return
    where = request.node.nodeid

    def refuse(name, original):
        def started(*args, **kwargs):
            what = args[0] if args and isinstance(args[0], (list, tuple, str, bytes)) else args[:2]
            argv = [what] if isinstance(what, (str, bytes)) else list(what or [])
            if argv and os.path.basename(os.fsdecode(argv[0])) in SYSTEM_PROBES:
                return original(*args, **kwargs)
            raise _StartedAProcess(
                f"{where} is in the unit tier but started a process ({name}: {what!r}); the function of "
                f"the tests that starts it belongs in tests/tiers.py's SPAWNS")
        return started

    for module, name in ((os, "fork"), (os, "posix_spawn"), (os, "posix_spawnp"), (_posixsubprocess, "fork_exec"),
                         (subprocess, "_fork_exec")):
        monkeypatch.setattr(module, name, refuse(name, getattr(module, name)))
    yield


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    # Nothing a test does may touch a user's data folder.
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path_factory.getbasetemp() / "emalab_home"))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    """A data folder with nothing in it yet (pages' empty states)."""
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def registered(monkeypatch):
    """A runner that records what a page submits (kind, config, preset) instead of starting workers."""
    submitted = []

    class Runner:
        def submit(self, kind, config, seed=None, preset=None):
            submitted.append((kind, config.model_dump(), preset))
            return f"{kind}-x-s{config.seed}"

    import pages._state

    monkeypatch.setattr(pages._state, "runner", lambda: Runner())
    return submitted
