"""Verdicts and the rules that decide them: each rule renders its own sentence and computes its
verdict from the same fields, so the text and the code cannot disagree.

Every rule decides at one level in both directions: a one-sided test at :data:`ALPHA` (2.5%),
which is the two-sided 95% interval every row prints. A claim is reproduced when that interval
is on its side of the bound (inside the margin, for *no difference*), and refuted when it is on
the other side. Each test states the smallest effect of interest its power calculation uses
(:mod:`scripts.analysis.power`): how many seeds would show the claim with 90% power if it held
by that much. Margins and bounds chosen by the plan (not 0) are :class:`Margin` values with the
alternatives the robustness check re-decides under.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import Enum

from scripts.analysis import power
from scripts.analysis.power import Need
from scripts.analysis.stats import LEVEL, Estimate

ALPHA = power.ALPHA_ONE_SIDED
assert math.isclose(ALPHA, (1 - LEVEL) / 2), "the rules decide on the interval they print"
# Holm's method runs over the one-sided p-values of the claims' own directions, at the rules'
# one-sided level: a family-wise error rate of 2.5% per direction (the two-sided 5% of the intervals)
HOLM_ALPHA = ALPHA


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
    Verdict.INCONCLUSIVE: "the intervals decide neither way at this number of seeds; the row says what they rule out and how many seeds a power calculation says would decide it",
    Verdict.NO_RESULT: "the study's results are not committed",
}

SHOW, REFUTE = "show it", "refute it"


@dataclass(frozen=True)
class Decision:
    """A verdict; for a rule with a test, the p-value of the claim's own direction (whatever the
    verdict: the multiplicity correction runs over every test of the design); when
    inconclusive, what the interval rules out and the seeds a power calculation says would
    decide it, in the direction the data lean."""

    verdict: Verdict
    p: float | None = None  # the test of the claim as stated; None: no test (EverySeed, All)
    need: Need | None = None  # inconclusive: seeds for 90% power at the smallest effect
    direction: str = ""  # inconclusive: SHOW or REFUTE, the side the mean is on
    assumed: str = ""  # inconclusive: the true effect the power calculation assumes
    rules_out: str = ""  # inconclusive: the effects the 95% interval excludes
    undecidable: bool = False  # inconclusive, and more seeds would not help (one seed, no test)
    why: str = ""  # undecidable: the reason, where it is not the lack of a spread
    parts: tuple[tuple[str, Decision], ...] = ()  # a claim of several parts: each part's decision

    def signature(self) -> tuple:
        """The verdict with every part's: what the robustness check compares."""
        return (self.verdict, tuple((k, p.verdict) for k, p in self.parts))


Values = dict[str, "Estimate | bool | list[bool]"]


@dataclass(frozen=True)
class Margin:
    """A margin or bound the analysis plan chose (not 0, not the data's), with its pre-declared
    alternatives: the robustness check re-decides the claim under each."""

    value: float
    alternatives: tuple[float, ...] = ()


def _value(m: float | Margin) -> float:
    return m.value if isinstance(m, Margin) else m


def _fmt(v: float, unit: str) -> str:
    """A bound as the row shows it: pp for accuracies, a factor for log10 ratios, a percentage
    for shares."""
    if unit == "×":
        return f"{10**v:.3g}×"
    if unit == "%":
        return f"{v:.3g}" if v == 0 else f"{v * 100:.3g}%"
    if v == 0:
        return "0"
    return f"{v * 100:+.3g} pp" if unit == "pp" else f"{v:.3g}"


def _distance(v: float, unit: str) -> str:
    """An effect as a distance: a factor for log10 ratios, pp for accuracies."""
    if unit == "×":
        return f"a factor of {10 ** abs(v):.3g}"
    return f"{v * 100:.3g} pp" if unit == "pp" else _fmt(v, unit)


def _undecidable(p: float) -> Decision:
    return Decision(Verdict.INCONCLUSIVE, p, undecidable=True)


