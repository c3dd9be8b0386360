"""experiments.kit.results on hand-written run directories: runs.csv, the per-setup seed
statistics of summary.json, the sweep table, and ``python -m scripts.collect``."""

import csv
import json
import statistics
from pathlib import Path

import pytest

from experiments.kit.errors import CollectError
from experiments.kit.results import RUN_KEY, Reuse, collect, collect_sweep, find_runs
from experiments.studies import Study

SPEC = Study(
    "fake",
    "A fake study",
    (),
    order=("zeta", "alpha"),  # not alphabetical: the record's order must win
    setup_keys=("norm",),
    stat_keys=("test_acc", "train_acc"),
    summary_keys=("data", "steps"),
    paper={"source": "a paper", "zeta": 0.5},
)
# (directory, setup, seed, test_acc, train_acc): directories in neither the record's nor seed order.
RUNS = [
    ("0", "alpha", 2, 0.7, 0.75),
    ("1", "zeta", 2, 0.9, None),  # a key a run lacks is left out of its setup's statistics
    ("2", "alpha", 1, 0.5, 0.55),
    ("3", "zeta", 0, 0.1, 0.15),
    ("4", "zeta", 1, 0.2, 0.25),
]


def _write_run(folder: Path, setup: str, seed: int, test_acc: float, train_acc, data="mnist"):
    folder.mkdir(parents=True)
    with (folder / "metrics.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "metric", "value"])
        w.writerows([[0, "test/acc", 0.1], [10, "train/loss", seed], [10, "test/acc", test_acc]])
    summary = {
        RUN_KEY: setup, "seed": seed, "data": data, "steps": 10, "norm": f"norm-of-{setup}",
        "diverged": False, "test_acc": test_acc, "train_acc": train_acc, "lr": 0.1 * (seed + 1),
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def sweep(tmp_path) -> Path:
    for name, *run in RUNS:
        _write_run(tmp_path / "sweep" / name, *run)
    return tmp_path / "sweep"


def _csv(path: Path) -> list[list[str]]:
    with path.open() as f:
        return list(csv.reader(f))


def test_runs_csv_is_keyed_by_setup_and_ordered_by_the_spec_then_seed(sweep, tmp_path):
    collect(SPEC, sweep, tmp_path / "out", command="make it")
    header, *rows = _csv(tmp_path / "out" / "runs.csv")
    assert header == ["setup", "seed", "step", "metric", "value"]
    runs = [(setup, seed) for setup, seed, *_ in rows]
    order = [("zeta", "0"), ("zeta", "1"), ("zeta", "2"), ("alpha", "1"), ("alpha", "2")]
    assert list(dict.fromkeys(runs)) == order  # each run's rows together, in this order
    assert len(rows) == 3 * len(RUNS)
    assert rows[:3] == [
        ["zeta", "0", "0", "test/acc", "0.1"],
        ["zeta", "0", "10", "train/loss", "0"],
        ["zeta", "0", "10", "test/acc", "0.1"],
    ]


def test_the_instruction_sets_the_runs_used_are_recorded(sweep, tmp_path):
    """A float32 result reproduces bit for bit only where torch's kernels use the same set."""
    [summary] = collect(SPEC, sweep, tmp_path / "older")
    assert "cpu_capability" not in summary  # runs made before it was recorded
    for run, capability in zip(sorted(sweep.iterdir()), ["AVX512", "AVX2", "AVX2", "AVX2", "AVX2"]):
        record = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**record, "cpu_capability": capability}))
    [summary] = collect(SPEC, sweep, tmp_path / "out")
    assert summary["cpu_capability"] == "AVX2; AVX512"


def test_the_compiled_kernels_the_runs_took_are_recorded(sweep, tmp_path):
    """The compiled and PyTorch paths agree to rounding, not bit for bit: a collection says
    which each run took (``BN_COMPILED``), every distinct record once."""
    kernels = ["off", "on: the kernel", "on: the kernel", "off", "on: the kernel"]
    for run, used in zip(sorted(sweep.iterdir()), kernels):
        record = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**record, "compiled_kernels": used}))
    [summary] = collect(SPEC, sweep, tmp_path / "out")
    assert summary["compiled_kernels"] == "off | on: the kernel"


