"""CPU path: the K rates fused in one pass over x, parallel over (batch, channel block).

Layout: for each step t the kernel reads one row x[b, t, d0:d1] and writes K rows
out[b, t, k, d0:d1], so both streams are contiguous and the inner loop vectorises.
Outputs are allocated by numpy and passed in: allocating them inside ``@njit`` was
3.5x slower here (numba's allocator misses huge pages).
"""
from __future__ import annotations

import numpy as np

from ema_core.jit import CACHE_DIR, get_num_threads, njit, prange  # noqa: F401  (CACHE_DIR: where the JIT cache lives)


@njit(parallel=True, cache=True, nogil=True)
def _ema_kernel(x, alpha, h0, reset, has_reset, block, nseg, out, poison):
    # x (B,T,D) · alpha (K,) · h0 (B,K,D) · reset (B,T) · out (B,T,K,D) · poison (jobs,)
    # One job per (batch row, channel block, time segment).  A segment after the first starts
    # from a zero state; _carry_fixup adds what it missed.
    # The state is the previous output row (still in cache), not a separate buffer: with a
    # separate h[] LLVM cannot prove it does not alias out[] and the loop stays scalar (4x slower).
    B, T, D = x.shape
    K = alpha.shape[0]
    nblk = (D + block - 1) // block
    seglen = (T + nseg - 1) // nseg
    for job in prange(B * nblk * nseg):
        b = job // (nblk * nseg)
        d0 = ((job // nseg) % nblk) * block
        seg = job % nseg
        w = min(block, D - d0)
        t0 = seg * seglen
        t1 = min(T, t0 + seglen)
        # NaN/inf in x reaches the last state (a convex combination never overflows, and
        # 0·NaN is NaN even for α = 1) unless a reset wipes it: so check the rows a reset
        # discards here (x·0 is 0 for finite x) and the segment-end states afterwards.
        acc = h0[b, 0, d0] * 0
        for t in range(t0, t1):
            xt = x[b, t, d0 : d0 + w]
            fresh = (has_reset and reset[b, t]) or (t == t0 and seg > 0)
            for k in range(K):
                a = alpha[k]
                c = 1 - a
                cur = out[b, t, k, d0 : d0 + w]
                if fresh:
                    if t > t0:  # (a row of another segment may not be written yet)
                        for j in range(w):
                            acc += out[b, t - 1, k, d0 + j] * 0
                    for j in range(w):
                        cur[j] = a * xt[j]
                else:
                    prev = out[b, t - 1, k, d0 : d0 + w] if t > 0 else h0[b, k, d0 : d0 + w]
                    for j in range(w):
                        cur[j] = c * prev[j] + a * xt[j]
        poison[job] = acc


@njit(parallel=True, cache=True, nogil=True)
def _carry_fixup(alpha, reset, has_reset, nseg, reach, out, carry):
    # Segments s >= 1 ran from a zero state; the true state entering segment s is
    # carry[b, s] = end of segment s−1 + β^len·carry[b, s−1] (0 if a reset fell in s−1), and
    # step t of segment s misses β^(t−t0+1)·carry[b, s] until the segment's first reset.
    # That term decays geometrically, so it is added only for the first reach[k] steps, after
    # which β^Δ < 2^−30 (float32) or 2^−60 (float64) of the carry: below rounding.
    B, T, K, D = out.shape
    seglen = (T + nseg - 1) // nseg
    for b in prange(B):  # the carries, in order along time: nseg steps per row
        for s in range(1, nseg):
            t0 = (s - 1) * seglen
            t1 = s * seglen
            cut = False
            if has_reset:
                for t in range(t0, t1):
                    if reset[b, t]:
                        cut = True
            for k in range(K):
                f = (1 - alpha[k]) ** (t1 - t0)
                for d in range(D):
                    keep = 0.0 if (cut or s == 1) else f * carry[b, s - 1, k, d]
                    carry[b, s, k, d] = out[b, t1 - 1, k, d] + keep
    for job in prange(B * (nseg - 1)):  # then every segment independently
        b = job // (nseg - 1)
        s = job % (nseg - 1) + 1
        t0 = s * seglen
        t1 = min(T, t0 + seglen)
        stop = t1
        if has_reset:
            for t in range(t1 - 1, t0 - 1, -1):
                if reset[b, t]:
                    stop = t
        for k in range(K):
            c = 1 - alpha[k]
            f = c
            for t in range(t0, min(stop, t0 + reach[k])):
                row = out[b, t, k]
                for d in range(D):
                    row[d] += f * carry[b, s, k, d]
                f *= c


def _plan(B: int, T: int, D: int, threads: int) -> tuple[int, int]:
    """(channel block, time segments) so that every thread streams whole rows where it can."""
    # Whole rows are fastest by far (measured: 32-wide blocks of a 256-wide row were 4x slower,
    # strided streams defeat the prefetcher).  A batch that cannot feed every thread is split
    # along time instead (contiguous streams, plus a short carry fix-up per segment), or along
    # channels when rows are wide enough for >= 256-float pieces.
    if B >= threads:
        return D, 1
    parts = -(-threads // B)
    if D >= 512:
        block = -(-D // parts)
        return max(256, -(-block // 16) * 16), 1
    if T >= parts * MIN_SEGMENT:
        return D, parts
    return D, 1


MIN_SEGMENT = 16_384  # shorter segments are not worth a second pass


def _reach(alpha: np.ndarray, dtype, seglen: int) -> np.ndarray:
    tol = 2.0**-30 if dtype == np.float32 else 2.0**-60
    beta = 1.0 - alpha.astype(np.float64)
    with np.errstate(divide="ignore"):
        steps = np.where(beta > 0, np.ceil(np.log(tol) / np.log(np.where(beta > 0, beta, 0.5))), 0)
    return np.minimum(steps, seglen).astype(np.int64)


def ema_scan_numba(x: np.ndarray, alphas: np.ndarray, h0=None, reset=None, out: np.ndarray | None = None,
                   segments: int | None = None):
    """Contract of :mod:`ema_core.scan` for numpy inputs (already validated by the dispatcher).

    ``out`` (B, T, K, D) may be passed to reuse a buffer across calls: fresh pages cost a
    page fault each on first touch, which at T = 1e6 is most of the time of a call.
    ``segments`` forces the number of time segments per batch row (tests; default: planned).
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
    if B == 0 or D == 0:  # nothing to scan (and no work to plan: the plan divides by B and D)
        return out, h0a.copy()
    block, nseg = _plan(B, T, D, get_num_threads())
    if segments is not None:
        block, nseg = D, max(1, min(int(segments), T))
    poison = np.zeros(B * (-(-D // block)) * nseg, x.dtype)
    _ema_kernel(x, alpha, h0a, r, has_reset, block, nseg, out, poison)
    finite = np.isfinite(poison).all()
    if nseg > 1:
        carry = np.zeros((B, nseg, K, D), x.dtype)
        _carry_fixup(alpha, r, has_reset, nseg, _reach(alphas, x.dtype, -(-T // nseg)), out, carry)
        finite = finite and np.isfinite(carry).all()
    h_last = out[:, -1].copy()
    if not (finite and np.isfinite(h_last).all()):
        raise ValueError("x contains non-finite values (NaN or inf)")
    return out, h_last
