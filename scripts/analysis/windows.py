"""Phases of training and how a curve is summarised over one: the windows every claim uses.

- **Early** is the evaluations after step 0 up to ``early_end``; for a *change between
  evaluations* (a drift) it starts one evaluation later, so no value in it is a change away from
  the untrained network. Initialization is never in a window unless the claim is about it.
- **Late** is the second half of the run (steps after half the last step), for every claim.
- A window's per-seed value is the geometric mean of its evaluations for positive quantities
  whose values span orders of magnitude (drifts, losses, smoothness), the arithmetic mean for
  bounded ones (fractions, accuracies).

:class:`Plan` holds these choices; the robustness check re-decides every claim under a few
pre-declared alternatives (:data:`ALTERNATIVES`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from experiments.studies import CONFIRMATORY
from scripts.analysis.stats import AnalysisError, NonFinite


@dataclass(frozen=True)
class Plan:
    """The analysis choices a claim's windows and targets depend on."""

    end_shift: int = 0  # the early window's end, in evaluations (−1: one fewer)
    start_shift: int = 0  # the early window's start, in evaluations (+1: one later)
    late_from: float = 0.5  # the late window: steps after this fraction of the last step
    drop_first_late: bool = False  # the late window without its first evaluation
    median: bool = False  # the median over a window's evaluations instead of its mean
    final_mean: bool = False  # an end-of-run accuracy as the late window's mean, not the last value
    threshold_offset: float = 0.0  # a steps-to-target claim's threshold, moved by this (accuracy)
    smoothing: int = 5  # evaluations in the moving average a run's maximum (or a target) is read on
    steps_smoothing: int = (
        1  # evaluations in the centred moving average steps to a target are read on
    )
    final_full_test: bool = False  # a run's maximum as its final full-test-set accuracy instead
    loss_levels: int = 8  # training-loss levels of an at-equal-loss comparison
    trains_by_loss: bool = False  # a run "trains" by its final training loss, not its test accuracy
    root: str = "results"  # the results read: the pilot's, or the confirmatory seeds' folder

    @property
    def results(self) -> Path:
        return Path(self.root)

    def early(self, steps: list[int], end: int, change: bool = False) -> list[int]:
        """The early window's steps out of a curve's logged ``steps``."""
        after = after_init(steps)
        first = int(change) + self.start_shift
        last = max(sum(1 for s in after if s <= end) + self.end_shift, first + 1)
        return after[first:last]

    def late(self, steps: list[int]) -> list[int]:
        """The late window's steps: after ``late_from`` of the last logged step."""
        steps = sorted(steps)
        chosen = [s for s in steps if s > self.late_from * steps[-1]]
        return chosen[1:] if self.drop_first_late else chosen

    def average(self, values: list[float], geometric: bool) -> float:
        if geometric and not all(v > 0 for v in values):
            raise NonFinite(f"a geometric mean of {values}: every value must be positive")
        if self.median:
            return statistics.median(values)
        return statistics.geometric_mean(values) if geometric else statistics.fmean(values)

    def per_seed(
        self,
        by_seed: dict[int, dict[int, float]],
        window: Callable[[list[int]], list[int]],
        geometric: bool,
    ) -> dict[int, float]:
        """Per seed, the window's summary of its curve; a seed with nothing in the window is an
        EmptyWindow error and a NaN or infinite value a NonFinite one (a diverged run stops
        logging, so either can be one): neither is skipped."""
        ends = {seed: max(curve) for seed, curve in by_seed.items()}
        if len(set(ends.values())) > 1:
            raise EmptyWindow(
                f"the seeds' curves end at different steps {ends}: a run cut short or diverged, "
                "so one window would not be the same phase of training for every seed"
            )
        out = {}
        for seed, curve in sorted(by_seed.items()):
            values = [curve[s] for s in window(list(curve))]
            if not values:
                raise EmptyWindow(
                    f"seed {seed}: no evaluation in the window (steps {min(curve)}–{max(curve)} "
                    "logged; a run cut short or diverged?)"
                )
            if not all(math.isfinite(v) for v in values):
                raise NonFinite(
                    f"seed {seed}: NaN or infinite values in a window (a diverged run?)"
                )
            out[seed] = self.average(values, geometric)
        return out


class EmptyWindow(AnalysisError):
    """A seed logged nothing in a window the claim reads: the run is shorter than the plan."""


CHANCE = 0.1  # top-1 accuracy of a guess among ten classes (every dataset of the claims)
PLAN = Plan()
# The plan reading the confirmatory seeds' results, laid out under results/confirmatory/ as the
# pilots' are under results/.
CONFIRMED = replace(PLAN, root=str(PLAN.results / CONFIRMATORY))

