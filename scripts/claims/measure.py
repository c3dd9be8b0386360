"""The measurements the claims share: per-seed accuracies, window summaries, ratios."""

from __future__ import annotations

import math
import statistics

from scripts.analysis import results
from scripts.analysis.stats import Estimate, NonFinite, log_ratios, paired
from scripts.analysis.windows import Plan, matched_by_progress


def final_accuracy(plan: Plan, path: str, setup: str, key: str = "test_acc") -> dict[int, float]:
    """Per seed, the end-of-run accuracy ``key`` of the summary; under the plan's ``final_mean``
    alternative, the late window's mean of the matching curve (``test_acc`` → ``test/acc``)."""
    if not plan.final_mean:
        return results.per_seed(path, setup, key)
    metric = key.replace("test_acc", "test/acc", 1)
    return plan.per_seed(results.series(path, setup, metric), plan.late, geometric=False)


def accuracy_gain(plan: Plan, path: str, a: str, b: str, key: str = "test_acc") -> Estimate:
    """``a − b`` in end-of-run accuracy, paired by seed."""
    return paired(final_accuracy(plan, path, a, key), final_accuracy(plan, path, b, key))


def early(
    plan: Plan, path: str, setup: str, metric: str, end: int, change: bool, geometric: bool = True
) -> dict[int, float]:
    """Per seed, ``metric`` summarised over the early window (steps after 0 up to ``end``)."""
    return plan.per_seed(
        results.series(path, setup, metric), lambda s: plan.early(s, end, change), geometric
    )


def late(
    plan: Plan, path: str, setup: str, metric: str, geometric: bool = True
) -> dict[int, float]:
    """Per seed, ``metric`` summarised over the late window (the second half of the run)."""
    return plan.per_seed(results.series(path, setup, metric), plan.late, geometric)


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


def matched(path: str, a: str, b: str, metric: str, change: bool) -> Estimate:
    """``a / b`` of ``metric`` at equal training loss, per seed (geometric mean over the loss
    levels both runs pass), on the log10 scale."""
    loss = {k: results.series(path, k, "train/loss") for k in (a, b)}
    value = {k: results.series(path, k, metric) for k in (a, b)}
    per_seed = {}
    for seed in sorted(loss[a].keys() & loss[b].keys()):
        pairs = matched_by_progress(
            loss[a][seed], value[a][seed], loss[b][seed], value[b][seed], change=change
        )
        ratios = [va / vb for _, va, vb in pairs]
        if not all(r > 0 and math.isfinite(r) for r in ratios):
            raise NonFinite(
                f"seed {seed}: a ratio of {metric} at equal loss is not positive and finite"
            )
        if ratios:
            per_seed[seed] = statistics.geometric_mean(ratios)
    return log_ratios(per_seed, dict.fromkeys(per_seed, 1.0))
