"""Benchmark of the EMA scan paths against baselines and the memory-copy roofline.

    python -m bench.scan [--quick] [--json]

Every figure comes from the same run, because the ratios are what matter on a shared,
noisy machine.  Unit: nanoseconds per output element, one (t, k, d) value of the traces.
Each timing is the best of several repeats (at least a second's worth) after a warm-up
(JIT compilation, torch allocator): the best estimates what the code costs rather than
what the neighbours cost.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import time

import numba
import numpy as np
import pandas as pd
import scipy
import torch
from scipy import signal

from bench.machine import machine_info as _machine_info
from bench.report import show
from ema_core.jit import njit, prange
from ema_core.scan.numba_cpu import ema_scan_numba
from ema_core.scan.torch_scan import ema_scan_torch

ALPHAS = (0.5, 0.1, 0.02)
K = len(ALPHAS)
TARGETS = {  # key: (comparison, threshold)
    "numba_over_roofline": ("<=", 1.5),
    "lfilter_over_numba": (">=", 50.0),
    "pandas_over_numba": (">=", 80.0),
    "naive_over_torch": (">=", 20.0),
    "gpu_fwd_bandwidth_fraction": (">=", 0.6),
}
# A fused scan reads x once (4/K bytes per float32 output) and writes each output (4 bytes).
BYTES_PER_OUTPUT = 4 + 4 / K
# Peak HBM bandwidth, used when the device does not report its memory clock and bus width.
PEAK_GBPS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0, "L40S": 864.0, "A10": 600.0, "V100": 900.0}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def best_of(fn, repeats: int, warmup: int = 1, min_time: float = 1.0, cap: int = 200) -> float:
    """Best time of at least ``repeats`` calls, and of as many more (up to ``cap``) as fit in
    ``min_time`` seconds: a short call gets many chances to run while the neighbours are quiet."""
    for _ in range(warmup):
        fn()
    best, n, spent = math.inf, 0, 0.0
    while n < repeats or (spent < min_time and n < cap):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, n, spent = min(best, dt), n + 1, spent + dt
    return best


def _par_copy_kernel():
    @njit(parallel=True, nogil=True)
    def par_copy(src, dst):
        for i in prange(src.size):
            dst[i] = src[i]

    return par_copy


def machine_info() -> dict:
    return _machine_info(numba=numba.__version__, scipy=scipy.__version__, pandas=pd.__version__,
                         numba_threads=numba.get_num_threads())


def bench_cpu_scan(T: int, D: int, fast: int, slow: int) -> dict:
    """Roofline, numba (reused and fresh output), lfilter and pandas on one (1, T, D) input."""
    alphas = np.asarray(ALPHAS, np.float64)
    x = np.random.default_rng(0).standard_normal((1, T, D), dtype=np.float32)
    n_out = T * K * D

    # Roofline: BYTES_PER_OUTPUT at copy bandwidth (bytes / (GB/s) = ns).  Copy bandwidth
    # counts read + write bytes (8 per float32 element); source and destination are touched
    # first so that page faults are not mistaken for bandwidth.  The faster of a single-
    # threaded np.copyto and a parallel numba copy is used: the tighter roofline.
    out = np.empty((1, T, K, D), np.float32)
    out.fill(0)
    src = np.ones(n_out, np.float32)
    dst = out.reshape(-1)
    t_np = best_of(lambda: np.copyto(dst, src), fast)
    par_copy = _par_copy_kernel()
    t_nb = best_of(lambda: par_copy(src, dst), fast)
    del src
    bw = {"np_copyto": 8 * n_out / t_np / 1e9, "numba_prange": 8 * n_out / t_nb / 1e9}
    bw["used"] = max(bw.values())
    ns = {"roofline": BYTES_PER_OUTPUT / bw["used"]}

    # numba: compile on a small slice first (cache=True makes later runs start warm).
    ema_scan_numba(np.ascontiguousarray(x[:, :256]), alphas)
    log("  numba (reused out=)")
    ns["numba_reused_out"] = best_of(lambda: ema_scan_numba(x, alphas, out=out), fast) / n_out * 1e9
    del out, dst
    gc.collect()
    # End to end: every call allocates a fresh (B, T, K, D) array and pays its page faults.
    log("  numba (fresh output)")
    ns["numba_fresh_out"] = best_of(lambda: ema_scan_numba(x, alphas), max(2, fast // 2), warmup=0) / n_out * 1e9
    gc.collect()

    # Per-rate baselines: one pass per rate over the (T, D) input, time axis first.
    x2 = x[0]
    log("  scipy.signal.lfilter x3 rates")
    ns["lfilter_3_rates"] = best_of(lambda: [signal.lfilter([a], [1.0, a - 1.0], x2, axis=0) for a in ALPHAS], slow) / n_out * 1e9
    gc.collect()
    df = pd.DataFrame(x2)
    log("  pandas ewm x3 rates")
    ns["pandas_ewm_3_rates"] = best_of(lambda: [df.ewm(alpha=a, adjust=False).mean() for a in ALPHAS], slow) / n_out * 1e9
    del df, x, x2
    gc.collect()
    return ns, bw


def _loss(y, h):
    return y.sum() + h.sum()


def torch_steps(x):
    """(forward, forward + backward) closures of the torch scan on x, for timing."""
    xg = x.clone().requires_grad_(True)

    def fwd():
        with torch.no_grad():
            ema_scan_torch(x, ALPHAS)

    def fwd_bwd():
        y, h = ema_scan_torch(xg, ALPHAS)
        _loss(y, h).backward()
        xg.grad = None

    return fwd, fwd_bwd


def bench_torch_cpu(B: int, T: int, D: int, T_naive: int, fast: int) -> dict:
    torch.manual_seed(0)
    x = torch.randn(B, T, D)
    n_out = B * T * K * D
    fwd, fwd_bwd = torch_steps(x)

    log("  torch chunked scan: forward, forward+backward")
    ns = {"torch_fwd": best_of(fwd, fast, warmup=2) / n_out * 1e9,
          "torch_fwd_bwd": best_of(fwd_bwd, fast, warmup=2) / n_out * 1e9}

    # What one would write without a scan kernel: a Python loop over time, all K rates at
    # once, differentiated by autograd step by step.
    xn = x[:, :T_naive].clone().requires_grad_(True)
    a = torch.tensor(ALPHAS, dtype=x.dtype)[:, None]  # (K, 1), broadcasts over (B, K, D)

    def naive():
        h = torch.zeros(B, K, D)
        ys = []
        for t in range(T_naive):
            h = (1 - a) * h + a * xn[:, t, None]
            ys.append(h)
        _loss(torch.stack(ys, 1), h).backward()
        xn.grad = None

    log(f"  naive per-step torch loop (T={T_naive})")
    ns["naive_loop_fwd_bwd"] = best_of(naive, max(2, fast // 2)) / (B * T_naive * K * D) * 1e9
    return ns


def peak_gbps(props) -> tuple[float | None, str]:
    # cudaDeviceProp: memoryClockRate in kHz, memoryBusWidth in bits; HBM/GDDR move data on
    # both clock edges, hence the 2.  Newer CUDA versions may report 0: fall back to a table.
    clock = getattr(props, "memory_clock_rate", 0) or 0
    width = getattr(props, "memory_bus_width", 0) or 0
    if clock > 0 and width > 0:
        return 2 * clock * 1e3 * width / 8 / 1e9, "memory_clock_rate x memory_bus_width"
    for name, gbps in PEAK_GBPS.items():
        if name in props.name:
            return gbps, f"table ({name})"
    return None, "unknown"


def bench_gpu(fast: int) -> dict:
    """The torch path on CUDA: achieved bandwidth of the forward against the device's peak."""
    B, T, D = 16, 8192, 1024
    props = torch.cuda.get_device_properties(0)
    peak, source = peak_gbps(props)
    res = {"device": props.name, "shape": [B, T, D, K], "peak_GBps": peak, "peak_source": source}

    def timed(fn):
        def run():  # kernels are asynchronous: wait for them inside the timed region
            fn()
            torch.cuda.synchronize()
        torch.cuda.synchronize()
        return best_of(run, fast, warmup=2)

    for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x = torch.randn(B, T, D, device="cuda", dtype=dtype)
        fwd, fwd_bwd = torch_steps(x)

        log(f"  gpu {label}")
        t_f = timed(fwd)
        t_fb = timed(fwd_bwd)
        moved = x.numel() * x.element_size() * (1 + K)  # read x, write traces in x's dtype
        res[f"{label}_fwd_ms"] = t_f * 1e3
        res[f"{label}_fwd_bwd_ms"] = t_fb * 1e3
        res[f"{label}_fwd_ns"] = t_f / (x.numel() * K) * 1e9
        res[f"{label}_fwd_GBps"] = moved / t_f / 1e9
        res[f"{label}_fwd_bandwidth_fraction"] = None if peak is None else moved / t_f / 1e9 / peak
        del x, fwd, fwd_bwd
        torch.cuda.empty_cache()
    return res


