"""The trained comparison's models: one transformer body, three ways to add up its blocks in depth.

Per token, with x_0 the embedding and B_i the standard pre-norm block (attention then MLP, each
adding its write to the block's input; :class:`ema_core.lm.gpt.Block`)::

    x_i = B_i(z_{i-1})                        block i's output, i = 1..L      (z_0 = x_0)
    z_i = mix_i(x_0, …, x_i)                  the stream block i + 1 reads
    logits = norm_f(z_L) · wteᵀ

and the rule sets ``mix_i``:

* ``sum``:    z_i = x_i.  Unrolled, z_L = x_0 + Σ_i (write of block i), every write with weight 1:
  the standard residual stream, fixed accumulation in depth.
* ``static``: z_i = Σ_j α_ij x_j with learned scalars α, one per (i, j), the same for every token
  (DenseFormer's depth-weighted average, arXiv 2402.02622).  α_ii starts at 1 and the rest at 0, so
  the model starts as the ``sum`` one (DenseFormer's initialisation).
* ``select``: z_i[t] = Σ_j a_ij[t] x_j[t], a_i[t] = softmax_j(W_i · norm(x_i[t]) + b_i): a per-token
  softmax over the outputs so far, its logits read from the current block's output at the same
  token (the dynamic dense connections of MUDDFormer and hyper-connections, in their simplest form).
  W_i starts at 0 and b_i puts 0.9 of the weight on x_i, so the model starts near the ``sum`` one.
* ``dynamic``: z_i[t] = Σ_j (α_ij + (W_i · norm(x_i[t]))_j) x_j[t]: ``static``'s signed weights plus a
  per-token increment read from the current block's output, unnormalised (MUDDFormer's and
  hyper-connections' static-plus-dynamic form, in its simplest shape).  α starts as ``static``'s and W_i
  at 0, so the model starts as the ``sum`` one exactly; it differs from ``static`` only in reading the
  token, and from ``select`` in having no softmax (signed weights that need not sum to 1).

Every rule mixes the outputs of one token position only: none reads another token, so each model is
as causal as its attention (held to the exact probe, :func:`ema_core.mixers.causality.check_causal`).

The fast path (:meth:`DepthMix.forward`) stacks the outputs and contracts them in one einsum; the
float64 reference (:func:`reference_mix`) adds them one by one, token by token, with the weights
written out, so the tests chain the two on outputs, the final stream and gradients.

Sizes: ``static`` adds L(L + 3)/2 scalars, ``select`` and ``dynamic`` add (i + 1)(d + 1) + a norm per
block each (0.6 % of the tiny model at 16 blocks): :func:`params` counts each, and the experiment refuses a grid whose
rules differ by more than 1 % at a depth.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ema_core.depth import RULES, Rule
from ema_core.lm.gpt import GPTConfig, Block, count_params, init_weights, make_norm

# ``select``'s starting share of the current block's output (the rest spread evenly over the earlier
# ones): near the standard residual, as DenseFormer and MUDDFormer start theirs, yet with a gradient
# into every earlier output from the first step.
SELECT_INIT_SHARE = 0.9


class DepthLMConfig(GPTConfig):
    """A transformer of ``n_layers`` blocks whose residual stream follows ``rule``."""

    rule: Rule = Field("sum", description=f"how the blocks' outputs add up in depth: one of {', '.join(RULES)}")


class DepthMix(nn.Module):
    """``mix_i`` for every block i = 1..L under one rule (the module's own parameters)."""

    def __init__(self, rule: str, n_layers: int, d: int, norm: str):
        super().__init__()
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        self.rule, self.n_layers = rule, n_layers
        if rule in ("static", "dynamic"):
            # α_i over x_0..x_i, one vector per block: 1 on its own output, 0 elsewhere
            self.alpha = nn.ParameterList(nn.Parameter(F.one_hot(torch.tensor(i), i + 1).float())
                                          for i in range(1, n_layers + 1))
        if rule in ("select", "dynamic"):
            self.norms = nn.ModuleList(make_norm(norm, d) for _ in range(n_layers))
            # select's bias is its static part; dynamic's is α (a bias beside it would be a second copy)
            self.gates = nn.ModuleList(nn.Linear(d, i + 1, bias=rule == "select") for i in range(1, n_layers + 1))

    def reset(self) -> None:
        """The rule's starting point (after the body's init, which would draw every matrix at random)."""
        if self.rule in ("select", "dynamic"):
            with torch.no_grad():
                for i, gate in enumerate(self.gates, start=1):
                    gate.weight.zero_()
                    if gate.bias is not None:
                        gate.bias.copy_(select_bias(i))

    def forward(self, i: int, outs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(z_i, the weights used): z_i from the outputs x_0..x_i (each (B, T, d)); the weights are
        (i + 1,) for ``static``, (B, T, i + 1) for ``select`` and ``dynamic``, None for ``sum``."""
        if self.rule == "sum":
            return outs[i], None
        stacked = torch.stack(outs[: i + 1])  # (i + 1, B, T, d)
        if self.rule == "static":
            w = self.alpha[i - 1]
            return torch.einsum("j,jbtd->btd", w, stacked), w
        logits = self.gates[i - 1](self.norms[i - 1](outs[i]))  # (B, T, i + 1)
        w = torch.softmax(logits, dim=-1) if self.rule == "select" else self.alpha[i - 1] + logits
        return torch.einsum("btj,jbtd->btd", w, stacked), w


def select_bias(i: int) -> torch.Tensor:
    """``select``'s starting logits over x_0..x_i: SELECT_INIT_SHARE on x_i, the rest even."""
    share = SELECT_INIT_SHARE
    b = torch.zeros(i + 1)
    b[i] = math.log(share * i / (1 - share))  # e^b / (e^b + i) = share
    return b


class DepthLM(nn.Module):
    """GPT-2's body (:mod:`ema_core.lm.gpt`: its blocks, init, tied head) with the stream of ``cfg.rule``."""

    def __init__(self, cfg: DepthLMConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.name = f"depth[{cfg.rule}, {cfg.n_layers} blocks]"  # how the causality probe names it
        self.token_vocab = cfg.vocab_size  # the causality probe feeds it tokens
        with torch.random.fork_rng(devices=[]):  # the default inits below are overwritten anyway
            self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
            self.drop = nn.Dropout(cfg.dropout)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
            self.mix = DepthMix(cfg.rule, cfg.n_layers, cfg.d_model, cfg.norm)
            self.norm_f = make_norm(cfg.norm, cfg.d_model)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        init_weights(self, seed, residual_std=0.02 / math.sqrt(2 * cfg.n_layers))  # as the GPT baseline
        self.mix.reset()

    def streams(self, idx: torch.Tensor) -> dict[str, object]:
        """Everything a probe reads: ``outputs`` [x_0 … x_L], ``final`` z_L, ``weights`` per block
        (as :meth:`DepthMix.forward` gives them)."""
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the positional embedding ({self.cfg.seq_len} rows)")
        z = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))  # (B, T, d)
        outs, weights = [z], []
        for i, block in enumerate(self.blocks, start=1):
            outs.append(block(z))
            z, w = self.mix(i, outs)
            weights.append(w)
        return {"outputs": outs, "final": z, "weights": weights}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) token ids -> logits (B, T, V); position t sees tokens ≤ t only."""
        return self.lm_head(self.norm_f(self.streams(idx)["final"]))


def params(cfg: DepthLMConfig) -> int:
    """Exact parameter count, the tied head once (built on the meta device: no memory, no init)."""
    with torch.device("meta"):
        return count_params(DepthLM(cfg))


def reference_mix(rule: str, i: int, outs: list[torch.Tensor], mix: DepthMix) -> torch.Tensor:
    """The float64 reference of ``mix_i``: every token's z_i added up output by output, the weights
    written out (the softmax as exp / Σ exp, the gate's logits as dot products).  Differentiable, so the
    tests compare gradients too; slow (a Python loop over tokens), for tests only."""
    xs = [o.double() for o in outs[: i + 1]]
    if rule == "sum":
        return xs[i].clone()
    B, T, d = xs[0].shape
    rows = []
    for b in range(B):
        cols = []
        for t in range(T):
            if rule == "static":
                w = [mix.alpha[i - 1][j].double() for j in range(i + 1)]
            else:  # the gate's read of this token's output, as dot products
                h = _reference_norm(mix.norms[i - 1], xs[i][b, t])
                gate = mix.gates[i - 1]
                reads = [gate.weight[j].double() @ h for j in range(i + 1)]
                if rule == "dynamic":
                    w = [mix.alpha[i - 1][j].double() + reads[j] for j in range(i + 1)]
                else:
                    logits = [reads[j] + gate.bias[j].double() for j in range(i + 1)]
                    top = max(float(v.detach()) for v in logits)  # shifted for range only: the softmax is unchanged
                    e = [torch.exp(v - top) for v in logits]
                    total = sum(e)
                    w = [v / total for v in e]
            z = torch.zeros(d, dtype=torch.float64)
            for j in range(i + 1):
                z = z + w[j] * xs[j][b, t]
            cols.append(z)
        rows.append(torch.stack(cols))
    return torch.stack(rows)


def _reference_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LayerNorm or RMSNorm of one token's vector, in float64, from their definitions."""
    w = norm.weight.double()
    if isinstance(norm, nn.LayerNorm):
        mu = x.mean()
        var = ((x - mu) ** 2).mean()
        return (x - mu) / torch.sqrt(var + norm.eps) * w + norm.bias.double()
    eps = norm.eps if norm.eps is not None else torch.finfo(torch.float32).eps
    return x / torch.sqrt((x * x).mean() + eps) * w


def reference_streams(model: DepthLM, idx: torch.Tensor) -> dict[str, object]:
    """:meth:`DepthLM.streams` with every mix taken by :func:`reference_mix` (float64 from the first
    mix on; the blocks run in the dtype of the stream they are given, so cast the model to float64 for
    a float64 chain)."""
    B, T = idx.shape
    z = model.drop(model.wte(idx) + model.wpe(torch.arange(T, device=idx.device)))
    outs = [z]
    for i, block in enumerate(model.blocks, start=1):
        outs.append(block(z.to(next(block.parameters()).dtype)))
        z = reference_mix(model.cfg.rule, i, outs, model.mix)
    return {"outputs": outs, "final": z}


def _eval_weights(model: DepthLM, idx: torch.Tensor) -> list[torch.Tensor | None]:
    """Each block's mixing weights on ``idx`` (as :meth:`DepthMix.forward` gives them), read in eval mode
    and the model's mode restored."""
    was = model.training
    model.eval()
    try:
        return model.streams(idx)["weights"]
    finally:
        model.train(was)


@torch.no_grad()
def depth_weights(model: DepthLM, idx: torch.Tensor) -> list[dict]:
    """The weight each block's stream gives each earlier output, as DenseFormer draws them: one row
    per (layer i = 1..L, source j = 0..i).  ``sum``: 1 on its own output (x_i already holds every
    earlier write); ``static``: the learned α; ``select`` and ``dynamic``: the per-token weights averaged
    over ``idx``'s tokens."""
    rows = []
    weights = _eval_weights(model, idx)
    for i, w in enumerate(weights, start=1):
        if w is None:
            vec = [1.0 if j == i else 0.0 for j in range(i + 1)]
        else:
            vec = (w if w.dim() == 1 else w.flatten(0, 1).mean(0)).double().tolist()
        rows.extend({"layer": i, "source": j, "weight": float(v)} for j, v in enumerate(vec))
    return rows


@torch.no_grad()
def mix_entropy(model: DepthLM, idx: torch.Tensor) -> float | None:
    """How spread each block's weights over the earlier outputs are, from 0 (all on one output) to 1 (even
    over all): per token and block, the entropy of |w| / Σ|w| over the i + 1 outputs divided by log(i + 1),
    averaged over ``idx``'s tokens, then over the blocks.  For ``select`` |w| is its softmax; ``dynamic``'s
    weights are signed, so their magnitudes are read.  None for ``sum`` (it has no weights to spread)."""
    per_block = []
    weights = _eval_weights(model, idx)
    for i, w in enumerate(weights, start=1):
        if w is None:
            return None
        p = w.double().abs()
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-300)
        h = -(p * torch.log(p.clamp_min(1e-300))).sum(-1) / math.log(i + 1)
        per_block.append(float(h.mean()))
    return sum(per_block) / len(per_block) if per_block else None


__all__ = ["DepthLMConfig", "DepthLM", "DepthMix", "SELECT_INIT_SHARE", "depth_weights", "mix_entropy", "params",
           "reference_mix", "reference_streams", "select_bias"]
