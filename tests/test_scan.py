"""The chain of trust for the EMA kernels: outside oracles ↔ reference ↔ numba ↔ torch (↔ CUDA)."""
import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import lfilter

from ema_core.scan import ema_scan, ema_scan_reference, select_backend
from ema_core.scan.torch_scan import ema_scan_torch

RATES = [0.5, 0.1, 0.02]
SHAPES = [(1, 1, 1), (2, 1, 60), (3, 63, 1), (2, 63, 60), (1, 1000, 1), (2, 1000, 60)]


def _inputs(rng, B, T, D, K=3, dtype=np.float64, resets=0.0):
    x = rng.standard_normal((B, T, D)).astype(dtype)
    h0 = rng.standard_normal((B, K, D)).astype(dtype)
    reset = rng.random((B, T)) < resets if resets else None
    return x, h0, reset


def _torch(*arrays):
    return [None if a is None else torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


# --- the reference against outside oracles ------------------------------------------------


@pytest.mark.parametrize("alpha", [1e-6, 0.02, 0.1, 0.5, 0.999999, 1.0])
def test_reference_matches_lfilter(rng, alpha):
    # lfilter([α], [1, α − 1]) with zero initial conditions is the recursion from h_{−1} = 0.
    x = rng.standard_normal((2, 500, 3))
    traces, h_last = ema_scan_reference(x, [alpha])
    expect = lfilter([alpha], [1.0, alpha - 1.0], x, axis=1)
    np.testing.assert_allclose(traces[:, :, 0], expect, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(h_last[:, 0], expect[:, -1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("alpha", [0.02, 0.5, 1.0])
def test_reference_matches_pandas_ewm(rng, alpha):
    # pandas ewm(adjust=False) starts from y_0 = x_0, i.e. our recursion with h0 = x_0.
    x = rng.standard_normal((1, 400, 4))
    traces, _ = ema_scan_reference(x, [alpha], h0=x[:, :1, :])
    expect = pd.DataFrame(x[0]).ewm(alpha=alpha, adjust=False).mean().to_numpy()
    np.testing.assert_allclose(traces[0, :, 0], expect, rtol=1e-12, atol=1e-14)


def test_reference_reset_restarts_the_trace(rng):
    x = rng.standard_normal((1, 20, 2))
    reset = np.zeros((1, 20), bool)
    reset[0, 7] = True
    traces, _ = ema_scan_reference(x, [0.3], h0=np.ones((1, 1, 2)), reset=reset)
    fresh, _ = ema_scan_reference(x[:, 7:], [0.3])
    np.testing.assert_allclose(traces[:, 7:], fresh, rtol=1e-15)
    np.testing.assert_allclose(traces[0, 7, 0], 0.3 * x[0, 7])


# --- reference ↔ numba ↔ torch ----------------------------------------------------------------


def _check_paths(x, alphas, h0, reset, rtol, atol, chunks=(4, 32)):
    ref, ref_last = ema_scan_reference(x, alphas, h0, reset)
    nb = ema_scan(x, alphas, h0, reset)
    assert nb.backend == "numba"
    assert nb.traces.dtype == x.dtype
    np.testing.assert_allclose(nb.traces, ref, rtol=rtol, atol=atol)
    np.testing.assert_allclose(nb.h_last, ref_last, rtol=rtol, atol=atol)
    tx, th0, tr = _torch(x, h0, reset)
    for chunk in chunks:
        tt = ema_scan(tx, alphas, th0, tr, chunk=chunk)
        assert tt.backend == "torch"
        assert tt.traces.dtype == tx.dtype
        np.testing.assert_allclose(tt.traces.numpy(), ref, rtol=rtol, atol=atol)
        np.testing.assert_allclose(tt.h_last.numpy(), ref_last, rtol=rtol, atol=atol)
        # numba and torch against each other too: the chain's middle link
        np.testing.assert_allclose(tt.traces.numpy(), nb.traces, rtol=rtol, atol=atol)


@pytest.mark.parametrize("B,T,D", SHAPES)
@pytest.mark.parametrize("with_state", [False, True])
def test_paths_agree_float64(rng, B, T, D, with_state):
    x, h0, _ = _inputs(rng, B, T, D)
    _check_paths(x, RATES, h0 if with_state else None, None, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("B,T,D", SHAPES)
def test_paths_agree_float32(rng, B, T, D):
    x, h0, _ = _inputs(rng, B, T, D, dtype=np.float32)
    # float32 accumulation over 1000 steps: relative error of a few ulps of the trace scale
    _check_paths(x, RATES, h0, None, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("B,T,D", [(2, 63, 5), (3, 1000, 60), (1, 1, 1)])
@pytest.mark.parametrize("density", [0.02, 0.3, 1.0])
def test_paths_agree_with_resets(rng, B, T, D, density):
    x, h0, reset = _inputs(rng, B, T, D, resets=density)
    reset[:, 0] = True  # a reset on the first step drops h0 as well
    _check_paths(x, RATES, h0, reset, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("alphas", [[1e-7], [1e-4, 0.9999999], [1.0], [1.0, 0.5], [0.999, 0.001, 0.25, 0.75]])
def test_extreme_rates(rng, alphas):
    x, h0, reset = _inputs(rng, 2, 300, 7, K=len(alphas), resets=0.05)
    _check_paths(x, alphas, h0, reset, rtol=1e-10, atol=1e-12)


def test_alpha_one_copies_the_input(rng):
    x = rng.standard_normal((2, 50, 3))
    for backend in ("numba", "torch"):
        xs = torch.from_numpy(x) if backend == "torch" else x
        traces, h_last = ema_scan(xs, [1.0], h0=np.ones((2, 1, 3)) if backend == "numba" else torch.ones(2, 1, 3, dtype=torch.float64))
        np.testing.assert_array_equal(np.asarray(traces)[:, :, 0], x)


@pytest.mark.parametrize("backend", ["reference", "numba", "torch"])
@pytest.mark.parametrize("split", [1, 17, 62])
def test_chaining_equals_one_run(rng, backend, split):
    x, h0, reset = _inputs(rng, 2, 63, 5, resets=0.1)
    conv = (lambda a: None if a is None else torch.from_numpy(a)) if backend == "torch" else (lambda a: a)
    whole, last = ema_scan(conv(x), RATES, conv(h0), conv(reset), backend=backend)
    a, mid = ema_scan(conv(x[:, :split]), RATES, conv(h0), conv(reset[:, :split]), backend=backend)
    b, end = ema_scan(conv(x[:, split:]), RATES, mid, conv(reset[:, split:]), backend=backend)
    np.testing.assert_allclose(np.concatenate([np.asarray(a), np.asarray(b)], axis=1), np.asarray(whole), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(end), np.asarray(last), rtol=1e-12, atol=1e-14)


@given(
    B=st.integers(1, 3),
    T=st.integers(1, 130),
    D=st.integers(1, 9),
    alphas=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=4),
    density=st.sampled_from([0.0, 0.05, 0.5]),
    chunk=st.sampled_from([2, 3, 5, 16, 64]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=60, deadline=None)
def test_property_paths_agree(B, T, D, alphas, density, chunk, seed):
    rng = np.random.default_rng(seed)
    x, h0, reset = _inputs(rng, B, T, D, K=len(alphas), resets=density)
    _check_paths(x, alphas, h0, reset, rtol=1e-10, atol=1e-12, chunks=(chunk,))


def test_numba_reuses_an_output_buffer(rng):
    x, h0, _ = _inputs(rng, 2, 100, 8, dtype=np.float32)
    out = np.full((2, 100, 3, 8), np.nan, np.float32)
    res = ema_scan(x, RATES, h0, out=out)
    assert res.traces is out
    np.testing.assert_allclose(out, ema_scan_reference(x, RATES, h0)[0], rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError, match="out"):
        ema_scan(x, RATES, out=np.empty((2, 100, 3, 7), np.float32))


# --- gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("T,chunk", [(1, 4), (37, 4), (37, 8), (37, 64), (130, 3)])
@pytest.mark.parametrize("with_reset", [False, True])
def test_gradcheck(T, chunk, with_reset):
    g = torch.Generator().manual_seed(T * 10 + chunk)
    B, D = (1, 2) if T > 100 else (2, 3)  # gradcheck builds the full Jacobian: keep it small
    x = torch.randn(B, T, D, dtype=torch.float64, generator=g, requires_grad=True)
    h0 = torch.randn(B, 4, D, dtype=torch.float64, generator=g, requires_grad=True)
    reset = (torch.rand(B, T, generator=g) < 0.15) if with_reset else None
    alphas = [0.5, 0.1, 0.02, 1.0]
    assert torch.autograd.gradcheck(lambda x, h0: ema_scan_torch(x, alphas, h0, reset, chunk=chunk), (x, h0))


def _loop_in_torch(x, alphas, h0, reset):
    """The recursion written step by step in torch: autograd through it is a second gradient oracle."""
    a = torch.as_tensor(alphas, dtype=x.dtype)[:, None]
    h = h0
    outs = []
    for t in range(x.shape[1]):
        if reset is not None:
            h = h * (~reset[:, t]).to(x.dtype)[:, None, None]
        h = (1 - a) * h + a * x[:, t, None]
        outs.append(h)
    return torch.stack(outs, 1), h


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-11), (torch.float32, 2e-5)])
def test_gradients_match_autograd_through_the_loop(dtype, tol):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 200, 6, dtype=dtype, generator=g)
    h0 = torch.randn(3, 3, 6, dtype=dtype, generator=g)
    reset = torch.rand(3, 200, generator=g) < 0.05
    w = torch.randn(3, 200, 3, 6, dtype=dtype, generator=g)
    wl = torch.randn(3, 3, 6, dtype=dtype, generator=g)
    grads = []
    for fn in (lambda x, h: ema_scan_torch(x, RATES, h, reset, chunk=16), lambda x, h: _loop_in_torch(x, RATES, h, reset)):
        xx, hh = x.clone().requires_grad_(), h0.clone().requires_grad_()
        traces, last = fn(xx, hh)
        ((traces * w).sum() + (last * wl).sum()).backward()
        grads.append((xx.grad, hh.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("with_reset", [False, True])
def test_broadcast_gradients_match_the_loop(with_reset):
    # y.sum() hands the backward a stride-0 gradient (a separate code path from dense ones)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 150, 4, dtype=torch.float64, generator=g)
    h0 = torch.randn(2, 3, 4, dtype=torch.float64, generator=g)
    reset = (torch.rand(2, 150, generator=g) < 0.05) if with_reset else None
    grads = []
    for fn in (lambda x, h: ema_scan_torch(x, RATES, h, reset, chunk=8), lambda x, h: _loop_in_torch(x, RATES, h, reset)):
        xx, hh = x.clone().requires_grad_(), h0.clone().requires_grad_()
        traces, last = fn(xx, hh)
        (traces.sum() + 3 * last.sum()).backward()
        grads.append((xx.grad, hh.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


def test_gradient_flows_only_to_what_requires_it():
    x = torch.randn(1, 10, 2, requires_grad=True)
    h0 = torch.randn(1, 3, 2)  # no grad
    traces, last = ema_scan(x, RATES, h0)
    traces.sum().backward()  # h_last unused: its gradient is zero, not an error
    assert x.grad is not None and h0.grad is None


def test_bf16_accumulates_in_float32(rng):
    x64, _, _ = _inputs(rng, 2, 500, 8)
    xb = torch.from_numpy(x64).to(torch.bfloat16)
    traces, last = ema_scan(xb, RATES)
    assert traces.dtype == torch.bfloat16 and last.dtype == torch.float32
    ref, ref_last = ema_scan_reference(xb.to(torch.float64).numpy(), RATES)
    # float32 accumulation: the final state is exact to float32, the traces to bf16 rounding
    np.testing.assert_allclose(last.numpy(), ref_last, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traces.to(torch.float64).numpy(), ref, rtol=1e-2, atol=1e-2)


# --- the dispatcher and invalid input ------------------------------------------------------------


def test_dispatch_says_which_path_ran(rng):
    x = rng.standard_normal((1, 5, 2))
    assert ema_scan(x, RATES).backend == "numba"
    assert ema_scan(torch.from_numpy(x), RATES).backend == "torch"
    assert ema_scan(x, RATES, backend="reference").backend == "reference"
    assert ema_scan(x, RATES, backend="torch").backend == "torch"
    assert select_backend(torch.zeros(1)) == "torch" and select_backend(x) == "numba"
    with pytest.raises(ValueError, match="backend"):
        ema_scan(x, RATES, backend="cuda-magic")
    with pytest.raises(ValueError, match="requires grad"):
        ema_scan(torch.zeros(1, 3, 2, requires_grad=True), RATES, backend="numba")


@pytest.mark.parametrize("backend", ["reference", "numba", "torch"])
@pytest.mark.parametrize(
    "alphas,match",
    [([0.0], r"alphas.*\(0, 1\]"), ([-0.1], "alphas"), ([1.5], "alphas"), ([float("nan")], "alphas"),
     ([], "alphas"), ([[0.5]], "alphas.*1-D"), ("fast", "alphas")],
)
def test_bad_alphas(backend, alphas, match):
    with pytest.raises(ValueError, match=match):
        ema_scan(np.zeros((1, 4, 2)), alphas, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "numba", "torch"])
def test_bad_inputs_name_the_argument(backend):
    x = np.zeros((2, 5, 3))
    cases = [
        (dict(x=np.zeros((5, 3))), r"x must have rank 3"),
        (dict(x=np.zeros((1, 2, 5, 3))), r"x must have rank 3"),
        (dict(x=np.zeros((2, 0, 3))), r"T >= 1"),
        (dict(x=np.zeros((2, 5, 3), dtype=np.int64)), r"x must be floating"),
        (dict(x=np.where(np.arange(30).reshape(2, 5, 3) == 17, np.nan, 0.0)), r"x contains non-finite"),
        (dict(x=np.where(np.arange(30).reshape(2, 5, 3) == 4, np.inf, 0.0)), r"x contains non-finite"),
        (dict(h0=np.zeros((2, 2, 3))), r"h0 must have shape"),
        (dict(h0=np.zeros((2, 3))), r"h0 must have rank 3"),
        (dict(h0=np.full((2, 1, 3), np.nan)), r"h0 contains non-finite"),
        (dict(reset=np.zeros((2, 4), bool)), r"reset must have shape"),
        (dict(reset=np.zeros((2, 5), np.int64)), r"reset must be boolean"),
    ]
    for kwargs, match in cases:
        args = dict(x=x, h0=None, reset=None) | kwargs
        if backend == "torch":
            args = {k: None if v is None else torch.from_numpy(v) for k, v in args.items()}
        with pytest.raises(ValueError, match=match):
            ema_scan(args["x"], [0.5], args["h0"], args["reset"], backend=backend)


def test_nan_before_a_reset_is_still_caught(rng):
    # A reset wipes the state, so the numba kernel checks the rows it discards.
    x = rng.standard_normal((1, 40, 4))
    x[0, 3, 2] = np.nan
    reset = np.zeros((1, 40), bool)
    reset[0, 10] = True
    with pytest.raises(ValueError, match="non-finite"):
        ema_scan(x, [0.5, 1.0], reset=reset)


def test_chunk_must_allow_recursion():
    with pytest.raises(ValueError, match="chunk"):
        ema_scan(torch.zeros(1, 3, 2), [0.5], chunk=1)


def test_rates_are_never_learned():
    with pytest.raises(ValueError, match="must not require grad"):
        ema_scan(torch.zeros(1, 3, 2), torch.tensor([0.5], requires_grad=True))


# --- CUDA: the last link, run with `pytest -m gpu` on a machine with a GPU ------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("B,T,D", [(2, 1, 60), (3, 63, 1), (2, 1000, 60), (4, 4097, 128)])
def test_cuda_matches_reference(rng, B, T, D):
    x, h0, reset = _inputs(rng, B, T, D, resets=0.01)
    ref, ref_last = ema_scan_reference(x, RATES, h0, reset)
    for dtype, tol in ((torch.float64, 1e-11), (torch.float32, 2e-5)):
        tx, th0, tr = (t.cuda() for t in _torch(x.astype(np.float64), h0, reset))
        res = ema_scan(tx.to(dtype), RATES, th0.to(dtype), tr)
        assert res.backend == "torch" and res.traces.is_cuda
        np.testing.assert_allclose(res.traces.double().cpu().numpy(), ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(res.h_last.double().cpu().numpy(), ref_last, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_cuda_gradients_match_cpu():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 300, 16, dtype=torch.float64, generator=g)
    h0 = torch.randn(2, 3, 16, dtype=torch.float64, generator=g)
    reset = torch.rand(2, 300, generator=g) < 0.03
    w = torch.randn(2, 300, 3, 16, dtype=torch.float64, generator=g)
    grads = []
    for dev in ("cpu", "cuda"):
        xx, hh = x.to(dev).requires_grad_(), h0.to(dev).requires_grad_()
        traces, last = ema_scan(xx, RATES, hh, reset.to(dev))
        ((traces * w.to(dev)).sum() + last.sum()).backward()
        grads.append((xx.grad.cpu(), hh.grad.cpu()))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.gpu
def test_cuda_bf16_accumulates_in_float32():
    x = torch.randn(2, 2000, 64, device="cuda").to(torch.bfloat16)
    traces, last = ema_scan(x, RATES)
    assert traces.dtype == torch.bfloat16 and last.dtype == torch.float32
    ref, ref_last = ema_scan_reference(x.double().cpu().numpy(), RATES)
    np.testing.assert_allclose(last.cpu().numpy(), ref_last, rtol=1e-4, atol=1e-5)


# --- the numba path's time segments (used when the batch cannot feed every thread) ---------------


@pytest.mark.parametrize("segments", [2, 3, 7])
@pytest.mark.parametrize("density", [0.0, 0.002, 0.05])
@pytest.mark.parametrize("dtype,rtol,atol", [(np.float64, 1e-11, 1e-13), (np.float32, 2e-5, 2e-6)])
def test_numba_time_segments_agree(rng, segments, density, dtype, rtol, atol):
    from ema_core.scan.numba_cpu import ema_scan_numba

    alphas = np.array([0.5, 0.1, 0.02, 0.001, 1.0])
    x, h0, reset = _inputs(rng, 2, 3001, 5, K=5, dtype=dtype, resets=density)
    ref, ref_last = ema_scan_reference(x, alphas, h0, reset)
    traces, last = ema_scan_numba(x, alphas, h0, reset, segments=segments)
    np.testing.assert_allclose(traces, ref, rtol=rtol, atol=atol)
    np.testing.assert_allclose(last, ref_last, rtol=rtol, atol=atol)


@pytest.mark.parametrize("where", [5, 1000, 1999])
def test_numba_time_segments_catch_nan(rng, where):
    from ema_core.scan.numba_cpu import ema_scan_numba

    x = rng.standard_normal((1, 3000, 4))
    x[0, where, 1] = np.nan
    reset = np.zeros((1, 3000), bool)
    reset[0, [1000, 2000, 2500]] = True  # segment starts and a reset later on
    for r in (None, reset):
        with pytest.raises(ValueError, match="non-finite"):
            ema_scan_numba(x, np.array([0.5, 0.02]), reset=r, segments=3)


def test_numba_plans_time_segments_for_a_single_long_stream():
    from ema_core.scan.numba_cpu import MIN_SEGMENT, _plan

    assert _plan(1, 4 * MIN_SEGMENT, 64, 2) == (64, 2)
    assert _plan(8, 4 * MIN_SEGMENT, 64, 2) == (64, 1)
    assert _plan(1, 100, 64, 2) == (64, 1)
    assert _plan(1, 4 * MIN_SEGMENT, 1024, 2) == (512, 1)
