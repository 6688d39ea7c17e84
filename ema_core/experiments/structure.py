"""Structure: grammar → SPCN (no labels) → linear probes → BiGRU (supervised) → transfer and depth tests.

One run is one seed.  Phases, each resumable from its start (checkpoints after every SPCN pass and
after each phase; every phase is a pure function of the config and seed, so a resumed run equals
an uninterrupted one):

1. sentences: train (the last ``dev_fraction`` of it is the dev split that chooses the probes'
   and the BiGRU's regularisation/stopping), test (within grammar, held-out sentences), novel
   (new open-class words) and deep (nested clauses) — :mod:`ema_core.grammar`;
2. SPCN: Hebbian passes over the train stream (token ids and sentence starts only);
3. probes on SPCN's features (instantaneous, traces, both) of the trained and of an untrained
   SPCN, and the control task; scored per role on test, novel and deep;
4. the BiGRU, trained on the same train/dev sentences, scored the same way.

Results: ``probe_accuracy`` rows (role | "overall", feature_set, split, accuracy) and a summary
whose keys the CLI prints with ``--json`` (see ``summarise``).
"""
from __future__ import annotations

import functools
import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ema_core.bigru import BiGRUConfig, predict, train_bigru
from ema_core.config import seed_field
from ema_core.experiments.dilution_sweep import deterministic_torch
from ema_core.grammar import N_WORDS, ROLES, STRUCTURES, GrammarConfig, Sentence, sample_sentences, stream, vocabulary
from ema_core.probes import PROBE_KINDS, accuracy_by_label, apply_control, control_labels, fit_probe
from ema_core.protocol import Cancelled, Experiment, Reporter, StoredConfig, check_checkpoint
from ema_core.spcn import FEATURE_SETS, SPCN, SPCNConfig, SPCNState

KIND = "structure"
CHECKPOINT_FORMAT = 1
SPLITS_SCORED = ("test", "novel", "deep")
ROLE_NAMES = [r.name for r in ROLES]
# The SPCN feature set that stands for "SPCN" where the paper compares one number with the BiGRU:
# the traces, the paper's headline representation (0.960 within the grammar).
SPCN_HEADLINE = "traces"



