"""scripts/claims: the committed results/CLAIMS.md is what the committed results give; every
claim's rule decides each combination of its parts as its sentence says; only a missing
results folder reads "no result"."""

import dataclasses
import itertools
import math
from pathlib import Path

import pytest

from scripts.analysis.stats import Estimate
from scripts.claims import __main__ as cli
from scripts.claims import table
from scripts.claims.claim import Measured, decide
from scripts.claims.rules import (
    All,
    Compare,
    Equivalent,
    EverySeed,
    NotLower,
    Verdict,
    _value,
)

REPO = Path(__file__).resolve().parents[3]
R, N, I = Verdict.REPRODUCED, Verdict.NOT_REPRODUCED, Verdict.INCONCLUSIVE  # noqa: E741


@pytest.mark.slow
def test_the_committed_claims_table_is_regenerated_byte_for_byte(monkeypatch):
    monkeypatch.chdir(REPO)  # the results paths are relative to the repository
    assert (REPO / "results/CLAIMS.md").read_text() == table.render()


def _leaf_values(rule, outcome: Verdict) -> dict:
    """Synthetic numbers that make one leaf rule decide ``outcome``."""
    if isinstance(rule, EverySeed):
        return {rule.key: [outcome is R] * 3}
    if isinstance(rule, Compare):
        side = 1 if rule.above else -1
        mean = {R: side, N: -side, I: side * 1e-4}[outcome]
        e = Estimate(_value(rule.bound) + mean, 1e-3 if outcome is not I else 1.0, 5)
        return {rule.key: e} | dict.fromkeys(rule.also, e)
    margin = _value(rule.margin)
    if isinstance(rule, Equivalent):
        mean = {R: 0.0, N: 3 * margin, I: 0.0}[outcome]
        return {rule.key: Estimate(mean, margin / 100 if outcome is not I else 10.0, 5)}
    if isinstance(rule, NotLower):
        mean = {R: 0.0, N: -3 * margin, I: -margin / 2}[outcome]
        return {rule.key: Estimate(mean, margin / 100 if outcome is not I else 10.0, 5)}
    raise AssertionError(f"a rule type without a truth table: {type(rule).__name__}")


def _expected(outcomes: list[Verdict]) -> Verdict:
    """The sentence of a claim of several parts, written out independently of ``All``."""
    if all(o is R for o in outcomes):
        return R
    if any(o is R for o in outcomes):
        return Verdict.PARTLY
    return N if any(o is N for o in outcomes) else I


@pytest.mark.slow
@pytest.mark.parametrize("claim", table.CLAIMS, ids=lambda c: c.claim[:50])
def test_every_claims_rule_follows_its_sentence(claim):
    rule = claim.rule
    parts = rule.parts if isinstance(rule, All) else (rule,)
    for outcomes in itertools.product((R, N, I), repeat=len(parts)):
        if any(isinstance(p, EverySeed) and o is I for p, o in zip(parts, outcomes)):
            continue  # a yes/no outcome per seed has no undecided case
        values: dict = {}
        for p, o in zip(parts, outcomes):
            values |= _leaf_values(p, o)
        expected = _expected(list(outcomes)) if isinstance(rule, All) else outcomes[0]
        if isinstance(rule, All) and rule.requires is not None:
            assert rule.decide(values | {rule.requires.key: [True, False]}).verdict is N
            values[rule.requires.key] = [True, True]
        assert rule.decide(values).verdict is expected, (claim.claim, outcomes)


@pytest.mark.slow
def test_every_claim_is_decided_from_the_committed_results(monkeypatch):
    monkeypatch.chdir(REPO)
    outcomes = table.decide_all()
    # no result only where a confirmatory reproduction has not run yet (its seeds are fixed)
    assert all(
        o.verdict is not Verdict.NO_RESULT or (o.claim.confirm and "have not run" in o.missing)
        for o in outcomes
    )
    kept = table.family(outcomes)
    assert kept and all(outcomes[i].verdict in (R, Verdict.PARTLY) for i in kept)
    assert table.family_size() > len(kept)  # every part's test, held or not


def _outcome(*ps, requires: bool = False):
    """An outcome of a claim of ``len(ps)`` parts with these p-values (None: no result)."""
    from scripts.claims.claim import Outcome
    from scripts.claims.rules import Decision

    rule = All(tuple(Compare(f"p{i}", "p", effect=0.01) for i in range(len(ps))))
    claim = dataclasses.replace(table.CLAIMS[0], rule=rule)
    if all(p is None for p in ps):
        return Outcome(claim, None, Decision(Verdict.NO_RESULT))
    parts = tuple((f"p{i}", Decision(R if p < 0.025 else I, p)) for i, p in enumerate(ps))
    held = [p < 0.025 for p in ps]
    verdict = R if all(held) else Verdict.PARTLY if any(held) else I
    return Outcome(claim, None, Decision(verdict, parts=parts))


