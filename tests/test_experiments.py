import importlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from ema_core.experiments import REGISTRY, Cancelled, NullReporter, Reporter, build_config, get_experiment
from ema_core.config import setting_fields
from ema_core.studies.dilution.experiment import DilutionSweepConfig
from ema_core.experiments.units import unit_of

# Small enough to train in a second, big enough that α = 0.5 names the current token.
TINY = dict(alphas=(0.5, 0.1), vocab=16, dim=16, max_lag=4, n_train=512, n_test=256, steps=60, batch=64,
            checkpoint_every=7, log_every=5)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path / "home"))


def _exact(result):
    # Wall-clock seconds are the one summary entry that cannot repeat.
    return result["tables"], {k: v for k, v in result["summary"].items() if k != "seconds"}


# -- build_config -------------------------------------------------------------------------------------
def test_build_config_parses_command_line_strings():
    cfg = build_config("dilution", overrides={"vocab": "32", "alphas": "0.5,0.1", "include_all": "false",
                                              "lr": "1e-3", "max_lag": 3}, seed=7)
    assert isinstance(cfg, DilutionSweepConfig)
    assert (cfg.stream.vocab, cfg.alphas, cfg.include_all, cfg.train.lr, cfg.stream.max_lag, cfg.seed) == \
        (32, (0.5, 0.1), False, 1e-3, 3, 7)
    assert build_config("dilution", overrides={"alphas": "[0.5, 0.2]"}).alphas == (0.5, 0.2)
    assert build_config("dilution", overrides={"alphas": "(0.5, 0.2)"}).alphas == (0.5, 0.2)
    assert build_config("dilution", overrides={"alphas": "0.3"}).alphas == (0.3,)
    assert build_config("dilution", overrides={"alphas": [0.5, 0.25]}).alphas == (0.5, 0.25)


def test_presets_then_overrides_then_seed():
    quick = build_config("dilution", preset="quick")
    assert quick.stream.vocab == 32 and quick.train.steps == 200
    cfg = build_config("dilution", preset="quick", overrides={"steps": "10", "seed": "5"}, seed=9)
    assert (cfg.train.steps, cfg.stream.vocab, cfg.seed) == (10, 32, 9)
    for name, exp in REGISTRY.items():
        assert "quick" in exp.presets, name
        # the paper's own studies carry its settings; the boundary map extends the paper and has none
        assert ("paper" in exp.presets) == exp.one_click, name
        for preset in exp.presets:
            if name == "lm_eval":  # it evaluates a finished run, which no preset can name
                with pytest.raises(ValueError, match=r"^run: name the finished lm run to evaluate"):
                    build_config(name, preset=preset)
            else:
                build_config(name, preset=preset)  # every preset validates
    assert set(build_config("dilution", preset="paper").alphas) >= {0.5, 0.1, 0.02}


def test_a_setting_is_reached_by_its_path_its_own_name_or_its_older_flat_name():
    by_path = build_config("structure", preset="quick", overrides={"spcn.lr": "0.1", "bigru.hidden": 32,
                                                                   "grammar.deep_depth": 4})
    by_name = build_config("structure", preset="quick", overrides={"hebbian_lr": 0.1, "bigru_hidden": "32",
                                                                   "deep_depth": 4})
    assert by_path == by_name and (by_path.spcn.lr, by_path.bigru.hidden, by_path.grammar.deep_depth) == (0.1, 32, 4)
    # the preset's other settings of a group stay when one of them is overridden
    assert (by_path.spcn.units, by_path.spcn.k) == (192, 12)
    # a group given whole is the same as its settings one by one
    whole = build_config("structure", preset="quick", overrides={"spcn": by_path.spcn.model_dump(),
                                                                 "bigru": by_path.bigru, "grammar.deep_depth": 4})
    assert whole == by_path
    lm = build_config("content", overrides={"lr": "1e-3", "corpus": "austen", "data.vocab_size": 512})
    assert (lm.train.lr, lm.data.corpus, lm.data.vocab_size) == (1e-3, "austen", 512)


def test_a_name_two_groups_share_is_refused_naming_both_paths():
    with pytest.raises(ValueError, match=r"^lr: more than one setting of structure is called that; "
                                         r"say spcn.lr or bigru.lr$"):
        build_config("structure", overrides={"lr": "0.1"})


