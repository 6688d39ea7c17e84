"""Malformed configs and command lines, generated: each is refused in one clear line and changes nothing.

(a) bad values for every setting of the dilution config reach ``build_config`` and come back as a
    ValueError that names the setting;
(b) bad argument vectors go through ``jobs.cli.main`` in-process: exit status 2, one line on
    stderr starting ``emalab: error:``, nothing on stdout, and the data folder (a real run and a
    store holding it) byte for byte as it was;
(c) export targets that try to leave the export folder are refused before anything is written,
    inside the folder or outside it.

The strategies only produce inputs that must be refused: a test failure is either a bad input
that got through or a refusal that was not clean.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import typing
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ema_core.config import resolve_setting, setting_fields
from ema_core.experiments import REGISTRY, build_config
from jobs import cli
from store.export import EXPORT_TABLES

CONFIG = REGISTRY["dilution"].config_cls
FIELDS = setting_fields(CONFIG)  # by dotted path: stream.vocab, train.steps, …
PRESETS = REGISTRY["dilution"].presets
TINY = dict(alphas=(0.5,), vocab=8, dim=8, max_lag=2, n_train=256, n_test=128, steps=40, batch=64,
            checkpoint_every=20, log_every=10)
# Deterministic: the same examples on every run and machine, and no example database in the checkout.
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# --- bad values, per setting ---------------------------------------------------------------------


def _bounds(name: str) -> tuple[float | None, float | None]:
    lo = hi = None
    for m in FIELDS[name].metadata:
        lo = getattr(m, "ge", getattr(m, "gt", lo))
        hi = getattr(m, "le", getattr(m, "lt", hi))
    return lo, hi


def _open_bounds(name: str) -> tuple[bool, bool]:
    """Whether the lower and upper bounds are excluded (gt, lt): then the bound itself is a bad value."""
    lo_open = hi_open = False
    for m in FIELDS[name].metadata:
        lo_open = hasattr(m, "gt") or (lo_open and not hasattr(m, "ge"))
        hi_open = hasattr(m, "lt") or (hi_open and not hasattr(m, "le"))
    return lo_open, hi_open


def _int_parses(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


# Decoded as JSON these are none of a number, a flag or a list of numbers.
NOT_A_VALUE = ["", " ", "nan", "NaN", "inf", "-inf", "Infinity", "null", "{}", '{"a": 1}', "1e400", "9" * 400,
               "0x10", "1,,", "[", "]", "'5'", "five", "1 2", "\t", "\n"]
junk_text = st.text(max_size=40).map(lambda s: "x" + s)  # never a number, a flag word or JSON


def bad_int(name: str) -> st.SearchStrategy[str]:
    lo, hi = _bounds(name)
    return st.one_of(
        st.integers(max_value=int(lo) - 1).map(str),
        st.integers(min_value=int(hi) + 1).map(str),
        st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()).map(repr),
        st.sampled_from(NOT_A_VALUE + ["true", "false", "[1]", "[]", "1.5e0"]),
        junk_text,
    )


def bad_float(name: str) -> st.SearchStrategy[str]:
    lo, hi = _bounds(name)
    lo_open, hi_open = _open_bounds(name)
    return st.one_of(
        # lr > 0: zero and below; noise ≥ 0: below zero only (0.0 is a good value)
        st.floats(max_value=lo, exclude_max=not lo_open, allow_nan=False).map(repr),
        st.floats(min_value=hi, exclude_min=not hi_open).map(repr),
        st.sampled_from(NOT_A_VALUE + ["true", "false", "[0.1]", "-0.0"]),
        junk_text,
    )


def bad_bool(name: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers().filter(lambda i: i not in (0, 1)).map(str),
        st.sampled_from(["maybe", "2", "-1", "0.5", "[]", "[true]", "null", "{}", "truth", "nope", "", "  "]),
        junk_text,
    )


rate = st.floats(min_value=0.0, max_value=1.0, exclude_min=True)
not_a_rate = st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0, exclude_min=True), st.just(math.nan),
                       st.sampled_from([math.inf, -math.inf]))


def _as_text(values: list[float], style: str) -> str:
    # repr of a non-finite float is not JSON: those go in the comma form, as a user would type them.
    if style == "json" and all(math.isfinite(v) for v in values):
        return "[" + ", ".join(repr(v) for v in values) + "]"
    return ",".join(repr(v) for v in values)


def bad_alphas(name: str) -> st.SearchStrategy[str]:
    one_bad = st.tuples(st.lists(rate, max_size=5), not_a_rate, st.lists(rate, max_size=5)).map(
        lambda t: [*t[0], t[1], *t[2]])
    duplicated = st.tuples(st.lists(rate, max_size=4), rate).map(lambda t: [*t[0], t[1], t[1]])
    too_many = st.lists(rate, min_size=17, max_size=24, unique=True)
    return st.one_of(
        st.tuples(st.one_of(one_bad, duplicated, too_many), st.sampled_from(["json", "comma"])).map(
            lambda t: _as_text(*t)),
        st.sampled_from(["", "[]", "()", ",", "null", "true", "true,0.5", '["a", "b"]', "0.5,x", "{}", "[[0.5]]"]),
        junk_text,
    )


def bad_value(name: str) -> st.SearchStrategy[str]:
    ann = FIELDS[name].annotation
    if name == "alphas":
        return bad_alphas(name)
    if ann is bool:
        return bad_bool(name)
    if ann is float:
        return bad_float(name)
    if typing.get_origin(ann) is typing.Literal:  # a choice: any other word, or junk
        allowed = set(typing.get_args(ann))
        return st.one_of(st.sampled_from(["mlp", "float8", "LINEAR", "", "1", "null"]), junk_text).filter(
            lambda v: v.strip().strip('"') not in allowed)
    assert ann is int, (name, ann)
    return bad_int(name)


bad_setting = st.sampled_from(sorted(FIELDS)).flatmap(lambda n: st.tuples(st.just(n), bad_value(n)))
def _is_setting(key: str) -> bool:
    try:
        resolve_setting(CONFIG, key, dict(REGISTRY["dilution"].older_paths))
    except ValueError:
        return False
    return True


unknown_key = st.text(min_size=1, max_size=30).filter(
    lambda k: "=" not in k and not _is_setting(k))


def _names(message: str, key: str) -> bool:
    shown = key if key.replace(".", "_").isidentifier() else repr(key)
    return message.startswith(shown + ":") or message.startswith(shown + ".")


@settings(max_examples=250, **SETTINGS)
@given(bad_setting)
def test_bad_values_name_the_setting(setting):
    name, raw = setting
    with pytest.raises(ValueError) as info:
        build_config("dilution", overrides={name: raw})
    message = str(info.value)
    assert _names(message, name), (name, raw, message)
    assert len(message.splitlines()) == 1, message


@settings(max_examples=60, **SETTINGS)
@given(unknown_key, st.one_of(st.text(max_size=10), st.integers()), st.sampled_from([None, *PRESETS]))
def test_unknown_settings_are_named(key, value, preset):
    with pytest.raises(ValueError) as info:
        build_config("dilution", preset=preset, overrides={key: value})
    message = str(info.value)
    assert _names(message, key) and "not a setting" in message, message
    assert len(message.splitlines()) == 1, message


def test_every_setting_has_bad_values():
    # A setting added to the config without a strategy here would go untested.
    for name in FIELDS:
        bad_value(name)


# --- a data folder with one real run in its store ------------------------------------------------


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root``: a file's sha256, a folder, or a link's target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            key = str(p.relative_to(root))
            if p.is_symlink():
                out[key] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[key] = "dir"
            else:
                out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(root, home, run_id, snapshot of root): root holds the data folder and a folder beside it."""
    from finished_run import run_in_process
    from store import ingest

    root = tmp_path_factory.mktemp("malformed")
    home = root / "home"
    (root / "outside").mkdir()
    (root / "outside" / "keep.txt").write_text("not to be touched\n")
    run_id = run_in_process(home, "dilution", TINY)
    report = ingest(home=home)
    assert report["errors"] == [] and report["results"] == 1, report
    exports = home / "exports"
    exports.mkdir()
    (exports / "existing.tex").write_text("an earlier export\n")
    (exports / "link").symlink_to(root / "outside", target_is_directory=True)
    assert (home / "emalab.duckdb").is_file()
    return root, home, run_id, _snapshot(root)


