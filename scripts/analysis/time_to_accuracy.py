"""The BN paper's Figure 3 as a time-to-accuracy curve: the steps each run takes to reach each of a
grid of fixed accuracies, and each variant's speed-up over Inception at every one of them.

Figure 3 counts the steps each BN variant needs to reach Inception's maximum. A target computed
from the data (Inception's plateau) moves when seeds are added and, at this scale, sits at the
ceiling every variant shares; so the claims read the whole curve at accuracies fixed before the
confirmatory runs (:data:`TARGETS`), and the headline speed-up at :data:`HEADLINE`.

- **Steps to a target**: a run's first evaluation at or above it, on the fixed test subset the
  runs are evaluated on (``test/acc_subset``); a robustness alternative reads it on the curve
  after initialization smoothed by a centred moving average of 3 evaluations, so one lucky
  evaluation does not set it.
- **A run that never reaches it** (it stopped at its plateau, or diverged, first) is censored:
  its steps are somewhere between its last evaluation and, at most, the cap (``train.steps``,
  the last step any run of the protocol may reach). A verdict must hold wherever in that range
  each censored run is: the comparison is made with each arm's censored runs all at their last
  evaluation or all at the cap (four placements, :class:`Speedup`) and, for the confirmatory
  seeds, under the mix of the two ends (each run at one end or the other) least favourable to
  showing, and to refuting, the claim at each bound a rule reads (:func:`least_favourable`:
  moving one run moves both the mean and Welch's spread, so a mix can be worse than any of the
  four). Uncensored, they are one estimate. Every row says how many runs were censored.
- **A diverged run** (a non-finite loss) enters as far as its curve goes: a target it reached
  before diverging at the step it reached it; one it had not, never (it stopped for good), so at
  the cap under every placement; and with the maximum it reached before it diverged (chance if it
  diverged before its first evaluation after initialization).
- **The speed-up** is Inception's steps over the variant's as a difference of mean log10 steps
  (the ratio of geometric means). The arms share no data order (BN-x5 reshuffles within shards,
  Inception does not), so nothing pairs seed ``i`` of one with seed ``i`` of the other: the
  comparison is unpaired. The confirmatory seeds are compared by Welch's test; the pilot, with
  one or two seeds an arm, by the pooled within-arm SD of every arm of the protocol
  (:func:`scripts.analysis.stats.pooled`), which is also the spread its power calculation uses.
- **A variant's maximum** is the largest value of its curve after initialization (step 0 left
  out) smoothed by a centred moving average of the plan's ``smoothing`` evaluations (one
  evaluation on the subset is noisy), compared between arms the same way.
- **The seeds** of every arm must be the registered ones (:data:`SEEDS` for the confirmatory
  collection): a missing or extra seed is an error, not a smaller sample.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy import stats as _scipy

from experiments.kit.errors import BadResults, MissingResult
from experiments.studies import CONFIRM_INCEPTION, CONFIRMATORY, FIG3_SCHEDULE
from scripts.analysis import committed
from scripts.analysis.stats import Estimate, Ratio, fieller_of, pooled, pooled_sd, welch
from scripts.analysis.windows import CHANCE, Plan, first_step, smoothed, trained_curve

FOLDER = "inception/fashion_mnist_converged"  # under the plan's root: the pilot's or the confirmatory seeds'
METRIC = "test/acc_subset"
BASELINE = "inception"
# Fashion-MNIST accuracies below the ceiling every variant shares at this scale (≈ 85–87%),
# spanning the range where the pilot's Inception curves still climb.
TARGETS = (0.75, 0.78, 0.80, 0.82, 0.84)
# The headline speed-up (the paper's "steps to Inception's maximum"): the highest target every
# pilot Inception seed reached well before the cap (at 4,300 and 2,600 steps of 8,000).
HEADLINE = 0.82
SEEDS = CONFIRM_INCEPTION  # every arm's seeds in the confirmatory collection


@dataclass(frozen=True)
class Reach:
    """One run's steps to a target: when it first reached it, or, if it never did, its last
    evaluation (its steps to the target are more, at most the cap); a diverged run that never
    did, the cap."""

    steps: int
    reached: bool


def confirmatory(plan: Plan) -> bool:
    """Whether the plan reads the confirmatory seeds' results (``results/confirmatory/``)."""
    return Path(plan.root).name == CONFIRMATORY


def setups(plan: Plan, folder: str = FOLDER) -> list[str]:
    """The setups a folder holds (MissingResult if it is not committed)."""
    return list(committed.summary(folder, plan.results)["setups"])


