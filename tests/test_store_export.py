"""Exports: the three formats, grouped cells, and files only ever inside the export folder."""
import contextlib
import errno
import io
import json
import os

import pandas as pd
import pytest

from jobs import cli
from ema_core.rundir import RunDir, StorageError, run_id_for
from lm_fixture import make_lm_runs
from store import export
from store.export import EMPTY, EXPORT_TABLES, export_table, exports_dir, mean_std, render_table
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
    assert mean_std(0.015625, 0.0) == "0.016"  # seeds that agree exactly: a constant, not "± 0.000"


def make_run(kind, config, seed, tables, metrics=()):
    rd = RunDir.for_id(run_id_for(kind, config, seed))
    rd.create(kind, config, seed)
    rd.append_events([{"seq": i, "step": 10 * (i + 1), "metrics": m} for i, m in enumerate(metrics)])
    rd.write_status(state="done", started="2026-01-01T00:00:00+00:00")
    rd.write_result({"tables": tables})
    return rd.run_id


@pytest.fixture
def lm_runs(home):
    """SPEN linear and its GPT, two seeds each, as finished jobs leave them (synthetic rows)."""
    return make_lm_runs(home, ("gpt", "linear"), (0, 1), real=False)


def test_lm_eval_rows_say_which_model_they_are(lm_runs):
    df = pd.read_csv(io.StringIO(render_table("lm_eval", "csv")))
    # Each model trained at its own rate chosen on dev (the quick preset's train.lr=auto): the config
    # says auto for both, so no setting differs; the rate each run recorded is on every row.
    assert list(df.columns)[:9] == ["run_id", "seed", "model", "predictor", "attn_input", "size", "corpus",
                                    "params", "lr"]
    assert df["model"].tolist() == ["gpt", "gpt", "spen", "spen"]  # GPT first, as on the Content page
    assert df["lr"].tolist() == [0.003, 0.003, 0.01, 0.01]
    assert set(df["size"]) == {"tiny"} and set(df["corpus"]) == {"austen"} and (df["params"] > 0).all()
    # Grouped, one variant only: nothing differs between the groups, and the row still says what it is.
    spen = [r for r in lm_runs if r in set(df.loc[df["model"] == "spen", "run_id"])]
    g = pd.read_csv(io.StringIO(render_table("lm_eval", "csv", run_ids=spen, grouped=True)))
    assert g[["model", "predictor", "attn_input", "size", "corpus"]].values.tolist() == [
        ["spen", "linear", "state", "tiny", "austen"]]
    md = render_table("lm_eval", "markdown", grouped=True)
    header, rows = md.splitlines()[0], md.splitlines()[2:]
    assert "| model | predictor | attn_input | size | corpus | params | lr |" in header
    assert [r.split(" | ")[2] for r in rows] == ["gpt", "spen"]
    assert all(f"| {int(p):,} |" in md for p in df["params"])  # parameter counts with separators


def test_run_tables_show_the_settings_that_vary(home):
    ids = [make_run("probe", {"width": w, "lr": 0.1}, seed, {"probe_accuracy": [
        {"role": "subject", "feature_set": "traces", "split": "test", "accuracy": acc}]},
        metrics=[{"loss": acc}]) for w, seed, acc in [(8, 0, 0.8), (8, 1, 0.9), (16, 0, 0.95)]]
    ids.append(make_run("dilution", {"alphas": [0.5, 0.1], "vocab": 16}, 0, {"dilution_accuracy": [
        {"feature": "α=0.5", "lag": 1, "accuracy": 0.5, "chance": 0.0625}]}, metrics=[{"loss": 2.0}]))
    ingest()
    probe = pd.read_csv(io.StringIO(render_table("probe_accuracy", "csv")))
    # width tells the probe runs apart (lr does not differ); nothing of the dilution run's config leaks in.
    assert list(probe.columns) == ["run_id", "seed", "width", "role", "feature_set", "split", "accuracy"]
    assert sorted(probe["width"]) == [8, 8, 16]
    final = pd.read_csv(io.StringIO(render_table("metrics_final", "csv")))
    assert list(final.columns) == ["run_id", "seed", "kind", "width", "key", "step", "value"]
    assert final.set_index("run_id").loc[ids[3], "kind"] == "dilution"
    assert pd.isna(final.set_index("run_id").loc[ids[3], "width"])  # not a setting of a dilution run
    # Runs that differ only by seed add nothing: run_id and seed tell them apart.
    assert "width" not in pd.read_csv(io.StringIO(render_table("probe_accuracy", "csv", run_ids=ids[:2]))).columns


