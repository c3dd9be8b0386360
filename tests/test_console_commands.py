"""The console commands (research/pyproject.toml): one per training study and the runner, each
the module's ``cli``; Hydra's tab completion through them, from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from experiments.studies import TRAINING

COMMANDS = {ep.name: ep for ep in entry_points(group="console_scripts") if ep.dist.name == "bn-repro-research"}  # fmt: skip


def test_every_training_study_and_the_runner_has_a_command():
    expected = {f"bn-{study}": f"experiments.{study}:cli" for study in TRAINING}
    expected["bn-reproduce"] = "scripts.reproduce:cli"
    assert {name: ep.value for name, ep in COMMANDS.items()} == expected
    for ep in COMMANDS.values():
        assert callable(ep.load())


@pytest.mark.slow
def test_tab_completion_lists_a_study_s_setups_from_any_folder(tmp_path):
    command = Path(sys.executable).parent / "bn-renorm"
    env = {**os.environ, "COMP_LINE": "bn-renorm setup=brn", "COMP_POINT": "19"}
    done = subprocess.run(
        [command, "-sc", "query=bash"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) >= {"setup=brn32", "setup=brn_micro4"}
    assert "setup=bn32" not in done.stdout.split()
    assert not any(tmp_path.iterdir())  # a query writes nothing