def test_holm_runs_over_every_test_not_only_the_significant_ones():
    # 0.02 alone would hold (< 0.025); with three more tests in the family Holm needs 0.025 / 3
    kept = table.family([_outcome(0.02), _outcome(0.3, 0.4), _outcome(0.001)])
    assert kept == {0: False, 2: True}


def test_the_family_is_fixed_by_the_rules_not_by_the_data():
    """A claim without a result (or behind a failed precondition) keeps its tests in the
    family at p = 1: the correction of the others does not get easier when data go missing."""
    with_result = table.family([_outcome(0.007), _outcome(0.3, 0.4)])
    without = table.family([_outcome(0.007), _outcome(None, None)])
    assert with_result == without == {0: True}  # 0.007 <= 0.025 / 3 in both
    gated = table.family([_outcome(0.007), _outcome(None, None), _outcome(None)])
    assert gated == {0: False}  # 0.007 > 0.025 / 4


def test_without_results_every_row_reads_no_result(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    text = table.render()
    assert text.count("| **no result** |") == len(table.CLAIMS)
    assert f"**{len(table.CLAIMS)} no result**" in text


def test_a_bug_in_a_claim_fails_the_table_instead_of_reading_no_result(monkeypatch):
    monkeypatch.chdir(REPO)

    def broken(plan):
        raise KeyError("a metric the claim misspelt")

    claim = dataclasses.replace(table.CLAIMS[0], measure=broken)
    with pytest.raises(KeyError):
        decide(claim)


def test_a_verdict_that_flips_under_an_alternative_is_shown_fragile():
    def measure(plan):
        mean = 0.01 if plan.end_shift == 0 else 0.0
        return Measured({"d": Estimate(mean, 0.001, 5)}, "d")

    claim = dataclasses.replace(
        table.CLAIMS[0],
        rule=Compare("d", "d", effect=0.01),
        measure=measure,
        alternatives=("early window one evaluation longer", "median over a window's evaluations"),
        confirm=(),
    )
    o = decide(claim)
    assert o.verdict is R and [(n, d.verdict) for n, d in o.flips] == [
        ("early window one evaluation longer", I)
    ]
    assert table.robustness(o).startswith("**fragile**: inconclusive with the early window")


def test_a_part_that_flips_alone_is_listed_beside_a_robust_verdict():
    def measure(plan):
        b = 0.01 if plan.end_shift == 0 else -0.01
        return Measured(
            {"a": Estimate(0.01, 0.001, 5), "b": Estimate(b, 0.001, 5), "c": Estimate(0.0, 1.0, 5)},
            "",
        )

    claim = dataclasses.replace(
        table.CLAIMS[0],
        rule=All(tuple(Compare(k, k, effect=0.01) for k in "abc")),
        measure=measure,
        alternatives=("early window one evaluation longer",),
        confirm=(),
    )
    o = decide(claim)
    assert o.verdict is Verdict.PARTLY
    text = table.robustness(o)
    assert text.startswith("robust (1 alternative); parts move: a reproduced, b not reproduced")


def test_a_non_finite_number_is_one_line_and_no_file(monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "render", lambda: Estimate.of([math.inf]))
    monkeypatch.setattr(cli, "OUT", tmp_path / "CLAIMS.md")
    with pytest.raises(SystemExit, match="NaN/infinite .*CLAIMS.md left as it was"):
        cli.main([])
    assert not (tmp_path / "CLAIMS.md").exists()


def test_check_fails_on_a_stale_table(monkeypatch, tmp_path):
    out = tmp_path / "CLAIMS.md"
    out.write_text("stale\n")
    monkeypatch.setattr(cli, "render", lambda: "fresh\n")
    monkeypatch.setattr(cli, "OUT", out)
    with pytest.raises(SystemExit, match="not what `make claims` gives"):
        cli.main(["--check"])
    assert out.read_text() == "stale\n"


def test_the_readme_headline_counts_are_the_tables():
    claims = (REPO / "results/CLAIMS.md").read_text()
    first = next(line for line in claims.splitlines() if line.startswith("**"))
    headline = first[: first.index("**", 2) + 2]  # "**14 reproduced (6 after Holm), ...**"
    assert headline in (REPO / "README.md").read_text(), headline