@pytest.fixture(autouse=True)
def _home_env(_isolated_home, monkeypatch, request):
    # After the suite-wide isolation fixture: the commands here see the module's data folder.
    if "world" in request.fixturenames:
        monkeypatch.setenv("EMALAB_HOME", str(request.getfixturevalue("world")[1]))


def _refused(argv: list[str], world) -> str:
    root, _, _, before = world
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)  # a SystemExit or any other exception fails the test
    text = err.getvalue()
    assert rc == 2, (argv, rc, text, out.getvalue())
    assert out.getvalue() == "", (argv, out.getvalue())
    assert text.startswith("emalab: error: ") and text.endswith("\n"), (argv, text)
    assert len(text.splitlines()) == 1 and "Traceback" not in text, (argv, text)
    assert _snapshot(root) == before, argv
    return text


# --- bad command lines ---------------------------------------------------------------------------

COMMANDS = {"run", "jobs", "export", "store", "bench"}
# Every table the CLI exports (the studies register theirs when the store is imported): a "wrong" table
# name must be none of them.  Hypothesis also draws string constants from the modules loaded, so after
# the boundary study's are, "boundary_dev_curve" is a likely draw, and a real table.
TABLES = sorted(EXPORT_TABLES)
# A token argparse takes as a value or a positional: not an option, not the help flag.
plain = st.text(min_size=1, max_size=24).filter(lambda t: not t.startswith("-"))
unknown_option = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).map(lambda s: "--zz" + s)
not_an_int = st.one_of(plain, st.sampled_from(["1.5", "1e3", "0x10", "", " ", "nan", "--", "1 2"])).filter(
    lambda t: not _int_parses(t))
