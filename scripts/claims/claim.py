"""One claim: what the paper says, how we measure it, the rule that decides it, and the analysis
choices it is re-decided under (its robustness)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from experiments.studies import SECTIONS
from scripts.analysis.results import MissingResult
from scripts.analysis.windows import ALTERNATIVES, PLAN, Plan
from scripts.claims.rules import Decision, Rule, Values, Verdict


@dataclass(frozen=True)
class Measured:
    """A claim's numbers: the values its rule reads, and the sentence the table shows."""

    values: Values
    text: str


@dataclass(frozen=True)
class Claim:
    source: str  # the paper and figure or section
    claim: str
    paper: str  # the paper's number, or what it says
    rule: Rule
    measure: Callable[[Plan], Measured]
    alternatives: tuple[str, ...] = ()  # names in ALTERNATIVES that move this claim's numbers
    method: str = ""  # how the numbers are computed, where the table's header does not say it
    section: str = ""  # the study section (experiments.studies) that holds its results
    figure: str = ""  # the figure that shows it, one of that section's

    def __post_init__(self) -> None:
        unknown = [a for a in self.alternatives if a not in ALTERNATIVES]
        if unknown:
            raise ValueError(f"{self.claim}: unknown robustness alternatives {unknown}")
        if self.section not in SECTIONS:
            raise ValueError(
                f"{self.claim}: section {self.section!r} is not in experiments.studies"
            )
        if self.figure and self.figure not in {f.file for f in SECTIONS[self.section].figures}:
            raise ValueError(f"{self.claim}: {self.figure} is not a figure of {self.section!r}")


@dataclass(frozen=True)
class Outcome:
    """A claim decided: its numbers, its decision, and its verdict under each alternative."""

    claim: Claim
    measured: Measured | None  # None: no result
    decision: Decision
    flips: tuple[tuple[str, Verdict], ...] = ()  # (alternative, verdict) where it differs
    missing: str = ""

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict


def decide(claim: Claim) -> Outcome:
    """Measure and decide ``claim`` under the plan and under each of its alternatives. Only a
    missing results folder is "no result"; every other error propagates."""
    try:
        measured = claim.measure(PLAN)
    except MissingResult as e:
        return Outcome(claim, None, Decision(Verdict.NO_RESULT), missing=str(e))
    decision = claim.rule.decide(measured.values)
    flips = []
    for name in claim.alternatives:
        other = claim.rule.decide(claim.measure(ALTERNATIVES[name]).values).verdict
        if other is not decision.verdict:
            flips.append((name, other))
    return Outcome(claim, measured, decision, tuple(flips))
