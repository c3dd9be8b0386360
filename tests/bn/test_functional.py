"""bn.functional: Batch Renorm's Algorithm 1 as the reference, and every layer path equal to it."""

import copy

import pytest
import torch
import torch.nn.functional as F

import bn
from bn import compiled, functional
from bn.functional import SMALL, BatchRenormFunction, batch_renorm, batch_stats
from tests.compiled_ops import built_or_skip

CLASSES = {2: bn.BatchRenorm1d, 3: bn.BatchRenorm1d, 4: bn.BatchRenorm2d, 5: bn.BatchRenorm3d}


def _perturbed(layer, seed=0):
    """``layer`` with moving statistics and affine parameters away from their initial values."""
    g = torch.Generator().manual_seed(seed)
    c = layer.num_features
    with torch.no_grad():
        layer.running_mean.copy_(torch.randn(c, generator=g, dtype=torch.float64) * 0.5)
        layer.running_var.copy_(torch.rand(c, generator=g, dtype=torch.float64) + 0.5)
        if layer.weight is not None:
            layer.weight.copy_(torch.rand(c, generator=g, dtype=torch.float64) + 0.5)
        if layer.bias is not None:
            layer.bias.copy_(torch.randn(c, generator=g, dtype=torch.float64))
    return layer


def _reference_step(layer, x, gy):
    """One training step of ``bn.functional.batch_renorm`` with ``layer``'s state (not changed)."""
    w = None if layer.weight is None else layer.weight.detach().clone().requires_grad_(True)
    b = None if layer.bias is None else layer.bias.detach().clone().requires_grad_(True)
    mean, var = layer.running_mean.clone(), layer.running_var.clone()
    x = x.detach().clone().requires_grad_(True)
    step = int(layer.num_batches_tracked)
    bounds = [v(step) if callable(v) else v for v in (layer.r_max, layer.d_max)]
    momentum = 1.0 / (step + 1) if layer.momentum is None else layer.momentum
    y = batch_renorm(
        x, mean, var, w, b, r_max=bounds[0], d_max=bounds[1], momentum=momentum,
        eps=layer.eps, microbatch=layer.microbatch,
    )  # fmt: skip
    inputs = [t for t in (x, w, b) if t is not None]
    grads = torch.autograd.grad(y, inputs, gy)
    return y.detach(), grads, mean, var


def _layer_step(layer, x, gy):
    x = x.detach().clone().requires_grad_(True)
    y = layer(x)
    inputs = [t for t in (x, layer.weight, layer.bias) if t is not None]
    return y.detach(), torch.autograd.grad(y, inputs, gy)


def _assert_equal_to_reference(layer, shape, steps=3, offset=1.0, tol=1e-12):
    clipped = 0.0
    for _ in range(steps):
        x = torch.randn(shape, dtype=torch.float64) * 2 + offset
        gy = torch.randn(shape, dtype=torch.float64)
        y_ref, g_ref, mean_ref, var_ref = _reference_step(layer, x, gy)
        y, g = _layer_step(layer, x, gy)
        torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
        for got, want in zip(g, g_ref):
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        torch.testing.assert_close(layer.running_mean, mean_ref, rtol=tol, atol=tol)
        torch.testing.assert_close(layer.running_var, var_ref, rtol=tol, atol=tol)
        clipped += float(layer.r_clip_fraction) + float(layer.d_clip_fraction)
    assert int(layer.num_batches_tracked) == steps
    return clipped


# -- the reference itself ------------------------------------------------------------------------
@pytest.mark.parametrize("microbatch", [None, 4])
def test_reference_with_rmax1_dmax0_is_bn(microbatch):
    x = (torch.randn(16, 3, 4, 4, dtype=torch.float64) * 2 + 1).requires_grad_(True)
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    mean, var = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
    y = batch_renorm(x, mean, var, w, b, r_max=1.0, d_max=0.0, microbatch=microbatch)
    want = torch.cat([F.batch_norm(xb, None, None, w, b, True) for xb in x.split(microbatch or 16)])
    torch.testing.assert_close(y, want)
    gy = torch.randn_like(x)
    for got, exp in zip(
        torch.autograd.grad(y, (x, w, b), gy), torch.autograd.grad(want, (x, w, b), gy)
    ):
        torch.testing.assert_close(got, exp)


