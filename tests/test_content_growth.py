"""How the gap grows (ema_core.studies.content.growth.gap_growth): the fit of SPEN ÷ GPT against training tokens on
the plateau's evaluations, its interval and its guard, the chart, and the Content page's section.  Hand-made
rows of the store's ``lm_token_class_pairs`` and synthetic runs of the ``long`` preset (known inputs, never
results)."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from apptest import ok, open_page

from ema_core import palette
from ema_core.studies.content.growth import (ANNEALED, GROWTH_POOLS, gap_growth, growth_points, growth_series,
                                             growth_statement, size_statement, size_trend)
from ema_core.studies.content.shared import ALL_TOKENS, PAPER_PARAMS, PAPER_RATIO, PAPER_TOKENS, RECALL
from ema_core.experiments import build_config
from ema_core.figures import chart_to_svg
from ema_core.studies.content.figures import CURVE_WIDTH, EXTRAPOLATED, FITTED, growth_chart, growth_frame
from ema_core.lm.token_classes import CLASSES
from ema_core.rundir import RunDir, run_id_for
from ema_core.schedule import peak_steps
from store import ingest
from store.content import lm_family_runs, lm_token_class_pairs

# The long preset's budget: 5,000 steps of 8 × 256 tokens, warm-up 200, the last fifth decaying, an
# evaluation every 250 steps.
LONG = dict(steps=5000, warmup=200, every=250, per_step=2048, decay_frac=0.2)
# Tokens per class of one held-out text (the same at every evaluation).
TOKENS = {"recall_1_16": 300, "recall_17_64": 200, "recall_65_256": 100, "recall_257_plus": 0, "first": 400,
          "other": 500}
GPT_LOSS = 3.0
TRUE = {"all": (-0.5, 0.1), "recall": (-1.0, 0.2)}  # Δ = a + b·log10 t, nats/token


def _deltas(t: float, noise: float, rng) -> tuple[float, float]:
    """Δ on every token and on recall tokens at ``t`` training tokens (plus noise)."""
    (a, b), (ar, br) = TRUE["all"], TRUE["recall"]
    return (a + b * math.log10(t) + rng.normal(0, noise) if noise else a + b * math.log10(t),
            ar + br * math.log10(t) + rng.normal(0, noise) if noise else ar + br * math.log10(t))


def _spen_per_token(d_all: float, d_recall: float) -> dict[str, float]:
    """SPEN's loss per token per class such that the recall pool is d_recall above the GPT's, and every token
    pooled d_all above it."""
    recall = sum(TOKENS[c] for c in RECALL)
    rest = sum(TOKENS.values()) - recall
    d_rest = (d_all * (recall + rest) - d_recall * recall) / rest
    return {c: GPT_LOSS + (d_recall if c in RECALL else d_rest) for c in CLASSES}


def _rows(seeds=(0, 1, 2), noise=0.0, seed=0, schedule="wsd", off_plateau=0.0, budget=LONG, train_tokens=None,
          family=None, size=None, params=None):
    """lm_token_class_pairs rows of SPEN linear and its GPT at every periodic evaluation (and a final one);
    ``off_plateau`` is added to Δ at the evaluations of the warm-up and of the decay (the final's included).
    With ``family``, the runs are of a group named by their length within that family (runs of other
    lengths may join them)."""
    group = f"g{budget['steps']}" if family else "g"
    tag = f"-{budget['steps']}" if family else ""
    rng = np.random.default_rng(seed)
    peak = peak_steps(schedule, budget["steps"], budget["warmup"], budget["decay_frac"])
    out = []
    for s in seeds:
        evaluations = [("periodic", step) for step in range(budget["every"], budget["steps"] + 1, budget["every"])]
        for evaluation, step in [*evaluations, ("final", budget["steps"])]:
            t = step * budget["per_step"]
            d_all, d_recall = _deltas(t, noise, rng)
            if step - 1 not in peak:
                d_all, d_recall = d_all + off_plateau, d_recall + off_plateau
            spen = _spen_per_token(d_all, d_recall)
            for run_id, model, per, gpt in ((f"gpt-{s}{tag}", "gpt", None, None),
                                            (f"lin-{s}{tag}", "spen", spen, f"gpt-{s}{tag}")):
                for c, n in TOKENS.items():
                    loss = (GPT_LOSS if per is None else per[c]) * n
                    out.append(dict(run_id=run_id, group_id=group, family_id=family, size=size, params=params,
                                    model=model, predictor="linear", attn_input="state",
                                    seed=s, gpt_run_id=gpt, schedule=schedule, warmup=budget["warmup"],
                                    steps=budget["steps"], decay_frac=budget["decay_frac"], evaluation=evaluation,
                                    step=step, tokens_seen=t, train_tokens=train_tokens, partition="class",
                                    **{"class": c}, tokens=n, loss=loss))
    return out


def _width(fit) -> float:
    lo, hi = fit.interval(fit.at)
    return hi - lo


# -- the fit -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pool", list(GROWTH_POOLS))
def test_the_fit_recovers_a_known_line_on_the_plateau(pool):
    fit = gap_growth(_rows(), pool)
    a, b = TRUE[pool]
    assert fit.a == pytest.approx(a, abs=1e-9) and fit.b == pytest.approx(b, abs=1e-9)
    # 250 … 4,000 steps: 16 evaluations on the plateau per seed (the decay starts at step 4,000).
    assert fit.n_steps == 16 and fit.n_points == 48 and fit.n_seeds == 3
    assert fit.t_range == (250 * 2048, 4000 * 2048) and fit.measured_to == 5000 * 2048
    assert fit.at == PAPER_TOKENS == 8e9 and fit.paper == PAPER_RATIO and round(fit.paper, 1) == 7.9
    assert fit.predicted == pytest.approx(math.exp(a + b * math.log10(8e9)))
    assert fit.decades == pytest.approx(math.log10(8e9 / (4000 * 2048)))
    assert fit.variant == "SPEN linear" and fit.label == GROWTH_POOLS[pool][0]
    lo, hi = fit.predicted_interval
    assert lo == pytest.approx(fit.predicted) and hi == pytest.approx(fit.predicted)  # no noise: no width


def test_the_first_pass_fit_reads_only_points_before_any_token_was_seen_twice():
    rows = _rows(train_tokens=4_096_000)  # 2,000 steps of 2,048 tokens: evaluations 250 … 2,000 on the first pass
    points = growth_points(rows)
    assert [p.passes for p in points if p.seed == 0][:2] == pytest.approx([0.125, 0.25])
    assert {p.step for p in points if p.first_pass} == set(range(250, 2001, 250))
    first, every = gap_growth(rows, first_pass=True), gap_growth(rows, at=None)
    assert first.first_pass and first.n_steps == 8 and first.t_range[1] == 2000 * 2048 and first.passes_to == 1.0
    assert first.extrapolated and first.at == PAPER_TOKENS
    assert every.n_steps == 16 and every.passes_to == pytest.approx(2.0) and not every.extrapolated
    assert every.at == every.t_range[1] and every.decades == 0
    assert first.b == pytest.approx(TRUE["all"][1], abs=1e-9)  # the same line, fitted on fewer points
    # The split's size not known (a run stored before it was kept): no point is on a known first pass.
    assert gap_growth(_rows(), first_pass=True) is None
    assert gap_growth(_rows(), at=None).passes_to is None


def test_warm_up_and_decay_points_are_measured_but_not_fitted():
    budget = {**LONG, "warmup": 600}  # 250 and 500 steps are in the warm-up
    rows = _rows(off_plateau=0.7, budget=budget)
    points = growth_points(rows)
    phases = {p.step: p.phase for p in points if p.seed == 0}
    assert [s for s, ph in phases.items() if ph == "warm-up"] == [250, 500]
    assert [s for s, ph in phases.items() if ph == "decay"] == list(range(4250, 5001, 250))
    assert all(ph == "plateau" for s, ph in phases.items() if 600 < s <= 4000)
    fit = gap_growth(rows)
    assert fit.a == pytest.approx(TRUE["all"][0], abs=1e-9) and fit.b == pytest.approx(TRUE["all"][1], abs=1e-9)
    assert fit.n_steps == 14 and fit.t_range[0] == 750 * 2048
    assert len(fit.points) == 3 * 20  # every periodic evaluation is drawn, the unfitted ones too
    # The final evaluation (on more held-out tokens) is not a point.
    assert {p.step for p in fit.points} == set(range(250, 5001, 250))


def test_the_interval_holds_the_truth_and_widens_with_noise():
    a, b = TRUE["all"]
    truth = a + b * math.log10(PAPER_TOKENS)
    quiet, loud = gap_growth(_rows(noise=0.01, seed=3)), gap_growth(_rows(noise=0.05, seed=3))
    for fit in (quiet, loud):
        lo, hi = fit.interval(PAPER_TOKENS)
        assert lo < truth < hi and fit.interval_from == "seeds and residuals"
    assert _width(loud) > 3 * _width(quiet)
    # It widens away from the points fitted: the extrapolation is less sure than the fit over the data.
    assert _width(quiet) > (lambda lo, hi: hi - lo)(*quiet.interval(quiet.t_range[1]))
    # Over many draws, the 95 % interval holds the truth nearly always (conservative: the wider of two).
    held = sum(lo < truth < hi for lo, hi in
               (gap_growth(_rows(noise=0.03, seed=100 + k)).interval(PAPER_TOKENS) for k in range(30)))
    assert held >= 27


def test_one_seed_takes_its_interval_from_the_residuals():
    fit = gap_growth(_rows(seeds=(4,), noise=0.02))
    assert fit.n_seeds == 1 and fit.interval_from == "residuals (one seed)" and not fit.seed_lines
    lo, hi = fit.interval(PAPER_TOKENS)
    assert lo < fit.delta(PAPER_TOKENS) < hi and "from the residuals (one seed)" in growth_statement([fit])


def test_too_few_points_give_no_fit():
    # A cosine decays from the end of its warm-up: no evaluation is on a plateau.
    assert gap_growth(_rows(schedule="cosine")) is None
    assert {p.phase for p in growth_points(_rows(schedule="cosine"))} == {"decay"}  # 250 steps: past warm-up
    # Two evaluations on the plateau are not enough for a line with an interval; three are.
    short = dict(steps=1000, warmup=200, every=250, per_step=2048, decay_frac=0.5)  # plateau steps 200 … 499
    assert gap_growth(_rows(budget=short)) is None
    assert gap_growth(_rows(budget={**short, "decay_frac": 0.25})) is not None  # 250, 500, 750
    # No GPT to divide by, or no periodic rows: nothing.
    assert gap_growth([r for r in _rows() if r["model"] == "spen"]) is None
    assert gap_growth([r for r in _rows() if r["evaluation"] == "final"]) is None
    with pytest.raises(ValueError):
        gap_growth(_rows(), "band")


def test_the_long_preset_holds_sixteen_evaluations_on_its_plateau_and_the_rate_agrees():
    from ema_core.lm.train import TrainConfig, lr_at

    train = build_config("content", preset="long").train
    peak = peak_steps(train.schedule, train.steps, train.warmup, train.decay_frac)
    on = [s for s in range(train.eval_every, train.steps + 1, train.eval_every) if s - 1 in peak]
    assert train.schedule == "wsd" and len(on) == 16 and (on[0], on[-1]) == (250, 4000)
    # The plateau is where lr_at holds the peak; every step after it is below.
    cfg = TrainConfig(**{**train.model_dump(), "lr": 1e-2})
    assert all(lr_at(s, cfg) == 1e-2 for s in peak) and lr_at(peak.start - 1, cfg) == 1e-2
    assert all(lr_at(s, cfg) < 1e-2 for s in range(peak.stop + 1, train.steps))
    assert not peak_steps("cosine", train.steps, train.warmup, train.decay_frac)


# -- annealed points, and sizes --------------------------------------------------------------------------

def _lengths(lengths=(1250, 2500, 5000), off=0.3, **kw):
    """Rows of one family trained to several lengths (each a wsd run of that many steps)."""
    return [r for steps in lengths for r in _rows(budget={**LONG, "steps": steps}, family="f", off_plateau=off, **kw)]


def test_annealed_points_are_the_finals_of_one_family_one_per_length():
    rows = _lengths(train_tokens=20_000_000)
    points = growth_points(rows, annealed=True)
    assert {p.phase for p in points} == {ANNEALED} and {p.group for p in points} == {"f"}
    assert sorted({p.step for p in points}) == [1250, 2500, 5000] and len(points) == 9
    fit = gap_growth(rows, annealed=True, first_pass=True)
    # Each final is the line plus the cool-down's shift: the slope is the plateau's, the intercept moves.
    assert fit.annealed and fit.n_steps == 3 and fit.n_seeds == 3
    assert fit.b == pytest.approx(TRUE["all"][1], abs=1e-9) and fit.a == pytest.approx(TRUE["all"][0] + 0.3, abs=1e-9)
    assert "9 runs of 3 lengths, each evaluated once cooled down" in growth_statement([fit])
    subtitle = " ".join(growth_chart([fit]).to_dict()["title"]["subtitle"])
    assert "through the finals of runs of several lengths, each cooled down" in subtitle
    # Two lengths are not a line with an interval.
    assert gap_growth(_lengths((2500, 5000)), annealed=True) is None


def test_a_family_s_shorter_runs_add_no_seed_to_the_plateau_fit():
    # The 1,250- and 2,500-step runs repeat the long run's plateau: one point per (family, seed, step).
    alone, joined = gap_growth(_rows(family="f")), gap_growth(_lengths())
    assert joined.n_seeds == alone.n_seeds == 3 and joined.n_points == alone.n_points == 48
    assert joined.b == pytest.approx(alone.b, abs=1e-12)
    # The longest run's point is kept: at step 2,000 the 2,500-step run is already decaying.
    kept = {(p.seed, p.step): p for p in growth_points(_lengths())}
    assert kept[(0, 2250)].phase == "plateau"


def test_a_fit_refuses_two_sizes_and_the_series_split_them():
    rows = _rows(size="tiny", params=1.4e6) + [
        {**r, "run_id": r["run_id"] + "-m", "gpt_run_id": r["gpt_run_id"] and r["gpt_run_id"] + "-m",
         "group_id": "m", "size": "micro"} for r in _rows(size="micro", params=4.8e5)]
    with pytest.raises(ValueError, match="one size on one corpus"):
        gap_growth(rows)
    series = growth_series(rows)
    assert list(series) == [(None, "tiny"), (None, "micro")]
    fits = [gap_growth(part) for part in series.values()]
    assert [f.size for f in fits] == ["tiny", "micro"] and fits[1].params == pytest.approx(4.8e5)
    said = growth_statement([gap_growth(series[(None, "micro")], first_pass=False)])
    assert "at size micro (0.48M parameters: 8B tokens is 16,667 per parameter, the paper's 62)" in said


def test_the_size_trend_recovers_a_known_slope_at_matched_tokens_per_parameter():
    # Δ = c + d·log10 N at 7.43 tokens per parameter: two sizes, three seeds each, a cool-down shift common to both.
    c, d = -0.2, 0.15
    rows = []
    for size, params, steps in (("micro", 476_288, 1728), ("tiny", 1_378_560, 5000)):
        budget = {**LONG, "steps": steps, "every": steps}
        part = _rows(budget=budget, family=size, size=size, params=params, off_plateau=0.0, train_tokens=12_000_000)
        t = steps * LONG["per_step"]
        shift = c + d * math.log10(params) - _deltas(t, 0, None)[0]  # move the final onto the size line
        for r in part:
            if r["model"] == "spen" and r["evaluation"] == "final":
                r["loss"] += shift * r["tokens"]
        rows += part
    trend = size_trend(rows)
    assert trend.b == pytest.approx(d, abs=1e-9) and trend.a == pytest.approx(c, abs=1e-9)
    assert trend.tokens_per_param == pytest.approx(7.43, abs=0.01) and trend.n_points == 6 and trend.n_seeds == 6
    assert [s[0] for s in trend.sizes] == ["micro", "tiny"] and trend.at == PAPER_PARAMS
    assert trend.ratio(PAPER_PARAMS) == pytest.approx(math.exp(c + d * math.log10(PAPER_PARAMS)))
    said = size_statement([trend])
    assert said.startswith("At 7.43 training tokens per parameter") and "an extrapolation over 2.0 decades" in said
    assert "from 2 sizes" in said and "not a measurement" in said
    # Past one pass, one size alone, or two at different tokens per parameter: no trend.
    assert size_trend([{**r, "train_tokens": 1_000_000} for r in rows]) is None
    assert size_trend([r for r in rows if r["size"] == "tiny"]) is None
    assert size_trend([r for r in rows if r["size"] == "tiny" or r["step"] != 1728]) is None


# -- the chart ----------------------------------------------------------------------------------------------

def test_the_chart_draws_both_pools_measured_fitted_and_extrapolated():
    fits = [gap_growth(_rows(noise=0.02), pool) for pool in GROWTH_POOLS]
    chart = growth_chart(fits)
    spec = chart.to_dict()
    svg = chart_to_svg(chart)  # as the page's download renders it: nothing cut at a label limit
    assert "How the gap grows — an extrapolation" in svg and "8B" in svg and "…" not in svg
    assert "extrapolation" in json.dumps(spec["title"]) and spec["width"] == CURVE_WIDTH
    data = spec["datasets"]
    lines = next(v for v in data.values() if v and "segment" in v[0])
    assert {r["pool"] for r in lines} == {ALL_TOKENS, "recall tokens"}
    assert {r["segment"] for r in lines} == {FITTED, EXTRAPOLATED}
    far = [r for r in lines if r["segment"] == EXTRAPOLATED]
    assert max(r["tokens"] for r in far) == pytest.approx(PAPER_TOKENS)
    assert all(r["lo"] <= r["ratio"] <= r["hi"] for r in lines)
    # Solid over the points fitted, dashed beyond them; both axes logarithmic.
    dashed = [layer["encoding"]["strokeDash"] for layer in spec["layer"] if "strokeDash" in layer.get("encoding", {})]
    assert dashed and dashed[0]["scale"]["domain"] == [FITTED, EXTRAPOLATED]
    assert dashed[0]["scale"]["range"][1] != [1, 0]
    colors = next(layer["encoding"]["color"]["scale"] for layer in spec["layer"]
                  if "color" in layer.get("encoding", {}))
    assert colors["domain"] == [ALL_TOKENS, "recall tokens"]
    assert colors["range"] == [palette.TOKEN_POOL_COLORS["all"], palette.TOKEN_POOL_COLORS["recall"]]
    assert set(palette.TOKEN_POOL_COLORS) == set(GROWTH_POOLS)
    assert spec["layer"][1]["encoding"]["x"]["scale"]["type"] == "log"
    assert spec["layer"][1]["encoding"]["y"]["scale"]["type"] == "log"
    # The paper's ratio at its budget, and the measured points (means and seeds), unfitted ones too.
    paper = next(v for v in data.values() if v and "label" in v[0])
    assert paper == [{"tokens": PAPER_TOKENS, "ratio": PAPER_RATIO,
                      "label": "paper: 7.9 (130M parameters, 8B tokens)"}]
    points = next(v for v in data.values() if v and "phase" in v[0])
    assert {r["phase"] for r in points} == {"plateau", "decay"}
    assert {r["line"] for r in points} >= {"mean", "seed 0 · settings g"}
    table = growth_frame(fits)
    assert list(table["tokens"]) == [ALL_TOKENS, "recall tokens"] and table["ratio_at"][0] == fits[0].predicted
    assert table["paper"][0] == PAPER_RATIO and math.isnan(table["paper"][1])


# -- the page --------------------------------------------------------------------------------------------

def _store(home, schedule="wsd", seeds=(0, 1, 2), noise=0.01, train_tokens=20_000_000, lengths=(LONG["steps"],),
           preset="long", params=900_000, overrides=None):
    """SPEN linear and its GPT at the long preset's settings (trained to each of ``lengths`` steps), their
    periodic evaluations split by token class with a known Δ (synthetic: no training), written and ingested
    as a finished job leaves them."""
    before = os.environ.get("EMALAB_HOME")
    os.environ["EMALAB_HOME"] = str(home)
    run_ids = []
    try:
        for model, s, steps in ((m, s, n) for n in lengths for m in ("gpt", "spen") for s in seeds):  # a run each
            rows = _rows(seeds=seeds, noise=noise, schedule=schedule, budget={**LONG, "steps": steps},
                         off_plateau=0.2)
            cfg = build_config("content", preset=preset, seed=s, overrides={
                "model": model, "predictor": "linear", "attn_input": "state", "train.schedule": schedule,
                "train.steps": steps, **(overrides or {})})
            mine = [r for r in rows if r["seed"] == s and r["model"] == model]
            loss = {(r["evaluation"], r["step"]): 0.0 for r in mine}
            for r in mine:
                loss[(r["evaluation"], r["step"])] += r["loss"] / sum(TOKENS.values())
            final = loss[("final", steps)]
            summary = {"model": model, "params": params, "tokens": steps * LONG["per_step"],
                       "val_loss": final, "val_ppl": math.exp(final), "val_bpb": final / 1.6, "corpus": "austen",
                       "vocab_size": cfg.data.vocab_size, "size": cfg.size, "seconds": 1.0, "lr": cfg.lr,
                       "lr_auto": True, "train_tokens": train_tokens}
            tables = {"lm_eval": [{"split": "val", "loss": final, "ppl": math.exp(final), "bpb": final / 1.6}],
                      "lm_token_classes": [{k: r[k] for k in ("evaluation", "step", "partition", "class", "tokens",
                                                               "loss")} for r in mine]}
            rd = RunDir.for_id(run_id_for("content", cfg.model_dump(mode="json"), s), home)
            rd.create("content", cfg.model_dump(mode="json"), s)
            rd.write_status(state="running", started="2026-01-01T00:00:00+00:00", progress=0.0, pid=os.getpid())
            rd.append_events([{"seq": i, "step": step, "metrics": {"val/loss": v}}
                              for i, ((ev, step), v) in enumerate(sorted(loss.items())) if ev == "periodic"])
            rd.write_result({"summary": summary, "tables": tables})
            rd.write_status(state="done", ended="2026-01-01T00:00:00+00:00", progress=1.0)
            run_ids.append(rd.run_id)
        assert ingest(home, run_ids)["errors"] == []
    finally:
        if before is None:
            os.environ.pop("EMALAB_HOME", None)
        else:
            os.environ["EMALAB_HOME"] = before
    return run_ids


def test_the_page_draws_the_fit_and_says_it_is_an_extrapolation(tmp_path, monkeypatch):
    home = tmp_path / "home"
    run_ids = _store(home, seeds=(0, 1))
    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = open_page("pages/content.py")
    subheaders = [s.value for s in at.subheader]
    assert subheaders.index("How the gap grows") == subheaders.index("Where the gap lives: token classes") + 1
    # The store's rows carry the schedule, and the page's sentence is the fit of those rows.
    rows = lm_token_class_pairs(run_ids).to_dict("records")
    assert {r["schedule"] for r in rows} == {"wsd"} and {r["warmup"] for r in rows} == {200}
    assert {r["train_tokens"] for r in rows} == {20_000_000}  # every point on the first pass
    fits = [gap_growth(rows, pool, first_pass=True) for pool in GROWTH_POOLS]
    assert fits[0].b == pytest.approx(TRUE["all"][1], abs=0.05) and fits[0].n_steps == 16
    said = growth_statement(fits)
    assert any(m.value == said for m in at.markdown)
    assert said.startswith("Measured to 10.2M training tokens") and "an extrapolation over 3.0 decades" in said
    assert "not a measurement; the paper: 7.9" in said
    titles = [json.dumps(json.loads(c.proto.spec).get("title")) for c in at.get("vega_lite_chart")]
    assert sum("How the gap grows" in t and "extrapolation" in t for t in titles) == 1
    table = next(t.value for t in at.table if "interval from" in t.value.columns)
    assert list(table["tokens"]) == [ALL_TOKENS, "recall tokens"] and list(table["the paper"]) == ["7.9", ""]
    lo, hi = fits[0].predicted_interval
    assert table["95 % interval"][0] == f"{lo:.2f}–{hi:.2f}"
    keys = {b.key for b in at.get("download_button")}
    assert {"content_growth_dl_first_pass_csv", "content_growth_dl_first_pass_md", "content_growth_dl_first_pass_tex",
            "content_growth_chart_first_pass_svg", "content_growth_chart_first_pass_png"} <= keys
    assert not any("Every plateau evaluation, repeated passes included" in m.value for m in at.markdown)
    assert any(c.value.startswith("No annealed fit") for c in at.caption)


def test_the_page_fits_the_annealed_finals_of_every_length_of_the_settings_picked(tmp_path, monkeypatch):
    home = tmp_path / "home"
    run_ids = _store(home, seeds=(0, 1), lengths=(1250, 2500, 5000))
    monkeypatch.setenv("EMALAB_HOME", str(home))
    rows = lm_token_class_pairs(run_ids).to_dict("records")
    assert len({r["group_id"] for r in rows}) == 3 and len({r["family_id"] for r in rows}) == 1
    assert {r["size"] for r in rows} == {"tiny"} and {r["params"] for r in rows} == {900_000}
    # Picked by default: the newest settings only (one length); the family brings the other two.
    assert lm_family_runs([run_ids[0]]) == sorted(run_ids)
    at = ok(open_page("pages/content.py"))
    assert not at.warning  # the default pick is one length's runs: the family brings the other two
    assert any(m.value.startswith("**Annealed points**") for m in at.markdown)
    fits = [gap_growth(rows, pool, first_pass=True, annealed=True) for pool in GROWTH_POOLS]
    said = growth_statement(fits)
    assert any(m.value == said for m in at.markdown) and "6 runs of 3 lengths" in said
    table = next(t.value for t in at.table if "runs" in t.value.columns)
    assert list(table["runs"]) == [3, 3] and list(table["seeds"]) == [2, 2]
    assert {"content_growth_dl_annealed_csv", "content_growth_chart_annealed_svg"} <= {
        b.key for b in at.get("download_button")}


def test_a_fit_through_repeated_passes_is_shown_within_its_data_and_never_extrapolated(tmp_path, monkeypatch):
    home = tmp_path / "home"
    _store(home, seeds=(0, 1), train_tokens=880_000)  # Austen's training split: 11.6 passes by the end
    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = ok(open_page("pages/content.py"))
    assert any("No extrapolation to the paper's budget" in i.value for i in at.info)
    assert any("Every plateau evaluation, repeated passes included" in m.value for m in at.markdown)
    said = next(m.value for m in at.markdown if m.value.startswith("Measured to 10.2M"))
    assert "Not extended to the paper's budget" in said and "to 9.3 passes" in said and "8B" not in said
    table = next(t.value for t in at.table if "passes" in t.value.columns)
    assert "the paper" not in table.columns and not any("extrapolated" in c for c in table.columns)
    titles = [json.loads(c.proto.spec).get("title") or {} for c in at.get("vega_lite_chart")]
    texts = [" ".join(t["text"]) if isinstance(t.get("text"), list) else str(t.get("text")) for t in titles]
    assert sum("within the data" in t for t in texts) == 1 and not any("an extrapolation" in t for t in texts)


def test_the_page_says_what_would_make_the_fit_when_there_are_too_few_points(tmp_path, monkeypatch):
    home = tmp_path / "home"
    _store(home, schedule="cosine", seeds=(0,))
    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = ok(open_page("pages/content.py"))
    assert any(s.value == "How the gap grows" for s in at.subheader)
    assert any("Not enough points" in c.value and "--preset fresh" in c.value for c in at.caption)
    titles = [json.dumps(json.loads(c.proto.spec).get("title")) for c in at.get("vega_lite_chart")]
    assert not any("How the gap grows" in t for t in titles)
    assert not any(b.key.startswith("content_growth") for b in at.get("download_button"))


def test_an_annealed_fit_with_one_seed_at_every_length_says_where_its_interval_comes_from():
    # Seed 0 at every length, seeds 1 and 2 at the longest only: one seed has a line of its own.
    rows = [r for r in _lengths() if r["seed"] == 0 or r["steps"] == 5000]
    fit = gap_growth(rows, annealed=True)
    assert fit.n_points == 5 and fit.n_steps == 3 and fit.n_seeds == 3 and not fit.seed_lines
    assert fit.interval_from == "residuals (1 of 3 seeds with 3 points of its own)"


def test_the_page_sets_two_sizes_side_by_side_at_matched_tokens_per_parameter(tmp_path, monkeypatch):
    home = tmp_path / "home"
    _store(home, seeds=(0, 1), params=1_378_560)
    # micro's budget: 1,728 steps of 2,048 tokens, 7.43 per parameter as tiny's 5,000 (read on Austen here).
    _store(home, seeds=(0, 1), params=476_288, lengths=(1728,), preset="fresh_micro",
           overrides={"data.corpus": "austen"})
    monkeypatch.setenv("EMALAB_HOME", str(home))
    at = ok(open_page("pages/content.py"))
    said = size_statement([t for t in (size_trend(lm_token_class_pairs(None, "final").to_dict("records"), pool)
                                       for pool in GROWTH_POOLS)])
    assert said.startswith("At 7.43 training tokens per parameter") and "from 2 sizes" in said
    assert any(m.value == said for m in at.markdown)
    table = next(t.value for t in at.table if "SPEN ÷ GPT (measured)" in t.value.columns)
    assert list(table["size"][:3]) == ["micro", "tiny", "the paper's (extrapolated)"]
    assert list(table["seeds"][:3]) == ["2", "2", ""]
    assert "content_gap_by_size_dl_csv" in {b.key for b in at.get("download_button")}
