"""The language-model training loop and the `lm` experiment: schedule, batches, evaluation, resume."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ema_core.experiments import REGISTRY, Cancelled, NullReporter, build_config
from ema_core.studies.content.learning_rates import TABLES as RATE_TABLES
from ema_core.lm.sizes import ModelChoice, build_model, param_count, spen_config
from ema_core.lm.ngram import BASELINES, COPY_MIX
from ema_core.lm.token_classes import BANDS, CLASSES, SPLITS
from ema_core.lm.train import CLASS_SPLITS, Streams, TrainConfig, batch_at, evaluate, lr_at, train_lm

V = 64
# A small model of each kind: the tiny size narrowed further, so a test trains in seconds.
SMALL = dict(d_model=32, n_layers=2, n_heads=2, d_ff=96)

# The content study's rates by size and model, as its tables hold them (a table per size).
AUTO_LR = {t.name: t.rates for t in RATE_TABLES}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _streams(n_train=20_000, n_val=2_000, seed=0) -> Streams:
    # A learnable stream: a noisy cycle through the vocabulary, so the loss can fall well below ln V.
    rng = np.random.default_rng(seed)

    def make(n):
        base = np.arange(n) % V
        noise = rng.random(n) < 0.1
        return np.where(noise, rng.integers(0, V, n), base).astype(np.int64)

    return Streams(train=make(n_train), val=make(n_val), val_bytes=lambda ids: 3 * len(ids))


def _model(kind="spen", **kw):
    return build_model(ModelChoice(model=kind), vocab_size=V, seq_len=64, seed=0,
                       **{**SMALL, **kw} if kind == "spen" else SMALL)


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{**dict(steps=40, batch=4, seq_len=32, lr=1e-2, warmup=5, eval_every=20, eval_tokens=512,
                                 log_every=5, checkpoint_every=10), **kw})


def test_learning_rate_warms_up_then_follows_the_cosine():
    cfg = TrainConfig(steps=110, warmup=10, lr=1.0, min_lr_frac=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.55)  # halfway down the cosine
    assert lr_at(110, cfg) == pytest.approx(0.1)
    lrs = [lr_at(s, cfg) for s in range(10, 110)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    with pytest.raises(ValueError, match="warmup"):
        TrainConfig(steps=5, warmup=10)


def test_batches_are_a_function_of_seed_rank_and_step():
    train = torch.arange(1000)
    cfg = _cfg(batch=3, seq_len=8)
    x, y = batch_at(train, 7, cfg, seed=1)
    assert x.shape == y.shape == (3, 8)
    assert torch.equal(y[:, :-1], x[:, 1:])  # targets are the inputs shifted by one
    assert torch.equal(batch_at(train, 7, cfg, seed=1)[0], x)
    assert not torch.equal(batch_at(train, 8, cfg, seed=1)[0], x)
    assert not torch.equal(batch_at(train, 7, cfg, seed=1, rank=1)[0], x)
    with pytest.raises(ValueError, match="shorter than seq_len"):
        batch_at(torch.arange(5), 0, cfg, seed=0)


class _Uniform(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        return torch.zeros(*idx.shape, V) + self.w


def test_evaluation_of_a_uniform_model_is_ln_v_and_bits_per_byte_counts_bytes():
    s = _streams(n_val=1001)
    ev = evaluate(_Uniform(), s, seq_len=100)
    assert ev["tokens"] == 1000
    assert ev["loss"] == pytest.approx(math.log(V))
    assert ev["ppl"] == pytest.approx(V)
    assert ev["bpb"] == pytest.approx(math.log(V) / (3 * math.log(2)))  # 3 bytes per token here
    assert evaluate(_Uniform(), s, seq_len=100, max_tokens=300)["tokens"] == 300


@pytest.mark.parametrize("kind", ["spen", "gpt"])
def test_training_lowers_the_held_out_loss(kind):
    model, s = _model(kind), _streams()
    before = evaluate(model, s, 32)["loss"]
    rep = NullReporter()
    out = train_lm(model, s, _cfg(steps=60), seed=0, reporter=rep)
    assert out["final"]["loss"] < before - 1.0
    assert [c["step"] for c in out["curve"]] == [20, 40, 60]
    keys = {k for _, m in rep.events for k in m}
    assert {"train/loss", "train/lr", "val/loss", "val/ppl", "val/bpb"} <= keys
    assert out["tokens"] == 60 * 4 * 32 and out["tokens_per_s"] > 0


@pytest.mark.parametrize("kind", ["spen", "gpt"])
def test_checkpoint_and_resume_is_bit_identical(kind):
    s, cfg = _streams(), _cfg()
    straight = _model(kind)
    ref = train_lm(straight, s, cfg, seed=3)
    rep = NullReporter(stop_after_checkpoints=2)  # stops at step 20
    resumed = _model(kind)
    with pytest.raises(Cancelled) as info:
        train_lm(resumed, s, cfg, seed=3, reporter=rep, extra_state={"config": "a"})
    assert info.value.step == 20
    rep.stop_after_checkpoints = None
    fresh = _model(kind)  # a new process would start from a fresh model and load the checkpoint
    out = train_lm(fresh, s, cfg, seed=3, reporter=rep, extra_state={"config": "a"})
    for (name, a), (_, b) in zip(straight.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name
    assert out["final"]["loss"] == ref["final"]["loss"]
    assert out["curve"] == ref["curve"]  # the class sums of the steps before the checkpoint too
    assert all(set(CLASS_SPLITS) <= set(c) for c in out["curve"])
    assert {k: out["final"][k] for k in CLASS_SPLITS} == {k: ref["final"][k] for k in CLASS_SPLITS}
    with pytest.raises(ValueError, match="another config"):
        train_lm(_model(kind), s, cfg, seed=3, reporter=rep, extra_state={"config": "b"})


@pytest.mark.parametrize("kind", ["spen", "gpt"])
def test_a_shorter_wsd_run_is_the_longer_one_until_its_decay_begins(kind):
    # What makes an annealed point a cool-down branched off the long run's plateau: the same warm-up, peak
    # and batches, so the 20-step run's evaluations at 8 and 16 steps are the 40-step run's, bit for bit.
    s = _streams()
    long = train_lm(_model(kind), s, _cfg(steps=40, schedule="wsd", decay_frac=0.2, eval_every=8), seed=3)
    short = train_lm(_model(kind), s, _cfg(steps=20, schedule="wsd", decay_frac=0.2, eval_every=8), seed=3)
    assert [c["step"] for c in short["curve"]] == [8, 16, 20]
    assert short["curve"][:2] == long["curve"][:2]
    assert short["curve"][2]["loss"] != long["curve"][2]["loss"]  # then it cools down, the long run goes on


def test_lm_config_errors_are_named():
    with pytest.raises(ValueError, match="^model: must be one of 'spen' or 'gpt' \\(got 'mamba'\\)$"):
        build_config("content", overrides={"model": "mamba"})
    with pytest.raises(ValueError, match="^size: must be one of 'micro', 'tiny', 'small' or 'paper' \\(got 'huge'\\)$"):
        build_config("content", overrides={"size": "huge"})
    with pytest.raises(ValueError, match="^predictor: must be one of 'linear', 'linear_attention' or "):
        build_config("content", overrides={"predictor": "nope"})
    with pytest.raises(ValueError, match="^train.lr: expects a number in \\(0, 10\\] or auto \\(got -1\\)$"):
        build_config("content", overrides={"lr": -1})
    with pytest.raises(ValueError, match="the linear predictor .* attn_input must be .state."):
        build_config("content", overrides={"predictor": "linear", "attn_input": "sequence"})
    with pytest.raises(ValueError, match="val_doc|persuasion|novel"):
        build_config("content", overrides={"val_doc": "ulysses"})
    with pytest.raises(ValueError, match="no such file or folder"):
        build_config("content", overrides={"corpus": "./no/such/corpus.txt"})
    cfg = build_config("content", preset="tiny", overrides={"predictor": "softmax_attention", "attn_input": "tokens"})
    assert cfg.size == "tiny"


def test_lm_experiment_on_austen(tmp_path, monkeypatch):
    # The whole path on the embedded corpus, a few steps: data, tokenizer artifact, model, result.
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    cfg = build_config("content", preset="tiny", overrides=dict(steps=6, batch=2, seq_len=32, warmup=2, eval_every=3,
                                                           eval_tokens=256, final_eval_tokens=2048, vocab_size=512))
    rep = NullReporter()
    result = REGISTRY["content"].run(cfg, rep)
    s = result["summary"]
    for key in ("model", "predictor", "params", "tokens", "val_loss", "val_ppl", "val_bpb", "tokens_per_s", "seconds"):
        assert key in s, key
    assert s["model"] == "spen" and s["tokens"] == 6 * 2 * 32 and s["vocab_size"] == 512
    assert s["val_ppl"] == pytest.approx(math.exp(s["val_loss"]))
    assert 0 < s["val_bpb"] < 10
    assert result["tables"]["lm_eval"] == [{"split": "val", "loss": s["val_loss"], "ppl": s["val_ppl"],
                                            "bpb": s["val_bpb"]}]
    # The final loss split by token class and band, as nats per token: weighted by tokens, the classes
    # give back the loss itself; the split of every evaluation is a result table (tests/test_token_classes_store.py).
    for split in SPLITS:  # every partition adds up to val_loss
        parts = s[split.key]
        assert list(parts) == list(split.classes)
        assert sum(p["tokens"] for p in parts.values()) == s["val_tokens"]
        total = sum(p["tokens"] * p["loss"] for p in parts.values() if p["tokens"])
        assert total / s["val_tokens"] == pytest.approx(s["val_loss"], abs=1e-6)
        assert all((p["loss"] is None) == (p["tokens"] == 0) for p in parts.values())
    rows = result["tables"]["lm_token_classes"]
    assert {r["evaluation"] for r in rows} == {"periodic", "final", *BASELINES, COPY_MIX}
    # the baselines and the copy mix score the final evaluation's very tokens, by the same classes
    for name in (*BASELINES, COPY_MIX):
        for split in SPLITS:
            mine = {(r["class"], r["tokens"]) for r in rows if (r["evaluation"], r["partition"]) == (name, split.partition)}
            assert mine == {(r["class"], r["tokens"]) for r in rows
                            if (r["evaluation"], r["partition"]) == ("final", split.partition)}
        assert s["baselines"][name]["val_loss"] > 0
    assert s["baselines"]["bigram"]["cache_weight"] is None and 0 < s["baselines"]["cache"]["cache_weight"] < 1
    assert s["baselines"]["kn_trigram"]["cache_weight"] is None and 0 < s["baselines"][COPY_MIX]["cache_weight"] < 1
    assert b'"model"' in rep.artifacts["tokenizer.json"]  # the tokenizer travels with the run
    assert (s["lr"], s["lr_auto"]) == (3e-3, False)  # the tiny preset's own number


def test_train_lr_auto_is_kept_by_the_config_and_resolved_by_the_run():
    # The config says "auto" (it is what the run id hashes and the store groups by) ...
    cfg = build_config("content", preset="quick", overrides={"model": "gpt"})
    assert cfg.train.lr == "auto" and '"lr":"auto"' in cfg.model_dump_json()
    # ... and names one rate per model and size, the one chosen on dev.
    assert (cfg.lr, build_config("content", preset="quick").lr) == (AUTO_LR["tiny"]["gpt"], AUTO_LR["tiny"]["spen"])
    assert build_config("content", preset="quick", overrides={"lr": 1e-3}).lr == 1e-3  # a number is itself
    # A model and size with no chosen rate is refused with the config, naming them, never trained at another rate.
    with pytest.raises(ValueError, match=r"^train.lr: auto, but no rates were chosen at these settings \(tiny: size "
                                         r"'tiny' there, 'small' here; micro: size 'micro' there, 'small' here\)"):
        build_config("content", preset="quick", overrides={"model": "gpt", "size": "small"})
    # The rates bind by size: a longer budget at tiny reads tiny's, and the run records that they were
    # chosen at other settings.
    quick, long = (build_config("content", preset=p).rate_table() for p in ("quick", "long"))
    assert (quick.table.name, quick.matched, long.table.name, long.matched) == ("tiny", True, "tiny", False)
    # The loop itself trains at a number only: "auto" must have been resolved for a model first.
    with pytest.raises(ValueError, match="resolve train.lr=auto first"):
        train_lm(_model("gpt"), _streams(), _cfg(lr="auto"), seed=0)


def test_a_run_at_train_lr_auto_trains_at_the_chosen_rate_records_it_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    cfg = build_config("content", preset="quick", overrides=dict(model="gpt", steps=4, batch=2, seq_len=32, warmup=1,
                                                            eval_every=2, eval_tokens=256, final_eval_tokens=1024,
                                                            vocab_size=512, checkpoint_every=2, log_every=1))
    rep = NullReporter(stop_after_checkpoints=1)  # stops at step 2, its checkpoint naming the config ("auto")
    with pytest.raises(Cancelled):
        REGISTRY["content"].run(cfg, rep)
    rep.stop_after_checkpoints = None
    s = REGISTRY["content"].run(cfg, rep)["summary"]  # resumes: the stored config is recognised as this one
    assert (s["lr"], s["lr_auto"]) == (AUTO_LR["tiny"]["gpt"], True)
    assert (s["rate_table"], s["rates_matched"]) == ("tiny", False)  # 4 steps, not the 300 it was chosen at
    logged = [m["train/lr"] for _, m in rep.events if "train/lr" in m]
    assert len(logged) == 4 and max(logged) == pytest.approx(AUTO_LR["tiny"]["gpt"])  # the peak, after warm-up


@pytest.mark.parametrize("model", ["spen", "gpt"])
def test_lm_on_the_command_line(tmp_path, monkeypatch, model):
    # The command with the tiny preset, shortened to a few steps: every promised key.  The
    # command's main in process (its console entry is tests/test_cli.py's to start); the run itself is
    # still the runner's worker process.
    import json

    from test_cli import in_process

    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    sets = dict(model=model, steps=4, batch=2, warmup=1, eval_every=2, eval_tokens=512, final_eval_tokens=2048)
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    proc = in_process("run", "content", "--preset", "tiny", *args, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout)
    for key in ("model", "predictor", "params", "tokens", "val_loss", "val_ppl", "val_bpb", "tokens_per_s", "seconds"):
        assert key in record, key
    assert record["model"] == model and record["tokens"] == 4 * 2 * 256 and record["ingested"] is True
    assert sum(p["tokens"] for p in record["token_classes"].values()) == record["val_tokens"]
    assert (record["lr"], record["lr_auto"]) == (3e-3, False)  # the rate it trained at: the tiny preset's
    assert record["params"] == pytest.approx(1_378_560, rel=0.05)  # the tiny preset, SPEN and GPT alike
    assert (tmp_path / "home" / "runs" / record["run_id"] / "artifacts" / "tokenizer.json").exists()


# -- the learning-rate sweep (bench.lm_lr): scored on a dev slice of the training text ---------------

def test_dev_slice_is_the_end_of_the_training_stream_and_shares_no_token():
    from bench.lm_lr import dev_split

    stream = np.arange(1000)
    train, dev = dev_split(stream, 200, seq_len=32)
    assert np.array_equal(dev, stream[-200:]) and np.array_equal(train, stream[:800])
    assert not set(train.tolist()) & set(dev.tolist())
    with pytest.raises(ValueError, match="too short"):
        dev_split(stream, 990, seq_len=32)
    with pytest.raises(ValueError, match="window"):
        dev_split(stream, 10, seq_len=32)


def test_lr_sweep_scores_every_setting_on_the_dev_slice_and_picks_the_lowest():
    from bench.lm_lr import sweep

    small = {"data.vocab_size": 300, "data.max_chars": 100_000, "train.seq_len": 32, "train.batch": 2}
    r = sweep(models=("spen", "gpt"), lrs=(1e-3, 1e-2), warmups=(2,), seeds=(0,), dev_tokens=1024, steps=3,
              overrides=small, threads=1)
    assert r["dev_tokens"] == 1024 and r["steps"] == 3 and r["preset_warmup"] == 200
    assert r["preset_lr"] == {"spen": 1e-2, "gpt": 3e-3}  # the quick preset's rates, each chosen on dev
    assert [(row["model"], row["lr"]) for row in r["rows"]] == [("spen", 1e-3), ("spen", 1e-2), ("gpt", 1e-3),
                                                                ("gpt", 1e-2)]
    for model in ("spen", "gpt"):
        best = min((row for row in r["rows"] if row["model"] == model), key=lambda row: row["dev_loss"])
        assert r["choice"][model]["lr"] == best["lr"] and r["choice"][model]["dev_loss"] == best["dev_loss"]
    assert all(math.isfinite(row["dev_loss"]) and row["warmup"] == 2 for row in r["rows"])
    # the same settings again give the same losses: every setting sees the same batches and dev tokens
    again = sweep(models=("gpt",), lrs=(1e-2,), warmups=(2,), seeds=(0,), dev_tokens=1024, steps=3,
                  overrides=small, threads=1)
    assert again["rows"][0]["dev_loss"] == r["rows"][3]["dev_loss"]


def test_the_long_preset_trains_ten_million_tokens_at_tiny_on_a_plateau_then_a_decay():
    cfg = build_config("content", preset="long")
    assert cfg.size == "tiny" and cfg.train.schedule == "wsd"
    assert cfg.train.steps * cfg.train.batch * cfg.train.seq_len >= 10_000_000
    assert cfg.train.steps // cfg.train.eval_every >= 10  # a curve with points to fit
    assert cfg.train.checkpoint_every <= cfg.train.eval_every  # resumable, losing at most one interval
    assert (cfg.lr, build_config("content", preset="long", overrides={"model": "gpt"}).lr) == \
        (AUTO_LR["tiny"]["spen"], AUTO_LR["tiny"]["gpt"])


def test_the_second_size_trains_at_the_fresh_budget_s_tokens_per_parameter():
    def per_param(cfg) -> float:
        tokens = cfg.train.steps * cfg.train.batch * cfg.train.seq_len
        return tokens / param_count(spen_config(cfg, vocab_size=cfg.data.vocab_size))

    fresh, micro = build_config("content", preset="fresh"), build_config("content", preset="fresh_micro")
    assert (fresh.size, micro.size) == ("tiny", "micro") and micro.data.corpus == fresh.data.corpus
    assert per_param(micro) == pytest.approx(per_param(fresh), rel=1e-3) == pytest.approx(7.43, abs=0.01)
    assert micro.train.schedule == "wsd" and micro.train.steps // micro.train.eval_every >= 10
    # micro's rates were chosen on dev at this very budget: "auto" resolves there, as at tiny.
    assert (micro.lr, build_config("content", preset="fresh_micro", overrides={"model": "gpt"}).lr) == \
        (AUTO_LR["micro"]["spen"], AUTO_LR["micro"]["gpt"])
