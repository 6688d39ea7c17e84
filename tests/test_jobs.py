"""The local runner end to end: real worker processes, real run folders, kill -9 and bit-exact resume."""
import json
import os
import signal
import time

import pytest

from ema_core.experiments import REGISTRY, NullReporter, build_config
from jobs.runner import LocalRunner
from ema_core.rundir import RunDir, pid_alive, wait_for

# Two rates + all = three decoders of 1000 steps (~0.3 s each on one core): long enough to stop mid-run.
LONG = dict(alphas="0.5,0.1", vocab=16, dim=16, max_lag=4, n_train=512, n_test=256, steps=1000, batch=32,
            checkpoint_every=200, log_every=50)
SHORT = {**LONG, "steps": 40, "checkpoint_every": 20, "log_every": 10}
# Liveness only: how long to wait for something that must happen (a run ending, a checkpoint) before
# calling it stuck.  Ten times what a loaded 2-core machine needs; never a speed target.
PATIENCE = 600


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    return home


@pytest.fixture
def runners():
    made = []

    def make(home, **kwargs):
        # A cancel waits this long for the worker to stop at its next step before forcing it: a
        # starved worker on a busy machine must still stop by itself ("cancelled at step ...").
        kwargs.setdefault("grace_s", PATIENCE)
        runner = LocalRunner(home=home, **kwargs)
        made.append(runner)
        return runner

    yield make
    for runner in made:  # leave no worker of ours behind, whatever the test did
        runner.close()
        for row in runner.list():
            pid = runner._rd(row["run_id"]).read_status().get("pid")
            if row["state"] in ("running", "queued") and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def _exact(result):
    return result["tables"], {k: v for k, v in result["summary"].items() if k != "seconds"}


def _wait_for_checkpoint(rd: RunDir, timeout=PATIENCE):
    assert wait_for(lambda: rd.checkpoints() and rd.read_status().get("state") == "running", timeout, 0.01), \
        f"no checkpoint ever came: {rd.read_status()}"


@pytest.fixture(scope="module")
def long_reference():
    # The uninterrupted run, in this process: the same bits as in a worker (one thread, one order).
    return REGISTRY["dilution"].run(build_config("dilution", overrides=LONG, seed=3), NullReporter())


def test_quick_preset_end_to_end(home, runners):
    runner = runners(home)
    t0 = time.monotonic()
    run_id = runner.submit("dilution", None, seed=0, preset="quick")
    # How long it takes is a benchmark's business, not a test's: the time is printed, never checked.
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    seconds = time.monotonic() - t0
    rd = RunDir.for_id(run_id, home)
    status = rd.read_status()
    assert status["progress"] == 1.0 and status["eta_s"] == 0.0 and status["backend"] == "local"
    assert status["latest"]["acc_lag0/α=0.5"] > 0.9
    events, _, bad = rd.read_events()
    seqs = [e["seq"] for e in events]
    assert bad == 0 and seqs == list(range(len(events))) and len(events) > 10
    result = json.loads(rd.result_path.read_text())
    rows = result["tables"]["dilution_accuracy"]
    assert len(rows) == 4 * 9 and result["summary"]["chance"] == 1 / 32
    row = runner.status(run_id)
    assert row["state"] == "done" and row["started"] and row["ended"] and row["kind"] == "dilution"
    assert [r["run_id"] for r in runner.list()] == [run_id]
    assert "done" in runner.logs(run_id)
    shown = runner.show(run_id)
    assert shown["config"]["stream"]["vocab"] == 32 and shown["result"] == result and shown["state"] == "done"
    # The same job again is recognised, not re-run.
    assert runner.submit("dilution", build_config("dilution", preset="quick"), seed=0) == run_id
    assert runner.status(run_id)["attempts"] == 1
    with pytest.raises(ValueError, match="only failed, cancelled, crashed"):
        runner.resume(run_id)
    print(f"\nquick preset via the local runner: {seconds:.1f} s")


