"""The real app in headless Chromium.

The dilution page renders and follows a slider moved by keyboard; its downloads are generated on
click; a job launched from the Jobs page is watched, killed (its worker gets SIGKILL), resumed and
finished, and its table downloaded as LaTeX from the Export page; the Overview's quick reproduction
starts a job that the Jobs page then lists; a deep link into a fresh server still gets the app's
router and navigation, and every page's own name (/overview included) opens that page; the
Structure page draws finished structure runs, follows its split switch and states what its runs show
and the paper's claims' verdicts; the Content page draws real tiny language-model runs, follows its
smoothing and log-axis controls and states the predictor ablation's verdict and SPEN ÷ GPT; the Trace
dilution page says which limit applies (read-out, precision, noise) as its settings change; the
Boundary map page draws a real tiny boundary run and states the paper's claims' verdicts; the Depth
dilution page draws a real tiny depth run, states its verdicts and offers its exports.  Every
verdict the browser must show is computed here from the same runs or settings, by the findings'
own functions.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ema_core.rundir import wait_for

# One way to serve the app and drive Chromium for every browser test, and the one meaning of "idle".
from browser import (CHARTS, SHOTS, WAIT_MS, WAIT_S, goto, in_view_below, no_exception, open_export_table, rerun,
                     scroll_to_top, serve_app, settle)

FAST_HALF_LIFE = '.st-key-rate_fast [data-testid="stMetricValue"]'
# One rate and small sizes, but enough steps that the job is still training when it is killed:
# about 7 s of training on 2 idle cores, checkpointed every few hundred milliseconds.
JOB_OVERRIDES = {
    "alphas": "0.5", "vocab": "32", "dim": "32", "max_lag": "4", "n_train": "1024", "n_test": "256",
    "steps": "12000", "batch": "256", "checkpoint_every": "500",
}


def _status(home: Path, run_id: str) -> dict:
    try:
        return json.loads((home / "runs" / run_id / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _is_worker(pid: int | None, run_id: str) -> bool:
    """Whether ``pid`` is a live worker of ``run_id`` (not a zombie, not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, TypeError):
        return False
    return b"jobs.worker" in argv and run_id.encode() in argv


def _hold(home: Path, run_id: str, until) -> None:
    """Let the worker of ``run_id`` train (SIGCONT) until its status meets ``until``, then stop it there
    (SIGSTOP): the run stays "running" at that progress for as long as the test looks.  A liveness wait."""
    held = {}

    def reached() -> bool:
        status = _status(home, run_id)
        assert status.get("state") in (None, "queued", "running"), f"the job ended before it was held: {status}"
        pid = status.get("pid")
        if pid != held.get("pid") and _is_worker(pid, run_id):
            held["pid"] = pid
        return "pid" in held and status.get("state") == "running" and until(status)

    if "pid" in (last := _status(home, run_id)) and _is_worker(last["pid"], run_id):
        os.kill(last["pid"], signal.SIGCONT)
    assert wait_for(reached, WAIT_S, 0.01), _status(home, run_id)
    os.kill(held["pid"], signal.SIGSTOP)


