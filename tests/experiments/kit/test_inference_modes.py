"""The batch-size study's evaluations: Precise BN's statistics, test-example weighting."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import bn
from experiments.kit import inference_modes as modes
from experiments.nets.convnet import SmallConvNet


def _net(microbatch: int | None = None) -> nn.Module:
    torch.manual_seed(0)
    net = SmallConvNet(
        lambda c: bn.BatchNorm2d(c, microbatch=microbatch),
        lambda c: bn.BatchNorm1d(c, microbatch=microbatch),
        widths=(4, 8),
        hidden=6,
    )
    net.train()
    for _ in range(3):  # moving averages away from their initial values
        net(torch.randn(8, 1, 12, 12))
    return net.eval()


def _batches(n: int, g: int) -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randn(g, 1, 12, 12) * 2 + 0.5 for _ in range(n)]


@pytest.mark.parametrize("bessel", [True, False])
def test_population_statistics_match_algorithm_2_and_leave_the_network(bessel: bool) -> None:
    net, batches = _net(microbatch=4), _batches(5, 4)
    before = copy.deepcopy(net.state_dict())
    stats = modes.population_statistics(net, iter(batches), [2, 5])
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    expected = copy.deepcopy(net)
    bn.set_population_statistics(expected, batches, 5, bessel=bessel)
    got = modes.with_statistics(net, stats[5], bessel)
    for a, b in zip(modes.batch_norms(got), modes.batch_norms(expected), strict=True):
        torch.testing.assert_close(a.running_mean, b.running_mean)
        torch.testing.assert_close(a.running_var, b.running_var)
    fewer = copy.deepcopy(net)
    bn.set_population_statistics(fewer, batches, 2, bessel=bessel)
    first = modes.with_statistics(net, stats[2], bessel)
    torch.testing.assert_close(
        modes.batch_norms(first)[-1].running_var, modes.batch_norms(fewer)[-1].running_var
    )


def test_population_statistics_refuses_too_few_batches() -> None:
    with pytest.raises(ValueError, match="fewer than 9"):
        modes.population_statistics(_net(), iter(_batches(3, 4)), [9])


def test_example_weighting_tends_to_the_moving_averages_and_to_the_example_alone() -> None:
    net, x = _net(), torch.randn(5, 1, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(
            modes.example_weighted(net, 10**9)(x), net(x), rtol=1e-4, atol=1e-4
        )
        alone = modes.example_weighted(net, 1)
        conv = alone[0]
        layer = alone[1]
        out = layer(conv(x))
        u = conv(x)
        mu = u.mean((2, 3), keepdim=True)
        var = u.var((2, 3), unbiased=False, keepdim=True)
        torch.testing.assert_close(out, (u - mu) / torch.sqrt(var + layer.eps) * layer.weight.view(1, -1, 1, 1) + layer.bias.view(1, -1, 1, 1))  # fmt: skip
    with pytest.raises(ValueError, match="g=0"):
        modes.example_weighted(net, 0)