def require_arms(plan: Plan, *arms: str, folder: str = FOLDER) -> None:
    """MissingResult unless the folder holds runs of every arm (a control the pilot lacks)."""
    held = setups(plan, folder)
    if missing := [a for a in arms if a not in held]:
        raise MissingResult(f"{plan.results / folder} has no runs of {', '.join(missing)}")


def cap(plan: Plan, folder: str = FOLDER) -> int:
    """The protocol's cap (``train.steps``)."""
    return int(committed.summary(folder, plan.results)["steps"])


def require_registered(plan: Plan, setup: str, folder: str = FOLDER) -> None:
    """MissingResult unless the folder holds ``setup``'s runs; BadResults unless a confirmatory
    collection holds them for exactly the registered seeds."""
    curves(plan, setup, folder)


# The confirmatory protocol as its collection records it: its evaluations (``converged``) and
# its cap (``steps``, where censored runs are placed). The stopping rule is the registry's.
_SCHEDULE = dict(a.split("=", 1) for a in FIG3_SCHEDULE)
PROTOCOL = {
    "test_subset": int(_SCHEDULE["eval.test_subset"]),
    "eval_every": int(_SCHEDULE["eval.every"]),
    "steps": int(_SCHEDULE["train.steps"]),
}


def require_protocol(plan: Plan, folder: str = FOLDER) -> None:
    """BadResults unless a confirmatory collection ran as the protocol registers
    (:data:`PROTOCOL`): its curves are read as if it had."""
    if not confirmatory(plan):
        return
    summary = committed.summary(folder, plan.results)
    held = {**summary.get("converged", {}), "steps": summary.get("steps")}
    if wrong := {k: held.get(k) for k, v in PROTOCOL.items() if held.get(k) != v}:
        raise BadResults(
            f"{plan.results / folder}: ran with {wrong}, not the confirmatory protocol's "
            f"{PROTOCOL} (FIG3_SCHEDULE)"
        )


def curves(plan: Plan, setup: str, folder: str = FOLDER) -> dict[int, dict[int, float]]:
    """Per seed, its test-subset curve; a diverged seed's as far as it goes. BadResults if the
    confirmatory collection's seeds are not the registered ones, or its evaluations not the
    protocol's."""
    require_arms(plan, setup, folder=folder)
    require_protocol(plan, folder)
    by_seed = committed.series(folder, setup, METRIC, plan.results, keep_diverged=True)
    if confirmatory(plan) and sorted(by_seed) != sorted(SEEDS):
        raise BadResults(
            f"{plan.results / folder}: {setup} holds seeds {sorted(by_seed)}, not the registered "
            f"confirmatory seeds {SEEDS[0]}–{SEEDS[-1]} ({len(SEEDS)}): a missing run is not one to skip"
        )
    return dict(sorted(by_seed.items()))


def reaches(plan: Plan, setup: str, target: float, folder: str = FOLDER) -> dict[int, Reach]:
    """Per seed, its steps to ``target`` (the plan's offset added) on its curve after
    initialization (a centred moving average of the plan's ``steps_smoothing`` evaluations), or
    if it never reached it, its last evaluation (the cap if it diverged: it would never have
    reached it)."""
    level = target + plan.threshold_offset
    by_seed = curves(plan, setup, folder)  # MissingResult first, for an arm the folder lacks
    diverged = committed.diverged(folder, setup, plan.results)
    out = {}
    for seed, curve in by_seed.items():
        step = first_step(smoothed(trained_curve(curve), plan.steps_smoothing), level)
        if step is not None:
            out[seed] = Reach(step, True)
        else:
            out[seed] = Reach(cap(plan, folder) if diverged[seed] else max(curve), False)
    return out


def _log_steps(r: dict[int, Reach], censored_at: int | None) -> list[float]:
    """log10 steps, a censored run's at ``censored_at`` (None: at its last evaluation)."""
    at = lambda x: x.steps if x.reached or censored_at is None else censored_at  # noqa: E731
    return [math.log10(max(at(x), 1)) for x in r.values()]


def arm_log_steps(plan: Plan, setup: str, target: float, folder: str = FOLDER) -> list[float]:
    """Per seed, log10 of its steps to ``target`` (:func:`reaches`), a censored run's at the
    cap: the values whose spread the pilot pools and the share of a speed-up reads."""
    return _log_steps(reaches(plan, setup, target, folder), cap(plan, folder))


# The pilot's arms that train (the sigmoid network without BN stays at chance and reaches no
# target): the arms whose within-arm spread the pilot pools.
POOLED = ("inception", "bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid")


