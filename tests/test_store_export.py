"""Exports: the three formats, grouped cells, and files only ever inside the export folder."""
import errno
import io
import os

import pandas as pd
import pytest

from jobs.rundir import RunDir, StorageError, run_id_for
from store import export
from store.export import EXPORT_TABLES, export_table, exports_dir, mean_std, render_table
from store.ingest import ingest


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("EMALAB_HOME", str(h))
    return h


@pytest.fixture
def runs(home):
    ids = []
    for seed, (subj, obj) in enumerate([(0.8, 0.6), (0.9, 0.7)]):
        rd = RunDir.for_id(run_id_for("probe", {"feature_set": "traces_a"}, seed))
        rd.create("probe", {"feature_set": "traces_a"}, seed)
        rd.append_events([{"seq": 0, "step": 1, "metrics": {"loss_total": 1.0 + seed}}])
        rd.write_status(state="done", started="2026-01-01T00:00:00+00:00")
        rd.write_result({"tables": {"probe_accuracy": [
            {"role": "subject", "feature_set": "traces_a", "split": "test", "accuracy": subj},
            {"role": "object", "feature_set": "traces_a", "split": "test", "accuracy": obj}]}})
        ids.append(rd.run_id)
    ingest()
    return ids


def files_under(folder):
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_csv_parses_back(runs):
    path = export_table("probe_accuracy", "csv")
    assert path == exports_dir() / "probe_accuracy.csv"
    df = pd.read_csv(path)
    assert list(df.columns) == ["run_id", "seed", "role", "feature_set", "split", "accuracy"]
    assert sorted(df["accuracy"]) == [0.6, 0.7, 0.8, 0.9]
    assert path.read_text() == render_table("probe_accuracy", "csv")


def test_latex_is_booktabs_and_escaped(runs):
    path = export_table("probe_accuracy", "latex")
    text = path.read_text(encoding="utf-8")
    assert path.suffix == ".tex"
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}"):
        assert rule in text
    assert r"feature\_set" in text and r"traces\_a" in text


def test_markdown_has_a_header_separator(runs):
    text = export_table("runs", "markdown").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("| run_id | kind | seed | status")
    assert set(lines[1].replace(" ", "")) <= set("|:-") and lines[1].count("|") == lines[0].count("|")
    assert len(lines) == 2 + 2
    assert "NaT" not in text  # missing times are empty cells


def test_grouped_cells_read_mean_plus_minus_std(runs):
    md = export_table("probe_accuracy", "markdown", grouped=True)
    assert md.name == "probe_accuracy-grouped.md"
    text = md.read_text(encoding="utf-8")
    assert "| 0.850 ± 0.071 |" in text and "| 0.650 ± 0.071 |" in text and "| 0,1 |" in text
    tex = render_table("probe_accuracy", "latex", grouped=True)
    assert r"0.850 $\pm$ 0.071" in tex
    # CSV stays numeric: a program reading it wants numbers, not "a ± b" strings.
    df = pd.read_csv(io.StringIO(render_table("probe_accuracy", "csv", grouped=True)))
    assert df.set_index("role").loc["subject", "accuracy_mean"] == pytest.approx(0.85)
    assert df.set_index("role").loc["subject", "n"] == 2


def test_mean_std_text():
    assert mean_std(0.8123, 0.0041) == "0.812 ± 0.004"
    assert mean_std(0.8123, float("nan")) == "0.812"
    assert mean_std(float("nan"), float("nan")) == ""


def test_every_table_exports_in_every_format(runs):
    for name in EXPORT_TABLES:
        for fmt in export.FORMATS:
            path = export_table(name, fmt)
            assert path.exists() and path.parent == exports_dir()


def test_run_selection(runs):
    df = pd.read_csv(export_table("metrics_final", "csv", run_ids=[runs[1]]))
    assert df[["key", "value"]].values.tolist() == [["loss_total", 2.0]]


def test_names_and_subfolders_inside_the_export_folder(runs):
    assert export_table("lm_eval", "csv", out="paper/table2.csv") == exports_dir() / "paper" / "table2.csv"
    assert export_table("lm_eval", "latex", out="table3") == exports_dir() / "table3.tex"
    inside = exports_dir() / "abs.md"
    assert export_table("lm_eval", "markdown", out=str(inside)) == inside
    assert export_table("lm_eval", "csv", out="paper/../t.csv") == exports_dir() / "t.csv"


@pytest.mark.parametrize("bad", ["../x.csv", "../../x.csv", "a/../../x.csv", "/tmp/emalab-escape.csv", ".", ""])
def test_targets_outside_the_export_folder_are_refused(runs, home, bad):
    before = files_under(home.parent)
    with pytest.raises(ValueError, match="out="):
        export_table("probe_accuracy", "csv", out=bad)
    assert files_under(home.parent) == before
    assert not os.path.exists("/tmp/emalab-escape.csv")


def test_symlinks_out_of_the_export_folder_are_refused(runs, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    exports_dir().mkdir(parents=True, exist_ok=True)
    (exports_dir() / "linkdir").symlink_to(outside, target_is_directory=True)
    (exports_dir() / "link.csv").symlink_to(outside / "victim.csv")
    for out in ("linkdir/x.csv", "link.csv"):
        with pytest.raises(ValueError, match="outside the export folder"):
            export_table("probe_accuracy", "csv", out=out)
    assert list(outside.iterdir()) == []


def test_unknown_names_are_refused(runs):
    with pytest.raises(ValueError, match="unknown table 'secrets'"):
        export_table("secrets", "csv")
    with pytest.raises(ValueError, match="unknown format 'xlsx'"):
        export_table("runs", "xlsx")
    with pytest.raises(ValueError, match="cannot be grouped"):
        export_table("runs", "csv", grouped=True)
    assert files_under(exports_dir()) == []


def test_an_export_folder_that_cannot_be_written(runs, home):
    home.mkdir(exist_ok=True)
    exports_dir().write_text("a file where the folder should be")
    with pytest.raises(StorageError, match="cannot be written"):
        export_table("runs", "csv", out="sub/x.csv")
    with pytest.raises(StorageError):
        export_table("runs", "csv")


def test_a_full_disk_leaves_no_partial_file(runs, monkeypatch):
    export_table("runs", "csv")  # an older export that must survive
    old = (exports_dir() / "runs.csv").read_bytes()

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", full)
        with pytest.raises(StorageError, match="full"):
            export_table("runs", "csv")
        with pytest.raises(StorageError, match="full"):
            export_table("lm_eval", "markdown")
    assert [p.name for p in files_under(exports_dir())] == ["runs.csv"]  # no temp files, no new file
    assert (exports_dir() / "runs.csv").read_bytes() == old
