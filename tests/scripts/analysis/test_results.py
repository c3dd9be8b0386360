"""scripts/analysis/results.py: a missing results folder is a MissingResult (the only "no
result"); a metric the committed runs never logged is a KeyError (a bug)."""

import pytest

from scripts.analysis import results


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
