"""bn.set_population_statistics: BN paper Algorithm 2."""

import copy
import itertools

import pytest
import torch
from torch import nn

import bn


@pytest.mark.slow
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


def _counting(batches, limit=None):
    """The batches, counting how many were taken; past ``limit``, an error (not a hang)."""
    taken = []

    def gen():
        for i, b in enumerate(batches):
            if limit is not None and i >= limit:
                raise AssertionError(f"took more than {limit} batches")
            taken.append(i)
            yield b

    return gen(), taken


def test_takes_exactly_num_batches_from_an_iterator():
    batches, taken = _counting([torch.randn(4, 3) for _ in range(10)])
    assert bn.set_population_statistics(bn.BatchNorm1d(3), batches, num_batches=3) == 3
    assert len(taken) == 3
    assert len(list(batches)) == 7  # the rest is still there for the caller


@pytest.mark.parametrize("num_batches", [2.5, float("nan"), float("inf"), 0, -1, "3", True])
def test_num_batches_must_be_a_whole_number(num_batches):
    batches, _ = _counting(itertools.repeat(torch.randn(4, 3)), limit=50)
    with pytest.raises(ValueError, match="num_batches=.* must be a whole number >= 1"):
        bn.set_population_statistics(bn.BatchNorm1d(3), batches, num_batches=num_batches)


def test_num_batches_as_a_whole_float():
    batches = [torch.randn(4, 3) for _ in range(5)]
    assert bn.set_population_statistics(bn.BatchNorm1d(3), batches, num_batches=2.0) == 2


@pytest.mark.parametrize("bessel", [True, False])
def test_single_example_is_a_clear_error(bessel):
    layer = bn.BatchNorm1d(3)
    before = layer.running_var.clone()
    with pytest.raises(ValueError, match=r"holds 1 value per channel.*at least 2 examples"):
        bn.set_population_statistics(layer, [torch.randn(1, 3)], num_batches=1, bessel=bessel)
    torch.testing.assert_close(layer.running_var, before, rtol=0, atol=0)
    assert layer.training


@pytest.mark.parametrize("sizes", [(6, 6, 6), (3, 7, 5, 2)], ids=["equal", "unequal"])
def test_bessel_equals_torch_update_bn(sizes):
    """Without dropout, Algorithm 2 with Bessel's correction is what swa_utils.update_bn computes."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 3, 1),
        nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(3 * 5 * 5, 6), nn.BatchNorm1d(6),
    ).double()  # fmt: skip
    batches = [torch.randn(n, 2, 5, 5, dtype=torch.float64) * 2 + 1 for n in sizes]
    theirs = copy.deepcopy(net)
    torch.optim.swa_utils.update_bn(batches, theirs)
    bn.set_population_statistics(net, batches, num_batches=len(batches), bessel=True)
    norms = [
        (a, b)
        for a, b in zip(net.modules(), theirs.modules())
        if isinstance(a, nn.BatchNorm2d | nn.BatchNorm1d)
    ]
    assert len(norms) == 3
    for ours, swa in norms:
        torch.testing.assert_close(ours.running_mean, swa.running_mean, rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(ours.running_var, swa.running_var, rtol=1e-13, atol=1e-14)
        assert int(ours.num_batches_tracked) == 0 and int(swa.num_batches_tracked) == len(sizes)


@pytest.mark.parametrize("bessel", [True, False])
@pytest.mark.parametrize("microbatch", [None, 2])
def test_population_estimator_is_the_variance_of_all_values(bessel, microbatch):
    """PreciseBN (fvcore's default): mean and variance of every value a channel saw, batches
    weighted by their size; computed here directly from the concatenated inputs."""
    layer = bn.BatchNorm2d(3, microbatch=microbatch).double()
    g = torch.Generator().manual_seed(0)
    batches = [
        torch.randn(n, 3, 4, 4, generator=g, dtype=torch.float64) * (1 + i) + 3 * i
        for i, n in enumerate((2, 6, 4))
    ]
    bn.set_population_statistics(
        layer, batches, num_batches=3, bessel=bessel, estimator="population"
    )
    values = torch.cat([b.transpose(0, 1).reshape(3, -1) for b in batches], dim=1)
    torch.testing.assert_close(layer.running_mean, values.mean(1))
    torch.testing.assert_close(layer.running_var, values.var(1, correction=int(bessel)))
    # the default estimator (the mean over batches) differs for batches of unequal size
    bn.set_population_statistics(layer, batches, num_batches=3, bessel=bessel)
    assert not torch.allclose(layer.running_var, values.var(1, correction=int(bessel)))


def test_unknown_estimator():
    with pytest.raises(ValueError, match="estimator='precise'"):
        bn.set_population_statistics(
            bn.BatchNorm1d(3), [torch.randn(4, 3)], num_batches=1, estimator="precise"
        )


def _precise_bn_net(norm2d) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), norm2d(4), nn.ReLU(), nn.Conv2d(4, 3, 1), norm2d(3)
    ).double()


def test_fvcore_precise_bn_finds_and_recomputes_our_layers():
    """fvcore's PreciseBN looks for BN layers with ``isinstance(m, nn.BatchNorm2d)``: it finds
    ours and computes what it computes on torch's (and what our population estimator does)."""
    precise_bn = pytest.importorskip("fvcore.nn.precise_bn")
    batches = [torch.randn(6, 2, 5, 5, dtype=torch.float64) * 2 + 1 for _ in range(5)]
    theirs = _precise_bn_net(nn.BatchNorm2d)
    ours = bn.convert_norm(copy.deepcopy(theirs))
    estimate = bn.convert_norm(copy.deepcopy(theirs))
    assert len(precise_bn.get_bn_modules(ours)) == 2
    precise_bn.update_bn_stats(theirs, batches, num_iters=5)
    precise_bn.update_bn_stats(ours, batches, num_iters=5)
    bn.set_population_statistics(estimate, batches, 5, estimator="population", bessel=False)
    for k, v in theirs.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[k], v, rtol=1e-12, atol=1e-12, msg=k)
        if "running" in k:  # fvcore also counts its batches in num_batches_tracked
            torch.testing.assert_close(estimate.state_dict()[k], v, rtol=1e-10, atol=1e-12)


