"""One entry point that validates once and picks the path."""
from __future__ import annotations

from typing import Any

import numpy as np

from ema_core.scan.reference import ema_scan_reference
from ema_core.scan.validate import check_h0, check_reset, check_x, validate_alphas

BACKENDS = ("reference", "numba", "torch")


class ScanResult(tuple):
    """``(traces, h_last)``, unpackable as a pair, with ``.backend`` naming the path that ran."""

    def __new__(cls, traces, h_last, backend: str):
        self = super().__new__(cls, (traces, h_last))
        self.backend = backend
        return self

    @property
    def traces(self):
        return self[0]

    @property
    def h_last(self):
        return self[1]


def _is_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "device")


def select_backend(x: Any, backend: str = "auto") -> str:
    """The path :func:`ema_scan` runs for ``x``: numpy arrays → numba, tensors → torch (on their device)."""
    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"backend must be one of {('auto', *BACKENDS)}, got {backend!r}")
    if backend != "auto":
        if backend == "numba" and _is_tensor(x) and x.device.type != "cpu":
            raise ValueError(f"backend 'numba' runs on the CPU; x is on {x.device}")
        return backend
    return "torch" if _is_tensor(x) else "numba"


def ema_scan(x, alphas, h0=None, reset=None, *, backend: str = "auto", validate: bool = True, chunk: int | None = None, out=None):
    """Multi-rate EMA traces (contract in :mod:`ema_core.scan`). Returns a :class:`ScanResult`.

    ``validate=False`` skips the full-array finiteness check of ``x`` (shapes and rates are
    always checked); the numba path checks finiteness for free inside the kernel anyway.
    ``out`` reuses a (B, T, K, D) buffer on the numba path; ``chunk`` sets the torch chunk length.
    """
    name = select_backend(x, backend)
    if out is not None and name != "numba":
        raise ValueError(f"out is supported on the numba path only, not {name!r}")
    a = validate_alphas(alphas)
    if name == "torch":
        # torch (1.2 s to import) only for the torch path: numpy callers (the Dilution page, the
        # numba figures of bench scan) never load it.
        import torch  # 1.2 s: only the torch path loads it

        from ema_core.scan.torch_scan import DEFAULT_CHUNK, ema_scan_torch  # torch: only the torch path

        if not _is_tensor(x):
            x = torch.as_tensor(np.asarray(x))
            h0 = None if h0 is None else torch.as_tensor(np.asarray(h0))
            reset = None if reset is None else torch.as_tensor(np.asarray(reset))
    if name in ("numba", "reference") and _is_tensor(x):
        if x.requires_grad:
            raise ValueError(f"x requires grad; the {name} path is not differentiable, use backend='torch'")
        x = x.detach().cpu().numpy()
        h0 = None if h0 is None else h0.detach().cpu().numpy()
        reset = None if reset is None else reset.detach().cpu().numpy()
    if name != "torch":
        x = np.asarray(x)
    # The numba kernel checks finiteness while it reads x; elsewhere it is one extra pass.
    B, T, D = check_x(x, finite=validate and name == "torch")
    check_h0(h0, B, a.size, D)
    check_reset(reset, B, T)
    if name == "reference":
        traces, h_last = ema_scan_reference(x, a, h0, reset)
    elif name == "numba":
        # numba (0.2 s to import, more to load the compiled kernels) only for the numba path: the
        # language models' torch path never loads it.
        from ema_core.scan.numba_cpu import ema_scan_numba  # numba: only the numba path

        if x.dtype not in (np.float32, np.float64):
            raise ValueError(f"x must be float32 or float64 on the CPU path, got dtype {x.dtype}")
        traces, h_last = ema_scan_numba(x, a, h0, reset, out=out)
    else:
        traces, h_last = ema_scan_torch(x, a, h0, reset, chunk=chunk or DEFAULT_CHUNK)
    return ScanResult(traces, h_last, name)
