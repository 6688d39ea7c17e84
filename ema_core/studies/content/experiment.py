"""Content: a language model trained on real text — SPEN (EMA traces only) or the same-size GPT.

One run is one (model, predictor, attention input, size, corpus, seed).  The corpus is read through
HF ``datasets`` and cut by a BPE trained on its training split (:mod:`ema_core.lm.data`, cached by
content hash); the model comes from :mod:`ema_core.lm.sizes` (the GPT is the one matched in size
to the SPEN of the same settings); :func:`ema_core.lm.train.train_lm` trains it, checkpoints it and
evaluates it on the held-out text.  The run keeps its tokenizer and its final weights (``artifacts/``:
:mod:`ema_core.lm.trained`), which ``lm_eval`` evaluates again on another text.

Results: one ``lm_eval`` row (split "val": loss in nats per token, perplexity, bits per byte), the
validation curve as ``val/*`` metrics, and a summary with the keys ``emalab run lm --json`` promises.
Every evaluation also splits its loss by token (:mod:`ema_core.lm.token_classes`): the
``lm_token_classes`` table has one row per (evaluation, step, partition, class), ``evaluation``
"periodic" (the curve's, on ``train.eval_tokens``), "final" (on ``train.final_eval_tokens``, at the
run's last step) or an n-gram baseline's on the final evaluation's windows ("bigram", "cache":
:mod:`ema_core.lm.ngram`), ``partition`` "class" (recall by distance, first, other) or "band" (training
frequency), ``tokens`` and ``loss`` summed in nats; the summary's ``token_classes`` and
``token_bands`` hold the final evaluation's, as nats per token.
"""
from __future__ import annotations

import os
import time
from typing import Literal

import numpy as np
import torch
from pydantic import ConfigDict, Field, field_validator, model_validator

from ema_core.config import seed_field
from ema_core.lm.data import LMDataConfig, prepare
from ema_core.lm.ngram import COPY_MIX, DEV_FRACTION, baseline_evaluations, copy_mix_evaluation
from ema_core.lm.sizes import ModelChoice, build_model
from ema_core.lm.tokenizer import tokenizer_json
from ema_core.lm.trained import MODEL_ARTIFACT, TOKENIZER_ARTIFACT, weights_bytes
from ema_core.lm.token_classes import SPLITS
from ema_core.lm.train import CLASS_SPLITS, Streams, TrainConfig, evaluate, init_distributed, train_lm
from ema_core.protocol import Experiment, Reporter, StoredConfig, moved_into_groups
from ema_core.learning_rates import AUTO, Resolved, resolve
from ema_core.studies.content import KIND
from ema_core.studies.content import learning_rates as rate_tables

# What the ``partition`` column of ``lm_token_classes`` calls each of train.CLASS_SPLITS.
PARTITIONS = {s.key: s.partition for s in SPLITS}


class LMConfig(ModelChoice):
    """A language model (SPEN or its same-size GPT) on a corpus; every setting the run depends on.

    What is compared (model, predictor, attention input, size) is the models' own choice, inherited
    whole (:class:`ema_core.lm.sizes.ModelChoice`: each typed from the registry that builds it); the
    corpus and the training loop are their components' configs, composed whole (``data.corpus``,
    ``train.lr``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: LMDataConfig = LMDataConfig()
    train: TrainConfig = TrainConfig()
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto (CUDA when present), cpu or cuda")
    threads: int = Field(0, ge=0, le=1024, description="torch CPU threads (0: torch's default)")
    seed: int = seed_field("seed of the initialisation and of the batches")

    @property
    def lr(self) -> float:
        """The peak rate this run trains at: ``train.lr``, or for "auto" the rate chosen for its model and size."""
        return float(self.train.lr) if self.train.lr != AUTO else self.rate_table().rates[(self.model,)]

    def rate_table(self) -> Resolved | None:
        """What "auto" reads (:mod:`ema_core.studies.content.learning_rates`): its size's table, this
        model's rate in it, and whether the table was chosen at these settings (None for a numeric ``train.lr``)."""
        if self.train.lr != AUTO:
            return None
        return resolve(rate_tables.TABLES, self.model_dump(mode="json"), [(self.model,)])

    @field_validator("device")
    @classmethod
    def _device_present(cls, v: str) -> str:
        # Refused with the config, before a run folder exists, rather than by the run a moment later.
        if v == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("no CUDA device is visible on this machine; use auto or cpu")
        return v

    @model_validator(mode="after")
    def _rate_chosen(self) -> "LMConfig":
        # "auto" stays in the config (SPEN and the GPT at their own rates are one setting); a model and
        # size with no chosen rate is refused here, before a run folder exists.
        self.rate_table()
        return self