def test_fvcore_precise_bn_on_batch_renorm():
    """PreciseBN finds Batch Renorm layers too (they are ``nn.BatchNorm2d``s) and sets the
    population mean. Its variance is the population variance with each batch's within-batch part
    shrunk by ``(m − 1)/m``: fvcore reads ``running_var`` after a momentum-1 step as a
    Bessel-corrected variance, while Batch Renorm's is ``σ_B² − ε``, the biased one."""
    precise_bn = pytest.importorskip("fvcore.nn.precise_bn")
    batches = [torch.randn(6, 3, 4, 4, dtype=torch.float64) * 2 + 1 for _ in range(4)]
    model = nn.Sequential(bn.BatchRenorm2d(3, r_max=3.0, d_max=5.0)).double()
    assert precise_bn.get_bn_modules(model) == [model[0]]
    precise_bn.update_bn_stats(model, batches, num_iters=4)
    m = 6 * 4 * 4
    x = torch.stack(batches).transpose(1, 2).reshape(4, 3, m)  # (batch, channel, values)
    mean = x.mean((0, 2))
    within = x.var(2, correction=0) * (m - 1) / m
    var = (x.mean(2).square() + within).mean(0) - mean.square()
    torch.testing.assert_close(model[0].running_mean, mean)
    torch.testing.assert_close(model[0].running_var, var)
    assert model[0].momentum == 0.01  # restored


def test_num_batches_may_exceed_what_islice_takes():
    batches = [torch.randn(4, 3) for _ in range(3)]
    assert bn.set_population_statistics(bn.BatchNorm1d(3), batches, num_batches=10**30) == 3


@pytest.mark.parametrize(
    "layer", [bn.L1BatchNorm1d(3), bn.LinfBatchNorm1d(3), bn.MeanOnlyBatchNorm1d(3)]
)
def test_layers_with_other_running_statistics_are_refused_not_skipped(layer):
    """ℓ1, ℓ∞ and mean-only BN keep running statistics Algorithm 2 does not estimate: a model
    holding one beside BN is refused, naming it, rather than left half set."""
    model = nn.Sequential(bn.BatchNorm1d(3), layer)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=type(layer).__name__):
        bn.set_population_statistics(model, [torch.randn(4, 3)], num_batches=1)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
