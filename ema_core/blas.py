"""One knob for the BLAS thread pool of numpy/scipy/scikit-learn.

The linear algebra here is small (decoders and probes over a few hundred features): a second BLAS
thread costs more in hand-offs than it returns, and on a shared 2-core machine it fights the other
jobs, numba and torch for the cores.  Measured: the dilution decoder's median 120 ms with 2 BLAS
threads against 70 ms with 1; the structure experiment's ridge probes about 6x slower on a loaded
machine with 2.
"""
from __future__ import annotations

from threadpoolctl import ThreadpoolController

_CONTROLLER: ThreadpoolController | None = None


def blas_limit(n: int = 1):
    """A context manager that holds the BLAS pools at ``n`` threads inside its block."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()  # inspecting the loaded libraries once is the slow part
    return _CONTROLLER.limit(limits=n, user_api="blas")
