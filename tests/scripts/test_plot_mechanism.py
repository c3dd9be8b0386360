"""scripts/plot_mechanism.py's Jacobian figure: drawn from a runs.csv with the Sec. 3.3 probe's
metrics, refused in one line naming the metric when a runs.csv predates them."""

import csv

import pytest

from scripts import plot_mechanism, plotting

PAIRS = ("layer1to2", "layer2to3")
METRICS = [
    *(f"jacobian_normalized/{p}/{k}" for p in PAIRS for k in ("sv_median", "isometry_gap", "sv_in_band")),
    *(f"jacobian_normalized/layer{layer}/mean_abs_corr" for layer in (1, 2, 3)),
    "jacobian/layer3/sv_median",
]  # fmt: skip


def _runs_csv(folder, metrics):
    folder.mkdir(parents=True)
    with (folder / "runs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setup", "seed", "step", "metric", "value"])
        for setup in ("mech_baseline", "mech_bn"):
            for seed in (0, 1, 2):
                for step in (0, 10, 20):
                    for m in metrics:
                        w.writerow([setup, seed, step, m, 0.1 + 0.01 * (seed + step)])


@pytest.mark.slow
def test_the_jacobian_figure_draws_from_the_probes_metrics(tmp_path, monkeypatch):
    _runs_csv(tmp_path / "results", METRICS)
    monkeypatch.setattr(plot_mechanism, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    assert plot_mechanism.jacobian() == tmp_path / "figures/mechanism_jacobian.png"
    assert (tmp_path / "figures/mechanism_jacobian.png").stat().st_size > 0


@pytest.mark.parametrize(
    "missing",
    ["jacobian_normalized/layer2to3/isometry_gap", "jacobian_normalized/layer1/mean_abs_corr"],
)
def test_a_runs_csv_without_a_metric_is_refused_in_one_line(tmp_path, monkeypatch, missing):
    _runs_csv(tmp_path / "results", [m for m in METRICS if m != missing])
    monkeypatch.setattr(plot_mechanism, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    with pytest.raises(SystemExit, match=f"has no {missing} for mech_baseline: rerun"):
        plot_mechanism.jacobian()
    assert not (tmp_path / "figures").exists()
