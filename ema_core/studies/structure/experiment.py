"""Structure: grammar → SPCN (no labels) → linear probes → BiGRU (supervised) → transfer and depth tests.

One run is one seed.  Phases, each resumable from its start (checkpoints after every SPCN pass and
after each phase; every phase is a pure function of the config and seed, so a resumed run equals
an uninterrupted one):

1. sentences: train (the last ``dev_fraction`` of it is the dev split that chooses the probes'
   and the BiGRU's regularisation/stopping), test (within grammar, held-out sentences), novel
   (new open-class words), deep (nested clauses) and novel_dev (new words from a second pool,
   disjoint from novel's: the tuning pool) — :mod:`ema_core.grammar`;
2. SPCN: Hebbian passes over the train stream (token ids and sentence starts only);
3. probes on SPCN's features (instantaneous, traces, both) of the trained and of an untrained
   SPCN, on the n-gram window (the last 1, 2, 3 word identities and the position: no EMA, no
   SPCN), and the three control tasks; scored per role on the tuning splits (dev, novel_dev) and
   on the scored ones (test, novel, deep);
4. the BiGRU, trained on the same train/dev sentences, scored the same way.

Every setting is chosen on the tuning splits, never on a scored one: the probes' penalty on dev
(``fit_probe``), the BiGRU's epoch on dev, SPCN's context gain by ``tune`` (dev and novel_dev only;
``bench/structure_tune.py``).  The summary says so (``tuned_on``) and carries the dev numbers.

Results: ``probe_accuracy`` rows (role | "overall", feature_set, split, accuracy) and a summary
whose keys the CLI prints with ``--json`` (see ``summarise``).  The paper's claims are judged and
what the numbers show is stated by one rule, from per-seed values, in
:mod:`ema_core.studies.structure.findings`: the store and the page call it on runs, ``bench/structure.py``
on summaries.
"""
from __future__ import annotations

import functools
import time
from typing import Iterable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ema_core.bigru import BiGRUConfig, predict, train_bigru
from ema_core.config import seed_field
from ema_core.studies.dilution.experiment import deterministic_torch
from ema_core.grammar import (CATEGORIES, N_WORDS, ROLES, STRUCTURES, GrammarConfig, Sentence, positions,
                              previous_category, sample_sentences, stream, vocabulary)
from ema_core.probes import (PROBE_KINDS, accuracy_by_label, apply_control, context_keys, control_labels,
                             fit_probe, window_features)
from ema_core.protocol import Cancelled, Experiment, Reporter, StoredConfig, check_checkpoint, moved_into_groups
from ema_core.spcn import FEATURE_SETS, SPCN, SPCNConfig, SPCNState
# The study's names (with the verdict rule and the findings) live in a module without torch, which
# the store reads on every page load.
from ema_core.studies.structure.findings import (CONTROLS, NGRAM_BASELINE, NGRAM_SETS, SPCN_HEADLINE, SPLITS_SCORED,
                                         SPLITS_TUNING)
from ema_core.studies.structure import KIND

# 2: the n-gram window, the context-keyed controls and the tuning splits' rows.  A format-1
# checkpoint still resumes: its SPCN state is kept and its probes are redone (see _check_checkpoint).
CHECKPOINT_FORMAT = 2
ROLE_NAMES = [r.name for r in ROLES]
# Position columns of the window (and keys of the position control): more than the deep split's
# longest sentence (30 tokens at deep_depth 6), so no two positions ever share a column.  A position
# the training sentences never reach (the deep split's) lights a column no training row lit, whose
# weight the probe leaves at zero: like an unseen word, it adds no evidence.
N_POSITIONS = 32
CONTROLLED_SETS = (*FEATURE_SETS, *NGRAM_SETS)
PROBED_SETS = (*FEATURE_SETS, *NGRAM_SETS, "bigru")


