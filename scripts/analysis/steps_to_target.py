"""The converged protocol's own Figure 3 measure, steps to Inception's maximum: one definition for
the study's Figure 3 tables (:mod:`experiments.inception_fig3`) and its Figure 2, read here from the
converged protocol's curves (``results/inception/fashion_mnist_converged``). The claims read the
same runs as a time-to-accuracy curve at fixed targets instead
(:mod:`scripts.analysis.time_to_accuracy`): a target computed from the data moves with every seed.

Inception's maximum is the lowest of its seeds' plateaus, each the maximum of the seed's test
curve smoothed by a centred moving average (so not one noisy evaluation); a run's steps are its
first evaluation at or above it. The runs themselves stopped at the protocol's own stopping level
(the lowest seed's single best evaluation), which is never below this one, so every run that
stopped at it has crossed this target too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from scripts.analysis import committed
from scripts.analysis.windows import PLAN, Plan, first_step, smoothed

CONVERGED = committed.RESULTS / "inception/fashion_mnist_converged"
BASELINE = "inception"
METRIC = "test/acc_subset"


def curves(setup: str, folder: Path = CONVERGED) -> dict[int, dict[int, float]]:
    """``{seed: {step: accuracy on the fixed test subset}}`` of a converged-protocol folder."""
    return dict(sorted(committed.series(folder.name, setup, METRIC, folder.parent).items()))


def smoothed_curves(
    setup: str, plan: Plan = PLAN, folder: Path = CONVERGED
) -> dict[int, dict[int, float]]:
    return {seed: smoothed(c, plan.smoothing) for seed, c in curves(setup, folder).items()}


def inception_max(seed_curves: Iterable[Mapping[int, float]], plan: Plan = PLAN) -> float:
    """Inception's maximum from its seeds' test curves (``{step: accuracy}`` each): the
    lowest of their plateaus, each the maximum of a curve smoothed by a centred moving average of
    ``plan.smoothing`` evaluations (moved by the plan's offset, a robustness alternative)."""
    plateaus = [max(smoothed(dict(c), plan.smoothing).values()) for c in seed_curves]
    return min(plateaus) + plan.threshold_offset


CHANCE_SE = 4  # a target this few standard errors above chance is no target


def chance_ceiling(classes: int, images: int) -> float:
    """The highest accuracy a network at chance plausibly scores on ``images`` test images of
    ``classes`` balanced classes: chance plus :data:`CHANCE_SE` binomial standard errors of one
    evaluation. Inception's maximum at or below it is no target: the steps to it would be the
    steps to a lucky evaluation."""
    p = 1 / classes
    return p + CHANCE_SE * math.sqrt(p * (1 - p) / images)


def rule(plan: Plan = PLAN) -> str:
    """:func:`inception_max` in words."""
    return (
        "the lowest of the Inception seeds' plateaus, each the maximum of its curve smoothed by a "
        f"centred moving average of {plan.smoothing} evaluations"
    )


def threshold(plan: Plan = PLAN, folder: Path = CONVERGED) -> float:
    """Inception's maximum in a converged-protocol folder (:func:`inception_max`): the accuracy
    the claims count the steps to (the text calls it the target; ``target`` in code is the
    stopping rule's, ``train.stop.target``)."""
    return inception_max(curves(BASELINE, folder).values(), plan)


def steps(setup: str, level: float, folder: Path = CONVERGED) -> dict[int, int | None]:
    """Per seed, the first evaluation at or above ``level`` (None: never within the run)."""
    return {s: first_step(c, level) for s, c in curves(setup, folder).items()}