PRESETS: dict[str, dict] = {
    # A few minutes on 2 cores: the one-click reproduction and the predictor ablation's budget
    # (0.6M training tokens, under one pass over the five novels).
    # Each model at its own rate, chosen on dev (ema_core.studies.content.learning_rates), then the
    # warm-up at those rates, also on dev: both models chose the longest swept, 200 of the 300 steps
    # (docs/benchmarks.md).
    "quick": {"size": "tiny", "data.vocab_size": 4096, "train.seq_len": 256, "train.batch": 8, "train.steps": 300,
              "train.warmup": 200, "train.lr": AUTO, "train.eval_every": 50, "train.eval_tokens": 16_384,
              "train.final_eval_tokens": 65_536},
    # Two CPU cores, about ten minutes, to a validation loss that has stopped moving.
    "tiny": {"size": "tiny", "data.vocab_size": 4096, "train.seq_len": 256, "train.batch": 8, "train.steps": 1200,
             "train.warmup": 100, "train.lr": 3e-3, "train.eval_every": 100, "train.eval_tokens": 16_384},
    # How the gap grows: 5,000 steps of 8 × 256 = 10.2M training tokens (about 12 passes over the five
    # novels), about 1.5 hours for SPEN and the GPT at once on 2 cores (docs/benchmarks.md).  The rate
    # stays at its peak until the last fifth (wsd), so each of the 20 evaluations on the way is one of a
    # model still training at its rate, and the curves over tokens can be compared and fitted
    # (docs/decisions.md, How the gap grows).
    # The next size up: --set size=small --set train.lr=N (a GPU's budget; no rate is chosen on dev for
    # small yet, so "auto" refuses it rather than guess one).
    "long": {"size": "tiny", "data.vocab_size": 4096, "train.seq_len": 256, "train.batch": 8, "train.steps": 5000,
             "train.warmup": 200, "train.lr": AUTO, "train.schedule": "wsd", "train.decay_frac": 0.2,
             "train.eval_every": 250, "train.eval_tokens": 32_768, "train.final_eval_tokens": 65_536,
             "train.checkpoint_every": 250},
    # The long budget on fresh tokens: the same 10.2M training tokens read from the free-prose corpus
    # (12.3M training tokens, `make corpus-free-prose`), so every evaluation is on the first pass and
    # the growth fit may be extended (docs/decisions.md, How the gap grows).  Its rates are still the
    # quick budget's on Austen ("auto"): choosing them at this budget is the next step.
    "fresh": {"size": "tiny", "data.corpus": "free_prose", "data.vocab_size": 4096, "train.seq_len": 256,
              "train.batch": 8, "train.steps": 5000, "train.warmup": 200, "train.lr": AUTO, "train.schedule": "wsd",
              "train.decay_frac": 0.2, "train.eval_every": 250, "train.eval_tokens": 32_768,
              "train.final_eval_tokens": 65_536, "train.checkpoint_every": 250},
    # The fresh budget at the second size, at tiny's tokens per parameter: micro has 476,288 parameters
    # against tiny's 1,378,560, so 1,728 steps of 8 × 256 (3.54M tokens, 7.43 per parameter, as tiny's
    # 10.24M are).  Warm-up and evaluations keep tiny's shares of the run (4 %, every 1/18).
    "fresh_micro": {"size": "micro", "data.corpus": "free_prose", "data.vocab_size": 4096, "train.seq_len": 256,
                    "train.batch": 8, "train.steps": 1728, "train.warmup": 70, "train.lr": AUTO,
                    "train.schedule": "wsd", "train.decay_frac": 0.2, "train.eval_every": 96,
                    "train.eval_tokens": 32_768, "train.final_eval_tokens": 65_536, "train.checkpoint_every": 96},
    # One GPU (or a patient CPU).
    "small": {"size": "small", "data.vocab_size": 8192, "train.seq_len": 512, "train.batch": 32, "train.steps": 5000,
              "train.warmup": 250, "train.lr": 1.5e-3, "train.eval_every": 250, "train.eval_tokens": 131_072},
    # The paper's size: 12 blocks, d = 768, ≈ 130M parameters with GPT-2's vocabulary size; for a GPU.
    "paper": {"size": "paper", "data.vocab_size": 50_257, "train.seq_len": 1024, "train.batch": 32,
              "train.steps": 20_000, "train.warmup": 1000, "train.lr": 6e-4, "train.eval_every": 500,
              "train.eval_tokens": 262_144, "train.checkpoint_every": 1000},
}


