"""The overview, jobs and export pages through AppTest, over a real store and real job processes."""
import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from finished_run import run_in_process
from ema_core.studies.content.learning_rates import TABLES as CONTENT_RATES
from jobs.runner import LocalRunner

APP = str(Path(__file__).resolve().parents[1] / "app.py")
# Liveness only: a script run or a job that has not ended by then is stuck, however busy the machine.
TIMEOUT = 600


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _page(path: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    if path:
        at.switch_page(path).run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def _finished_run(home, **overrides) -> str:
    cfg = dict(alphas=(0.5,), vocab=8, dim=8, max_lag=2, n_train=256, n_test=128, steps=20, batch=64,
               checkpoint_every=10, log_every=5) | overrides
    return run_in_process(home, "dilution", cfg)


def test_overview_on_an_empty_store(home):
    at = _page()
    assert at.title[0].value == "EMA Lab"
    assert any("2604.08556" in c.value for c in at.sidebar.caption)
    assert [m.value for m in at.metric][:2] == ["0", "0"]
    assert any("empty" in i.value for i in at.info)
    assert any("Run the quick reproduction" == b.label for b in at.button)


def test_quick_reproduction_launches_every_kind_and_both_language_models(home, registered):
    from ema_core.experiments import REGISTRY, build_config

    at = _page()
    at.button(key="quick_repro").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    # Every kind's quick preset, each once, in the studies' order, and for content SPEN *and* the GPT: the
    # content claim from one click.
    assert [kind for kind, _, _ in registered] == ["dilution", "structure", "content", "content"]
    assert all(preset == "quick" for _, _, preset in registered)
    lm = [cfg for kind, cfg, _ in registered if kind == "content"]
    assert sorted(cfg["model"] for cfg in lm) == ["gpt", "spen"]
    # The two differ in the model only: same data, tokenizer, budget and seed, and train.lr=auto (each
    # model trains at its own rate, chosen on dev, which the run resolves and records).
    assert {**lm[0], "model": None} == {**lm[1], "model": None} and lm[0]["train"]["lr"] == "auto"
    for cfg in lm:
        assert cfg == build_config("content", preset="quick", overrides={"model": cfg["model"]}).model_dump()
    tiny = next(t for t in CONTENT_RATES if t.name == "tiny")
    assert tiny.rates["spen"] != tiny.rates["gpt"]
    for kind, cfg, _ in registered:
        if kind != "content":
            assert cfg == build_config(kind, preset="quick").model_dump()
    # The boundary map (about 27 minutes on 2 cores) and the depth comparison (about 10) are launched from
    # their own pages, not from this click, and lm_eval evaluates a finished run again.
    assert set(REGISTRY) == {"dilution", "structure", "content", "boundary", "depth", "lm_eval"}
    assert not any(REGISTRY[k].one_click for k in ("boundary", "depth", "lm_eval"))
    assert any("Launched" in s.value for s in at.success)


def test_overview_counts_what_the_store_holds(home):
    _finished_run(home)
    at = _page()
    runs, metric_rows = at.metric[0].value, at.metric[1].value
    assert runs == "1" and int(metric_rows.replace(",", "")) > 0
    assert len(at.dataframe) == 1


def test_jobs_page_launches_and_shows_a_job(home):
    at = _page("pages/jobs.py")
    assert at.title[0].value == "Jobs"
    at.text_area(key="launch_overrides").set_value(
        "vocab=8\ndim=8\nmax_lag=2\nn_train=256\nn_test=128\nsteps=20\nbatch=64\nalphas=0.5"
    )
    at.button[0].click()  # the form's submit button
    at.run()
    assert not at.exception
    assert any("Launched" in s.value for s in at.success), [e.value for e in at.error]
    run_id = re.search(r"Launched: (dilution-\w+-s\d+)", at.success[0].value).group(1)
    runner = LocalRunner(home=home)
    assert runner.wait(run_id, timeout=TIMEOUT) == "done", runner.logs(run_id)
    at.run()
    assert any(run_id in p.proto.text for p in at.get("progress"))


def test_a_job_card_tells_jobs_apart_and_a_relaunch_says_already_done(home):
    at = _page("pages/jobs.py")
    at.text_area(key="launch_overrides").set_value(
        "vocab=8\ndim=8\nmax_lag=2\nn_train=256\nn_test=128\nsteps=20\nbatch=64\nalphas=0.5\ncheckpoint_every=10")
    at.button[0].click()
    at.run()
    run_id = re.search(r"Launched: (dilution-\w+-s\d+)", at.success[0].value).group(1)
    runner = LocalRunner(home=home)
    assert runner.wait(run_id, timeout=TIMEOUT) == "done", runner.logs(run_id)
    at.run()
    assert not at.exception
    # The card: kind, preset, the settings that differ from it and the seed; state, progress and age.
    heads = [m.value for m in at.markdown if m.value.startswith("**dilution quick")]
    assert len(heads) == 1 and "vocab=8" in heads[0] and "seed 0" in heads[0] and "lr" not in heads[0]
    bar = next(p.proto.text for p in at.get("progress") if run_id in p.proto.text)
    assert f"{run_id}** · done · 100% · created " in bar and bar.endswith(" ago")
    codes = [c.value for c in at.code]
    assert any('"vocab": 8' in c and '"lr": 0.02' in c for c in codes)  # the config
    assert any("final_loss/α=0.5: " in c and "nats, summed over lags" in c for c in codes)  # the summary, in units
    assert any("checkpoint at step 10" in c for c in codes)  # the log, a line per checkpoint

    # The same settings again: nothing runs, and the page says so, with the result page and a free seed.
    at.button[0].click()
    at.run()
    assert not at.exception
    assert not any("Launched" in s.value for s in at.success)
    assert any(f"Already done: {run_id}" in i.value and "next free seed is 1" in i.value for i in at.info)
    assert any("export" in link.proto.page for link in at.get("page_link"))
    at.button(key="launch_seed_next_free").click()
    at.run()
    assert at.number_input(key="launch_seed").value == 1
    assert runner.status(run_id)["attempts"] == 1 and len(list((home / "runs").iterdir())) == 1


def test_jobs_page_rejects_a_bad_override_and_writes_nothing(home):
    at = _page("pages/jobs.py")
    at.text_area(key="launch_overrides").set_value("vocab=1")
    at.button[0].click()
    at.run()
    assert any("vocab" in e.value for e in at.error)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_export_page_previews_and_offers_downloads(home):
    run_id = _finished_run(home)
    at = _page("pages/export.py")
    at.selectbox(key="export_table").set_value("dilution_accuracy")
    at.run()
    assert not at.exception
    frame = at.dataframe[0].value
    assert set(frame["run_id"]) == {run_id} and len(frame) == 3  # one rate, lags 0..2
    labels = {b.label for b in at.get("download_button")}
    assert {"CSV", "LaTeX", "Markdown", "Parquet", "SVG", "PNG"} <= labels  # every format store.export offers
    at.toggle(key="export_grouped").set_value(True)
    at.run()
    assert not at.exception
    assert "accuracy_mean" in at.dataframe[0].value.columns


def test_export_page_says_an_empty_table_is_empty(home):
    at = _page("pages/export.py")
    at.selectbox(key="export_table").set_value("lm_eval")
    at.run()
    assert not at.exception
    assert any(i.value.startswith("empty: no rows") for i in at.info), [i.value for i in at.info]
