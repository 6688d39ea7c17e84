"""A learning-rate choice for the language models, scored on a dev slice of the *training* text.

    python -m bench.lm_lr [--preset quick] [--models spen,gpt] [--lrs 1e-3,3e-3,1e-2] [--warmups 30,100]
                          [--seeds 0] [--dev-tokens 65536] [--steps N] [--threads N] [--set PATH=VALUE ...] [--json]

For each model, each (peak learning rate, warm-up) pair is trained at the preset's budget (the
``lm`` experiment's own config, model and loop: :func:`ema_core.lm.train.train_lm`) and scored by
its mean loss (nats/token) on a **dev slice**: the last ``--dev-tokens`` tokens of the training
stream, cut off before training, so no training window ever reads them.  The held-out text (the
validation novel, or the last documents of another corpus) is never read: the reported validation
numbers of the experiment stay untouched by this choice.  Every configuration of a model sees the
same batches (they are a function of the seed and the step) and the same dev tokens, so their
losses compare directly; with several seeds, the mean over seeds decides.

Output: one line per configuration, the choice per model (lowest dev loss) beside the preset's own
lr and warm-up, and the machine.  ``--json`` prints one JSON object instead.  A full run at the
quick budget is 2 models × 3 rates × 2 warm-ups × 300 steps: about 12 × 3 min on 2 CPU cores.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from bench.machine import machine_info
from bench.report import print_rows, show
from ema_core.experiments import build_config
from ema_core.lm.data import prepare
from ema_core.lm.sizes import build_model
from ema_core.lm.train import Streams, train_lm

DEFAULT_LRS = (1e-3, 3e-3, 1e-2)
DEFAULT_WARMUPS = (30, 100)
# The last columns of a sweep's table (bench.report.print_rows), what each training scored on the dev
# slice and how long it took: this sweep's and the depth sweep's, which trains the same way.
DEV_COLUMNS = (("dev_loss", "dev loss", "9.4f"), ("dev_bpb", "dev bpb", "8.4f"), ("seconds", "s", "7.1f"))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def dev_split(train: np.ndarray, dev_tokens: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(what is trained on, the dev slice): the dev slice is the training stream's last ``dev_tokens``
    tokens, the rest comes before it; the two share no token.  Refused when either part would be too
    short for one window of ``seq_len + 1`` tokens."""
    train = np.asarray(train)
    if dev_tokens < seq_len + 1:
        raise ValueError(f"dev_tokens ({dev_tokens}) must hold at least one window of seq_len + 1 ({seq_len + 1})")
    if train.size - dev_tokens < seq_len + 1:
        raise ValueError(f"the training stream ({train.size} tokens) is too short to lose {dev_tokens} to a dev slice")
    return train[: train.size - dev_tokens], train[train.size - dev_tokens:]


def sweep(preset: str = "quick", models=("spen", "gpt"), lrs=DEFAULT_LRS, warmups=DEFAULT_WARMUPS, seeds=(0,),
          dev_tokens: int = 65_536, steps: int | None = None, overrides: dict | None = None,
          threads: int | None = None) -> dict:
    """Every (model, lr, warm-up, seed) trained and scored on the dev slice; the choice per model."""
    before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if threads:
        torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)  # as the lm experiment trains
    try:
        return _sweep(preset, models, lrs, warmups, seeds, dev_tokens, steps, overrides)
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1])


