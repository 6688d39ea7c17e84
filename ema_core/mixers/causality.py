"""The exact causality probe: a mixer's output up to t must not move, by a single bit, when anything after t changes.

    >>> check_causal(build_mixer("gated_linear_attn", d=16))       # a mixer: (B, T, D) → (B, T, D)
    >>> check_causal(MixerNet("ema", vocab=20, n_classes=3))        # a model: tokens (B, T) → (B, T, C)

A model of another family is fed tokens too when it says its vocabulary (``token_vocab``, as the depth
comparison's language models do) and names itself (``name``).

Both return None, or raise ``ValueError`` naming the mixer, the first output position that moved and
the step after which the inputs were changed.  The tests hold every registered mixer to it, and a
boundary run calls it on every mixer of its config before training anything, so a mixer that reads
the future (a bring-your-own one that looks at x_{t+1}, say) is refused, not trained on the answer.

For every t of a short sequence, the inputs after t are redrawn and the outputs at 0..t compared with
the unchanged run's, exactly (tolerance 0): a leak the size of a rounding error is still a leak, and
"causal up to rounding" would let a chunked path whose t-th row is computed from a reference point
after t pass.  Each comparison is between two calls of the same shape, so the two runs take the same
kernels and any difference comes from the changed inputs.
"""
from __future__ import annotations

import torch
from torch import nn


def check_causal(module: nn.Module, T: int = 40, d: int | None = None, batch: int = 2, seed: int = 0) -> None:
    """Raise ``ValueError`` unless ``module``'s output at every t < ``T`` is a function of inputs 0..t only.

    ``module`` is a mixer (real inputs of its width: ``module.d``, or ``d`` for a module without one)
    or a :class:`~ema_core.mixers.model.MixerNet` (token inputs over its vocabulary).  The default
    ``T`` = 40 spans more than two of the linear attentions' 16-step chunks and ends inside one; the
    boundary map probes over :data:`ema_core.studies.boundary.experiment.CAUSAL_T` steps, past the delta rule's
    32-step chunks too."""
    from ema_core.mixers.model import MixerNet  # the model imports every mixer; the probe is for them

    if T < 2:
        raise ValueError(f"the causality probe needs T ≥ 2 steps, got {T}")
    gen = torch.Generator().manual_seed(seed)
    param = next(module.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    tokens = isinstance(module, MixerNet) or getattr(module, "token_vocab", None) is not None
    if tokens:
        if isinstance(module, MixerNet):
            name, vocab = module.mixer_name, module.embed.num_embeddings
        else:
            name, vocab = getattr(module, "name", "") or type(module).__name__, int(module.token_vocab)
        if vocab < 2:
            raise ValueError(f"mixer {name!r}: the causality probe changes tokens, so it needs a vocabulary of ≥ 2")

        def draw():
            return torch.randint(0, vocab, (batch, T), generator=gen)

        def redraw(x, after):  # another token at every step after ``after`` (one always differs)
            shift = torch.randint(1, vocab, (batch, T - after - 1), generator=gen)
            x = x.clone()
            x[:, after + 1:] = (x[:, after + 1:] + shift.to(x.device)) % vocab
            return x
    else:
        name = getattr(module, "name", "") or type(module).__name__
        width = d if d is not None else getattr(module, "d", None)
        if width is None:
            raise ValueError(f"mixer {name!r}: give the probe its width d (the module has no attribute d)")

        def draw():
            return torch.randn(batch, T, width, generator=gen).to(dtype)

        def redraw(x, after):
            x = x.clone()
            x[:, after + 1:] = torch.randn(batch, T - after - 1, width, generator=gen).to(x.device, dtype)
            return x

    training = module.training
    module.eval()  # a dropout would move the outputs for a reason that is not the future
    try:
        with torch.no_grad():
            x = draw().to(device)
            y = _output(module(x))
            for t in range(T - 1):
                y2 = _output(module(redraw(x, t)))
                a, b = y[:, : t + 1], y2[:, : t + 1]
                moved = ((a != b) & ~(a.isnan() & b.isnan())).reshape(batch, t + 1, -1).any(-1).any(0)
                if bool(moved.any()):
                    p = int(moved.nonzero()[0, 0])
                    raise ValueError(
                        f"mixer {name!r} is not causal: its output at position {p} changes when the inputs "
                        f"after position {t} (x_{t + 1}…) change; an output at t may depend on x_0..x_t only, "
                        "bit for bit")
    finally:
        module.train(training)


def _output(y) -> torch.Tensor:
    """A mixer's forward gives its output; a scan-like one (output, state) gives the output first."""
    return y[0] if isinstance(y, tuple) else y


__all__ = ["check_causal"]