def _inconclusive(
    e: Estimate, p: float, direction: str, power_at, rules_out: str, assumed: str
) -> Decision:
    """Inconclusive, with the seeds a power calculation at this data's spread says would decide
    it in ``direction`` (``power_at(n, sd)``, at the true effect ``assumed`` says)."""
    if e.sd is None:
        return _undecidable(p)
    need = power.seeds_for(power_at, e.sd, e.dof)
    return Decision(Verdict.INCONCLUSIVE, p, need, direction, assumed, rules_out)


@dataclass(frozen=True)
class Compare:
    """``value > bound`` (``above=True``) or ``value < bound``: reproduced if the 95% interval is
    on the claimed side of ``bound``, not reproduced if it is on the other side. ``effect`` is
    the smallest effect of interest past the bound (in the estimate's units: log10 for ratios),
    for the power calculation. ``also``: the keys of the same quantity estimated other ways
    that a verdict must hold under too (a comparison with censored runs, under every placement
    of them): reproduced only if shown under every one, not reproduced only if refuted under
    every one; the p-value is the largest, the interval their union."""

    key: str
    what: str
    bound: float | Margin = 0.0
    above: bool = True
    unit: str = "pp"  # "pp": accuracies (fractions); "×": log10 ratios; "%": shares; "": numbers
    effect: float | None = None
    also: tuple[str, ...] = ()

    def condition(self) -> str:
        side = "above" if self.above else "below"
        return f"the {LEVEL:.0%} interval of {self.what} is {side} {_fmt(_value(self.bound), self.unit)}"

    def text(self) -> str:
        other = "below" if self.above else "above"
        return f"reproduced if {self.condition()}; not reproduced if it is {other}"

    def _side(self, e: Estimate) -> tuple[float, float]:
        """(p of the claimed side, p of the other side), one-sided."""
        b = _value(self.bound)
        return (e.p_greater(b), e.p_less(b)) if self.above else (e.p_less(b), e.p_greater(b))

    def power(self, n: int, sd: float) -> float:
        """The design's power: the claim holding by ``effect``."""
        return power.power_directional(self.effect, sd, n)

    def at_estimate(self, mean: float, sd: float, n: int) -> tuple[float, float]:
        """With ``n`` seeds, the power to show and to refute the claim if its true value is
        ``mean``."""
        past = (mean - _value(self.bound)) * (1 if self.above else -1)
        return power.power_directional(past, sd, n), power.power_refuting(past, sd, n)

    def decide(self, values: Values) -> Decision:
        e = values[self.key]
        every = [e, *(values[k] for k in self.also)]
        sides = [self._side(x) for x in every]
        claimed = max(c for c, _ in sides)
        other = max(o for _, o in sides)
        if claimed < ALPHA:
            return Decision(Verdict.REPRODUCED, claimed)
        if other < ALPHA:
            return Decision(Verdict.NOT_REPRODUCED, claimed)
        if any(x.se is None for x in every) or self.effect is None:
            return _undecidable(claimed)
        ends = [x.interval() for x in every]
        lo, hi = min(a for a, _ in ends), max(b for _, b in ends)
        on_side = (e.mean > _value(self.bound)) == self.above
        # the effects the interval excludes, on the claimed side of the bound
        rules_out = (
            f"{'above' if self.above else 'below'} {_fmt(hi if self.above else lo, self.unit)}"
        )
        if any(c < ALPHA for c, _ in sides) and any(o < ALPHA for _, o in sides):
            # censored runs placed at one end show it, at the other refute it, each at 95%: more
            # seeds, censored in the same share, would not close that gap
            return Decision(
                Verdict.INCONCLUSIVE, claimed, rules_out=rules_out, undecidable=True,
                why="one placement of the censored runs shows it and another refutes it",
            )  # fmt: skip
        side = "past the bound" if on_side else "the other side of the bound"
        assumed = f"at a true effect {_distance(self.effect, self.unit)} {side}"
        widest = max(every, key=lambda x: x.sd)  # the seeds needed at the widest spread
        return _inconclusive(
            widest, claimed, SHOW if on_side else REFUTE, self.power, rules_out, assumed
        )

    def variants(self) -> Iterator[tuple[str, Compare]]:
        if isinstance(self.bound, Margin):
            for alt in self.bound.alternatives:
                yield (
                    f"bound {_fmt(alt, self.unit)} for {self.what}",
                    replace(self, bound=Margin(alt)),
                )


