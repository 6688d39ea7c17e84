"""Multi-rate EMA traces: one contract, several paths.

The contract (every path, every caller)::

    traces, h_last = ema_scan(x, alphas, h0=None, reset=None)

    x       (B, T, D)   inputs; float32 or float64 (torch on GPU also bf16/fp16)
    alphas  (K,)        fixed rates, each in (0, 1]
    h0      (B, K, D)   state before step 0; zeros when omitted
    reset   (B, T)      bool; True at t means "a new segment starts at t": the state
                        carried into step t is dropped, so h_t = α·x_t
    traces  (B, T, K, D)  h_t for every rate:  h_t = (1 − α)·h_{t−1} + α·x_t
    h_last  (B, K, D)   the state after the last step (= traces[:, -1]), ready to be
                        passed as h0 to the next chunk of the same streams

Traces have x's dtype. Arithmetic runs in float64 for float64 inputs and in
float32 otherwise; h_last for half-precision inputs stays in float32 so that a
chained run does not lose precision at the seams.

Paths: ``reference`` (numpy loop in float64, the ground truth), ``numba``
(CPU, the K rates fused in one pass), ``torch`` (chunked, analytic backward;
CPU and CUDA).  :func:`ema_scan` picks one from the type and device of ``x``
and the result says which ran (``result.backend``).
"""
from ema_core.scan.dispatch import BACKENDS, ScanResult, ema_scan, select_backend
from ema_core.scan.reference import ema_scan_reference
from ema_core.scan.validate import validate_alphas

__all__ = [
    "BACKENDS",
    "ScanResult",
    "ema_scan",
    "ema_scan_reference",
    "select_backend",
    "validate_alphas",
]
