"""One claim: what the paper says, how we measure it, the rule that decides it, the analysis
choices it is re-decided under (its robustness) and, for a claim with confirmatory seeds, the
design that fixed their number before they ran.

A claim with ``confirm`` reproductions is decided on their seeds alone (``results/confirmatory/``,
the same layout as ``results/``); the pilot's seeds (``results/``), on which its rule and its
smallest effects were chosen, are shown beside it as exploratory, and the power calculation over
them is the design: :func:`design` gives the seeds each test needs, and the registry's seed count
of each confirmatory reproduction must equal what :func:`seeds_to_run` says (a test holds them
together). A claim without ``confirm`` is decided on the pilot: exploratory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from experiments.kit.errors import MissingResult
from experiments.studies import REPRODUCTIONS, SECTIONS
from scripts.analysis.committed import Diverged
from scripts.analysis.power import Need, sd_upper, seeds_for
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import ALTERNATIVES, CONFIRMED, PLAN, Plan
from scripts.claims.rules import Compare, Decision, Rule, Values, Verdict, leaves

FEWEST = 5  # confirmatory seeds of any reproduction: an interval with 4 degrees of freedom
MOST = 60  # confirmatory seeds this machine affords per setup; a test needing more is underpowered


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
    confirm: tuple[str, ...] = ()  # the registry's confirmatory reproductions that decide it
    design: str = ""  # why its smallest effects and margins are what they are
    # what its design reads where the pilot did not run its arms (a control added with the
    # confirmatory seeds): each test's spread from the pilot's other arms
    pilot_design: Callable[[Plan], Values] | None = None

    def design_values(self, plan: Plan = PLAN) -> Values:
        """The values its power calculation reads: the pilot's measure, or ``pilot_design``."""
        if not leaves(self.rule):
            return {}  # no test: nothing to design (the fewest seeds)
        return self.pilot_design(plan) if self.pilot_design else self.measure(plan).values

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
        if missing := [r for r in self.confirm if r not in REPRODUCTIONS]:
            raise ValueError(f"{self.claim}: confirmatory reproductions {missing} not registered")
        if self.confirm and not self.design:
            raise ValueError(f"{self.claim}: confirmatory seeds need a design (its rationale)")
        untested = [p.key for p in leaves(self.rule) if isinstance(p, Compare) and p.effect is None]
        if self.confirm and untested:
            raise ValueError(f"{self.claim}: tests {untested} state no smallest effect of interest")


@dataclass(frozen=True)
class Evidence:
    """One set of seeds measured and decided under the plan."""

    measured: Measured
    decision: Decision


@dataclass(frozen=True)
class Outcome:
    """A claim decided: the evidence its verdict rests on, its verdict under each alternative
    that moves it, and, for a designed claim, the pilot (exploratory) and the design."""

    claim: Claim
    measured: Measured | None  # None: no result (``missing`` says why)
    decision: Decision
    flips: tuple[tuple[str, Decision], ...] = ()  # (alternative, decision) where it differs
    missing: str = ""
    pilot: Evidence | None = None  # a designed claim's pilot, shown as exploratory
    needs: tuple[tuple[str, Need | None], ...] = ()  # the design: each test's seeds
    at_pilot: tuple[tuple[str, float, float], ...] = ()  # power to show, refute at the pilot's

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict

    @property
    def confirmatory(self) -> bool:
        return bool(self.claim.confirm)


def _estimate(values: Values, key: str) -> Estimate:
    e = values[key]
    if not isinstance(e, Estimate):
        raise TypeError(f"{key}: a test reads an Estimate, got {type(e).__name__}")
    return e


def design(rule: Rule, pilot: Values) -> tuple[tuple[str, Need | None], ...]:
    """Per test of ``rule``, the seeds for 90% power at its smallest effect, the pilot's SD at
    its upper confidence limit (None: a pilot of one seed has no spread to go by)."""
    out = []
    for leaf in leaves(rule):
        e = _estimate(pilot, leaf.key)
        out.append((leaf.key, None if e.sd is None else seeds_for(leaf.power, e.sd, e.dof)))
    return tuple(out)


def at_pilot_estimate(claim: Claim, pilot: Values) -> tuple[tuple[str, float, float], ...]:
    """Per test, with the seeds the confirmatory reproductions run, the power to show and to
    refute it if the truth is the pilot's estimate (the pilot's SD at its upper limit): what
    the design assumes (the smallest effect, or no difference) is not what the pilot saw."""
    n = min(len(REPRODUCTIONS[r].seeds) for r in claim.confirm)
    out = []
    for leaf in leaves(claim.rule):
        e = _estimate(pilot, leaf.key)
        if e.sd is not None and n >= 2:
            sd = sd_upper(e.sd, e.dof)
            out.append((leaf.key, *leaf.at_estimate(e.mean, sd, n)))
    return tuple(out)


