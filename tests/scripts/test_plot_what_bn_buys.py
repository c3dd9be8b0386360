"""scripts/plot_what_bn_buys.py: the MLPs' figure from synthetic pilots, a row per MLP that has
committed results."""

from dataclasses import replace

import matplotlib.image

from scripts import plot_what_bn_buys as plot
from scripts import plotting
from scripts.analysis.windows import PLAN
from scripts.claims import what_bn_buys as w
from scripts.claims import what_bn_buys_mlp as m
from tests.scripts.claims.test_what_bn_buys_mlp import _write


def _pilot(net: w.Net) -> dict:
    """Five seeds: BN trains at every rate; without BN the largest rate diverges."""
    top = max(net.rates)
    return {
        net.bn: {s: {r: 0.95 + 0.001 * s for r in net.rates} for s in range(5)},
        net.plain: {s: {r: None if r == top else 0.9 for r in net.rates} for s in range(5)},
    }


def _draw(tmp_path, monkeypatch, nets) -> tuple[int, int]:
    results = tmp_path / "results"
    for net in nets:
        _write(results, net, _pilot(net))
    plan = replace(PLAN, root=str(results))
    monkeypatch.setattr(plot, "SEED_SETS", (("pilot", plan),))
    monkeypatch.setattr(w, "PLAN", plan)
    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    height, width, _ = matplotlib.image.imread(plot.mlp_figure()).shape
    return height, width


def test_the_mlps_figure_has_a_row_per_mlp_with_results(tmp_path, monkeypatch):
    both = _draw(tmp_path / "both", monkeypatch, (m.MLP, m.RELU))
    one = _draw(tmp_path / "one", monkeypatch, (m.MLP,))
    assert both[1] == one[1] and both[0] > 1.8 * one[0]