def test_submit_rejects_bad_configs(home, runners):
    runner = runners(home)
    with pytest.raises(ValueError, match="^stream.vocab: Input should be greater than or equal to 2"):
        runner.submit("dilution", {"vocab": "1"}, seed=0)
    with pytest.raises(ValueError, match="unknown experiment kind"):
        runner.submit("nope", {}, seed=0)
    assert runner.list() == []


def test_cancel_then_resume_is_bit_exact(home, runners, long_reference):
    runner = runners(home)
    run_id = runner.submit("dilution", LONG, seed=3)
    rd = RunDir.for_id(run_id, home)
    _wait_for_checkpoint(rd)
    assert runner.cancel(run_id) == "cancelled"
    status = rd.read_status()
    assert 0 < status["progress"] < 1 and "cancelled at step" in status["message"]
    assert rd.read_result() is None
    runner.resume(run_id)
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    assert _exact(rd.read_result()) == _exact(long_reference)
    assert runner.status(run_id)["attempts"] == 2
    seqs = [e["seq"] for e in rd.read_events()[0]]
    assert seqs == list(range(len(seqs)))  # the resumed attempt continues the sequence


def test_kill_9_is_detected_and_resumes_bit_exact(home, tmp_path, runners):
    runner = runners(home)
    other = runners(tmp_path / "other_home")  # the uninterrupted run, in its own data folder
    run_id = runner.submit("dilution", LONG, seed=3)
    ref_id = other.submit("dilution", LONG, seed=3)
    assert ref_id == run_id
    rd = RunDir.for_id(run_id, home)
    _wait_for_checkpoint(rd)
    pid = rd.read_status()["pid"]
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(pid), PATIENCE), f"worker {pid} never died of SIGKILL"
    row = next(r for r in runner.list() if r["run_id"] == run_id)
    assert row["state"] == "crashed" and "worker process died" in row["message"]
    assert rd.read_result() is None
    runner.resume(run_id)
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    assert other.wait(ref_id, timeout=PATIENCE) == "done", other.logs(ref_id)
    resumed, whole = rd.read_result(), RunDir.for_id(ref_id, tmp_path / "other_home").read_result()
    assert _exact(resumed) == _exact(whole)  # ==, not approximately


def test_a_worker_that_ignores_the_flag_is_terminated(home, runners):
    runner = runners(home)
    run_id = runner.submit("dilution", LONG, seed=4)
    rd = RunDir.for_id(run_id, home)
    _wait_for_checkpoint(rd)
    pid = rd.read_status()["pid"]
    runner._kill(rd, rd.read_status())  # what cancel does once the grace period is over, minus the flag
    assert not pid_alive(pid)
    status = rd.read_status()
    assert status["state"] == "cancelled" and "terminated by the runner" in status["message"]
    runner.resume(run_id)
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)


def test_corrupt_checkpoint_fails_clearly_and_alone(home, runners):
    runner = runners(home, slots=2)
    run_id = runner.submit("dilution", LONG, seed=5)
    rd = RunDir.for_id(run_id, home)
    _wait_for_checkpoint(rd)
    assert runner.cancel(run_id) == "cancelled"
    # Every checkpoint: with one that loads, the resume would start from it (test_malformed).
    for _, ckpt in rd.checkpoints():
        ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    newest = rd.checkpoints()[-1][1]
    bystander = runner.submit("dilution", SHORT, seed=6)
    runner.resume(run_id)
    assert runner.wait(run_id, timeout=PATIENCE) == "failed"
    message = runner.status(run_id)["message"]
    assert message.startswith(f"CheckpointError: checkpoint {newest.name}") and "cannot be loaded" in message
    assert "\n" not in message
    assert "Traceback" in runner.logs(run_id) and "CheckpointError" in runner.logs(run_id)
    assert runner.wait(bystander, timeout=PATIENCE) == "done"


