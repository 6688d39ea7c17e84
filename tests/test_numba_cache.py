"""The numba JIT cache must work from a read-only install (site-packages owned by another user,
a container image), falling back to a writable folder instead of failing at import."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, numpy as np
from ema_core.scan import ema_scan
from ema_core.scan import numba_cpu
traces, _ = ema_scan(np.ones((1, 4, 2), np.float32), [0.5])
print(json.dumps({"cache_dir": numba_cpu.CACHE_DIR, "hits": len(numba_cpu._ema_kernel.stats.cache_hits),
                  "value": float(traces[0, -1, 0, 0])}))
"""


def _run(pkg_root: Path, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=pkg_root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cache_falls_back_when_the_install_is_read_only(tmp_path):
    pkg_root = tmp_path / "install"
    shutil.copytree(ROOT / "ema_core", pkg_root / "ema_core", ignore=shutil.ignore_patterns("__pycache__"))
    # Root ignores permission bits, so make the in-tree cache folder impossible instead: a file
    # where numba wants its __pycache__ folder.  Same for the home folder's cache.
    (pkg_root / "ema_core" / "scan" / "__pycache__").write_text("not a folder")
    (tmp_path / "home").write_text("not a folder")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "EMALAB_HOME", "PYTHONPATH")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home" / "cache"), TMPDIR=str(tmp),
               PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(pkg_root))
    first = _run(pkg_root, env)
    assert first["value"] == pytest.approx(1 - 0.5**4)
    assert first["cache_dir"] is not None and Path(first["cache_dir"]).is_relative_to(tmp)
    assert any(Path(first["cache_dir"]).rglob("*.nbi")), "no cache index written to the fallback folder"
    second = _run(pkg_root, env)
    assert second["hits"] >= 1, "the second process compiled again instead of loading the cache"


def test_cache_stays_in_tree_when_writable(tmp_path):
    pkg_root = tmp_path / "install"
    shutil.copytree(ROOT / "ema_core", pkg_root / "ema_core", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(pkg_root)
    first = _run(pkg_root, env)
    assert first["cache_dir"] is None
    assert any((pkg_root / "ema_core" / "scan" / "__pycache__").glob("*.nbi"))
