"""The claims scoreboard: SPEN ÷ GPT judged by the rule, every study's claims in one shape, the runs the
board judges (the group with the most seeds) read from a real store, and the Overview that shows them
and launches the seeds a claim lacks."""
from __future__ import annotations

import doctest
import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ema_core import scoreboard as board_module
from ema_core import verdicts
from ema_core.studies.content.findings import headline_verdict
from ema_core.studies.depth.findings import claim_verdicts as depth_verdicts
from ema_core.experiments import build_config
from ema_core.scoreboard import Score, missing_seeds, plain
from ema_core.studies.depth.findings import scores as depth_scores
from ema_core.studies import STUDIES
from ema_core.studies.structure.findings import NGRAM_BASELINE, SPCN_HEADLINE, STRUCTURAL_ROLES, structure_verdicts
from ema_core.verdicts import Spread
from depth_fixture import SEEDS as DEPTH_SEEDS
from depth_fixture import make_depth_runs
from finished_run import write_finished_run
from lm_fixture import make_lm_runs
from store import ingest
from store.depth import depth_remix, depth_results
from store.scoreboard import scoreboard
from store.structure import probe_accuracy, structure_headlines
from structure_fixture import make_structure_runs

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 600  # liveness only


def test_doctests():
    assert doctest.testmod(board_module).failed == 0
    assert doctest.testmod(verdicts).failed == 0


def _row(model, seed, loss, group="g", predictor="linear", attn_input="state"):
    return dict(model=model, predictor=predictor, attn_input=attn_input, seed=seed, loss=loss, group_id=group)


def test_headline_pairs_spen_linear_with_its_own_gpt_by_settings_and_seed():
    rows = [_row("spen", s, 5.0 + 0.1 * s) for s in (0, 1, 2)] + [
        _row("gpt", 0, 4.0), _row("gpt", 1, 4.2),
        _row("gpt", 2, 1.0, group="other"),                       # another budget: never paired
        _row("gpt", 2, 1.0, predictor="softmax_attention"),       # sized to another SPEN variant
        _row("spen", 2, 9.0, predictor="softmax_attention"),      # not the headline's SPEN
        _row("gpt", 3, float("nan")),                             # a loss that is not finite: left out
    ]
    v = headline_verdict(rows)
    assert v.delta.n == 2
    assert v.delta.mean == pytest.approx(((5.0 - 4.0) + (5.1 - 4.2)) / 2)
    assert v.verdict == "not_judged" and v.word == "not judged: 2 seeds"
    assert v.ratio == pytest.approx(math.exp(v.delta.mean))


def test_headline_is_judged_either_way_by_the_rule():
    worse = headline_verdict([_row("spen", s, 5.0 + 0.01 * s) for s in range(3)]
                             + [_row("gpt", s, 4.0) for s in range(3)])
    better = headline_verdict([_row("spen", s, 4.0) for s in range(3)]
                              + [_row("gpt", s, 5.0 - 0.01 * s) for s in range(3)])
    noisy = headline_verdict([_row("spen", s, 5.0) for s in range(3)]
                             + [_row("gpt", s, 5.0 + d) for s, d in enumerate((0.1, -0.1, 0.02))])
    assert (worse.verdict, better.verdict, noisy.verdict) == ("reproduced", "not_reproduced", "inconclusive")
    assert worse.ratio > 1 > better.ratio
    assert headline_verdict([_row("spen", 0, 5.0)]).verdict == "not_measured"


def test_a_scores_line_says_expected_measured_verdict_and_strength():
    def score(d: Spread) -> Score:
        return Score("structure", "k", "A claim", "0.96", "0.91", d, verdicts.judge(d), "w", "detail")

    assert score(Spread(0.3, 0.05, 3)).evidence == "|Δ| = 3.0× the threshold, 3 seeds"
    assert score(Spread(0.01, 0.05, 4)).evidence == "|Δ| = 0.1× the threshold, 4 seeds"
    assert score(Spread(0.3, 0.0, 3)).evidence == "all 3 seeds agree exactly"
    assert score(Spread(0.3, math.nan, 1)).evidence == "1 seed of the 3 the rule needs"
    assert score(Spread(math.nan, math.nan, 0)).evidence == "no run measures it"
    line = score(Spread(0.3, 0.05, 3)).line
    assert line == "A claim. Paper: 0.96. Here: 0.91 (|Δ| = 3.0× the threshold, 3 seeds)."
    assert plain("Gated beats decay at recall (MQAR accuracy, gated − decay > 0)") == "Gated beats decay at recall"
    assert plain("no formula") == "no formula"


