"""The measurements the claims share: per-seed accuracies, window summaries, ratios. Every one
reads the results ``plan.root`` holds (the pilot's, or the confirmatory seeds')."""

from __future__ import annotations

import math
import statistics

from scripts.analysis import committed
from scripts.analysis.stats import Estimate, NonFinite, log_ratios, paired, same_seeds
from scripts.analysis.windows import CHANCE, Plan, matched_by_progress

# Ten classes: every data set of the CPU-scale studies. A diverged run's accuracy (committed.per_seed).


def series(plan: Plan, path: str, setup: str, metric: str) -> dict[int, dict[int, float]]:
    """``{seed: {step: value}}`` of one setup's metric in the results the plan reads."""
    return committed.series(path, setup, metric, plan.results)


def metrics(plan: Plan, path: str, setup: str, ending: str) -> list[str]:
    """The metrics of ``setup`` whose names end with ``ending``, in the order logged."""
    return [m for s, m in committed.curves(path, plan.results) if s == setup and m.endswith(ending)]


def summary_values(plan: Plan, path: str, setup: str, key: str) -> dict[int, float]:
    """``{seed: value}`` of a per-seed summary entry; a diverged run's is an error."""
    return committed.per_seed(path, setup, key, plan.results)


def final_accuracy(plan: Plan, path: str, setup: str, key: str = "test_acc") -> dict[int, float]:
    """Per seed, the end-of-run accuracy ``key`` of the summary, a diverged run at chance;
    under the plan's ``final_mean`` alternative, the late window's mean of the matching curve
    (``test_acc`` → ``test/acc``)."""
    if not plan.final_mean:
        return committed.per_seed(path, setup, key, plan.results, diverged_as=CHANCE)
    metric = key.replace("test_acc", "test/acc", 1).replace("train_acc", "train/acc", 1)
    return plan.per_seed(series(plan, path, setup, metric), plan.late, geometric=False)


def accuracy_gain(plan: Plan, path: str, a: str, b: str, key: str = "test_acc") -> Estimate:
    """``a − b`` in end-of-run accuracy, paired by seed."""
    return paired(final_accuracy(plan, path, a, key), final_accuracy(plan, path, b, key))


def early(
    plan: Plan, path: str, setup: str, metric: str, end: int, change: bool, geometric: bool = True
) -> dict[int, float]:
    """Per seed, ``metric`` summarised over the early window (steps after 0 up to ``end``)."""
    return plan.per_seed(
        series(plan, path, setup, metric), lambda s: plan.early(s, end, change), geometric
    )


def late(
    plan: Plan, path: str, setup: str, metric: str, geometric: bool = True
) -> dict[int, float]:
    """Per seed, ``metric`` summarised over the late window (the second half of the run)."""
    return plan.per_seed(series(plan, path, setup, metric), plan.late, geometric)


def early_ratio(
    plan: Plan, path: str, a: str, b: str, metric: str, end: int, change: bool
) -> Estimate:
    """``a / b`` of the early windows' geometric means, per seed, on the log10 scale."""
    return log_ratios(
        early(plan, path, a, metric, end, change), early(plan, path, b, metric, end, change)
    )


def late_ratio(plan: Plan, path: str, a: str, b: str, metric: str) -> Estimate:
    """``a / b`` of the late windows' geometric means, per seed, on the log10 scale."""
    return log_ratios(late(plan, path, a, metric), late(plan, path, b, metric))


EQUAL_LOSS_METHOD = (
    "at equal training loss: log-spaced training-loss levels both networks pass (8; 5 and 12 as "
    "robustness alternatives), from the higher of their losses at the first evaluation after step "
    "0 (the second, for a change between evaluations) to the higher of their lowest, each network's "
    "value at its first evaluation at or below the level; geometric mean over levels"
)


def matched(plan: Plan, path: str, a: str, b: str, metric: str, change: bool) -> Estimate:
    """``a / b`` of ``metric`` at equal training loss, per seed (geometric mean over the
    plan's ``loss_levels`` levels both runs pass), on the log10 scale. A seed whose two runs
    share no level is an error, not a seed to skip."""
    loss = {k: series(plan, path, k, "train/loss") for k in (a, b)}
    value = {k: series(plan, path, k, metric) for k in (a, b)}
    per_seed = {}
    for seed in same_seeds(loss[a], loss[b]):
        pairs = matched_by_progress(
            loss[a][seed], value[a][seed], loss[b][seed], value[b][seed],
            levels=plan.loss_levels, change=change,
        )  # fmt: skip
        ratios = [va / vb for _, va, vb in pairs]
        if not ratios or not all(r > 0 and math.isfinite(r) for r in ratios):
            raise NonFinite(
                f"seed {seed}: no positive, finite ratio of {metric} at equal loss ({ratios})"
            )
        per_seed[seed] = statistics.geometric_mean(ratios)
    return log_ratios(per_seed, dict.fromkeys(per_seed, 1.0))