class StructureConfig(BaseModel):
    """Grammatical roles from SPCN traces (zero labels) against a supervised BiGRU.

    The components' configs are composed whole (``spcn.units``, ``bigru.hidden``): each setting is
    declared once, by the component that reads it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_train: int = Field(1500, ge=20, le=200_000, description="training sentences (the dev split is cut from them)")
    n_eval: int = Field(500, ge=10, le=100_000,
                        description="sentences in each of the test, novel, deep and novel_dev splits")
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


# SPCN's context gain γ in both presets was chosen by ``python -m bench.structure_tune`` (seeds 0-2,
# γ in 0, 1, 2, 4, 8, 16, 32) on dev numbers only, by its rule: the largest seeds' mean of
# ½ (dev + novel_dev accuracy) of the trace probe.  γ = 8 won in both (quick 0.760 ± 0.005 against
# 0.755 ± 0.027 at γ = 4; paper 0.784 ± 0.010 against 0.780 ± 0.016): a margin within the seeds'
# spread, taken as the rule says.  SPCNConfig's own default stays 4, so that older runs' configs
# keep the γ they ran with.
PRESETS: dict[str, dict] = {
    # One seed in well under a minute on 2 cores, BiGRU included; the same comparisons, smaller.
    "quick": {"n_train": 1000, "n_eval": 300, "spcn.units": 192, "spcn.k": 12, "spcn.passes": 2,
              "spcn.context_gain": 8.0},
    # The sizes behind the figures in docs/benchmarks.md; a few minutes per seed on 2 cores.
    "paper": {"n_train": 4000, "n_eval": 1000, "spcn.units": 256, "spcn.k": 16, "spcn.passes": 3,
              "spcn.context_gain": 8.0},
}


def sentences(cfg: StructureConfig, splits: Iterable[str] = (*SPLITS_SCORED, "novel_dev")) -> dict[str, list[Sentence]]:
    """train, dev and the named splits of one run; a pure function of the config (its seed included).

    Each split is its own random stream, so leaving one out (``tune`` never draws a scored split)
    changes none of the others.
    """
    train = sample_sentences(cfg.grammar, cfg.n_train, cfg.seed, "train")
    n_dev = int(cfg.n_train * cfg.dev_fraction)
    return {"train": train[:-n_dev], "dev": train[-n_dev:],
            **{s: sample_sentences(cfg.grammar, cfg.n_eval, cfg.seed, s) for s in splits}}


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
        rows = _probe_spcn(cfg, reporter, model, streams, rows, parts, checkpoint)
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


def _probe_spcn(cfg: StructureConfig, reporter: Reporter, model: SPCN, streams, rows: list[dict], parts: dict,
                checkpoint) -> list[dict]:
    """Probes on trained and untrained SPCN and on the n-gram window, and the control tasks; their rows."""
    P = cfg.spcn.passes
    reporter.progress(P / _total_steps(cfg), "probing SPCN's features")
    try:
        rows, penalties, _ = _probe_all(cfg, model, SPCN(cfg.spcn, cfg.seed), streams, reporter, step=P + 1)
    except Cancelled:
        checkpoint(rows, "probes", P, model.state)  # the probes restart whole: each is one closed-form fit
        raise Cancelled(P + 1) from None
    parts["probe_penalty"] = penalties
    checkpoint(rows, "bigru", P, model.state)
    return rows


def _train_and_score_bigru(cfg: StructureConfig, reporter: Reporter, model: SPCN, data, streams, rows: list[dict],
                           parts: dict, checkpoint) -> list[dict]:
    """Train the supervised BiGRU and score it on each tuning and scored split; its rows."""
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
    for split in (*SPLITS_TUNING, *SPLITS_SCORED):
        acc = accuracy_by_label(streams[split][1], predict(net, data[split]), ROLE_NAMES)
        out += [{"role": r, "feature_set": "bigru", "split": split, "accuracy": a} for r, a in acc.items()]
    return out


def ngram_features(streams, splits: Iterable[str], window: int) -> dict[str, np.ndarray]:
    """The n-gram window's features per split: the last ``window`` word identities (one-hot, every
    novel id in one unknown column) and the position in the sentence (``probes.window_features``)."""
    return {s: window_features(streams[s][0], positions(streams[s][2]), window, N_WORDS, N_POSITIONS)
            for s in splits}


def _control_keys(streams, split: str) -> dict[str, np.ndarray]:
    """Each control's key per token of a split: the word type; word × previous category; word × position."""
    tok, _, start = streams[split]
    return {"control": tok,
            "control_prev": context_keys(tok, previous_category(tok, start), len(CATEGORIES) + 1),
            "control_pos": context_keys(tok, np.minimum(positions(start), N_POSITIONS - 1), N_POSITIONS)}


# Every key a control can meet on training words: labels for keys a small train split never
# holds, so that a test token always has one.  Novel words are not scored on the controls.
_CONTROL_TYPES = {"control": N_WORDS, "control_prev": N_WORDS * (len(CATEGORIES) + 1),
                  "control_pos": N_WORDS * N_POSITIONS}


