"""scripts/analysis/power.py: the power of each rule's test against textbook values and against
simulation, the pilot SD's upper limit, and the seed search."""

import math

import numpy as np
import pytest
from scipy import stats

from scripts.analysis import power


def _simulated(n: int, true_mean: float, sd: float, decide, draws: int = 200_000) -> float:
    """The share of ``draws`` simulated pilots of ``n`` seeds whose 95% t-interval ``decide``
    accepts (seeded: the same numbers every run)."""
    rng = np.random.default_rng(12345)
    x = rng.normal(true_mean, sd, size=(draws, n))
    mean, se = x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(n)
    t = stats.t.ppf(0.975, n - 1)
    return float(decide(mean - t * se, mean + t * se).mean())


def test_directional_power_is_the_textbook_one_sample_t():
    # a one-sample t test at two-sided 5% (one-sided 2.5%), effect 0.5 SD: 44 for 90% power
    # (G*Power, Cohen 1988); the normal approximation alone would say 43.
    need = power.seeds_for(lambda n, sd: power.power_directional(0.5, sd, n), 1.0, 10**9)
    assert need.n == 44
    assert (
        power.power_directional(0.5, 1.0, 43) < power.POWER <= power.power_directional(0.5, 1.0, 44)
    )


@pytest.mark.parametrize(("n", "effect"), [(3, 1.0), (8, 0.6), (20, 0.3)])
def test_directional_power_matches_simulation(n, effect):
    exact = power.power_directional(effect, 1.0, n)
    assert _simulated(n, effect, 1.0, lambda lo, hi: lo > 0) == pytest.approx(exact, abs=0.004)


def test_a_directional_test_at_no_effect_rejects_at_its_level():
    assert power.power_directional(0.0, 1.0, 12) == pytest.approx(power.ALPHA_ONE_SIDED)


@pytest.mark.parametrize(
    ("n", "margin", "assumed"), [(5, 1.5, 0.0), (12, 0.8, 0.0), (30, 0.5, 0.2)]
)
def test_equivalence_power_matches_simulation(n, margin, assumed):
    exact = power.power_equivalence(margin, 1.0, n, assumed)
    inside = lambda lo, hi: (lo > -margin) & (hi < margin)  # noqa: E731
    assert _simulated(n, assumed, 1.0, inside) == pytest.approx(exact, abs=0.004)


def test_equivalence_needs_more_seeds_than_either_one_sided_test():
    tost = power.seeds_for(lambda n, sd: power.power_equivalence(0.5, sd, n), 1.0, 10**9).n
    one = power.seeds_for(lambda n, sd: power.power_directional(0.5, sd, n), 1.0, 10**9).n
    assert tost > one


def test_the_pilot_sd_is_used_at_its_upper_confidence_limit():
    # chi-square: with 4 degrees of freedom the 80% upper limit is sqrt(4 / 1.6488) = 1.5576 x
    assert power.sd_upper(1.0, 4) == pytest.approx(math.sqrt(4 / stats.chi2.ppf(0.2, 4)))
    assert power.sd_upper(1.0, 4) == pytest.approx(1.5576, abs=1e-4)
    assert power.sd_upper(2.0, 1) > 2 * 3.9  # one degree of freedom: almost 4 x
    need = power.seeds_for(lambda n, sd: power.power_directional(0.5, sd, n), 1.0, 4)
    assert need.sd_used == pytest.approx(1.5576, abs=1e-4) and need.n > 44
    with pytest.raises(ValueError, match="at least 2 values"):
        power.sd_upper(1.0, 0)


def test_the_seed_search_returns_the_fewest_seeds_with_enough_power():
    for effect in (0.2, 0.7, 1.3, 3.0):
        at = lambda n, sd, e=effect: power.power_directional(e, sd, n)  # noqa: E731
        need = power.seeds_for(at, 1.0, 10**9)
        sd = need.sd_used
        assert at(need.n, sd) >= power.POWER
        assert need.n == 2 or at(need.n - 1, sd) < power.POWER


def test_an_effect_too_small_for_any_affordable_count_says_so():
    need = power.seeds_for(lambda n, sd: power.power_directional(0.01, sd, n), 1.0, 4)
    assert need.n is None and "more than 1000 seeds" in need.text()


def test_a_zero_pilot_spread_needs_the_fewest_seeds():
    assert power.seeds_for(lambda n, sd: 0.0, 0.0, 3, least=5).n == 5


def test_equivalence_power_of_a_spread_far_inside_the_margin_is_near_one():
    # the chi-square's mass sits far below the largest usable spread: a quadrature over the
    # whole range of s would miss it and report no power at all
    assert power.power_equivalence(0.003, 0.00129, 50) > 0.999
    assert power.power_equivalence(0.003, 0.00129, 5) == pytest.approx(0.93, abs=0.01)


@pytest.mark.parametrize(("n", "distance"), [(5, -1.0), (12, -0.4), (20, 0.2)])
def test_the_power_to_refute_matches_simulation(n, distance):
    # the truth `distance` past the bound on the claimed side; refuted: the interval below it
    exact = power.power_refuting(distance, 1.0, n)
    assert _simulated(n, distance, 1.0, lambda lo, hi: hi < 0) == pytest.approx(exact, abs=0.004)


@pytest.mark.parametrize(
    ("n", "margin", "assumed"), [(8, 0.3, 1.0), (30, 0.5, 0.6), (6, 0.2, -0.9)]
)
def test_the_power_to_find_a_difference_outside_the_margin_matches_simulation(n, margin, assumed):
    exact = power.power_outside(margin, 1.0, n, assumed)
    outside = lambda lo, hi: (lo > margin) | (hi < -margin)  # noqa: E731
    assert _simulated(n, assumed, 1.0, outside) == pytest.approx(exact, abs=0.004)


def test_powers_far_in_the_tails_are_0_or_1_not_nan():
    assert power.power_directional(50.0, 1.0, 40) == 1.0
    assert power.power_refuting(50.0, 1.0, 40) == 0.0