# Each claim names the alternatives that apply to it (a window it does not use cannot move it).
ALTERNATIVES: dict[str, Plan] = {
    "early window one evaluation shorter": replace(PLAN, end_shift=-1),
    "early window one evaluation longer": replace(PLAN, end_shift=1),
    "early window starting one evaluation later": replace(PLAN, start_shift=1),
    "late window = last quarter": replace(PLAN, late_from=0.75),
    "late window without its first evaluation": replace(PLAN, drop_first_late=True),
    "median over a window's evaluations": replace(PLAN, median=True),
    "late-window mean instead of the final accuracy": replace(PLAN, final_mean=True),
    "target 0.5 pp lower": replace(PLAN, threshold_offset=-0.005),
    "targets 2 pp higher": replace(PLAN, threshold_offset=0.02),
    "targets 2 pp lower": replace(PLAN, threshold_offset=-0.02),
    "final full-test accuracy instead of the smoothed maximum": replace(PLAN, final_full_test=True),
    "moving average of 3 evaluations": replace(PLAN, smoothing=3),
    "steps to a target on a centred moving average of 3 evaluations": replace(
        PLAN, steps_smoothing=3
    ),
    "at equal loss over 5 levels": replace(PLAN, loss_levels=5),
    "at equal loss over 12 levels": replace(PLAN, loss_levels=12),
    "training-loss criterion of trainability": replace(PLAN, trains_by_loss=True),
}
EQUAL_LOSS_ALTERNATIVES = ("at equal loss over 5 levels", "at equal loss over 12 levels")
EARLY_ALTERNATIVES = (
    "early window one evaluation shorter",
    "early window one evaluation longer",
    "early window starting one evaluation later",
    "median over a window's evaluations",
)
LATE_ALTERNATIVES = (
    "late window = last quarter",
    "late window without its first evaluation",
    "median over a window's evaluations",
)


def after_init(steps: Iterable[int]) -> list[int]:
    """The logged steps after the evaluation at initialization (step 0), in order: no window and
    no maximum reads initialization."""
    return sorted(s for s in steps if s > 0)


def smoothed(curve: dict[int, float], width: int) -> dict[int, float]:
    """A centred moving average over ``width`` evaluations (fewer at the ends)."""
    steps = sorted(curve)
    half = width // 2
    return {
        s: statistics.fmean(curve[t] for t in steps[max(0, i - half) : i + half + 1])
        for i, s in enumerate(steps)
    }


def first_step(curve: dict[int, float], threshold: float) -> int | None:
    """The first logged step at which ``curve`` reaches ``threshold`` (None: never)."""
    return next((s for s in sorted(curve) if curve[s] >= threshold), None)


def matched_by_progress(
    a_progress: dict[int, float],
    a_value: dict[int, float],
    b_progress: dict[int, float],
    b_value: dict[int, float],
    levels: int = 8,
    change: bool = False,
) -> list[tuple[float, float, float]]:
    """Two runs compared at equal progress: ``(level, a, b)`` for ``levels`` log-spaced values of
    a decreasing progress measure (the training loss) that both runs pass after step 0, each
    run's ``value`` taken at its first evaluation at or below the level.

    The levels span from the higher of the two runs' first losses after step 0 (after the
    second evaluation for a ``change`` between evaluations, as in :meth:`Plan.early`) down to
    the higher of their lowest losses, so each run reaches every level.
    """
    skip = int(change)
    a_progress, b_progress = trained_curve(a_progress, skip), trained_curve(b_progress, skip)
    top = max(a_progress[min(a_progress)], b_progress[min(b_progress)])
    bottom = max(min(a_progress.values()), min(b_progress.values()))
    if not 0 < bottom < top:
        return []
    ratio = (bottom / top) ** (1 / (levels - 1))
    out = []
    for k in range(levels):
        level = top * ratio**k
        sa, sb = _reached(a_progress, level), _reached(b_progress, level)
        if sa in a_value and sb in b_value:
            out.append((level, a_value[sa], b_value[sb]))
    return out


def trained_curve(curve: dict[int, float], skip: int = 0) -> dict[int, float]:
    """``curve`` (``{step: value}``) after initialization (:func:`after_init`), in step order,
    without its first ``skip`` of those steps."""
    return {s: curve[s] for s in after_init(curve)[skip:]}


def _reached(progress: dict[int, float], level: float) -> int:
    return next(s for s in sorted(progress) if progress[s] <= level * (1 + 1e-12))