def test_a_cut_events_tail_is_tolerated(home, runners):
    runner = runners(home)
    run_id = runner.submit("dilution", LONG, seed=7)
    rd = RunDir.for_id(run_id, home)
    _wait_for_checkpoint(rd)
    assert runner.cancel(run_id) == "cancelled"
    before, _, _ = rd.read_events()
    with open(rd.events_path, "a") as fh:
        fh.write('{"seq": 999, "step": 1, "metr')  # a line cut by a crash
    assert rd.read_events()[0] == before  # readers skip the unterminated tail
    runner.resume(run_id)
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    events, _, bad = rd.read_events()
    assert bad == 1  # the fragment, and nothing else
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(len(seqs))) and len(events) > len(before)
    assert events[-1]["step"] == 3 * LONG["steps"]


def test_one_slot_runs_jobs_one_after_the_other(home, runners):
    runner = runners(home, slots=1)
    first = runner.submit("dilution", SHORT, seed=1)
    second = runner.submit("dilution", SHORT, seed=2)
    third = runner.submit("dilution", SHORT, seed=3)
    assert runner.status(second)["state"] == "queued"
    assert runner.cancel(third) == "cancelled"  # never started: cancelled at once
    assert runner.status(first)["state"] in ("queued", "running")  # spawned; its worker marks it running
    assert runner.wait(first, timeout=PATIENCE) == "done"
    assert runner.wait(second, timeout=PATIENCE) == "done"
    a, b = RunDir.for_id(first, home).read_status(), RunDir.for_id(second, home).read_status()
    assert b["started"] >= a["ended"]
    assert runner.status(third)["state"] == "cancelled" and RunDir.for_id(third, home).read_result() is None


def test_queued_runs_start_without_polling(home, runners):
    runner = runners(home, slots=1)
    first = runner.submit("dilution", SHORT, seed=11)
    second = runner.submit("dilution", SHORT, seed=12)
    rd = RunDir.for_id(second, home)
    # Nobody calls tick/wait: the runner's scheduler starts the second when the first ends.
    assert wait_for(lambda: rd.read_status().get("state") == "done", PATIENCE, 0.2), \
        f"the queued run never ran: {rd.read_status()}"
    assert RunDir.for_id(first, home).read_status()["state"] == "done"


def test_a_worker_on_its_way_is_not_started_twice_by_another_runner(home, runners):
    # Each `emalab jobs ...` command and each app rerun makes its own runner.  While a worker
    # started by one of them is still importing (seconds: torch), the run is still "queued": the
    # others must see the spawn record and wait, not start a worker of their own.
    import subprocess
    import sys

    from ema_core.rundir import atomic_write, now_iso
    from jobs.runner import HOST

    runner = runners(home, slots=2)
    run_id = runner.submit("dilution", SHORT, seed=21)
    assert runner.wait(run_id, timeout=PATIENCE) == "done"  # a real run folder, then queued again by hand
    rd = RunDir.for_id(run_id, home)
    rd.write_status(state="queued", queued_at=now_iso())
    # "A worker importing": alive until killed below, however slowly the ticks go.
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        atomic_write(rd.spawn_path, json.dumps({"pid": stand_in.pid, "host": HOST,
                                                "queued_at": rd.read_status()["queued_at"]}))
        for _ in range(5):
            assert runners(home, slots=2).tick() == []
    finally:
        stand_in.kill()
        stand_in.wait()
    # The spawned process is gone and never marked the run running: now a runner starts it.
    assert runners(home, slots=2).tick() == [run_id]


# -- telling jobs apart, relaunching, the ETA --------------------------------------------------------


def _steady(prep_s: float, total_s: float, warm_s: float = 0.0, samples: int = 200, start: float = 0.0):
    """(seconds, fraction) samples of a run: ``prep_s`` at its start fraction (reading data), then its
    first tenth at a third of its later pace over ``warm_s`` extra seconds, then a steady pace."""
    out = [(t, start) for t in (0.0, prep_s / 3, 2 * prep_s / 3)]
    train_s = total_s - prep_s
    for i in range(1, samples + 1):
        f = i / samples
        t = prep_s + f * train_s + warm_s * min(f, 0.1) / 0.1
        out.append((t, start + f * (1 - start)))
    return out


