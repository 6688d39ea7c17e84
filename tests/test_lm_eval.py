"""A finished language-model run keeps its model: reloaded, evaluated again on another text, sampled.

Two real ``lm`` runs (SPEN and the GPT, six steps of two 32-token windows on a small local text) are
run once for the module through the worker, as a job runs them, so their folders hold what a finished
job leaves: config, result and the artifacts (tokenizer, final weights).
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from ema_core.experiments import REGISTRY, NullReporter, build_config
from ema_core.studies.content.evaluation import EVALUATION, SPLIT_PREFIX, load_trained, trained_run
from ema_core.lm.data import CorpusConfig, prepare
from ema_core.lm.gpt import GPT
from ema_core.lm.token_classes import BANDS, CLASSES
from ema_core.lm.train import Streams, evaluate
from ema_core.lm.trained import MODEL_ARTIFACT, TOKENIZER_ARTIFACT, held_out_passages, sample, sample_ids
from ema_core.rundir import RunDir, run_id_for
from jobs import cli
from finished_run import run_in_process
from runcache import home as _home_env
from test_lm_train import _one_thread  # noqa: F401 - every test here on one torch thread

TINY = dict(steps=6, batch=2, seq_len=32, warmup=2, eval_every=2, eval_tokens=256, final_eval_tokens=1024,
            vocab_size=512, log_every=2, threads=1)
WORDS = ("the cat dog bird house river garden letter morning evening sister brother friend captain lady "
         "walked saw found kept wrote said took gave quickly slowly never always very much little great").split()


def _text(seed: int, paragraphs: int) -> str:
    # Sentences of a few words, names that come back within a paragraph (recall tokens), blank-line paragraphs.
    rng = np.random.default_rng(seed)
    names = ["Anne", "Wentworth", "Elliot", "Musgrove", "Russell"]
    out = []
    for _ in range(paragraphs):
        who = rng.choice(names, 2, replace=False)
        sentences = [" ".join([str(rng.choice(who)), *rng.choice(WORDS, int(rng.integers(4, 9)))]).capitalize() + "."
                     for _ in range(int(rng.integers(3, 7)))]
        out.append(" ".join(sentences))
    return "\n\n".join(out) + "\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A data folder with two finished lm runs ({"spen", "gpt"}: run id), their corpus and another text."""
    root = tmp_path_factory.mktemp("lm_eval")
    home = root / "home"
    corpus, other = root / "corpus.txt", root / "other.txt"
    corpus.write_text(_text(0, 400), encoding="utf-8")
    other.write_text(_text(1, 60), encoding="utf-8")
    threads = torch.get_num_threads()
    with _home_env(home):
        runs = {model: run_in_process(home, "content", {**TINY, "model": model, "corpus": str(corpus)}, preset="quick")
                for model in ("spen", "gpt")}
    torch.set_num_threads(threads)
    return {"home": home, "corpus": corpus, "other": other, "runs": runs}


@pytest.fixture
def home(lab, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(lab["home"]))
    return lab["home"]


def _result(home: Path, run_id: str) -> dict:
    return RunDir.for_id(run_id, home).read_result()


def _reeval(**overrides) -> dict:
    cfg = build_config("lm_eval", overrides={"threads": 1, **overrides})
    return REGISTRY["lm_eval"].run(cfg, NullReporter())