def affordable(confirm: tuple[str, ...]) -> int:
    """The most seeds a setup the confirmatory reproductions ``confirm`` can run: MOST, or less
    where the registry says the machine affords fewer for one of them."""
    return min(REPRODUCTIONS[r].most_seeds or MOST for r in confirm) if confirm else MOST


def seeds_to_run(needs: tuple[tuple[str, Need | None], ...], most: int = MOST) -> int:
    """A claim's confirmatory seed count: the most any of its tests needs, at least FEWEST and
    at most ``most`` (a test needing more stays underpowered, and its row says so)."""
    counts = [most if need is None or need.n is None else need.n for _, need in needs]
    return min(most, max([FEWEST, *counts]))


def _undecided(claim: Claim, e: Exception, **kw) -> Outcome:
    """A claim whose measures are undefined (a diverged run): inconclusive, the run named."""
    return Outcome(
        claim, None, Decision(Verdict.INCONCLUSIVE, undecidable=True), missing=str(e), **kw
    )


def _decide_under(claim: Claim, plan: Plan) -> Decision:
    try:
        return claim.rule.decide(claim.measure(plan).values)
    except Diverged:
        return Decision(Verdict.INCONCLUSIVE, undecidable=True)


def decide(claim: Claim) -> Outcome:
    """Measure and decide ``claim`` on its confirmatory seeds (or the pilot's, if it has none),
    under the plan and under each alternative and margin that could move it. A missing results
    folder is "no result", a diverged run "inconclusive" (its measures are undefined); every
    other error propagates. A designed claim's pilot is measured for its column and its design;
    its verdict does not wait on it."""
    root, pilot, needs, at_pilot = PLAN.root, None, (), ()
    try:
        pilot_measured = claim.measure(PLAN)
    except MissingResult as e:
        if not claim.confirm:
            return Outcome(claim, None, Decision(Verdict.NO_RESULT), missing=str(e))
    except Diverged as e:
        if not claim.confirm:
            return _undecided(claim, e)
    else:
        if claim.confirm:
            pilot = Evidence(pilot_measured, claim.rule.decide(pilot_measured.values))
            needs = design(claim.rule, pilot_measured.values)
            at_pilot = at_pilot_estimate(claim, pilot_measured.values)
    if claim.confirm and claim.pilot_design is not None:
        with contextlib.suppress(MissingResult):  # no pilot at all: nothing to design on
            needs = design(claim.rule, claim.design_values())
    kept = {"pilot": pilot, "needs": needs, "at_pilot": at_pilot}
    if claim.confirm:
        root = CONFIRMED.root
        try:
            measured = claim.measure(replace(PLAN, root=root))
        except MissingResult:
            missing = f"its confirmatory seeds have not run: make {' '.join(claim.confirm)}"
            return Outcome(claim, None, Decision(Verdict.NO_RESULT), missing=missing, **kept)
        except Diverged as e:
            return _undecided(claim, e, **kept)
    else:
        measured = pilot_measured
    decision = claim.rule.decide(measured.values)
    others = [
        (name, _decide_under(claim, replace(ALTERNATIVES[name], root=root)))
        for name in claim.alternatives
    ] + [(name, rule.decide(measured.values)) for name, rule in claim.rule.variants()]
    flips = tuple((n, d) for n, d in others if d.signature() != decision.signature())
    return Outcome(claim, measured, decision, flips, **kept)


def sharing(name: str) -> set[str]:
    """The reproductions whose runs ``name``'s results share (``collect --reuse``, either way,
    transitively): they must run the same seeds."""
    out_of = {r.collect.out: r.name for r in REPRODUCTIONS.values() if r.collect is not None}
    edges = {
        (r.name, out_of[r.collect.reuse.folder])
        for r in REPRODUCTIONS.values()
        if r.collect is not None and r.collect.reuse is not None
    }
    group, grown = {name}, True
    while grown:
        linked = {b for a, b in edges if a in group} | {a for a, b in edges if b in group}
        grown = not linked <= group
        group |= linked
    return group


def planned(claims: list[Claim]) -> dict[str, tuple[int, list[tuple[Claim, int]]]]:
    """Per confirmatory reproduction: the seeds the design asks for (the most that any claim
    reading it, or a reproduction sharing its runs, needs) and each such claim's own count."""
    wanted = [
        (c, seeds_to_run(design(c.rule, c.design_values()), affordable(c.confirm)))
        for c in claims
        if c.confirm
    ]
    out = {}
    for name in sorted({r for c in claims for r in c.confirm}):
        group = sharing(name)
        mine = [(c, n) for c, n in wanted if group & set(c.confirm)]
        out[name] = (max(n for _, n in mine), mine)
    return out
