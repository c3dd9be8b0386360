"""A run folder follows no planted link (experiments.kit.runlog, experiments.kit.loop): a symbolic
link under a name a run writes or reads is refused in one line, and what it points at is left
as it was (it was truncated or overwritten before)."""

import os
from pathlib import Path

import pytest
import torch

from experiments.kit.errors import UnsafeFile
from experiments.kit.runlog import (
    RunDirLock,
    RunLog,
    _wandb_run,
    load_checkpoint,
    read_metrics,
    save_checkpoint,
    write_json,
    write_settings,
)
from tests.experiments.kit.test_loop import _cfg, _train

VICTIM = "a file of someone else's\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text(VICTIM)
    return path


def _plant(run: Path, name: str, target: Path) -> Path:
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    (run / name).symlink_to(target)
    return run / name


def _refused(path: Path):
    """The one-line refusal naming ``path`` (a ConfigError: a study reports it in one line)."""
    return pytest.raises(
        UnsafeFile, match=rf"^{path} is a symbolic link or not a plain file[^\n]*$"
    )


WRITES = {
    ".lock": lambda run: RunDirLock(run),
    "metrics.tmp": lambda run: RunLog(run, wandb_kwargs={}, mode="disabled"),
    "metrics.csv": lambda run: RunLog(run, wandb_kwargs={}, mode="disabled"),
    "summary.tmp": lambda run: write_json(run / "summary.json", {"test_acc": 0.5}),
    "summary.json": lambda run: write_json(run / "summary.json", {"test_acc": 0.5}),
    "checkpoint.tmp": lambda run: save_checkpoint(run / "checkpoint.pt", {"step": 1}),
    "checkpoint.pt": lambda run: save_checkpoint(run / "checkpoint.pt", {"step": 1}),
    ".hydra/config.tmp": lambda run: write_settings(run / ".hydra", _cfg()),
    ".hydra/config.yaml": lambda run: write_settings(run / ".hydra", _cfg()),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_a_link_under_a_name_a_run_writes_is_refused_not_followed(tmp_path, victim, name):
    run = tmp_path / "run"
    run.mkdir()
    link = _plant(run, name, victim)
    with _refused(link):
        WRITES[name](run)
    assert victim.read_text() == VICTIM and link.is_symlink()


def test_a_lock_file_linked_by_a_hard_link_is_refused(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    os.link(victim, run / ".lock")
    with _refused(run / ".lock"):
        RunDirLock(run)
    assert victim.read_text() == VICTIM


def test_a_link_under_a_name_a_run_reads_is_refused_not_read(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    torch.save({"step": 3, "model": {}}, elsewhere / "a.pt")  # a checkpoint it would resume from
    (elsewhere / "m.csv").write_text("step,metric,value\n1,test/acc,0.5\n")
    with _refused(_plant(run, "checkpoint.pt", elsewhere / "a.pt")):
        load_checkpoint(run / "checkpoint.pt")
    metrics = _plant(run, "metrics.csv", elsewhere / "m.csv")
    with _refused(metrics):
        read_metrics(metrics)
    with _refused(metrics):
        RunLog(run, wandb_kwargs={}, mode="disabled", resume_step=1)
    assert (elsewhere / "m.csv").read_text() == "step,metric,value\n1,test/acc,0.5\n"


def test_a_linked_wandb_id_file_is_refused_before_wandb_starts(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    with _refused(_plant(run, "wandb_id.txt", victim)):
        _wandb_run(run, "offline", {})
    assert victim.read_text() == VICTIM


@pytest.mark.parametrize("name", ["seed0/summary.tmp", "seed0/metrics.tmp", "checkpoint.tmp"])
def test_the_loop_refuses_a_planted_link_before_it_trains(tmp_path, victim, name):
    spied = []
    link = _plant(tmp_path, name, victim)
    with _refused(link):
        _train(_cfg(), tmp_path, spy=spied.append)
    assert not spied and victim.read_text() == VICTIM  # not a step trained, nothing written
    assert not (tmp_path / "seed0" / "metrics.csv").exists()
    RunDirLock(tmp_path).release()  # the refusal let the run folder go
