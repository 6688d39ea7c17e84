"""Argument checks shared by every path, so that every path fails the same way.

Each check raises ``ValueError`` naming the argument and what is allowed.
They work on numpy arrays and torch tensors alike (duck-typed on ``shape``/``dtype``).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


def validate_alphas(alphas: Any) -> np.ndarray:
    """Return the rates as a float64 vector, or raise ValueError."""
    if hasattr(alphas, "detach"):  # a torch tensor: rates are fixed, never learned
        if alphas.requires_grad:
            raise ValueError("alphas must not require grad: EMA rates are fixed, never learned")
        alphas = alphas.detach().cpu().numpy()
    try:
        a = np.asarray(alphas, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"alphas must be a sequence of numbers in (0, 1], got {alphas!r}") from exc
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"alphas must be 1-D (K,), got shape {tuple(a.shape)}")
    if a.size == 0:
        raise ValueError("alphas must hold at least one rate")
    bad = [float(v) for v in a if not (0.0 < v <= 1.0)]  # also catches NaN
    if bad:
        raise ValueError(f"alphas must lie in (0, 1], got {bad}")
    return a


def _shape(name: str, arr: Any, want: Sequence[int | None], labels: str) -> None:
    shape = tuple(arr.shape)
    if len(shape) != len(want):
        raise ValueError(f"{name} must have rank {len(want)} {labels}, got shape {shape}")
    for got, exp in zip(shape, want):
        if exp is not None and got != exp:
            raise ValueError(f"{name} must have shape {labels} = {tuple(want)}, got {shape}")


def _is_float(arr: Any) -> bool:
    if hasattr(arr, "is_floating_point"):
        return bool(arr.is_floating_point())
    return np.issubdtype(np.asarray(arr).dtype, np.floating)


def _all_finite(arr: Any) -> bool:
    if hasattr(arr, "isfinite"):
        return bool(arr.isfinite().all())
    return bool(np.isfinite(arr).all())


def check_x(x: Any, *, finite: bool = True) -> tuple[int, int, int]:
    if not hasattr(x, "shape"):
        raise ValueError(f"x must be an array or tensor of shape (B, T, D), got {type(x).__name__}")
    _shape("x", x, (None, None, None), "(B, T, D)")
    if not _is_float(x):
        raise ValueError(f"x must be floating point, got dtype {x.dtype}")
    B, T, D = (int(s) for s in x.shape)
    if T == 0:
        raise ValueError("x must have at least one time step (T >= 1), got T = 0")
    if finite and not _all_finite(x):
        raise ValueError("x contains non-finite values (NaN or inf)")
    return B, T, D


def check_h0(h0: Any, B: int, K: int, D: int) -> None:
    if h0 is None:
        return
    if not hasattr(h0, "shape"):
        raise ValueError(f"h0 must be an array or tensor of shape (B, K, D), got {type(h0).__name__}")
    _shape("h0", h0, (B, K, D), "(B, K, D)")
    if not _is_float(h0):
        raise ValueError(f"h0 must be floating point, got dtype {h0.dtype}")
    if not _all_finite(h0):
        raise ValueError("h0 contains non-finite values (NaN or inf)")


def check_reset(reset: Any, B: int, T: int) -> None:
    if reset is None:
        return
    if not hasattr(reset, "shape"):
        raise ValueError(f"reset must be a boolean array or tensor of shape (B, T), got {type(reset).__name__}")
    _shape("reset", reset, (B, T), "(B, T)")
    kind = str(reset.dtype)
    if "bool" not in kind:
        raise ValueError(f"reset must be boolean (True where a segment starts), got dtype {kind}")


def half_life(alpha: float) -> float:
    """Steps after which a token's weight in the trace has halved (0 for α = 1)."""
    return 0.0 if alpha >= 1.0 else math.log(0.5) / math.log1p(-alpha)
