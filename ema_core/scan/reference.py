"""The ground truth: a plain loop over time in float64. Slow on purpose; never optimise it."""
from __future__ import annotations

import numpy as np

from ema_core.scan.validate import check_h0, check_reset, check_x, validate_alphas


def ema_scan_reference(x, alphas, h0=None, reset=None):
    """Contract of :mod:`ema_core.scan`; always computes and returns float64 numpy arrays."""
    a = validate_alphas(alphas)
    x = np.asarray(x)
    B, T, D = check_x(x)
    K = a.size
    check_h0(h0, B, K, D)
    check_reset(reset, B, T)
    x = x.astype(np.float64)
    h = np.zeros((B, K, D)) if h0 is None else np.array(h0, dtype=np.float64)
    out = np.empty((B, T, K, D))
    for t in range(T):
        if reset is not None:
            h[np.asarray(reset)[:, t]] = 0.0  # the segment starting at t sees nothing before it
        for k in range(K):
            h[:, k] = (1.0 - a[k]) * h[:, k] + a[k] * x[:, t]
        out[:, t] = h
    return out, h.copy()