def _stop_workers(home: Path) -> None:
    # Workers are detached from the app and outlive it: end any that this module's jobs left.
    for run in sorted((home / "runs").glob("*/")):
        pid = _status(home, run.name).get("pid")
        if _is_worker(pid, run.name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def emalab_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("emalab_home")
    yield home
    _stop_workers(home)


@pytest.fixture(scope="module")
def app_url(tmp_path_factory, emalab_home):
    with serve_app(emalab_home, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


def _download(page, key: str):
    """Click the download button of the widget ``key`` on the settled page and return the download (a
    download must follow: a liveness wait)."""
    settle(page)
    with page.expect_download(timeout=WAIT_MS) as info:
        page.locator(f".st-key-{key}").get_by_role("button").click()
    return info.value


def test_dilution_page_follows_the_fast_rate_slider(app_url, chromium_browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    # Tall enough that the whole page is in view: Streamlit scrolls an inner element, so a
    # full-page screenshot would only show the viewport.
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 2100})
    try:
        goto(page, app_url + "/dilution")
        page.get_by_role("heading", name="Trace dilution").wait_for()
        page.get_by_text("Measured in").wait_for()
        assert page.locator(CHARTS).count() == 3
        before = page.locator(FAST_HALF_LIFE).first.inner_text()
        assert before == "1.00 steps"  # α = 0.5
        page.get_by_role("button", name="LaTeX").first.wait_for()  # the downloads, after the charts
        page.screenshot(path=str(SHOTS / "dilution.png"))

        slider = page.get_by_role("slider", name="α fast")
        slider.focus()
        with rerun(page):
            for _ in range(5):
                page.keyboard.press("ArrowLeft")
            assert slider.get_attribute("aria-valuetext") == "0.495"  # five steps of 0.001
        # A rerun per committed value: the page shows the last one once the last rerun is through.
        expect(page.locator(FAST_HALF_LIFE).first).to_have_text("1.01 steps")  # ln ½ / ln 0.505
        # All three legends, the measured one included, name the new rate.
        expect(page.locator(CHARTS).filter(has_text="α=0.495")).to_have_count(3)
        settle(page)
        assert page.locator(CHARTS).count() == 3
        page.screenshot(path=str(SHOTS / "dilution_after.png"))
        no_exception(page)
    finally:
        page.close()


# The expanders that hold a verdict's rule, its full sentence and the numbers it reads (pages/_verdicts.py).
VERDICT_EXPANDERS = re.compile(r"rule and (the )?numbers|comparisons the rule reads|claims' numbers")


def _open_verdicts(page) -> None:
    """Open every verdict expander of the page, so that the full sentences are on screen."""
    for summary in page.locator("summary").filter(has_text=VERDICT_EXPANDERS).all():
        if summary.evaluate("e => !e.parentElement.open"):
            summary.click()


def _verdict_line(page, claim: str, word: str):
    """The one line that states a claim's verdict: its badge (the verdict's word), the claim in plain words."""
    line = page.get_by_test_id("stMarkdownContainer").filter(has_text=claim).filter(has_text=word)
    return line.first


def _limit_texts(**settings) -> tuple[str, list[str]]:
    """What the Trace dilution page says of which limit applies at these settings (the rest at their
    defaults, the page's own), as the browser shows it: the summary's paragraph and one line per rate."""
    from ema_core.dilution_config import DilutionConfig
    from ema_core.dilution import limit_sentences, limit_summary, measure_identity

    cfg = DilutionConfig(**settings)
    limits = measure_identity(cfg).limits
    lines = [line.removeprefix("- ").replace("**", "") for line in limit_sentences(limits, cfg, cfg.decoder)]
    return f"Which limit applies here. {limit_summary(limits)}", lines


def _says_limit(page, summary: str, lines: list[str], shot: str) -> None:
    """The settled page says ``summary`` and ``lines``, and from the summary down they fit one window
    whatever height the charts above take."""
    said = page.get_by_text(summary, exact=True)
    expect(said).to_be_visible()
    for line in lines:
        expect(page.get_by_text(line, exact=True)).to_be_visible()
    in_view_below(page, said, (summary, *lines))
    page.screenshot(path=str(SHOTS / shot))
    no_exception(page)


def test_dilution_page_says_which_limit_applies(app_url, chromium_browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 2100})
    try:
        goto(page, app_url + "/dilution")
        page.get_by_role("heading", name="Trace dilution").wait_for()
        page.get_by_text("Measured in").wait_for()
        # The defaults: the linear read-out loses the tokens long before the float32 trace does.
        readout = _limit_texts()
        assert readout[0].startswith("Which limit applies here. The read-out limits"), readout[0]
        _says_limit(page, *readout, "dilution_limit.png")

        # The peel on a bfloat16 trace: the fast rate's tokens are lost to the rounding.
        sidebar = page.get_by_test_id("stSidebar")
        with rerun(page):
            sidebar.get_by_text("peel (knows the table)", exact=True).click()
        sidebar.get_by_test_id("stSelectbox").filter(has_text="Precision").click()
        with rerun(page):
            page.get_by_role("option", name="bfloat16", exact=True).click()
        precision = _limit_texts(decoder="peel", precision="bfloat16")
        assert precision[0].startswith("Which limit applies here. Precision limits α=0.5"), precision[0]
        _says_limit(page, *precision, "dilution_limit_precision.png")
        expect(page.get_by_text(readout[0], exact=True)).to_have_count(0)

        # The linear read-out again, on a trace with noise σ = 0.1 (the last step): the noise limits.
        with rerun(page):
            sidebar.get_by_text("linear (trained)", exact=True).click()
        noise = sidebar.get_by_role("slider", name="Noise σ per coordinate")
        noise.focus()
        with rerun(page):
            for _ in range(8):  # none, 1e-06, …, 0.1: one step a press
                page.keyboard.press("ArrowRight")
            expect(noise).to_have_attribute("aria-valuetext", "0.1")
        # A rerun per committed value: the summary names the noise once the last one is through.
        noisy = _limit_texts(precision="bfloat16", noise=0.1)
        expect(page.get_by_text(noisy[0], exact=True)).to_be_visible()
        settle(page)
        assert noisy[0].startswith("Which limit applies here. Noise limits"), noisy[0]
        _says_limit(page, *noisy, "dilution_limit_noise.png")
        expect(page.get_by_text(precision[0], exact=True)).to_have_count(0)
    finally:
        page.close()


def test_downloads_are_generated_on_click(app_url, chromium_browser):
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 2100}, accept_downloads=True)
    try:
        goto(page, app_url + "/dilution")
        page.get_by_text("Measured in").wait_for()
        # By their keys: each button is its chart's or table's whatever order they are drawn in.
        expected = {"weights_svg": ("lag_weights.svg", b"<svg"),
                    "identity_table_dl_tex": ("identity_accuracy.tex", b"\\begin{table}")}
        for key, (name, head) in expected.items():
            download = _download(page, key)
            assert download.suggested_filename == name
            assert Path(download.path()).read_bytes().lstrip().startswith(head)
        no_exception(page)
    finally:
        page.close()


def _job_bar(page, run_id: str):
    """The progress bar of one job on the Jobs page (its text: run id · state · eta · metrics)."""
    return page.locator(f".st-key-job_{run_id}").get_by_test_id("stProgress")


def _bar_value(bar) -> float:
    return float(bar.get_by_role("progressbar").get_attribute("aria-valuenow") or 0)


