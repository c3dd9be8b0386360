"""scripts/claims/rules.py: a truth table for every rule, covering each branch of its sentence."""

import math

import pytest

from scripts.analysis.stats import Estimate, Ratio, fieller
from scripts.claims.rules import (
    All,
    Compare,
    Equivalent,
    EverySeed,
    NotLower,
    ShareAbove,
    Verdict,
    log_margin,
)

R, P, N, I = (  # noqa: E741
    Verdict.REPRODUCED,
    Verdict.PARTLY,
    Verdict.NOT_REPRODUCED,
    Verdict.INCONCLUSIVE,
)


def est(mean: float, se: float = 0.001, n: int = 5, log: bool = False) -> Estimate:
    return Estimate(mean, se, n, log)


@pytest.mark.parametrize(
    ("above", "mean", "se", "verdict"),
    [
        (True, 0.01, 0.001, R),
        (True, -0.01, 0.001, N),
        (True, 0.001, 0.01, I),
        (False, -0.01, 0.001, R),
        (False, 0.01, 0.001, N),
        (False, -0.001, 0.01, I),
    ],
)
def test_compare(above, mean, se, verdict):
    rule = Compare("d", "the difference", 0.0, above=above)
    d = rule.decide({"d": est(mean, se)})
    assert d.verdict is verdict
    assert d.p is not None  # every test enters the multiplicity family, whatever its verdict
    assert "above 0" in rule.text() if above else "below 0" in rule.text()


def test_compare_against_a_bound_other_than_zero():
    rule = Compare("s", "the speed-up", math.log10(7.4), unit="×")
    assert rule.decide({"s": est(math.log10(20), log=True)}).verdict is R
    assert rule.decide({"s": est(math.log10(3), log=True)}).verdict is N
    assert "above 7.4" in rule.text()


def test_an_inconclusive_row_says_how_many_seeds_would_decide_it():
    d = Compare("d", "d").decide({"d": est(0.002, 0.0015, n=3)})
    assert d.verdict is I and d.seeds_needed is not None and d.seeds_needed > 3
    assert not d.undecidable
    one_seed = Compare("d", "d").decide({"d": Estimate(0.01, None, 1)})
    assert one_seed.verdict is I and one_seed.undecidable


@pytest.mark.parametrize(
    ("mean", "se", "verdict"),
    [
        (0.0005, 0.0005, R),  # 90% interval inside ±0.3 pp
        (0.01, 0.0005, N),  # 95% interval above +0.3 pp
        (-0.01, 0.0005, N),  # ... or below −0.3 pp
        (0.0, 0.01, I),  # wide: neither
        (0.004, 0.002, I),  # the mean is outside the margin, the interval is not
    ],
)
def test_equivalent(mean, se, verdict):
    rule = Equivalent("d", "the difference", 0.003)
    assert rule.decide({"d": est(mean, se)}).verdict is verdict
    assert "±0.3 pp" in rule.text() and "90%" in rule.text()


def test_equivalence_of_a_ratio():
    rule = Equivalent("r", "the ratio", log_margin(2), unit="×")
    assert "[0.5, 2]" in rule.text()
    assert rule.decide({"r": est(math.log10(1.1), log=True)}).verdict is R
    assert rule.decide({"r": est(math.log10(0.2), log=True)}).verdict is N


@pytest.mark.parametrize(
    ("mean", "se", "verdict"),
    [
        (0.0, 0.01, R),  # no reduction: above 1/1.25
        (math.log10(2), 0.01, R),  # an increase is not a reduction
        (math.log10(0.5), 0.01, N),  # a reduction by half
        (math.log10(0.8), 0.2, I),
    ],
)
def test_not_lower(mean, se, verdict):
    rule = NotLower("r", "the ratio", log_margin(1.25))
    assert rule.decide({"r": est(mean, se, log=True)}).verdict is verdict
    assert "above 0.8" in rule.text()


def test_not_lower_below_the_margin_can_be_decided_by_more_seeds():
    d = NotLower("d", "d", 0.005, unit="pp").decide({"d": Estimate.of([-0.02, -0.005, -0.03])})
    assert d.verdict is I and not d.undecidable and d.seeds_needed > 3


