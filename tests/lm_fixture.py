"""Finished runs of the language-model experiment for page tests, as a finished job leaves them.

``make_lm_runs(home, specs, seeds)`` runs the real experiment (``REGISTRY["content"]``, in-process) at
``TINY`` settings for every (spec, seed), writes one run folder each (config.json, events, status
"done", result.json) and ingests them with ``store.ingest``.  Each (spec, seed, overrides) trains once
per test run (tests/runcache.py: about a second on two cores, the first also training the 512-token
BPE) and every later caller writes a copy of it.  The numbers mean little at this size; the shape of
what a run writes (curves, the final evaluation, the summary) is the real one.

With ``real=False`` the rows are synthetic, instant and known (a test input, never a result): the
GPT below SPEN, the state readers within noise of each other, the raw-token control in between.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ema_core.experiments import build_config
from ema_core.studies.content import KIND
from finished_run import real_run, write_and_ingest

# The quick preset shrunk to about a second per run: six steps of two 32-token sequences.
TINY = dict(steps=6, batch=2, seq_len=32, warmup=2, eval_every=2, eval_tokens=256, final_eval_tokens=1024,
            vocab_size=512, log_every=2, threads=1)
SPECS = {  # short names for the variants the tests use
    "gpt": dict(model="gpt", predictor="linear", attn_input="state"),
    "linear": dict(model="spen", predictor="linear", attn_input="state"),
    "softmax_state": dict(model="spen", predictor="softmax_attention", attn_input="state"),
    "softmax_tokens": dict(model="spen", predictor="softmax_attention", attn_input="tokens"),
    "linear_attention_state": dict(model="spen", predictor="linear_attention", attn_input="state"),
}
# Synthetic final losses (nats/token) per variant before per-seed noise.
LOSS = {"gpt": 4.0, "linear": 5.0, "softmax_state": 5.01, "softmax_tokens": 4.5, "linear_attention_state": 4.99}


def _spec(spec) -> tuple[str, dict]:
    return (spec, SPECS[spec]) if isinstance(spec, str) else ("custom", dict(spec))


def _real_run(variant: dict, seed: int, overrides: dict | None):
    # its artifacts too (the tokenizer, the trained model): a real run's folder keeps them
    return real_run(KIND, {**TINY, **(overrides or {}), **variant}, seed, [variant, seed, overrides or {}],
                    preset="quick")


def _synthetic_run(name: str, variant: dict, seed: int, overrides: dict | None):
    cfg = build_config(KIND, preset="quick", overrides={**TINY, **(overrides or {}), **variant}, seed=seed)
    rng = np.random.default_rng([seed, sorted(SPECS).index(name) if name in SPECS else len(SPECS)])
    final = LOSS.get(name, 5.0) + rng.normal(0, 0.01)
    events = [(step, {"val/loss": final + 2.0 / step, "val/ppl": math.exp(final + 2.0 / step),
                      "val/bpb": (final + 2.0 / step) / 1.6})
              for step in range(cfg.train.eval_every, cfg.train.steps + 1, cfg.train.eval_every)]
    summary = {"model": variant["model"], "params": 900_000 + 1000 * len(name),
               "tokens": cfg.train.steps * cfg.train.batch * cfg.train.seq_len,
               "val_loss": final, "val_ppl": math.exp(final), "val_bpb": final / 1.6, "corpus": "austen",
               "vocab_size": cfg.data.vocab_size, "size": cfg.size, "seconds": 1.0,
               "lr": cfg.lr, "lr_auto": cfg.train.lr == "auto"}  # as a run records the rate it trained at
    result = {"summary": summary, "tables": {"lm_eval": [
        {"split": "val", "loss": final, "ppl": math.exp(final), "bpb": final / 1.6}]}}
    return cfg.model_dump(mode="json"), events, result, {}


def make_lm_runs(home: Path, specs=("gpt", "linear", "softmax_tokens"), seeds=(0, 1), *, real: bool = True,
                 overrides: dict | None = None, started: str = "2026-01-01T00:00:00+00:00") -> list[str]:
    """Finished, ingested lm runs, one per (spec, seed); their run ids, spec by spec, seeds in order.

    A spec is a name of ``SPECS`` or a dict of model/predictor/attn_input; ``overrides`` change the
    settings on top of ``TINY`` (another budget makes another group of comparable runs).
    """
    runs = []
    for spec in specs:
        name, variant = _spec(spec)
        for seed in seeds:
            make = _real_run if real else (lambda v, s, o, n=name: _synthetic_run(n, v, s, o))
            runs.append((seed, make(variant, int(seed), overrides)))
    return write_and_ingest(Path(home), KIND, runs, started)
