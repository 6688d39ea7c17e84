"""SPEN, its predictors and the GPT baseline: causality, sizes, sparsity, fixed rates, determinism, learning."""
import pytest
import torch

from ema_core.lm.gpt import GPT, GPTConfig, count_params
from ema_core.lm.predictors import ATTN_INPUTS, PREDICTORS, causal_linear_attention, phi
from ema_core.lm.sizes import SIZES, ModelChoice, build_model, gpt_config, matched_gpt_config, param_count, spen_config
from ema_core.lm.spen import SPEN, SPENConfig, topk_count, topk_mask, topk_sparsify


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # These models are tiny: on a shared machine a second thread costs far more in
    # synchronisation than it gains (a step was 30× slower with two).
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


WIRINGS = [("linear", "state")] + [(p, a) for p in ("linear_attention", "softmax_attention") for a in ATTN_INPUTS]
TINY = dict(vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_ff=32)


def _spen(predictor="linear", attn_input="state", seed=0, **kw):
    return SPEN(SPENConfig(**{**TINY, **kw}, predictor=predictor, attn_input=attn_input), seed=seed)


def _gpt(seed=0, **kw):
    return GPT(GPTConfig(**{**TINY, "seq_len": 80, **kw}), seed=seed)


def _maxdiff(a, b) -> float:
    return (a - b).abs().max().item() if a.numel() else 0.0


MODELS = {f"spen-{p}-{a}": (lambda p=p, a=a: _spen(p, a)) for p, a in WIRINGS} | {"gpt": lambda: _gpt(seq_len=160)}


# -- causality ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MODELS))
def test_logits_depend_on_past_tokens_only(name):
    # T = 160 crosses the scan's and linear attention's chunk boundaries (32, 64) several times; a
    # token changed inside a later chunk (100, 150) is what let the old `S.cumsum − S` leak into the
    # earlier positions of its chunk (3e-8 here; at T = 70 the leak happened to round away).
    model = MODELS[name]().eval()
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 50, (2, 160), generator=g)
    with torch.no_grad():
        base = model(idx)
        for t in (0, 31, 32, 65, 100, 130, 150, 159):
            other = idx.clone()
            other[:, t] = (other[:, t] + 1 + torch.randint(0, 48, (2,), generator=g)) % 50
            out = model(other)
            # exact: not even a rounding error may travel backwards in time (a tolerance hid one)
            leak = _maxdiff(out[:, :t], base[:, :t])
            assert torch.equal(out[:, :t], base[:, :t]), f"position < {t} saw token {t}: {leak:.3g}"
            assert _maxdiff(out[:, t], base[:, t]) > 1e-4, f"position {t} ignores its own token"
            if t + 1 < idx.shape[1]:
                assert _maxdiff(out[:, t + 1], base[:, t + 1]) > 1e-4, f"position {t + 1} ignores token {t}"


@pytest.mark.parametrize("predictor,attn_input", WIRINGS)
def test_prediction_never_sees_the_token_it_predicts(predictor, attn_input):
    block = _spen(predictor, attn_input).blocks[0].eval()
    x = torch.randn(2, 40, 16, generator=torch.Generator().manual_seed(1))
    t = 20
    y = x.clone()
    y[:, t] += torch.randn(2, 16)
    with torch.no_grad():
        _, h_x, xh_x = block.predict(x)
        _, h_y, xh_y = block.predict(y)
    assert torch.equal(h_x[:, : t + 1], h_y[:, : t + 1])  # traces at t hold x_{<t}
    assert torch.equal(xh_x[:, : t + 1], xh_y[:, : t + 1])  # x̂_t too, bit for bit
    assert (xh_x[:, t + 1] - xh_y[:, t + 1]).abs().max().item() > 1e-5  # x_t informs x̂_{t+1}


def test_traces_are_the_kernel_traces_of_the_past_inputs():
    block = _spen().blocks[0]
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    block = block.double()
    u, h, _ = block.predict(x)
    a = torch.tensor((0.5, 0.1, 0.02), dtype=torch.float64)
    ref = torch.zeros(1, 3, 16, dtype=torch.float64)
    for t in range(9):
        assert torch.allclose(h[:, t], ref, atol=1e-12)  # h_t from u_0..u_{t−1}
        ref = (1 - a)[None, :, None] * ref + a[None, :, None] * u[:, t, None]


