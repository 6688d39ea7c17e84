"""One prepared GPU check: every figure that needs a GPU, measured by one process in at most eight minutes.

    python -m bench.gpu --json             # on a CUDA machine (also: make gpu-check)
    python -m bench.gpu --dry-run --json   # the same plan at toy sizes on the CPU (part of make test)

GPU time comes in short loans, so the whole plan runs in one call, each part with its own time
budget, and a part that fails is recorded in the report rather than ending the call: one call
always ends with one JSON object on stdout (progress goes to stderr) and, unless ``--no-store``,
with its numeric figures in the store's ``bench_figures`` table.

1. ``tests``: ``pytest -m gpu`` in a subprocess (the CUDA link of the kernel tests): counts of
   passed, failed and skipped, and the failures' names.
2. ``scan``: the torch scan at (B=16, T=8192, D=1024, K=3), fp32 and bf16, forward and forward +
   backward, as a fraction of the device's memory bandwidth.  The traffic counted is the least a
   scan can move: forward reads x and writes K traces (1 + K elements per input element); the
   backward reads K trace gradients and writes one input gradient (K + 1 more).
3. ``train``: the ``paper`` SPEN (≈ 130M parameters) and its matched GPT, bf16 autocast, at
   T = 1024 and 4096, a fixed number of steps each (after warm-up steps): tokens/s, model FLOPs
   utilisation against the device's dense bf16 peak, peak memory, and the hours the paper's 8B
   training tokens would take at that rate.  Model FLOPs per token: 6·N for the weights (forward
   and backward), plus, for the GPT, 6·n_layers·d·T for attention's scores and weighted sums
   (causal: half of the 12·n_layers·d·T of full attention).  SPEN's trace scan is O(K·d) per
   token and not counted.
4. ``mixers``: the CUDA kernels of the context mixers against their references.  None exist yet:
   reported as an empty list, so that the key is there when they come.

``--dry-run`` runs the same code on the CPU at toy sizes (the ``tiny`` model size, T = 32 and 64,
two steps, a (2, 256, 64) scan; fp32, since autocast is for CUDA): what it measures means nothing,
but every line of the plan runs, so the script cannot rot between loans.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.lm import Runner, cuda_step_memory, log
from bench.machine import machine_info
from bench.scan import ALPHAS, peak_gbps, torch_steps, best_of

ROOT = Path(__file__).resolve().parents[1]
PAPER_TOKENS = 8e9  # the paper's training budget
# Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, by the name CUDA reports.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0}
BUDGET_S = 8 * 60  # the whole call; a loan is about 15 minutes, start-up included


def _plan(dry_run: bool) -> dict:
    """The sizes of every part: the real ones, or the toy ones of a dry run."""
    if dry_run:
        return {"device": "cpu", "scan_shape": (2, 256, 64), "size": "tiny", "ts": (32, 64), "tokens_per_step": 128,
                "warmup": 1, "steps": 2, "test_timeout_s": 600, "scan_repeats": 2}
    return {"device": "cuda", "scan_shape": (16, 8192, 1024), "size": "paper", "ts": (1024, 4096),
            "tokens_per_step": 32_768, "warmup": 3, "steps": 10, "test_timeout_s": 240, "scan_repeats": 5}


# --- 1. the CUDA tests ---------------------------------------------------------------------------

def run_gpu_tests(timeout_s: float) -> dict:
    """``pytest -m gpu``: counts from its summary line (on a machine without CUDA every one is skipped)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rfE", "tests"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"pytest -m gpu did not end within {timeout_s:.0f} s"}
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", tail)}
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, flags=re.M)
    return {"ok": proc.returncode in (0, 5) and not failures, "returncode": proc.returncode,
            "passed": counts.get("passed", 0), "failed": counts.get("failed", 0),
            "errors": counts.get("error", 0) + counts.get("errors", 0), "skipped": counts.get("skipped", 0),
            "failures": failures, "summary": tail}


# --- 2. the scan's bandwidth ---------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def scan_bandwidth(shape: tuple[int, int, int], device: torch.device, repeats: int) -> dict:
    B, T, D = shape
    K = len(ALPHAS)
    peak, source = peak_gbps(torch.cuda.get_device_properties(device)) if device.type == "cuda" else (None, "CPU")
    out = {"shape": [B, T, D, K], "peak_GBps": peak, "peak_source": source}
    for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x = torch.randn(B, T, D, device=device, dtype=dtype)
        fwd, fwd_bwd = torch_steps(x)
        for part, fn, elements in (("fwd", fwd, 1 + K), ("fwdbwd", fwd_bwd, 2 * (1 + K))):
            def timed(fn=fn):  # kernels are asynchronous: wait for them inside the timed region
                fn()
                _sync(device)
            seconds = best_of(timed, repeats, warmup=1, min_time=0.2)
            gbps = x.numel() * x.element_size() * elements / seconds / 1e9
            out[f"{label}_{part}_ms"] = seconds * 1e3
            out[f"{label}_{part}_GBps"] = gbps
            out[f"{label}_{part}_bandwidth_fraction"] = None if peak is None else gbps / peak
        del x, fwd, fwd_bwd
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


# --- 3. training throughput ----------------------------------------------------------------------

def model_flops_per_token(runner: Runner, T: int) -> float:
    cfg = runner.model.cfg
    attention = 6 * cfg.n_layers * cfg.d_model * T if runner.name == "gpt" else 0
    return 6 * runner.params + attention


