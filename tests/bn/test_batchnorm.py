"""bn.BatchNorm1d/2d against torch.nn, the reference backward, and the BN paper's identities."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bn
from bn._base import TORCH_TAKES_BIAS

SHAPES = [
    (bn.BatchNorm1d, nn.BatchNorm1d, (12, 5)),
    (bn.BatchNorm1d, nn.BatchNorm1d, (12, 5, 7)),
    (bn.BatchNorm2d, nn.BatchNorm2d, (8, 4, 5, 3)),
]
OPTIONS = [
    {},
    {"affine": False},
    {"track_running_stats": False},
    {"momentum": None},
    pytest.param(
        {"bias": False},
        marks=pytest.mark.skipif(not TORCH_TAKES_BIAS, reason="torch.nn takes bias= from 2.14"),
    ),
    {"eps": 1e-3, "momentum": 0.3},
]


def _train_steps(layer, xs, gys):
    outs = []
    for x, gy in zip(xs, gys):
        x = x.clone().requires_grad_(True)
        y = layer(x)
        y.backward(gy)
        outs.append((y.detach(), x.grad))
    return outs


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("ours_cls,torch_cls,shape", SHAPES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_parity_with_torch(impl, ours_cls, torch_cls, shape, options):
    c = shape[1]
    theirs = torch_cls(c, **options).double()
    ours = ours_cls(c, impl=impl, **options).double()
    if theirs.weight is not None:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 2.0)
            if theirs.bias is not None:
                theirs.bias.uniform_(-1, 1)
    ours.load_state_dict(theirs.state_dict(), strict=True)

    xs = [torch.randn(shape, dtype=torch.float64) * 3 + 1 for _ in range(3)]
    gys = [torch.randn(shape, dtype=torch.float64) for _ in range(3)]
    for (y1, g1), (y2, g2) in zip(_train_steps(ours, xs, gys), _train_steps(theirs, xs, gys)):
        torch.testing.assert_close(y1, y2)
        torch.testing.assert_close(g1, g2)
    for p1, p2 in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(p1.grad, p2.grad)
    for (k1, b1), (k2, b2) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        assert k1 == k2
        torch.testing.assert_close(b1, b2)

    ours.eval(), theirs.eval()
    x = torch.randn(shape, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("ours_cls,torch_cls,shape", SHAPES)
def test_state_dict_loads_strict_both_ways(ours_cls, torch_cls, shape):
    c = shape[1]
    trained = ours_cls(c)
    for _ in range(3):
        trained(torch.randn(shape) * 2 + 3)
    theirs = torch_cls(c)
    theirs.load_state_dict(trained.state_dict(), strict=True)
    back = ours_cls(c)
    back.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(shape)
    for m in (trained, theirs, back):
        m.eval()
    torch.testing.assert_close(trained(x), theirs(x), rtol=0, atol=0)
    torch.testing.assert_close(back(x), theirs(x), rtol=0, atol=0)


def test_is_a_torch_batchnorm():
    layer = bn.BatchNorm2d(3)
    assert isinstance(layer, nn.modules.batchnorm._BatchNorm)
    assert isinstance(bn.BatchRenorm2d(3), nn.modules.batchnorm._BatchNorm)


@pytest.mark.slow
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("renorm", [False, True])
def test_reference_backward_gradcheck(groups, renorm):
    x = torch.randn(groups, 4, 3, 5, dtype=torch.float64, requires_grad=True)
    gamma = torch.rand(3, dtype=torch.float64, requires_grad=True) + 0.5
    beta = torch.randn(3, dtype=torch.float64, requires_grad=True)
    r = torch.rand(groups, 3, dtype=torch.float64) + 0.5 if renorm else None
    d = torch.randn(groups, 3, dtype=torch.float64) if renorm else None
    assert torch.autograd.gradcheck(
        lambda x, g, b: bn.functional.BatchNormFunction.apply(x, g, b, r, d, 1e-5)[0],
        (x, gamma, beta),
    )
    assert torch.autograd.gradcheck(
        lambda x: bn.functional.BatchNormFunction.apply(x, None, None, r, d, 1e-5)[0], (x,)
    )


def test_reference_backward_matches_autograd_of_algorithm_1():
    x = torch.randn(1, 16, 4, 6, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(4, dtype=torch.float64, requires_grad=True)
    beta = torch.randn(4, dtype=torch.float64, requires_grad=True)
    gy = torch.randn_like(x)
    y, mu_b, var_b = bn.functional.BatchNormFunction.apply(x, gamma, beta, None, None, 1e-5)
    grads = torch.autograd.grad(y, (x, gamma, beta), gy)
    mu = x.mean((1, 3), keepdim=True)
    var = x.var((1, 3), unbiased=False, keepdim=True)
    y_auto = gamma.view(1, 1, -1, 1) * (x - mu) / torch.sqrt(var + 1e-5) + beta.view(1, 1, -1, 1)
    grads_auto = torch.autograd.grad(y_auto, (x, gamma, beta), gy)
    torch.testing.assert_close(y, y_auto)
    torch.testing.assert_close(mu_b, mu)
    torch.testing.assert_close(var_b, var)
    for g1, g2 in zip(grads, grads_auto):
        torch.testing.assert_close(g1, g2)


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_scale_invariance(impl):
    """BN paper Sec. 3.3: BN((aW)u) = BN(Wu); d/du unchanged; d/d(aW) = (1/a) d/dW."""
    a = 7.0
    u = torch.randn(32, 10, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 10, dtype=torch.float64, requires_grad=True)
    layer = bn.BatchNorm1d(6, impl=impl, eps=1e-12).double()  # torch needs eps > 0
    gy = torch.randn(32, 6, dtype=torch.float64)

    y1 = layer(u @ w.t())
    g_u1, g_w1 = torch.autograd.grad(y1, (u, w), gy)
    aw = (a * w).detach().requires_grad_(True)
    y2 = layer(u @ aw.t())
    g_u2, g_aw = torch.autograd.grad(y2, (u, aw), gy)
    torch.testing.assert_close(y1, y2)
    torch.testing.assert_close(g_u1, g_u2)
    torch.testing.assert_close(g_aw, g_w1 / a)


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("a", [0.3, 7.0])
def test_scale_invariance_with_eps_is_a_rescaled_eps(impl, a):
    """With ε > 0 the identity is exact in this form: BN_ε(aWu) = BN_{ε/a²}(Wu), values and
    input gradients (van Laarhoven 2017); BN_ε(aWu) itself differs from BN_ε(Wu)."""
    eps = 0.1  # large, so that ignoring it would fail
    u = torch.randn(16, 10, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 10, dtype=torch.float64) * 0.3
    gy = torch.randn(16, 6, dtype=torch.float64)
    scaled = bn.BatchNorm1d(6, impl=impl, eps=eps).double()(u @ (a * w).t())
    rescaled = bn.BatchNorm1d(6, impl=impl, eps=eps / a**2).double()(u @ w.t())
    plain = bn.BatchNorm1d(6, impl=impl, eps=eps).double()(u @ w.t())
    torch.testing.assert_close(scaled, rescaled)
    torch.testing.assert_close(
        torch.autograd.grad(scaled, u, gy)[0], torch.autograd.grad(rescaled, u, gy)[0]
    )
    assert not torch.allclose(scaled, plain, atol=1e-4)


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_identity_recovery(impl):
    """γ = sqrt(Var[x] + ε), β = E[x] (the batch's) gives back the input."""
    x = torch.randn(50, 4, 3, 3, dtype=torch.float64) * 5 - 2
    layer = bn.BatchNorm2d(4, impl=impl).double()
    with torch.no_grad():
        layer.weight.copy_(torch.sqrt(x.var((0, 2, 3), unbiased=False) + layer.eps))
        layer.bias.copy_(x.mean((0, 2, 3)))
    torch.testing.assert_close(layer(x), x)


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("shape", [(12, 3), (12, 3, 4, 4)])
def test_microbatch_of_whole_batch_is_plain_bn(impl, shape):
    cls = bn.BatchNorm1d if len(shape) == 2 else bn.BatchNorm2d
    plain, micro = cls(3, impl=impl).double(), cls(3, impl=impl, microbatch=12).double()
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(shape, dtype=torch.float64)
    y1, y2 = plain(x), micro(x)
    torch.testing.assert_close(y1, y2)
    torch.testing.assert_close(*(torch.autograd.grad(y, x, gy)[0] for y in (y1, y2)))
    torch.testing.assert_close(plain.running_var, micro.running_var)


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("shape", [(12, 3), (12, 3, 4, 4)])
def test_microbatch_is_per_group_bn(impl, shape):
    cls = bn.BatchNorm1d if len(shape) == 2 else bn.BatchNorm2d
    layer = cls(3, impl=impl, microbatch=4).double()
    with torch.no_grad():
        layer.weight.uniform_(0.5, 2), layer.bias.uniform_(-1, 1)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True) * 2 + 1
    gy = torch.randn(shape, dtype=torch.float64)
    y = layer(x)
    expected = torch.cat(
        [
            F.batch_norm(xb, None, None, layer.weight, layer.bias, True, 0.0, layer.eps)
            for xb in x.split(4)
        ]
    )
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(
        torch.autograd.grad(y, x, gy)[0], torch.autograd.grad(expected, x, gy)[0]
    )
    # Running statistics: one update with the mean of the microbatches' mean and unbiased variance.
    dims = [0, *range(2, len(shape))]
    means = torch.stack([xb.mean(dims) for xb in x.detach().split(4)])
    uvars = torch.stack([xb.var(dims, unbiased=True) for xb in x.detach().split(4)])
    torch.testing.assert_close(layer.running_mean, 0.1 * means.mean(0))
    torch.testing.assert_close(layer.running_var, 0.9 + 0.1 * uvars.mean(0))
    assert int(layer.num_batches_tracked) == 1


