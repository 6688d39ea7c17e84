"""Torch path: a chunked scan with an analytic backward, on CPU and CUDA.

Forward, with β = 1 − α and chunks of C steps:
  * inside a chunk, h_i = Σ_{j≤i} α·β^{i−j}·x_j is one matmul by a fixed lower-triangular
    (C·K, C) decay matrix, all K rates at once (rows ordered (i, k), so the product lands
    directly in the (B, T, K, D) layout);
  * the chunk-end states form a scan of their own with decay β^C over T/C chunks: the same
    function, called recursively, so depth is log_C(T) and nothing loops over time in Python;
  * each step then adds β^{i+1}·(state entering its chunk).
Every weight is a power of β ≤ 1, so nothing is divided by a cumulative product (which is
what makes the cumprod trick unstable for small β).

Resets make the decay data dependent: a weight from j to i survives only if no reset falls
in (j, i] (equal segment ids), and a chunk containing a reset does not pass its carry on.

Backward: the adjoint of an EMA is a reverse EMA.  With g_t = ∂L/∂h_t,
    λ_t = g_t + β·(1 − r_{t+1})·λ_{t+1},   λ_{T−1} = g_{T−1} + ∂L/∂h_last,
    ∂L/∂x_t = Σ_k α_k·λ_t^k,   ∂L/∂h0 = β·(1 − r_0)·λ_0,
which is the forward scan run on time-reversed gradients.  α is fixed (never learned):
no gradient flows to it.
"""
from __future__ import annotations

import torch

DEFAULT_CHUNK = 32


def _decay_weights(beta: torch.Tensor, scale: torch.Tensor | None, C: int) -> torch.Tensor:
    """(C, K, C) with W[i, k, j] = scale_k·β_k^{i−j} for j ≤ i, else 0."""
    i = torch.arange(C, device=beta.device)
    lag = i[:, None] - i[None, :]  # (C, C)
    # pow(0, 0) = 1, so α = 1 (β = 0) gives the identity, as it should.
    P = beta[None, :, None] ** lag.clamp(min=0)[:, None, :].to(beta.dtype)  # (C, K, C)
    P = P * (lag >= 0)[:, None, :]
    if scale is not None:
        P = P * scale[None, :, None]
    return P


def _chunk_weights(beta, scale, reset, B, N, C):
    """The intra-chunk map as (C, K, C), or (B·N, C, K, C) when resets make it data dependent."""
    W = _decay_weights(beta, scale, C)
    if reset is None:
        return W
    seg = reset.to(torch.int32).cumsum(1).reshape(B * N, C)  # segment id of every step
    same = (seg[:, :, None] == seg[:, None, :]).to(W.dtype)  # (B·N, C, C): no reset in (j, i]
    return W[None] * same[:, :, None, :]


def _carry_gain(beta, reset, B, N, C):
    """β^{i+1} for a step i steps into its chunk, zero once a reset has cut the carry: (C, K) or (B·N, C, K)."""
    G = beta[None, :] ** torch.arange(1, C + 1, device=beta.device, dtype=beta.dtype)[:, None]
    if reset is None:
        return G
    alive = (reset.reshape(B, N, C).to(torch.int32).cumsum(-1) == 0).to(G.dtype)  # no reset in [0, i]
    return (G[None, None] * alive[..., None]).reshape(B * N, C, -1)


def _pad_time(t, pad):
    if not pad or t is None:
        return t
    if t.dim() == 2:  # reset (B, T)
        return torch.nn.functional.pad(t, (0, pad))
    return torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))