json_flag = st.sampled_from([[], ["--json"]])

missing = st.sampled_from([
    [], ["run"], ["jobs"], ["store"], ["bench"], ["export"], ["export", "--table", "runs"],
    ["export", "--format", "csv"], ["export", "--table"], ["export", "--table", "runs", "--format"],
    ["export", "--table", "runs", "--format", "csv", "--out"], ["jobs", "show"], ["jobs", "cancel"],
    ["jobs", "resume"], ["jobs", "logs"], ["jobs", "logs", "x", "--tail"], ["run", "dilution", "--preset"],
    ["run", "dilution", "--seed"], ["run", "dilution", "--set"], ["run", "--preset", "quick"],
    ["--json"], ["--zz"],
])


@st.composite
def bad_argv(draw, run_id: str) -> list[str]:
    kind = draw(st.sampled_from(["command", "missing", "choice", "int", "set", "extra", "run_id", "option"]))
    if kind == "command":
        argv = [draw(plain.filter(lambda t: t not in COMMANDS))] + draw(st.lists(plain, max_size=3))
    elif kind == "missing":
        argv = list(draw(missing))
    elif kind == "choice":
        argv = draw(st.sampled_from([
            lambda t: ["run", t],
            lambda t: ["run", "dilution", "--preset", t],
            lambda t: ["jobs", t],
            lambda t: ["store", t],
            lambda t: ["bench", t],
            lambda t: ["export", "--table", t, "--format", "csv"],
            lambda t: ["export", "--table", "runs", "--format", t],
        ]))(draw(plain.filter(lambda t: t not in {*REGISTRY, *PRESETS, "list", "show", "cancel", "resume", "logs",
                                                   "migrate", "check", *cli.BENCHES, *TABLES, "csv",
                                                   "latex", "markdown"})))
    elif kind == "int":
        argv = draw(st.sampled_from([
            lambda t: ["run", "dilution", "--seed", t],
            lambda t: ["run", "dilution", "--slots", t],
            lambda t: ["jobs", "list", "--tail", t],
            lambda t: ["jobs", "list", "--slots", t],
        ]))(draw(not_an_int))
        if draw(st.booleans()):  # a number, but out of range
            argv = draw(st.sampled_from([
                ["run", "dilution", "--seed", str(draw(st.one_of(st.integers(max_value=-1),
                                                                 st.integers(min_value=2**32))))],
                ["run", "dilution", "--slots", str(draw(st.integers(max_value=0)))],
                ["jobs", "logs", run_id, "--tail", str(draw(st.integers(max_value=-1)))],
                ["jobs", "show", run_id, "--slots", str(draw(st.integers(max_value=0)))],
            ]))
    elif kind == "set":
        choice = draw(st.sampled_from(["bad", "unknown", "no_equals"]))
        if choice == "bad":
            name, raw = draw(bad_setting)
            pair = f"{name}={raw}"
        elif choice == "unknown":
            pair = f"{draw(unknown_key)}={draw(st.text(max_size=8))}"
        else:
            pair = draw(st.text(max_size=20).filter(lambda s: "=" not in s or not s.partition("=")[0].strip()))
        good = draw(st.lists(st.sampled_from(["vocab=8", "steps=40", "alphas=0.5,0.1"]), max_size=2))
        sets = [a for p in [*good, pair] for a in ("--set", p)]
        preset = draw(st.sampled_from([[], ["--preset", "quick"]]))
        argv = ["run", "dilution", *preset, *sets, *draw(st.sampled_from([[], ["--background"]]))]
    elif kind == "extra":  # a stray word after a complete command
        argv = draw(st.sampled_from([["store", "check"], ["store", "migrate"], ["jobs", "list"], ["bench", "scan"],
                                     ["run", "dilution"], ["export", "--table", "runs", "--format", "csv"]]))
        argv = argv + [draw(plain)]
    elif kind == "run_id":
        bad_id = draw(st.one_of(
            plain.filter(lambda t: t != run_id),
            st.sampled_from(["..", ".", ".hidden", "a/b", "../runs", "/etc/passwd", "x\x00y", "\\", "a" * 300,
                             run_id + "x", run_id[:-1], run_id.upper()]),
        ))
        argv = draw(st.sampled_from([
            ["jobs", "show", bad_id], ["jobs", "cancel", bad_id], ["jobs", "resume", bad_id], ["jobs", "logs", bad_id],
            ["export", "--table", "dilution_accuracy", "--format", "latex", "--runs", run_id, bad_id],
        ]))
    else:  # an option no command has, before or after a valid command
        opt = draw(unknown_option)
        argv = draw(st.sampled_from([
            [opt, "store", "check"], ["store", "check", opt], ["jobs", "list", opt], ["run", "dilution", opt],
            ["export", "--table", "runs", "--format", "csv", opt],
        ]))
    return argv + draw(json_flag)