# -- the final weights ---------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["spen", "gpt"])
def test_a_run_keeps_its_final_weights_and_they_give_its_final_loss_exactly(lab, home, model):
    run_id = lab["runs"][model]
    rd = RunDir.for_id(run_id, home)
    path = rd.artifact_path(MODEL_ARTIFACT)
    state = torch.load(path, map_location="cpu", weights_only=True)  # data only: loads without code
    params = _result(home, run_id)["summary"]["params"]
    assert set(state) and all(isinstance(t, torch.Tensor) for t in state.values())
    # float32, about four bytes a parameter (a tied GPT embedding is stored once)
    assert 4 * params <= path.stat().st_size < 4 * params * 1.1 + 100_000

    cfg, net, tok = load_trained(run_id)
    assert not net.training and cfg.model == model and isinstance(net, GPT) == (model == "gpt")
    assert tok.to_str() == rd.artifact_path(TOKENIZER_ARTIFACT).read_text(encoding="utf-8")
    data = prepare(cfg.data)
    streams = Streams(train=np.array(data.streams.train), val=np.array(data.streams.val),
                      val_bytes=lambda ids: len(tok.decode(np.asarray(ids).tolist()).encode()))
    ev = evaluate(net, streams, cfg.train.seq_len, cfg.train.final_eval_tokens, token_classes=True)
    summary = _result(home, run_id)["summary"]
    assert ev["loss"] == summary["val_loss"] and ev["tokens"] == summary["val_tokens"]
    # and by a run folder's path, as by its id
    assert load_trained(rd.path).config == cfg


# -- evaluating again ----------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["spen", "gpt"])
def test_on_its_own_held_out_text_a_reevaluation_is_the_runs_final_evaluation(lab, home, model):
    run_id = lab["runs"][model]
    source = _result(home, run_id)
    out = _reeval(run=run_id, corpus=str(lab["corpus"]), eval_tokens=TINY["final_eval_tokens"])
    s = out["summary"]
    assert (s["source_run"], s["model"], s["corpus"], s["split"], s["step"]) == (
        run_id, model, str(lab["corpus"]), "val", TINY["steps"])
    assert s["val_loss"] == source["summary"]["val_loss"] == s["source_val_loss"]
    assert s["val_tokens"] == source["summary"]["val_tokens"]
    assert s["token_classes"] == source["summary"]["token_classes"]
    assert s["token_bands"] == source["summary"]["token_bands"]  # the run's own training split's bands
    assert s["train_overlap"] == 0.0 and s["bands_from"] == str(lab["corpus"])

    [row] = out["tables"]["lm_eval"]
    assert row["split"] == SPLIT_PREFIX + "val" == "reeval:val" and row["loss"] == s["val_loss"]
    rows = out["tables"]["lm_token_classes"]
    assert {r["evaluation"] for r in rows} == {EVALUATION} == {"reeval"}
    assert {r["step"] for r in rows} == {TINY["steps"]}
    final = {(r["partition"], r["class"]): r for r in source["tables"]["lm_token_classes"]
             if r["evaluation"] == "final"}
    assert {(r["partition"], r["class"]): (r["tokens"], r["loss"]) for r in rows} == {
        k: (r["tokens"], r["loss"]) for k, r in final.items()}
    for partition, names in (("class", CLASSES), ("band", BANDS)):
        part = [r for r in rows if r["partition"] == partition]
        assert [r["class"] for r in part] == list(names)
        assert sum(r["tokens"] for r in part) == s["val_tokens"]
        assert abs(sum(r["loss"] for r in part) / s["val_tokens"] - s["val_loss"]) < 1e-6


def test_a_local_text_the_run_never_saw_is_evaluated_whole(lab, home):
    out = _reeval(run=lab["runs"]["spen"], corpus=str(lab["other"]), split="all")
    s = out["summary"]
    assert s["corpus"] == str(lab["other"]) and s["split"] == "all" and s["train_overlap"] == 0.0
    assert s["val_tokens"] > 1024 and s["val_tokens"] % TINY["seq_len"] == 0  # every whole window of it
    assert out["tables"]["lm_eval"][0]["split"] == "reeval:all"
    assert set(s["token_classes"]) == set(CLASSES) and set(s["token_bands"]) == set(BANDS)
    for partition in ("class", "band"):
        part = [r for r in out["tables"]["lm_token_classes"] if r["partition"] == partition]
        assert abs(sum(r["loss"] for r in part) / s["val_tokens"] - s["val_loss"]) < 1e-6
    # The run's own training text, evaluated whole, is reported as such.
    own = _reeval(run=lab["runs"]["spen"], corpus=str(lab["corpus"]), split="all", eval_tokens=256)["summary"]
    assert own["train_overlap"] > 0.9