def _scan_core(u, beta, scale, reset, h0, chunk):
    """h_t = β·(1 − r_t)·h_{t−1} + s·u_t for every rate; returns (B, T, K, D).

    u      (B, T, D) shared by the K rates and scaled by ``scale`` (K,), or
           (B, T, K, D) one input per rate (``scale`` is None)
    beta   (K,)     per-rate decay
    reset  (B, T)   bool or None
    h0     (B, K, D) or None
    """
    shared = u.dim() == 3
    B, T, D = u.shape[0], u.shape[1], u.shape[-1]
    K = beta.shape[0]
    C = min(chunk, T)
    N = -(-T // C)
    pad = N * C - T
    u, reset = _pad_time(u, pad), _pad_time(reset, pad)
    W = _chunk_weights(beta, scale, reset, B, N, C)  # (·, C, K, C)

    # State entering each chunk: h0 for the first, then the true chunk-end states, which are
    # a scan of their own over N chunks with decay β^C (a chunk holding a reset passes nothing
    # on).  Its inputs are the chunk-end states from inside each chunk: row C−1 of the map.
    carry = None if h0 is None else h0[:, None]  # (B, 1, K, D)
    if N > 1:
        s = _apply(W[..., C - 1 : C, :, :], u, shared, B, N, 1, K, D)  # (B, N, K, D)
        chunk_reset = None if reset is None else reset.reshape(B, N, C).any(-1)  # (B, N)
        H = _scan_core(s.reshape(B, N, K, D), beta**C, None, chunk_reset, h0, chunk)
        first = torch.zeros_like(H[:, :1]) if h0 is None else carry.to(H.dtype)
        carry = torch.cat([first, H[:, :-1]], dim=1)  # (B, N, K, D)

    if carry is None:
        y = _apply(W, u, shared, B, N, C, K, D)  # (B·N, C·K, D)
    else:
        # y[n, i, k] += β_k^{i+1}·carry[n, k] rides in the same matmul as one more input
        # column per rate ([W | G] @ [u; carry]): a separate broadcast add cost a full pass.
        G = _carry_gain(beta, reset, B, N, C)  # (·, C, K)
        if shared:
            Gm = (G[..., None] * torch.eye(K, dtype=G.dtype, device=G.device)).reshape(*G.shape[:-2], C, K, K)
            Waug = torch.cat([W, Gm], dim=-1)  # (·, C, K, C + K)
            uaug = torch.cat([u.reshape(B, N, C, D), carry.to(u.dtype)], dim=2)  # (B, N, C + K, D)
        else:
            Waug = torch.cat([W, G[..., None]], dim=-1)  # (·, C, K, C + 1): carry of rate k only
            uaug = torch.cat([u.reshape(B, N, C, K, D), carry[:, :, None].to(u.dtype)], dim=2)  # (B, N, C + 1, K, D)
        y = _apply(Waug, uaug, shared, B, N, C, K, D)
    y = y.reshape(B, N * C, K, D)
    return y[:, :T] if pad else y


def _apply(W, u, shared, B, N, R, K, D):
    """The intra-chunk map for R output rows per chunk: (B·N, R·K, D).  W is (·, R, K, C)."""
    C = W.shape[-1]
    if shared:
        # (R·K, C) @ (B·N, C, D): rows ordered (i, k), so the product is already (B, T, K, D)
        Wm = W.reshape(-1, R * K, C)
        return torch.matmul(Wm if Wm.shape[0] > 1 else Wm[0], u.reshape(B * N, C, D))
    # one map per rate: (·, K, R, C) @ (B·N, K, C, D) -> (B·N, K, R, D)
    uk = u.reshape(B * N, C, K, D).transpose(1, 2)
    return torch.matmul(W.transpose(-3, -2), uk).transpose(1, 2).reshape(B * N, R * K, D)


def _scan_core_adjoint(g, beta, scale, reset, want_h0, shared, chunk):
    """The adjoint of :func:`_scan_core`: ∂L/∂u and ∂L/∂h0 from g = ∂L/∂y (B, T, K, D).

    Every step of the forward is linear, so each is transposed in turn: the intra-chunk map
    and the carry broadcast by one matmul with both maps transposed, the scan over chunk-end
    states by this same function one level down.  ``g`` is only read.
    """
    B, T, K, D = g.shape
    C = min(chunk, T)
    N = -(-T // C)
    pad = N * C - T
    g, reset = _pad_time(g, pad), _pad_time(reset, pad)
    W = _chunk_weights(beta, scale, reset, B, N, C)  # (·, C, K, C)
    G = _carry_gain(beta, reset, B, N, C)  # (·, C, K)
    Gm = (G[..., None] * torch.eye(K, dtype=G.dtype, device=G.device)).reshape(-1, C * K, K)
    g3 = g.reshape(B * N, C * K, D)
    if shared:
        # [intra map | carry map]ᵀ in one matmul: (C + K, C·K) @ (B·N, C·K, D); the sum over
        # rates happens inside it.
        Wt = torch.cat([W.reshape(-1, C * K, C), Gm], dim=-1).transpose(-2, -1)
        out = torch.matmul(Wt if Wt.shape[0] > 1 else Wt[0], g3)
        du, dcarry = out[:, :C], out[:, C:]  # (B·N, C, D), (B·N, K, D)
    else:
        gk = g.reshape(B * N, C, K, D).transpose(1, 2)  # (B·N, K, C, D)
        du = torch.matmul(W.permute(*range(W.dim() - 3), -2, -1, -3), gk)  # (B·N, K, C, D)
        Gt = Gm.transpose(-2, -1)
        dcarry = torch.matmul(Gt if Gt.shape[0] > 1 else Gt[0], g3)  # (B·N, K, D)
    dcarry = dcarry.reshape(B, N, K, D)

    dh0 = dcarry[:, 0] if want_h0 else None
    if N > 1:
        chunk_reset = None if reset is None else reset.reshape(B, N, C).any(-1)
        # H[n] feeds chunk n + 1; the last chunk-end state feeds nothing.
        dH = torch.cat([dcarry[:, 1:], torch.zeros_like(dcarry[:, :1])], dim=1)
        ds, dh0_inner = _scan_core_adjoint(dH, beta**C, None, chunk_reset, want_h0, False, chunk)
        # The chunk-end states were row C−1 of the intra map (the intra part only).
        Wl = W[..., C - 1, :, :]  # (·, K, C): W[C−1, k, j]
        ds = ds.reshape(B * N, K, D)
        if shared:
            du = du + torch.matmul(Wl.transpose(-2, -1), ds)  # Σ_k W[C−1, k, j]·ds[k]
        else:
            du = du + Wl[..., :, :, None] * ds[:, :, None, :]
        if want_h0:
            dh0 = dh0 + dh0_inner
    du = du.reshape(B, N * C, D) if shared else du.transpose(1, 2).reshape(B, N * C, K, D)
    return (du[:, :T] if pad else du), dh0


def _last_step_adjoint(g_last, alpha, reset, T):
    """Adjoint of h_last = h_{T−1} alone: ∂x_t = Σ_k α_k·β_k^{T−1−t}·[no reset in (t, T−1]]·g_last[k].

    Separate from the main adjoint so that the (B, T, K, D) gradient is never copied to add
    one row; powers of β ≤ 1 underflow harmlessly to 0 for distant steps.
    """
    beta = 1 - alpha
    lag = torch.arange(T - 1, -1, -1, device=alpha.device, dtype=alpha.dtype)  # T−1−t
    w = alpha[None, :] * beta[None, :] ** lag[:, None]  # (T, K)
    w0 = beta**T  # reaches h0 through all T steps
    if reset is None:
        dx = torch.einsum("tk,bkd->btd", w, g_last)
        return dx, w0[None, :, None] * g_last
    seg = reset.to(torch.int32).cumsum(1)  # (B, T)
    same = (seg == seg[:, -1:]).to(w.dtype)  # no reset in (t, T−1]
    dx = torch.einsum("tk,bt,bkd->btd", w, same, g_last)
    alive = (~reset.any(1)).to(w.dtype)  # no reset anywhere: h0 survives to the end
    return dx, w0[None, :, None] * alive[:, None, None] * g_last


class _EMAScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h0, alpha, reset, chunk):
        y = _scan_core(x, 1 - alpha, alpha, reset, h0, chunk)
        ctx.save_for_backward(alpha, reset if reset is not None else alpha.new_empty(0, dtype=torch.bool))
        ctx.has_reset = reset is not None
        ctx.chunk = chunk
        return y, y[:, -1].clone()

    @staticmethod
    def backward(ctx, g_y, g_last):
        alpha, reset = ctx.saved_tensors
        reset = reset if ctx.has_reset else None
        want_h0 = ctx.needs_input_grad[1]
        if not g_y.is_contiguous():
            # A loss like y.sum() hands back a stride-0 gradient, which bmm would copy slice by
            # slice: make one dense copy, and since it is ours, ∂L/∂h_last (the last step's
            # state) joins it in place for free.
            g_y = g_y.contiguous()
            if g_last is not None:
                g_y[:, -1] += g_last
                g_last = None
        dx, dh0 = _scan_core_adjoint(g_y, 1 - alpha, alpha, reset, want_h0, True, ctx.chunk)
        if g_last is not None:  # the gradient is someone else's: never copy it to add one row
            dx_last, dh0_last = _last_step_adjoint(g_last, alpha, reset, g_y.shape[1])
            dx = dx.add_(dx_last) if dx.is_contiguous() else dx + dx_last
            dh0 = dh0 + dh0_last if want_h0 else None
        return (dx if ctx.needs_input_grad[0] else None), dh0, None, None, None


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def ema_scan_torch(x: torch.Tensor, alphas, h0=None, reset=None, chunk: int = DEFAULT_CHUNK):
    """Contract of :mod:`ema_core.scan` for tensors (validated by the dispatcher).

    Differentiable in ``x`` and ``h0``.  bf16/fp16 inputs are accumulated in float32.
    """
    if x.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        raise ValueError(f"x must be float32, float64, bfloat16 or float16, got dtype {x.dtype}")
    if int(chunk) < 2:
        raise ValueError(f"chunk must be an integer >= 2 (the chunked scan recurses on T/chunk), got {chunk}")
    cd = _compute_dtype(x.dtype)
    alpha = torch.as_tensor(alphas, dtype=cd, device=x.device)
    xc = x.to(cd)
    h0c = None if h0 is None else h0.to(device=x.device, dtype=cd)
    r = None if reset is None else reset.to(device=x.device, dtype=torch.bool)
    if xc.numel() == 0:
        # An empty batch or no channels (T >= 1 is checked): empty traces of the right shape, still
        # in the graph of x and h0.  The chunked scan's reshapes cannot infer a size from zero elements.
        y = xc[:, :, None, :] * alpha[:, None]
        h_last = y[:, -1] if h0c is None else y[:, -1] + h0c
        return (y if y.dtype == x.dtype else y.to(x.dtype)), h_last
    y, h_last = _EMAScan.apply(xc, h0c, alpha, r, int(chunk))
    return (y if y.dtype == x.dtype else y.to(x.dtype)), h_last