@settings(max_examples=250, **SETTINGS)
@given(st.data())
def test_bad_command_lines_are_refused_and_change_nothing(world, data):
    argv = data.draw(bad_argv(world[2]), label="argv")
    _refused(argv, world)


def test_a_real_run_is_not_refused(world):
    # The fixture's data folder works: the refusals above are not a broken setup.
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli.main(["jobs", "show", world[2], "--json"]) == 0, err.getvalue()
    assert world[2] in out.getvalue()


# --- export targets outside the export folder ----------------------------------------------------

name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=20).filter(
    lambda s: s not in (".", "..") and not s.startswith("-"))


@st.composite
def escaping_out(draw, root: Path) -> str:
    kind = draw(st.sampled_from(["dotdot", "absolute", "link", "long", "nul", "empty", "under_a_file"]))
    n = draw(name)
    if kind == "dotdot":
        down = draw(st.integers(0, 2))
        return "sub/" * down + "../" * (down + draw(st.integers(1, 3))) + n
    if kind == "absolute":
        base = draw(st.sampled_from([root / "outside", root, root / "home", root / "home" / "runs",
                                     root / "home" / "exports" / ".." / "x"]))
        return str(base / n)
    if kind == "link":
        return "link/" + n
    if kind == "long":
        long = draw(st.sampled_from(["a", "é", "x-"])) * draw(st.integers(101, 200))
        long = long if len(long.encode()) > 200 else long * 2
        return draw(st.sampled_from(["", "sub/", "../"])) + long + draw(st.sampled_from(["", ".tex"]))
    if kind == "nul":
        cut = draw(st.integers(0, len(n)))
        return n[:cut] + "\x00" + n[cut:]
    if kind == "empty":
        return ""
    return "existing.tex/" + n


