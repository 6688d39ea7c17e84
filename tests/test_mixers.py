"""Every context mixer against its float64 reference loop: outputs, final state, gradients, exact causality.

A mixer added to ``ema_core.mixers.registry.MIXERS`` is checked here with no change to this file.
Causality is checked by the probe a boundary run uses (``ema_core.mixers.causality.check_causal``).
"""
import math
from types import SimpleNamespace

import pytest
import torch

from ema_core.mixers import MIXER_NAMES
from ema_core.mixers.base import Mixer, check_input
from ema_core.mixers.causality import check_causal
from ema_core.mixers.delta import delta_chunked, delta_steps
from ema_core.mixers.recurrent import GatedLinearAttention
from ema_core.mixers.registry import CLASSES, MIXERS, build_mixer, by_name, mixer_options

NAMES = list(MIXERS)
D = 16
T = 70  # more than two of the chunked paths' chunks (16 and 32 steps), and not a multiple of one


def _x(dtype=torch.float64, B=2, T=T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, D, generator=g, dtype=torch.float64).to(dtype)


def _flat(state):
    """A final state (a tensor, or a tuple of them) as one list of tensors."""
    return list(state) if isinstance(state, tuple) else [state]


@pytest.mark.parametrize("name", NAMES)
def test_the_fast_path_equals_its_reference_in_float64(name):
    mixer = build_mixer(name, D, seed=1).double()
    x = _x()
    y, state = mixer.scan(x)
    y_ref, state_ref = mixer.reference(x)
    assert y.shape == x.shape and y.dtype == torch.float64
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    for got, want in zip(_flat(state), _flat(state_ref), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_float32_stays_near_the_float64_reference(name):
    mixer = build_mixer(name, D, seed=2)
    y32, _ = mixer.scan(_x(torch.float32))
    y_ref, _ = mixer.double().reference(_x())
    torch.testing.assert_close(y32.double(), y_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_equal_the_reference_gradients(name):
    mixer = build_mixer(name, D, seed=3).double()
    w = _x(seed=9)  # a fixed random read-out of the output, so every output element matters
    grads = []
    for path in (mixer.scan, mixer.reference):
        x = _x(T=40).requires_grad_(True)
        mixer.zero_grad(set_to_none=True)
        y, state = path(x)
        ((y * w[:, :40]).sum() + sum(s.sum() for s in _flat(state))).backward()
        grads.append([x.grad] + [p.grad for p in mixer.parameters()])
    for got, want in zip(*grads, strict=True):
        assert got is not None and want is not None
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", NAMES)
def test_causality_is_exact(name):
    # the run's probe: the inputs after t redrawn, every output up to t bit-identical (tolerance 0),
    # over 70 steps, so every chunk edge of the chunked paths is crossed
    mixer = build_mixer(name, D, seed=4)
    check_causal(mixer, T=T)
    # and the probe is not passed by a mixer that ignores its inputs: a change at t reaches t and later
    x = _x(torch.float32)
    with torch.no_grad():
        y = mixer(x)
        for t in (0, 15, 16, 33, T - 1):
            bumped = x.clone()
            bumped[:, t] += 3.0
            assert not torch.equal(mixer(bumped)[:, t:], y[:, t:]), (name, t)


class ReadsAhead(Mixer):
    """y_t = W x_{t+1}: a mixer that reads one step into the future."""

    name = "reads_ahead"

    def __init__(self, d: int, seed: int = 0):
        super().__init__(d, seed)
        self.out = self.linear(d, d)

    def scan(self, x):
        check_input(x, self.d)
        ahead = torch.cat([x[:, 1:], x.new_zeros(x.shape[0], 1, self.d)], 1)
        return self.out(ahead), x[:, -1]


def test_a_mixer_that_reads_ahead_is_refused_naming_it_and_where():
    with pytest.raises(ValueError, match=r"mixer 'reads_ahead' is not causal: its output at position 0 changes "
                                         r"when the inputs after position 0 \(x_1…\) change"):
        check_causal(ReadsAhead(D))
    # a leak of one rounding error is a leak: the probe compares exactly
    class Rounding(ReadsAhead):
        name = "rounding"

        def scan(self, x):
            return x + 1e-7 * x[:, -1:].sum(), None

    with pytest.raises(ValueError, match=r"mixer 'rounding' is not causal: its output at position 0"):
        check_causal(Rounding(D))
    # and a model around it: token inputs, the mixer named
    from ema_core.mixers.model import MixerNet

    net = MixerNet("ema", vocab=20, n_classes=3, d=D, layers=2, conv=3)
    net.blocks[1].mixer = ReadsAhead(D)
    with pytest.raises(ValueError, match=r"mixer 'ema' is not causal: its output at position 0"):
        check_causal(net, T=8)
    with pytest.raises(ValueError, match="T ≥ 2"):
        check_causal(ReadsAhead(D), T=1)


@pytest.mark.parametrize("name", NAMES)
def test_state_size_is_said_and_only_attention_grows_with_length(name):
    mixer = build_mixer(name, D)
    short, long = mixer.state_floats(16), mixer.state_floats(1024)
    assert short > 0
    grows = name in ("softmax", "ema3_seq")  # their key/value caches
    assert (long > short) == grows, (name, short, long)


def test_two_mixers_built_with_one_seed_are_the_same_and_another_seed_differs():
    x = _x(torch.float32)
    for name in NAMES:
        a, b, c = build_mixer(name, D, seed=5), build_mixer(name, D, seed=5), build_mixer(name, D, seed=6)
        with torch.no_grad():
            assert torch.equal(a(x), b(x)) and not torch.equal(a(x), c(x)), name


def test_the_classes_are_built_against_the_one_list_of_names():
    assert tuple(MIXERS) == MIXER_NAMES and by_name(CLASSES, MIXER_NAMES) == MIXERS
    assert by_name(tuple(reversed(CLASSES)), MIXER_NAMES) == MIXERS  # the names give the order
    # a registration half done stops the import, saying what is missing where
    with pytest.raises(ValueError, match=r"'mine' has no class"):
        by_name(CLASSES, (*MIXER_NAMES, "mine"))
    with pytest.raises(ValueError, match=f"'{MIXER_NAMES[-1]}' is not in MIXER_NAMES"):
        by_name(CLASSES, MIXER_NAMES[:-1])
    with pytest.raises(ValueError, match="share a name"):
        by_name((*CLASSES, MIXERS["ema"]), MIXER_NAMES)


def test_a_mixer_takes_the_model_settings_it_declares_and_only_those():
    from ema_core.studies.boundary.experiment import BoundaryModelConfig

    body = BoundaryModelConfig(window=7)
    for name in NAMES:
        declared = MIXERS[name].settings
        assert set(declared.values()) <= set(BoundaryModelConfig.model_fields), name  # settings the body has
        assert mixer_options(name, body) == {arg: getattr(body, s) for arg, s in declared.items()}
        build_mixer(name, D, **mixer_options(name, body))  # and its constructor takes them
    assert mixer_options("window_k", body) == {"k": 7} and build_mixer("window_k", D, k=7).k == 7
    assert mixer_options("ema", body) == {}


def test_bad_names_widths_and_inputs_are_refused_plainly():
    with pytest.raises(ValueError, match="unknown mixer 'mamba'; mixers: window_k, ema"):
        build_mixer("mamba", D)
    with pytest.raises(ValueError, match=r"d \(18\) must be divisible by heads \(4\)"):
        build_mixer("softmax", 18)
    with pytest.raises(ValueError, match="window k must be at least 1"):
        build_mixer("window_k", D, k=0)
    with pytest.raises(ValueError, match=r"takes \(B, T, 16\) inputs, got shape \(2, 5, 8\)"):
        build_mixer("ema3", D)(torch.zeros(2, 5, 8))


@pytest.mark.parametrize("name", NAMES)
def test_the_comparison_model_is_as_causal_as_its_mixer_and_learns(name):
    from ema_core.mixers.model import MixerNet

    net = MixerNet(name, vocab=20, n_classes=3, d=16, layers=2, seed=0, conv=3)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 20, (3, 50), generator=g)
    with torch.no_grad():
        assert net(tokens).shape == (3, 50, 3)
    check_causal(net, T=40)  # the conv before each mixer reads nothing later either
    # its state: each layer's mixer state and its conv's last conv − 1 inputs
    assert net.state_floats(50) == 2 * (build_mixer(name, 16).state_floats(50) + 2 * 16) and net.params() > 0
    # a few steps on a task the current token decides: the loss goes down
    target = tokens % 3
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(net(tokens).flatten(0, 1), target.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_the_short_conv_is_a_causal_depthwise_filter_over_time():
    from ema_core.mixers.model import ShortConv

    conv = ShortConv(D, 3, seed=2).double()
    x = _x(T=9)
    w, b = conv.weight[:, 0], conv.bias  # (D, 3): the last tap reads x_t, the first x_{t−2}
    want = torch.stack([b + sum(w[:, 2 - j] * x[:, t - j] for j in range(3) if t - j >= 0) for t in range(9)], 1)
    torch.testing.assert_close(conv(x), want, rtol=1e-12, atol=1e-12)
    assert conv.state_floats() == 2 * D
    with pytest.raises(ValueError, match="conv must be 0 \\(none\\) or a width of at least 1, got -1"):
        from ema_core.mixers.model import MixerNet

        MixerNet("ema", vocab=5, n_classes=2, d=D, conv=-1)


def test_without_the_conv_the_model_is_the_one_without_it_bit_for_bit():
    from ema_core.mixers.model import MixerNet

    tokens = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(3))
    for name in ("ema", "gated_linear_attn"):
        plain, conv = (MixerNet(name, vocab=20, n_classes=3, d=D, layers=2, seed=7, conv=c) for c in (0, 3))
        extra = {k for k in conv.state_dict() if ".conv." in k}
        assert extra and set(plain.state_dict()) == set(conv.state_dict()) - extra  # no module at conv=0
        # the conv draws from its own stream: every other weight is the same with or without it
        assert all(torch.equal(v, conv.state_dict()[k]) for k, v in plain.state_dict().items())
        # and conv=0 runs the block without it: the forward written out by hand, exactly
        with torch.no_grad():
            x = plain.embed(tokens)
            for block in plain.blocks:
                x = x + block.mixer(block.norm1(x))
                x = x + block.mlp(block.norm2(x))
            assert torch.equal(plain(tokens), plain.head(plain.norm(x)))
            assert not torch.equal(conv(tokens), plain(tokens))


def test_the_body_reads_its_mlp_and_the_attentions_heads_from_its_settings():
    """``mlp`` sizes every block's MLP (0: none, no parameter for it); ``heads`` reaches the softmax
    attentions and no other mixer; a body without an ``mlp`` setting has the GPT's 4·d."""
    from ema_core.studies.boundary.experiment import BoundaryModelConfig
    from ema_core.mixers.model import MixerNet

    sizes = {}
    for mlp in (0, 1, 2, 4):
        net = MixerNet.from_settings("softmax", BoundaryModelConfig(d=D, mlp=mlp, heads=2), 10, 2, seed=0)
        assert all((b.mlp is None and b.norm2 is None) if mlp == 0 else b.mlp[0].out_features == mlp * D
                   for b in net.blocks)
        assert net.blocks[0].mixer.heads == 2
        sizes[mlp] = net.params()
        net(torch.randint(0, 10, (2, 5))).sum().backward()  # it trains with or without its MLPs
    per_block = lambda e: 2 * D * e * D + e * D + D  # noqa: E731  the two linears and their biases
    assert sizes[4] - sizes[2] == 2 * (per_block(4) - per_block(2))
    assert sizes[1] - sizes[0] == 2 * (per_block(1) + 2 * D)  # and the norm before it
    seq = MixerNet.from_settings("ema3_seq", BoundaryModelConfig(d=D, heads=4), 10, 2, seed=0)
    assert seq.blocks[0].mixer.heads == 4
    assert MixerNet.from_settings("window_k", SimpleNamespace(d=D, layers=1, positions=True, window=4), 10, 2,
                                  seed=0).blocks[0].mlp[0].out_features == 4 * D
    with pytest.raises(ValueError, match=r"heads: d \(64\) must be divisible by heads, got 3"):
        BoundaryModelConfig(heads=3)


def test_the_body_reads_conv_from_its_settings_and_none_where_it_has_no_such_setting():
    from ema_core.mixers.model import MixerNet

    body = SimpleNamespace(d=D, layers=2, positions=True, window=4)
    assert MixerNet.from_settings("window_k", body, 10, 2, seed=0).conv == 0
    net = MixerNet.from_settings("window_k", SimpleNamespace(**vars(body), conv=4), 10, 2, seed=0)
    assert net.conv == 4 and net.blocks[0].conv.width == 4 and net.blocks[0].mixer.k == 4


@pytest.mark.parametrize("name", ["decay_linear_attn", "gated_linear_attn", "delta_net"])
def test_the_linear_attentions_end_in_a_per_head_norm_and_an_output_gate(name):
    mixer = build_mixer(name, D, seed=5).double()
    mixer.norm_eps = 0.0  # (its ε only keeps a zero output finite)
    x = _x(T=20)
    y = mixer(x)
    # the norm takes each head's output to unit RMS: the values' scale no longer reaches y
    with torch.no_grad():
        mixer.v.weight.mul_(10.0)
    torch.testing.assert_close(mixer(x), y, rtol=1e-10, atol=1e-12)
    # and the gate swish(W_r x) multiplies it: a zero gate closes the output
    with torch.no_grad():
        mixer.gate_out.weight.zero_()
    assert torch.equal(mixer(x), torch.zeros_like(y))


def test_the_gated_decay_is_a_low_rank_gate_with_a_bias():
    mixer = build_mixer("gated_linear_attn", 32, seed=0)
    assert tuple(mixer.gate_down.weight.shape) == (16, 32) and tuple(mixer.gate_up.weight.shape) == (32, 16)
    assert torch.equal(mixer.gate_bias, torch.zeros(32))  # GLA's start: σ(0)^(1/16) on every channel
    x = torch.zeros(1, 3, 32)
    torch.testing.assert_close(mixer.log_decay(x), torch.full((1, 4, 3, 8), math.log(0.5) / 16))


@pytest.mark.parametrize("chunk", [1, 7, 16, 100])
@pytest.mark.parametrize("name", ["linear_attn", "decay_linear_attn", "gated_linear_attn", "delta_net"])
def test_any_chunk_size_gives_the_reference_sums(name, chunk, monkeypatch):
    mixer = build_mixer(name, D, seed=6).double()
    monkeypatch.setattr(type(mixer), "chunk", chunk)
    x = _x(T=40)
    y, S = mixer.scan(x)
    y_ref, S_ref = mixer.reference(x)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(S, S_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bias", [-100.0, -2000.0])
def test_gates_that_close_inside_a_chunk_take_the_direct_form_exactly(bias):
    # a gate near 0 decays the state by more than e^LIMIT inside one chunk: the matmul form would
    # overflow there, so those rows take the direct form; values, state and gradients still match
    # the reference, stay finite in float32, and the choice of form keeps causality exact
    assert -bias / GatedLinearAttention.temperature * GatedLinearAttention.chunk > GatedLinearAttention.LIMIT
    mixer = build_mixer("gated_linear_attn", D, seed=7)
    with torch.no_grad():
        mixer.gate_bias.fill_(bias)
    x64 = _x(T=40).requires_grad_(True)
    m64 = build_mixer("gated_linear_attn", D, seed=7).double()
    m64.load_state_dict(mixer.state_dict())
    grads = []
    for path in (m64.scan, m64.reference):
        x64.grad = None
        m64.zero_grad(set_to_none=True)
        y, S = path(x64)
        (y.sum() + S.sum()).backward()
        grads.append([y.detach(), S.detach(), x64.grad.clone()] + [p.grad for p in m64.parameters()])
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)
    x32 = _x(torch.float32, T=40).requires_grad_(True)
    y32, _ = mixer.scan(x32)
    y32.sum().backward()
    assert torch.isfinite(y32).all() and torch.isfinite(x32.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mixer.parameters())
    torch.testing.assert_close(y32.double(), grads[1][0], rtol=1e-4, atol=1e-4)
    check_causal(mixer, T=40)


def test_plain_linear_attention_is_a_normalised_mean_of_the_values_with_no_norm_or_gate():
    mixer = build_mixer("linear_attn", D, seed=8).double()
    assert {n for n, _ in mixer.named_parameters()} == {"q.weight", "k.weight", "v.weight", "out.weight"}
    assert mixer.state_floats(10) == 4 * 4 * 4 + 4 * 4  # S and z of each of the 4 heads of 4
    mixer.eps = 0.0  # (its ε only guards the division)
    with torch.no_grad():  # the values are the inputs, and W_o shows each head's output as it is
        mixer.v.weight.copy_(torch.eye(D))
        mixer.out.weight.copy_(torch.eye(D))
    x = _x(T=40)
    x[..., ::4] = 1.0  # each head's first channel: the value 1 at every step
    y = mixer(x)
    # the weights φ(q_t)·φ(k_s) / Σ_s φ(q_t)·φ(k_s) sum to 1: a constant value comes back as it is
    torch.testing.assert_close(y[..., ::4], torch.ones_like(y[..., ::4]), rtol=0, atol=1e-12)
    # and, all positive, they keep every output between the smallest and largest value so far
    assert (y >= x.cummin(1).values - 1e-12).all() and (y <= x.cummax(1).values + 1e-12).all()


@pytest.mark.parametrize("path", [lambda *a: delta_chunked(*a, chunk=1), lambda *a: delta_chunked(*a, chunk=3),
                                  lambda *a: delta_chunked(*a, chunk=100), delta_steps],
                         ids=["chunk=1", "chunk=3", "chunk=100", "steps"])
def test_the_delta_rule_with_beta_one_writes_each_value_under_its_key_replacing_the_old(path):
    g = torch.Generator().manual_seed(11)
    basis = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))[0].T  # orthonormal keys
    order = [0, 1, 2, 3, 1, 2, 1]  # keys 1 and 2 written again, with new values
    k = basis[order][None, None]  # (1, 1, 7, 4)
    v = torch.randn(1, 1, 7, 5, generator=g, dtype=torch.float64)
    o, S = path(k, k, v, torch.ones(1, 1, 7, dtype=torch.float64))  # read each step with the key just written
    # reading a key gives the value last written under it, exactly: the write replaced the old one
    # (linear attention would give the sum of every value written under it)
    torch.testing.assert_close(o, v, rtol=0, atol=1e-12)
    last = {key: t for t, key in enumerate(order)}
    torch.testing.assert_close(basis @ S[0, 0], torch.stack([v[0, 0, last[i]] for i in range(4)]), rtol=0, atol=1e-12)


def test_the_delta_rule_reads_unit_keys_and_a_write_strength_per_head():
    mixer = build_mixer("delta_net", 32, seed=0).double()
    assert tuple(mixer.beta.weight.shape) == (4, 32) and mixer.state_floats(10) == 4 * 8 * 8
    q, k, v, beta = mixer._qkvb(_x(T=9).repeat(1, 1, 2))
    assert q.shape == k.shape == v.shape == (2, 4, 9, 8) and beta.shape == (2, 4, 9)
    assert ((beta > 0) & (beta < 1)).all()
    norms = torch.linalg.vector_norm(torch.cat([q, k]), dim=-1)
    assert ((norms > 1 - 1e-4) & (norms <= 1)).all()  # unit but for the L2 norm's ε