def test_missing_seeds_fill_up_to_the_rules_minimum_without_overlap():
    assert missing_seeds([]) == [0, 1, 2]
    assert missing_seeds([5]) == [0, 1]
    assert missing_seeds([0, 1, 2, 3]) == []
    assert missing_seeds([2], span=3) == [3]          # a run covering 0–2 would hold seed 2 again
    assert missing_seeds([0], span=3) == [1]


def _depth_row(rule, depth, seed, loss, early=0.5):
    return {"rule": rule, "depth": depth, "seed": seed, "d": 64, "tokens": 4096, "val_loss": loss,
            "probe_early": early, "probe_token_init": 0.6, "probe_token_chance": 0.25}


def test_depth_scores_carry_each_verdict_in_the_boards_shape():
    # The fixed sum 0.1 nats/token worse at 16 blocks on every seed (a little more on each), no selection run.
    rows = [_depth_row(rule, L, s, 5.0 + (0.1 + 0.01 * s if rule == "sum" and L == 16 else 0.0))
            for s in (0, 1, 2) for L in (4, 16) for rule in ("sum", "static")]
    scores = {s.key: s for s in depth_scores(depth_verdicts(rows))}
    assert list(scores) == ["static_beats_sum", "dynamic_beats_static", "select_beats_static", "gap_grows_with_depth",
                            "sum_loses_early_block", "sum_loses_prev_token", "remix_short_of_static",
                            "remix_short_of_dynamic", "probe_reads_tokens", "early_block_readable"]
    beats = scores["static_beats_sum"]
    assert beats.study == "depth" and beats.verdict == "reproduced" and beats.seeds == 3 and not beats.sanity
    assert beats.claim == "Static learned weights beat the fixed sum"  # the formula stays in the detail
    assert beats.measured == "Δ = +0.1100 ± 0.0100 nats/token at 16 blocks"
    assert "sum − static > 0" in beats.detail and "paired t" in beats.detail
    assert beats.line.startswith("Static learned weights beat the fixed sum. Paper: ")
    # No selection in these runs: not measured, never inconclusive.
    assert (scores["select_beats_static"].verdict, scores["select_beats_static"].word) == ("not_measured",
                                                                                          "not measured")
    assert scores["select_beats_static"].measured == "not measured"
    check = scores["probe_reads_tokens"]
    assert check.sanity and check.word == "holds" and check.verdict == "reproduced"
    # Two seeds: each claim says so, as the other studies word it.
    two = depth_scores(depth_verdicts([r for r in rows if r["seed"] < 2]))
    assert two[0].verdict == "not_judged" and two[0].word == "not judged: 2 seeds"
    # The gap's growth where the deep models have not trained past the shallow ones: not judged, said why.
    harder = [{**r, "val_loss": r["val_loss"] + (0.2 if r["depth"] == 16 else 0.0)} for r in rows]
    harder += [{**r, "rule": "select"} for r in harder if r["rule"] == "static"]
    gap = {s.key: s for s in depth_scores(depth_verdicts(harder))}["gap_grows_with_depth"]
    assert (gap.verdict, gap.word) == ("not_judged", "not judged: deep models not yet trained")
    assert "deep models not yet trained" in gap.note


# -- over a real store -------------------------------------------------------------------------------------

STRUCTURE_CONFIG = {k: v for k, v in build_config("structure", preset="quick").model_dump(mode="json").items()
                    if k != "seed"}


def test_an_empty_store_judges_nothing(empty_home):
    board = scoreboard()
    assert [j.study for j in board] == ["structure", "content", "boundary", "depth"] == [n for n, s in STUDIES.items() if s.judges]
    assert all(not j.run_ids and not j.scores for j in board)


def test_the_board_judges_the_group_with_the_most_seeds_as_the_page_would(empty_home):
    make_structure_runs(empty_home, seeds=(0, 1, 2), config={"preset": "test", "n_sentences": 200})
    newer = make_structure_runs(empty_home, seeds=(7,), config={"preset": "test", "n_sentences": 300})
    board = {j.study: j for j in scoreboard()}
    s = board["structure"]
    assert s.seeds == (0, 1, 2) and newer[0] not in s.run_ids and len(s.run_ids) == 3
    # The same claims, judged by the same function, as the Structure page judges these runs.
    ids = list(s.run_ids)
    page = structure_verdicts(
        structure_headlines(ids, STRUCTURAL_ROLES, SPCN_HEADLINE, NGRAM_BASELINE).to_dict("records"),
        probe_accuracy(ids, role="overall").to_dict("records")).claims
    assert [(x.key, x.verdict, x.delta.n) for x in s.scores] == [(v.claim.measure, v.verdict, v.delta.n) for v in page]
    # DuckDB's parallel sums may differ in the last bit between two reads of the same rows.
    assert [y for x in s.scores for y in (x.delta.mean, x.delta.std)] == pytest.approx(
        [y for v in page for y in (v.delta.mean, v.delta.std)])
    assert all(x.seeds == 3 for x in s.scores)
    assert {x.verdict for x in s.scores} <= {"reproduced", "not_reproduced", "inconclusive"}
    assert board["content"].scores == [] and board["boundary"].scores == []