def _tree(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in (home / "runs").rglob("*")}


def _older_run(home: Path) -> str:
    """A finished lm run as runs were before they kept their weights: artifacts without model.pt, and
    the newest checkpoint before the end (the quick preset's step 200 of 300)."""
    config = build_config("content", preset="quick", seed=9).model_dump(mode="json")
    rd = RunDir.for_id(run_id_for("content", config, 9), home)
    if not rd.exists():
        rd.create("content", config, 9)
        rd.save_artifact(TOKENIZER_ARTIFACT, b"{}")
        rd.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        for step in (100, 200):
            (rd.checkpoint_dir / f"step-{step:09d}.pt").write_bytes(b"")
        rd.write_result({"summary": {}, "tables": {}})
        rd.write_status(state="done")
    return rd.run_id


def _other_kind(home: Path) -> str:
    config = build_config("dilution", preset="quick").model_dump(mode="json")
    rd = RunDir.for_id(run_id_for("dilution", config, 0), home)
    if not rd.exists():
        rd.create("dilution", config, 0)
        rd.write_status(state="done")
    return rd.run_id


@pytest.mark.parametrize("case, message", [
    ("unknown", r"^run: no such run in this data folder .*\(got 'lm-000000000000-s0'\)$"),
    ("no run", r"^run: name the finished lm run to evaluate"),
    ("other kind", r"^run: a dilution run, not a language model \(content\)"),
    ("older", r"^run: it predates kept final weights \(artifacts/model.pt\): its newest checkpoint is at step 200 "
              r"of 300, not the trained model"),
    ("no corpus", r"^data: corpus '\./no/such/text.txt': no such file or folder$"),
    ("short", r"^data.corpus: its held-out text is \d+ tokens under run content-\w+-s0's tokenizer, shorter than one "
              r"window of train.seq_len \+ 1 = 33 tokens$"),
])
def test_bad_inputs_are_refused_in_one_line_and_write_nothing(lab, home, tmp_path, case, message):
    short = tmp_path / "short.txt"
    short.write_text("A few words.\n\nAnd a few more, held out.\n", encoding="utf-8")
    sets = {"unknown": {"run": "lm-000000000000-s0"}, "no run": {},
            "other kind": {"run": _other_kind(home)}, "older": {"run": _older_run(home)},
            "no corpus": {"run": lab["runs"]["gpt"], "corpus": "./no/such/text.txt"},
            "short": {"run": lab["runs"]["gpt"], "corpus": str(short)}}[case]
    with pytest.raises(ValueError, match=message) as info:
        build_config("lm_eval", overrides=sets)
    assert "\n" not in str(info.value)
    before = _tree(home)
    args = ["run", "lm_eval", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], "--json"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(args)
    assert rc == 2 and out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert _tree(home) == before  # no run folder, nothing in any other


def test_an_older_run_or_another_kind_is_refused_by_the_loader_naming_the_run(home):
    older = _older_run(home)
    with pytest.raises(ValueError, match=rf"^run {older}: it predates kept final weights .* step 200 of 300"):
        load_trained(older)
    other = _other_kind(home)
    with pytest.raises(ValueError, match=rf"^run {other}: a dilution run, not a language model"):
        trained_run(other)


def test_a_run_that_has_not_finished_has_no_final_weights_yet(lab, home, tmp_path):
    rd = RunDir.for_id(lab["runs"]["spen"], home)
    copy = RunDir(tmp_path / rd.run_id)
    shutil.copytree(rd.path, copy.path)
    copy.artifact_path(MODEL_ARTIFACT).unlink()
    for state, words in (("running", "running: its final weights are kept when it ends"),
                         ("cancelled", "cancelled before the end of training"),
                         ("done", "it predates kept final weights (artifacts/model.pt): it keeps no checkpoint")):
        copy.write_status(state=state)
        with pytest.raises(ValueError, match="^run .*: " + words.replace("(", r"\(").replace(")", r"\)")):
            load_trained(copy.path)