class StructureConfig(BaseModel):
    """Grammatical roles from SPCN traces (zero labels) against a supervised BiGRU.

    The components' configs are composed whole (``spcn.units``, ``bigru.hidden``): each setting is
    declared once, by the component that reads it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_train: int = Field(1500, ge=20, le=200_000, description="training sentences (the dev split is cut from them)")
    n_eval: int = Field(500, ge=10, le=100_000, description="sentences in each of the test, novel and deep splits")
    dev_fraction: float = Field(0.2, ge=0.05, le=0.5, description="share of the training sentences kept for dev")
    grammar: GrammarConfig = GrammarConfig()
    spcn: SPCNConfig = SPCNConfig()
    probe: str = Field("ridge", description=f"linear probe: one of {', '.join(PROBE_KINDS)}")
    bigru: BiGRUConfig = BiGRUConfig()
    seed: int = seed_field("seed of the sentences, SPCN's random parts, probes and BiGRU")

    def model_post_init(self, _context) -> None:
        if self.probe not in PROBE_KINDS:
            raise ValueError(f"probe must be one of {', '.join(PROBE_KINDS)}, got {self.probe!r}")
        if int(self.n_train * self.dev_fraction) < 1 or int(self.n_train * (1 - self.dev_fraction)) < 1:
            raise ValueError(f"n_train={self.n_train} leaves no dev or no train sentences at dev_fraction={self.dev_fraction}")


PRESETS: dict[str, dict] = {
    # One seed in well under a minute on 2 cores, BiGRU included; the same comparisons, smaller.
    "quick": {"n_train": 1000, "n_eval": 300, "spcn.units": 192, "spcn.k": 12, "spcn.passes": 2},
    # The sizes behind the figures in docs/benchmarks.md; a few minutes per seed on 2 cores.
    "paper": {"n_train": 4000, "n_eval": 1000, "spcn.units": 256, "spcn.k": 16, "spcn.passes": 3},
}


def sentences(cfg: StructureConfig) -> dict[str, list[Sentence]]:
    """The five splits of one run; a pure function of the config (its seed included)."""
    train = sample_sentences(cfg.grammar, cfg.n_train, cfg.seed, "train")
    n_dev = int(cfg.n_train * cfg.dev_fraction)
    return {"train": train[:-n_dev], "dev": train[-n_dev:],
            **{s: sample_sentences(cfg.grammar, cfg.n_eval, cfg.seed, s) for s in SPLITS_SCORED}}


def run(cfg: StructureConfig, reporter: Reporter) -> dict:
    with deterministic_torch():
        return _run(cfg, reporter, time.perf_counter())


def _run(cfg: StructureConfig, reporter: Reporter, t_start: float) -> dict:
    ckpt = reporter.load_checkpoint()  # first: a bad checkpoint fails before any work
    saved = _check_checkpoint(ckpt[1], cfg) if ckpt is not None else {}
    elapsed_before = float(saved.get("elapsed", 0.0))
    rows: list[dict] = list(saved.get("rows", []))
    parts: dict = dict(saved.get("parts", {}))
    checkpoint = functools.partial(_checkpoint, cfg, reporter, t_start, elapsed_before, parts)
    data, streams = _build_data(cfg, reporter)
    phase = saved.get("phase", "spcn")
    passes_done = int(saved.get("passes_done", 0))
    state = SPCNState.from_checkpoint(saved["spcn"]) if saved.get("spcn") else None
    model = SPCN(cfg.spcn, cfg.seed, state)
    if phase == "spcn":
        _train_spcn(cfg, reporter, model, streams, passes_done, rows, parts, checkpoint)
        phase = "probes"
    if phase == "probes":
        rows = _probe_spcn(cfg, reporter, model, streams, rows, checkpoint)
    rows += _train_and_score_bigru(cfg, reporter, model, data, streams, rows, parts, checkpoint)
    summary = summarise(rows, parts)
    summary["seconds"] = elapsed_before + time.perf_counter() - t_start
    reporter.progress(1.0, "done")
    return {"summary": summary, "tables": {"probe_accuracy": rows}}


def _total_steps(cfg: StructureConfig) -> int:
    """The progress bar's units: the passes, the probes, the BiGRU."""
    return cfg.spcn.passes + 2


def _checkpoint(cfg: StructureConfig, reporter: Reporter, t_start: float, elapsed_before: float, parts: dict,
                rows: list[dict], phase: str, passes_done: int, state: SPCNState | None) -> None:
    """Save the run's state as it enters or stops in ``phase``."""
    reporter.save_checkpoint(passes_done + {"spcn": 0, "probes": 1, "bigru": 2}[phase], {
        "format": CHECKPOINT_FORMAT, "config": cfg.model_dump_json(), "phase": phase,
        "passes_done": passes_done, "spcn": state.as_checkpoint() if state is not None else {},
        "rows": rows, "parts": parts, "elapsed": elapsed_before + time.perf_counter() - t_start,
    })


def _build_data(cfg: StructureConfig, reporter: Reporter) -> tuple[dict[str, list[Sentence]], dict]:
    """The run's sentences and their token and role streams, per split."""
    reporter.progress(0.0, "sampling sentences")
    data = sentences(cfg)
    streams = {name: stream(s) for name, s in data.items()}
    _check_unseen(streams)
    return data, streams


def _train_spcn(cfg: StructureConfig, reporter: Reporter, model: SPCN, streams, passes_done: int, rows: list[dict],
                parts: dict, checkpoint) -> None:
    """SPCN's Hebbian passes from ``passes_done`` on (no labels), its prediction error measured around them."""
    P = cfg.spcn.passes
    tok, _, start = streams["train"]  # the roles are never handed to SPCN
    if passes_done == 0:
        parts["prediction_error_untrained"] = model.prediction_error(tok, start)
    for p in range(passes_done, P):
        reporter.progress(p / _total_steps(cfg), f"SPCN: Hebbian pass {p + 1}/{P}")
        before = SPCNState(model.state.W.copy(), model.state.err_var.copy(), model.state.updates)
        errs = model.train(tok, start, passes=1, should_stop=reporter.should_stop)
        if reporter.should_stop():  # a partial pass is dropped: the resume redoes it whole
            checkpoint(rows, "spcn", p, before)
            raise Cancelled(p)
        reporter.log(p + 1, {"spcn/pred_error": float(np.mean(errs))})
        checkpoint(rows, "spcn", p + 1, model.state)
    parts["prediction_error_trained"] = model.prediction_error(tok, start)