def test_the_eta_waits_for_the_warm_up_and_a_stable_pace():
    from jobs.worker import EtaEstimator, estimate_eta

    # A 13-minute run whose first minutes read the corpus (no progress) and whose first steps are
    # slow: the average since the start promised about an hour left early on.
    samples = _steady(prep_s=240.0, total_s=780.0, warm_s=60.0)
    finish = samples[-1][0]
    est = EtaEstimator()
    seen = [est.update(t, f) for t, f in samples]
    warm = [eta for (t, f), eta in zip(samples, seen) if f < 0.1]
    assert warm and all(eta is None for eta in warm)  # nothing during the warm-up
    shown = [(t, eta) for (t, f), eta in zip(samples, seen) if eta is not None]
    assert shown, "never shown on a steady pace"
    for t, eta in shown:  # once shown, within 10 % of the real time left plus the warm-up's cost
        assert abs((t + eta) - finish) <= 0.1 * (finish - t) + 60.0, (t, eta, finish)
    late = [(t, eta) for t, eta in shown if t > finish - 200]
    assert late and all(abs(t + eta - finish) < 0.05 * 780 for t, eta in late)
    assert estimate_eta(samples[:-1]) is not None and estimate_eta(samples[:5]) is None


def test_the_eta_is_rough_while_the_pace_changes():
    from jobs.worker import EtaEstimator, estimate_eta

    # Steady at 0.2 s a step, then ten times slower from half-way (a slower phase): the estimate
    # made before the change is settled; after it, the estimate goes on (the pace since the warm-up,
    # applied to the work left) but is rough while the projected finish moves.
    samples, t = [], 0.0
    for i in range(1, 501):
        t += 0.2 if i <= 250 else 2.0
        samples.append((t, i / 500))
    est = EtaEstimator()
    seen = {}
    for t, f in samples:
        seen[f] = (est.update(t, f), est.settled)
    assert seen[0.4][0] is not None and abs(0.4 * 500 * 0.2 + seen[0.4][0] - 100.0) < 1.0  # right, for the pace it saw
    assert seen[0.4][1]
    assert all(seen[i / 500][0] is not None and not seen[i / 500][1] for i in range(260, 360))
    # Measured over the latter half of the progress since the warm-up, the pace follows the slower
    # phase: by 90 % the estimate is settled and within 10 % of the time left (2 s a step).
    eta, settled = seen[0.9]
    assert settled and abs(eta - 50 * 2.0) <= 10.0, eta
    assert estimate_eta(samples[:300]) is not None
    # A resumed attempt starts at its checkpoint's fraction: warm-up and pace are measured from there.
    resumed = _steady(prep_s=10.0, total_s=110.0, start=0.5)
    assert estimate_eta(resumed[:8]) is None
    t_mid, _ = resumed[150]
    eta = estimate_eta(resumed[:151])
    assert eta is not None and abs(t_mid + eta - resumed[-1][0]) < 5.0


def _boundary_like(slow_from_s: float, slowdown: float) -> list[tuple[float, float]]:
    """The samples a quick boundary map's worker records: 66 cells, the 10 MQAR cells (2.5 times the
    token-steps of the others) handed out first, two at a time, progress reported per cell finished
    (its metrics flushed at the old fraction, then its checkpoint at the new one); from
    ``slow_from_s`` on a neighbour shares the cores and every cell takes ``slowdown`` times longer."""
    import heapq

    work = [32_000] * 10 + [12_800] * 56  # token-steps a cell (boundary.cell_size at the quick preset)
    free = [(10.0, 0), (10.0, 1)]  # two cell processes, after the imports
    ends = []
    for w in work:
        t, k = heapq.heappop(free)
        ends.append(t + w / 300 * (slowdown if t >= slow_from_s else 1.0))
        heapq.heappush(free, (ends[-1], k))
    samples = [(0.2, 0.0)]
    for i, end in enumerate(sorted(ends), 1):
        t = max(end, samples[-1][0] + 0.01)  # cells that end together are taken in one after the other
        samples += [(t, (i - 1) / len(ends)), (t + 0.01, i / len(ends))]
    return samples