def test_reference_updates_sigma_after_r_and_d():
    """Algorithm 1: r, d from the old μ, σ (unclipped: the output is inference BN's with the old
    μ, σ); then μ ← μ + α(μ_B − μ), σ ← σ + α(σ_B − σ), stored as σ² − ε."""
    eps, alpha = 1e-3, 0.25
    x = torch.randn(8, 3, 5, 5, dtype=torch.float64) * 2 + 1
    mu0, var0 = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
    mean, var = mu0.clone(), var0.clone()
    y = batch_renorm(x, mean, var, r_max=1e9, d_max=1e9, momentum=alpha, eps=eps)
    torch.testing.assert_close(y, F.batch_norm(x, mu0, var0, None, None, False, 0.0, eps))
    var_b, mu_b = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
    sigma0 = torch.sqrt(var0 + eps)
    torch.testing.assert_close(mean, mu0 + alpha * (mu_b - mu0))
    torch.testing.assert_close(
        torch.sqrt(var + eps), sigma0 + alpha * (torch.sqrt(var_b + eps) - sigma0)
    )


def test_reference_clips_r_and_d_without_gradient():
    x = (torch.randn(8, 2, 3, 3, dtype=torch.float64) * 5 + 3).requires_grad_(True)
    mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    y = batch_renorm(x, mean.clone(), var.clone(), r_max=1.5, d_max=0.5)
    with torch.no_grad():
        v, m = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
        r = (torch.sqrt(v + 1e-5) / torch.sqrt(var + 1e-5)).clamp(1 / 1.5, 1.5).view(1, -1, 1, 1)
        d = ((m - mean) / torch.sqrt(var + 1e-5)).clamp(-0.5, 0.5).view(1, -1, 1, 1)
    assert (r == 1.5).all() and (d == 0.5).all()  # both clipped
    want = F.batch_norm(x, None, None, None, None, True) * r + d  # r, d constants
    torch.testing.assert_close(y, want)
    gy = torch.randn_like(x)
    torch.testing.assert_close(*(torch.autograd.grad(t, x, gy)[0] for t in (y, want)))


def test_reference_rejects_a_microbatch_that_does_not_divide():
    with pytest.raises(ValueError, match="microbatch=3 does not divide the batch size 8"):
        batch_renorm(
            torch.randn(8, 2), torch.zeros(2), torch.ones(2), r_max=1.0, d_max=0.0, microbatch=3
        )


# -- every path of the layers equals the reference -----------------------------------------------
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("shape", [(16, 5, 7), (16, 3, 4, 4), (8, 2, 3, 4, 2)])
@pytest.mark.parametrize(
    "options",
    [{}, {"affine": False}, {"bias": False}, {"momentum": None}, {"eps": 1e-3, "momentum": 0.3}],
    ids=lambda o: ",".join(o) or "default",
)
def test_layer_equals_reference(impl, microbatch, shape, options):
    layer = CLASSES[len(shape)](
        shape[1], r_max=1.5, d_max=0.5, impl=impl, microbatch=microbatch, **options
    )
    clipped = _assert_equal_to_reference(_perturbed(layer.double()), shape)
    assert clipped > 0  # the clipping ran


@pytest.mark.parametrize("microbatch", [None, 4])
def test_layer_equals_reference_with_schedules(microbatch):
    layer = bn.BatchRenorm2d(
        3, r_max=bn.LinearRamp(1.0, 2.0, 0, 2), d_max=bn.LinearRamp(0.0, 1.0, 0, 2),
        microbatch=microbatch,
    ).double()  # fmt: skip
    _assert_equal_to_reference(_perturbed(layer), (8, 3, 4, 4), steps=4)