def _probe_all(cfg: StructureConfig, trained, untrained, streams, reporter: Reporter, step: int, *,
               splits: tuple[str, ...] = (*SPLITS_TUNING, *SPLITS_SCORED), controls: bool = True,
               untrained_too: bool = True) -> tuple[list[dict], dict[str, float], dict[str, dict[str, float]]]:
    """``probe_accuracy`` rows of the trained and untrained SPCN's probes, of the n-gram window and
    of the control tasks (scored on test); each probe's penalty as chosen on dev, and the dev
    accuracy of every penalty tried."""
    rows: list[dict] = []
    penalties: dict[str, float] = {}
    dev_by_penalty: dict[str, dict[str, float]] = {}  # every penalty tried → its dev accuracy (tune reports it)
    y_train, y_dev = streams["train"][1], streams["dev"][1]
    keys = {s: _control_keys(streams, s) for s in ("train", "dev", "test")} if controls else {}
    ctrl = {}
    for name, salt in CONTROLS.items() if controls else ():
        mapping = control_labels(keys["train"][name], y_train, cfg.seed, types=np.arange(_CONTROL_TYPES[name]),
                                 stream=salt)
        ctrl[name] = {s: apply_control(keys[s][name], mapping) for s in ("train", "dev", "test")}

    def feats(model, split):
        tok, _, start = streams[split]
        return {k: v.astype(np.float32) for k, v in model.features(tok, start).items()}

    def probe_one(label: str, F: dict[str, np.ndarray], with_controls: bool) -> None:
        if reporter.should_stop():
            raise Cancelled(step)
        probe = fit_probe(F["train"], y_train, F["dev"], y_dev, kind=cfg.probe, seed=cfg.seed)
        penalties[label] = float(probe.reg)
        dev_by_penalty[label] = {f"{reg:g}": float(a) for reg, a in probe.dev_accuracy.items()}
        reporter.log(step, {f"probe/dev_acc/{label}": probe.dev_accuracy[probe.reg]})
        for split in splits:
            acc = accuracy_by_label(streams[split][1], probe.predict(F[split]), ROLE_NAMES)
            rows.extend({"role": r, "feature_set": label, "split": split, "accuracy": a} for r, a in acc.items())
        if not with_controls:
            return
        for name, labels in ctrl.items():
            # The same probe (kind and the penalty chosen on the real task) on random labels, so that
            # the gap is what the features hold beyond what a probe can memorise of that key.
            cp = fit_probe(F["train"], labels["train"], F["dev"], labels["dev"], kind=cfg.probe,
                           grid=(probe.reg,), seed=cfg.seed)
            c_acc = float((cp.predict(F["test"]) == labels["test"]).mean())
            rows.append({"role": "overall", "feature_set": f"{name}/{label}", "split": "test", "accuracy": c_acc})

    needed = ("train", "dev", *splits, *(("test",) if controls else ()))
    needed = tuple(dict.fromkeys(needed))
    for prefix, model in (("", trained), ("untrained/", untrained)) if untrained_too else (("", trained),):
        F = {s: feats(model, s) for s in needed}
        for name in FEATURE_SETS:
            probe_one(prefix + name, {s: F[s][name] for s in needed}, controls and prefix == "")
        del F
    for name, window in NGRAM_SETS.items():
        probe_one(name, ngram_features(streams, needed, window), controls)
    rows += _word_majority_rows(streams, splits)
    return rows, penalties, dev_by_penalty


def _word_majority_rows(streams, splits: Iterable[str] = SPLITS_SCORED) -> list[dict]:
    """The word-identity baseline: each word type's most frequent training role (unseen words:
    the most frequent role overall).  What a representation of the current word alone can give."""
    tok, roles, _ = streams["train"]
    overall = int(np.bincount(roles, minlength=len(ROLES)).argmax())
    table = {int(w): int(np.bincount(roles[tok == w], minlength=len(ROLES)).argmax()) for w in np.unique(tok)}
    rows = []
    for split in splits:
        pred = np.array([table.get(int(w), overall) for w in streams[split][0]], dtype=np.int64)
        acc = accuracy_by_label(streams[split][1], pred, ROLE_NAMES)
        rows += [{"role": r, "feature_set": "word_majority", "split": split, "accuracy": a} for r, a in acc.items()]
    return rows


