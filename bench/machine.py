"""The machine a benchmark ran on, recorded beside its figures (the same fields in every benchmark)."""
from __future__ import annotations

import os
import platform

import numpy as np
import torch


def machine_info(**extra) -> dict:
    """CPU, cores, memory, Python, torch and its threads, the GPU if any, the load before the run; plus ``extra``."""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                   platform.processor())
        mem = next((int(ln.split()[1]) / 2**20 for ln in open("/proc/meminfo") if ln.startswith("MemTotal")), None)
    except OSError:  # not Linux
        cpu, mem = platform.processor(), None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_GiB": None if mem is None else round(mem, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        # 1-minute load before the run; above the core count, other work shared the CPUs.
        "loadavg_start": round(os.getloadavg()[0], 2),
        **extra,
    }
