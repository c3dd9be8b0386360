"""Batch Renorm's gradient ablations (``ablation=``, open question 3, "is BRN just gradient
scaling?"): (c) BN's forward with the input gradient scaled by BRN's ``r``; (d) BRN's forward
with BN's input gradient. Checked in float64 against BN and BRN computed independently."""

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.gradcheck import GradcheckError

import bn
from bn.functional import ScaleGrad, group_view

C, G = 3, 4  # channels, microbatches of 2 examples


def _layer(ablation, microbatch=2):
    m = bn.BatchRenorm2d(C, r_max=3.0, d_max=5.0, microbatch=microbatch, ablation=ablation)
    m = m.double()
    with torch.no_grad():
        m.weight.copy_(torch.tensor([1.5, -0.7, 2.0]))
        m.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
        m.running_mean.fill_(0.3)
        m.running_var.fill_(1.2)
    return m


def _input(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = 2.0 * torch.randn(8, C, 4, 4, generator=g, dtype=torch.float64) + 0.5
    upstream = torch.randn(8, C, 4, 4, generator=g, dtype=torch.float64)
    return x.requires_grad_(), upstream


def _run(m, x, upstream):
    y = m(x)
    grads = torch.autograd.grad(y, (x, m.weight, m.bias), upstream)
    return y.detach(), grads


def _bn_per_microbatch(x, weight, bias, eps=1e-5):
    """BN with each microbatch's statistics, written out with torch.nn.functional."""
    parts = [F.batch_norm(xb, None, None, weight, bias, True, 0.0, eps) for xb in x.chunk(G)]
    return torch.cat(parts)


def _r(m):
    r, _, r_max, _ = m._last
    return r.clamp(1 / r_max, r_max)  # (G, C)


def _times_r(grad, r):
    return (group_view(grad, G) * r[:, None, :, None]).view_as(grad)


def test_bn_forward_r_grad_is_bn_forward_and_r_times_bns_input_gradient():
    x, up = _input()
    m = _layer("bn_forward_r_grad")
    y, (dx, dw, db) = _run(m, x, up)
    y_bn = _bn_per_microbatch(x, m.weight, m.bias)
    dx_bn, dw_bn, db_bn = torch.autograd.grad(y_bn, (x, m.weight, m.bias), up)
    r = _r(m)
    assert not torch.allclose(r, torch.ones_like(r))  # a test where r matters
    torch.testing.assert_close(y, y_bn.detach())
    torch.testing.assert_close(dx, _times_r(dx_bn, r))
    torch.testing.assert_close(dw, dw_bn)  # γ and β get BN's gradients
    torch.testing.assert_close(db, db_bn)


def test_renorm_forward_bn_grad_is_brns_forward_and_bns_input_gradient():
    x, up = _input(1)
    m, brn = _layer("renorm_forward_bn_grad"), _layer(None)
    y, (dx, dw, db) = _run(m, x, up)
    y_brn, (dx_brn, dw_brn, db_brn) = _run(brn, x, up)
    torch.testing.assert_close(y, y_brn, rtol=0, atol=0)  # BRN's forward, bit for bit
    y_bn = _bn_per_microbatch(x, m.weight, m.bias)
    (dx_bn,) = torch.autograd.grad(y_bn, (x,), up)
    torch.testing.assert_close(dx, dx_bn)  # BN's input gradient ...
    torch.testing.assert_close(dx_brn, _times_r(dx_bn, _r(brn)))  # ... which BRN multiplies by r
    torch.testing.assert_close(dw, dw_brn)  # γ and β get BRN's gradients
    torch.testing.assert_close(db, db_brn)


@pytest.mark.parametrize("ablation", ["bn_forward_r_grad", "renorm_forward_bn_grad"])
def test_ablations_keep_brns_moving_statistics(ablation):
    x, up = _input(2)
    m, brn = _layer(ablation), _layer(None)
    for _ in range(3):
        _run(m, x, up), _run(brn, x, up)
    torch.testing.assert_close(m.running_mean, brn.running_mean, rtol=0, atol=0)
    torch.testing.assert_close(m.running_var, brn.running_var, rtol=0, atol=0)
    m.eval(), brn.eval()
    torch.testing.assert_close(m(x), brn(x), rtol=0, atol=0)  # the same inference


def test_off_by_default_and_the_same_computation_as_before():
    assert bn.BatchRenorm2d(C).ablation is None and "ablation" not in repr(bn.BatchRenorm2d(C))
    x, up = _input(3)
    m = _layer(None)
    y, grads = _run(m, x, up)
    ref = bn.functional.batch_renorm(
        x, torch.full((C,), 0.3, dtype=torch.float64), torch.full((C,), 1.2, dtype=torch.float64),
        m.weight, m.bias, r_max=3.0, d_max=5.0, momentum=0.01, eps=1e-5, microbatch=2,
    )  # fmt: skip
    torch.testing.assert_close(y, ref.detach())
    torch.testing.assert_close(grads[0], torch.autograd.grad(ref, x, up)[0])


def test_scale_grad_is_identity_forward_and_scales_backward():
    x = torch.randn(8, C, 2, 2, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(G, C, dtype=torch.float64) + 0.5
    assert torch.equal(ScaleGrad.apply(x, scale, G), x)
    (dx,) = torch.autograd.grad(ScaleGrad.apply(x, scale, G).sum(), x)
    torch.testing.assert_close(dx, _times_r(torch.ones_like(x), scale))
    with pytest.raises(GradcheckError):  # on purpose not the derivative
        torch.autograd.gradcheck(lambda t: ScaleGrad.apply(t, scale, G), (x,))


def test_an_in_place_activation_after_an_ablation_layer():
    x, _ = _input(4)
    y = torch.relu_(_layer("bn_forward_r_grad")(x))
    y.sum().backward()
    assert x.grad is not None


def test_bad_ablations_are_refused():
    with pytest.raises(ValueError, match="ablation='scaled' is not one of"):
        bn.BatchRenorm2d(C, ablation="scaled")
    with pytest.raises(ValueError, match="set sync_stats=False and impl='fast'"):
        bn.BatchRenorm2d(C, ablation="bn_forward_r_grad", impl="reference")