def _check_unseen(streams) -> None:
    # The novel splits' open-class words must be new to everything trained here, and the tuning
    # pool's (novel_dev) must never be the scored novel split's; the grammar guarantees both, and
    # this makes a change that broke either fail loudly instead of inflating transfer.
    seen = set(np.unique(streams["train"][0])) | set(np.unique(streams["dev"][0]))
    if max(seen) >= N_WORDS:
        raise RuntimeError("a training sentence holds a word id outside the training vocabulary")
    novel = {s: set(np.unique(streams[s][0])) - seen for s in ("novel", "novel_dev") if s in streams}
    if any(not v for v in novel.values()):
        raise RuntimeError("a novel split holds no word unseen in training")
    if len(novel) == 2 and novel["novel"] & novel["novel_dev"]:
        raise RuntimeError("the tuning pool (novel_dev) shares words with the scored novel split")


def summarise(rows: list[dict], parts: dict) -> dict:
    """The run's summary (the keys ``emalab run structure --json`` promises), from the result rows."""
    acc = {(r["feature_set"], r["split"], r["role"]): r["accuracy"] for r in rows}

    def get(fs: str, split: str, role: str = "overall") -> float | None:
        return acc.get((fs, split, role))

    def diff(a: float | None, b: float | None) -> float | None:
        return a - b if a is not None and b is not None else None

    def structural(fs: str, split: str) -> float | None:
        vals = [acc[(fs, split, r.name)] for r in ROLES if not r.lexical and (fs, split, r.name) in acc]
        return float(np.mean(vals)) if vals else None

    within = {fs: get(fs, "test") for fs in PROBED_SETS}
    out = {
        "grammar": {"words": len(vocabulary()), "structures": len(STRUCTURES), "roles": len(ROLES)},
        "within": within,
        "transfer": {fs: get(fs, "novel") for fs in PROBED_SETS},
        "deep": {fs: get(fs, "deep") for fs in PROBED_SETS},
        "structural_roles": {"spcn": structural(SPCN_HEADLINE, "novel"), "bigru": structural("bigru", "novel"),
                             "ngram": structural(NGRAM_BASELINE, "novel")},
        "structural_roles_within": {"spcn": structural(SPCN_HEADLINE, "test"), "bigru": structural("bigru", "test"),
                                    "ngram": structural(NGRAM_BASELINE, "test")},
        "agent_det_transfer": {"spcn": get(SPCN_HEADLINE, "novel", "agent_det"),
                               "bigru": get("bigru", "novel", "agent_det"),
                               "ngram": get(NGRAM_BASELINE, "novel", "agent_det")},
        "spcn_over_bigru": (within[SPCN_HEADLINE] / within["bigru"]
                            if within.get(SPCN_HEADLINE) is not None and within.get("bigru") else None),
        "word_majority": get("word_majority", "test"),
        "untrained": {fs: get(f"untrained/{fs}", "test") for fs in FEATURE_SETS},
        # What the Hebbian learning adds to the headline probe, and how far it is above a window of words.
        "learning_gain": {s: diff(get(SPCN_HEADLINE, s), get(f"untrained/{SPCN_HEADLINE}", s)) for s in SPLITS_SCORED},
        "traces_minus_ngram": {s: diff(get(SPCN_HEADLINE, s), get(NGRAM_BASELINE, s)) for s in SPLITS_SCORED},
        "selectivity": {fs: diff(get(fs, "test"), get(f"control/{fs}", "test")) for fs in CONTROLLED_SETS},
        "selectivity_prev": {fs: diff(get(fs, "test"), get(f"control_prev/{fs}", "test")) for fs in CONTROLLED_SETS},
        "selectivity_pos": {fs: diff(get(fs, "test"), get(f"control_pos/{fs}", "test")) for fs in CONTROLLED_SETS},
        # The numbers the settings were chosen on: dev (the penalty, the BiGRU's epoch) and the
        # tuning pool of new words (novel_dev; with dev, SPCN's context gain — bench/structure_tune.py).
        "tuned_on": "dev",
        "dev": {fs: get(fs, "dev") for fs in PROBED_SETS},
        "novel_dev": {fs: get(fs, "novel_dev") for fs in PROBED_SETS},
        "spcn_feature": SPCN_HEADLINE,
    }
    if "probe_penalty" in parts:
        out["probe_penalty"] = dict(parts["probe_penalty"])
    for key in ("prediction_error_untrained", "prediction_error_trained", "bigru_epochs"):
        if key in parts:
            out[key] = parts[key]
    return out


