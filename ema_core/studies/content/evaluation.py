"""A finished language-model run evaluated again: its own model and tokenizer, on any text the ``lm`` kind reads.

One run is one (finished ``lm`` run, text, number of tokens).  The model and tokenizer are the run's own
(``artifacts/model.pt`` and ``tokenizer.json``: :func:`load_trained`); the text is read as an ``lm`` run
reads its corpus (``data``: "austen", a local ``.txt`` or other file or folder, a hub dataset) and cut
into tokens by the run's tokenizer, never a new one, so the loss is the same model's on the same kind
of ids.  ``split`` "val" scores the text's held-out part (as ``data``'s settings cut it: for the run's
own settings, the very text its final evaluation read), "all" every document of it (a text the run
never trained on).  Evaluation is :func:`ema_core.lm.train.evaluate` with the token classes, in the
run's own windows of ``train.seq_len + 1`` tokens; ``eval_tokens`` bounds it (0: all).

Results: one ``lm_eval`` row, ``split`` "reeval:val" or "reeval:all" (never "val": a query of the
training runs' final evaluation by split, of any kind, cannot take it for one); ``lm_token_classes``
rows with ``evaluation`` "reeval" at the source run's last step (never "final" or "periodic", which
the content queries read as a training run's own); and a summary with ``source_run``, the source's
variant, ``corpus``, ``val_loss`` (nats per token), ``token_classes`` and ``token_bands`` as nats per
token, as the ``lm`` kind's.

Every input is checked when the config is built, so ``emalab run lm_eval`` refuses it before a run
folder exists: a run id with no run, a run of another kind, one without final weights (run before they
were kept, or not finished), a corpus that is not there or whose text is shorter than one window.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from tokenizers import Tokenizer
from torch import nn

from ema_core.config import config_error, seed_field
from ema_core.studies.content.experiment import KIND as LM_KIND
from ema_core.studies.content.experiment import PARTITIONS, LMConfig, _device, _per_token
from ema_core.lm.corpus import Corpus, CorpusError, HubUnreachable, looks_like_path
from ema_core.lm.data import CorpusConfig
from ema_core.lm.sizes import build_model
from ema_core.lm.stream import token_streams
from ema_core.lm.tokenizer import chunk_safe, chunks, load_tokenizer
from ema_core.lm.train import CLASS_SPLITS, Streams, evaluate
from ema_core.lm.trained import MODEL_ARTIFACT, TOKENIZER_ARTIFACT, load_weights, sample
from ema_core.messages import one_line
from ema_core.paths import cache_home
from ema_core.protocol import Experiment, Reporter
from ema_core.rundir import RESUMABLE_STATES, RunDir
from ema_core.studies.content import EVAL_KIND as KIND

# What the rows of a re-evaluation are called in the tables the training runs fill too.
SPLIT_PREFIX = "reeval:"
EVALUATION = "reeval"


# ---------------------------------------------------------------------------------------------
# A finished run's model


class TrainedRun(NamedTuple):
    """A finished ``lm`` run's config, its model (final weights, eval mode, on the CPU) and its tokenizer."""

    config: LMConfig
    model: nn.Module
    tokenizer: Tokenizer

    def sample(self, prompt: str, n_tokens: int, temperature: float = 1.0, top_k: int | None = None,
               seed: int = 0) -> str:
        """:func:`ema_core.lm.trained.sample` in the windows this model trained on (``train.seq_len``)."""
        return sample(self.model, self.tokenizer, prompt, n_tokens, temperature, top_k, seed,
                      context=self.config.train.seq_len)


def trained_run(run: str | os.PathLike | RunDir, home: Path | None = None) -> tuple[RunDir, LMConfig]:
    """The run folder and config of a finished ``lm`` run that kept its model; a one-line ``ValueError``
    naming the run and the problem otherwise.  Reads no weights.

    ``run`` is a run id (in ``home``'s runs, by default the data folder's), a run folder's path or a
    :class:`~ema_core.rundir.RunDir`.
    """
    rd = _run_dir(run, home)
    problem = _not_trained(rd)
    if problem is not None:
        raise ValueError(f"run {rd.run_id}: {problem}")
    return rd, _config(rd)