@settings(max_examples=120, **SETTINGS)
@given(st.data())
def test_export_targets_outside_the_folder_are_refused(world, data):
    root, _, run_id, _ = world
    out = data.draw(escaping_out(root), label="out")
    table = data.draw(st.sampled_from(["dilution_accuracy", "runs", "metrics_final"]), label="table")
    fmt = data.draw(st.sampled_from(["csv", "latex", "markdown"]), label="format")
    extra = data.draw(st.sampled_from([[], ["--json"], ["--runs", run_id]]), label="extra")
    grouped = ["--grouped"] if table != "runs" and data.draw(st.booleans(), label="grouped") else []
    text = _refused(["export", "--table", table, "--format", fmt, "--out", out, *grouped, *extra], world)
    assert text.startswith("emalab: error: --out"), text


def test_a_good_export_target_is_written(world, tmp_path, monkeypatch):
    # The same command with an ordinary name writes its file: the refusals are about the names.
    # Run on a copy, so the module's folder stays as the tests above expect it.
    import shutil

    root, home, run_id, _ = world
    copy = tmp_path / "home"
    shutil.copytree(home, copy, symlinks=True)
    monkeypatch.setenv("EMALAB_HOME", str(copy))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["export", "--table", "dilution_accuracy", "--format", "latex", "--out", "sub/ok", "--runs",
                       run_id])
    assert rc == 0, err.getvalue()
    written = copy / "exports" / "sub" / "ok.tex"
    assert out.getvalue().strip() == str(written) and "\\toprule" in written.read_text(encoding="utf-8")


# --- damaged files: one line naming the file, a non-zero exit, nothing changed -----------------------


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)  # a SystemExit or any other exception fails the test
    return rc, out.getvalue(), err.getvalue()


def _one_line_failure(argv: list[str], *names: str) -> str:
    rc, out, err = _main(argv)
    assert rc == 1 and out == "", (argv, rc, out, err)
    assert err.startswith("emalab: ") and len(err.splitlines()) == 1 and "Traceback" not in err, (argv, err)
    for name in names:
        assert name in err, (argv, name, err)
    return err


@pytest.fixture
def copy_home(world, tmp_path, monkeypatch):
    """A copy of the module's data folder (one done run, ingested) that a test may damage."""
    import shutil

    copy = tmp_path / "home"
    shutil.copytree(world[1], copy, symlinks=True)
    monkeypatch.setenv("EMALAB_HOME", str(copy))
    return copy


