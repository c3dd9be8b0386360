"""scripts/claims/rules.py: a truth table for every rule, covering each branch of its sentence;
one level in both directions; inconclusive rows with what they rule out and a power
calculation's seed count; margins with their alternatives."""

import math

import pytest

from scripts.analysis import power
from scripts.analysis.stats import Estimate, t_quantile
from scripts.claims.rules import (
    ALPHA,
    REFUTE,
    SHOW,
    All,
    Compare,
    Equivalent,
    EverySeed,
    Margin,
    NotLower,
    Verdict,
    leaves,
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


def at(level: float, mean: float, n: int = 5) -> Estimate:
    """An estimate whose two-sided ``level`` interval ends exactly at ``mean ± 1``."""
    return Estimate(mean, 1 / t_quantile(0.5 + level / 2, n - 1), n)


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
    rule = Compare("d", "the difference", 0.0, above=above, effect=0.01)
    d = rule.decide({"d": est(mean, se)})
    assert d.verdict is verdict
    assert d.p is not None  # every test enters the multiplicity family, whatever its verdict
    assert "above 0" in rule.text() if above else "below 0" in rule.text()


def test_compare_against_a_bound_other_than_zero():
    rule = Compare("s", "the speed-up", Margin(math.log10(7.4), (math.log10(5),)), unit="×")
    assert rule.decide({"s": est(math.log10(20), log=True)}).verdict is R
    assert rule.decide({"s": est(math.log10(3), log=True)}).verdict is N
    assert "above 7.4×" in rule.text()
    [(name, alt)] = list(rule.variants())
    assert (
        name == "bound 5× for the speed-up" and alt.decide({"s": est(math.log10(6))}).verdict is R
    )


@pytest.mark.parametrize(
    ("placements", "verdict"),
    [
        ((0.01, 0.02, 0.015), R),  # shown under every placement
        ((-0.001, 0.02, 0.01), I),  # not shown under one, refuted under none
        ((-0.02, -0.01, -0.03), N),  # refuted under every placement
        ((-0.02, 0.001, -0.01), I),  # refuted under two of three: not refuted
    ],
)
def test_compare_holds_a_verdict_to_every_placement(placements, verdict):
    """A comparison with censored runs: reproduced only if shown under every placement of them,
    not reproduced only if refuted under every one; the p-value is the largest."""
    rule = Compare("a", "the speed-up", 0.0, unit="×", effect=0.3, also=("b", "c"))
    values = {k: est(m, log=True) for k, m in zip("abc", placements)}
    d = rule.decide(values)
    assert d.verdict is verdict
    assert d.p == max(e.p_greater(0.0) for e in values.values())


def test_an_undecided_comparison_rules_out_only_what_every_placement_excludes():
    rule = Compare("a", "the speed-up", 0.0, unit="×", effect=0.3, also=("b",))
    low, high = est(-0.05, 0.05, log=True), est(0.25, 0.2, log=True)
    d = rule.decide({"a": low, "b": high})
    assert d.verdict is I
    assert d.rules_out == f"above {10 ** high.interval()[1]:.3g}×"
    # the placements' means on either side of the bound, their intervals not: seeds may decide
    assert not d.undecidable and d.need is not None
    d = rule.decide({"a": est(0.05, 0.05, log=True), "b": high})  # both past it
    assert d.verdict is I and not d.undecidable and d.need is not None
    assert d.rules_out == f"above {10 ** high.interval()[1]:.3g}×"
    # one placement's interval wholly below the bound, another's wholly above: seeds would not
    low, high = est(-0.5, 0.05, log=True), est(0.5, 0.05, log=True)
    d = rule.decide({"a": low, "b": high})
    assert d.verdict is I and d.undecidable and d.need is None
    assert d.why == "one placement of the censored runs shows it and another refutes it"
    assert d.rules_out == f"above {10 ** high.interval()[1]:.3g}×"


def test_every_rule_decides_on_the_95_interval_both_ways():
    """Acceptance and refutation at one level: an interval just inside a bound at 95% decides,
    one inside it only at 90% does not, in either direction and for every kind of rule."""
    inside95, inside90 = at(0.95, 2.0), at(0.90, 2.0)  # the interval is [1.0x, 3.0x]
    margin = 3.0000001
    assert Equivalent("d", "d", margin, unit="").decide({"d": at(0.95, 1.999999)}).verdict is R
    assert Equivalent("d", "d", margin, unit="").decide({"d": at(0.90, 1.999999)}).verdict is I
    assert NotLower("d", "d", -0.9999999, unit="").decide({"d": inside95}).verdict is R
    assert NotLower("d", "d", -0.9999999, unit="").decide({"d": inside90}).verdict is I
    assert Compare("d", "d", 0.9999999, unit="").decide({"d": inside95}).verdict is R
    assert Compare("d", "d", 0.9999999, unit="").decide({"d": inside90}).verdict is I
    # refuted symmetrically: the 95% interval wholly past the bound on the other side
    assert Equivalent("d", "d", 0.9999999, unit="").decide({"d": inside95}).verdict is N
    assert Equivalent("d", "d", 0.9999999, unit="").decide({"d": inside90}).verdict is I
    assert NotLower("d", "d", -3.0000001, unit="").decide({"d": inside95}).verdict is N
    assert NotLower("d", "d", -3.0000001, unit="").decide({"d": inside90}).verdict is I
    assert ALPHA == 0.025


def test_an_inconclusive_row_says_what_it_rules_out_and_how_many_seeds_would_decide_it():
    e = Estimate.of([0.004, -0.001, 0.006])
    d = Compare("d", "d", effect=0.01).decide({"d": e})
    assert d.verdict is I and d.direction == SHOW and not d.undecidable
    assert d.rules_out == f"above {e.interval()[1] * 100:+.3g} pp"
    # the power calculation, not a plug-in: the SD at its upper limit, 90% power at the effect
    assert d.need == power.seeds_for(lambda n, sd: power.power_directional(0.01, sd, n), e.sd, 2)
    assert d.need.sd_used > e.sd
    lean = Compare("d", "d", effect=0.01).decide({"d": Estimate.of([-0.004, 0.001, -0.006])})
    assert lean.direction == REFUTE
    one_seed = Compare("d", "d", effect=0.01).decide({"d": Estimate(0.01, None, 1)})
    assert one_seed.verdict is I and one_seed.undecidable and one_seed.need is None


@pytest.mark.parametrize(
    ("mean", "se", "verdict"),
    [
        (0.0005, 0.0005, R),  # 95% interval inside ±0.3 pp
        (0.01, 0.0005, N),  # 95% interval above +0.3 pp
        (-0.01, 0.0005, N),  # ... or below −0.3 pp
        (0.0, 0.01, I),  # wide: neither
        (0.004, 0.002, I),  # the mean is outside the margin, the interval is not
    ],
)
def test_equivalent(mean, se, verdict):
    rule = Equivalent("d", "the difference", 0.003)
    assert rule.decide({"d": est(mean, se)}).verdict is verdict
    assert "±0.3 pp" in rule.text() and "95%" in rule.text()


def test_an_undecided_equivalence_is_powered_as_tost_inside_the_margin_and_refutation_outside():
    rule = Equivalent("d", "d", 0.003)
    inside = rule.decide({"d": Estimate.of([0.001, -0.002, 0.004])})
    assert inside.direction == SHOW
    assert (
        inside.need.n
        == power.seeds_for(
            lambda n, sd: power.power_equivalence(0.003, sd, n), inside.need.sd_pilot, 2
        ).n
    )
    outside = rule.decide({"d": Estimate.of([0.006, 0.001, 0.008])})
    assert outside.direction == REFUTE and outside.need.n is not None


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
    assert d.verdict is I and d.direction == REFUTE and not d.undecidable and d.need.n > 3


def test_not_lower_in_accuracy():
    rule = NotLower("d", "without − with", Margin(0.005, (0.003, 0.01)), unit="pp")
    assert "above -0.5 pp" in rule.text()
    assert rule.decide({"d": est(-0.001)}).verdict is R
    assert rule.decide({"d": est(-0.02)}).verdict is N
    names = [name for name, _ in rule.variants()]
    assert names == ["margin -0.3 pp for without − with", "margin -1 pp for without − with"]
    tight = dict(rule.variants())["margin -0.3 pp for without − with"]
    assert tight.decide({"d": est(-0.006)}).verdict is N  # a loss the tighter margin refutes
    assert rule.decide({"d": est(-0.006)}).verdict is I


def test_every_seed():
    rule = EverySeed("ok", "the property")
    assert rule.decide({"ok": [True, True]}).verdict is R
    assert rule.decide({"ok": [True, False]}).verdict is N
    assert rule.decide({"ok": []}).verdict is I  # no seed: nothing to decide on
    assert rule.decide({"ok": [True]}).p is None  # outside the multiplicity family
    censored = EverySeed("ok", "the property", censored="a seed cannot show it")
    assert censored.decide({"ok": [True, None]}).verdict is I  # none lacks it, one cannot tell
    assert censored.decide({"ok": [None, False]}).verdict is N  # one lacks it
    assert censored.text().endswith("inconclusive if none lacks it and a seed cannot show it")
    assert "inconclusive" not in rule.text()


TWO = All((Compare("a", "a", effect=0.01), Compare("b", "b", effect=0.01)))


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
    assert [leaf.key for leaf in leaves(TWO)] == ["a", "b"]


def test_a_failed_precondition_is_not_reproduced_whatever_the_parts():
    rule = All((Compare("s", "s"),), requires=EverySeed("reached", "the target reached"))
    assert rule.decide({"reached": [True, False]}).verdict is N
    assert rule.decide({"reached": [True, True], "s": est(0.01)}).verdict is R
    assert rule.text().startswith("not reproduced unless every seed shows the target reached")
    assert [leaf.key for leaf in leaves(rule)] == ["s"]  # its test stays in the family


def test_a_part_that_moves_changes_the_signature_even_when_the_verdict_does_not():
    three = All((*TWO.parts, Compare("c", "c", effect=0.01)))
    both = three.decide({"a": est(0.01), "b": est(-0.01), "c": est(0.0, 0.01)})
    other = three.decide({"a": est(0.01), "b": est(0.0, 0.01), "c": est(-0.01)})
    assert both.verdict is other.verdict is P
    assert both.signature() != other.signature()


def test_all_varies_each_parts_margin_in_turn():
    rule = All((
        Equivalent("a", "a", Margin(0.003, (0.002,))),
        NotLower("b", "b", Margin(0.005, (0.01,)), unit="pp"),
    ))  # fmt: skip
    variants = dict(rule.variants())
    assert list(variants) == ["margin ±0.2 pp for a", "margin -1 pp for b"]
    assert variants["margin ±0.2 pp for a"].parts[1] is rule.parts[1]


def test_early_below_and_late_containing_one_is_partly():
    # the Fig. 1(b, c) rule: "reproduced if below 1 early and at equal loss; partly if only one"
    from scripts.claims.bn_paper import CLAIMS

    rule = next(c for c in CLAIMS if c.source == "BN paper, Fig. 1(b, c)").rule
    d = rule.decide({"early": est(-0.5, log=True), "at equal loss": est(0.0, 0.5, log=True)})
    assert d.verdict is P


def test_both_ics_rows_share_one_rule():
    from scripts.claims.bn_paper import CLAIMS as BN
    from scripts.claims.mechanism import CLAIMS as MECH

    fig1 = next(c for c in BN if c.source == "BN paper, Fig. 1(b, c)").rule
    mech = next(c for c in MECH if "internal covariate shift" in c.claim).rule
    assert [(p.key, p.above, p.bound, p.effect) for p in fig1.parts] == [
        (p.key, p.above, p.bound, p.effect) for p in mech.parts
    ]