def test_a_boundary_map_gets_an_eta_from_its_first_cells_to_its_last():
    from jobs.worker import ETA_SPAN, ETA_WARMUP_FRACTION, EtaEstimator

    # Coarse, uneven steps whose pace changes twice (short cells after long ones, then a neighbour):
    # the projections over the last 5 % disagree for much of the run.  An ETA used to wait for them
    # to agree: this map showed none before a third of its cells, and none again from half to 70 %.
    samples = _boundary_like(slow_from_s=1000.0, slowdown=3.0)
    est = EtaEstimator()
    seen = []
    for t, f in samples:
        seen.append((t, f, est.update(t, f), est.settled))
    assert all(eta is None for _, f, eta, _ in seen if f < ETA_WARMUP_FRACTION)  # the warm-up says nothing
    _, f0 = est.origin
    measured = [(t, f, eta, settled) for t, f, eta, settled in seen if f - f0 >= ETA_SPAN]
    assert measured[0][1] < 0.2  # from the first tenth of the cells, and a few more
    assert all(eta is not None for _, _, eta, _ in measured)  # then at every sample to the end
    assert [f for _, f, _, _ in measured if 0.81 < f < 0.83]
    finish = samples[-1][0]
    slowed = [settled for t, _, _, settled in measured if 1100.0 < t < 1900.0]
    assert slowed and not any(slowed)  # rough while the neighbour's slowdown moves the projected finish
    # What the card shows after each cell: the estimate at the sample where its progress arrived
    # (the one before, at the old fraction, is the metrics' flush, a moment earlier).
    shown = [now for now, before in zip(measured[1:], measured) if now[1] > before[1]]
    for t, f, eta, settled in shown:
        if f >= 0.8:  # the slower pace measured: settled, and within 15 % of the time left and a cell
            assert settled and abs(eta - (finish - t)) <= 0.15 * (finish - t) + 12_800 / 300 * 3.0, (t, f, eta)
    assert measured[-1][2] == 0.0


def test_a_job_row_names_kind_preset_settings_and_the_log_its_phases(home, runners):
    runner = runners(home)
    run_id = runner.submit("dilution", build_config("dilution", preset="quick", overrides=SHORT), preset="quick")
    assert runner.wait(run_id, timeout=PATIENCE) == "done", runner.logs(run_id)
    rd = RunDir.for_id(run_id, home)
    assert rd.read_config()["preset"] == "quick"
    row = runner.status(run_id)
    assert row["preset"] == "quick" and row["seed"] == 0 and row["config"]["stream"]["vocab"] == 16
    assert row["changes"] == {"alphas": [0.5, 0.1], "stream.vocab": 16, "stream.dim": 16, "stream.max_lag": 4,
                              "stream.n_train": 512, "stream.n_test": 256, "train.steps": 40, "train.batch": 32,
                              "train.checkpoint_every": 20}
    assert row["label"].startswith("dilution quick · alphas=0.5,0.1, vocab=16, dim=16")
    assert row["age_s"] is not None and row["age_s"] >= 0
    # The log: a line per phase (one per decoder) and per checkpoint, besides start and end.
    log = runner.logs(run_id)
    assert "building the token stream" in log
    lines = [ln.split("% ", 1)[1] for ln in log.splitlines() if "% " in ln]
    assert [ln for ln in lines if ": step" in ln] == ["α=0.5: step 1/40", "α=0.1: step 1/40", "all rates: step 1/40"]
    assert lines.count("checkpoint at step 20") == 1
    assert sum(ln.startswith("checkpoint at step") for ln in lines) == 3 + 2  # one in each decoder, two between

    # A run folder from before any preset was recorded: compared with the kind's defaults.
    record = rd.read_config()
    del record["preset"]
    rd.config_path.write_text(json.dumps(record))
    assert "preset" not in rd.read_status()
    old = runner.status(run_id)
    assert old["preset"] is None and old["label"].startswith("dilution (no preset) · alphas=0.5,0.1")
    assert old["changes"]["train.steps"] == 40 and old["changes"]["train.lr"] == 0.02  # quick's lr, not the default


