"""The run-folder protocol that workers write and ingest reads."""
import errno
import os

import pytest

from jobs import cli
from ema_core.rundir import RunDir, StorageError, atomic_write, run_id_for
from jobs.runner import LocalRunner


def test_run_ids_come_from_kind_config_and_seed():
    a = run_id_for("dilution", {"vocab": 8, "dim": 4}, 0)
    assert a == run_id_for("dilution", {"dim": 4, "vocab": 8}, 0)  # key order does not matter
    assert a != run_id_for("dilution", {"vocab": 8, "dim": 4}, 1)
    assert a.startswith("dilution-") and a.endswith("-s0")


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden"])
def test_run_ids_are_plain_names(bad):
    with pytest.raises(ValueError, match="run id"):
        RunDir.for_id(bad)


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "status.json"
    atomic_write(target, "old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(StorageError, match="full"):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_an_unwritable_data_folder_refuses_a_job_clearly(tmp_path, monkeypatch, capsys):
    # Root ignores permission bits, so make the data folder impossible: a path under a file.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("EMALAB_HOME", str(blocker / "home"))
    with pytest.raises(StorageError, match="could not write|not writable"):
        LocalRunner(slots=1).submit("dilution", {"vocab": 8, "dim": 8, "max_lag": 2, "n_train": 256,
                                                 "n_test": 128, "steps": 5, "alphas": [0.5]})
    code = cli.main(["run", "dilution", "--preset", "quick", "--background"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith("emalab:"), err
    assert blocker.read_text() == ""


def test_events_tolerate_a_cut_line_and_garbage(tmp_path, monkeypatch):
    monkeypatch.setenv("EMALAB_HOME", str(tmp_path))
    rd = RunDir.for_id("dilution-abc-s0")
    rd.create("dilution", {"x": 1}, 0)
    rd.append_events([{"seq": 0, "step": 0, "metrics": {"loss": 1.0}}])
    with open(rd.events_path, "a") as fh:
        fh.write("not json\n")
        fh.write('{"seq": 1, "step": 1, "metri')  # a worker killed mid-write
    events, offset, bad = rd.read_events()
    assert [e["seq"] for e in events] == [0] and bad == 1
    assert rd.read_events(offset)[0] == []