# What the one-click quick reproduction (the Overview page) runs of this kind (its Experiment's
# ``reproduction``): the `quick` preset once per entry.  The content claim is SPEN *against* the same-size GPT, so one click must train both
# sides of it (the GPT sized to the preset's SPEN, linear predictor); the predictor ablation stays on
# the Content page's launch form (seven variants × seeds is not a one-click budget on two cores).
QUICK_REPRODUCTION: tuple[dict, ...] = ({"model": "spen"}, {"model": "gpt"})


def run(cfg: LMConfig, reporter: Reporter) -> dict:
    t_start = time.perf_counter()
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # Bit-identical resume on CPU; on CUDA, warn-only (some kernels have no deterministic form).
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return _run(cfg, reporter, t_start)
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


def _device(cfg: LMConfig):
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA device is visible")
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _run(cfg: LMConfig, reporter: Reporter, t_start: float) -> dict:
    reporter.progress(0.0, "reading the corpus and its tokenizer")
    data = prepare(cfg.data)
    tok = data.tokenizer
    # The tokenizer travels with the run: its numbers mean nothing without it.
    reporter.save_artifact(TOKENIZER_ARTIFACT, tokenizer_json(tok).encode())
    rank, world, device = init_distributed() if _under_torchrun() else (0, 1, _device(cfg))
    model = build_model(cfg, vocab_size=tok.get_vocab_size(), seq_len=cfg.train.seq_len, seed=cfg.seed)
    params = sum(p.numel() for p in model.parameters())

    def val_bytes(ids: np.ndarray) -> int:
        return len(tok.decode(np.asarray(ids).tolist(), skip_special_tokens=True).encode("utf-8"))

    streams = Streams(train=np.array(data.streams.train), val=np.array(data.streams.val), val_bytes=val_bytes)
    reporter.progress(0.0, f"training {cfg.model} ({params:,} parameters)")
    # The loop trains at a number: "auto" resolved for this model and size (the config keeps "auto").
    out = train_lm(model, streams, cfg.train.model_copy(update={"lr": cfg.lr}), cfg.seed, reporter, device=device,
                   extra_state={"config": StoredConfig(KIND, cfg)})
    final = out["final"]
    if rank == 0:
        # The trained model stays with the run (its checkpoints stop before the end, and few are kept):
        # ema_core.studies.content.evaluation evaluates it again, the Content page samples from it.
        reporter.save_artifact(MODEL_ARTIFACT, weights_bytes(model))
    # The n-gram baselines on the very windows of the final evaluation (rank 0's): what the loss by class
    # is with no network, beside the models' (ema_core.lm.ngram; a fraction of a second at tiny).
    baselines = (baseline_evaluations(streams.train, streams.val, cfg.train.seq_len, cfg.train.final_eval_tokens,
                                      vocab=tok.get_vocab_size(), counts=streams.counts) if final else {})
    if final:
        reporter.progress(1.0, "mixing a copy of the window into the model's predictions")
        baselines[COPY_MIX] = _copy_mix(model, streams, final, cfg.train, device)
    table = cfg.rate_table()
    summary = {
        "model": cfg.model,
        "predictor": cfg.predictor if cfg.model == "spen" else None,
        "attn_input": cfg.attn_input if cfg.model == "spen" and cfg.predictor != "linear" else None,
        # The GPT is sized to the SPEN of the same settings: which one, so that its size is explained.
        "matched_to": None if cfg.model == "spen" else f"spen/{cfg.predictor}/{cfg.attn_input}",
        "size": cfg.size,
        # The rate it trained at, whether the config left the choice to a rate table ("auto"), which
        # table, and whether it was chosen at these settings (False: the longer budgets at tiny).
        "lr": cfg.lr,
        "lr_auto": cfg.train.lr == AUTO,
        "rate_table": table.table.name if table else None,
        "rates_matched": table is not None and table.matched,
        "params": params,
        "tokens": out["tokens"],
        # The training split's size: tokens ÷ train_tokens is the passes over it (the growth fit's first pass).
        "train_tokens": int(len(streams.train)),
        "val_loss": final.get("loss"),
        "val_ppl": final.get("ppl"),
        "val_bpb": final.get("bpb"),
        "val_tokens": final.get("tokens"),
        "tokens_per_s": out["tokens_per_s"],
        "corpus": data.corpus.name,
        "vocab_size": tok.get_vocab_size(),
        "device": str(device),
        "world_size": world,
        **{split: _per_token(final.get(split)) for split in CLASS_SPLITS},
        "baselines": {name: {"val_loss": b["loss"], "cache_weight": b["cache_weight"]} for name, b in baselines.items()},
    }
    summary["seconds"] = time.perf_counter() - t_start
    reporter.progress(1.0, "done")
    rows = [{"split": "val", "loss": final["loss"], "ppl": final["ppl"], "bpb": final["bpb"]}] if final else []
    classes = _token_class_rows(out["curve"], final, cfg.train.steps, baselines)
    return {"summary": summary, "tables": {"lm_eval": rows, "lm_token_classes": classes}}