def _probe_spcn(cfg: StructureConfig, reporter: Reporter, model: SPCN, streams, rows: list[dict],
                checkpoint) -> list[dict]:
    """Probes on trained and untrained SPCN, and the control task; their rows."""
    P = cfg.spcn.passes
    reporter.progress(P / _total_steps(cfg), "probing SPCN's features")
    try:
        rows = _probe_all(cfg, model, SPCN(cfg.spcn, cfg.seed), streams, reporter, step=P + 1)
    except Cancelled:
        checkpoint(rows, "probes", P, model.state)  # the probes restart whole: each is one closed-form fit
        raise Cancelled(P + 1) from None
    checkpoint(rows, "bigru", P, model.state)
    return rows


def _train_and_score_bigru(cfg: StructureConfig, reporter: Reporter, model: SPCN, data, streams, rows: list[dict],
                           parts: dict, checkpoint) -> list[dict]:
    """Train the supervised BiGRU and score it on each scored split; its rows."""
    P = cfg.spcn.passes
    reporter.progress((P + 1) / _total_steps(cfg), "training the BiGRU")
    def log(epoch: int, metrics: dict) -> None:
        reporter.log(P + 1 + epoch, metrics)

    try:
        net, info = train_bigru(cfg.bigru, data["train"], data["dev"], cfg.seed, log=log,
                                should_stop=reporter.should_stop)
    except Cancelled:
        checkpoint(rows, "bigru", P, model.state)  # the BiGRU restarts from scratch: it is the cheap part
        raise Cancelled(P + 2) from None
    parts["bigru_epochs"] = int(info.get("epochs", 0))
    out: list[dict] = []
    for split in SPLITS_SCORED:
        acc = accuracy_by_label(streams[split][1], predict(net, data[split]), ROLE_NAMES)
        out += [{"role": r, "feature_set": "bigru", "split": split, "accuracy": a} for r, a in acc.items()]
    return out


def _probe_all(cfg: StructureConfig, trained, untrained, streams, reporter: Reporter, step: int):
    """``probe_accuracy`` rows of the trained and untrained SPCN's probes and of the control task."""
    rows: list[dict] = []
    y_train, y_dev = streams["train"][1], streams["dev"][1]
    # Every training-vocabulary type gets a control label (a small train split may miss a few types
    # that dev or test hold); novel words are not scored on the control task.
    ctrl = control_labels(streams["train"][0], y_train, cfg.seed, types=np.arange(N_WORDS))
    c_train, c_dev, c_test = (apply_control(streams[s][0], ctrl) for s in ("train", "dev", "test"))

    def feats(model, split):
        tok, _, start = streams[split]
        return {k: v.astype(np.float32) for k, v in model.features(tok, start).items()}

    for prefix, model in (("", trained), ("untrained/", untrained)):
        F = {s: feats(model, s) for s in ("train", "dev", *SPLITS_SCORED)}
        for name in FEATURE_SETS:
            if reporter.should_stop():
                raise Cancelled(step)
            probe = fit_probe(F["train"][name], y_train, F["dev"][name], y_dev, kind=cfg.probe, seed=cfg.seed)
            reporter.log(step, {f"probe/dev_acc/{prefix}{name}": probe.dev_accuracy[probe.reg]})
            for split in SPLITS_SCORED:
                acc = accuracy_by_label(streams[split][1], probe.predict(F[split][name]), ROLE_NAMES)
                rows += [{"role": r, "feature_set": prefix + name, "split": split, "accuracy": a}
                         for r, a in acc.items()]
            if prefix == "":
                # The control task: the same probe (kind and chosen regularisation) on random
                # word-type labels, so that the gap is what the features hold beyond word identity.
                cp = fit_probe(F["train"][name], c_train, F["dev"][name], c_dev, kind=cfg.probe,
                               grid=(probe.reg,), seed=cfg.seed)
                c_acc = float((cp.predict(F["test"][name]) == c_test).mean())
                rows.append({"role": "overall", "feature_set": f"control/{name}", "split": "test", "accuracy": c_acc})
    rows += _word_majority_rows(streams)
    return rows