def test_an_lm_label_shows_what_tells_it_apart(home):
    from jobs.runner import job_summary

    cfg = build_config("content", preset="tiny", overrides={"model": "gpt"}, seed=2).model_dump(mode="json")
    rd = RunDir.for_id("lm-label-s2", home)
    rd.create("content", cfg, 2, preset="tiny")  # a queued run folder is enough: nothing runs
    row = job_summary(rd)
    # The kind's identity settings are named even where they keep the preset's value (a SPEN run
    # and a GPT run then read differently at a glance), then whatever else differs.
    assert row["label"] == "content tiny · model=gpt, predictor=linear, attn_input=state, corpus=austen", row
    assert row["seed"] == 2
    spen = build_config("content", preset="tiny", overrides={"steps": 700}, seed=2).model_dump(mode="json")
    rd = RunDir.for_id("lm-label-spen-s2", home)
    rd.create("content", spen, 2, preset="tiny")
    assert job_summary(rd)["settings"] == "model=spen, predictor=linear, attn_input=state, corpus=austen, steps=700"


def test_relaunch_finds_the_done_run_and_the_next_free_seed(home, runners):
    from jobs.runner import existing_run, next_free_seed

    runner = runners(home)
    cfg = build_config("dilution", overrides=SHORT, seed=0)
    assert existing_run("dilution", cfg, home=home)[1] is None
    run_id = runner.submit("dilution", cfg)
    assert runner.wait(run_id, timeout=PATIENCE) == "done"
    assert existing_run("dilution", cfg, home=home) == (run_id, "done")
    assert next_free_seed([("dilution", cfg)], home=home) == 1
    RunDir.for_id(existing_run("dilution", cfg.model_copy(update={"seed": 1}), home=home)[0], home).create(
        "dilution", {**cfg.model_dump(mode="json"), "seed": 1}, 1)  # seed 1 queued: taken too
    assert next_free_seed([("dilution", cfg)], home=home) == 2
    other = build_config("dilution", overrides={**SHORT, "vocab": 8}, seed=0)
    assert next_free_seed([("dilution", other)], home=home) == 1  # other settings: seed 1 is free for them
    assert next_free_seed([("dilution", cfg), ("dilution", other)], home=home) == 2  # free for both


def test_the_next_seed_of_a_run_that_covers_several_seeds_shares_none_with_it(home):
    from jobs.runner import existing_run, next_free_seed

    # A boundary run covers seed, seed + 1, …, seed + seeds − 1: "use the next seed" after a 3-seed run
    # at 0 must start at 3, or the map would count seeds 1 and 2 twice.
    cfg = build_config("boundary", preset="quick", overrides={"seeds": 3}, seed=0)

    def queue(seed):
        RunDir.for_id(existing_run("boundary", cfg.model_copy(update={"seed": seed}), home=home)[0], home).create(
            "boundary", {**cfg.model_dump(mode="json"), "seed": seed}, seed)

    queue(0)
    assert next_free_seed([("boundary", cfg)], home=home) == 3
    queue(4)  # covers 4–6: a run at 3 (3–5), 5 or 6 would share seeds with it
    assert next_free_seed([("boundary", cfg)], home=home) == 7