def load_trained(run: str | os.PathLike | RunDir, home: Path | None = None) -> TrainedRun:
    """A finished ``lm`` run's (config, model in eval mode on the CPU, tokenizer), from its run folder.

    The model is built as the run built it (:func:`ema_core.lm.sizes.build_model` at the tokenizer's
    vocabulary and the run's ``train.seq_len``) and given the final weights the run kept.  Refused by
    :func:`trained_run` (one line naming the problem) when the run is not one that kept them.
    """
    rd, cfg = trained_run(run, home)
    try:
        tok = load_tokenizer(rd.artifact_path(TOKENIZER_ARTIFACT))
        model = build_model(cfg, vocab_size=tok.get_vocab_size(), seq_len=cfg.train.seq_len, seed=cfg.seed)
        load_weights(model, rd.artifact_path(MODEL_ARTIFACT).read_bytes())
    except (OSError, RuntimeError, ValueError) as exc:  # torch and tokenizers raise many types for a bad file
        raise ValueError(f"run {rd.run_id}: its kept model cannot be loaded ({one_line(exc, limit=300)})") from None
    return TrainedRun(cfg, model.eval(), tok)


def _run_dir(run: str | os.PathLike | RunDir, home: Path | None) -> RunDir:
    if isinstance(run, RunDir):
        return run
    if isinstance(run, os.PathLike):
        return RunDir(Path(run))
    return RunDir.for_id(str(run).strip(), home)


def _not_trained(rd: RunDir) -> str | None:
    """Why ``rd`` holds no trained language model to load (one line, without the run's id), or None."""
    if not rd.exists():
        return "no such run in this data folder (emalab jobs list shows the runs)"
    record = rd.read_config()  # a DamagedRunError (a ValueError) says which file is damaged
    if record["kind"] != LM_KIND:
        return f"a {record['kind']} run, not a language model ({LM_KIND}): only {LM_KIND} runs keep a trained model"
    if rd.artifact_path(MODEL_ARTIFACT).is_file():
        if not rd.artifact_path(TOKENIZER_ARTIFACT).is_file():
            return f"its {TOKENIZER_ARTIFACT} is missing: its model's token ids cannot be read"
        return None
    state = rd.read_status().get("state")
    if state in ("queued", "running"):
        return f"{state}: its final weights are kept when it ends"
    if state in RESUMABLE_STATES:
        return f"{state} before the end of training, so it has no final weights (resume it: emalab jobs resume)"
    steps = (record["config"].get("train") or {}).get("steps")
    newest = rd.checkpoints()[-1][0] if rd.checkpoints() else None
    kept = (f"its newest checkpoint is at step {newest} of {steps}, not the trained model" if newest is not None
            else "it keeps no checkpoint either")
    return (f"it predates kept final weights (artifacts/{MODEL_ARTIFACT}): {kept}; train it again "
            "(another seed) to evaluate it")


def _config(rd: RunDir) -> LMConfig:
    config = rd.read_config()["config"]
    try:
        # The device it trained on need not be here: the config is read as the run's record, and the
        # model loads on the CPU whatever it says.
        cfg = LMConfig.model_validate({**config, "device": "auto"})
    except ValidationError as exc:
        raise ValueError(f"run {rd.run_id}: its config is not one this code builds ({config_error(exc)})") from None
    return cfg.model_copy(update={"device": config.get("device", "auto")})


# ---------------------------------------------------------------------------------------------
# The kind