def test_the_board_judges_the_depth_group_holding_the_most_seeds_inside_its_runs(empty_home):
    """One real run holds three seeds (judged); a newer config's two runs of one seed each hold fewer."""
    (real,) = make_depth_runs(empty_home, seeds=(0,))
    for seed in (5, 6):
        rows = [_depth_row(rule, 4, seed, 5.0) for rule in ("sum", "static", "select")]
        write_finished_run(empty_home, "depth", {"seeds": 1, "depths": [4]}, seed, [],
                           {"summary": {}, "tables": {"depth_results": rows}})
    assert ingest(empty_home)["errors"] == []
    d = {j.study: j for j in scoreboard()}["depth"]
    assert d.run_ids == (real,) and d.seeds == tuple(range(DEPTH_SEEDS)) and d.span == DEPTH_SEEDS
    assert d.configs[0]["seeds"] == DEPTH_SEEDS and "seed" not in d.configs[0]
    # The same verdicts as the findings give the run's rows, as the Depth page will read them.
    page = depth_scores(depth_verdicts(depth_results([real]), depth_remix([real])))
    assert [(x.key, x.verdict, x.seeds) for x in d.scores] == [(v.key, v.verdict, v.seeds) for v in page]
    assert all(x.seeds == DEPTH_SEEDS for x in d.scores)
    # Judged, or set aside with its reason (a probe with no room, deep models not trained in six steps).
    assert all(x.verdict in {"reproduced", "not_reproduced", "inconclusive"} or x.note for x in d.scores)
    # A seed is launched where the group lacks one: none here, the run's three seeds are the rule's minimum.
    assert missing_seeds(d.seeds, d.span) == []


def test_content_headline_on_the_board(empty_home):
    make_lm_runs(empty_home, specs=("gpt", "linear"), seeds=(0, 1, 2), real=False)
    make_lm_runs(empty_home, specs=("gpt", "linear"), seeds=(0,), real=False, overrides={"steps": 8})
    c = {j.study: j for j in scoreboard()}["content"]
    assert c.seeds == (0, 1, 2) and len(c.run_ids) == 6
    assert sorted(cfg["model"] for cfg in c.configs) == ["gpt", "spen"]
    head = c.scores[0]
    assert head.key == "spen_below_gpt" and head.verdict == "reproduced" and head.seeds == 3
    assert head.delta.mean == pytest.approx(1.0, abs=0.05)   # the synthetic GPT is 1 nat/token below SPEN
    assert "perplexity ÷ GPT 2.7" in head.measured
    # No attention predictor among these runs: the ablation is not measured, not "reproduced".
    assert c.scores[1].key == "predictor_irrelevant" and c.scores[1].verdict == "not_measured"


def _overview() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_overview_shows_every_claim_and_launches_the_missing_seeds(empty_home, registered):
    make_structure_runs(empty_home, seeds=(4,), config=STRUCTURE_CONFIG)
    at = _overview()
    lines = [m.value for m in at.markdown if "-badge[" in m.value]
    assert len(lines) == 5 and all("not judged: 1 seed" in line for line in lines)
    board = at.table[0].value
    assert list(board["verdict"]) == ["not judged: 1 seed"] * 5 and list(board["seeds"]) == [1] * 5
    # Its page opens on the runs judged here (the picker reads them from the URL).
    (link,) = [e.proto for e in at.get("page_link") if e.proto.label == "Tested on: Structure"]
    assert link.page == "structure" and link.query_string == f"structure_runs={scoreboard()[0].run_ids[0]}"
    at.button(key="overview_more_structure").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [(kind, cfg["seed"]) for kind, cfg, _ in registered] == [("structure", 0), ("structure", 1)]
    again = {k: v for k, v in build_config("structure", preset="quick").model_dump().items() if k != "seed"}
    assert all({k: v for k, v in cfg.items() if k != "seed"} == again for _, cfg, _ in registered)
    assert any("Launched" in s.value for s in at.success)