@pytest.mark.parametrize("microbatch", [None, 2, 8])
@pytest.mark.parametrize("offset", [1.0, 1e3])
def test_layer_equals_reference_on_large_inputs(microbatch, offset):
    """Inputs of >= 2^16 values: the sums-based statistics (two-pass when |mean| >> std) and the
    per-microbatch slices of the backward pass."""
    shape = (16, 4, 32, 34)
    layer = _perturbed(bn.BatchRenorm2d(4, r_max=1.5, d_max=0.5, microbatch=microbatch).double())
    with torch.no_grad():
        layer.running_mean.add_(offset)
    assert torch.Size(shape).numel() >= SMALL
    _assert_equal_to_reference(layer, shape, steps=2, offset=offset, tol=1e-9)


@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("options", [{}, {"affine": False}, {"bias": False}], ids=str)
def test_compiled_kernel_equals_reference(microbatch, options):
    layer = _perturbed(bn.BatchRenorm1d(6, r_max=1.5, d_max=0.5, microbatch=microbatch, **options))
    layer = layer.double()
    built_or_skip(compiled.renorm_op(), compiled.status())
    x = torch.randn(16, 6, dtype=torch.float64, requires_grad=True)
    assert "RenormTrain" in layer(x).grad_fn.name()
    layer.num_batches_tracked.zero_()
    _perturbed(layer)
    _assert_equal_to_reference(layer, (16, 6))


def test_identity_brn_equals_bn_on_every_path():
    """r_max = 1, d_max = 0 is BN, on the large-input fast path too."""
    for shape, microbatch in [((16, 4, 32, 34), None), ((16, 4, 32, 34), 4), ((12, 3), 4)]:
        cls = bn.BatchRenorm2d if len(shape) == 4 else bn.BatchRenorm1d
        brn = _perturbed(cls(shape[1], r_max=1.0, d_max=0.0, microbatch=microbatch).double())
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        y = brn(x)
        want = torch.cat(
            [
                F.batch_norm(xb, None, None, brn.weight, brn.bias, True)
                for xb in x.split(microbatch or 16)
            ]
        )
        torch.testing.assert_close(y, want)
        gy = torch.randn_like(y)
        torch.testing.assert_close(*(torch.autograd.grad(t, x, gy)[0] for t in (y, want)))


# -- the fast path's hand-written backward against finite differences ----------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "groups,route", [(1, "whole"), (3, "side-by-side"), (3, "per-slice")], ids=str
)
@pytest.mark.parametrize("shape", [(6, 3), (6, 3, 4)])
@pytest.mark.parametrize("renorm", [False, True])
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)], ids=str)
def test_fast_backward_gradcheck(monkeypatch, groups, route, shape, renorm, affine):
    if route == "per-slice":
        monkeypatch.setattr(functional, "SMALL", 0)  # small inputs take the large-input route
    g = torch.Generator().manual_seed(0)
    c = shape[1]
    x = torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.rand(c, generator=g, dtype=torch.float64) + 0.5 if affine[0] else None
    b = torch.randn(c, generator=g, dtype=torch.float64) if affine[1] else None
    r = torch.rand(groups, c, generator=g, dtype=torch.float64) + 0.5 if renorm else None
    d = torch.randn(groups, c, generator=g, dtype=torch.float64) if renorm else None
    count = functional.values_per_channel(x, groups)

    def f(x, *params):
        wb = iter(params)
        w_, b_ = (next(wb) if w is not None else None), (next(wb) if b is not None else None)
        mean, var = batch_stats(x.detach(), groups)  # recomputed as x moves: BN's backward
        return BatchRenormFunction.apply(x, w_, b_, mean, var, r, d, 1e-5, groups, None, count)

    params = [t.requires_grad_(True) for t in (w, b) if t is not None]
    assert torch.autograd.gradcheck(f, (x, *params))


