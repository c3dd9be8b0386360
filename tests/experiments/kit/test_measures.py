"""The mechanism measures (``experiments.kit.measures``), each against an independent computation
on a tiny network: Santurkar et al.'s G' on a 2-layer linear network by hand, β-smoothness on a
quadratic (the Hessian's top eigenvalue), the Jacobian of Linear+BN in inference mode in closed
form (γ/σ · W), singular values against ``torch.linalg.svdvals`` of an autograd Jacobian, the
isometry gap by hand and the mean |correlation| of constructed components."""

import math

import pytest
import torch
from torch import nn

import bn
from experiments.kit.measures import (
    first_last_gradient_ratio,
    gradient_ics,
    isometry_gap,
    jacobian_singular_values,
    landscape_along_gradient,
    mean_abs_correlation,
    spectrum_summary,
)


@pytest.fixture(autouse=True)
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_gradient_ics_on_a_two_layer_linear_network_by_hand():
    g = torch.Generator().manual_seed(0)
    w1 = nn.Parameter(torch.randn(4, 3, generator=g))
    w2 = nn.Parameter(torch.randn(2, 4, generator=g))
    x, y = torch.randn(3, 5, generator=g), torch.randn(2, 5, generator=g)
    model = nn.ParameterList([w1, w2])
    before = [w1.detach().clone(), w2.detach().clone()]
    lr = 0.1

    def loss_fn():
        return 0.5 * (w2 @ w1 @ x - y).square().sum()

    # by hand: r = W2 W1 x − y, G2 = r (W1 x)ᵀ, G1 = W2ᵀ r xᵀ; G'2 after W1 ← W1 − lr G1
    with torch.no_grad():
        r = w2 @ w1 @ x - y
        g1, g2 = w2.t() @ r @ x.t(), r @ (w1 @ x).t()
        w1_new = w1 - lr * g1
        g2_shifted = (w2 @ w1_new @ x - y) @ (w1_new @ x).t()
    first, second = gradient_ics(model, [[w1], [w2]], loss_fn, lr)
    assert first["ics"] == 0 and first["cosine"] == pytest.approx(1)  # nothing before layer 1
    assert second["ics"] == pytest.approx((g2 - g2_shifted).norm().item(), rel=1e-10)
    assert second["ics_relative"] == pytest.approx(second["ics"] / g2.norm().item(), rel=1e-10)
    cos = (g2 * g2_shifted).sum() / (g2.norm() * g2_shifted.norm())
    assert second["cosine"] == pytest.approx(cos.item(), rel=1e-10)
    assert torch.equal(w1, before[0]) and torch.equal(
        w2, before[1]
    )  # weights restored, bit for bit


def test_gradient_ics_with_weight_decay_moves_the_earlier_layer_by_the_optimizers_step():
    g = torch.Generator().manual_seed(2)
    w1, w2 = (
        nn.Parameter(torch.randn(4, 3, generator=g)),
        nn.Parameter(torch.randn(2, 4, generator=g)),
    )
    x, y = torch.randn(3, 5, generator=g), torch.randn(2, 5, generator=g)
    lr, wd = 0.1, 0.5

    def loss_fn():
        return 0.5 * (w2 @ w1 @ x - y).square().sum()

    with torch.no_grad():
        r = w2 @ w1 @ x - y
        w1_new = w1 - lr * (w2.t() @ r @ x.t() + wd * w1)
        g2 = r @ (w1 @ x).t()
        g2_shifted = (w2 @ w1_new @ x - y) @ (w1_new @ x).t()
    step = lambda p, grad: lr * (grad + wd * p)  # noqa: E731
    _, second = gradient_ics(nn.ParameterList([w1, w2]), [[w1], [w2]], loss_fn, lr, step)
    assert second["ics"] == pytest.approx((g2 - g2_shifted).norm().item(), rel=1e-10)


def test_measures_leave_a_noisy_bn_network_and_the_random_state_as_they_found_them():
    from experiments.nets.noisy import CovariateShiftNoise

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(5, 8), bn.BatchNorm1d(8), CovariateShiftNoise(), nn.Sigmoid(), nn.Linear(8, 3)
    )
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    layers = [
        [net[0].weight, net[0].bias, net[1].weight, net[1].bias],
        [net[4].weight, net[4].bias],
    ]
    state = {k: v.clone() for k, v in net.state_dict().items()}
    rng = torch.get_rng_state()

    def loss_fn():
        return nn.functional.cross_entropy(net(x), y)

    first, _ = gradient_ics(net, layers, loss_fn, 0.1)
    assert first["ics"] == 0  # the same noise at every call: nothing before layer 1 moved
    out = landscape_along_gradient(net, loss_fn, [1e-6])
    assert out["beta_smoothness"] < 100  # noise redrawn at each call would make this huge
    assert torch.equal(torch.get_rng_state(), rng)
    for k, v in net.state_dict().items():
        assert torch.equal(v, state[k]), k  # weights, BN statistics and its step count


