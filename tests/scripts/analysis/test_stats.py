"""scripts/analysis/stats.py: exact t intervals, p-values that agree with them, Fieller's
set of its three kinds, equivalence tests, Holm's method, seeds compared only when they agree."""

import math
import random
import statistics

import pytest

from scripts.analysis.stats import (
    Estimate,
    NonFinite,
    SeedMismatch,
    fieller,
    holm,
    log_ratios,
    paired,
    pooled,
    pooled_sd,
    t_quantile,
    welch,
)


@pytest.mark.parametrize(
    ("df", "q"), [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (29, 2.0452)]
)
def test_t_quantiles_are_exact_at_every_number_of_seeds(df, q):
    # 10 degrees of freedom: 2.228, not the normal 1.96 a rounded table falls back to
    assert t_quantile(0.975, df) == pytest.approx(q, abs=1e-4)


def test_interval_of_three_values():
    e = Estimate.of([1.0, 2.0, 3.0])
    half = t_quantile(0.975, 2) * 1.0 / math.sqrt(3)
    assert e.interval() == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert e.interval(0.9)[1] - 2 == pytest.approx(t_quantile(0.95, 2) / math.sqrt(3))
    assert Estimate.of([0.5]).interval() is None
    assert "1 seed, no interval" in Estimate.of([0.5]).text()


def test_p_values_agree_with_the_intervals():
    rng = random.Random(0)
    for _ in range(300):
        e = Estimate.of([rng.gauss(0.3, 1.0) for _ in range(rng.randrange(2, 9))])
        low, high = e.interval()
        assert (min(e.p_greater(0.0), e.p_less(0.0)) < 0.025) == (low > 0 or high < 0)
        assert (e.p_greater(0.0) < 0.025) == (low > 0)
        low90, high90 = e.interval(0.9)
        assert (e.tost(-0.5, 0.5) < 0.05) == (low90 > -0.5 and high90 < 0.5)


def test_non_finite_and_empty_values_are_refused():
    for bad in ([0.1, math.nan], [math.inf], []):
        with pytest.raises(NonFinite):
            Estimate.of(bad)
    with pytest.raises(NonFinite, match="positive"):
        log_ratios({0: 1.0}, {0: -1.0})


def test_paired_and_log_ratios_refuse_setups_with_different_seeds():
    a, b = {0: 3.0, 1: 5.0, 7: 1.0}, {0: 1.0, 1: 2.0, 2: 9.0}
    for compare in (paired, log_ratios):
        with pytest.raises(SeedMismatch, match=r"seeds \[0, 1, 7\] and \[0, 1, 2\] differ"):
            compare(a, b)
    assert paired({0: 3.0, 1: 5.0}, {1: 2.0, 0: 1.0}).mean == pytest.approx(2.5)
    e = log_ratios({0: 10.0, 1: 1000.0}, {0: 1.0, 1: 1.0})
    assert 10**e.mean == pytest.approx(100.0)  # the geometric mean of 10× and 1000×
    assert e.text().startswith("100×")


def test_fieller_interval_is_where_the_t_statistic_equals_its_quantile():
    num, den = [0.5, 0.7, 0.9, 0.4, 0.6], [1.0, 1.2, 0.8, 1.1, 0.9]
    r = fieller(num, den)
    assert r.value == pytest.approx(statistics.fmean(num) / statistics.fmean(den))
    t = t_quantile(0.975, 4)
    for rho in (r.low, r.high):
        d = [a - rho * b for a, b in zip(num, den)]
        stat = statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(5))
        assert abs(stat) == pytest.approx(t, rel=1e-9)
    assert r.low < r.value < r.high


def test_fieller_with_a_constant_denominator_is_the_t_interval_of_the_numerator():
    num = [0.2, 0.5, 0.3, 0.6]
    r, e = fieller(num, [2.0] * 4), Estimate.of(num)
    low, high = e.interval()
    assert (r.low, r.high) == (pytest.approx(low / 2), pytest.approx(high / 2))


