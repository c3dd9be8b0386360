"""scripts/smoke.py (make smoke): every study trains, collects and plots end to end into a new
folder, and results/ is left alone."""

from pathlib import Path

import pytest

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
    assert len(list((out / "results" / "figures").glob("*.png"))) >= len(smoke.JOBS)


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
    assert last_started == {
        job.study: f"[{k}/{n}] started {job.study}" for k, job in enumerate(smoke.JOBS, 1)
    }


def test_refuses_an_existing_folder_or_one_inside_results(tmp_path):
    with pytest.raises(SystemExit, match="exists"):
        smoke.main(["--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="inside results/"):
        smoke.main(["--out", str(REPO / "results" / "smoke")])
    assert not (REPO / "results" / "smoke").exists()