def test_statistics_are_the_mean_of_each_setups_own_seeds(sweep, tmp_path):
    [summary] = collect(SPEC, sweep, tmp_path / "out", command="make it", wall_time=12.5)
    assert summary == json.loads((tmp_path / "out" / "summary.json").read_text())
    setups = summary["setups"]
    assert list(setups) == ["zeta", "alpha"]
    zeta, alpha = setups["zeta"], setups["alpha"]
    assert zeta["seeds"] == [0, 1, 2] and alpha["seeds"] == [1, 2]
    assert zeta["diverged"] == [False, False, False]
    # The mean, not the median (0.2), and over zeta's seeds only, not all five runs (0.48).
    assert zeta["test_acc"]["mean"] == pytest.approx(0.4)
    assert zeta["test_acc"]["std"] == pytest.approx(statistics.pstdev([0.1, 0.2, 0.9]), abs=1e-5)
    assert zeta["test_acc"]["per_seed"] == [0.1, 0.2, 0.9]
    assert alpha["test_acc"]["mean"] == pytest.approx(0.6)
    assert alpha["test_acc"]["per_seed"] == [0.5, 0.7]
    assert zeta["train_acc"]["per_seed"] == [0.15, 0.25]  # seed 2 has none
    assert zeta["train_acc"]["mean"] == pytest.approx(0.2)
    assert zeta["norm"] == "norm-of-zeta" and alpha["norm"] == "norm-of-alpha"
    assert (summary["data"], summary["steps"]) == ("mnist", 10)
    assert summary["command"] == "make it" and summary["wall_time_s"] == 12.5
    assert summary["paper"] == SPEC.paper