def run(quick: bool, T_override: int | None) -> dict:
    t_start = time.perf_counter()
    T = T_override or (200_000 if quick else 1_000_000)
    D = 64
    tB, tT, tD = 8, min(1024, T), 256
    # The naive loop is not shortened in quick mode: its backward costs more per step as T
    # grows (measured: 3-4x more per output at T=1024 than at T=128), so a short T flatters it.
    T_naive = min(1024, T)
    fast, slow = (3, 2) if quick else (7, 3)
    report = {"machine": machine_info(), "quick": quick}
    report["shapes"] = {
        "numba_lfilter_pandas": {"B": 1, "T": T, "D": D, "K": K, "dtype": "float32"},
        "torch_cpu": {"B": tB, "T": tT, "D": tD, "K": K, "dtype": "float32"},
        "naive_torch_loop": {"B": tB, "T": T_naive, "D": tD, "K": K, "dtype": "float32"},
        "alphas": list(ALPHAS),
    }
    log(f"CPU scan, (1, {T}, {D}) x {K} rates")
    ns, bw = bench_cpu_scan(T, D, fast, slow)
    log(f"torch CPU, ({tB}, {tT}, {tD}) x {K} rates")
    ns.update(bench_torch_cpu(tB, tT, tD, T_naive, fast))
    report.update(ns_per_output=ns, copy_bandwidth_GBps=bw, bytes_per_output=BYTES_PER_OUTPUT)
    # Ratios use the reused-buffer numba figure (the kernel); the fresh one is end to end.
    nb, fresh = ns["numba_reused_out"], ns["numba_fresh_out"]
    report["numba_over_roofline"] = nb / ns["roofline"]
    report["numba_fresh_over_roofline"] = fresh / ns["roofline"]
    report["lfilter_over_numba"] = ns["lfilter_3_rates"] / nb
    report["pandas_over_numba"] = ns["pandas_ewm_3_rates"] / nb
    report["lfilter_over_numba_fresh"] = ns["lfilter_3_rates"] / fresh
    report["pandas_over_numba_fresh"] = ns["pandas_ewm_3_rates"] / fresh
    report["naive_over_torch"] = ns["naive_loop_fwd_bwd"] / ns["torch_fwd_bwd"]
    report["gpu"] = None
    if torch.cuda.is_available():
        log("torch CUDA, (16, 8192, 1024) x 3 rates")
        report["gpu"] = bench_gpu(fast)
        if report["gpu"]["fp32_fwd_bandwidth_fraction"] is not None:
            report["gpu_fwd_bandwidth_fraction"] = report["gpu"]["fp32_fwd_bandwidth_fraction"]
    report["targets"] = {
        key: {"value": report[key], "target": f"{op} {thr:g}",
              "pass": bool(report[key] <= thr if op == "<=" else report[key] >= thr)}
        for key, (op, thr) in TARGETS.items() if key in report
    }
    report["machine"]["loadavg_end"] = round(os.getloadavg()[0], 2)
    report["seconds"] = time.perf_counter() - t_start
    return report


