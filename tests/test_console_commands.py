"""The console commands (research/pyproject.toml): ``bn-study NAME``, every study of the registry
as ``python -m experiments.NAME`` runs it, and ``bn-reproduce``, the runner; Hydra's tab completion
through ``bn-study``, from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from experiments.studies import TRAINING
from scripts import study as study_command

COMMANDS = {ep.name: ep for ep in entry_points(group="console_scripts") if ep.dist.name == "bn-repro-research"}  # fmt: skip


def test_one_command_runs_every_study_and_one_the_runner():
    expected = {"bn-study": "scripts.study:cli", "bn-reproduce": "scripts.reproduce:cli"}
    assert {name: ep.value for name, ep in COMMANDS.items()} == expected
    for ep in COMMANDS.values():
        assert callable(ep.load())


def test_bn_study_runs_the_named_study_s_cli_with_the_rest_of_the_line(monkeypatch):
    import experiments.depth

    seen = []
    monkeypatch.setattr(experiments.depth, "cli", lambda: seen.append(sys.argv[1:]))
    monkeypatch.setattr(sys, "argv", ["bn-study", "depth", "seed=3", "-m"])
    study_command.main()
    assert seen == [["seed=3", "-m"]]


def test_bn_study_refuses_a_study_that_is_not_registered(capsys):
    with pytest.raises(SystemExit, match="there is no study nosuch .*mnist"):
        study_command.main(["nosuch"])
    with pytest.raises(SystemExit, match="usage: bn-study NAME"):
        study_command.main([])


def test_completion_of_the_study_s_name_lists_the_studies(monkeypatch, capsys):
    monkeypatch.setenv("COMP_LINE", "bn-study re")
    study_command.main(["-sc", "query=bash"])
    assert capsys.readouterr().out.split() == list(TRAINING)


@pytest.mark.slow
def test_tab_completion_lists_a_study_s_setups_from_any_folder(tmp_path):
    command = Path(sys.executable).parent / "bn-study"
    env = {**os.environ, "COMP_LINE": "bn-study renorm setup=brn", "COMP_POINT": "26"}
    done = subprocess.run(
        [command, "-sc", "query=bash"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) >= {"setup=brn32", "setup=brn_micro4"}
    assert "setup=bn32" not in done.stdout.split()
    installed = subprocess.run(
        [command, "renorm", "-sc", "install=bash"], cwd=tmp_path, capture_output=True, text=True
    )
    assert installed.stdout.rstrip().endswith("hydra_bash_completion bn-study"), installed.stderr
    assert not any(tmp_path.iterdir())  # a query writes nothing