def _sweep(preset, models, lrs, warmups, seeds, dev_tokens, steps, overrides) -> dict:
    # The base config (its data and budget); a shortened run keeps a warm-up that fits it.
    short = {"train.steps": steps, "train.warmup": 0} if steps else {}
    # At a swept rate: a size whose "auto" has no chosen rate yet is what a sweep is for.
    base = build_config("content", preset=preset, overrides={**(overrides or {}), **short, "train.lr": lrs[0]})
    data = prepare(base.data)
    tok = data.tokenizer
    train, dev = dev_split(np.array(data.streams.train), dev_tokens, base.train.seq_len)

    def dev_bytes(ids: np.ndarray) -> int:
        return len(tok.decode(np.asarray(ids).tolist(), skip_special_tokens=True).encode("utf-8"))

    # The held-out stream is not passed on: the dev slice takes its place in every evaluation.
    streams = Streams(train=train, val=dev, val_bytes=dev_bytes)
    device = torch.device("cuda" if base.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    rows = []
    for model_name in models:
        for lr in lrs:
            for warmup in warmups:
                cfg = build_config("content", preset=preset, overrides={
                    **(overrides or {}), **({"train.steps": steps} if steps else {}), "model": model_name,
                    "train.lr": lr, "train.warmup": min(warmup, steps or base.train.steps),
                    # one dev evaluation at the end, over the whole slice; nothing periodic to pay for
                    "train.eval_every": steps or base.train.steps, "train.eval_tokens": base.train.seq_len,
                    "train.final_eval_tokens": dev_tokens})
                for seed in seeds:
                    model = build_model(cfg, vocab_size=tok.get_vocab_size(), seq_len=cfg.train.seq_len, seed=seed)
                    t0 = time.perf_counter()
                    out = train_lm(model, streams, cfg.train, seed, device=device)
                    row = {"model": model_name, "lr": lr, "warmup": cfg.train.warmup, "seed": seed,
                           "dev_loss": out["final"]["loss"], "dev_bpb": out["final"]["bpb"],
                           "seconds": round(time.perf_counter() - t0, 1)}
                    log(f"{model_name:4s} lr {lr:.0e} warm-up {row['warmup']:4d} seed {seed}: "
                        f"dev loss {row['dev_loss']:.4f} ({row['seconds']} s)")
                    rows.append(row)
    choice = {}
    for model_name in models:
        mine = [r for r in rows if r["model"] == model_name]
        by_cfg: dict[tuple, list[float]] = {}
        for r in mine:
            by_cfg.setdefault((r["lr"], r["warmup"]), []).append(r["dev_loss"])
        (lr, warmup), losses = min(by_cfg.items(), key=lambda kv: (float(np.mean(kv[1])), kv[0]))
        choice[model_name] = {"lr": lr, "warmup": warmup, "dev_loss": float(np.mean(losses)), "seeds": len(losses)}
    return {
        "preset": preset, "steps": steps or base.train.steps, "batch": base.train.batch,
        "seq_len": base.train.seq_len, "size": base.size, "corpus": base.data.corpus,
        # per model: a preset may give each model its own rate (train.lr=auto, resolved as a run resolves it)
        "preset_lr": {m: _preset_lr(preset, m, overrides) for m in models},
        "preset_warmup": build_config("content", preset=preset,
                                      overrides={**(overrides or {}), "train.lr": lrs[0]}).train.warmup,
        "train_tokens": int(train.size), "dev_tokens": int(dev.size), "held_out_read": False,
        "overrides": overrides or {}, "rows": rows, "choice": choice, "device": str(device),
        "machine": machine_info(),
    }


def _preset_lr(preset: str, model: str, overrides: dict | None) -> float | None:
    """The rate the preset trains ``model`` at, or None where it says "auto" and no rate is chosen for its size
    (the ValueError of ema_core.learning_rates.resolve): the sweep is then what chooses it."""
    try:
        return build_config("content", preset=preset, overrides={**(overrides or {}), "model": model}).lr
    except ValueError:
        return None


def _rate_text(lr: float | None) -> str:
    return "auto, none chosen for this size yet" if lr is None else f"{lr:g}"


def print_report(r: dict) -> None:
    print(f"lm learning-rate sweep: preset {r['preset']} ({r['steps']} steps of {r['batch']}×{r['seq_len']} tokens, "
          f"size {r['size']}), corpus {r['corpus']}; dev slice = the last {r['dev_tokens']:,} training tokens "
          f"(trained on the {r['train_tokens']:,} before them; the held-out text unread)")
    print_rows(r["rows"], [("model", "model", "5s"), ("lr", "lr", "8.0e"), ("warmup", "warm-up", "8d"),
                           ("seed", "seed", "5d"), *DEV_COLUMNS])
    for model, c in r["choice"].items():
        print(f"choice for {model}: lr {c['lr']:g}, warm-up {c['warmup']} (dev loss {c['dev_loss']:.4f}, "
              f"{c['seeds']} seed(s)); the preset has lr {_rate_text(r['preset_lr'][model])}, "
              f"warm-up {r['preset_warmup']}")
    m = r["machine"]
    print(f"machine: {m['cpu']}, {m['cores_usable']} usable cores, torch {m['torch']}, "
          f"{m['torch_threads']} threads, load {m['loadavg_start']} before the run; device {r['device']}")


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected PATH=VALUE, got {text!r}")
    return key.strip(), value.strip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lm_lr", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="quick", help="the lm run preset whose budget is swept (default: quick)")
    p.add_argument("--models", default="spen,gpt", help="comma-separated: spen, gpt")
    p.add_argument("--lrs", type=_floats, default=list(DEFAULT_LRS), help="peak learning rates, comma-separated")
    p.add_argument("--warmups", type=_ints, default=list(DEFAULT_WARMUPS), help="warm-up steps, comma-separated")
    p.add_argument("--seeds", type=_ints, default=[0], help="seeds, comma-separated (the mean decides)")
    p.add_argument("--dev-tokens", type=int, default=65_536, help="tokens cut from the end of the training stream")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps (default: the preset's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--set", dest="overrides", type=_setting, action="append", default=[],
                   help="any other lm setting, as `emalab run --set` takes it (data.vocab_size=512)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    a = p.parse_args(argv)
    report = sweep(a.preset, tuple(m.strip() for m in a.models.split(",") if m.strip()), a.lrs, a.warmups,
                   a.seeds, a.dev_tokens, a.steps, dict(a.overrides), a.threads)
    show(report, a.json, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
