"""The non-Gaussianity estimators (open question 2) on samples of known distributions:
excess kurtosis 0 (normal), -1.2 (uniform), 3 (Laplace); negentropy 0 for the normal and the
values that quadrature of log cosh gives for the others."""

import math

import pytest
import torch

from experiments.kit.probes import LOGCOSH_NORMAL, excess_kurtosis, negentropy

N = 400_000
# (E[log cosh z] - E[log cosh ν])² for unit-variance uniform and Laplace z (trapezoid rule, 4e6 points)
NEGENTROPY = {
    "uniform": (0.40133789310111745 - LOGCOSH_NORMAL) ** 2,
    "laplace": (0.3382367723155622 - LOGCOSH_NORMAL) ** 2,
}


def _samples(kind: str, rows: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if kind == "normal":
        return 3.0 * torch.randn(rows, N, generator=g, dtype=torch.float64) + 1.0
    u = torch.rand(rows, N, generator=g, dtype=torch.float64)
    if kind == "uniform":
        return 5.0 * u - 2.0
    return -torch.sign(u - 0.5) * torch.log1p(-2 * (u - 0.5).abs())  # Laplace by inversion


@pytest.mark.parametrize("kind,kurtosis", [("normal", 0.0), ("uniform", -1.2), ("laplace", 3.0)])
def test_excess_kurtosis_of_known_distributions(kind, kurtosis):
    k = excess_kurtosis(_samples(kind))
    assert k.shape == (2,)
    torch.testing.assert_close(k, torch.full_like(k, kurtosis), atol=0.06, rtol=0)


def test_negentropy_is_zero_for_a_normal_sample():
    assert negentropy(_samples("normal")).max() < 2e-5


@pytest.mark.parametrize("kind", ["uniform", "laplace"])
def test_negentropy_of_known_distributions(kind):
    j = negentropy(_samples(kind))
    torch.testing.assert_close(j, torch.full_like(j, NEGENTROPY[kind]), rtol=0.1, atol=0)
    assert j.min() > 20 * negentropy(_samples("normal")).max()


def test_the_gaussian_reference_matches_a_sample():
    z = torch.randn(4_000_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert math.isclose(
        (torch.logaddexp(z, -z) - math.log(2)).mean().item(), LOGCOSH_NORMAL, abs_tol=1e-3
    )


def test_estimators_are_scale_and_shift_invariant_and_nan_for_a_constant_row():
    x = _samples("laplace", rows=1)
    torch.testing.assert_close(excess_kurtosis(7 * x - 3), excess_kurtosis(x))
    torch.testing.assert_close(negentropy(7 * x - 3), negentropy(x))
    assert excess_kurtosis(torch.ones(1, 10)).isnan().all()