def compare(
    plan: Plan,
    a: list[float],
    b: list[float],
    family: Callable[[str], list[float]],
    log: bool,
) -> Estimate:
    """``mean(a) − mean(b)``: Welch's test for confirmatory seeds; for the pilot, the pooled
    within-arm SD of :data:`POOLED` (``family(arm)``: its per-seed values)."""
    if confirmatory(plan):
        return welch(a, b, log=log)
    return pooled(a, b, *pooled_spread(family), log=log)


def pooled_spread(family: Callable[[str], list[float]]) -> tuple[float, int]:
    """The pooled within-arm SD of :data:`POOLED` (``family(arm)``: its per-seed values) and its
    degrees of freedom."""
    return pooled_sd([family(k) for k in POOLED])


# Where an arm's censored runs are placed: at their last evaluation, or at the cap.
AT_LAST, AT_CAP = "last", "cap"
# Every placement of both arms' censored runs, (the base's, the variant's): the first has the
# smallest speed-up, the second the largest.
PLACEMENTS = ((AT_LAST, AT_CAP), (AT_CAP, AT_LAST), (AT_LAST, AT_LAST), (AT_CAP, AT_CAP))


@dataclass(frozen=True)
class Speedup:
    """A variant's speed-up over a base arm at one target (log10 estimates) and its censored
    runs, under every placement of the censored runs (:data:`PLACEMENTS`): each arm's at their
    last evaluation or at the cap. ``estimate`` is the smallest (the base's at their last
    evaluation, the variant's at the cap), ``largest`` the other way round. A verdict must hold under
    every placement: the test's p-value is not monotone between them (a run moved to the cap
    raises the mean and the spread). A placement with no spread at all (every run of both arms
    at one step) has no interval. Uncensored, the placements are one estimate. ``mixes``: for
    each bound asked for, the mixes least favourable to showing the speed-up above it and to
    refuting it (:func:`least_favourable`), keyed ``(bound, True)`` and ``(bound, False)``."""

    target: float
    placements: dict[tuple[str, str], Estimate]
    base_censored: int
    variant_censored: int
    seeds: tuple[int, int]  # (the base's, the variant's)
    mixes: dict[tuple[float, bool], Estimate] = field(default_factory=dict)

    @property
    def estimate(self) -> Estimate:
        return self.placements[PLACEMENTS[0]]

    @property
    def largest(self) -> Estimate:
        return self.placements[PLACEMENTS[1]]

    @property
    def censored(self) -> bool:
        return bool(self.base_censored or self.variant_censored)

    def text(self, base: str = "Inception") -> str:
        censored = [
            f"{n} {who} run{'s' * (n > 1)} never reached it"
            for n, who in ((self.base_censored, base), (self.variant_censored, "variant"))
            if n
        ]
        if not censored:
            return f"{self.target:.0%}: {_shown(self.estimate)}"
        # a mix is shown where it is none of the placements: the verdict reads it too
        mixed = [
            f"to {'show' if show else 'refute'} it at {10**bound:.3g}×: {_shown(e)}"
            for (bound, show), e in sorted(self.mixes.items())
            if e not in self.placements.values()
        ]
        mixes = f"; the least favourable mixes, {'; '.join(mixed)}" if mixed else ""
        return (
            f"{self.target:.0%}: {_shown(self.estimate)} to {_shown(self.largest)} "
            f"(censored runs at their last evaluation or the cap; {', '.join(censored)}{mixes})"
        )


def _shown(e: Estimate) -> str:
    if e.se is not None:
        return e.text()
    return f"{10**e.mean:.3g}× (no spread, no interval; {e.n} seeds)"


def _spread_or_none(e: Estimate) -> Estimate:
    """No interval where no run's steps differ from another's: a zero standard error would
    read as certainty."""
    return replace(e, se=None) if e.se == 0 else e


def speedup(
    plan: Plan,
    variant: str,
    target: float,
    base: str = BASELINE,
    folder: str = FOLDER,
    bounds: Sequence[float] = (),
) -> Speedup:
    """``variant``'s speed-up over ``base`` at ``target``: ``log10`` of the ratio of their
    geometric-mean steps (see the module), with the least favourable mixes of censored runs at
    each of ``bounds`` (log10)."""
    b, v = reaches(plan, base, target, folder), reaches(plan, variant, target, folder)
    family = lambda arm: arm_log_steps(plan, arm, target, folder)  # noqa: E731
    at = {AT_LAST: None, AT_CAP: cap(plan, folder)}
    placements = {
        (pb, pv): _spread_or_none(
            compare(plan, _log_steps(b, at[pb]), _log_steps(v, at[pv]), family, log=True)
        )
        for pb, pv in PLACEMENTS
    }
    mixes = {}
    for bound in bounds:
        for show in (True, False):
            if confirmatory(plan):
                mixes[bound, show] = least_favourable(b, v, cap(plan, folder), bound, show)
            else:  # one spread for every placement: the uniform ends are the extremes
                mixes[bound, show] = placements[PLACEMENTS[0] if show else PLACEMENTS[1]]
    return Speedup(
        target,
        placements,
        sum(not x.reached for x in b.values()),
        sum(not x.reached for x in v.values()),
        (len(b), len(v)),
        mixes,
    )