def _copy_mix(model, streams: Streams, final: dict, train: TrainConfig, device) -> dict:
    """The trained model with the window's bigrams mixed in, on the final evaluation's windows; its λ chosen
    on the model's losses over windows from the end of the training text (at most the final evaluation's
    length: one more evaluation pass).  The model trained on that text, so its λ leans small; the held-out
    text never chooses it (docs/decisions.md)."""
    held = max(train.seq_len + 1, min(int(DEV_FRACTION * len(streams.train)), train.final_eval_tokens + 1))
    dev = Streams(train=streams.train, val=streams.train[-held:], val_bytes=streams.val_bytes)
    ev = evaluate(model, dev, train.seq_len, train.final_eval_tokens, device=device, keep_losses=True)
    return copy_mix_evaluation(ev["token_losses"], ev["windows"], final["token_losses"], final["windows"],
                               streams.counts)


def _per_token(sums: dict | None) -> dict | None:
    """``{name: {"tokens", "loss"}}`` with each loss summed in nats, as nats per token (None for a class
    with no tokens, rather than 0/0); None when the evaluation had no split (a rank other than 0)."""
    if sums is None:
        return None
    return {name: {"tokens": s["tokens"], "loss": s["loss"] / s["tokens"] if s["tokens"] else None}
            for name, s in sums.items()}


def _token_class_rows(curve: list[dict], final: dict, last_step: int, baselines: dict | None = None) -> list[dict]:
    """The ``lm_token_classes`` rows of every evaluation that has the split, the curve's, the final, then
    each baseline's on the final evaluation's windows (``evaluation`` its name: "bigram", "cache",
    "kn_trigram", "copy_mix").

    The final evaluation is not a curve entry even at the last step (it reads another number of
    tokens), so ``evaluation`` tells the two apart; a curve entry from an older checkpoint has no split
    and no rows.
    """
    evaluations = [("periodic", entry["step"], entry) for entry in curve]
    if final:
        evaluations.append(("final", last_step, final))
    evaluations += [(name, last_step, b) for name, b in (baselines or {}).items()]
    return [{"evaluation": evaluation, "step": int(step), "partition": partition, "class": name,
             "tokens": s["tokens"], "loss": s["loss"]}
            for evaluation, step, ev in evaluations
            for split, partition in PARTITIONS.items()
            for name, s in (ev.get(split) or {}).items()]


def _under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def headline(summary: dict) -> str:
    """A finished run in one line (its Jobs card, the run table): the model and its final held-out
    loss per token and bits per byte."""
    model = "/".join(str(summary[k]) for k in ("model", "predictor", "attn_input") if summary.get(k))
    loss, bpb = summary.get("val_loss"), summary.get("val_bpb")
    parts = [model] if model else []
    if isinstance(loss, (int, float)):
        parts.append(f"val loss {loss:.3f} nats/token")
    if isinstance(bpb, (int, float)):
        parts.append(f"{bpb:.3f} bits/byte")
    return " · ".join(parts)


EXPERIMENT = Experiment(
    kind=KIND, presets=PRESETS, run=run, headline=headline,
    config_cls=LMConfig,
    description="A language model on real text: SPEN (EMA traces only, a predictor ablation) or the same-size GPT.",
    identity=("model", "predictor", "attn_input", "data.corpus"),
    reproduction=QUICK_REPRODUCTION,
    # Runs made before configs were nested: the data's and the training's settings were flat.
    older_paths=moved_into_groups(data="corpus val_doc val_fraction max_docs max_chars tokenizer vocab_size",
                                  train="steps batch seq_len lr min_lr_frac warmup weight_decay beta2 grad_clip "
                                        "eval_every eval_tokens final_eval_tokens log_every checkpoint_every"),
    older_behaviour={"data.doc_sep": "none"},  # a .txt corpus was one document before documents were split
    older_kinds=("lm",),  # the study's runs before it had its folder and its name
)
