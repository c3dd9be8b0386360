"""scripts/analysis/results.py: a missing results folder is a MissingResult (the only "no
result"); a metric the committed runs never logged is a KeyError (a bug)."""

import json

import pytest

from scripts.analysis import results
from scripts.analysis.stats import SeedMismatch


def test_reader(tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "runs.csv").write_text(
        "setup,seed,step,metric,value\na,0,0,m,1.5\na,0,10,m,2.5\na,1,0,m,3\n"
    )
    (folder / "summary.json").write_text(
        '{"setups": {"a": {"seeds": [0, 1], "test_acc": {"per_seed": [0.9, 0.8]}}}}'
    )
    assert results.series("study", "a", "m", tmp_path) == {0: {0: 1.5, 10: 2.5}, 1: {0: 3.0}}
    assert results.per_seed("study", "a", "test_acc", tmp_path) == {0: 0.9, 1: 0.8}
    with pytest.raises(KeyError, match="never logged"):
        results.series("study", "a", "other", tmp_path)
    with pytest.raises(results.MissingResult):
        results.summary("absent", tmp_path)
    with pytest.raises(results.MissingResult):
        results.rows("study", "absent.csv", tmp_path)


def _study(tmp_path, rows: str, seeds: list[int], diverged: list[bool], name: str = "study"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "runs.csv").write_text("setup,seed,step,metric,value\n" + rows)
    accs = [0.9 - 0.1 * i for i in range(len(seeds))]
    entry = {"seeds": seeds, "diverged": diverged, "test_acc": {"per_seed": accs}}
    (folder / "summary.json").write_text(json.dumps({"setups": {"a": entry}}))


def test_a_row_cut_short_is_bad_results_not_a_traceback(tmp_path):
    _study(tmp_path, "a,0,0,m,1\na,0,10\n", [0], [False], name="torn")  # a row without its value
    with pytest.raises(results.BadResults, match="line 3: not a whole row"):
        results.series("torn", "a", "m", tmp_path)


def test_a_runs_csv_missing_a_seed_of_its_summary_is_refused(tmp_path):
    # a runs.csv cut short (or collected from fewer runs) beside a summary listing more seeds
    _study(tmp_path, "a,0,0,m,1\na,0,10,m,2\n", [0, 1], [False, False])
    with pytest.raises(SeedMismatch, match=r"holds seeds \[0\], its summary.json lists \[0, 1\]"):
        results.series("study", "a", "m", tmp_path)


def test_a_diverged_seed_is_an_error_for_curves_and_chance_for_accuracy(tmp_path):
    _study(tmp_path, "a,0,0,m,1\na,1,0,m,2\n", [0, 1], [False, True])
    with pytest.raises(results.Diverged, match=r"seed\(s\) \[1\] diverged"):
        results.series("study", "a", "m", tmp_path)
    with pytest.raises(results.Diverged):
        results.per_seed("study", "a", "test_acc", tmp_path)
    assert results.per_seed("study", "a", "test_acc", tmp_path, diverged_as=0.1) == {
        0: 0.9,
        1: 0.1,
    }