MOST_FREE = 12  # the most censored runs of an arm whose mixes are searched (2**12 an arm)


def _corners(r: dict[int, Reach], at_cap: int) -> np.ndarray:
    """Every run's log10 steps under every mix of its arm's censored runs, each at its last
    evaluation or at the cap: ``(2**m, n)``, ``m`` the runs censored before the cap."""
    runs = list(r.values())
    logs = np.array([math.log10(max(x.steps, 1)) for x in runs])
    free = [i for i, x in enumerate(runs) if not x.reached and x.steps < at_cap]
    if len(free) > MOST_FREE:
        raise ValueError(
            f"{len(free)} censored runs in one arm: {2 ** len(free):,} mixes to search, past "
            f"the {2**MOST_FREE:,} this search holds in memory"
        )
    bits = (np.arange(2 ** len(free))[:, None] >> np.arange(len(free))) & 1
    out = np.tile(logs, (len(bits), 1))
    out[:, free] = np.where(bits == 1, math.log10(at_cap), logs[free])
    return out


def least_favourable(
    base: dict[int, Reach], variant: dict[int, Reach], at_cap: int, bound: float, show: bool
) -> Estimate:
    """The speed-up (Welch, log10 steps) under the mix of censored runs (each at its last
    evaluation or at the cap) with the largest one-sided p-value of "above ``bound``"
    (``show``) or of "below ``bound``" (not ``show``): the mix a verdict at ``bound`` must
    survive. In one run's position Welch's t (the mean linear in it, the variance quadratic) has
    at most one turning point, a minimum only where t is negative and a maximum only where it is
    positive; so wherever the claim could be shown (t > 0 at both ends) its least favourable
    position is an end, and likewise for refuting it (Welch's degrees of freedom move too, a
    second-order effect this search does not follow inside a range). Every mix is tried:
    ``2**(m_base + m_variant)``, at most :data:`MOST_FREE` censored runs an arm."""
    a, b = _corners(base, at_cap), _corners(variant, at_cap)
    na, nb = a.shape[1], b.shape[1]
    va, vb = a.var(1, ddof=1) / na, b.var(1, ddof=1) / nb
    d = a.mean(1)[:, None] - b.mean(1)[None, :]
    s2 = va[:, None] + vb[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        df = s2**2 / (va[:, None] ** 2 / (na - 1) + vb[None, :] ** 2 / (nb - 1))
        t = (d - bound) / np.sqrt(s2)
        p = _scipy.t.sf(t, df) if show else _scipy.t.cdf(t, df)
    flat = (np.ptp(a, 1) == 0)[:, None] & (np.ptp(b, 1) == 0)[None, :]
    p = np.where(flat, 1.0, p)  # no spread: no interval (as undecidable as a mix gets)
    i, j = np.unravel_index(np.argmax(p), p.shape)
    return _spread_or_none(welch(a[i].tolist(), b[j].tolist(), log=True))


def curve(
    plan: Plan,
    variant: str,
    base: str = BASELINE,
    folder: str = FOLDER,
    bounds: Sequence[float] = (),
) -> list[Speedup]:
    """The speed-up at every target of the grid, the headline's with its least favourable mixes
    at ``bounds`` (the rules read no other target's, and each search tries every mix)."""
    return [
        speedup(plan, variant, t, base, folder, bounds if t == HEADLINE else ()) for t in TARGETS
    ]


def maxima(plan: Plan, setup: str, folder: str = FOLDER) -> dict[int, float]:
    """Per seed, the maximum of its curve after step 0 smoothed by the plan's moving average
    (a diverged seed's: up to its divergence; chance if nothing is logged after step 0). Under
    ``plan.final_full_test``, its accuracy on the whole test set at its end instead (chance if it
    diverged): a reading the stopping rule never saw."""
    by_seed = curves(plan, setup, folder)
    if plan.final_full_test:
        final = committed.per_seed(folder, setup, "test_acc", plan.results, diverged_as=CHANCE)
        return {s: final[s] for s in by_seed}
    return {
        s: max(smoothed(trained_curve(c), plan.smoothing).values(), default=CHANCE)
        for s, c in by_seed.items()
    }


def unfinished(
    plan: Plan, arms: Sequence[str], label: Callable[[str], str], folder: str = FOLDER
) -> str:
    """The runs of ``arms`` whose maximum is not a plateau's, as a row says it: those that
    diverged (a maximum up to the divergence), those the cap stopped and those that stopped on
    reaching a target (the paper's protocol, the pilot's: lower bounds of where they would have
    levelled off); empty if every run ended at its plateau."""
    out, kinds, at_cap = [], set(), cap(plan, folder)
    for arm in arms:
        diverged = committed.diverged(folder, arm, plan.results)
        by_seed = curves(plan, arm, folder)
        capped = sum(not diverged[s] and max(c) >= at_cap for s, c in by_seed.items())
        rows = _converged_rows(plan, arm, folder)
        ended = [
            (sum(diverged[s] for s in by_seed), "diverged"),
            (capped, "stopped at the cap"),
            (sum(r.get("ended_by") == "target" for r in rows), "stopped at the target"),
        ]
        out += [f"{label(arm)} {n} run{'s' * (n > 1)} {how}" for n, how in ended if n]
        kinds |= {how for n, how in ended if n}
    why = ["a diverged run's maximum is the one it reached before diverging"] * (
        "diverged" in kinds
    )
    if stopped := [k.removeprefix("stopped ") for k in ("stopped at the cap", "stopped at the target") if k in kinds]:  # fmt: skip
        why.append(
            f"a run stopped {' or '.join(stopped)}: its maximum is a lower bound of its plateau"
        )
    return f" (not at a plateau: {', '.join(out)}; {'; '.join(why)})" if out else ""


def _converged_rows(plan: Plan, arm: str, folder: str) -> list[dict]:
    """How each of ``arm``'s runs ended, as the collection's Figure 3 record has it (none when
    the collection holds no record)."""
    summary = committed.summary(folder, plan.results)
    return summary.get("converged", {}).get("setups", {}).get(arm, {}).get("seeds", [])


def maximum_gap(plan: Plan, a: str, b: str, folder: str = FOLDER) -> Estimate:
    """``a``'s smoothed maximum − ``b``'s, unpaired (the pilot's pooled over every trained arm)."""
    family = lambda arm: list(maxima(plan, arm, folder).values())  # noqa: E731
    return compare(plan, family(a), family(b), family, log=False)


def share(
    plan: Plan,
    part: str,
    whole: str,
    base: str,
    target: float,
    folder: str = FOLDER,
    at_last: bool = False,
) -> Ratio:
    """The share of ``whole``'s speed-up over ``base`` (a ratio of log10 steps) that ``part``
    gets, with Fieller's set: the two speed-ups are differences of independent arms that share
    ``base``, whose variance is their covariance. The t quantile takes the smallest arm's
    ``n − 1`` degrees of freedom (confirmatory; conservative) or the pilot's pooled ones.
    Censored runs at the cap, or (``at_last``) at their last evaluation."""
    at = None if at_last else cap(plan, folder)
    steps = lambda k: _log_steps(reaches(plan, k, target, folder), at)  # noqa: E731
    arms = {k: steps(k) for k in (base, part, whole)}
    if confirmatory(plan):
        var = {k: statistics.variance(v) / len(v) for k, v in arms.items()}
        df = min(len(v) for v in arms.values()) - 1
    else:
        sd, df = pooled_spread(steps)
        var = {k: sd**2 / len(v) for k, v in arms.items()}
    m = {k: statistics.fmean(v) for k, v in arms.items()}
    return fieller_of(
        m[base] - m[part],
        m[base] - m[whole],
        var[base] + var[part],
        var[base] + var[whole],
        var[base],
        df,
        min(len(v) for v in arms.values()),
    )


def pilot_spread(plan: Plan, target: float, folder: str = FOLDER) -> Estimate:
    """The pilot's spread of a log-steps comparison between two arms it did not run: no mean
    (0), the pooled within-arm SD of :data:`POOLED` at ``target``, one seed an arm. What a
    power calculation needs for a control the pilot lacks."""
    sd, df = pooled_spread(lambda k: arm_log_steps(plan, k, target, folder))
    return Estimate(0.0, sd * math.sqrt(2), 1, log=True, df=df, spread=sd * math.sqrt(2))