def test_fast_and_reference_agree_in_float32():
    x = torch.randn(16, 8, 6, 6)
    fast, ref = bn.BatchNorm2d(8, microbatch=4), bn.BatchNorm2d(8, impl="reference", microbatch=4)
    torch.testing.assert_close(fast(x), ref(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fast.running_var, ref.running_var)


def test_eval_uses_running_stats_and_does_not_update():
    layer = bn.BatchNorm2d(3)
    layer(torch.randn(8, 3, 4, 4) + 5)
    before = copy.deepcopy(layer.state_dict())
    layer.eval()
    x = torch.randn(2, 3, 4, 4)
    expected = (x - layer.running_mean.view(1, -1, 1, 1)) / torch.sqrt(
        layer.running_var.view(1, -1, 1, 1) + layer.eps
    )
    torch.testing.assert_close(layer(x), expected)
    for k, v in layer.state_dict().items():
        torch.testing.assert_close(v, before[k])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cls", [bn.BatchNorm2d, bn.BatchRenorm2d])
def test_reference_keeps_the_input_dtype(dtype, cls):
    x = torch.randn(8, 3, 4, 4, dtype=dtype, requires_grad=True)
    for impl in ("fast", "reference"):
        layer = cls(3, impl=impl)
        y = layer(x)
        assert y.dtype == nn.BatchNorm2d(3)(x).dtype == dtype, impl
        y.sum().backward()
        assert x.grad.dtype == dtype and layer.weight.grad.dtype == torch.float32