def test_fieller_is_exclusive_when_only_the_denominator_may_be_zero():
    num, den = [0.5, 0.6, 0.4], [0.1, -0.1, 0.05]
    r = fieller(num, den)
    assert r.kind == "exclusive" and r.low < r.high
    # the set is the ratios whose t statistic is within the quantile: outside (low, high)
    t = t_quantile(0.975, 2)
    for rho, inside in ((r.low - 1, True), (r.high + 1, True), ((r.low + r.high) / 2, False)):
        d = [a - rho * b for a, b in zip(num, den)]
        stat = statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(3))
        assert (abs(stat) <= t) is inside, rho
    assert "outside" in r.text()


def test_fieller_is_the_whole_line_when_neither_mean_can_be_told_from_zero():
    r = fieller([0.1, -0.1, 0.05, 0.02], [0.08, 0.1, -0.09, -0.05])
    assert r.kind == "whole line" and r.low is None and r.high is None
    assert "every value" in r.text()


def test_a_share_of_a_gap_that_is_not_positive_is_no_share():
    """BN-x5 slower than BN-Baseline on average: no part of a speed-up it does not have."""
    r = fieller([0.3, 0.4, 0.35], [-0.5, -0.6, -0.4])
    assert r.kind == "interval" and r.den_mean < 0
    assert r.text().startswith("no share") and "-0.5" in r.text()


def test_fieller_edge_cases():
    r = fieller([0.1] * 3, [0.7] * 3)  # no spread: the point itself, not "unbounded"
    assert r.low == pytest.approx(r.value) == pytest.approx(r.high) == pytest.approx(1 / 7)
    assert math.isnan(fieller([0.1, 0.2], [0.5, -0.5]).value)  # a zero mean denominator


def test_holm_steps_down():
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.001, 0.012, 0.02]) == [True, True, True]  # 0.0167, 0.025, 0.05
    assert holm([]) == []
    # the first step's threshold is alpha / m, not alpha / (m + 1)
    assert holm([0.02, 0.5]) == [True, False]


def test_welch_is_scipys_unequal_variance_t_test():
    from scipy import stats

    a, b = [3.1, 2.7, 3.6, 3.3, 2.9], [2.2, 2.9, 1.8, 2.6]
    e = welch(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert e.mean == pytest.approx(statistics.fmean(a) - statistics.fmean(b))
    assert 2 * min(e.p_greater(0), e.p_less(0)) == pytest.approx(ref.pvalue, rel=1e-9)
    low, high = e.interval()
    ci = ref.confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert (
        e.n == 4 and 3 < e.dof < 7
    )  # Welch-Satterthwaite: between the smaller arm's and the sum's
    # the spread a design scales by the root of the seeds per arm: equal arms give the same se
    assert e.sd == pytest.approx(math.sqrt(statistics.variance(a) + statistics.variance(b)))


def test_welch_refuses_a_one_value_arm_and_non_finite_values():
    with pytest.raises(ValueError, match="2\\+ values"):
        welch([1.0], [1.0, 2.0])
    with pytest.raises(NonFinite):
        welch([1.0, math.inf], [1.0, 2.0])


def test_pooled_over_two_arms_is_the_equal_variance_t_test():
    from scipy import stats

    a, b = [3.1, 2.7, 3.6], [2.2, 2.9, 1.8, 2.6]
    sd, df = pooled_sd([a, b])
    e = pooled(a, b, sd, df)
    ref = stats.ttest_ind(a, b, equal_var=True)
    assert df == 5
    assert 2 * min(e.p_greater(0), e.p_less(0)) == pytest.approx(ref.pvalue, rel=1e-9)


def test_pooled_sd_takes_every_arm_with_two_values_and_skips_single_ones():
    sd, df = pooled_sd([[1.0, 3.0], [5.0], [2.0, 2.0, 5.0]])
    assert df == 1 + 2
    assert sd == pytest.approx(math.sqrt((2.0 + 6.0) / 3))
    with pytest.raises(ValueError, match="2\\+ values"):
        pooled_sd([[1.0], [2.0]])