def test_a_store_cut_short_is_refused_and_left_as_it_is(copy_home):
    store = copy_home / "emalab.duckdb"
    with open(store, "r+b") as fh:
        fh.truncate(store.stat().st_size // 2)
    before = _snapshot(copy_home)
    for argv in (["export", "--table", "runs", "--format", "csv"], ["store", "check"], ["store", "migrate"],
                 ["store", "migrate", "--json"]):
        err = _one_line_failure(argv, str(store), "damaged")
        assert _snapshot(copy_home) == before, (argv, err)
    rc, out, _ = _main(["store", "check", "--json"])  # the report, saying so
    assert rc == 1 and "damaged" in json.loads(out)["error"]
    assert _snapshot(copy_home) == before


def test_a_store_cut_after_this_process_wrote_it_is_still_refused(copy_home):
    # The process remembers the store it left whole, to skip measuring it on every page load; a
    # file cut since then has another size, and is measured (and refused) again.
    from ema_core.rundir import RunDir
    from store import DamagedStoreError, ingest

    store = copy_home / "emalab.duckdb"
    RunDir.for_id("dilution-late-s0", copy_home).create("dilution", {"steps": 1}, 0)
    ingest(home=copy_home)  # a write: the process now knows this file as whole
    with open(store, "r+b") as fh:
        fh.truncate(store.stat().st_size // 2)
    RunDir.for_id("dilution-later-s0", copy_home).create("dilution", {"steps": 2}, 0)
    with pytest.raises(DamagedStoreError, match="damaged"):
        ingest(home=copy_home)


def test_a_run_with_a_damaged_config_is_listed_as_damaged_and_hides_no_other(world, copy_home):
    import shutil

    from jobs.runner import LocalRunner

    good = world[2]
    bad = good[:-1] + "9"  # another run folder beside it
    shutil.copytree(copy_home / "runs" / good, copy_home / "runs" / bad)
    config = copy_home / "runs" / bad / "config.json"
    config.write_text('{"run_id": "' + bad + '", "kind": ')
    before = _snapshot(copy_home)

    rows = {r["run_id"]: r for r in LocalRunner(home=copy_home).list()}
    assert rows[good]["state"] == "done"
    assert rows[bad]["state"] == "damaged" and str(config) in rows[bad]["message"], rows[bad]
    assert "not JSON" in rows[bad]["message"] and "\n" not in rows[bad]["message"]

    rc, out, err = _main(["jobs", "list", "--json"])
    assert rc == 0, err
    listed = {r["run_id"]: r for r in json.loads(out)["jobs"]}
    assert listed[good]["state"] == "done" and listed[bad]["state"] == "damaged"
    rc, out, err = _main(["jobs", "list"])
    assert rc == 0 and good in out and bad in out and "damaged" in out, (out, err)
    _one_line_failure(["jobs", "show", bad], str(config))
    assert _snapshot(copy_home) == before


@pytest.mark.parametrize("content, problem", [
    (b'{"summary": {"x": 1}, "tables": ', "not JSON"),
    (b'[{"summary": {"x": 1}}]', "not a JSON object"),
    (bytes(range(128, 256)) * 4, "not text"),
    (b"", "empty"),
    (b'{"summary": 5, "tables": {}}', "its 'summary' is not an object but a number"),
    (b'{"summary": ["x", 1], "tables": {}}', "its 'summary' is not an object but a list"),
])
def test_a_damaged_result_is_said_and_keeps_the_stored_summary(world, copy_home, content, problem):
    from store import ingest, open_store

    run_id = world[2]
    result = copy_home / "runs" / run_id / "result.json"
    with open_store(home=copy_home) as conn:
        (summary,) = conn.execute("SELECT summary FROM runs WHERE run_id = ?", [run_id]).fetchone()
    assert summary is not None
    result.write_bytes(content)
    before = _snapshot(copy_home)
    _one_line_failure(["jobs", "show", run_id], str(result), problem)
    assert _snapshot(copy_home) == before

    report = ingest(home=copy_home)
    assert [e["run_id"] for e in report["errors"]] == [run_id], report
    assert str(result) in report["errors"][0]["error"] and problem in report["errors"][0]["error"]
    with open_store(home=copy_home) as conn:
        status, kept, message = conn.execute("SELECT status, summary, message FROM runs WHERE run_id = ?",
                                             [run_id]).fetchone()
    assert status == "done" and kept == summary  # the last good summary, not NULL
    assert message.startswith("damaged: ") and str(result) in message


def test_resume_passes_over_a_damaged_newest_checkpoint(tmp_path, monkeypatch):
    # Two rates and "all" are three decoders: checkpoints at steps 20, 40, ..., the newest two kept.
    from ema_core.rundir import RunDir
    from jobs.runner import LocalRunner

    home = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(home))
    runner = LocalRunner(home=home, slots=1)
    try:
        run_id = runner.submit("dilution", {**TINY, "alphas": (0.5, 0.1)})
        assert runner.wait(run_id, timeout=600) == "done", runner.logs(run_id)
        rd = RunDir.for_id(run_id, home)
        whole = rd.read_result()
        (older, _), (newest_step, newest) = rd.checkpoints()[-2:]
        # As if the worker had died after its last checkpoint, and that checkpoint had been cut.
        rd.result_path.unlink()
        rd.write_status(state="crashed", message="worker process died")
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
        rc, out, err = _main(["jobs", "resume", run_id])
        assert rc == 0, err
        assert runner.wait(run_id, timeout=600) == "done", runner.logs(run_id)
    finally:
        runner.close()
    resumed = rd.read_result()
    assert resumed["tables"] == whole["tables"]  # ==, not approximately
    assert {k: v for k, v in resumed["summary"].items() if k != "seconds"} == \
        {k: v for k, v in whole["summary"].items() if k != "seconds"}
    assert f"resuming from checkpoint step {older}" in runner.logs(run_id) and newest.name in runner.logs(run_id)
    notes = [e for e in rd.read_events()[0] if e.get("message")]
    assert len(notes) == 1 and notes[0]["step"] == older and newest.name in notes[0]["message"], notes
    assert older < newest_step


def test_settings_that_cannot_work_are_refused_before_anything_is_written(world):
    text = _refused(["run", "content", "--preset", "quick", "--set", "tokenizer=/missing/tokenizer.json"], world)
    assert text.startswith("emalab: error: data.tokenizer:") and "/missing/tokenizer.json" in text, text
    text = _refused(["run", "content", "--preset", "quick", "--set", f"tokenizer={world[0] / 'outside'}"], world)
    assert text.startswith("emalab: error: data.tokenizer:"), text  # a folder without a tokenizer.json


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a CUDA device")
def test_a_cuda_device_that_is_not_there_is_refused(world):
    kinds = [kind for kind, exp in REGISTRY.items() if "device" in exp.config_cls.model_fields]
    assert kinds  # lm has one; any other kind that gains one is checked too
    for kind in kinds:
        text = _refused(["run", kind, "--set", "device=cuda"], world)
        # named among the config's errors (lm_eval also says that no run was named)
        assert text.startswith("emalab: error:") and "device: no CUDA device is visible" in text, text


@pytest.mark.parametrize("shape", [(0, 5, 3), (2, 5, 0), (0, 5, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("with_state", [False, True])
def test_empty_batches_and_channels_scan_to_empty_traces(shape, dtype, with_state):
    import numpy as np
    import torch

    from ema_core.scan import ema_scan

    alphas = [0.5, 0.1]
    B, T, D = shape
    x = np.zeros(shape, dtype)
    h0 = np.zeros((B, len(alphas), D), dtype) if with_state else None
    reset = np.zeros((B, T), bool) if with_state else None
    got = {}
    for backend in ("reference", "numba", "torch"):
        traces, h_last = ema_scan(x, alphas, h0, reset, backend=backend)
        assert tuple(traces.shape) == (B, T, len(alphas), D), backend
        assert tuple(h_last.shape) == (B, len(alphas), D), backend
        got[backend] = (traces, h_last)
    assert got["numba"][0].dtype == got["numba"][1].dtype == np.dtype(dtype)
    assert got["torch"][0].dtype == got["torch"][1].dtype == getattr(torch, dtype)
    assert got["reference"][0].dtype == np.float64  # the reference always computes in float64
    xt = torch.zeros(shape, dtype=getattr(torch, dtype), requires_grad=True)  # and gradients still flow
    traces, h_last = ema_scan(xt, alphas, None if h0 is None else torch.from_numpy(h0),
                              None if reset is None else torch.from_numpy(reset))
    (traces.sum() + h_last.sum()).backward()
    assert xt.grad is not None and xt.grad.shape == xt.shape
