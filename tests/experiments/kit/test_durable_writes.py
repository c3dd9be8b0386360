"""A run's checkpoint, summary and log survive a power cut (experiments.kit.files.write_whole
with ``sync``, experiments.kit.runlog): each file is on the disk before it is renamed over the
old one, and the rename once it is made, so a resume never loads a torn checkpoint; a write
that fails or is killed part-way leaves the good file in place."""

import os
import stat
from pathlib import Path

import pytest
import torch

from experiments.kit import files
from experiments.kit.runlog import RunLog, load_checkpoint, save_checkpoint, write_json
from tests.experiments.kit.test_loop import _cfg, _train
from tests.faults import fault_at, in_child, killed


def _name(fd: int) -> str:
    """What ``fd`` is open on: a folder as ``<path>/``, a file as its path."""
    path = os.readlink(f"/proc/self/fd/{fd}")
    return path + "/" if stat.S_ISDIR(os.fstat(fd).st_mode) else path


@pytest.fixture
def disk(monkeypatch) -> list[tuple[str, str]]:
    """Every ``os.fsync`` (``("sync", what)``) and ``os.replace`` (``("rename", new name)``), in
    order; they still happen."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name a synced file")
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def seen_fsync(fd: int) -> None:
        events.append(("sync", _name(fd)))
        fsync(fd)

    def seen_replace(src, dst) -> None:
        replace(src, dst)
        events.append(("rename", str(dst)))

    monkeypatch.setattr(os, "fsync", seen_fsync)
    monkeypatch.setattr(os, "replace", seen_replace)
    return events


WRITERS = {
    "checkpoint.pt": lambda run: save_checkpoint(run / "checkpoint.pt", {"step": 1, "model": {}}),
    "summary.json": lambda run: write_json(run / "summary.json", {"test_acc": 0.5}),
    "metrics.csv": lambda run: RunLog(run, wandb_kwargs={}, mode="disabled").close(),
}


@pytest.mark.parametrize("name", WRITERS)
def test_the_file_then_its_rename_reach_the_disk(tmp_path, disk, name):
    run = tmp_path.resolve() / "run"
    run.mkdir()
    WRITERS[name](run)
    temporary = str(run / Path(name).with_suffix(".tmp"))
    assert disk == [("sync", temporary), ("rename", str(run / name)), ("sync", f"{run}/")]


def test_a_checkpoint_comes_after_the_rows_logged_before_it_are_on_the_disk(tmp_path, disk):
    """A power cut after a checkpoint: the log holds every row up to its step, so the resumed
    run's curve has no gap."""
    out = tmp_path.resolve()
    _train(_cfg("seed=[0,1]"), out)
    checkpoints = [i for i, e in enumerate(disk) if e == ("rename", str(out / "checkpoint.pt"))]
    assert len(checkpoints) >= 2
    start = 0
    for at in checkpoints:
        before = disk[start:at]
        for seed in (0, 1):
            assert ("sync", str(out / f"seed{seed}" / "metrics.csv")) in before
        assert before[-1] == ("sync", str(out / "checkpoint.tmp"))
        assert disk[at + 1] == ("sync", f"{out}/")
        start = at + 1


def test_a_torn_or_unsynced_checkpoint_never_replaces_the_good_one(tmp_path, monkeypatch):
    good = {"step": 4, "model": {"w": torch.ones(3)}}
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, good)
    before = path.read_bytes()

    def torn(state, f):
        f.write(b"PK\x03\x04 half a zip")  # what reached the disk before it filled
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    with monkeypatch.context() as m:
        m.setattr(torch, "save", torn)
        with pytest.raises(RuntimeError, match="file write failed"):
            save_checkpoint(path, {"step": 8, "model": {}})
    assert path.read_bytes() == before and not path.with_suffix(".tmp").exists()

    def lost(fd):  # the disk fails to store the bytes written
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", lost)
        with pytest.raises(OSError, match="Input/output error"):
            save_checkpoint(path, {"step": 8, "model": {}})
    assert path.read_bytes() == before and not path.with_suffix(".tmp").exists()

    path.with_suffix(".tmp").write_bytes(b"PK\x03\x04 a kill's leftover")
    assert load_checkpoint(path)["step"] == 4  # what a resume loads: the good one
    save_checkpoint(path, {"step": 8, "model": {}})  # and the next checkpoint writes anew
    assert load_checkpoint(path)["step"] == 8 and not path.with_suffix(".tmp").exists()


def test_a_kill_at_any_point_of_a_checkpoint_leaves_one_that_loads(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"step": 4, "model": {}})
    for k in range(1, 20):
        with fault_at(k, killed):
            status = in_child(lambda: save_checkpoint(path, {"step": 8, "model": {}}))
        assert load_checkpoint(path)["step"] in (4, 8), f"a torn checkpoint after a kill at {k}"
        if status == 0:
            assert load_checkpoint(path)["step"] == 8
            break
        save_checkpoint(path, {"step": 4, "model": {}})
    else:
        pytest.fail("the checkpoint never ran to its end")


def test_a_folder_that_cannot_be_synced_does_not_fail_a_write(tmp_path, monkeypatch):
    """Some file systems refuse to sync a folder: the file itself is whole and synced."""
    fsync = os.fsync

    def files_only(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", files_only)
    files.write_whole(tmp_path / "a.txt", lambda f: f.write("new\n"), sync=True)
    assert (tmp_path / "a.txt").read_text() == "new\n"