def test_launch_kill_resume_and_export_in_the_browser(app_url, emalab_home, chromium_browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
    try:
        goto(page, app_url + "/jobs")
        page.get_by_role("heading", name="Jobs").wait_for()
        page.locator(".st-key-launch_overrides textarea").fill(
            "\n".join(f"{key}={value}" for key, value in JOB_OVERRIDES.items()))
        with rerun(page):
            page.get_by_role("button", name="Launch").click()
        launched = page.get_by_text(re.compile(r"Launched: dilution-\w+-s\d+"))
        launched.wait_for()
        run_id = re.search(r"dilution-\w+-s\d+", launched.inner_text()).group(0)

        # Watch it: the job list refreshes every second; the bar moves while the worker trains.  The
        # worker is held (SIGSTOP) wherever the page must show it, so the job cannot end before the page
        # has shown it, however busy the machine; the page then shows a held job within a check's time.
        bar = _job_bar(page, run_id)
        _hold(emalab_home, run_id, lambda st: st.get("eta_s") is not None)  # training has begun: a time left
        expect(bar).to_contain_text(f"{run_id} · running")
        expect(bar).to_contain_text("left")  # an ETA once training has begun
        page.wait_for_function(f"() => +document.querySelector('.st-key-job_{run_id} [role=progressbar]')"
                               ".getAttribute('aria-valuenow') > 0")
        first = _bar_value(bar)
        _hold(emalab_home, run_id, lambda st: st.get("progress", 0) * 100 > first + 1)  # on, and held again
        page.wait_for_function(f"() => +document.querySelector('.st-key-job_{run_id} [role=progressbar]')"
                               f".getAttribute('aria-valuenow') > {first}")
        moved = _bar_value(bar)
        page.screenshot(path=str(SHOTS / "jobs_running.png"))
        no_exception(page)

        # Kill its process, as a crash would: the page marks the job crashed and offers a resume.
        status = _status(emalab_home, run_id)
        assert status.get("state") == "running" and status.get("progress", 1.0) < 1.0, status
        pid = status["pid"]
        assert _is_worker(pid, run_id)
        os.kill(pid, signal.SIGKILL)
        expect(bar).to_contain_text(f"{run_id} · crashed", timeout=WAIT_MS)
        box = page.locator(f".st-key-job_{run_id}")
        expect(box).to_contain_text(f"worker process died (pid {pid})")
        crashed_at = _bar_value(bar)
        assert crashed_at >= moved  # the bar keeps the progress made before the kill
        no_exception(page)

        box.get_by_role("button", name="Resume").click()
        expect(bar).to_contain_text(f"{run_id} · done", timeout=WAIT_MS)
        assert _bar_value(bar) == 100
        status = _status(emalab_home, run_id)
        assert status["state"] == "done" and status["attempts"] == 2, status
        assert status["pid"] != pid
        expect(box.get_by_role("button", name="Resume")).to_have_count(0)
        settle(page)  # the job list's refresh through: nothing stale in the shot
        page.screenshot(path=str(SHOTS / "jobs_resumed.png"))
        no_exception(page)

        # Its table, from the store, as LaTeX.
        open_export_table(page, app_url, "dilution_accuracy")
        # The figure of a run's accuracy by lag is drawn for this table only: the rerun is through.
        page.get_by_role("heading", name="Figure").wait_for()
        assert page.locator(CHARTS).count() == 1
        rows = page.get_by_text(re.compile(r"^\d+ rows$"))
        assert int(rows.inner_text().split()[0]) >= int(JOB_OVERRIDES["max_lag"]) + 1  # a row per lag
        download = _download(page, "export_dilution_accuracy_latex")
        assert download.suggested_filename == "dilution_accuracy.tex"
        tex = Path(download.path()).read_text()
        assert "\\toprule" in tex and "\\bottomrule" in tex
        assert run_id in tex
        settle(page)
        page.screenshot(path=str(SHOTS / "export.png"))
        no_exception(page)
    finally:
        page.close()


def test_overview_links_and_quick_reproduction(app_url, chromium_browser):
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 1400})
    try:
        goto(page, app_url + "/")
        page.get_by_role("heading", name="EMA Lab").wait_for()
        page.get_by_text("The paper's claims, and where they are tested").wait_for()
        expect(page.get_by_text("Fixed-decay traces dilute token identity")).to_be_visible()
        expect(page.get_by_text("Traces keep structure")).to_be_visible()
        expect(page.get_by_text("Traces lose content")).to_be_visible()
        tested = page.get_by_role("link", name="Tested on: Trace dilution")
        assert tested.get_attribute("href").rstrip("/").rsplit("/", 1)[-1] == "dilution"
        no_exception(page)

        with rerun(page):
            page.get_by_role("button", name="Run the quick reproduction").click()
        started = page.get_by_text(re.compile(r"Launched: dilution-\w+-s\d+"))
        started.wait_for()
        run_id = re.search(r"dilution-\w+-s\d+", started.inner_text()).group(0)
        no_exception(page)

        with rerun(page):
            page.get_by_role("link", name="Follow them on the Jobs page").click()
        page.get_by_role("heading", name="Jobs").wait_for()
        assert page.url.rstrip("/").endswith("/jobs")
        bar = _job_bar(page, run_id)
        expect(bar).to_contain_text(re.compile(rf"{run_id} · (queued|running|done)"))
        expect(bar).to_contain_text(f"{run_id} · done", timeout=WAIT_MS)  # the job ends: liveness
        no_exception(page)
    finally:
        page.close()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(URL, data folder) of a server that no one has visited yet, over one seed of a real structure run."""
    from structure_fixture import make_structure_runs

    home = tmp_path_factory.mktemp("fresh_home")
    make_structure_runs(home, (0,), real=True)
    try:
        with serve_app(home, tmp_path_factory.mktemp("fresh") / "server.log") as url:
            yield url, home
    finally:
        _stop_workers(home)


def test_a_deep_link_into_a_fresh_server_gets_the_apps_navigation(fresh, chromium_browser):
    # A first visitor landing on /jobs of a fresh server must still get app.py's router and
    # navigation (Streamlit would otherwise treat pages/ as a folder app: see pages/_router.py).
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        goto(page, fresh[0] + "/jobs")
        page.get_by_role("heading", name="Jobs").wait_for()
        nav = page.get_by_test_id("stSidebarNav")
        links = nav.get_by_role("link").all_inner_texts()  # "icon name\n\nTitle" each
        titles = [text.strip().split("\n")[-1] for text in links]
        assert titles == ["Overview", "Trace dilution", "Depth explorer", "Structure", "Content", "Boundary map",
                          "Depth dilution", "Jobs", "Export"], links
        # app.py's own sidebar text: the router ran.
        assert page.get_by_test_id("stSidebar").get_by_text("reproduces, measures and extends").count() == 1
        no_exception(page)
    finally:
        page.close()


def test_deep_links_open_their_pages_on_a_fresh_server(fresh, chromium_browser):
    # Streamlit serves the default page at "/" only (its url_path is ""): once the router had run,
    # /overview was "Page not found".  /jobs first (the fresh server's first visitor, in the test
    # above when the module runs whole), then /overview.
    for path, heading, text in (
        ("/jobs", "Jobs", "Every result in EMA Lab comes from a job"),
        ("/overview", "EMA Lab", "The paper's claims, and where they are tested"),
    ):
        page = chromium_browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            goto(page, fresh[0] + path)
            page.get_by_role("heading", name=heading, exact=True).wait_for()
            page.get_by_text(text).first.wait_for()
            # The not-found dialog would have come before the page's own elements.
            assert page.get_by_text("Page not found").count() == 0, path
            assert page.get_by_role("heading", name=heading, exact=True).count() == 1, path
            no_exception(page)
        finally:
            page.close()


def test_the_overview_judges_every_claim_and_launches_the_missing_seeds(fresh, chromium_browser):
    """A data folder with one seed of a real structure run: the Overview shows a verdict per claim,
    each "not judged: 1 seed"; its button launches the two missing seeds through the job runner; once
    they finish, the same claims are judged on three seeds."""
    from ema_core.studies.structure.findings import CLAIMS
    from jobs.runner import LocalRunner

    url, home = fresh
    page = chromium_browser.new_page()
    try:
        goto(page, url + "/")
        board = page.locator(".st-key-overview_claims_structure")
        lines = board.get_by_test_id("stMarkdownContainer")
        expect(lines).to_have_count(len(CLAIMS))
        for i in range(len(CLAIMS)):
            expect(lines.nth(i)).to_contain_text("not judged: 1 seed")
            expect(lines.nth(i)).to_contain_text("1 seed of the 3 the rule needs")
        no_exception(page)
        with rerun(page):
            page.get_by_role("button", name="Launch the missing seeds (2 runs)").click()
        started = page.get_by_text(re.compile(r"Launched: structure-\w+-s1, structure-\w+-s2"))
        run_ids = re.findall(r"structure-\w+-s\d", started.inner_text())
        page.screenshot(path=str(SHOTS / "overview_launched.png"))
        with rerun(page):
            page.get_by_role("link", name="Follow them on the Jobs page").click()
        page.get_by_role("heading", name="Jobs").wait_for()
        for run_id in run_ids:  # the jobs appear where every job is followed
            page.locator(f".st-key-job_{run_id}").wait_for()
        # The runner's own wait (liveness only, WAIT_S): each job ends done, not failed or crashed.
        watcher = LocalRunner(home=home, slots=1)
        try:
            for run_id in run_ids:
                assert watcher.wait(run_id, timeout=WAIT_S) == "done", watcher.logs(run_id)
        finally:
            watcher.close()
        # Three seeds now: every claim judged, none "not judged", and no more seeds to launch.
        goto(page, url + "/")
        expect(board.get_by_test_id("stMarkdownContainer")).to_have_count(len(CLAIMS))
        expect(board).to_contain_text("3 seeds")
        expect(board).not_to_contain_text("not judged")
        expect(page.get_by_role("button", name=re.compile("Launch the missing seeds"))).to_have_count(0)
        page.screenshot(path=str(SHOTS / "overview_judged.png"), full_page=True)
        no_exception(page)
    finally:
        page.close()


def _tested_on(page, app_url: str, title: str, slug: str) -> None:
    """The Overview links the claim to its page, ``/slug``."""
    goto(page, app_url + "/")
    tested = page.get_by_role("link", name=f"Tested on: {title}")
    tested.wait_for()
    # Its query string, if any, picks the runs the Overview judged.
    assert tested.get_attribute("href").split("?")[0].rstrip("/").rsplit("/", 1)[-1] == slug


def _structure_verdicts(home: Path, run_ids: list[str]):
    """The paper's claims judged and the findings stated for these runs, from their own result.json
    (each run's summary and probe_accuracy rows, as bench/structure.py reads them): the page reads the
    store, so the two must agree."""
    from ema_core.rundir import RunDir
    from ema_core.studies.structure.findings import claim_measures, claim_verdicts, findings, pair_stats
    from ema_core.verdicts import spread

    results = [RunDir.for_id(run_id, home).read_result() for run_id in run_ids]
    per_run = [claim_measures(r["summary"]) for r in results]
    claims = claim_verdicts({m: spread(values[m] for values in per_run) for m in per_run[0]})
    return claims, findings(pair_stats([r["tables"]["probe_accuracy"] for r in results]))


def test_structure_page_draws_runs_and_switches_split(app_url, emalab_home, chromium_browser):
    from ema_core.studies.structure.findings import scores as structure_scores
    from structure_fixture import make_structure_runs

    # Three seeds of the experiment itself (tiny sizes): the browser sees what a real run writes.
    run_ids = make_structure_runs(emalab_home, (0, 1, 2), real=True)
    claims, findings = _structure_verdicts(emalab_home, run_ids)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 3000}, accept_downloads=True)
    try:
        _tested_on(page, app_url, "Structure", "structure")

        # These runs picked by the URL, as a shared link picks them: the page's default is the newest
        # group, which the quick reproduction launched above may have replaced by the time this runs.
        goto(page, app_url + "/structure?structure_runs=" + ",".join(run_ids))
        page.get_by_role("heading", name="Structure", exact=True).wait_for()
        assert page.locator(CHARTS).count() >= 2  # roles, probe controls
        roles_chart = page.locator(CHARTS).first
        expect(roles_chart).to_contain_text("within grammar (test)")
        expect(roles_chart).to_contain_text("structure-dependent")
        page.get_by_text("The paper's numbers beside ours").wait_for()
        page.locator(".st-key-structure_control_dl_tex").get_by_role("button").wait_for()
        settle(page)
        page.screenshot(path=str(SHOTS / "structure.png"))
        no_exception(page)

        with rerun(page):
            page.get_by_test_id("stRadioGroup").get_by_text("novel vocabulary", exact=True).click()
        expect(roles_chart).to_contain_text("split: novel vocabulary")
        assert page.locator(CHARTS).count() >= 2
        with rerun(page):
            page.get_by_test_id("stRadioGroup").get_by_text("deep embedding", exact=True).click()
        expect(roles_chart).to_contain_text("split: deep embedding")
        expect(roles_chart).not_to_contain_text("pobj_det")  # the deep split has no prepositional phrases
        no_exception(page)

        download = _download(page, "structure_paper_dl_tex")
        assert download.suggested_filename == "structure_paper_vs_ours.tex"
        tex = Path(download.path()).read_text()
        assert "\\toprule" in tex and "0.795" in tex and "$\\pm$" in tex
        settle(page)
        page.screenshot(path=str(SHOTS / "structure_deep.png"))
        no_exception(page)

        # What the runs show and the claims' verdicts (they do not depend on the split shown).
        assert findings, "these runs should hold the findings' comparisons"
        shows = page.get_by_role("heading", name="What these runs show")
        for f in findings:
            expect(page.get_by_text(f.sentence, exact=True)).to_be_visible()
        for s in structure_scores(claims):  # each claim in one line: expected, measured, its verdict
            expect(_verdict_line(page, s.claim, s.word)).to_be_visible()
        _open_verdicts(page)
        page.get_by_text("The rule.").first.wait_for()
        for v in claims:  # and on demand its full sentence: Δ, spread and verdict word
            expect(page.get_by_text(v.sentence, exact=True)).to_be_visible()
        in_view_below(page, shows, [f.sentence for f in findings])
        page.screenshot(path=str(SHOTS / "structure_verdicts.png"))
        no_exception(page)
    finally:
        page.close()


def test_content_page_draws_real_runs_and_follows_its_controls(app_url, emalab_home, chromium_browser):
    from lm_fixture import make_lm_runs
    from ema_core.studies.content.findings import ablation_verdict, headline_verdict
    from ema_core.studies.content.shared import verdict_number
    from store.content import lm_final_losses, lm_final_stats
    from store.export import mean_std

    # Two seeds of GPT, SPEN linear, SPEN softmax attention on the state and on raw tokens: the
    # experiment itself at tiny sizes, so the browser sees what a real run writes.
    run_ids = make_lm_runs(emalab_home, ("gpt", "linear", "softmax_state", "softmax_tokens"), (0, 1), real=True)
    stats = lm_final_stats(run_ids, home=emalab_home)
    verdict = ablation_verdict(lm_final_losses(run_ids, home=emalab_home).to_dict("records"))
    headline = headline_verdict(lm_final_losses(run_ids, home=emalab_home).to_dict("records"))
    # SPEN linear ÷ the GPT of the same seed, as the paper's table shows it (two decimals).
    spen = stats[(stats["model"] == "spen") & (stats["predictor"] == "linear") & (stats["attn_input"] == "state")]
    ratios = {what: mean_std(float(spen[f"{col}_mean"].iloc[0]), float(spen[f"{col}_std"].iloc[0]), 2)
              for what, col in (("Perplexity, SPEN ÷ GPT", "ppl_ratio"), ("Bits per byte, SPEN ÷ GPT", "bpb_ratio"))}
    # Each seed's SPEN has a GPT of comparable settings to divide by (else the page has no ratio to show).
    assert all(ratios.values()) and int(spen["pairs"].iloc[0]) == 2, (
        f"SPEN linear has no GPT of comparable settings on every seed (pairs):\n{stats.to_string()}")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 3400})
    try:
        _tested_on(page, app_url, "Content", "content")

        goto(page, app_url + "/content?content_runs=" + ",".join(run_ids))  # these runs, as for Structure
        page.get_by_role("heading", name="Content", exact=True).wait_for()
        assert page.locator(CHARTS).count() >= 4  # curves, the gap by token class, one class over training, ablation
        curves = page.locator(CHARTS).first
        expect(curves).to_contain_text("Validation curves")
        expect(curves).to_contain_text("SPEN linear")
        expect(page.locator(CHARTS).filter(has_text="Predictor ablation")).to_have_count(1)
        # Where the gap lives (issue 20): the gap per token class and one class's curves over training.
        gap = page.locator(CHARTS).filter(has_text="Where the gap lives")
        expect(gap).to_have_count(1)
        expect(gap).to_contain_text("recall1–16")  # an axis label a word a line: "recall" over "1–16"
        expect(gap).to_contain_text("SPEN linear − GPT (nats/token)")
        class_curves = page.locator(CHARTS).filter(has_text="Over training: recall 1–16 tokens")
        expect(class_curves).to_have_count(1)
        expect(class_curves).to_contain_text("GPT")
        page.locator(".st-key-content_gap_dl_tex").get_by_role("button").wait_for()
        expect(page.get_by_role("table").filter(has_text="share of the gap (%)")).to_contain_text("all tokens")
        page.get_by_text("The paper's numbers beside ours", exact=False).first.wait_for()
        page.locator(".st-key-content_spread_dl_tex").get_by_role("button").wait_for()
        settle(page)
        page.screenshot(path=str(SHOTS / "content.png"))
        no_exception(page)

        with rerun(page):
            page.get_by_test_id("stRadioGroup").get_by_text("EMA 0.9", exact=True).click()
        expect(curves).to_contain_text("smoothed: EMA 0.9")
        with rerun(page):
            page.locator(".st-key-content_log_y").get_by_text("log y", exact=True).click()
        expect(curves).to_contain_text("smoothed: EMA 0.9; log y")
        assert page.locator(CHARTS).count() >= 4
        settle(page)
        page.screenshot(path=str(SHOTS / "content_smoothed_log.png"))
        no_exception(page)

        # SPEN ÷ GPT, and the ablation's verdict in the paper's table and under the rule, from these runs.
        # The paper's table: measure, paper, ours, … (Playwright reads its no-break spaces as spaces).
        paper_rows = page.get_by_role("row")
        for what, ratio in ratios.items():
            expect(paper_rows.filter(has_text=what).locator("td").nth(2)).to_have_text(ratio)
        claim_row = paper_rows.filter(has_text="Predictor ablation: attention predictors reading the state")
        expect(claim_row.locator("td").nth(2)).to_have_text(verdict.word)
        verdict_heading = page.get_by_role("heading", name="Verdict", exact=True)
        expect(_verdict_line(page, "Swapping SPEN's predictor", verdict.word)).to_be_visible()
        expect(_verdict_line(page, "same-size GPT", headline.word)).to_be_visible()
        _open_verdicts(page)
        said = page.get_by_text(verdict.sentence, exact=True)
        expect(said).to_be_visible()
        page.get_by_text("The rule.").first.wait_for()
        for c in verdict.comparisons:  # the comparisons the sentence is computed from
            expect(page.get_by_role("table").filter(has_text="Δ loss (nats/token)")).to_contain_text(
                verdict_number(c.delta.mean))
        in_view_below(page, verdict_heading, [verdict.sentence])
        page.screenshot(path=str(SHOTS / "content_verdict.png"))
        no_exception(page)

        # The gap split by training-frequency band instead: the table, the chart and the curves follow.
        with rerun(page):
            page.locator(".st-key-content_partition").get_by_text("training-frequency band", exact=True).click()
        expect(gap).to_contain_text("frequent")
        expect(page.locator(CHARTS).filter(has_text="Over training: frequent tokens")).to_have_count(1)
        expect(page.get_by_role("table").filter(has_text="share of the gap (%)")).to_contain_text("rare")
        scroll_to_top(page.get_by_role("heading", name="Where the gap lives: token classes"))
        page.screenshot(path=str(SHOTS / "content_gap.png"))
        no_exception(page)

        # The n-gram baselines beside the models; the growth fit says what it needs (these runs' cosine
        # has no plateau); the kept models continue a held-out passage side by side.
        expect(page.get_by_role("table").filter(has_text="share of the gap (%)")).to_contain_text(
            "bigram baseline (nats/token)")
        page.get_by_text("Not enough points: the fit needs SPEN and its GPT", exact=False).wait_for()
        page.get_by_role("heading", name="Evaluated again, on another text").wait_for()
        samples = page.get_by_role("heading", name="Samples", exact=True)
        scroll_to_top(samples)
        with rerun(page):
            page.get_by_role("button", name="Sample").click()
        page.get_by_text("the same settings give the same text", exact=False).wait_for()
        blocks = page.get_by_test_id("stText")
        expect(blocks).to_have_count(3)  # the prompt, SPEN's continuation, the GPT's
        assert all(t.strip() for t in blocks.all_inner_texts())
        page.screenshot(path=str(SHOTS / "content_samples.png"))
        no_exception(page)
    finally:
        page.close()


def test_boundary_page_draws_a_real_run_and_judges_the_claims(app_url, emalab_home, chromium_browser):
    from boundary_fixture import TINY, make_boundary_runs
    from ema_core.studies.boundary.findings import RECALL_LEVEL, claim_verdicts, reach_of
    from ema_core.experiments import build_config
    from ema_core.studies.boundary.findings import scores as boundary_scores
    from store.boundary import boundary_accuracy

    # One run of the experiment itself at tiny sizes, with two seeds inside it: what a real run writes,
    # and fewer seeds than a claim is judged on, so the page says "not judged: 2 seeds".
    run_ids = make_boundary_runs(emalab_home, (0,), overrides={"seeds": 2})
    body = build_config("boundary", overrides={**TINY, "seeds": 2}).model_dump(mode="json")["model"]
    verdicts = claim_verdicts(boundary_accuracy(run_ids, home=emalab_home), reach=reach_of(body))
    assert any(v.word == "not judged: 2 seeds" for v in verdicts)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 3600}, accept_downloads=True)
    try:
        goto(page, app_url + "/boundary")
        page.get_by_role("heading", name="Boundary map", exact=True).wait_for()
        assert page.locator(CHARTS).count() >= 4  # the map, the crossing, the dial, recall against state size
        charts = page.locator(CHARTS)
        expect(charts.nth(0)).to_contain_text("The boundary map")
        expect(charts.nth(0)).to_contain_text("softmax")
        expect(charts.nth(0)).to_contain_text("exclusion floor")  # the colour's base, and f under each accuracy
        expect(charts.nth(1)).to_contain_text("Structure against content")
        expect(charts.nth(1)).to_contain_text("window_k")  # the floor, in the legend like every mixer
        expect(charts.nth(2)).to_contain_text("Structure as the context repeats it")
        expect(charts.nth(3)).to_contain_text("MQAR recall against state size")
        expect(charts.nth(3)).to_contain_text(f"smallest state reaching {RECALL_LEVEL:g}")
        page.get_by_text(f"The smallest state reaching {RECALL_LEVEL:g}", exact=True).wait_for()
        page.get_by_role("heading", name="The paper's hierarchy and the measured one").wait_for()
        page.get_by_text("The paper's claims", exact=False).first.wait_for()
        page.get_by_text("they hold by construction or check the harness (the recipe trains").wait_for()
        for sc in boundary_scores(verdicts):  # each claim and each check in one line, its full sentence on demand
            expect(_verdict_line(page, sc.claim, sc.word)).to_be_visible()
        _open_verdicts(page)
        for sc in boundary_scores(verdicts):
            expect(page.get_by_text(sc.detail, exact=True)).to_be_visible()
        expect(page.get_by_text("not judged: 2 seeds").first).to_be_visible()
        page.get_by_text("The rule.").first.wait_for()
        page.locator(".st-key-boundary_map_dl_tex").get_by_role("button").wait_for()
        settle(page)
        page.screenshot(path=str(SHOTS / "boundary.png"))
        no_exception(page)

        download = _download(page, "boundary_map_dl_tex")
        assert download.suggested_filename == "boundary_map.tex"
        tex = Path(download.path()).read_text()
        assert "\\toprule" in tex and "$\\pm$" in tex and "window\\_k" in tex
        no_exception(page)
    finally:
        page.close()


def test_depth_page_draws_a_real_run_judges_the_claims_and_offers_its_exports(app_url, emalab_home,
                                                                              chromium_browser):
    from depth_fixture import make_depth_runs
    from ema_core.studies.depth.findings import claim_verdicts
    from ema_core.studies.depth.figures import DEPTH_METRICS
    from ema_core.studies.depth.findings import scores as depth_scores
    from store.depth import depth_remix, depth_results

    # One run of the experiment itself at tiny sizes (every rule at 1 and 2 blocks), with three seeds
    # inside it: what a real run writes (its weights as they train and its remix too), and judged.
    run_ids = make_depth_runs(emalab_home, (0,))
    verdicts = claim_verdicts(depth_results(run_ids, home=emalab_home), depth_remix(run_ids, home=emalab_home))
    # The charts in the page's order: the loss, the probes, the weights map, the weights as they train,
    # their spread, the budget axis.
    metrics = {0: "val_loss", 1: "val_bpb", 2: "probe_early_resid", 3: "probe_prev", 4: "probe_token",
               5: "probe_early", 8: "mix_entropy"}
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 9000}, accept_downloads=True)
    try:
        goto(page, app_url + "/depth")
        page.get_by_role("heading", name="Depth dilution", exact=True).wait_for()
        charts = page.locator(CHARTS)
        expect(charts).to_have_count(10)
        for i, metric in metrics.items():
            # The y axis's title: one text (the chart's title is wrapped into lines, drawn apart).
            expect(charts.nth(i)).to_contain_text(DEPTH_METRICS[metric][0])
            expect(charts.nth(i)).to_contain_text("input-dependent selection")  # a legend entry per rule
        expect(charts.nth(6)).to_contain_text("Depth weights at 2 blocks")
        expect(charts.nth(7)).to_contain_text("stream after block 2")  # a panel per block's stream
        expect(charts.nth(7)).to_contain_text("0: the embedding")
        expect(charts.nth(9)).to_contain_text("192 tokens per model")  # a panel per budget
        # Every chart drawn (an svg or a canvas of its own), each with its SVG and PNG downloads.
        for i in range(10):
            assert charts.nth(i).locator("svg.marks, canvas").count() >= 1, i
        # The page's own download buttons (a chart's toolbar has a "Download as PNG" of its own).
        offered = page.get_by_test_id("stDownloadButton")
        for label, n in (("SVG", 10), ("PNG", 10), ("CSV", 2), ("Markdown", 2), ("LaTeX", 2)):
            expect(offered.filter(has_text=label)).to_have_count(n)
        page.get_by_role("heading", name="The remix test").wait_for()
        page.get_by_role("heading", name="The budget axis").wait_for()
        page.get_by_text("deep models not yet trained.", exact=False).first.wait_for()
        page.get_by_role("heading", name="The paper's order and the measured one").wait_for()
        page.get_by_text("Where the two axes meet.", exact=False).wait_for()
        for sc in depth_scores(verdicts):  # each claim and check in one line, its full sentence on demand
            expect(_verdict_line(page, sc.claim, sc.word)).to_be_visible()
        _open_verdicts(page)
        for sc in depth_scores(verdicts):
            expect(page.get_by_text(sc.detail, exact=True)).to_be_visible()
        settle(page)
        page.screenshot(path=str(SHOTS / "depth.png"))
        no_exception(page)

        download = _download(page, "depth_table_dl_tex")
        assert download.suggested_filename == "depth_results.tex"
        tex = Path(download.path()).read_text()
        assert "\\toprule" in tex and "$\\pm$" in tex and "val\\_loss" in tex and "select" in tex
        download = _download(page, "depth_weights_chart_svg")
        assert download.suggested_filename == "depth_weights.svg"
        assert Path(download.path()).read_text().lstrip().startswith("<svg")
        download = _download(page, "depth_remix_dl_csv")
        assert download.suggested_filename == "depth_remix.csv"
        assert Path(download.path()).read_text().splitlines()[0] == "depth,rule,seeds,joint_gain,remix_gain,share"

        # The weights of the other depth: the map and the weights as they train follow, and the URL says so.
        with rerun(page):
            page.locator(".st-key-depth_map_depth").get_by_text("1", exact=True).click()
        expect(charts.nth(6)).to_contain_text("Depth weights at 1 block,")
        expect(charts.nth(7)).not_to_contain_text("stream after block 2")
        page.wait_for_url(re.compile(r"depth_map_depth=1"))
        # Another rule's weights as they train.
        with rerun(page):
            page.locator(".st-key-depth_traj_rule").get_by_text("static learned weights (DenseFormer)",
                                                                 exact=True).click()
        page.wait_for_url(re.compile(r"depth_traj_rule=static"))
        no_exception(page)
    finally:
        page.close()


def test_a_newcomer_tells_runs_apart_relaunches_and_exports_lm_eval(app_url, emalab_home, chromium_browser):
    # The newcomer's path after the tests above: the quick reproduction was launched and its dilution
    # run finished; real tiny SPEN and GPT runs are stored.  Their cards differ, a relaunch says
    # "already done" and runs nothing, and the lm_eval table reads as a paper's table.
    SHOTS.mkdir(parents=True, exist_ok=True)
    lm_runs = {}  # a finished run of each model: the quick reproduction's own may still be training
    for folder in sorted((emalab_home / "runs").glob("content-*")):
        record = json.loads((folder / "config.json").read_text())
        if _status(emalab_home, folder.name).get("state") == "done":
            lm_runs.setdefault(record["config"]["model"], folder.name)
    assert {"gpt", "spen"} <= set(lm_runs), lm_runs
    page = chromium_browser.new_page(viewport={"width": 1400, "height": 2400}, accept_downloads=True)
    try:
        goto(page, app_url + "/jobs")
        page.get_by_role("heading", name="Jobs").wait_for()
        cards = {model: page.locator(f".st-key-job_{run_id}") for model, run_id in lm_runs.items()}
        for model, card in cards.items():
            expect(card).to_contain_text(f"{lm_runs[model]} · done")
        heads = {model: card.get_by_test_id("stMarkdown").first.inner_text() for model, card in cards.items()}
        assert heads["gpt"] != heads["spen"] and "model=gpt" in heads["gpt"], heads
        assert all(head.startswith("content ") and "seed" in head for head in heads.values()), heads
        page.screenshot(path=str(SHOTS / "jobs_told_apart.png"))
        no_exception(page)

        goto(page, app_url + "/")
        with rerun(page):
            page.get_by_role("button", name="Run the quick reproduction").click()
        done = page.get_by_text(re.compile(r"Already done: .*dilution-\w+-s\d+"))
        done.wait_for()
        assert "next free seed is" in done.inner_text()
        expect(page.get_by_text(re.compile(r"^Launched"))).to_have_count(0)
        expect(page.get_by_role("button", name=re.compile(r"^Use seed \d+$"))).to_have_count(0)  # no seed input here
        page.screenshot(path=str(SHOTS / "relaunch_already_done.png"))
        no_exception(page)

        open_export_table(page, app_url, "lm_eval")
        tex = Path(_download(page, "export_lm_eval_latex").path()).read_text()
        assert "\\caption{" in tex and "\\label{tab:lm_eval}" in tex, tex
        header = next(line for line in tex.splitlines() if "run_id" in line or "model" in line)
        assert "model" in header and "predictor" in header, header
        assert "gpt" in tex and "spen" in tex
        page.screenshot(path=str(SHOTS / "export_lm_eval.png"))
        no_exception(page)
    finally:
        page.close()
