"""CPU path: the K rates fused in one pass over x, parallel over (batch, channel block).

Layout: for each step t the kernel reads one row x[b, t, d0:d1] and writes K rows
out[b, t, k, d0:d1], so both streams are contiguous and the inner loop vectorises.
Outputs are allocated by numpy and passed in: allocating them inside ``@njit`` was
3.5x slower here (numba's allocator misses huge pages).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np


def _writable(folder: Path) -> bool:
    # Probe by writing: os.access() says yes to root even on read-only mounts.
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError:
        return False


def numba_cache_dir() -> str | None:
    """Where numba will keep this module's JIT cache, choosing a fallback if needed.

    numba caches next to the source (``__pycache__``) and otherwise in a user cache
    folder; when neither is writable (a read-only install with a read-only home)
    ``cache=True`` fails at import with "no locator available".  We keep the
    in-tree cache when it works and otherwise point numba at the first writable
    folder among $NUMBA_CACHE_DIR, $EMALAB_HOME/cache/numba, ~/.cache/emalab/numba
    and the system temp folder.  Returns the folder chosen, or None for in-tree.
    """
    import numba

    if os.environ.get("NUMBA_CACHE_DIR"):
        return os.environ["NUMBA_CACHE_DIR"]
    if _writable(Path(__file__).resolve().parent / "__pycache__"):
        return None
    candidates = []
    if os.environ.get("EMALAB_HOME"):
        candidates.append(Path(os.environ["EMALAB_HOME"]) / "cache" / "numba")
    candidates.append(Path.home() / ".cache" / "emalab" / "numba")
    candidates.append(Path(tempfile.gettempdir()) / f"emalab-numba-{os.getuid()}")
    for folder in candidates:
        if _writable(folder):
            numba.config.CACHE_DIR = str(folder)
            return str(folder)
    return None  # nothing writable: numba will say so


CACHE_DIR = numba_cache_dir()

from numba import get_num_threads, njit, prange  # noqa: E402  (after the cache folder is set)


@njit(parallel=True, cache=True, nogil=True)
def _ema_kernel(x, alpha, h0, reset, has_reset, block, out, poison):
    # x (B,T,D) · alpha (K,) · h0 (B,K,D) · reset (B,T) · out (B,T,K,D) · poison (jobs,)
    # The state is the previous output row (still in cache), not a separate buffer: with a
    # separate h[] LLVM cannot prove it does not alias out[] and the loop stays scalar (4x slower).
    B, T, D = x.shape
    K = alpha.shape[0]
    nblk = (D + block - 1) // block
    for job in prange(B * nblk):
        b = job // nblk
        d0 = (job % nblk) * block
        w = min(block, D - d0)
        # NaN/inf in x reaches the last state (a convex combination never overflows, and
        # 0·NaN is NaN even for α = 1) unless a reset wipes it: so check the rows a reset
        # discards here (x·0 is 0 for finite x) and the last state after the kernel.
        acc = h0[b, 0, d0] * 0
        for t in range(T):
            xt = x[b, t, d0 : d0 + w]
            fresh = has_reset and reset[b, t]
            for k in range(K):
                a = alpha[k]
                c = 1 - a
                cur = out[b, t, k, d0 : d0 + w]
                if fresh:
                    if t > 0:
                        for j in range(w):
                            acc += out[b, t - 1, k, d0 + j] * 0
                    for j in range(w):
                        cur[j] = a * xt[j]
                else:
                    prev = out[b, t - 1, k, d0 : d0 + w] if t > 0 else h0[b, k, d0 : d0 + w]
                    for j in range(w):
                        cur[j] = c * prev[j] + a * xt[j]
        poison[job] = acc


def _block_size(B: int, D: int, threads: int) -> int:
    # Whole rows are fastest by far (measured: 32-wide blocks of a 256-wide row were 4x
    # slower, strided streams defeat the prefetcher), so split channels only when the batch
    # cannot feed every thread and rows are wide enough for >= 256-float pieces.
    if B >= threads or D < 512:
        return D
    parts = -(-threads // B)
    block = -(-D // parts)
    return max(256, -(-block // 16) * 16)


def ema_scan_numba(x: np.ndarray, alphas: np.ndarray, h0=None, reset=None, out: np.ndarray | None = None):
    """Contract of :mod:`ema_core.scan` for numpy inputs (already validated by the dispatcher).

    ``out`` (B, T, K, D) may be passed to reuse a buffer across calls: fresh pages cost a
    page fault each on first touch, which at T = 1e6 is most of the time of a call.
    """
    x = np.ascontiguousarray(x)
    if x.dtype not in (np.float32, np.float64):
        raise ValueError(f"x must be float32 or float64 for the numba path, got dtype {x.dtype}")
    B, T, D = x.shape
    K = alphas.shape[0]
    alpha = np.ascontiguousarray(alphas, dtype=x.dtype)
    h0a = np.zeros((B, K, D), x.dtype) if h0 is None else np.ascontiguousarray(h0, dtype=x.dtype)
    has_reset = reset is not None
    r = np.ascontiguousarray(reset, dtype=np.bool_) if has_reset else np.zeros((1, 1), np.bool_)
    if out is None:
        out = np.empty((B, T, K, D), x.dtype)
    elif out.shape != (B, T, K, D) or out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {x.dtype} array of shape {(B, T, K, D)}, got {out.dtype} {out.shape}")
    block = _block_size(B, D, get_num_threads())
    poison = np.zeros(B * (-(-D // block)), x.dtype)
    _ema_kernel(x, alpha, h0a, r, has_reset, block, out, poison)
    h_last = out[:, -1].copy()
    if not (np.isfinite(poison).all() and np.isfinite(h_last).all()):
        raise ValueError("x contains non-finite values (NaN or inf)")
    return out, h_last
