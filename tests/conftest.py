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

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Property tests are checked on their examples, never on the clock: no per-example deadline and no
# "generation too slow" health check (both fail a correct test on a busy machine).  A test's own
# @settings changes only what it names, so these hold everywhere.
settings.register_profile("emalab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("emalab")


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch is a hard dependency
        return False


def pytest_collection_modifyitems(config, items):
    # GPU tests run where a CUDA device is present (`pytest -m gpu` on a GPU machine) and are
    # reported as skipped, with the reason, everywhere else.
    if _cuda():
        return
    skip = pytest.mark.skipif(True, reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