def _check_checkpoint(state: dict, cfg: StructureConfig) -> dict:
    # A format-1 checkpoint (before the n-gram window and the context controls) resumes too: its
    # SPCN state is the same, and its probe rows lack the new sets, so the probes are redone whole.
    fmt = 1 if state.get("format") == 1 else CHECKPOINT_FORMAT
    check_checkpoint(state, what="structure checkpoint", fmt=fmt,
                     keys=("phase", "passes_done", "spcn", "rows", "parts", "elapsed"),
                     expect={"config": StoredConfig(KIND, cfg)})
    if state["phase"] not in ("spcn", "probes", "bigru"):
        raise ValueError(f"checkpoint names an unknown phase {state['phase']!r}")
    if fmt == 1 and state["phase"] == "bigru":
        state = {**state, "phase": "probes", "rows": []}
    return state


# -- tuning: every knob chosen on dev and the tuning pool, never on a scored split --------------------

def tune(cfg: StructureConfig, should_stop=None) -> dict:
    """Dev numbers of one config and seed, for choosing settings: no scored split is drawn.

    Samples train, dev and novel_dev only, trains SPCN on train, fits the probes on train with the
    penalty chosen on dev, and scores them on dev (within the grammar) and on novel_dev (new words
    from the tuning pool, never those of the scored novel split).  Returns ``{"dev": {set: acc},
    "novel_dev": {set: acc}, "novel_dev_structural": {set: acc}, "probe_penalty": {set: α},
    "probe_dev_accuracy": {set: {α: dev acc}}, "tuned_on": "dev"}`` over SPCN's feature sets and the
    n-gram windows.  SPCN trains its passes in one call here and pass by pass in ``run``: the same
    arithmetic, so these dev numbers equal the run's dev rows (tested).
    """
    stop = should_stop or (lambda: False)
    with deterministic_torch():
        data = sentences(cfg, splits=("novel_dev",))
        streams = {name: stream(s) for name, s in data.items()}
        _check_unseen(streams)
        model = SPCN(cfg.spcn, cfg.seed)
        tok, _, start = streams["train"]
        model.train(tok, start, should_stop=stop)
        if stop():
            raise Cancelled(0)

        class _Quiet:  # _probe_all's reporter: only its stop signal matters here
            def should_stop(self):
                return stop()

            def log(self, step, metrics):
                pass

        rows, penalties, by_penalty = _probe_all(cfg, model, None, streams, _Quiet(), step=0, splits=SPLITS_TUNING,
                                                 controls=False, untrained_too=False)
    acc = {(r["feature_set"], r["split"], r["role"]): r["accuracy"] for r in rows}
    sets = (*FEATURE_SETS, *NGRAM_SETS)

    def structural(fs: str) -> float | None:
        vals = [acc[(fs, "novel_dev", r.name)] for r in ROLES if not r.lexical and (fs, "novel_dev", r.name) in acc]
        return float(np.mean(vals)) if vals else None

    return {"dev": {fs: acc.get((fs, "dev", "overall")) for fs in sets},
            "novel_dev": {fs: acc.get((fs, "novel_dev", "overall")) for fs in sets},
            "novel_dev_structural": {fs: structural(fs) for fs in sets},
            "probe_penalty": penalties, "probe_dev_accuracy": by_penalty, "tuned_on": "dev"}


def headline(summary: dict) -> str:
    """A finished run in one line (its Jobs card, the run table): the overall probe accuracy on SPCN's
    traces and the BiGRU's, within the grammar and on novel vocabulary (the paper's headline pair)."""
    spcn = summary.get("spcn_feature") or SPCN_HEADLINE
    parts = []
    for name, feature in ((f"SPCN {spcn}", spcn), ("BiGRU", "bigru")):
        scores = [(where, (summary.get(group) or {}).get(feature))
                  for where, group in (("within", "within"), ("novel", "transfer"))
                  if isinstance(summary.get(group), dict)]
        shown = [f"{v:.3f} {where}" for where, v in scores if isinstance(v, (int, float))]
        if shown:
            parts.append(f"{name} {', '.join(shown)}")
    return " · ".join(parts)


EXPERIMENT = Experiment(
    kind=KIND, presets=PRESETS, run=run, headline=headline,
    config_cls=StructureConfig,
    description="Grammatical roles: SPCN traces (Hebbian, zero labels) probed per role against a supervised BiGRU.",
    # Runs made before configs were nested: the grammar's, SPCN's and the BiGRU's settings were flat.
    older_paths={**moved_into_groups(grammar="deep_depth held_out_fraction",
                                     spcn="code_dim units k rates reset_at_sentence context_gain passes "
                                          "precision_rate precision_clip"),
                 "hebbian_lr": "spcn.lr", "hebbian_batch": "spcn.batch",
                 **{f"bigru_{name}": f"bigru.{name}"
                    for name in "embed hidden max_epochs patience unk_dropout".split()}},
)