def train_throughput(size: str, T: int, tokens_per_step: int, device: torch.device, warmup: int, steps: int,
                     peak_tflops: float | None) -> dict:
    out = {}
    B = max(1, tokens_per_step // T)
    for model in ("spen", "gpt"):
        runner = Runner(model, size, T, B, str(device))
        for _ in range(warmup):
            runner.step()
        seconds = runner.block(steps)
        tokens_per_s = B * T / seconds
        flops = model_flops_per_token(runner, T)
        memory = cuda_step_memory(runner)["allocated_peak_MiB"] if device.type == "cuda" else None
        out[model] = {"params": runner.params, "batch": B, "seconds_per_step": seconds, "tokens_per_s": tokens_per_s,
                      "model_flops_per_token": flops,
                      "mfu": None if peak_tflops is None else tokens_per_s * flops / (peak_tflops * 1e12),
                      "peak_memory_MiB": memory, "hours_for_8b_tokens": PAPER_TOKENS / tokens_per_s / 3600}
        del runner
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def peak_bf16_tflops(device: torch.device) -> tuple[float | None, str]:
    if device.type != "cuda":
        return None, "CPU: no bf16 peak to compare with"
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops, f"table ({key}, dense bf16)"
    return None, f"unknown device {name!r}"


# --- the call ------------------------------------------------------------------------------------

def _part(report: dict, where: dict, name: str, fn, *args) -> None:
    """Run one part of the plan into ``where[name]``; its failure is recorded there and the plan goes on."""
    t0 = time.perf_counter()
    log(f"{name} …")
    try:
        where[name] = fn(*args)
    except Exception as exc:  # noqa: BLE001 - one part's failure must not cost the loan's other figures
        where[name] = {"error": f"{type(exc).__name__}: {exc}"}
    report["seconds_by_part"][name if where is report else f"train T={name}"] = time.perf_counter() - t0


def figures(report: dict) -> dict[str, float]:
    """The report's headline numbers, flat, for the store's benchmark table."""
    out: dict[str, float] = {}
    scan = report.get("scan") or {}
    for key in ("fwd", "fwdbwd"):
        if isinstance(scan.get(f"fp32_{key}_bandwidth_fraction"), float):
            out[f"gpu_{key}_bandwidth_fraction"] = scan[f"fp32_{key}_bandwidth_fraction"]
        if isinstance(scan.get(f"bf16_{key}_bandwidth_fraction"), float):
            out[f"gpu_{key}_bandwidth_fraction_bf16"] = scan[f"bf16_{key}_bandwidth_fraction"]
    for T, by_model in (report.get("train") or {}).items():
        if not isinstance(by_model, dict) or "error" in by_model:
            continue
        for model, fig in by_model.items():
            suffix = "" if T == str(report["plan"]["ts"][0]) else f"_T{T}"
            out[f"{model}_tokens_per_s{suffix}"] = fig["tokens_per_s"]
            out[f"{model}_hours_for_8b_tokens{suffix}"] = fig["hours_for_8b_tokens"]
            if fig["mfu"] is not None:
                out[f"{model}_mfu{suffix}"] = fig["mfu"]
            if fig["peak_memory_MiB"] is not None:
                out[f"{model}_peak_memory_MiB{suffix}"] = fig["peak_memory_MiB"]
    tests = report.get("tests") or {}
    for key in ("passed", "failed", "skipped"):
        if isinstance(tests.get(key), int):
            out[f"gpu_tests_{key}"] = float(tests[key])
    return out


def run(dry_run: bool) -> dict:
    t_start = time.perf_counter()
    plan = _plan(dry_run)
    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("bench.gpu: no CUDA device is visible; use --dry-run to check the plan on the CPU")
    device = torch.device(plan["device"])
    peak, peak_source = peak_bf16_tflops(device)
    report = {"dry_run": dry_run, "machine": machine_info(), "plan": {k: list(v) if isinstance(v, tuple) else v
                                                                       for k, v in plan.items()},
              "peak_bf16_TFLOPs": peak, "peak_bf16_source": peak_source, "seconds_by_part": {}}
    _part(report, report, "tests", run_gpu_tests, plan["test_timeout_s"])
    _part(report, report, "scan", scan_bandwidth, plan["scan_shape"], device, plan["scan_repeats"])
    report["train"] = {}
    for T in plan["ts"]:
        _part(report, report["train"], str(T), train_throughput, plan["size"], T, plan["tokens_per_step"], device,
              plan["warmup"], plan["steps"], peak)
    report["mixers"] = []  # no context mixer has a CUDA kernel yet
    report["figures"] = figures(report)
    report["seconds"] = time.perf_counter() - t_start
    report["within_budget"] = report["seconds"] <= BUDGET_S
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="the same plan at toy sizes on the CPU")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object (else a summary)")
    p.add_argument("--no-store", action="store_true", help="do not write the figures into the store")
    args = p.parse_args(argv)
    report = run(args.dry_run)
    if not args.no_store and report["figures"]:
        import store  # DuckDB and pandas (0.5 s): only once there is something to keep

        command = "python -m bench.gpu" + (" --dry-run" if args.dry_run else "")
        store.record_bench("gpu-dry-run" if args.dry_run else "gpu", report["figures"],
                           machine=report["machine"], command=command)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in sorted(report["figures"].items()):
            print(f"{key:<36} {value:.4g}")
        print(f"({report['seconds']:.0f} s; tests: {report['tests'].get('summary', report['tests'])})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