def test_no_setting_of_a_group_is_declared_again_beside_it():
    # Composed, not copied: a component's setting is reached through its group only.
    for kind, exp in REGISTRY.items():
        paths = setting_fields(exp.config_cls)
        top = {p for p in paths if "." not in p}
        inner = {p.rsplit(".", 1)[1] for p in paths if "." in p}
        assert top.isdisjoint(inner), (kind, top & inner)
        assert "field_like" not in vars(importlib.import_module("ema_core.config"))


@pytest.mark.parametrize("kwargs, message", [
    (dict(overrides={"vocab": "1"}), r"^stream.vocab: Input should be greater than or equal to 2 \(got 1\)$"),
    (dict(overrides={"stream.vocab": "abc"}), r"^stream.vocab: Input should be a valid integer"),
    (dict(overrides={"steps": "1.5"}), r"^train.steps: Input should be a valid integer"),
    (dict(overrides={"alphas": "0.5,1.5"}), r"^alphas: every rate must lie in \(0, 1\], got \[1.5\]"),
    (dict(overrides={"alphas": "0.5,0.5"}), r"^alphas: rates must be distinct"),
    (dict(overrides={"vocabulary": "32"}), r"^vocabulary: not a setting of dilution; settings: decoder, alphas, include_all, stream.vocab"),
    (dict(overrides={"train.vocab": "32"}), r"^train.vocab: not a setting of dilution"),
    (dict(overrides={"train": "32"}), r"^train: not a setting of dilution"),
    (dict(preset="huge"), r"^unknown preset 'huge' for dilution; presets: quick, paper$"),
    (dict(seed=-1), r"^seed: Input should be greater than or equal to 0"),
])
def test_build_config_errors_are_one_clear_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        build_config("dilution", **kwargs)
    assert "\n" not in str(info.value)


def test_unknown_kind_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown experiment kind 'nope'; known kinds: boundary, content, depth, dilution, lm_eval, structure$"):
        build_config("nope")
    with pytest.raises(ValueError, match="known kinds"):
        get_experiment("nope")


def test_configs_forbid_unknown_fields():
    for exp in REGISTRY.values():
        assert exp.config_cls.model_config.get("extra") == "forbid"
        assert exp.description


# -- the dilution sweep ---------------------------------------------------------------------------------
def test_dilution_sweep_decodes_the_current_token_and_forgets_old_ones():
    cfg = build_config("dilution", overrides=dict(alphas=(0.5, 0.02), vocab=16, dim=32, max_lag=6, n_train=2048,
                                                  n_test=1024, steps=150, batch=128, lr=0.02, checkpoint_every=1000))
    rep = NullReporter()
    result = REGISTRY["dilution"].run(cfg, rep)
    rows = result["tables"]["dilution_accuracy"]
    assert len(rows) == 3 * 7  # (α = 0.5, α = 0.02, all rates) × lags 0..6
    assert set(rows[0]) == {"feature", "lag", "accuracy", "chance"}
    acc = {(r["feature"], r["lag"]): r["accuracy"] for r in rows}
    assert all(r["chance"] == 1 / 16 for r in rows)
    assert acc[("α=0.5", 0)] > 0.9  # D ≥ V: the current token dominates a fast trace
    assert acc[("α=0.5", 6)] < 2 / 16  # weight 0.5·0.5⁶ is buried under the newer tokens
    assert acc[("all rates", 0)] > 0.9
    s = result["summary"]
    assert s["acc_lag0/α=0.5"] == acc[("α=0.5", 0)] and s["acc_lag6/α=0.5"] == acc[("α=0.5", 6)]
    assert s["chance"] == 1 / 16 and s["seconds"] > 0
    assert rep.fraction == 1.0
    steps = [step for step, _ in rep.events]
    assert steps == sorted(steps) and steps[-1] == 3 * 150
    assert any(key.startswith("loss/") for _, m in rep.events for key in m)