class LMEvalConfig(BaseModel):
    """A finished ``lm`` run, a text, and how much of it to score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # validate_default: a config that names no run is refused by the check below, not taken as run "".
    run: str = Field("", max_length=200, validate_default=True,
                     description="the finished lm run to evaluate: its run id (emalab jobs list)")
    # The corpus is read as an lm run reads it; the tokenizer is the run's own, so there is none to set.
    data: CorpusConfig = CorpusConfig()
    split: Literal["val", "all"] = Field(
        "val", description="val: the text's held-out part, as data's settings cut it; all: every document of it")
    eval_tokens: int = Field(0, ge=0, le=10**10,
                             description="tokens scored, from the start of the text (0: all of them)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto (CUDA when present), cpu or cuda")
    threads: int = Field(0, ge=0, le=1024, description="torch CPU threads (0: torch's default)")
    seed: int = seed_field("changes nothing evaluated (nothing is drawn at random): another seed is another run "
                           "of the same evaluation")

    @field_validator("run")
    @classmethod
    def _finished_lm_run(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("name the finished lm run to evaluate: its run id, as emalab jobs list shows it")
        try:
            rd = RunDir.for_id(v)
        except ValueError:
            raise ValueError("a run id is a plain name (emalab jobs list shows them)") from None
        problem = _not_trained(rd)
        if problem is not None:
            raise ValueError(problem)
        return v

    @field_validator("device")
    @classmethod
    def _device_present(cls, v: str) -> str:
        if v == "cuda" and not torch.cuda.is_available():
            raise ValueError("no CUDA device is visible on this machine; use auto or cpu")
        return v

    @model_validator(mode="after")
    def _one_window(self) -> "LMEvalConfig":
        # Counted here, before a run folder exists: a text too short for one window of the run's length
        # would otherwise fail the run only once it has started.  A hub dataset is streamed when the run
        # starts (it may need the network, and it is long): its length is the run's to check.
        if self.data.corpus != "austen" and not (looks_like_path(self.data.corpus)
                                                 or Path(self.data.corpus).expanduser().exists()):
            return self
        rd, cfg = trained_run(self.run)
        try:
            tok = load_tokenizer(rd.artifact_path(TOKENIZER_ARTIFACT))
            corpus = self.data.load()
        except (CorpusError, HubUnreachable) as exc:
            raise ValueError(f"data.corpus: {one_line(exc, limit=300)}") from None
        need = cfg.train.seq_len + 1
        have = _tokens_up_to(tok, _documents(corpus, self.split), need)
        if have < need:
            what = "held-out text" if self.split == "val" else "text"
            raise ValueError(f"data.corpus: its {what} is {have} tokens under run {self.run}'s tokenizer, shorter "
                             f"than one window of train.seq_len + 1 = {need} tokens")
        return self


PRESETS: dict[str, dict] = {
    # The quick lm preset's final evaluation (65,536 tokens): on its own text, the run's own number again.
    "quick": {"eval_tokens": 65_536},
    # Every token of the text.
    "full": {"eval_tokens": 0},
}


def _documents(corpus: Corpus, split: str) -> tuple[str, ...]:
    return corpus.val if split == "val" else corpus.train + corpus.val


def _tokens_up_to(tok: Tokenizer, docs: tuple[str, ...], need: int) -> int:
    """The tokens of ``docs`` as a stream holds them (each document's, then its end-of-document token),
    counted until ``need`` is reached: a long text is not encoded whole to learn that it is long enough."""
    pieces_ok = chunk_safe(tok)
    n = 0
    for doc in docs:
        for piece in (chunks(doc, 1 << 14) if pieces_ok else [doc]):
            n += len(tok.encode(piece, add_special_tokens=False).ids)
            if n >= need:
                return n
        n += 1
    return n


def run(cfg: LMEvalConfig, reporter: Reporter) -> dict:
    t_start = time.perf_counter()
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, reporter, t_start)
    finally:
        torch.set_num_threads(threads)


def _run(cfg: LMEvalConfig, reporter: Reporter, t_start: float) -> dict:
    reporter.progress(0.0, f"loading the model of {cfg.run}")
    source = load_trained(cfg.run)
    src, tok, model = source.config, source.tokenizer, source.model
    reporter.progress(0.1, f"reading {cfg.data.corpus} with the run's tokenizer")
    corpus = cfg.data.load()
    streams = token_streams(corpus, tok, cache_home())
    ids = np.asarray(streams.val) if cfg.split == "val" else np.concatenate([streams.train, streams.val])
    reporter.progress(0.3, f"reading {src.data.corpus}, the text {cfg.run} trained on (frequency bands)")
    train_ids, train_docs, bands_missing = _training_text(src, tok)
    evaluated = _documents(corpus, cfg.split)
    device = _device(cfg)
    reporter.progress(0.4, f"evaluating {src.model} on {corpus.name} ({cfg.split})")

    def text_bytes(t: np.ndarray) -> int:
        return len(tok.decode(np.asarray(t).tolist(), skip_special_tokens=True).encode("utf-8"))

    # The frequency bands are the run's own: frequency in the training split the model saw (its stream
    # rebuilt from the run's data settings, under its tokenizer), not in the text evaluated, so that
    # "rare" means rare to this model on any text, and a band is the same set of types whatever text
    # is scored.
    ev = evaluate(model.to(device), Streams(train=train_ids, val=ids, val_bytes=text_bytes), src.train.seq_len,
                  cfg.eval_tokens, device=device, token_classes=True)
    source_summary = (RunDir.for_id(cfg.run).read_result() or {}).get("summary") or {}
    summary = {
        "source_run": cfg.run,
        "model": src.model,
        "predictor": src.predictor if src.model == "spen" else None,
        "attn_input": src.attn_input if src.model == "spen" and src.predictor != "linear" else None,
        "size": src.size,
        "params": sum(p.numel() for p in model.parameters()),
        "step": src.train.steps,
        "corpus": corpus.name,
        "split": cfg.split,
        "text": corpus.description,
        "val_loss": ev["loss"],
        "val_ppl": ev["ppl"],
        "val_bpb": ev["bpb"],
        "val_tokens": ev["tokens"],
        # The run's own final loss on its held-out text, for comparison.
        "source_val_loss": source_summary.get("val_loss"),
        "bands_from": None if bands_missing else src.data.corpus,
        "train_overlap": _overlap(evaluated, train_docs),
        "seq_len": src.train.seq_len,
        "vocab_size": tok.get_vocab_size(),
        "device": str(device),
        **{split: _per_token(ev.get(split)) for split in CLASS_SPLITS},
    }
    if bands_missing:
        summary["bands_missing"] = bands_missing
    summary["seconds"] = time.perf_counter() - t_start
    reporter.progress(1.0, "done")
    rows = [{"split": SPLIT_PREFIX + cfg.split, "loss": ev["loss"], "ppl": ev["ppl"], "bpb": ev["bpb"]}]
    classes = [{"evaluation": EVALUATION, "step": src.train.steps, "partition": partition, "class": name,
                "tokens": s["tokens"], "loss": s["loss"]}
               for split, partition in PARTITIONS.items() for name, s in (ev.get(split) or {}).items()]
    return {"summary": summary, "tables": {"lm_eval": rows, "lm_token_classes": classes}}


def _training_text(src: LMConfig, tok: Tokenizer) -> tuple[np.ndarray, tuple[str, ...] | None, str | None]:
    """The source run's training stream under its tokenizer, its documents, and why they are missing (None
    when they are not): a text that cannot be read now (a hub corpus offline, a file moved) leaves the
    bands out rather than the evaluation."""
    try:
        corpus = src.data.load()
        return np.asarray(token_streams(corpus, tok, cache_home()).train), corpus.train, None
    except (CorpusError, HubUnreachable) as exc:
        return np.zeros(0, dtype=np.int64), None, f"the run's training text cannot be read: {one_line(exc, limit=300)}"


def _overlap(evaluated: tuple[str, ...], train_docs: tuple[str, ...] | None) -> float | None:
    """The share of the evaluated text's characters in documents found, whole, in the run's training split
    (0 for text it never saw; about 1 for its own training text); None when that split is unknown."""
    if train_docs is None:
        return None
    total = sum(map(len, evaluated))
    if not total:
        return None
    seen = set(train_docs)
    return math.fsum(len(d) for d in evaluated if d in seen) / total


def headline(summary: dict) -> str:
    """A finished evaluation in one line (its Jobs card, the run table): the model, the text it read
    and its loss there, beside the run's own held-out loss."""
    model = "/".join(str(summary[k]) for k in ("model", "predictor", "attn_input") if summary.get(k))
    where = "/".join(str(summary[k]) for k in ("corpus", "split") if summary.get(k))
    loss, own = summary.get("val_loss"), summary.get("source_val_loss")
    parts = [" on ".join(p for p in (model, where) if p)] if model or where else []
    if isinstance(loss, (int, float)):
        parts.append(f"loss {loss:.3f} nats/token" + (f" (own held-out text {own:.3f})"
                                                      if isinstance(own, (int, float)) else ""))
    return " · ".join(parts)


EXPERIMENT = Experiment(
    kind=KIND,
    config_cls=LMEvalConfig,
    presets=PRESETS,
    run=run,
    description="A finished language-model run evaluated again, on any text, with its own model and tokenizer.",
    identity=("run", "data.corpus", "split"),
    # A second look at runs of the content study, launched for runs that exist: not part of a reproduction.
    one_click=False,
    headline=headline,
)
