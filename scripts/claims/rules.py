"""Verdicts and the rules that decide them: each rule renders its own sentence and computes its
verdict from the same fields, so the text and the code cannot disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from scripts.analysis.stats import LEVEL, Estimate, Ratio, seeds_to_decide

ALPHA = 1 - LEVEL
EQUIVALENCE_LEVEL = 1 - 2 * ALPHA  # two one-sided tests at α: the 90% interval inside the margin


class Verdict(str, Enum):
    REPRODUCED = "reproduced"
    PARTLY = "partly"
    NOT_REPRODUCED = "not reproduced"
    INCONCLUSIVE = "inconclusive"
    NO_RESULT = "no result"


MEANING = {
    Verdict.REPRODUCED: "every part of the rule holds",
    Verdict.PARTLY: "some parts of the rule hold and others do not or cannot be decided",
    Verdict.NOT_REPRODUCED: "the data decide against the claim (no part holds, at least one is refuted)",
    Verdict.INCONCLUSIVE: "the intervals can decide neither way at this number of seeds; the row says how many seeds would, at the observed mean and spread",
    Verdict.NO_RESULT: "the study's results are not committed",
}


@dataclass(frozen=True)
class Decision:
    """A verdict; for a rule with a test, the p-value of the claim's own direction (whatever the
    verdict: the multiplicity correction runs over every such test); when inconclusive, how many
    seeds would decide it."""

    verdict: Verdict
    p: float | None = None  # the test of the claim as stated; None: no test (EverySeed, All)
    seeds_needed: float | None = None  # a count, or math.inf: more than 100
    undecidable: bool = False  # inconclusive, and more seeds would not help (no interval, no trend)
    parts: tuple[tuple[str, Decision], ...] = ()  # a claim of several parts: each part's decision


Values = dict[str, "Estimate | Ratio | bool | list[bool]"]


def _inconclusive(e: Estimate, p: float, distance: float, level: float = LEVEL) -> Decision:
    n = seeds_to_decide(e, distance, level)
    return Decision(Verdict.INCONCLUSIVE, p, n, undecidable=n is None)


def _fmt(v: float, unit: str) -> str:
    """A bound as the row shows it: pp for accuracies, a factor for log10 ratios."""
    if unit == "×":
        return f"{10**v:.3g}"
    if v == 0:
        return "0"
    return f"{v * 100:+g} pp" if unit == "pp" else f"{v:g}"


@dataclass(frozen=True)
class Compare:
    """``value > bound`` (``above=True``) or ``value < bound``: reproduced if the 95% interval is
    on the claimed side of ``bound``, not reproduced if it is on the other side."""

    key: str
    what: str
    bound: float = 0.0
    above: bool = True
    unit: str = "pp"  # "pp": accuracies (fractions); "×": log10 ratios; "": plain numbers

    def condition(self) -> str:
        side = "above" if self.above else "below"
        return f"the 95% interval of {self.what} is {side} {_fmt(self.bound, self.unit)}"

    def text(self) -> str:
        other = "below" if self.above else "above"
        return f"reproduced if {self.condition()}; not reproduced if it is {other}"

    def decide(self, values: Values) -> Decision:
        e = values[self.key]
        one_sided = e.p_greater(self.bound) if self.above else e.p_less(self.bound)
        other = e.p_less(self.bound) if self.above else e.p_greater(self.bound)
        p = min(1.0, 2 * one_sided)  # two-sided: compared with α, as the 95% interval is
        if one_sided < ALPHA / 2:
            return Decision(Verdict.REPRODUCED, p)
        if other < ALPHA / 2:
            return Decision(Verdict.NOT_REPRODUCED, p)
        return _inconclusive(e, p, abs(e.mean - self.bound))


@dataclass(frozen=True)
class Equivalent:
    """No difference: reproduced if the 90% interval lies inside ``±margin`` (two one-sided tests
    at 5%), not reproduced if the 95% interval lies outside it."""

    key: str
    what: str
    margin: float  # an accuracy difference (fraction), or log10 of a ratio margin
    unit: str = "pp"

    def condition(self) -> str:
        if self.unit == "×":
            m = 10**self.margin
            return f"the 90% interval of {self.what} lies within [{1 / m:.3g}, {m:.3g}]"
        return f"the 90% interval of {self.what} lies within ±{_fmt(self.margin, self.unit).lstrip('+')}"

    def text(self) -> str:
        return f"reproduced if {self.condition()} (two one-sided tests); not reproduced if the 95% interval lies outside it"

    def decide(self, values: Values) -> Decision:
        e = values[self.key]
        p = e.tost(-self.margin, self.margin)
        if p < ALPHA:
            return Decision(Verdict.REPRODUCED, p)
        if min(e.p_greater(self.margin), e.p_less(-self.margin)) < ALPHA / 2:
            return Decision(Verdict.NOT_REPRODUCED, p)
        inside = self.margin - abs(e.mean)
        if inside > 0:
            return _inconclusive(e, p, inside, EQUIVALENCE_LEVEL)
        return _inconclusive(e, p, -inside)


@dataclass(frozen=True)
class NotLower:
    """Non-inferiority: reproduced if the 90% interval's lower end is above ``−margin`` (any
    loss is smaller than the margin; a one-sided test at 5%), not reproduced if the 95% interval
    lies below it (a loss larger than the margin)."""

    key: str
    what: str
    margin: float  # an accuracy difference (fraction), or log10 of a ratio margin
    unit: str = "×"

    def condition(self) -> str:
        return f"the 90% interval of {self.what} is above {_fmt(-self.margin, self.unit)}"

    def text(self) -> str:
        return f"reproduced if {self.condition()} (a one-sided test at 5%); not reproduced if the 95% interval is below it"

    def decide(self, values: Values) -> Decision:
        e = values[self.key]
        p = e.p_greater(-self.margin)
        if p < ALPHA:
            return Decision(Verdict.REPRODUCED, p)
        if e.p_less(-self.margin) < ALPHA / 2:
            return Decision(Verdict.NOT_REPRODUCED, p)
        above = e.mean + self.margin  # how far the mean sits above the margin
        if above > 0:
            return _inconclusive(e, p, above, EQUIVALENCE_LEVEL)
        return _inconclusive(e, p, -above)  # below it: more seeds would refute the claim


@dataclass(frozen=True)
class ShareAbove:
    """A ratio of means (a share of a gap, Fieller's interval) above ``bound``. Reproduced if the
    interval is bounded, the gap is there (its mean positive) and the interval lies above
    ``bound``; not reproduced if it lies below; inconclusive otherwise, the unbounded case
    included. Its p-value is that of ``mean(num) − bound · mean(den) > 0`` over the per-seed
    pairs, the test Fieller's interval inverts."""

    key: str  # the Ratio
    what: str
    bound: float
    test_key: str  # the per-seed Estimate of num − bound · den

    def condition(self) -> str:
        return f"Fieller's 95% interval of {self.what} is above {self.bound:.0%}"

    def text(self) -> str:
        return f"reproduced if {self.condition()}; not reproduced if it is below"

    def decide(self, values: Values) -> Decision:
        r, e = values[self.key], values[self.test_key]
        p = min(1.0, 2 * e.p_greater(0.0))
        if r.low is not None and r.den_mean > 0:
            if r.low > self.bound:
                return Decision(Verdict.REPRODUCED, p)
            if r.high < self.bound:
                return Decision(Verdict.NOT_REPRODUCED, p)
        return _inconclusive(e, p, abs(e.mean))


@dataclass(frozen=True)
class EverySeed:
    """A property checked run by run (no interval applies: one seed, or a yes/no outcome):
    reproduced if every seed has it, not reproduced if one lacks it; no test, so outside the
    multiplicity family."""

    key: str
    what: str

    def condition(self) -> str:
        return f"every seed shows {self.what}"

    def text(self) -> str:
        return f"reproduced if {self.condition()}; not reproduced if a seed lacks it"

    def decide(self, values: Values) -> Decision:
        seen = values[self.key]
        if not seen:  # no seed to look at
            return Decision(Verdict.INCONCLUSIVE, undecidable=True)
        return Decision(Verdict.REPRODUCED if all(seen) else Verdict.NOT_REPRODUCED)


@dataclass(frozen=True)
class All:
    """A claim of several parts: reproduced if every part is, partly if some are, not reproduced
    if none is and one is refuted, inconclusive otherwise. The multiplicity correction reads its
    parts' tests. ``requires`` is a precondition checked first (a speed-up needs every run to
    reach the target)."""

    parts: tuple
    requires: EverySeed | None = None  # a precondition: not reproduced unless every seed meets it

    def condition(self) -> str:
        return "; and ".join(p.condition() for p in self.parts)

    def text(self) -> str:
        rule = (
            f"reproduced if {self.condition()}; partly if some of these hold; "
            "not reproduced if none holds and one is refuted"
        )
        if self.requires is None:
            return rule
        return f"not reproduced unless {self.requires.condition()}; then {rule}"

    def decide(self, values: Values) -> Decision:
        if self.requires is not None:
            gate = self.requires.decide(values)
            if gate.verdict is not Verdict.REPRODUCED:
                return Decision(Verdict.NOT_REPRODUCED, parts=((self.requires.key, gate),))
        ds = [p.decide(values) for p in self.parts]
        named = tuple((p.key, d) for p, d in zip(self.parts, ds))
        held = [d for d in ds if d.verdict is Verdict.REPRODUCED]
        refuted = [d for d in ds if d.verdict is Verdict.NOT_REPRODUCED]
        if len(held) == len(ds):
            return Decision(Verdict.REPRODUCED, parts=named)
        if held:
            return Decision(Verdict.PARTLY, parts=named)
        if refuted:
            return Decision(Verdict.NOT_REPRODUCED, parts=named)
        needed = [d.seeds_needed for d in ds if d.verdict is Verdict.INCONCLUSIVE]
        return Decision(
            Verdict.INCONCLUSIVE,
            None,
            None if None in needed else max(needed),
            undecidable=None in needed,
            parts=named,
        )


Rule = Compare | Equivalent | NotLower | ShareAbove | EverySeed | All


def log_margin(ratio: float) -> float:
    """A ratio margin (e.g. 1.25: within [0.8, 1.25]) on the log10 scale the estimates use."""
    return math.log10(ratio)