def test_cancel_then_resume_in_process_is_bit_exact():
    cfg = build_config("dilution", overrides=TINY)
    exp = REGISTRY["dilution"]
    whole = exp.run(cfg, NullReporter())
    for stop_after in (1, 8, 9):  # inside the first decoder, at a boundary, inside "all rates"
        rep = NullReporter(stop_after_checkpoints=stop_after)
        with pytest.raises(Cancelled) as info:
            exp.run(cfg, rep)
        assert 0 < info.value.step < 3 * TINY["steps"]
        assert rep.fraction < 1.0
        rep.stop_after_checkpoints = None
        assert _exact(exp.run(cfg, rep)) == _exact(whole)


def test_run_restores_torch_settings():
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    REGISTRY["dilution"].run(build_config("dilution", overrides={**TINY, "steps": 3}), NullReporter())
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (threads, deterministic)


def test_a_checkpoint_of_another_config_is_refused():
    exp = REGISTRY["dilution"]
    rep = NullReporter(stop_after_checkpoints=1)
    with pytest.raises(Cancelled):
        exp.run(build_config("dilution", overrides=TINY), rep)
    rep.stop_after_checkpoints = None
    with pytest.raises(ValueError, match="another config"):
        exp.run(build_config("dilution", overrides={**TINY, "lr": 0.5}), rep)


def test_null_reporter_is_a_reporter():
    assert isinstance(NullReporter(), Reporter)
    assert NullReporter().load_checkpoint() is None


