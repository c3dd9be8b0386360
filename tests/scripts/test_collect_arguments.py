"""scripts/collect.py: the comma-separated lists of --curve-metrics and --reuse-setups."""

import csv
import json

import pytest

from scripts import collect
from tests.experiments.kit.test_results import _write_run


def test_curve_metrics_takes_every_comma_separated_metric(tmp_path):
    for seed in (0, 1):
        _write_run(tmp_path / "sweep" / str(seed), "bn", seed, 0.5, 0.5)
        with (tmp_path / "sweep" / str(seed) / "metrics.csv").open("a", newline="") as f:
            csv.writer(f).writerow([10, "train/acc", 0.6])  # not asked for
    curves = tmp_path / "curves.csv"
    collect.main(
        ["mnist", str(tmp_path / "sweep"), "--sweep", "--out", str(tmp_path / "sweep.csv"),
         "--curves", str(curves), "--curve-metrics", "train/loss,test/acc"]
    )  # fmt: skip
    with curves.open() as f:
        metrics = [row[-2] for row in list(csv.reader(f))[1:]]
    assert sorted(set(metrics)) == ["test/acc", "train/loss"]
    assert len(metrics) == 6  # two runs, test/acc at steps 0 and 10, train/loss at 10


def test_reuse_setups_takes_every_comma_separated_setup(tmp_path):
    for seed in (0, 1):
        for setup in ("zeta", "alpha"):
            _write_run(tmp_path / "earlier_runs" / f"{setup}{seed}", setup, seed, 0.5, 0.5)
        _write_run(tmp_path / "sweep" / f"beta{seed}", "beta", seed, 0.7, 0.7)
    collect.main(["renorm", str(tmp_path / "earlier_runs"), "--out", str(tmp_path / "earlier")])
    collect.main(
        ["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"),
         "--reuse", str(tmp_path / "earlier"), "--reuse-setups", "zeta,alpha"]
    )  # fmt: skip
    summary = json.loads((tmp_path / "out" / "mnist" / "summary.json").read_text())
    assert set(summary["setups"]) == {"zeta", "alpha", "beta"}
    assert summary["reused"]["setups"] == ["zeta", "alpha"]


def test_metrics_keeps_only_the_named_prefixes_in_runs_csv_reused_rows_too(tmp_path):
    for seed in (0, 1):
        for setup in ("zeta", "beta"):
            folder = tmp_path / ("earlier_runs" if setup == "zeta" else "sweep") / f"{setup}{seed}"
            _write_run(folder, setup, seed, 0.5, 0.5)
            with (folder / "metrics.csv").open("a", newline="") as f:
                csv.writer(f).writerow([10, "train/acc", 0.6])  # not asked for
    collect.main(["renorm", str(tmp_path / "earlier_runs"), "--out", str(tmp_path / "earlier")])
    collect.main(
        ["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--reuse",
         str(tmp_path / "earlier"), "--reuse-setups", "zeta", "--metrics", "test/,train/loss"]
    )  # fmt: skip
    with (tmp_path / "out" / "mnist" / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["metric"] for r in rows} == {"test/acc", "train/loss"}
    assert {r["setup"] for r in rows} == {"zeta", "beta"}
    summary = json.loads((tmp_path / "out" / "mnist" / "summary.json").read_text())
    assert summary["metrics_kept"] == ["test/", "train/loss"]


def test_metrics_refuses_an_empty_prefix(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        collect.main(["renorm", str(tmp_path), "--out", str(tmp_path / "o"), "--metrics", "a,,b"])
    assert "comma-separated metric prefixes" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra",
    [["--reuse", "earlier"], ["--reuse-setups", "zeta"], ["--sweep", "--reuse", "e", "--reuse-setups", "z"]],
)  # fmt: skip
def test_reuse_and_reuse_setups_go_together_without_sweep(tmp_path, capsys, extra):
    with pytest.raises(SystemExit) as e:
        collect.main(["renorm", str(tmp_path), "--out", str(tmp_path / "o"), *extra])
    assert e.value.code == 2
    assert "--reuse and --reuse-setups go together, without --sweep" in capsys.readouterr().err


def test_curve_metrics_needs_curves(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        collect.main(
            ["mnist", str(tmp_path), "--sweep", "--out", str(tmp_path / "s.csv"),
             "--curve-metrics", "test/acc"]
        )  # fmt: skip
    assert e.value.code == 2
    assert "--curve-metrics needs --curves PATH" in capsys.readouterr().err