def test_beta_smoothness_of_a_quadratic_is_the_top_eigenvalue():
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(1)))
    eigenvalues = torch.tensor([5.0, 2.0, 1.0, 0.5, 0.2, 0.1])
    hessian = q @ torch.diag(eigenvalues) @ q.t()
    w = nn.Parameter(3.0 * q[:, 0])  # along the top eigenvector: g = H w is too
    model = nn.ParameterList([w])
    out = landscape_along_gradient(model, lambda: 0.5 * w @ hessian @ w, [0.01, 0.05, 0.1])
    assert out["beta_smoothness"] == pytest.approx(5.0, rel=1e-10)
    # the loss at W − ηg = (1 − 5η)w is 0.5·5·(1 − 5η)²·9
    expected = [0.5 * 5 * (1 - 5 * eta) ** 2 * 9 for eta in (0.01, 0.05, 0.1)]
    assert out["losses"] == pytest.approx(expected, rel=1e-10)
    assert (out["loss_min"], out["loss_max"]) == pytest.approx((min(expected), max(expected)))
    assert out["grad_predictiveness"] == pytest.approx(5.0 * 0.1 * 5.0 * 3.0, rel=1e-10)
    assert torch.equal(w.detach(), 3.0 * q[:, 0])


def test_a_diverging_step_is_recorded_not_raised():
    w = nn.Parameter(torch.tensor([1.0]))
    model = nn.ParameterList([w])
    out = landscape_along_gradient(
        model, lambda: (w.square() * w.square().exp()).sum(), [1e-3, 100.0]
    )
    assert math.isinf(out["losses"][1]) and math.isfinite(out["loss_max"])
    assert out["loss_max"] == out["losses"][0]


def test_jacobian_of_linear_bn_in_inference_is_gamma_over_sigma_times_w():
    lin = nn.Linear(5, 4, bias=False)
    norm = bn.BatchNorm1d(4, eps=1e-3)
    with torch.no_grad():
        norm.running_var.copy_(torch.tensor([0.5, 2.0, 1.0, 4.0]))
        norm.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
        norm.weight.copy_(torch.tensor([1.5, 0.5, -1.0, 2.0]))
    layer = nn.Sequential(lin, norm).eval()
    x = torch.randn(3, 5)
    closed_form = (norm.weight / torch.sqrt(norm.running_var + norm.eps))[:, None] * lin.weight
    svals = jacobian_singular_values(lambda v: layer(v[None])[0], x)
    expected = torch.linalg.svdvals(closed_form.detach())
    torch.testing.assert_close(svals, expected.expand(3, -1))


def test_singular_values_match_an_autograd_jacobian():
    net = nn.Sequential(nn.Linear(4, 6), nn.Sigmoid(), nn.Linear(6, 3))
    x = torch.randn(2, 4)
    svals = jacobian_singular_values(net, x)
    for b in range(2):
        jac = torch.autograd.functional.jacobian(net, x[b])
        torch.testing.assert_close(svals[b], torch.linalg.svdvals(jac))
    s = spectrum_summary(torch.tensor([0.25, 0.5, 1.0, 2.0, 3.0]))
    assert s == pytest.approx({"sv_median": 1.0, "sv_min": 0.25, "sv_max": 3.0, "sv_in_band": 0.6})


def test_first_last_gradient_ratio():
    w1, w2 = nn.Parameter(torch.ones(2, 2)), nn.Parameter(torch.ones(2, 2))
    loss = 3 * w1.sum() + w2.sum()
    assert first_last_gradient_ratio([w1, w2], loss) == pytest.approx(3.0)


def test_isometry_gap_is_the_mean_decades_from_one():
    assert isometry_gap(torch.ones(3, 4)) == 0.0
    assert isometry_gap(torch.tensor([[10.0, 0.1], [1.0, 1.0]])) == pytest.approx(0.5)
    assert isometry_gap(torch.tensor([100.0, 1.0])) == pytest.approx(1.0)
    # a zero (a ReLU's inactive unit) counts as the floor, 6 decades, not as infinity
    assert isometry_gap(torch.tensor([0.0, 1.0])) == pytest.approx(3.0)
    assert isometry_gap(torch.tensor([0.0, 1.0]), floor=1e-2) == pytest.approx(1.0)


def _orthonormal_columns(n: int, k: int) -> torch.Tensor:
    """``k`` centred columns of ``n`` values, orthogonal and of norm 1 (correlation exactly 0)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, k, generator=g)
    q, _ = torch.linalg.qr(x - x.mean(0))
    return q - q.mean(0)  # already centred up to rounding: the span of centred columns


def test_mean_abs_correlation_of_independent_and_of_correlated_components():
    g = torch.Generator().manual_seed(1)
    independent = torch.randn(20_000, 5, generator=g) * torch.tensor([1.0, 3.0, 0.1, 2.0, 1.0])
    assert mean_abs_correlation(independent + 7.0) < 0.02  # ~ sqrt(2 / π / 20,000) = 0.006
    a, b, c = _orthonormal_columns(500, 3).unbind(1)
    rho = 0.8
    pair = torch.stack([a, rho * a + math.sqrt(1 - rho**2) * b], 1)  # corr exactly ρ
    assert mean_abs_correlation(pair) == pytest.approx(rho, abs=1e-12)
    three = torch.stack([3 * a + 1, -2 * (rho * a + math.sqrt(1 - rho**2) * b), 5 * c], 1)
    # of the six off-diagonal entries two are -ρ (the first two columns), four are 0
    assert mean_abs_correlation(three) == pytest.approx(2 * rho / 6, abs=1e-12)
    constant = torch.stack([a, torch.full_like(a, 2.0)], 1)
    assert mean_abs_correlation(constant) == 0.0
