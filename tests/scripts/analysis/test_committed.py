"""scripts/analysis/committed.py: a missing results folder is a MissingResult (the only "no
result"); a metric the committed runs never logged is a KeyError (a bug)."""

import json

import pytest

from scripts.analysis import committed
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
    assert committed.series("study", "a", "m", tmp_path) == {0: {0: 1.5, 10: 2.5}, 1: {0: 3.0}}
    assert committed.per_seed("study", "a", "test_acc", tmp_path) == {0: 0.9, 1: 0.8}
    with pytest.raises(KeyError, match="never logged"):
        committed.series("study", "a", "other", tmp_path)
    with pytest.raises(committed.MissingResult):
        committed.summary("absent", tmp_path)
    with pytest.raises(committed.MissingResult):
        committed.rows("study", "absent.csv", tmp_path)


def _study(tmp_path, rows: str, seeds: list[int], diverged: list[bool], name: str = "study"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "runs.csv").write_text("setup,seed,step,metric,value\n" + rows)
    accs = [0.9 - 0.1 * i for i in range(len(seeds))]
    entry = {"seeds": seeds, "diverged": diverged, "test_acc": {"per_seed": accs}}
    (folder / "summary.json").write_text(json.dumps({"setups": {"a": entry}}))


def test_a_setup_whose_every_seed_diverged_has_no_entry_and_reads_as_diverged(tmp_path):
    # as the collector writes it (experiments.kit.results.per_setup): no values, no key at all
    _study(tmp_path, "a,0,0,m,1\na,1,0,m,1\n", [0, 1], [True, True])
    summary = json.loads((tmp_path / "study" / "summary.json").read_text())
    del summary["setups"]["a"]["test_acc"]
    (tmp_path / "study" / "summary.json").write_text(json.dumps(summary))
    chance = committed.per_seed("study", "a", "test_acc", tmp_path, diverged_as=0.1)
    assert chance == {0: 0.1, 1: 0.1}
    with pytest.raises(committed.Diverged, match=r"seed\(s\) \[0, 1\] diverged"):
        committed.per_seed("study", "a", "test_acc", tmp_path)
    # a seed that did not diverge, and no value of it: a collection to redo
    summary["setups"]["a"]["diverged"] = [True, False]
    (tmp_path / "study" / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(committed.BadResults, match="a has no test_acc per seed"):
        committed.per_seed("study", "a", "test_acc", tmp_path)


def test_a_row_cut_short_is_bad_results_not_a_traceback(tmp_path):
    _study(tmp_path, "a,0,0,m,1\na,0,10\n", [0], [False], name="torn")  # a row without its value
    with pytest.raises(committed.BadResults, match="line 3: not a whole row"):
        committed.series("torn", "a", "m", tmp_path)


def test_a_runs_csv_missing_a_seed_of_its_summary_is_refused(tmp_path):
    # a runs.csv cut short (or collected from fewer runs) beside a summary listing more seeds
    _study(tmp_path, "a,0,0,m,1\na,0,10,m,2\n", [0, 1], [False, False])
    with pytest.raises(committed.BadResults, match=r"runs.csv does not match its summary.json: "):
        committed.series("study", "a", "m", tmp_path)
    with pytest.raises(committed.BadResults, match="does not match"):  # whichever entry is read
        committed.per_seed("study", "a", "test_acc", tmp_path)


def test_a_metric_some_seeds_never_logged_is_a_seed_mismatch(tmp_path):
    _study(tmp_path, "a,0,0,m,1\na,1,0,other,2\n", [0, 1], [False, False])
    with pytest.raises(SeedMismatch, match=r"holds seeds \[0\], its summary.json lists \[0, 1\]"):
        committed.series("study", "a", "m", tmp_path)


# Rows that are not whole: cut short at each of its fields (csv.DictReader gives None for the
# missing ones, so each of these fails the guard's TypeError, not a ValueError: without
# TypeError in the guard they would be tracebacks), rows run together, a field too many.
TORN = {
    "no value": "a,0,10,m\n",
    "no metric": "a,0,10\n",
    "no step": "a,0\n",
    "no seed": "a\n",
    "rows run together": "a,0,10,m,2a,0,20,m,3\n",
    "extra field": "a,0,10,m,2,x\n",
}


@pytest.mark.parametrize("row", list(TORN.values()), ids=list(TORN))
def test_a_row_that_is_not_whole_is_bad_results(tmp_path, row):
    _study(tmp_path, "a,0,0,m,1\n" + row, [0], [False])
    with pytest.raises(committed.BadResults, match=r"runs.csv, line 3: not a whole row"):
        committed.curves("study", tmp_path)


@pytest.mark.parametrize(
    "text, why",
    [
        ("setup,seed,step,metric,value\na,0,0,m,1\na,0,10,m,0.5", "ends in the middle of a row"),
        ("", "is not a runs.csv"),
        ("a,0,0,m,1\n", "is not a runs.csv"),
        ("setup,seed,step,metric,value\n", "no rows of setup\\(s\\) \\['a'\\]"),
    ],
    ids=["cut mid-number", "empty", "no header", "header only"],
)
def test_a_runs_csv_that_is_not_whole_is_bad_results(tmp_path, text, why):
    _study(tmp_path, "", [0], [False])
    (tmp_path / "study" / "runs.csv").write_text(text)
    with pytest.raises(committed.BadResults, match=why):
        committed.curves("study", tmp_path)


def test_a_runs_csv_lacking_a_setup_or_holding_another_is_bad_results(tmp_path):
    folder = tmp_path / "study"
    _study(tmp_path, "a,0,0,m,1\n", [0], [False])
    summary = json.loads((folder / "summary.json").read_text())
    summary["setups"]["b"] = {"seeds": [0], "diverged": [False]}
    (folder / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(committed.BadResults, match=r"no rows of setup\(s\) \['b'\]"):
        committed.series("study", "a", "m", tmp_path)
    _study(tmp_path, "a,0,0,m,1\nz,3,0,m,1\n", [0], [False], name="more")
    with pytest.raises(committed.BadResults, match=r"rows of \(setup, seed\) \[\('z', 3\)\]"):
        committed.curves("more", tmp_path)


def test_a_summary_of_another_study_is_bad_results_not_a_key_error(tmp_path):
    _study(tmp_path, "a,0,0,m,1\n", [0], [False])
    with pytest.raises(
        committed.BadResults, match=r"summary.json has no setup bn \(the summary of"
    ):
        committed.series("study", "bn", "m", tmp_path)
    with pytest.raises(committed.BadResults, match="has no setup bn"):
        committed.per_seed("study", "bn", "test_acc", tmp_path)
    with pytest.raises(committed.BadResults, match="a has no train_acc per seed"):
        committed.per_seed("study", "a", "train_acc", tmp_path)
    (tmp_path / "run").mkdir()  # one run's summary.json, not a collection's
    (tmp_path / "run" / "summary.json").write_text('{"setup": "bn", "seed": 0}')
    with pytest.raises(committed.BadResults, match="is not a collection's summary.json"):
        committed.summary("run", tmp_path)


def test_every_collection_is_checked_and_an_absent_one_is_still_no_result(tmp_path):
    _study(tmp_path, "a,0,0,m,1\n", [0], [False], name="fine")
    committed.check_all(tmp_path)
    with pytest.raises(committed.MissingResult):  # absent: no result yet, not an error
        committed.curves("absent", tmp_path)
    _study(tmp_path, "a,0,0,m,1\n", [0, 1], [False, False], name="short")
    with pytest.raises(committed.BadResults, match="short/runs.csv does not match"):
        committed.check_all(tmp_path)
    (tmp_path / "short" / "runs.csv").unlink()
    with pytest.raises(committed.BadResults, match="short holds a summary.json without its runs"):
        committed.check_all(tmp_path)
    (tmp_path / "short" / "summary.json").unlink()
    (tmp_path / "short" / "runs.csv").write_text("setup,seed,step,metric,value\na,0,0,m,1\n")
    with pytest.raises(committed.BadResults, match="holds a runs.csv without its summary.json"):
        committed.curves("short", tmp_path)


def test_a_diverged_seed_is_an_error_for_curves_and_chance_for_accuracy(tmp_path):
    _study(tmp_path, "a,0,0,m,1\na,1,0,m,2\n", [0, 1], [False, True])
    with pytest.raises(committed.Diverged, match=r"seed\(s\) \[1\] diverged"):
        committed.series("study", "a", "m", tmp_path)
    with pytest.raises(committed.Diverged):
        committed.per_seed("study", "a", "test_acc", tmp_path)
    assert committed.per_seed("study", "a", "test_acc", tmp_path, diverged_as=0.1) == {
        0: 0.9,
        1: 0.1,
    }


def test_a_diverged_seed_without_a_value_is_chance_and_the_others_keep_theirs(tmp_path):
    """The collection lists a per-seed value for the runs that recorded one: a diverged run
    records none, so its seed is missing from the list, which holds the others in order."""
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "runs.csv").write_text("setup,seed,step,metric,value\n" + "".join(f"a,{s},0,m,1\n" for s in range(4)))  # fmt: skip
    entry = {"seeds": [0, 1, 2, 3], "diverged": [True, False, True, False], "test_acc": {"per_seed": [0.8, 0.7]}}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps({"setups": {"a": entry}}))
    got = committed.per_seed("study", "a", "test_acc", tmp_path, diverged_as=0.1)
    assert got == {0: 0.1, 1: 0.8, 2: 0.1, 3: 0.7}
    with pytest.raises(committed.Diverged, match=r"\[0, 2\] diverged"):
        committed.per_seed("study", "a", "test_acc", tmp_path)
    entry["test_acc"]["per_seed"] = [0.8, 0.7, 0.6]  # neither every seed nor the survivors
    (folder / "summary.json").write_text(json.dumps({"setups": {"a": entry}}))
    with pytest.raises(committed.BadResults, match="has no test_acc per seed"):
        committed.per_seed("study", "a", "test_acc", tmp_path, diverged_as=0.1)
