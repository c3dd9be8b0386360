"""The question targets of the Makefile, as ``make -n`` prints them: which arms they run, which
they take from ``results/renorm`` (``collect --reuse``), and that those committed runs have the
seeds the questions pair them with."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _dry_run(target: str, *assignments: str) -> str:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", target, "STAMP=t", *assignments],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout


def _setups(commands: str) -> list[str]:
    [setups] = re.findall(r"experiments\.renorm .*?setup=(\S+) 'seed=", commands, re.S)
    return setups.split(",")


@pytest.mark.parametrize(
    "target, new, reused",
    [
        ("question-brn-gradient", ["bn_micro4_rgrad", "brn_micro4_bngrad"], ["bn_micro4", "brn_micro4"]),
        ("question-norm-position", ["bn32_after", "nonorm"], ["bn32"]),
    ],
)  # fmt: skip
def test_reference_arms_are_reused_unless_told_to_run_them(target, new, reused):
    commands = _dry_run(target)
    assert _setups(commands) == new
    assert f"--reuse results/renorm --reuse-setups {','.join(reused)}" in commands
    for assignment in ("QUESTION_REUSE=", "QUESTION_SEEDS=0,1,2"):  # other seeds: run them here
        commands = _dry_run(target, assignment)
        assert _setups(commands) == reused + new
        assert "--reuse" not in commands


def test_the_reused_runs_have_the_questions_seeds():
    seeds = re.search(r"^QUESTION_SEEDS \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    summary = json.loads((ROOT / "results/renorm/fashion_mnist/summary.json").read_text())
    for setup in ("bn32", "bn_micro4", "brn_micro4"):
        assert summary["setups"][setup]["seeds"] == [int(s) for s in seeds.group(1).split(",")]


def test_reproduce_questions_runs_every_question_side_by_side():
    commands = _dry_run("reproduce-questions", "JOBS=2", "PY=echo RAN")
    # make -n runs a recipe line that calls $(MAKE): no such line may run anything else.
    assert not [c for c in commands.splitlines() if c.startswith("RAN")]
    [line] = [c for c in commands.splitlines() if "-j2 JOBS=1" in c]
    for target in (
        "question-mlp", "question-dropout", "question-brn-gradient", "question-norm-position",
        "question-init-scale-small-mnist", "question-init-scale-small-fashion_mnist",
    ):  # fmt: skip
        assert f" {target}" in line
