"""The drift of the sigmoid inputs' percentiles between evaluations (internal covariate shift,
measured), one measure that the MNIST and the mechanism studies both log."""

import pytest
import torch

from experiments import mechanism, mnist
from experiments.kit.probes import percentile_drift

QS = [5.0, 15.0, 50.0, 85.0, 95.0]  # the median is not the middle index's neighbour by chance


def _two_evaluations() -> tuple[torch.Tensor, torch.Tensor]:
    prev = torch.zeros(2, len(QS), 3)  # (layers, percentiles, units)
    now = prev.clone()
    now[1, 2] = torch.tensor([1.0, -2.0, 3.0])  # layer 2's medians move by 1, 2, 3
    now[1, 4] = torch.tensor([4.0, 0.0, 0.0])  # its 95th percentile: unit 0's spread grows by 4
    now[1, 1] = torch.tensor([9.0, 9.0, 9.0])  # an inner percentile: no part of the spread
    return prev, now


def test_each_units_median_and_spread_move_by_their_absolute_change():
    moves = percentile_drift(*_two_evaluations(), QS)
    assert len(moves) == 2
    assert moves[0]["median"].tolist() == [0.0, 0.0, 0.0]
    assert moves[1]["median"].tolist() == [1.0, 2.0, 3.0]
    assert moves[1]["spread"].tolist() == [4.0, 0.0, 0.0]


def test_a_percentile_list_without_the_median_is_refused():
    with pytest.raises(ValueError):
        percentile_drift(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), [15.0, 85.0])


def test_both_studies_log_the_same_drift():
    prev, now = _two_evaluations()
    probe = mnist.Figure1Probe.__new__(mnist.Figure1Probe)
    probe.qs = QS
    figure1 = probe._shift(prev, now)
    mech = mechanism.drift(prev, now, QS, "shift")
    for layer in (1, 2):
        for part in ("median", "spread"):
            assert figure1[f"shift/layer{layer}/{part}"] == mech[f"shift/layer{layer}/{part}_mean"]
    assert figure1["shift/layer2/median"] == 2.0 and mech["shift/layer2/median_q75"] == 2.5