@dataclass(frozen=True)
class Equivalent:
    """No difference: reproduced if the 95% interval lies inside ``±margin`` (two one-sided tests
    at 2.5%), not reproduced if it lies outside it. Its power calculation assumes no difference;
    refuting it, a difference ``effect`` (default: the margin) beyond the margin."""

    key: str
    what: str
    margin: float | Margin  # an accuracy difference (fraction), or log10 of a ratio margin
    unit: str = "pp"

    def _within(self) -> str:
        m = _value(self.margin)
        if self.unit == "×":
            return f"[{1 / 10**m:.3g}, {10**m:.3g}]"
        return f"±{_fmt(m, self.unit).lstrip('+')}"

    def condition(self) -> str:
        return f"the {LEVEL:.0%} interval of {self.what} lies within {self._within()}"

    def text(self) -> str:
        return f"reproduced if {self.condition()} (two one-sided tests); not reproduced if it lies outside it"

    def power(self, n: int, sd: float) -> float:
        return power.power_equivalence(_value(self.margin), sd, n)

    def at_estimate(self, mean: float, sd: float, n: int) -> tuple[float, float]:
        m = _value(self.margin)
        return power.power_equivalence(m, sd, n, mean), power.power_outside(m, sd, n, mean)

    def decide(self, values: Values) -> Decision:
        e, m = values[self.key], _value(self.margin)
        p = e.tost(-m, m)
        if p < ALPHA:
            return Decision(Verdict.REPRODUCED, p)
        if min(e.p_greater(m), e.p_less(-m)) < ALPHA:
            return Decision(Verdict.NOT_REPRODUCED, p)
        if e.se is None:
            return _undecidable(p)
        lo, hi = e.interval()
        rules_out = f"outside [{_fmt(lo, self.unit)}, {_fmt(hi, self.unit)}]"
        if abs(e.mean) < m:
            return _inconclusive(
                e, p, SHOW, self.power, rules_out, "if there is no true difference"
            )
        # refuting it: a true difference twice the margin, the margin beyond it
        refute = lambda n, sd: power.power_directional(m, sd, n)  # noqa: E731
        return _inconclusive(
            e, p, REFUTE, refute, rules_out, "at a true difference twice the margin"
        )

    def variants(self) -> Iterator[tuple[str, Equivalent]]:
        if isinstance(self.margin, Margin):
            for alt in self.margin.alternatives:
                yield (
                    f"margin {replace(self, margin=alt)._within()} for {self.what}",
                    replace(self, margin=Margin(alt)),
                )


@dataclass(frozen=True)
class NotLower:
    """Non-inferiority: reproduced if the 95% interval's lower end is above ``−margin`` (any
    loss is smaller than the margin; a one-sided test at 2.5%), not reproduced if the interval
    lies below it. Its power calculation assumes no difference; refuting it, a loss ``effect``
    (default: the margin) beyond the margin."""

    key: str
    what: str
    margin: float | Margin  # an accuracy difference (fraction), or log10 of a ratio margin
    unit: str = "×"

    def condition(self) -> str:
        return f"the {LEVEL:.0%} interval of {self.what} is above {_fmt(-_value(self.margin), self.unit)}"

    def text(self) -> str:
        return f"reproduced if {self.condition()} (a one-sided test at {ALPHA:.1%}); not reproduced if it is below"

    def power(self, n: int, sd: float) -> float:
        return power.power_directional(_value(self.margin), sd, n)

    def at_estimate(self, mean: float, sd: float, n: int) -> tuple[float, float]:
        past = mean + _value(self.margin)
        return power.power_directional(past, sd, n), power.power_refuting(past, sd, n)

    def decide(self, values: Values) -> Decision:
        e, m = values[self.key], _value(self.margin)
        p = e.p_greater(-m)
        if p < ALPHA:
            return Decision(Verdict.REPRODUCED, p)
        if e.p_less(-m) < ALPHA:
            return Decision(Verdict.NOT_REPRODUCED, p)
        if e.se is None:
            return _undecidable(p)
        rules_out = f"below {_fmt(e.interval()[0], self.unit)}"
        if e.mean > -m:
            return _inconclusive(
                e, p, SHOW, self.power, rules_out, "if there is no true difference"
            )
        refute = lambda n, sd: power.power_directional(m, sd, n)  # noqa: E731
        return _inconclusive(e, p, REFUTE, refute, rules_out, "at a true loss twice the margin")

    def variants(self) -> Iterator[tuple[str, NotLower]]:
        if isinstance(self.margin, Margin):
            for alt in self.margin.alternatives:
                yield (
                    f"margin {_fmt(-alt, self.unit)} for {self.what}",
                    replace(self, margin=Margin(alt)),
                )


