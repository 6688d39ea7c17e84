"""Every context mixer against its float64 reference loop: outputs, final state, gradients, exact causality.

A mixer added to ``ema_core.mixers.registry.MIXERS`` is checked here with no change to this file.
"""
import pytest
import torch

from ema_core.mixers import MIXER_NAMES
from ema_core.mixers.registry import CLASSES, MIXERS, build_mixer, by_name, mixer_options

NAMES = list(MIXERS)
D = 16
T = 70  # more than two of the chunked paths' 32-step chunks, and not a multiple of one


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
    # perturbing x_t changes no output before t, bit for bit (tolerance 0), at chunk edges too
    mixer = build_mixer(name, D, seed=4)
    x = _x(torch.float32)
    with torch.no_grad():
        y = mixer(x)
        for t in (0, 1, 31, 32, 33, 63, 64, T - 1):
            bumped = x.clone()
            bumped[:, t] += torch.randn(bumped[:, t].shape, generator=torch.Generator().manual_seed(t)) * 3
            y2 = mixer(bumped)
            assert torch.equal(y2[:, :t], y[:, :t]), (name, t)
            assert not torch.equal(y2[:, t:], y[:, t:]), (name, t)  # and it does reach what comes after


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
    from ema_core.experiments.boundary import BoundaryModelConfig

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

    net = MixerNet(name, vocab=20, n_classes=3, d=16, layers=2, seed=0)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 20, (3, 50), generator=g)
    with torch.no_grad():
        logits = net(tokens)
        assert logits.shape == (3, 50, 3)
        changed = tokens.clone()
        changed[:, 40] = (changed[:, 40] + 1) % 20
        assert torch.equal(net(changed)[:, :40], logits[:, :40])
    assert net.state_floats(50) == 2 * build_mixer(name, 16).state_floats(50) and net.params() > 0
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