# -- float16 / bfloat16 ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("shape", [(16, 6), (16, 3, 5, 5), (16, 4, 32, 34)])
def test_reduced_precision_input(dtype, impl, microbatch, shape):
    """Output and input gradient in the input's dtype, parameter gradients in the parameters',
    close to the float64 reference (statistics are taken in float32, as torch's kernels do)."""
    cls = CLASSES[len(shape)]
    layer = _perturbed(cls(shape[1], r_max=1.5, d_max=0.5, impl=impl, microbatch=microbatch))
    ref = copy.deepcopy(layer).double()
    x = torch.randn(shape) * 2 + 1
    gy = torch.randn(shape)
    y, grads = _layer_step(layer, x.to(dtype), gy.to(dtype))
    y_ref, grads_ref = _layer_step(ref, x.double(), gy.double())
    assert y.dtype == dtype and grads[0].dtype == dtype
    assert grads[1].dtype == grads[2].dtype == torch.float32
    tol = 2e-2 if dtype == torch.float16 else 1e-1
    torch.testing.assert_close(y.double(), y_ref, rtol=tol, atol=tol)
    torch.testing.assert_close(grads[0].double(), grads_ref[0], rtol=tol, atol=tol)
    for got, want in zip(grads[1:], grads_ref[1:]):
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * shape[0])
    torch.testing.assert_close(layer.running_var.double(), ref.running_var, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("microbatch", [None, 4])
def test_bn_reduced_precision_matches_torch(dtype, impl, microbatch):
    x = torch.randn(16, 3, 5, 5) * 2 + 1
    ours = bn.BatchNorm2d(3, impl=impl, microbatch=microbatch)
    y = ours(x.to(dtype))
    want = torch.cat(
        [F.batch_norm(xb, None, None, training=True) for xb in x.split(microbatch or 16)]
    )
    assert y.dtype == torch.nn.BatchNorm2d(3)(x.to(dtype)).dtype == dtype
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_large_float32_input_statistics_through_the_layer(microbatch, offset):
    """A float32 layer on >= 2^16 values whose mean may dwarf their spread (where E[x²] − E[x]²
    would cancel): output and moving statistics as the float64 reference's."""
    shape = (16, 4, 32, 34)
    layer = _perturbed(bn.BatchRenorm2d(4, r_max=1e3, d_max=1e3, microbatch=microbatch).double())
    with torch.no_grad():
        layer.running_mean.add_(offset)
    x = torch.randn(shape, dtype=torch.float64) * 0.5 + offset
    ref = copy.deepcopy(layer)
    y = layer.float()(x.float())
    y_ref = ref(x)
    assert x.numel() >= SMALL
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(layer.running_var.double(), ref.running_var, rtol=1e-4, atol=1e-5)
    bn_layer = bn.BatchNorm2d(4, microbatch=microbatch or 16)
    torch.testing.assert_close(
        bn_layer(x.float()).double(),
        torch.cat(
            [F.batch_norm(xb, None, None, training=True) for xb in x.split(microbatch or 16)]
        ),
        rtol=1e-3,
        atol=1e-3,
    )


@pytest.mark.parametrize("layer", [bn.BatchNorm2d, bn.BatchRenorm2d])
@pytest.mark.parametrize("microbatch", [None, 2])
def test_an_in_place_op_may_follow_the_layer(layer, microbatch):
    """A ReLU(inplace=True) follows most norm layers: the output must not be a view."""
    m = layer(3, microbatch=microbatch)
    x = torch.randn(4, 3, 5, 5, requires_grad=True)
    y = torch.relu_(m(x))
    y.sum().backward()
    ref = layer(3, microbatch=microbatch)
    x2 = x.detach().clone().requires_grad_()
    torch.relu(ref(x2)).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_one_cancelling_channel_takes_the_two_pass_route():
    """E[x²] − E[x]² cancels in a channel whose mean dwarfs its spread; one such channel among
    ordinary ones must still get an accurate variance (float32, >= 2^16 values)."""
    x = torch.randn(16, 4, 32, 34, dtype=torch.float64) * 0.5
    x[:, 2] += 1e4
    assert x.numel() >= SMALL
    mean, var = batch_stats(x.float())
    torch.testing.assert_close(var[0].double(), x.var((0, 2, 3), correction=0), rtol=1e-4, atol=0)
    torch.testing.assert_close(mean[0].double(), x.mean((0, 2, 3)), rtol=1e-6, atol=0)