def _word_majority_rows(streams) -> list[dict]:
    """The word-identity baseline: each word type's most frequent training role (unseen words:
    the most frequent role overall).  What a representation of the current word alone can give."""
    tok, roles, _ = streams["train"]
    overall = int(np.bincount(roles, minlength=len(ROLES)).argmax())
    table = {int(w): int(np.bincount(roles[tok == w], minlength=len(ROLES)).argmax()) for w in np.unique(tok)}
    rows = []
    for split in SPLITS_SCORED:
        pred = np.array([table.get(int(w), overall) for w in streams[split][0]], dtype=np.int64)
        acc = accuracy_by_label(streams[split][1], pred, ROLE_NAMES)
        rows += [{"role": r, "feature_set": "word_majority", "split": split, "accuracy": a} for r, a in acc.items()]
    return rows


def _check_unseen(streams) -> None:
    # The novel split's open-class words must be new to everything trained here; the grammar
    # guarantees it, and this makes a change that broke it fail loudly instead of inflating transfer.
    seen = set(np.unique(streams["train"][0])) | set(np.unique(streams["dev"][0]))
    if max(seen) >= N_WORDS:
        raise RuntimeError("a training sentence holds a word id outside the training vocabulary")
    novel = set(np.unique(streams["novel"][0])) - seen
    if not novel:
        raise RuntimeError("the novel split holds no word unseen in training")


def summarise(rows: list[dict], parts: dict) -> dict:
    """The run's summary (the keys ``emalab run structure --json`` promises), from the result rows."""
    acc = {(r["feature_set"], r["split"], r["role"]): r["accuracy"] for r in rows}

    def get(fs: str, split: str, role: str = "overall") -> float | None:
        return acc.get((fs, split, role))

    def structural(fs: str, split: str) -> float | None:
        vals = [acc[(fs, split, r.name)] for r in ROLES if not r.lexical and (fs, split, r.name) in acc]
        return float(np.mean(vals)) if vals else None

    within = {fs: get(fs, "test") for fs in (*FEATURE_SETS, "bigru")}
    out = {
        "grammar": {"words": len(vocabulary()), "structures": len(STRUCTURES), "roles": len(ROLES)},
        "within": within,
        "transfer": {fs: get(fs, "novel") for fs in (*FEATURE_SETS, "bigru")},
        "deep": {fs: get(fs, "deep") for fs in (*FEATURE_SETS, "bigru")},
        "structural_roles": {"spcn": structural(SPCN_HEADLINE, "novel"), "bigru": structural("bigru", "novel")},
        "structural_roles_within": {"spcn": structural(SPCN_HEADLINE, "test"), "bigru": structural("bigru", "test")},
        "agent_det_transfer": {"spcn": get(SPCN_HEADLINE, "novel", "agent_det"),
                               "bigru": get("bigru", "novel", "agent_det")},
        "spcn_over_bigru": (within[SPCN_HEADLINE] / within["bigru"]
                            if within.get(SPCN_HEADLINE) is not None and within.get("bigru") else None),
        "word_majority": get("word_majority", "test"),
        "untrained": {fs: get(f"untrained/{fs}", "test") for fs in FEATURE_SETS},
        "selectivity": {fs: (get(fs, "test") - get(f"control/{fs}", "test"))
                        if get(f"control/{fs}", "test") is not None and get(fs, "test") is not None else None
                        for fs in FEATURE_SETS},
        "spcn_feature": SPCN_HEADLINE,
    }
    for key in ("prediction_error_untrained", "prediction_error_trained", "bigru_epochs"):
        if key in parts:
            out[key] = parts[key]
    return out


def _check_checkpoint(state: dict, cfg: StructureConfig) -> dict:
    check_checkpoint(state, what="structure checkpoint", fmt=CHECKPOINT_FORMAT,
                     keys=("phase", "passes_done", "spcn", "rows", "parts", "elapsed"),
                     expect={"config": StoredConfig(KIND, cfg)})
    if state["phase"] not in ("spcn", "probes", "bigru"):
        raise ValueError(f"checkpoint names an unknown phase {state['phase']!r}")
    return state


EXPERIMENT = Experiment(
    kind=KIND,
    config_cls=StructureConfig,
    presets=PRESETS,
    run=run,
    description="Grammatical roles: SPCN traces (Hebbian, zero labels) probed per role against a supervised BiGRU.",
)
