"""scripts/smoke.py (make smoke): every study of the registry that trains, collects and plots end
to end into a new folder, and results/ is left alone."""

import re
from pathlib import Path

import pytest

from experiments.studies import TRAINING, Reproduction, Study, study
from scripts import smoke
from tests.idx_files import make_dataset

REPO = Path(__file__).resolve().parents[2]


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_every_study_end_to_end_outside_results(tmp_path):
    root = tmp_path / "data"
    make_dataset(root, folder="MNIST")
    make_dataset(root)  # Fashion-MNIST
    before = _snapshot(REPO / "results")
    out = tmp_path / "smoke"
    smoke.main(["--out", str(out), "--data-root", str(root), "--no-verify"])
    assert _snapshot(REPO / "results") == before
    for job in smoke.JOBS:
        assert list((out / "results" / job.out).rglob("runs.csv")), job.study
    plotted = [job for job in smoke.JOBS if job.plots]
    assert len(list((out / "results" / "figures").glob("*.png"))) >= len(plotted)


def test_smoke_runs_every_study_that_trains_as_its_record_says():
    assert [job.study for job in smoke.JOBS] == list(TRAINING)
    renorm = smoke.job(study("renorm"))
    assert renorm.out == "renorm" and renorm.plots == (("plot_renorm",),)
    assert renorm.data == "fashion_mnist" and "setup=bn32,brn_micro4" in renorm.overrides


def test_a_study_without_figures_or_smoke_settings_is_smoked_with_its_defaults():
    reproduce = study("depth").reproductions[0]
    bare = Study("bare", "A bare study", (), reproductions=(reproduce,))
    job = smoke.job(bare)
    assert job.overrides == ("data=mnist",) and job.plots == reproduce.plots
    unplotted = Study(
        "bare",
        "",
        (),
        reproductions=(
            Reproduction(
                "r",
                "h",
                data=("fashion_mnist",),
                stages=reproduce.stages,
                collect=reproduce.collect,
            ),
        ),
    )
    assert smoke.job(unplotted).plots == () and smoke.job(unplotted).data == "fashion_mnist"
    with pytest.raises(SystemExit, match="no reproduction that collects"):
        smoke.job(Study("bare", "", ()))


def test_smoke_lists_the_datasets_of_the_studies_it_runs(capsys):
    smoke.main(["--datasets", "--study", "renorm"])
    assert capsys.readouterr().out.split() == ["fashion_mnist"]
    smoke.main(["--datasets"])
    assert capsys.readouterr().out.split() == ["mnist", "fashion_mnist"]


def test_each_study_says_when_it_starts(tmp_path, monkeypatch, capsys):
    """A study trains for minutes: a line when it starts, before it runs, not only when it ends."""
    said: list[str] = []
    last_started: dict[str, str] = {}

    def run(job, out, data_root, verify):
        said.extend(capsys.readouterr().out.splitlines())
        last_started[job.study] = [line for line in said if " started " in line][-1]
        return 1.0

    monkeypatch.setattr(smoke, "run", run)
    smoke.main(["--out", str(tmp_path / "smoke"), "--jobs", "1"])
    n = len(smoke.JOBS)
    assert {study: line[: line.rindex(" at ")] for study, line in last_started.items()} == {
        job.study: f"[{k}/{n}] started {job.study}" for k, job in enumerate(smoke.JOBS, 1)
    }
    assert all(re.search(r" at \d\d:\d\d:\d\d$", line) for line in last_started.values())


def test_refuses_an_existing_folder_or_one_inside_results(tmp_path):
    with pytest.raises(SystemExit, match="exists"):
        smoke.main(["--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="inside results/"):
        smoke.main(["--out", str(REPO / "results" / "smoke")])
    assert not (REPO / "results" / "smoke").exists()