def test_emalab_run_lm_eval_runs_a_job_that_the_store_keeps_apart_from_the_training_runs(lab, home):
    from store import ingest
    from store.content import lm_eval, lm_final_losses, lm_runs, lm_token_class_pairs

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["run", "lm_eval", "--preset", "quick", "--set", f"run={lab['runs']['gpt']}",
                       "--set", f"corpus={lab['other']}", "--set", "threads=1", "--json"])
    assert rc == 0, err.getvalue()
    record = json.loads(out.getvalue())
    assert record["kind"] == "lm_eval" and record["state"] == "done" and record["source_run"] == lab["runs"]["gpt"]
    assert record["units"]["val_loss"] == "nats/token"
    ingest(home, [*lab["runs"].values(), record["run_id"]])
    rows = lm_eval(split="reeval:val")
    assert list(rows["run_id"]) == [record["run_id"]] and rows["loss"].iloc[0] == record["val_loss"]
    # The content study's queries read the training runs only.
    assert record["run_id"] not in set(lm_runs()["run_id"]) | set(lm_final_losses()["run_id"])
    assert "reeval" not in set(lm_token_class_pairs()["evaluation"])


# -- samples ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["spen", "gpt"])
def test_a_sample_is_the_same_for_a_seed_has_its_length_and_reads_the_last_window_only(lab, home, model):
    trained = load_trained(lab["runs"][model])
    net, tok, window = trained.model, trained.tokenizer, trained.config.train.seq_len
    prompt = "Anne walked the garden. Wentworth saw the letter."
    one = sample_ids(net, tok, prompt, 20, temperature=1.0, top_k=50, seed=3, context=window)
    assert len(one) == 20 and one == sample_ids(net, tok, prompt, 20, 1.0, 50, 3, context=window)
    assert one != sample_ids(net, tok, prompt, 20, 1.0, 50, 4, context=window)
    greedy = sample_ids(net, tok, prompt, 8, temperature=0.0, seed=1, context=window)
    assert greedy == sample_ids(net, tok, prompt, 8, temperature=0.0, seed=2, context=window)
    assert sample(net, tok, prompt, 20, 1.0, 50, 3, context=window) == tok.decode(one, skip_special_tokens=False)
    assert trained.sample(prompt, 20, 1.0, 50, 3) == tok.decode(one, skip_special_tokens=False)
    # A prompt far longer than the window: each step reads the last `window` tokens, no more.
    lengths = []
    hook = net.register_forward_pre_hook(lambda m, args: lengths.append(args[0].shape[1]))
    try:
        sample_ids(net, tok, " ".join([prompt] * 30), 5, seed=0, context=window)
        sample_ids(net, tok, "", 3, seed=0, context=window)  # an empty prompt starts a document
    finally:
        hook.remove()
    assert lengths == [window] * 5 + [1, 2, 3]
    if model == "spen":
        with pytest.raises(ValueError, match="SPEN has no window of its own"):
            sample_ids(net, tok, prompt, 1)
    else:
        assert sample_ids(net, tok, prompt, 5, 1.0, 50, 3) == one[:5]  # the GPT's own table: the same window


def test_held_out_passages_are_the_same_for_a_seed_and_come_from_the_held_out_text(lab):
    data = CorpusConfig(corpus=str(lab["corpus"]))
    held_out = "".join(data.load().val)
    first = held_out_passages(data, 4, chars=200, seed=0)
    assert first == held_out_passages(data, 4, chars=200, seed=0) != held_out_passages(data, 4, chars=200, seed=1)
    assert len(first) == 4 and all(p in held_out and 0 < len(p) <= 201 and p.endswith(".") for p in first)