@dataclass(frozen=True)
class EverySeed:
    """A property checked run by run (no interval applies: a yes/no outcome): reproduced if
    every seed has it, not reproduced if one lacks it; no test, so outside the multiplicity
    family. With ``censored`` (when a seed's runs cannot show the property either way) a seed
    may be ``None``: with no seed lacking it, such a seed leaves the row inconclusive, which
    more seeds would not change."""

    key: str
    what: str
    censored: str = ""

    def condition(self) -> str:
        return f"every seed shows {self.what}"

    def text(self) -> str:
        rule = f"reproduced if {self.condition()}; not reproduced if a seed lacks it"
        return (
            f"{rule}; inconclusive if none lacks it and {self.censored}" if self.censored else rule
        )

    def decide(self, values: Values) -> Decision:
        seen = values[self.key]
        if not seen:  # no seed to look at
            return Decision(Verdict.INCONCLUSIVE, undecidable=True)
        if any(v is False for v in seen):
            return Decision(Verdict.NOT_REPRODUCED)
        if any(v is None for v in seen):
            return Decision(Verdict.INCONCLUSIVE, undecidable=True)
        return Decision(Verdict.REPRODUCED)

    def variants(self) -> Iterator[tuple[str, EverySeed]]:
        return iter(())


# The design of a confirmatory row decided by :class:`EverySeed`, on :data:`FEWEST` fresh seeds
EVERY_SEED_DESIGN = (
    "A yes/no outcome per seed, no interval: reproduced only if every one of five fresh seeds "
    "shows it (were the property to hold in half the seeds or fewer, all five would with "
    "probability 1/32 or less); one seed without it makes the row not reproduced, a verdict five "
    "seeds bound no error for (a property holding in 90% of seeds misses in one of five 41% of "
    "the time). Five is the fewest seeds any confirmatory row runs."
)

Leaf = Compare | Equivalent | NotLower | EverySeed


@dataclass(frozen=True)
class All:
    """A claim of several parts: reproduced if every part is, partly if some are, not reproduced
    if none is and one is refuted, inconclusive otherwise. ``requires`` is a precondition
    checked first (not reproduced unless it holds); the parts' tests stay in the multiplicity
    family whether or not it holds."""

    parts: tuple[Leaf, ...]
    requires: EverySeed | None = None

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
        return Decision(
            Verdict.INCONCLUSIVE, undecidable=all(d.undecidable for d in ds), parts=named
        )

    def variants(self) -> Iterator[tuple[str, All]]:
        for i, part in enumerate(self.parts):
            for name, alt in part.variants():
                yield name, replace(self, parts=(*self.parts[:i], alt, *self.parts[i + 1 :]))


Rule = Compare | Equivalent | NotLower | EverySeed | All


def leaves(rule: Rule) -> tuple[Leaf, ...]:
    """The parts of a rule that carry a test (its design, whatever the data): what the
    multiplicity family and the power calculation run over."""
    parts = rule.parts if isinstance(rule, All) else (rule,)
    return tuple(p for p in parts if not isinstance(p, EverySeed))


def log_margin(ratio: float) -> float:
    """A ratio margin (e.g. 1.25: within [0.8, 1.25]) on the log10 scale the estimates use."""
    return math.log10(ratio)


# "About 1" for a ratio: within [0.8, 1.25], the conventional equivalence band for ratios; as a
# smallest effect, a change by a factor of 0.8 (or 1.25).
RATIO_BAND = log_margin(1.25)
