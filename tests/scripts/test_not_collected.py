"""A reproduction whose collection fails (the disk fills while runs.csv is written) is "not
collected": ``results/`` keeps its earlier collection whole and no figure script runs."""

from scripts import collect, reproduce
from tests.experiments.kit.test_results import _write_run
from tests.faults import files_under


def test_a_collection_that_fails_leaves_results_whole_and_draws_no_figure(tmp_path, monkeypatch):
    from experiments.kit import results

    r = reproduce.REPRODUCTIONS["reproduce-mnist"]
    runner = reproduce.Runner([r], tmp_path / "runs", [], 1, 1, False, False, tmp_path)
    for seed, (setup, acc) in enumerate([("baseline", 0.5), ("bn", 0.6)]):
        _write_run(runner.folder(r) / setup, setup, seed, acc, acc)
    monkeypatch.chdir(tmp_path)  # the runner's home: results/ is under it
    collect.main(["mnist", str(runner.folder(r)), "--out", f"results/{r.collect.out}"])
    before = files_under(tmp_path / "results")
    ran = []

    def run(cmd, log=None, cwd=None):  # each step as its own process would end
        ran.append(cmd[2])
        if cmd[2] != "scripts.collect":
            return 0
        try:
            collect.main(cmd[3:])
        except SystemExit as e:
            return 1 if e.code else 0
        except Exception:  # a traceback
            return 1
        return 0

    write = results.write_runs_csv

    def half_then_full(path, *args, **kwargs):
        write(path, *args, **kwargs)
        path.write_bytes(path.read_bytes()[:100])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reproduce, "_run", run)
    monkeypatch.setattr(results, "write_runs_csv", half_then_full)
    runner.collect(r)
    assert ran == ["scripts.collect"] and r.name in runner.failed  # no figure script ran
    assert files_under(tmp_path / "results") == before