def test_split_by_writes_one_folder_per_value(tmp_path):
    spec = Study("fake", "", (), order=("zeta", "alpha"), split_by="data")
    _write_run(tmp_path / "sweep" / "a", "alpha", 0, 0.3, 0.3, data="mnist")
    _write_run(tmp_path / "sweep" / "b", "alpha", 0, 0.8, 0.8, data="fashion_mnist")
    _write_run(tmp_path / "sweep" / "c", "zeta", 0, 0.6, 0.6, data="fashion_mnist")
    written = collect(spec, tmp_path / "sweep", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fashion_mnist", "mnist"]
    by_data = {s["setups"]["alpha"]["test_acc"]["mean"]: s for s in written}
    assert set(by_data) == {0.3, 0.8}
    assert list(by_data[0.8]["setups"]) == ["zeta", "alpha"]
    mnist_rows = _csv(tmp_path / "out" / "mnist" / "runs.csv")[1:]
    assert {r[0] for r in mnist_rows} == {"alpha"}


SEEN: dict[str, list[int]] = {}


def _extend(summary, runs, out):
    """A study's results hook, named by its module path as a study names its own."""
    SEEN["runs"] = [s["seed"] for _, s in runs]
    summary["extra"] = len(runs)
    (out / "extra.md").write_text("hello\n")


def test_a_studys_extend_hook_adds_its_own_numbers(sweep, tmp_path):
    SEEN.clear()
    spec = Study("fake", "", (), order=SPEC.order, extend=f"{__name__}:_extend")
    [summary] = collect(spec, sweep, tmp_path / "out")
    assert SEEN["runs"] == [0, 1, 2, 1, 2] and summary["extra"] == 5
    assert (tmp_path / "out" / "extra.md").exists()
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["extra"] == 5


def test_collect_sweep_writes_one_row_per_run(sweep, tmp_path):
    out = tmp_path / "tables" / "sweep.csv"
    collect_sweep(SPEC, sweep, out, ["setup", "seed", "lr", "test_acc"])
    header, *rows = _csv(out)
    assert header == ["setup", "seed", "lr", "test_acc"]
    assert len(rows) == len(RUNS)
    assert [(r[0], r[1]) for r in rows] == [
        ("zeta", "0"), ("zeta", "1"), ("zeta", "2"), ("alpha", "1"), ("alpha", "2"),
    ]  # fmt: skip
    assert rows[0][2:] == ["0.1", "0.1"]


def test_collect_sweep_curves_are_keyed_by_the_sweep_keys(sweep, tmp_path):
    curves = tmp_path / "curves.csv"
    collect_sweep(
        SPEC, sweep, tmp_path / "sweep.csv", ["setup", "seed", "lr"], curves, ["test/acc"]
    )
    header, *rows = _csv(curves)
    assert header == ["setup", "seed", "lr", "step", "metric", "value"]
    assert len(rows) == 2 * len(RUNS) and {r[4] for r in rows} == {"test/acc"}
    assert rows[:2] == [
        ["zeta", "0", "0.1", "0", "test/acc", "0.1"],
        ["zeta", "0", "0.1", "10", "test/acc", "0.1"],
    ]
    collect_sweep(SPEC, sweep, tmp_path / "sweep.csv", ["setup", "seed"], curves)  # every metric
    assert len(_csv(curves)) == 1 + 3 * len(RUNS)


def test_a_folder_without_runs_is_a_one_line_error(tmp_path):
    with pytest.raises(CollectError, match="no run with a summary.json under"):
        find_runs(tmp_path)


def test_collect_command_line(tmp_path, capsys):
    from scripts import collect as collect_script

    for seed, acc in ((0, 0.2), (1, 0.4)):
        _write_run(tmp_path / "sweep" / str(seed), "bn", seed, acc, acc)
    collect_script.main(["mnist", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["setups"]["bn"]["test_acc"]["mean"] == pytest.approx(0.3)
    assert "wrote" in capsys.readouterr().out
    collect_script.main(
        ["mnist", str(tmp_path / "sweep"), "--sweep", "--out", str(tmp_path / "sweep.csv")]
    )
    assert len(_csv(tmp_path / "sweep.csv")) == 3
    curves = tmp_path / "curves.csv"
    collect_script.main(
        ["mnist", str(tmp_path / "sweep"), "--sweep", "--out", str(tmp_path / "sweep.csv"),
         "--curves", str(curves), "--curve-metrics", "train/loss"]
    )  # fmt: skip
    assert [r[-2:] for r in _csv(curves)[1:]] == [["train/loss", "0"], ["train/loss", "1"]]
    with pytest.raises(SystemExit, match="there is no study nosuch"):
        collect_script.main(["nosuch", str(tmp_path / "sweep"), "--out", str(tmp_path / "x")])


# A sweep whose setups share their seeds, as a question's arms do.
PAIRED = [("0", "alpha", 0, 0.7, 0.75), ("1", "zeta", 1, 0.9, None), ("2", "alpha", 1, 0.5, 0.55), ("3", "zeta", 0, 0.1, 0.15)]  # fmt: skip


def _split(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The whole sweep, its alpha runs alone, and its zeta runs alone."""
    parts = {name: tmp_path / name for name in ("whole", "alpha_only", "zeta_only")}
    for name, setup, *run in PAIRED:
        _write_run(parts["whole"] / name, setup, *run)
        _write_run(parts[f"{setup}_only"] / name, setup, *run)
    return parts["whole"], parts["alpha_only"], parts["zeta_only"]


def test_reused_setups_give_the_same_files_as_running_them(tmp_path):
    sweep, alpha, zeta = _split(tmp_path)
    [whole] = collect(SPEC, sweep, tmp_path / "whole_out")
    collect(SPEC, zeta, tmp_path / "earlier")
    [part] = collect(SPEC, alpha, tmp_path / "part", reuse=Reuse(tmp_path / "earlier", ("zeta",)))
    assert (tmp_path / "part" / "runs.csv").read_bytes() == (
        tmp_path / "whole_out" / "runs.csv"
    ).read_bytes()  # the reused rows in their places: zeta first, by the spec's order
    assert part["setups"] == whole["setups"] and list(part["setups"]) == ["zeta", "alpha"]
    assert part["reused"]["setups"] == ["zeta"]
    assert part["reused"]["folder"] == str(tmp_path / "earlier")


def test_reuse_refuses_other_settings_seeds_missing_setups_and_setups_run_twice(tmp_path):
    sweep, alpha, zeta = _split(tmp_path)
    collect(SPEC, zeta, tmp_path / "earlier")
    with pytest.raises(CollectError, match="has no runs of \\['beta'\\]"):
        collect(SPEC, alpha, tmp_path / "x", reuse=Reuse(tmp_path / "earlier", ("beta",)))
    with pytest.raises(CollectError, match="the sweep ran \\['zeta'\\]"):
        collect(SPEC, sweep, tmp_path / "x", reuse=Reuse(tmp_path / "earlier", ("zeta",)))
    with pytest.raises(CollectError, match="has no summary.json and runs.csv"):
        collect(SPEC, alpha, tmp_path / "x", reuse=Reuse(tmp_path / "nothing", ("zeta",)))
    _write_run(tmp_path / "alpha_seed0" / "a", "alpha", 0, 0.3, 0.3)
    with pytest.raises(
        CollectError, match="has zeta with seeds \\[0, 1\\], the sweep ran seeds \\[0\\]"
    ):
        collect(
            SPEC,
            tmp_path / "alpha_seed0",
            tmp_path / "x",
            reuse=Reuse(tmp_path / "earlier", ("zeta",)),
        )
    summary = tmp_path / "earlier" / "summary.json"
    summary.write_text(summary.read_text().replace('"steps": 10', '"steps": 20'))
    with pytest.raises(CollectError, match="was made with steps=20, this sweep with 10"):
        collect(SPEC, alpha, tmp_path / "x", reuse=Reuse(tmp_path / "earlier", ("zeta",)))
    assert not (tmp_path / "x").exists()  # nothing written on a refusal


def test_reuse_on_the_command_line(tmp_path):
    from scripts import collect as collect_script

    _, alpha, zeta = _split(tmp_path)
    collect_script.main(["renorm", str(zeta), "--out", str(tmp_path / "earlier")])
    collect_script.main(
        ["renorm", str(alpha), "--out", str(tmp_path / "out"),
         "--reuse", str(tmp_path / "earlier"), "--reuse-setups", "zeta"]
    )  # fmt: skip
    summary = json.loads((tmp_path / "out" / "mnist" / "summary.json").read_text())
    assert set(summary["setups"]) == {"zeta", "alpha"}  # split by data: mnist/ on both sides
    for flags in (["--reuse", "y"], ["--sweep", "--reuse", "y", "--reuse-setups", "zeta"]):
        with pytest.raises(SystemExit):
            collect_script.main(["renorm", str(alpha), "--out", str(tmp_path / "x"), *flags])
    assert not (tmp_path / "x").exists()


def test_a_refusal_in_one_group_writes_no_group(tmp_path):
    spec = Study("fake", "", (), order=("zeta", "alpha"), split_by="data")
    for data in ("fashion_mnist", "mnist"):
        _write_run(tmp_path / "earlier_runs" / data, "zeta", 0, 0.2, 0.2, data=data)
        _write_run(tmp_path / "sweep" / data, "alpha", 0, 0.3, 0.3, data=data)
    collect(spec, tmp_path / "earlier_runs", tmp_path / "earlier")
    csv_path = tmp_path / "earlier" / "mnist" / "runs.csv"
    csv_path.write_text(csv_path.read_text().splitlines()[0] + "\n")  # mnist's zeta rows lost
    with pytest.raises(
        CollectError, match="has no rows of \\(setup, seed\\) \\[\\('zeta', 0\\)\\]"
    ):
        collect(
            spec, tmp_path / "sweep", tmp_path / "out", reuse=Reuse(tmp_path / "earlier", ("zeta",))
        )
    assert not (tmp_path / "out").exists()  # fashion_mnist/ was fine, and is not written either


def test_reuse_refuses_a_study_whose_results_need_every_run(tmp_path):
    _, alpha, zeta = _split(tmp_path)
    spec = Study("fake", "", (), order=SPEC.order, extend=f"{__name__}:_extend")
    collect(spec, zeta, tmp_path / "earlier")
    with pytest.raises(CollectError, match="extend hook"):
        collect(spec, alpha, tmp_path / "x", reuse=Reuse(tmp_path / "earlier", ("zeta",)))


def _with_config(folder: Path, **config) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    summary["config"] = {"seed": summary["seed"], "train.lr": 0.1, "train.steps": 10, **config}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_runs_of_one_setup_with_other_settings_are_not_pooled(sweep, tmp_path):
    for name in ("0", "1", "2", "3", "4"):
        _with_config(sweep / name, **{"logger.mode": name})  # a key that changes no run: ignored
    collect(SPEC, sweep, tmp_path / "ok")
    _with_config(sweep / "4", **{"train.lr": 0.5})
    with pytest.raises(
        CollectError, match=r"runs of zeta differ in train\.lr \(0\.1 in .*, 0\.5 in"
    ):
        collect(SPEC, sweep, tmp_path / "out")
    _with_config(sweep / "4", **{"train.steps": 20})
    with pytest.raises(CollectError, match=r"differ in train\.steps"):
        collect(SPEC, sweep, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_seed_twice_in_one_setup_is_refused(sweep, tmp_path):
    _write_run(sweep / "5", "zeta", 1, 0.3, 0.3)
    with pytest.raises(CollectError, match="zeta has seed 1 twice"):
        collect(SPEC, sweep, tmp_path / "out")


def test_an_unfinished_run_is_refused_and_a_replaced_one_skipped(sweep, tmp_path):
    _write_run(sweep / "0" / ".replaced" / "2026-01-01_00-00-00", "zeta", 1, 0.3, 0.3)
    assert len(find_runs(sweep)) == len(RUNS)
    (sweep / "3" / "summary.json").unlink()
    with pytest.raises(CollectError, match=r"3 holds a run that did not finish"):
        find_runs(sweep)


def test_collect_help_shows_its_whole_description(capsys):
    from scripts import collect as collect_script

    with pytest.raises(SystemExit):
        collect_script.main(["--help"])
    out = capsys.readouterr().out
    assert "needs it).\n" in out and "--reuse-setups" in out


def test_a_sweep_table_for_any_study_has_a_column_per_setting_that_differs(sweep, tmp_path):
    for name, lr in (("0", 0.1), ("1", 0.5), ("2", 0.1), ("3", 0.5), ("4", 0.1)):
        _with_config(sweep / name, **{"train.lr": lr, "logger.mode": name})
    collect_sweep(SPEC, sweep, tmp_path / "sweep.csv")
    rows = _csv(tmp_path / "sweep.csv")
    assert rows[0] == [
        RUN_KEY,
        "seed",
        "train.lr",
        "steps_done",
        "diverged",
        "test_acc",
        "train_acc",
    ]
    assert [r[:3] for r in rows[1:]] == [
        ["zeta", "0", "0.5"], ["zeta", "1", "0.1"], ["zeta", "2", "0.5"],
        ["alpha", "1", "0.1"], ["alpha", "2", "0.1"],
    ]  # fmt: skip


def test_a_broken_summary_or_an_out_of_the_wrong_kind_is_one_line(sweep, tmp_path):
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(CollectError, match="is a file; give a folder"):
        collect(SPEC, sweep, tmp_path / "a_file")
    assert (tmp_path / "a_file").read_text() == "mine"
    with pytest.raises(CollectError, match="is a folder; give the CSV"):
        collect_sweep(SPEC, sweep, tmp_path)
    (sweep / "2" / "summary.json").write_text('{"setup": "alpha", "se')
    with pytest.raises(CollectError, match=r"2/summary.json cannot be read"):
        find_runs(sweep)


def test_reuse_refuses_setups_run_with_another_setting_than_the_sweeps(tmp_path):
    _, alpha, zeta = _split(tmp_path)
    for folder in [*zeta.iterdir(), *alpha.iterdir()]:
        _with_config(folder)
    collect(SPEC, zeta, tmp_path / "earlier")
    collect(SPEC, alpha, tmp_path / "ok", reuse=Reuse(tmp_path / "earlier", ("zeta",)))
    for folder in alpha.iterdir():
        _with_config(folder, **{"train.lr": 0.5})
    with pytest.raises(
        CollectError, match=r"ran zeta with train\.lr=0\.1, this sweep ran alpha with 0\.5"
    ):
        collect(SPEC, alpha, tmp_path / "x", reuse=Reuse(tmp_path / "earlier", ("zeta",)))


def test_what_a_setup_file_sets_is_its_own():
    from experiments.kit.config import setup_settings

    assert "norm." in setup_settings("renorm", "brn32")  # override /norm: batchrenorm
    assert {"model.lrn", "train.lr_mult", "norm."} <= setup_settings(
        "inception", "bn_x5"
    )  # and bn_baseline's