@pytest.fixture(scope="module")
def reevals(lab):
    """The SPEN and the GPT run evaluated again on the other text, whole, as finished jobs; everything ingested."""
    from store import ingest
    from tests.finished_run import write_finished_run

    ids = {}
    with _home_env(lab["home"]):
        for model, run_id in lab["runs"].items():
            cfg = build_config("lm_eval", overrides={"run": run_id, "corpus": str(lab["other"]), "split": "all",
                                                     "eval_tokens": 512, "threads": 1})
            result = REGISTRY["lm_eval"].run(cfg, NullReporter())
            ids[model] = write_finished_run(lab["home"], "lm_eval", cfg.model_dump(mode="json"), cfg.seed, [], result)
        report = ingest(lab["home"], [*lab["runs"].values(), *ids.values()])
    assert report["errors"] == [], report["errors"]
    return ids


def test_the_store_pairs_a_spen_reevaluation_with_its_gpts_in_the_same_setting(lab, home, reevals):
    from ema_core.studies.content.gap import class_gaps
    from ema_core.studies.content.shared import ALL_TOKENS
    from store.content import lm_reeval_class_pairs, lm_reevaluations

    ids = reevals
    runs = lm_reevaluations(list(ids.values())).set_index("run_id")
    spen, gpt = runs.loc[ids["spen"]], runs.loc[ids["gpt"]]
    assert (spen["model"], spen["source_run"], spen["gpt_run_id"], spen["split"]) == (
        "spen", lab["runs"]["spen"], ids["gpt"], "all")
    assert gpt["model"] == "gpt" and pd.isna(gpt["gpt_run_id"]) and spen["setting_id"] == gpt["setting_id"]
    assert spen["group_id"] == gpt["group_id"] and spen["seed"] == gpt["seed"] == 0
    assert spen["corpus"] == str(lab["other"]) and spen["tokens"] == 512
    assert spen["source_loss"] == _result(home, lab["runs"]["spen"])["summary"]["val_loss"]

    rows = lm_reeval_class_pairs(spen["setting_id"])
    assert set(rows["run_id"]) == set(ids.values()) and set(rows["evaluation"]) == {"final"}
    split = class_gaps(rows.to_dict("records"), "class")
    overall = split.overall
    assert overall.gap.mean == pytest.approx(spen["loss"] - gpt["loss"], abs=2e-6)  # float32 sums beside float64
    assert overall.tokens == 512 and [c.name for c in split.classes] == list(CLASSES) and ALL_TOKENS
    # The training runs' own pairs query never reads a re-evaluation.
    from store.content import lm_token_class_pairs

    assert not set(lm_token_class_pairs()["run_id"]) & set(ids.values())


def test_the_content_page_shows_the_gap_on_another_text_and_samples_both_models(lab, home, reevals):
    from apptest import open_page

    at = open_page("pages/content.py")
    assert any(s.value == "Evaluated again, on another text" for s in at.subheader)
    assert not at.exception, [e.value for e in at.exception]
    # the re-evaluation's gap table: the page's last one by the class (the training runs' own comes first)
    gap = [t for t in at.table if "all tokens" in t.value.iloc[:, 0].tolist()][-1]
    assert gap.value.shape[0] == len(CLASSES) + 1
    assert at.selectbox(key="content_sample_spen").value == lab["runs"]["spen"] and not at.error
    assert at.selectbox(key="content_sample_passage").value  # a passage of the held-out text
    next(b for b in at.button if b.label == "Sample").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    texts = [t.value for t in at.text]
    assert len(texts) == 3 and texts[0] == at.selectbox(key="content_sample_passage").value  # prompt, SPEN, GPT
    trained = load_trained(lab["runs"]["spen"])
    assert texts[1] == trained.sample(texts[0], 100, 0.8, 50, 0).strip()  # st.text shows it stripped
