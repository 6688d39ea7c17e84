"""A data folder made before the studies had folders of their own still loads, shows and exports.

``tests/data/previous_layout.tar.gz`` was made by the code at commit 98d6b84 (the last before
``ema_core/studies/``), with that commit's own test fixtures, real tiny runs each::

    git worktree add /tmp/old 98d6b84 && cd /tmp/old
    EMALAB_HOME=home python -c "import sys; sys.path.insert(0, 'tests'); from pathlib import Path; \
      from lm_fixture import make_lm_runs; from boundary_fixture import make_boundary_runs; \
      from depth_fixture import make_depth_runs; from structure_fixture import make_structure_runs; \
      h = Path('home'); make_lm_runs(h, specs=('gpt', 'linear', 'softmax_state'), seeds=(0, 1, 2)); \
      make_boundary_runs(h, seeds=(0,)); make_depth_runs(h, seeds=(0,)); make_structure_runs(h, seeds=(0, 1, 2))"

and packed without the kept models (``runs/*/artifacts``, 4 MB a run): the store file (schema 8)
and fourteen run folders, language-model runs of kind ``lm`` among them.  Nothing here regenerates
it: it stands for the files researchers already hold.
"""
from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

import duckdb
import pytest

import store
from jobs.runner import existing_run
from ema_core.studies import STUDIES
from store.scoreboard import scoreboard

sys.path.insert(0, str(Path(__file__).parent))
from apptest import ok, open_page  # noqa: E402

ARCHIVE = Path(__file__).parent / "data" / "previous_layout.tar.gz"
KINDS = {"lm": 9, "boundary": 1, "depth": 1, "structure": 3}


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """The folder as it was packed, unpacked once; each test works on its own copy."""
    out = tmp_path_factory.mktemp("previous")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(out, filter="data")
    return out / "oldpack"


@pytest.fixture
def home(packed, tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(packed, copy)
    monkeypatch.setenv("EMALAB_HOME", str(copy))
    return copy


def _kinds(home: Path) -> dict[str, int]:
    runs = store.list_runs(limit=None, home=home)
    return runs.groupby("kind").size().to_dict()


def _as_packed(home: Path) -> tuple[int, dict[str, int]]:
    """The file's schema version and row counts, read without the store (which would upgrade it)."""
    conn = duckdb.connect(str(store.store_path(home)), read_only=True)
    try:
        version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        tables = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return version, {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        conn.close()


def test_the_older_store_is_migrated_and_keeps_every_run_and_row(home):
    version, before = _as_packed(home)
    assert version == 8 and before["runs"] == sum(KINDS.values())
    report = store.migrate_store(home=home)
    assert report["schema_version"] == store.SCHEMA_VERSION > 8
    after = store.check(home=home)
    assert not after["problems"]
    for table, rows in before.items():  # nothing stored is lost
        if table != "schema_migrations":
            assert after["tables"][table] == rows, table
    assert _kinds(home) == {STUDIES["content"].kind if k == "lm" else k: n for k, n in KINDS.items()}


def test_the_run_folders_ingest_again_into_a_new_store_as_they_were_stored(home):
    stored = store.check(home=home)["tables"]
    store.store_path(home).unlink()
    report = store.ingest(home=home)
    assert not report["errors"], report["errors"]
    again = store.check(home=home)["tables"]
    for table in ("runs", "metrics", "probe_accuracy", "lm_eval", "lm_token_classes", "boundary_accuracy",
                  "depth_results", "depth_weights"):
        assert again[table] == stored[table] > 0, table


def test_every_study_is_judged_on_the_older_runs(home):
    board = {j.study: j for j in scoreboard(home=home)}
    assert set(board) == {name for name, s in STUDIES.items() if s.judges}
    assert board["content"].seeds == board["structure"].seeds == board["boundary"].seeds == (0, 1, 2)
    assert board["depth"].run_ids and board["depth"].scores
    for j in board.values():
        assert j.scores and all(s.study == j.study for s in j.scores)


def test_every_table_of_the_older_runs_exports(home):
    for name in ("probe_accuracy", "lm_eval", "lm_token_classes", "boundary_accuracy", "boundary_recall_state",
                 "depth_results", "depth_weights", "runs", "metrics_final"):
        text = store.render_table(name, "csv", grouped=False, home=home)
        assert text.count("\n") > 1, name
    grouped = store.render_table("lm_eval", "markdown", grouped=True, home=home)
    assert "±" in grouped  # three seeds of one config, as mean ± std


@pytest.mark.parametrize("page", [s.page for s in STUDIES.values() if s.page] + ["pages/jobs.py", "pages/export.py",
                                                                               "pages/overview.py"])
def test_every_page_shows_the_older_runs(home, page):
    at = ok(open_page(page))
    shown = json.dumps([str(x.value) for x in [*at.markdown, *at.caption, *at.subheader]], ensure_ascii=False)
    assert "Traceback" not in shown and at.markdown


def test_a_run_made_under_the_older_kind_name_is_recognised_not_repeated(home):
    run_id = next(r for r in store.list_runs(limit=None, home=home)["run_id"] if r.startswith("lm-"))
    record = json.loads((home / "runs" / run_id / "config.json").read_text(encoding="utf-8"))
    assert record["kind"] == "lm"  # the folder keeps the name it was made under
    # The same settings launched today, by the study's name or the older one, are that run.
    for kind in (STUDIES["content"].kind, "lm"):
        assert existing_run(kind, record["config"], home=home) == (run_id, "done")