def test_experiments_import_no_runner_store_or_ui():
    code = ("import sys, ema_core.experiments; "
            "bad = [m for m in ('streamlit', 'duckdb', 'jobs', 'store') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the dilution sweep's peel decoder and stored trace ------------------------------------------------
def test_stored_trace_settings_are_reached_by_path_or_name():
    by_path = build_config("dilution", overrides={"stream.noise": "0.01", "stream.precision": "bfloat16",
                                                  "decoder": "peel"})
    by_name = build_config("dilution", overrides={"noise": 0.01, "precision": "bfloat16", "decoder": "peel"})
    assert by_path == by_name and (by_path.stream.noise, by_path.stream.precision, by_path.decoder) == \
        (0.01, "bfloat16", "peel")
    default = build_config("dilution")
    assert (default.decoder, default.stream.precision, default.stream.noise) == ("linear", "float32", 0.0)
    # a config stored before these settings existed reads as today's defaults
    older = default.model_dump(mode="json")
    del older["decoder"], older["stream"]["precision"], older["stream"]["noise"]
    assert DilutionSweepConfig.model_validate(older) == default


@pytest.mark.parametrize("overrides, message", [
    ({"decoder": "mlp"}, r"^decoder: must be one of 'linear' or 'peel' \(got 'mlp'\)$"),
    ({"precision": "int8"}, r"^stream.precision: must be one of 'float64', 'float32', 'bfloat16' or 'float16'"),
    ({"noise": "-1"}, r"^stream.noise: Input should be greater than or equal to 0"),
    ({"decoder": "peel", "window": 3}, r"stream.window: the peel decoder reads the current trace state only"),
])
def test_a_bad_decoder_or_stored_trace_is_one_line(overrides, message):
    with pytest.raises(ValueError, match=message) as info:
        build_config("dilution", overrides=overrides)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("overrides, message", [
    # a validator that says what it got is not followed by a second "(got …)"
    ({"alphas": "0.5,0.5"}, r"^alphas: rates must be distinct \(each names a feature set\), got \[0.5, 0.5\]$"),
    ({"alphas": "0.5,2"}, r"^alphas: every rate must lie in \(0, 1\], got \[2.0\]$"),
    # a length in plain words, not pydantic's "Tuple should have at least 1 item after validation, not 0"
    ({"alphas": "[]"}, r"^alphas: needs at least 1 value \(got none\)$"),
    ({"alphas": ",".join(str(a / 100) for a in range(1, 18))}, r"^alphas: takes at most 16 values \(got 17\)$"),
])
def test_a_refused_setting_says_what_it_got_once_in_plain_words(overrides, message):
    with pytest.raises(ValueError, match=message) as info:
        build_config("dilution", overrides=overrides)
    assert str(info.value).count("got") == 1 and "after validation" not in str(info.value)


def test_peel_sweep_names_lag_8_at_quick_and_noise_takes_it_away():
    # The acceptance: `emalab run dilution --preset quick --set decoder=peel` (≥ 0.9 at lag 8 for
    # α = 0.5) and with `--set noise=0.01` (within 3× chance there), in-process.
    exp = REGISTRY["dilution"]
    rep = NullReporter()
    clean = exp.run(build_config("dilution", preset="quick", overrides={"decoder": "peel"}), rep)
    s = clean["summary"]
    assert s["acc_lag8/α=0.5"] >= 0.9 and s["chance"] == 1 / 32
    assert not any(key.startswith("loss/") for _, m in rep.events for key in m)  # no Adam step was taken
    assert not any(key.startswith("final_loss/") for key in s)
    assert rep.checkpoints_saved == 0 and rep.fraction == 1.0
    assert s["limit/α=0.5"] == "beyond max lag" and s["analytic_horizon/α=0.5"] > 8
    assert s["limit/α=0.02"] == "diluted" and s["horizon/α=0.02"] == 0
    noisy = exp.run(build_config("dilution", preset="quick", overrides={"decoder": "peel", "noise": "0.01"}),
                    NullReporter())["summary"]
    assert noisy["acc_lag8/α=0.5"] <= 3 * noisy["chance"]
    assert noisy["limit/α=0.5"] == "noise" and 4 <= noisy["horizon/α=0.5"] <= noisy["analytic_horizon/α=0.5"] + 0.5
    assert noisy["sigma/α=0.5"] == pytest.approx(0.01, rel=1e-6)
    # every number the summary gains has a unit; the limit is a name, like feature_sets
    assert all(unit_of(k) for k, v in noisy.items() if isinstance(v, (int, float)))


def test_peel_sweep_matches_the_closed_form_measurement():
    # Same stream (the sweep's torch scan, the page's numba scan), same held-out steps, same decoder.
    from ema_core.dilution_config import DilutionConfig
    from ema_core.dilution import measure_identity

    cfg = build_config("dilution", overrides=dict(TINY, decoder="peel", precision="float16", max_lag=10))
    rows = REGISTRY["dilution"].run(cfg, NullReporter())["tables"]["dilution_accuracy"]
    closed = measure_identity(DilutionConfig(decoder="peel", alphas=cfg.alphas, seed=cfg.seed,
                                             **cfg.stream.model_dump()))
    assert [(r["feature"], r["lag"]) for r in rows] == list(zip(closed.accuracy["feature"], closed.accuracy["lag"]))
    np.testing.assert_allclose([r["accuracy"] for r in rows], closed.accuracy["accuracy"], atol=2 / cfg.stream.n_test)


class StopOnce(NullReporter):
    """A reporter whose first ``should_stop`` says yes: a cancel before the peel's first set."""

    def __init__(self, at_call: int):
        super().__init__()
        self.calls, self.at_call = 0, at_call

    def should_stop(self) -> bool:
        self.calls += 1
        return self.calls == self.at_call


def test_a_cancelled_peel_sweep_resumes_to_the_same_result():
    cfg = build_config("dilution", overrides=dict(TINY, decoder="peel"))
    exp = REGISTRY["dilution"]
    whole = exp.run(cfg, NullReporter())
    rep = StopOnce(at_call=2)  # after the first set
    with pytest.raises(Cancelled):
        exp.run(cfg, rep)
    assert rep.checkpoints_saved == 1
    assert _exact(exp.run(cfg, rep)) == _exact(whole)


def test_linear_sweep_reports_its_limits_and_the_stored_trace_reaches_it():
    exp = REGISTRY["dilution"]
    clean = exp.run(build_config("dilution", overrides=dict(TINY, steps=30)), NullReporter())["summary"]
    assert clean["limit/α=0.5"] == "read-out" and clean["horizon/α=0.5"] == 1
    assert "final_loss/α=0.5" in clean
    # the same run on a trace buried in noise: the features it trains on really are the stored ones
    noisy = exp.run(build_config("dilution", overrides=dict(TINY, steps=30, noise=1.0)), NullReporter())["summary"]
    assert noisy["acc_lag0/α=0.5"] < 3 / TINY["vocab"] < clean["acc_lag0/α=0.5"]
