"""The BN paper's Figure 3 as a time-to-accuracy curve: the steps each run takes to reach each of a
grid of fixed accuracies, and each variant's speed-up over Inception at every one of them.

Figure 3 counts the steps each BN variant needs to reach Inception's maximum. A target computed
from the data (Inception's plateau) moves when seeds are added and, at this scale, sits at the
ceiling every variant shares; so the claims read the whole curve at accuracies fixed before the
confirmatory runs (:data:`TARGETS`), and the headline speed-up at :data:`HEADLINE`.

- **Steps to a target**: a run's first evaluation at or above it, on the fixed test subset the
  runs are evaluated on (``test/acc_subset``).
- **A run that never reaches it** enters at the cap (``train.steps``, the last step any run of
  the protocol may reach): an Inception run so censored makes the speed-up smaller than it is
  (conservative for "faster"); a variant's is counted as slow as any run could be seen to be.
  Every row says how many runs were censored.
- **The speed-up** is Inception's steps over the variant's as a difference of mean log10 steps
  (the ratio of geometric means). The arms share no data order (BN-x5 reshuffles within shards,
  Inception does not), so nothing pairs seed ``i`` of one with seed ``i`` of the other: the
  comparison is unpaired. The confirmatory seeds are compared by Welch's test; the pilot, with
  one or two seeds an arm, by the pooled within-arm SD of every arm of the protocol
  (:func:`scripts.analysis.stats.pooled`), which is also the spread its power calculation uses.
- **A variant's maximum** is the largest value of its curve smoothed by a centred moving average
  of the plan's ``smoothing`` evaluations (one evaluation on the subset is noisy), compared
  between arms the same way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from experiments.kit.errors import MissingResult
from experiments.studies import CONFIRMATORY
from scripts.analysis import committed
from scripts.analysis.stats import Estimate, Ratio, fieller_of, pooled, pooled_sd, welch
from scripts.analysis.windows import Plan, first_step, smoothed

FOLDER = "inception/fashion_mnist_converged"  # under the plan's root: the pilot's or the confirmatory seeds'
METRIC = "test/acc_subset"
BASELINE = "inception"
# Fashion-MNIST accuracies below the ceiling every variant shares at this scale (≈ 85–87%),
# spanning the range where the pilot's Inception curves still climb.
TARGETS = (0.75, 0.78, 0.80, 0.82, 0.84)
# The headline speed-up (the paper's "steps to Inception's maximum"): the highest target every
# pilot Inception seed reached well before the cap (at 4,300 and 2,600 steps of 8,000).
HEADLINE = 0.82


@dataclass(frozen=True)
class Reach:
    """One run's steps to a target: when it first reached it, or the cap if it never did."""

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


def curves(plan: Plan, setup: str, folder: str = FOLDER) -> dict[int, dict[int, float]]:
    require_arms(plan, setup, folder=folder)
    return dict(sorted(committed.series(folder, setup, METRIC, plan.results).items()))


def reaches(plan: Plan, setup: str, target: float, folder: str = FOLDER) -> dict[int, Reach]:
    """Per seed, its steps to ``target`` (the plan's offset added), censored at the cap."""
    level, last = target + plan.threshold_offset, cap(plan, folder)
    out = {}
    for seed, curve in curves(plan, setup, folder).items():
        step = first_step(curve, level)
        out[seed] = Reach(last, False) if step is None else Reach(step, True)
    return out


def _log_steps(r: dict[int, Reach]) -> list[float]:
    return [math.log10(max(x.steps, 1)) for x in r.values()]


def arm_log_steps(plan: Plan, setup: str, target: float, folder: str = FOLDER) -> list[float]:
    """Per seed, log10 of its steps to ``target`` (:func:`reaches`)."""
    return _log_steps(reaches(plan, setup, target, folder))


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


@dataclass(frozen=True)
class Speedup:
    """A variant's speed-up over Inception at one target (a log10 estimate) and its censored
    runs."""

    target: float
    estimate: Estimate
    base_censored: int
    variant_censored: int
    seeds: tuple[int, int]  # (Inception's, the variant's)

    def text(self) -> str:
        censored = [
            f"{n} {who} run{'s' * (n > 1)} never reached it"
            for n, who in ((self.base_censored, "Inception"), (self.variant_censored, "variant"))
            if n
        ]
        extra = f"; {', '.join(censored)}" if censored else ""
        return f"{self.target:.0%}: {self.estimate.text()}{extra}"


def speedup(
    plan: Plan, variant: str, target: float, base: str = BASELINE, folder: str = FOLDER
) -> Speedup:
    """``variant``'s speed-up over ``base`` at ``target``: ``log10`` of the ratio of their
    geometric-mean steps (see the module)."""
    b, v = reaches(plan, base, target, folder), reaches(plan, variant, target, folder)
    family = lambda arm: arm_log_steps(plan, arm, target, folder)  # noqa: E731
    e = compare(plan, _log_steps(b), _log_steps(v), family, log=True)
    return Speedup(
        target,
        e,
        sum(not x.reached for x in b.values()),
        sum(not x.reached for x in v.values()),
        (len(b), len(v)),
    )


def curve(plan: Plan, variant: str, base: str = BASELINE, folder: str = FOLDER) -> list[Speedup]:
    """The speed-up at every target of the grid."""
    return [speedup(plan, variant, t, base, folder) for t in TARGETS]


def maxima(plan: Plan, setup: str, folder: str = FOLDER) -> dict[int, float]:
    """Per seed, the maximum of its curve smoothed by the plan's moving average."""
    return {
        s: max(smoothed(c, plan.smoothing).values()) for s, c in curves(plan, setup, folder).items()
    }


def maximum_gap(plan: Plan, a: str, b: str, folder: str = FOLDER) -> Estimate:
    """``a``'s smoothed maximum − ``b``'s, unpaired (the pilot's pooled over every trained arm)."""
    family = lambda arm: list(maxima(plan, arm, folder).values())  # noqa: E731
    return compare(plan, family(a), family(b), family, log=False)


def share(
    plan: Plan, part: str, whole: str, base: str, target: float, folder: str = FOLDER
) -> Ratio:
    """The share of ``whole``'s speed-up over ``base`` (a ratio of log10 steps) that ``part``
    gets, with Fieller's set: the two speed-ups are differences of independent arms that share
    ``base``, whose variance is their covariance. The t quantile takes the smallest arm's
    ``n − 1`` degrees of freedom (confirmatory; conservative) or the pilot's pooled ones."""
    arms = {k: arm_log_steps(plan, k, target, folder) for k in (base, part, whole)}
    if confirmatory(plan):
        var = {k: statistics.variance(v) / len(v) for k, v in arms.items()}
        df = min(len(v) for v in arms.values()) - 1
    else:
        sd, df = pooled_spread(lambda k: arm_log_steps(plan, k, target, folder))
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
