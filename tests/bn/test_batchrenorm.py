"""bn.BatchRenorm1d/2d: Batch Renorm paper Algorithm 1, its identities and its schedule."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bn


def _perturb_running_stats(layer, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.running_mean.copy_(torch.randn(layer.num_features, generator=g) * 0.5)
        layer.running_var.copy_(torch.rand(layer.num_features, generator=g) + 0.5)


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("shape", [(16, 5), (16, 3, 4, 4)])
def test_rmax1_dmax0_equals_bn(impl, microbatch, shape):
    c = shape[1]
    brn_cls, bn_cls = (
        (bn.BatchRenorm1d, bn.BatchNorm1d)
        if len(shape) == 2
        else (bn.BatchRenorm2d, bn.BatchNorm2d)
    )
    brn = brn_cls(c, r_max=1.0, d_max=0.0, impl=impl, microbatch=microbatch).double()
    ref = bn_cls(c, microbatch=microbatch).double()
    _perturb_running_stats(brn)
    with torch.no_grad():
        brn.weight.uniform_(0.5, 2), brn.bias.uniform_(-1, 1)
        ref.weight.copy_(brn.weight), ref.bias.copy_(brn.bias)
    for _ in range(3):
        x = (torch.randn(shape, dtype=torch.float64) * 2 + 1).requires_grad_(True)
        gy = torch.randn(shape, dtype=torch.float64)
        y1, y2 = brn(x), ref(x)
        torch.testing.assert_close(y1, y2)
        g1 = torch.autograd.grad(y1, [x, brn.weight, brn.bias], gy)
        g2 = torch.autograd.grad(y2, [x, ref.weight, ref.bias], gy)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b)


def test_default_schedule_is_bn_at_start():
    brn, ref = bn.BatchRenorm2d(3).double(), bn.BatchNorm2d(3).double()
    _perturb_running_stats(brn)
    x = torch.randn(8, 3, 4, 4, dtype=torch.float64) * 3
    torch.testing.assert_close(brn(x), ref(x))


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("microbatch", [None, 4])
def test_r_and_d_receive_no_gradient(impl, microbatch):
    """Gradients equal those of BN with weight γ·r and bias γ·d + β, r and d held constant."""
    brn = bn.BatchRenorm2d(3, r_max=10.0, d_max=10.0, impl=impl, microbatch=microbatch).double()
    _perturb_running_stats(brn)
    with torch.no_grad():
        brn.weight.uniform_(0.5, 2), brn.bias.uniform_(-1, 1)
    x = (torch.randn(8, 3, 4, 4, dtype=torch.float64) * 2 + 1).requires_grad_(True)
    gy = torch.randn_like(x)
    sigma = torch.sqrt(brn.running_var + brn.eps)
    mu = brn.running_mean.clone()
    y = brn(x)
    gx, gw, gb = torch.autograd.grad(y, [x, brn.weight, brn.bias], gy)

    w = brn.weight.detach().requires_grad_(True)
    b = brn.bias.detach().requires_grad_(True)
    chunks = x.split(microbatch or 8)
    outs = []
    for xb in chunks:
        with torch.no_grad():
            var, mean = torch.var_mean(xb, dim=(0, 2, 3), unbiased=False)
            r = torch.sqrt(var + brn.eps) / sigma
            d = (mean - mu) / sigma
        assert (r - 1).abs().max() > 1e-3 and d.abs().max() > 1e-3  # the correction is active
        outs.append(F.batch_norm(xb, None, None, w * r, w * d + b, True, 0.0, brn.eps))
    expected = torch.cat(outs)
    torch.testing.assert_close(y, expected)
    for got, want in zip((gx, gw, gb), torch.autograd.grad(expected, [x, w, b], gy)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("shape", [(32, 4), (32, 4, 3, 3)])
def test_unclipped_training_output_equals_inference_output(shape):
    cls = bn.BatchRenorm1d if len(shape) == 2 else bn.BatchRenorm2d
    brn = cls(4, r_max=1e6, d_max=1e6).double()
    _perturb_running_stats(brn)
    x = torch.randn(shape, dtype=torch.float64) * 3 + 2
    infer = copy.deepcopy(brn).eval()
    torch.testing.assert_close(brn(x), infer(x))
    assert float(brn.r_clip_fraction) == 0.0 and float(brn.d_clip_fraction) == 0.0


def test_moving_average_of_sigma():
    brn = bn.BatchRenorm2d(3, momentum=0.25)
    _perturb_running_stats(brn)
    mu0 = brn.running_mean.clone()
    sigma0 = torch.sqrt(brn.running_var + brn.eps)
    x = torch.randn(8, 3, 5, 5) * 2 + 1
    brn(x)
    var_b, mu_b = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
    sigma_b = torch.sqrt(var_b + brn.eps)
    torch.testing.assert_close(brn.running_mean, mu0 + 0.25 * (mu_b - mu0))
    torch.testing.assert_close(
        torch.sqrt(brn.running_var + brn.eps), sigma0 + 0.25 * (sigma_b - sigma0)
    )
    assert int(brn.num_batches_tracked) == 1


def test_checkpoint_loads_strict_into_torch_batchnorm():
    brn = bn.BatchRenorm2d(4, r_max=3.0, d_max=5.0)
    for _ in range(5):
        brn(torch.randn(8, 4, 3, 3) * 2 + 1)
    plain = nn.BatchNorm2d(4)
    plain.load_state_dict(brn.state_dict(), strict=True)
    brn.eval(), plain.eval()
    x = torch.randn(3, 4, 3, 3)
    torch.testing.assert_close(brn(x), plain(x), rtol=0, atol=0)


def test_paper_schedule_values():
    r_max, d_max = bn.paper_r_max(), bn.paper_d_max()
    assert [r_max(s) for s in (0, 5000, 22_500, 40_000, 100_000)] == [1.0, 1.0, 2.0, 3.0, 3.0]
    assert [d_max(s) for s in (0, 5000, 15_000, 25_000, 100_000)] == [0.0, 0.0, 2.5, 5.0, 5.0]
    assert float(r_max(torch.tensor(22_500))) == pytest.approx(2.0)
    r_scaled, d_scaled = bn.scaled_paper_schedules(16_000)
    assert (r_scaled.start_step, r_scaled.end_step, d_scaled.end_step) == (500, 4000, 2500)


def test_schedule_follows_num_batches_tracked_through_state_dict():
    ramp = bn.LinearRamp(1.0, 3.0, 2, 6)
    brn = bn.BatchRenorm1d(3, r_max=ramp, d_max=bn.LinearRamp(0.0, 5.0, 2, 4))
    values = []
    for _ in range(4):
        values.append(brn.current_r_max)
        brn(torch.randn(10, 3))
    assert values == [1.0, 1.0, 1.0, 1.5]
    resumed = bn.BatchRenorm1d(3, r_max=ramp, d_max=bn.LinearRamp(0.0, 5.0, 2, 4))
    resumed.load_state_dict(brn.state_dict(), strict=True)
    assert resumed.current_r_max == brn.current_r_max == 2.0
    assert resumed.current_d_max == 5.0


def test_clip_fractions_reported():
    brn = bn.BatchRenorm2d(4, r_max=1.0, d_max=0.0)
    brn(torch.randn(8, 4, 2, 2) * 3 + 1)
    assert float(brn.r_clip_fraction) == 1.0 and float(brn.d_clip_fraction) == 1.0
    loose = bn.BatchRenorm2d(4, r_max=1e6, d_max=1e6)
    loose(torch.randn(8, 4, 2, 2))
    assert float(loose.r_clip_fraction) == 0.0


@pytest.mark.parametrize("microbatch", [None, 4])
def test_fast_equals_reference(microbatch):
    a = bn.BatchRenorm2d(3, r_max=1.5, d_max=0.5, microbatch=microbatch).double()
    _perturb_running_stats(a)
    b = copy.deepcopy(a)
    b.impl = "reference"
    x = (torch.randn(8, 3, 4, 4, dtype=torch.float64) * 2).requires_grad_(True)
    gy = torch.randn_like(x)
    ya, yb = a(x), b(x)
    torch.testing.assert_close(ya, yb)
    for ga, gb in zip(
        torch.autograd.grad(ya, [x, a.weight, a.bias], gy),
        torch.autograd.grad(yb, [x, b.weight, b.bias], gy),
    ):
        torch.testing.assert_close(ga, gb)
    torch.testing.assert_close(a.running_var, b.running_var)


def test_linear_ramp_tensor_step_equals_integer_step():
    ramp = bn.LinearRamp(1.0, 3.0, 5, 9)
    for step in [0, 4, 5, 6, 7, 9, 10, 100]:
        assert float(ramp(torch.tensor(step))) == pytest.approx(ramp(step)), step
    assert ramp(0) == 1.0 and ramp(100) == 3.0
    falling = bn.LinearRamp(5.0, 0.0, 2, 4)
    for step in [0, 2, 3, 4, 8]:
        assert float(falling(torch.tensor(step))) == pytest.approx(falling(step)), step


def test_is_batch_renorm():
    assert bn.is_batch_renorm(bn.BatchRenorm1d(3)) and bn.is_batch_renorm(bn.BatchRenorm3d(3))
    assert isinstance(bn.BatchRenorm2d(3), bn.BatchRenormBase)
    assert not bn.is_batch_renorm(bn.BatchNorm2d(3)) and not bn.is_batch_renorm(nn.BatchNorm2d(3))
    assert isinstance(bn.BatchNorm2d(3), bn.BatchNormBase)
    # no class of ours shadows torch's _NormBase, the parent of _BatchNorm (importing it is fine)
    from torch.nn.modules.batchnorm import _NormBase

    from bn import _base, batchnorm, batchrenorm, convert

    modules = (bn, _base, batchnorm, batchrenorm, convert)
    assert all(getattr(m, "_NormBase", _NormBase) is _NormBase for m in modules)
    assert set(bn.__all__) <= set(dir(bn)) and not any(n.startswith("_") for n in bn.__all__)


def _second_order_grads(f, x, params):
    """Gradients of a gradient penalty: ``∂/∂(x, θ) (‖∂L/∂x‖² + Σ‖∂L/∂θ‖²)``, ``L = Σ f(x)³``."""
    x = x.clone().requires_grad_(True)
    gx, *gp = torch.autograd.grad((f(x, *params) ** 3).sum(), [x, *params], create_graph=True)
    penalty = gx.square().sum() + sum(g.square().sum() for g in gp)
    return torch.autograd.grad(penalty, [x, *params])


@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("shape", [(8, 6), (8, 6, 3, 3)], ids=["2d", "4d"])
def test_second_derivatives_equal_algorithm_1(shape, impl, microbatch, affine, bias):
    """With r and d clipped in some channels and not others, the second derivatives of every
    path (the compiled kernel for 2-D inputs included) are those of Algorithm 1 written out in
    autograd (bn.functional.batch_renorm, r and d stop-gradient)."""
    cls = bn.BatchRenorm1d if len(shape) == 2 else bn.BatchRenorm2d
    layer = cls(6, r_max=1.3, d_max=0.2, impl=impl, microbatch=microbatch, affine=affine, bias=bias)
    layer = layer.double()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        layer.running_mean.uniform_(-1, 1, generator=g)
        layer.running_var.uniform_(0.3, 3, generator=g)
    params = [p.detach().uniform_(0.5, 1.5).requires_grad_(True) for p in layer.parameters()]
    names = [n for n, _ in layer.named_parameters()]
    x = torch.randn(*shape, dtype=torch.float64, generator=g) * 1.5 + 0.3

    def ours(x, *params):
        buffers = {k: b.clone() for k, b in layer.named_buffers()}
        return torch.func.functional_call(layer, (dict(zip(names, params)), buffers), (x,))

    def algorithm_1(x, *params):
        weight, bias_ = (*params, None, None)[:2] if affine else (None, None)
        return bn.functional.batch_renorm(
            x,
            layer.running_mean.clone(),
            layer.running_var.clone(),
            weight,
            bias_,
            r_max=1.3,
            d_max=0.2,
            momentum=layer.momentum,
            eps=layer.eps,
            microbatch=microbatch,
        )

    ours(x, *params)
    r_clipped = float(layer.r_clip_fraction)
    assert 0 < r_clipped < 1 or 0 < float(layer.d_clip_fraction) < 1
    for a, b in zip(
        _second_order_grads(ours, x, params), _second_order_grads(algorithm_1, x, params)
    ):
        torch.testing.assert_close(a, b)


def test_clip_fractions_count_both_sides():
    """r is clipped below 1/r_max as well as above r_max, d below -d_max as well as above d_max:
    one channel of each of four on each side gives exactly one half."""
    brn = bn.BatchRenorm1d(4, r_max=2.0, d_max=0.5).double()
    with torch.no_grad():
        brn.running_var.copy_(torch.tensor([0.01, 100.0, 1.0, 1.0]))  # σ_B/σ ≈ 10, 0.1, 1, 1
        brn.running_mean.copy_(torch.tensor([-3.0, 10.0, 0.0, 0.0]))  # d ≈ 30, −1, 0, 0
    x = torch.randn(64, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    brn(x / x.std(0) * 0.9)
    r, d, _, _ = brn._last
    assert (r[0, 0] > 2 and r[0, 1] < 0.5) and (d[0, 0] > 0.5 and d[0, 1] < -0.5)
    assert float(brn.r_clip_fraction) == 0.5
    assert float(brn.d_clip_fraction) == 0.5


@pytest.mark.parametrize("renorm", [True, False], ids=["brn", "bn"])
@pytest.mark.parametrize("microbatch", [None, 4])
def test_large_channels_last_inputs_equal_contiguous_ones(renorm, microbatch):
    """Inputs past the small-input threshold in channels-last take their own routes (the Welford
    statistics per microbatch, a channels-last backward pass): the same numbers as contiguous
    ones in float64, and a whole batch keeps the layout in its output and input gradient."""
    shape = (16, 24, 14, 14)  # more values than bn.functional.SMALL
    kw = {"r_max": 1.5, "d_max": 0.5} if renorm else {}
    cls = bn.BatchRenorm2d if renorm else bn.BatchNorm2d
    layers = [cls(24, microbatch=microbatch, **kw).double() for _ in range(2)]
    for layer in layers:
        _perturb_running_stats(layer)
        with torch.no_grad():
            layer.weight.copy_(torch.linspace(0.5, 2, 24))
            layer.bias.copy_(torch.linspace(-1, 1, 24))
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(shape, dtype=torch.float64, generator=g) * 3 + 2
        gy = torch.randn(shape, dtype=torch.float64, generator=g)
        outs = []
        for layer, fmt in zip(layers, (torch.contiguous_format, torch.channels_last)):
            xi = x.clone(memory_format=fmt).requires_grad_(True)
            y = layer(xi)
            y.backward(gy.contiguous(memory_format=fmt))
            outs.append((y, xi.grad, layer.weight.grad, layer.bias.grad))
            if fmt is torch.channels_last and microbatch is None:
                assert y.is_contiguous(memory_format=fmt)
                assert xi.grad.is_contiguous(memory_format=fmt)
        for a, b in zip(*outs):
            torch.testing.assert_close(b, a)
        for layer in layers:
            layer.weight.grad = layer.bias.grad = None
    torch.testing.assert_close(layers[1].running_mean, layers[0].running_mean)
    torch.testing.assert_close(layers[1].running_var, layers[0].running_var)