def test_not_lower_in_accuracy():
    rule = NotLower("d", "without − with", 0.005, unit="pp")
    assert "above -0.5 pp" in rule.text()
    assert rule.decide({"d": est(-0.001)}).verdict is R
    assert rule.decide({"d": est(-0.02)}).verdict is N


def test_share_above_reads_fiellers_interval():
    rule = ShareAbove("share", "the recovered share", 0.5, "share − 50%")
    test = {"share − 50%": est(0.01)}
    assert rule.decide({"share": Ratio(0.8, 0.6, 0.9, 5, 1.0), **test}).verdict is R
    assert rule.decide({"share": Ratio(0.3, 0.2, 0.4, 5, 1.0), **test}).verdict is N
    assert rule.decide({"share": Ratio(0.5, 0.3, 0.7, 5, 1.0), **test}).verdict is I
    # unbounded (the gap cannot be told from 0), or a negative gap: never reproduced
    assert rule.decide({"share": Ratio(0.8, None, None, 5, 0.1), **test}).verdict is I
    assert rule.decide({"share": Ratio(-0.1, -0.2, -0.05, 5, -1.0), **test}).verdict is I
    assert "above 50%" in rule.text()


def test_a_share_from_real_numbers():
    gain, gap = [0.8, 0.9, 1.0, 0.85, 0.95], [1.0, 1.1, 1.2, 1.05, 1.15]
    values = {
        "share": fieller(gain, gap),
        "share − 50%": Estimate.of([g - 0.5 * d for g, d in zip(gain, gap)]),
    }
    assert ShareAbove("share", "s", 0.5, "share − 50%").decide(values).verdict is R


def test_every_seed():
    rule = EverySeed("ok", "the property")
    assert rule.decide({"ok": [True, True]}).verdict is R
    assert rule.decide({"ok": [True, False]}).verdict is N
    assert rule.decide({"ok": []}).verdict is I  # no seed: nothing to decide on
    assert rule.decide({"ok": [True]}).p is None  # outside the multiplicity family


TWO = All((Compare("a", "a"), Compare("b", "b")))


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        (0.01, 0.01, R),
        (0.01, -0.01, P),  # one holds, one refuted
        (0.01, 0.0, P),  # one holds, one undecided
        (-0.01, 0.0, N),
        (-0.01, -0.01, N),
        (0.0, 0.0, I),
    ],
)
def test_all_parts(a, b, verdict):
    values = {k: est(v, 0.001 if v else 0.01) for k, v in (("a", a), ("b", b))}
    d = TWO.decide(values)
    assert d.verdict is verdict
    assert [name for name, _ in d.parts] == ["a", "b"]


def test_all_keeps_each_parts_test_for_the_multiplicity_correction():
    d = TWO.decide({"a": est(0.01), "b": est(0.01, 0.003)})
    assert d.verdict is R and d.p is None
    assert all(p.p is not None and p.p < 0.05 for _, p in d.parts)


def test_a_failed_precondition_is_not_reproduced_whatever_the_parts():
    rule = All((Compare("s", "s"),), requires=EverySeed("reached", "the target reached"))
    assert rule.decide({"reached": [True, False]}).verdict is N
    assert rule.decide({"reached": [True, True], "s": est(0.01)}).verdict is R
    assert rule.text().startswith("not reproduced unless every seed shows the target reached")


def test_early_below_and_late_containing_one_is_partly_not_reproduced():
    # the Fig. 1(b, c) rule: "reproduced if below 1 early and late; partly if only early"
    from scripts.claims.bn_paper import CLAIMS

    rule = next(c for c in CLAIMS if c.source == "BN paper, Fig. 1(b, c)").rule
    d = rule.decide({"early": est(-0.5, log=True), "late": est(0.0, 0.5, log=True)})
    assert d.verdict is P


def test_early_containing_one_and_late_below_is_not_reproduced_in_full():
    # the ICS rule needs both of its parts: one alone is partly
    from scripts.claims.mechanism import CLAIMS

    rule = next(c for c in CLAIMS if "internal covariate shift" in c.claim).rule
    d = rule.decide({"early": est(0.0, 0.5, log=True), "at equal loss": est(-0.5, log=True)})
    assert d.verdict is P