def test_causal_linear_attention_matches_the_quadratic_form():
    g = torch.Generator().manual_seed(2)
    q, k = (phi(torch.randn(2, 3, 70, 4, generator=g, dtype=torch.float64)) for _ in range(2))
    v = torch.randn(2, 3, 70, 5, generator=g, dtype=torch.float64)
    w = (q @ k.transpose(-1, -2)).tril()  # (B, H, T, T)
    ref = (w @ v) / w.sum(-1, keepdim=True)
    for chunk in (8, 64, 128):
        assert torch.allclose(causal_linear_attention(q, k, v, chunk=chunk), ref, atol=1e-10)


@pytest.mark.parametrize("chunk", [8, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causal_linear_attention_is_causal_bit_for_bit(chunk, dtype):
    # A later position changed anywhere, in the same chunk as earlier outputs or a later one,
    # leaves every earlier output exactly as it was.  `S.cumsum − S` failed this (4.5e-8 in
    # float32): the perturbed chunk's own state was added and subtracted again.
    g = torch.Generator().manual_seed(4)
    q, k = (phi(torch.randn(2, 3, 70, 4, generator=g, dtype=dtype)) for _ in range(2))
    v = torch.randn(2, 3, 70, 5, generator=g, dtype=dtype)
    base = causal_linear_attention(q, k, v, chunk=chunk)
    for t in (1, 5, 7, 8, 33, 63, 64, 69):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t] *= 3.0
        v2[:, :, t] += 1.0
        out = causal_linear_attention(q, k2, v2, chunk=chunk)
        assert torch.equal(out[:, :, :t], base[:, :, :t]), (t, _maxdiff(out[:, :, :t], base[:, :, :t]))
        assert _maxdiff(out[:, :, t], base[:, :, t]) > 1e-3  # and t itself does see it


# -- sizes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("predictor,attn_input", WIRINGS)
def test_gpt_matches_spen_size_at_every_size(size, predictor, attn_input):
    choice = ModelChoice(size=size, predictor=predictor, attn_input=attn_input)
    s = param_count(spen_config(choice))
    g = param_count(gpt_config(choice))
    assert abs(g / s - 1) <= 0.05, (s, g)


def test_paper_size_is_about_130M():
    paper = spen_config(ModelChoice(size="paper"))
    assert 120e6 <= param_count(paper) <= 140e6
    assert paper.k == 138  # 6 % of 2,304 FFN units


def test_meta_count_equals_the_built_model():
    cfg = spen_config(ModelChoice(predictor="softmax_attention", attn_input="state"), vocab_size=300)
    assert param_count(cfg) == count_params(SPEN(cfg))
    gcfg = matched_gpt_config(cfg, seq_len=64)
    assert param_count(gcfg) == count_params(GPT(gcfg))


def test_build_model_from_a_size_name():
    wiring = dict(size="tiny", predictor="linear_attention", attn_input="sequence")
    m = build_model(ModelChoice(model="spen", **wiring), vocab_size=300, seed=3)
    assert isinstance(m, SPEN) and m.cfg.vocab_size == 300 and m.cfg.d_model == SIZES["tiny"].shape.d_model
    assert (m.cfg.predictor, m.cfg.attn_input) == ("linear_attention", "sequence")
    g = build_model(ModelChoice(model="gpt", **wiring), vocab_size=300)
    assert isinstance(g, GPT) and g.cfg.seq_len == SIZES["tiny"].seq_len
    # The GPT is sized to the SPEN of the same choice, not to the linear one.
    assert g.cfg.d_ff != build_model(ModelChoice(model="gpt"), vocab_size=300).cfg.d_ff
    # The choices are typed from the registries that build them: one line naming the setting and its values.
    with pytest.raises(ValueError, match="size\n.*'micro', 'tiny', 'small' or 'paper'"):
        ModelChoice(size="huge")
    with pytest.raises(ValueError, match="model\n.*'spen' or 'gpt'"):
        ModelChoice(model="mamba")


# -- configuration --------------------------------------------------------------------------

def test_config_rejects_unknown_or_meaningless_wiring():
    assert set(PREDICTORS) == {"linear", "linear_attention", "softmax_attention"}
    with pytest.raises(ValueError, match="predictor\n.*'linear', 'linear_attention' or 'softmax_attention'"):
        SPENConfig(vocab_size=10, predictor="mamba")
    with pytest.raises(ValueError, match="attn_input\n.*'state', 'sequence' or 'tokens'"):
        SPENConfig(vocab_size=10, predictor="softmax_attention", attn_input="everything")
    for a in ("tokens", "sequence"):
        with pytest.raises(ValueError, match="linear predictor"):
            SPENConfig(vocab_size=10, predictor="linear", attn_input=a)
    with pytest.raises(ValueError, match="divisible"):
        SPENConfig(vocab_size=10, d_model=30, n_heads=4, predictor="softmax_attention")
    with pytest.raises(ValueError):
        SPENConfig(vocab_size=10, alphas=(0.5, 0.0))
    with pytest.raises(ValueError):
        SPENConfig(vocab_size=10, extra_knob=1)
    with pytest.raises(ValueError, match="exceeds"):
        _gpt(seq_len=8)(torch.zeros(1, 9, dtype=torch.long))


# -- sparse FFN -----------------------------------------------------------------------------

def test_topk_keeps_six_percent_of_units():
    assert [topk_count(f, 0.06) for f in (1, 10, 25, 100, 384, 2304)] == [1, 1, 2, 6, 23, 138]
    a = torch.randn(4, 7, 384)
    mask = topk_mask(a, topk_count(384, 0.06))
    assert (mask.sum(-1) == 23).all()
    assert torch.equal(a.masked_fill(~mask, float("-inf")).amax(-1), a.amax(-1))  # the largest ones
    assert (a.masked_fill(mask, float("inf")).amin(-1) <= a.masked_fill(~mask, float("inf")).amin(-1)).all()
    for grad in ("straight_through", "masked"):
        assert torch.equal(topk_sparsify(a, 23, grad), a * mask)


def test_topk_gradient_is_straight_through_or_masked():
    a = torch.randn(3, 50, requires_grad=True)
    w = torch.randn(3, 50)
    mask = topk_mask(a.detach(), 3)
    (topk_sparsify(a, 3, "straight_through") * w).sum().backward()
    assert torch.equal(a.grad, w)  # the mask is the identity in the backward
    a.grad = None
    (topk_sparsify(a, 3, "masked") * w).sum().backward()
    assert torch.equal(a.grad, w * mask)


def test_ffn_output_uses_k_units_per_token():
    model = _spen(d_ff=100)
    ffn = model.blocks[0].ffn
    assert ffn.k == 6
    acts = []
    ffn.c_proj.register_forward_hook(lambda m, i, o: acts.append(i[0]))
    model(torch.randint(0, 50, (2, 12)))
    assert ((acts[0] != 0).sum(-1) == 6).all()


# -- fixed rates, no positions, determinism ---------------------------------------------------

@pytest.mark.parametrize("predictor,attn_input", WIRINGS)
def test_rates_are_buffers_never_parameters(predictor, attn_input):
    model = _spen(predictor, attn_input)
    rates = torch.tensor((0.5, 0.1, 0.02), dtype=torch.float64)
    buffers = dict(model.named_buffers())
    assert all(torch.equal(buffers[f"blocks.{i}.alphas"], rates) for i in range(2))
    for name, p in model.named_parameters():
        assert "alpha" not in name
        assert not (p.numel() == 3 and torch.allclose(p.detach().double().flatten(), rates)), name
    assert all("alphas" in k for k in model.state_dict() if "alphas" in k)


def test_spen_has_no_positional_embedding():
    model = _spen()
    assert not any("wpe" in n or "pos" in n for n, _ in model.named_parameters())
    tied_and_blocks = count_params(model) - 50 * 16  # tied embedding counted once
    assert tied_and_blocks == sum(p.numel() for n, p in model.named_parameters() if not n.startswith("wte"))
    assert model(torch.randint(0, 50, (1, 500))).shape == (1, 500, 50)  # any length: nothing is per position
    assert model.lm_head.weight is model.wte.weight
    gpt = _gpt()
    assert gpt.lm_head.weight is gpt.wte.weight


@pytest.mark.parametrize("make", [lambda s: _spen("softmax_attention", "state", seed=s), lambda s: _gpt(seed=s)])
def test_init_is_a_function_of_the_seed(make):
    state = torch.random.get_rng_state()
    a, b, c = make(7).state_dict(), make(7).state_dict(), make(8).state_dict()
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is not touched
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


# -- learning -------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: _spen(vocab_size=32, d_model=64, d_ff=256, n_layers=2),
    lambda: _gpt(vocab_size=32, d_model=64, d_ff=128, n_layers=2, seq_len=32),
], ids=["spen", "gpt"])
def test_overfits_a_tiny_batch(make):
    torch.manual_seed(0)
    model = make()
    idx = torch.randint(0, 32, (2, 33), generator=torch.Generator().manual_seed(5))
    x, y = idx[:, :-1], idx[:, 1:]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 32), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
