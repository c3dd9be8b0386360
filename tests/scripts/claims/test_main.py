"""``python -m scripts.claims`` refuses results that are not whole: a runs.csv cut short or with a
row of another length, one whose seeds are not its summary's, one lacking a setup's rows. One
line, a nonzero exit, and ``results/CLAIMS.md`` left as it was (it was rewritten from them)."""

import importlib
import json
from pathlib import Path

import pytest

claims_main = importlib.import_module("scripts.claims.__main__")

HEADER = "setup,seed,step,metric,value\r\n"
COMMITTED = "the committed claims table\n"


def write_collection(folder: Path, setups: dict[str, list[int]], **summary) -> Path:
    """A collection as ``scripts.collect`` writes it: every seed of every setup with a test
    accuracy at steps 0 and 500, and a summary listing them."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        f"{setup},{seed},{step},test/acc,{0.1 + step / 1000 + seed / 100}\r\n"
        for setup, seeds in setups.items()
        for seed in seeds
        for step in (0, 500)
    ]
    (folder / "runs.csv").write_text(HEADER + "".join(rows), newline="")
    entries = {
        setup: {
            "seeds": seeds,
            "diverged": [False] * len(seeds),
            "test_acc": {"mean": 0.6, "std": 0.0, "per_seed": [0.6] * len(seeds)},
        }
        for setup, seeds in setups.items()
    }
    (folder / "summary.json").write_text(json.dumps({"steps": 500, **summary, "setups": entries}))
    return folder / "runs.csv"


def _drop(runs: Path, what: str) -> None:
    kept = [line for line in runs.read_bytes().split(b"\r\n") if what.encode() not in line]
    runs.write_bytes(b"\r\n".join(kept))


BROKEN = {
    "cut mid-number": lambda runs: runs.write_bytes(runs.read_bytes()[:-3]),
    "a row cut short": lambda runs: runs.write_bytes(runs.read_bytes() + b"bn,1,900,test/\r\n"),
    "a row too long": lambda runs: runs.write_bytes(runs.read_bytes() + b"bn,1,9,a,1,2\r\n"),
    "a seed lacking": lambda runs: _drop(runs, "bn,1,"),
    "a setup lacking": lambda runs: _drop(runs, "baseline,"),
    "header only": lambda runs: runs.write_text(HEADER, newline=""),
}


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    """A ``results/`` (the working folder's, as ``make claims`` reads it) with the MNIST
    collection and a committed CLAIMS.md."""
    monkeypatch.chdir(tmp_path)
    write_collection(tmp_path / "results/mnist/mnist", {"bn": [0, 1], "baseline": [0, 1]})
    (tmp_path / "results/CLAIMS.md").write_text(COMMITTED)
    return tmp_path / "results"


@pytest.mark.parametrize("damage", list(BROKEN.values()), ids=list(BROKEN))
def test_results_that_are_not_whole_are_refused_and_claims_md_kept(results, damage):
    damage(results / "mnist/mnist/runs.csv")
    with pytest.raises(SystemExit) as e:
        claims_main.main([])
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "mnist/mnist/runs.csv" in message and message.endswith("CLAIMS.md left as it was")
    assert (results / "CLAIMS.md").read_text() == COMMITTED


def test_a_collection_no_claim_reads_is_checked_too(results):
    write_collection(results / "other/study", {"a": [0, 1]})
    _drop(results / "other/study/runs.csv", "a,1,")
    with pytest.raises(SystemExit, match="other/study/runs.csv does not match its summary.json"):
        claims_main.main(["--check"])
    assert (results / "CLAIMS.md").read_text() == COMMITTED
