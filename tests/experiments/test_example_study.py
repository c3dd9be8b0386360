"""The README's "Adding a study" example is a real study: its module, its config folder and its
registry entry (``example_study/``), shown in the README word for word. Put into a copy of the
repository, that is all it takes for the study to train (``bn-study mystudy`` too), to be
reproduced and collected by ``scripts.reproduce``, to be smoke-tested by ``make smoke``, and to
appear in ``make help``, ``reproduce-all``, the report, ``results/README.md`` and the claims table."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.idx_files import make_dataset

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).parent / "example_study"
FILES = sorted(p.relative_to(EXAMPLE) for p in EXAMPLE.rglob("*") if p.is_file())


def _entry() -> str:
    """The registry entry's ``Study(...)``, as the README shows it."""
    text = (EXAMPLE / "registry_entry.py").read_text()
    return text[text.index("Study(\n") :].rstrip("\n")


def test_the_readme_shows_every_file_of_the_example_word_for_word():
    readme = (REPO / "README.md").read_text()
    for path in FILES:
        if path.name == "registry_entry.py":
            assert _entry() in readme
        else:
            assert (EXAMPLE / path).read_text().strip("\n") in readme, path
    assert {p.parts[0] for p in FILES} == {"experiments", "configs", "registry_entry.py"}


def _repo_with_the_example(tmp_path: Path) -> Path:
    """A copy of the code (not results/ or data/) with the example's files and registry entry."""
    copy = tmp_path / "repo"
    for name in ("bn", "experiments", "configs", "scripts", "hydra_plugins", "Makefile"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, copy / name)
    for path in FILES:
        if path.name != "registry_entry.py":
            (copy / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(EXAMPLE / path, copy / path)
    registry = copy / "experiments" / "studies.py"
    text = registry.read_text()
    start = text.index("STUDIES: tuple[Study, ...] = (\n") + len("STUDIES: tuple[Study, ...] = (\n")
    entry = "\n".join("    " + line if line else line for line in _entry().splitlines())
    registry.write_text(text[:start] + entry + ",\n" + text[start:])
    shutil.copytree(REPO / "results", copy / "results")
    return copy


def _run(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "WANDB_MODE": "disabled"}
    return subprocess.run(args, cwd=copy, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_example_study_is_everywhere_by_registration_alone(tmp_path):
    copy = _repo_with_the_example(tmp_path)
    data = tmp_path / "data"
    make_dataset(data)
    quick = ["debug=quick", f"data.root={data}", "data.download=false", "data.verify=false"]
    py = sys.executable

    one = _run(copy, py, "-m", "scripts.study", "mystudy", "setup=brn32", *quick,
               f"hydra.run.dir={tmp_path / 'one'}")  # fmt: skip
    assert one.returncode == 0, one.stderr[-2000:]
    assert json.loads((tmp_path / "one" / "summary.json").read_text())["setup"] == "brn32"

    smoked = _run(copy, py, "-m", "scripts.smoke", "--study", "mystudy", "--data-root", str(data),
                  "--no-verify", "--out", str(tmp_path / "smoke"))  # fmt: skip
    assert smoked.returncode == 0, smoked.stdout[-2000:] + smoked.stderr[-2000:]
    assert (tmp_path / "smoke" / "results" / "mystudy" / "summary.json").exists()
    listed = _run(copy, py, "-c", "from scripts.smoke import JOBS; print([j.study for j in JOBS])")
    assert "'mystudy'" in listed.stdout, listed.stderr

    wrong = _run(copy, py, "-m", "experiments.mystudy", "setup=mech_bn", *quick)
    assert (
        "setup=mech_bn is not a setup of mystudy (a setup of mechanism); its setups: bn32, brn32"
        in wrong.stderr
    )

    done = _run(copy, py, "-m", "scripts.reproduce", "reproduce-mystudy", "--out",
                str(tmp_path / "runs"), *quick)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"^\[2/2\] reproduce-mystudy ", done.stdout, re.M)
    summary = json.loads((copy / "results" / "mystudy" / "summary.json").read_text())
    assert list(summary["setups"]) == ["bn32", "brn32"]
    assert summary["setups"]["brn32"]["seeds"] == [0, 1]

    shown = _run(copy, "make", "--no-print-directory", "help").stdout
    assert re.search(r"^  reproduce-mystudy +BN and Batch Renorm, 2 seeds", shown, re.M)
    everything = _run(copy, py, "-m", "scripts.reproduce", "reproduce-all", "--dry-run").stdout
    assert "reproduce-mystudy" in everything

    assert _run(copy, py, "-m", "scripts.report").returncode == 0
    page = (copy / "results" / "report.html").read_text()
    assert 'id="mystudy"' in page and "My study: BN and Batch Renorm on the small conv net" in page

    assert _run(copy, py, "-m", "scripts.results_readme").returncode == 0
    documented = (copy / "results" / "README.md").read_text()
    assert "My study: BN and Batch Renorm on the small conv net" in documented

    assert _run(copy, py, "-m", "scripts.claims").returncode == 0
    claims = (copy / "results" / "CLAIMS.md").read_text()
    assert re.search(
        r"^\| My study: BN and Batch Renorm on the small conv net \| .*none yet", claims, re.M
    )
