"""Training throughput and step memory of SPEN against its parameter-matched GPT, across context lengths.

    python -m bench.lm [--quick] [--json] [--size tiny] [--threads N]
                       [--ts 256,1024,4096] [--tokens-per-step 4096] [--gpt-match per-t|fixed]

What is timed is one full training step as :func:`ema_core.lm.train.train_lm` takes it: draw the
batch (``batch_at``), forward, cross-entropy, backward, gradient clipping, AdamW step (bf16 autocast
on CUDA; deterministic algorithms on, as the ``lm`` experiment runs).  The tokens per step are held
equal across T (B = tokens / T), so tokens/s compare directly.  SPEN uses the linear predictor; the
GPT is the one the ``lm`` experiment trains at that T: matched to SPEN's parameter count with its
positional table of T rows (``build_model(ModelChoice(model="gpt", size=size), seq_len=T)``), so its d_ff shrinks as T
grows (both are reported).  ``--gpt-match fixed`` instead times one GPT, matched with a table of
max(ts) rows, at every T: the same architecture throughout, so that only the attention's cost
changes with T.

Noise: the two models run in the same process, alternately — warm-up steps for both, then rounds
of one timed block each, the order flipped every round (SPEN, GPT, GPT, SPEN, ...) — so that the
neighbours' load falls on both.  A block is enough steps to last about a second; each model's
figure is the median over rounds of the seconds per step.  The ratio SPEN ÷ GPT is the quotient of
the two medians; the per-round ratios (one block of each, back to back) give its spread and their
median, and the ratio of each model's best step is reported beside it (``bench.scan``'s estimate:
what the code costs when the neighbours are quietest).

Memory, on CPU: one fresh subprocess per (model, T) builds the model and optimiser, takes one
warm-up step (which allocates AdamW's state), frees the gradients, then resets the kernel's
peak-RSS mark (``/proc/self/clear_refs``), notes the RSS and takes the measured steps.  The figure
is the peak RSS above that baseline: what a step needs beyond weights and optimiser state
(activations, gradients, temporaries), counted in resident pages.  glibc is told to return freed
blocks to the kernel (``MALLOC_ENV``), so that memory the warm-up step freed is not counted as
baseline, and RSS follows the live tensors; a training process with glibc's defaults holds more.  On
CUDA the same quantity comes from ``torch.cuda.max_memory_allocated`` (allocated bytes, not the
caching allocator's reserve), measured in the benchmark process.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from bench.machine import machine_info as _machine_info
from bench.report import show
from ema_core.lm.sizes import MODELS, ModelChoice, build_model, get_size
from ema_core.lm.train import TrainConfig, autocast, batch_at, build_optimizer

TARGET_T1024 = 1.3  # SPEN ÷ GPT tokens/s at T = 1024
PARAM_TOL = 0.05  # the GPT's parameter count within ±5 % of the SPEN's
MiB = 2**20
# For the memory processes: glibc hands every block of 64 KiB or more straight back to the kernel
# when freed, and trims its heap.  With its defaults, what the warm-up step freed stays resident,
# lands in the baseline and hides part of the next step's peak (measured: 318 instead of 364 MiB
# for SPEN at T = 1024 at the tiny size).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def machine_info() -> dict:
    return _machine_info()


# ---------------------------------------------------------------------------------------------
# One training step


class Runner:
    """A model, its optimiser and a token stream; ``step()`` is one training step as train_lm takes it."""

    def __init__(self, model: str, size: str, T: int, B: int, device: str, seed: int = 0,
                 gpt_seq_len: int | None = None):
        self.name, self.T, self.B = model, T, B
        self.device = torch.device(device)
        self.cfg = TrainConfig(batch=B, seq_len=T, warmup=0)
        # The GPT's positional table has gpt_seq_len rows (default T): its size is part of the match.
        self.model = build_model(ModelChoice(model=model, size=size), seq_len=gpt_seq_len or T, seed=seed).to(self.device)
        self.model.train()
        self.params = sum(p.numel() for p in self.model.parameters())
        self.d_ff = self.model.cfg.d_ff
        self.opt = build_optimizer(self.model, self.cfg)
        vocab = get_size(size).shape.vocab_size
        g = torch.Generator().manual_seed(seed)
        # Uniform random tokens: the cost of a step does not depend on what the tokens say.
        self.train = torch.randint(0, vocab, (max(1 << 16, 4 * B * (T + 1)),), generator=g)
        self.seed, self.i = seed, 0

    def step(self) -> None:
        x, y = batch_at(self.train, self.i, self.cfg, self.seed)
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with autocast(self.device):
            logits = self.model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.i += 1

    def block(self, n: int) -> float:
        """Seconds per step over n consecutive steps."""
        t0 = time.perf_counter()
        for _ in range(n):
            self.step()
        return (time.perf_counter() - t0) / n


# ---------------------------------------------------------------------------------------------
# Timing


def time_pair(runners: dict, warmup: int, rounds: int, block_s: float) -> dict:
    """Interleaved timing of the runners: {name: seconds per step of each round}, and steps per block."""
    names = list(runners)
    first = {name: math.inf for name in names}
    for _ in range(warmup):
        for name in names:
            first[name] = min(first[name], runners[name].block(1))
    # Enough steps per block to last about block_s, from the best warm-up step.
    n = {name: max(1, min(100, math.ceil(block_s / first[name]))) for name in names}
    per_round = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            per_round[name].append(runners[name].block(n[name]))
    return {"seconds_per_step": per_round, "steps_per_block": n}


def bench_t(size: str, T: int, B: int, device: str, warmup: int, rounds: int, block_s: float,
            gpt_seq_len: int | None = None) -> dict:
    runners = {m: Runner(m, size, T, B, device, gpt_seq_len=gpt_seq_len) for m in MODELS}
    res = time_pair(runners, warmup, rounds, block_s)
    out = {"T": T, "B": B, "tokens_per_step": B * T}
    for m in MODELS:
        s = res["seconds_per_step"][m]
        med = statistics.median(s)
        out[m] = {
            "params": runners[m].params,
            "d_ff": runners[m].d_ff,
            "step_ms_median": med * 1e3,
            "step_ms_min": min(s) * 1e3,
            "step_ms_rounds": [v * 1e3 for v in s],
            "steps_per_block": res["steps_per_block"][m],
            "tokens_per_s": B * T / med,
        }
    out["spen_over_gpt"] = out["spen"]["tokens_per_s"] / out["gpt"]["tokens_per_s"]
    paired = [g / s for s, g in zip(res["seconds_per_step"]["spen"], res["seconds_per_step"]["gpt"])]
    out["spen_over_gpt_rounds"] = {"median": statistics.median(paired), "min": min(paired), "max": max(paired),
                                   "values": paired}
    # From each model's best step: what the code costs when the neighbours were quietest.
    out["spen_over_gpt_best"] = out["gpt"]["step_ms_min"] / out["spen"]["step_ms_min"]
    out["params_gpt_over_spen"] = out["gpt"]["params"] / out["spen"]["params"]
    if device == "cuda":
        for m in MODELS:
            out[m].update(cuda_step_memory(runners[m]))
    del runners
    return out


# ---------------------------------------------------------------------------------------------
# Memory


def _status_kib(field: str) -> int:
    for ln in open("/proc/self/status"):
        if ln.startswith(field + ":"):
            return int(ln.split()[1])
    raise KeyError(field)


def memory_child(spec: str) -> None:
    """In a fresh process: the peak RSS of training steps above weights + optimiser state (one JSON line)."""
    model, size, T, B, threads, steps, *gpt_seq_len = spec.split(":")
    torch.set_num_threads(int(threads))
    torch.use_deterministic_algorithms(True, warn_only=True)
    r = Runner(model, size, int(T), int(B), "cpu", gpt_seq_len=int(gpt_seq_len[0]) if gpt_seq_len else None)
    r.step()  # allocates AdamW's state; the thread pool and allocator are warm
    r.opt.zero_grad(set_to_none=True)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
        method = "VmHWM after clear_refs"
    except OSError:
        method = "VmHWM since start (not reset: an upper bound)"
    base = _status_kib("VmRSS")
    for _ in range(int(steps)):
        r.step()
    peak = _status_kib("VmHWM")
    malloc = {k: os.environ[k] for k in MALLOC_ENV if k in os.environ}
    print(json.dumps({"step_peak_MiB": (peak - base) / 1024, "rss_base_MiB": base / 1024,
                      "rss_peak_MiB": peak / 1024, "method": method, "malloc_env": malloc, "params": r.params}))


def cpu_step_memory(model: str, size: str, T: int, B: int, threads: int, steps: int,
                    gpt_seq_len: int | None = None) -> dict:
    spec = f"{model}:{size}:{T}:{B}:{threads}:{steps}" + (f":{gpt_seq_len}" if gpt_seq_len else "")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "bench.lm", "--memory-child", spec],
                          cwd=root, env={**os.environ, **MALLOC_ENV}, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"memory measurement {spec} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cuda_step_memory(r: Runner) -> dict:
    r.opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    r.step()
    peak = torch.cuda.max_memory_allocated()
    return {"step_peak_MiB": (peak - base) / MiB, "allocated_base_MiB": base / MiB, "allocated_peak_MiB": peak / MiB,
            "memory_method": "torch.cuda.max_memory_allocated above memory_allocated"}


# ---------------------------------------------------------------------------------------------
# A section (CPU or CUDA)


def bench_section(size: str, ts: list[int], tokens: int, device: str, threads: int, quick: bool,
                  gpt_match: str = "per-t") -> dict:
    bad = [T for T in ts if tokens % T]
    if bad:
        raise SystemExit(f"{tokens} tokens per step ({device}) is not a multiple of T = {bad}")
    warmup, rounds, block_s, mem_steps = (1, 3, 0.3, 1) if quick else (2, 7, 1.0, 2)
    # per-t: the GPT the lm experiment trains at each T; fixed: one GPT (table of max(ts) rows) for all T.
    gpt_seq_len = max(ts) if gpt_match == "fixed" else None
    sec = {"device": device, "tokens_per_step": tokens, "ts": ts, "gpt_match": gpt_match,
           "protocol": {"warmup_steps": warmup, "rounds": rounds, "block_seconds": block_s,
                        "memory_steps": mem_steps}}
    by_t = {}
    for T in ts:
        B = tokens // T
        log(f"  {device} T={T} B={B}: timing SPEN and GPT, interleaved")
        r = bench_t(size, T, B, device, warmup, rounds, block_s, gpt_seq_len)
        if device == "cpu":
            for m in MODELS:
                log(f"  {device} T={T} B={B}: step memory of {m} (fresh process)")
                mem = cpu_step_memory(m, size, T, B, threads, mem_steps, gpt_seq_len)
                r[m].update(step_peak_MiB=mem["step_peak_MiB"], rss_base_MiB=mem["rss_base_MiB"],
                            rss_peak_MiB=mem["rss_peak_MiB"], memory_method=mem["method"],
                            malloc_env=mem["malloc_env"])
        by_t[str(T)] = r
    sec["by_t"] = by_t
    for T in ts:
        sec[f"spen_over_gpt_t{T}"] = by_t[str(T)]["spen_over_gpt"]
    sec["spen_over_gpt_best"] = {str(T): by_t[str(T)]["spen_over_gpt_best"] for T in ts}
    sec["spen_over_gpt_rounds_median"] = {str(T): by_t[str(T)]["spen_over_gpt_rounds"]["median"] for T in ts}
    sec["tokens_per_s"] = {m: {str(T): by_t[str(T)][m]["tokens_per_s"] for T in ts} for m in MODELS}
    sec["step_peak_MiB"] = {m: {str(T): by_t[str(T)][m]["step_peak_MiB"] for T in ts} for m in MODELS}
    sec["params"] = {m: {str(T): by_t[str(T)][m]["params"] for T in ts} for m in MODELS}
    sec["gpt_d_ff"] = {str(T): by_t[str(T)]["gpt"]["d_ff"] for T in ts}
    sec["params_max_deviation"] = max(abs(by_t[str(T)]["params_gpt_over_spen"] - 1) for T in ts)
    sec["params_within_5pct"] = sec["params_max_deviation"] <= PARAM_TOL
    ratios = [sec[f"spen_over_gpt_t{T}"] for T in ts]
    sec["ratio_grows_with_t"] = all(b > a for a, b in zip(ratios, ratios[1:]))
    sec["target_t1024"] = TARGET_T1024
    measured = "spen_over_gpt_t1024" in sec
    sec["pass_t1024"] = bool(sec["spen_over_gpt_t1024"] >= TARGET_T1024) if measured else None
    sec["targets"] = {"spen_over_gpt_t1024": {"value": sec["spen_over_gpt_t1024"], "target": f">= {TARGET_T1024:g}",
                                              "pass": sec["pass_t1024"]}} if measured else {}
    return sec


def run(size: str, ts: list[int], tokens: int, threads: int | None, quick: bool,
        gpu_tokens: int | None, gpt_match: str = "per-t") -> dict:
    t_start = time.perf_counter()
    machine = machine_info()
    if threads:
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    # As the lm experiment trains (bit-identical resume on CPU; warn-only for CUDA kernels).
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        log(f"SPEN (linear predictor) vs matched GPT, size {size}, {tokens} tokens per step, {threads} threads")
        report = {"machine": machine, "quick": quick, "size": size, "threads": threads,
                  "threads_is_default": threads == machine["torch_threads"],
                  "predictor": "linear", "deterministic_algorithms": True}
        report.update(bench_section(size, ts, tokens, "cpu", threads, quick, gpt_match))
        report["gpu"] = None
        if torch.cuda.is_available():
            gt = gpu_tokens or 16 * tokens
            report["gpu"] = {"name": torch.cuda.get_device_name(0), "autocast": "bfloat16",
                             **bench_section(size, ts, gt, "cuda", threads, quick, gpt_match)}
    finally:
        torch.use_deterministic_algorithms(deterministic)
    report["machine"]["loadavg_end"] = round(os.getloadavg()[0], 2)
    report["seconds"] = time.perf_counter() - t_start
    if not report["params_within_5pct"]:
        # Asserted after the report is complete, so that the figures are still printed.
        report["error"] = f"GPT parameters differ from SPEN's by {report['params_max_deviation']:.1%} (> 5 %)"
    return report


# ---------------------------------------------------------------------------------------------
# Output


def print_section(sec: dict, title: str) -> None:
    print(f"\n{title}: {sec['tokens_per_step']} tokens per step (B·T), median over "
          f"{sec['protocol']['rounds']} interleaved rounds; GPT matched {sec['gpt_match']}")
    print(f"  {'T':>5} {'B':>4} {'model':<5} {'params':>10} {'d_ff':>5} {'ms/step':>9} {'tokens/s':>10} "
          f"{'step MiB':>9}   SPEN/GPT (rounds)")
    for T in sec["ts"]:
        r = sec["by_t"][str(T)]
        for m in MODELS:
            x = r[m]
            tail = ""
            if m == "spen":
                rr = r["spen_over_gpt_rounds"]
                tail = (f"   {r['spen_over_gpt']:.2f} ({rr['min']:.2f}–{rr['max']:.2f}; "
                        f"paired median {rr['median']:.2f}, best steps {r['spen_over_gpt_best']:.2f})")
            print(f"  {T:>5} {r['B']:>4} {m:<5} {x['params']:>10,} {x['d_ff']:>5} {x['step_ms_median']:>9.1f} "
                  f"{x['tokens_per_s']:>10.0f} {x['step_peak_MiB']:>9.1f}{tail}")
    print(f"  params: GPT within {sec['params_max_deviation']:.2%} of SPEN "
          f"({'OK' if sec['params_within_5pct'] else 'NOT within 5 %'}); "
          f"ratio grows with T: {'yes' if sec['ratio_grows_with_t'] else 'no'}")
    for key, t in sec["targets"].items():
        print(f"  {key:<22} {t['value']:8.3f}  {t['target']:<7} {'PASS' if t['pass'] else 'FAIL'}")


def print_table(r: dict) -> None:
    m = r["machine"]
    print(f"LM training throughput{' (quick)' if r['quick'] else ''}, size {r['size']}: {m['cpu']}, "
          f"{m['cores']} cores, torch {m['torch']} ({r['threads']} threads"
          f"{', the default' if r['threads_is_default'] else ''})")
    print(f"load average {m['loadavg_start']} -> {m['loadavg_end']}; step = batch, forward, cross-entropy, "
          "backward, clip, AdamW; step MiB = peak above weights + optimiser state")
    print_section(r, "CPU")
    if r["gpu"]:
        print_section(r["gpu"], f"GPU {r['gpu']['name']} (bf16 autocast)")
    print(f"\n({r['seconds']:.0f} s)")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lm", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds, shorter blocks, one memory step")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--size", default="tiny", help="model size (ema_core.lm.sizes)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--ts", type=_ints, default=[256, 1024, 4096], help="context lengths, comma-separated")
    p.add_argument("--tokens-per-step", type=int, default=4096, help="B·T, the same for every T")
    p.add_argument("--gpu-tokens-per-step", type=int, default=None, help="B·T on CUDA (default: 16 × the CPU's)")
    p.add_argument("--gpt-match", choices=("per-t", "fixed"), default="per-t",
                   help="per-t: the GPT matched with a positional table of T rows (as the lm experiment trains it); "
                        "fixed: one GPT, matched with max(ts) rows, at every T")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)  # internal: one memory measurement
    args = p.parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child)
        return 0
    report = run(args.size, args.ts, args.tokens_per_step, args.threads, args.quick, args.gpu_tokens_per_step,
                 args.gpt_match)
    show(report, args.json, print_table, indent=2)
    if "error" in report:
        log(report["error"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