def print_table(r: dict) -> None:
    m, ns, s = r["machine"], r["ns_per_output"], r["shapes"]
    cs, ts, nv = s["numba_lfilter_pandas"], s["torch_cpu"], s["naive_torch_loop"]
    print(f"EMA scan benchmark{' (quick)' if r['quick'] else ''}: {m['cpu']}, {m['cores']} cores, "
          f"numba {m['numba']} ({m['numba_threads']} threads), torch {m['torch']} ({m['torch_threads']} threads)")
    print(f"load average {m['loadavg_start']} -> {m['loadavg_end']}; alphas {s['alphas']}; "
          "ns per output element (one (t, k, d) value of the traces)\n")
    rows = [
        (f"roofline: {r['bytes_per_output']:.2f} B/output at {r['copy_bandwidth_GBps']['used']:.1f} GB/s copy", ns["roofline"]),
        (f"numba fused, reused out=   (1, {cs['T']}, {cs['D']})", ns["numba_reused_out"]),
        (f"numba fused, fresh output  (1, {cs['T']}, {cs['D']})", ns["numba_fresh_out"]),
        ("scipy lfilter, 3 rates", ns["lfilter_3_rates"]),
        ("pandas ewm, 3 rates", ns["pandas_ewm_3_rates"]),
        (f"torch CPU forward          ({ts['B']}, {ts['T']}, {ts['D']})", ns["torch_fwd"]),
        (f"torch CPU forward+backward ({ts['B']}, {ts['T']}, {ts['D']})", ns["torch_fwd_bwd"]),
        (f"naive torch loop fwd+bwd   ({nv['B']}, {nv['T']}, {nv['D']})", ns["naive_loop_fwd_bwd"]),
    ]
    for name, v in rows:
        print(f"  {name:<58} {v:12.3f}")
    bw = r["copy_bandwidth_GBps"]
    print(f"\n  copy bandwidth: np.copyto {bw['np_copyto']:.1f} GB/s, numba prange {bw['numba_prange']:.1f} GB/s")
    print(f"  numba fresh output / roofline: {r['numba_fresh_over_roofline']:.2f}; "
          f"lfilter / numba fresh: {r['lfilter_over_numba_fresh']:.1f}; pandas / numba fresh: {r['pandas_over_numba_fresh']:.1f}")
    if nv["T"] != ts["T"]:
        print(f"  naive loop timed on T={nv['T']} and normalised per output element")
    g = r["gpu"]
    if g:
        print(f"\n  GPU {g['device']} {tuple(g['shape'])}, peak {g['peak_GBps']} GB/s ({g['peak_source']})")
        for lab in ("fp32", "bf16"):
            print(f"    {lab}: forward {g[f'{lab}_fwd_ms']:.2f} ms ({g[f'{lab}_fwd_GBps']:.0f} GB/s, "
                  f"{g[f'{lab}_fwd_bandwidth_fraction'] or float('nan'):.2f} of peak), "
                  f"forward+backward {g[f'{lab}_fwd_bwd_ms']:.2f} ms")
    print("\ntargets")
    for key, t in r["targets"].items():
        print(f"  {key:<28} {t['value']:10.3f}  {t['target']:<8} {'PASS' if t['pass'] else 'FAIL'}")
    print(f"\n({r['seconds']:.0f} s)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.scan", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="T = 2e5 for the numba shape, fewer repeats")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--T", type=int, default=None, help=argparse.SUPPRESS)  # tiny runs for the test
    args = p.parse_args(argv)
    report = run(args.quick, args.T)
    show(report, args.json, print_table, indent=2)


if __name__ == "__main__":
    main()
