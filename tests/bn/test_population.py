"""bn.set_population_statistics: BN paper Algorithm 2."""

import copy

import pytest
import torch
from torch import nn

import bn


def test_bessel_factor_on_known_distribution():
    """Batches of 4 from N(3, 4): the plain mean of batch variances is 3, corrected 4."""
    layer = bn.BatchNorm1d(1)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(4, 1, generator=g) * 2 + 3 for _ in range(20_000)]
    bn.set_population_statistics(layer, batches, num_batches=20_000)
    assert layer.running_var.item() == pytest.approx(4.0, rel=0.03)
    assert layer.running_mean.item() == pytest.approx(3.0, abs=0.03)
    bn.set_population_statistics(layer, batches, num_batches=20_000, bessel=False)
    assert layer.running_var.item() == pytest.approx(3.0, rel=0.03)


def _net():
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        bn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Conv2d(4, 3, 1),
        nn.BatchNorm2d(3),
    )


@pytest.mark.parametrize("bessel", [True, False])
def test_exact_average_of_batch_statistics(bessel):
    net = _net()
    net.train()
    batches = [torch.randn(6, 2, 5, 5) * 2 + 1 for _ in range(5)]
    # Expected: layer-by-layer batch statistics of the training network with dropout off.
    expected = {}
    ref = copy.deepcopy(net)
    ref[3].eval()
    feats = {1: [], 5: []}
    for x in batches:
        h = x
        for i, m in enumerate(ref):
            if i in feats:
                feats[i].append(h.detach())
            h = m(h)
    m_vals = 6 * 5 * 5
    for i, hs in feats.items():
        means = torch.stack([h.mean((0, 2, 3)) for h in hs]).mean(0)
        var = torch.stack([h.var((0, 2, 3), unbiased=False) for h in hs]).mean(0)
        expected[i] = (means, var * (m_vals / (m_vals - 1) if bessel else 1.0))

    params = copy.deepcopy(list(net.parameters()))
    tracked = [int(net[i].num_batches_tracked) for i in feats]
    used = bn.set_population_statistics(net, batches, num_batches=10, bessel=bessel)
    assert used == 5
    for i, (mean, var) in expected.items():
        torch.testing.assert_close(net[i].running_mean, mean)
        torch.testing.assert_close(net[i].running_var, var)
    assert net.training and all(m.training for m in net)
    assert [int(net[i].num_batches_tracked) for i in feats] == tracked
    for p, q in zip(net.parameters(), params):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_eval_mode_is_kept():
    net = _net().eval()
    bn.set_population_statistics(net, [torch.randn(4, 2, 3, 3)], num_batches=1)
    assert not any(m.training for m in net.modules())


def test_needs_a_bn_layer():
    with pytest.raises(ValueError, match="no BN layer"):
        bn.set_population_statistics(nn.Linear(2, 2), [torch.randn(2, 2)], num_batches=1)
