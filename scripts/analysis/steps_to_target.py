"""The BN paper's Figure 3 measure, steps to Inception's maximum, from the converged protocol's
curves (``results/inception/fashion_mnist_converged``): one definition for the claims table and
the figure.

Inception's maximum is the lowest of its seeds' plateaus, each the maximum of the seed's test
curve smoothed by a centred moving average (so not one noisy evaluation); a run's steps are its
first evaluation at or above it. The runs themselves stopped at the protocol's own target (the
lowest seed's single best evaluation), which is never below this one, so every run that stopped
at it has crossed this target too.
"""

from __future__ import annotations

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


def threshold(plan: Plan = PLAN, folder: Path = CONVERGED) -> float:
    """Inception's maximum (moved by the plan's offset, a robustness alternative): the accuracy
    the claims count the steps to (the text calls it the target; ``target`` in code is the
    stopping rule's, ``train.stop.target``)."""
    plateaus = [max(c.values()) for c in smoothed_curves(BASELINE, plan, folder).values()]
    return min(plateaus) + plan.threshold_offset


def steps(setup: str, threshold: float, folder: Path = CONVERGED) -> dict[int, int | None]:
    """Per seed, the first evaluation at or above ``threshold`` (None: never within the run)."""
    return {s: first_step(c, threshold) for s, c in curves(setup, folder).items()}