@pytest.fixture
def dilution_runs(home):
    rows = {0: [(0, 1.0), (1, 0.25), (2, 0.0625)], 1: [(0, 1.0), (1, 0.3125), (2, 0.125)]}
    ids = [make_run("dilution", {"alphas": [0.5], "vocab": 16}, seed, {"dilution_accuracy": [
        {"feature": "α=0.5", "lag": lag, "accuracy": acc, "chance": 1 / 16} for lag, acc in r]})
        for seed, r in rows.items()]
    ingest()
    return ids


def test_one_number_format_per_column_and_constants_alone(dilution_runs):
    md = render_table("dilution_accuracy", "markdown").splitlines()
    col = md[0].split(" | ").index("accuracy")
    assert sorted(line.split(" | ")[col] for line in md[2:]) == ["0.062", "0.125", "0.250", "0.312", "1.000", "1.000"]
    grouped = render_table("dilution_accuracy", "markdown", grouped=True)
    assert "| 0.281 ± 0.044 |" in grouped and "| 1.000 |" in grouped  # the seeds agree at lag 0
    assert "| 0.0625 |" in grouped and "± 0.0000" not in grouped and "± 0.000 " not in grouped  # chance


def test_latex_has_a_caption_and_a_label(dilution_runs):
    tex = render_table("dilution_accuracy", "latex")
    assert tex.startswith(r"\begin{table}") and tex.rstrip().endswith(r"\end{table}")
    assert r"\label{tab:dilution_accuracy}" in tex
    caption = next(line for line in tex.splitlines() if line.startswith(r"\caption{"))
    assert "Identity decoding accuracy" in caption and "from 2 runs; seeds 0, 1" in caption
    grouped = render_table("dilution_accuracy", "latex", grouped=True)
    assert r"\label{tab:dilution_accuracy_grouped}" in grouped and r"mean $\pm$ std across seeds" in grouped
    assert "from 2 runs; seeds 0, 1" in grouped


def test_an_empty_export_says_it_is_empty(home):
    header = "run_id,seed,model,predictor,attn_input,size,corpus,params,lr,split,loss,ppl,bpb"
    assert render_table("lm_eval", "csv").strip() == header  # CSV: the header alone
    assert render_table("lm_eval", "markdown").rstrip().endswith(f"*{EMPTY}*")
    tex = render_table("lm_eval", "latex", grouped=True)
    assert EMPTY in tex and r"\caption{" in tex and "no runs yet" in tex and r"\label{tab:lm_eval_grouped}" in tex
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["export", "--table", "probe_accuracy", "--format", "csv"])
    assert rc == 0 and out.getvalue().rstrip().endswith(f"({EMPTY})"), (out.getvalue(), err.getvalue())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["export", "--table", "probe_accuracy", "--format", "latex", "--json"])
    report = json.loads(out.getvalue())
    assert rc == 0 and report["rows"] == 0 and report["empty"] is True and EMPTY in err.getvalue()
    assert EMPTY in (exports_dir() / "probe_accuracy.tex").read_text(encoding="utf-8")


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


def test_the_page_preview_takes_the_exports_decimals():
    from ema_core.tables import preview_formats, to_markdown

    frame = pd.DataFrame({"run_id": ["a", "b"], "seed": [0, 12345], "params": [923904, 1117952],
                          "loss": [5.7526, 5.80031], "ppl": [315.0024, 330.396], "tiny": [1e-5, 2e-5]})
    assert preview_formats(frame) == {"params": "localized", "loss": "%.3f", "ppl": "%.1f", "tiny": "%.2e"}
    # the same decimals the downloads write
    assert "330.4" in to_markdown(frame[["ppl"]]) and "5.800" in to_markdown(frame[["loss"]])
