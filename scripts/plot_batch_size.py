"""Figures of the batch-size study, made only from ``results/batch_size/`` (and its confirmatory
seeds' folder once they have run).

    python -m scripts.plot_batch_size

``batch_size_groups.png``: final test accuracy against the normalization group ``g`` for BN and
Batch Renorm under every evaluation, GroupNorm and LayerNorm as flat references; the mean over
seeds with its 95% t-interval.

``batch_size_precise.png``: (a) Precise BN − moving averages over training, per ``g`` (mean and
95% t-interval over seeds at each evaluation); (b) Precise BN's accuracy against its sample count.

``batch_size_small_data.png`` (once ``results/batch_size_small/`` exists): BN's final test
accuracy and its training − test gap against ``g``, on the whole training set and on its first
10,000 images.
"""

from __future__ import annotations

from pathlib import Path

from experiments.kit.errors import MissingResult
from experiments.studies import SIZE_BN, SIZE_BRN, SIZE_GROUPS, SIZE_PER_EXAMPLE, SMALL_DATA, study
from scripts.analysis.stats import Estimate, paired
from scripts.analysis.windows import CONFIRMED, PLAN, Plan
from scripts.claims import batch_size as b
from scripts.plotting import plt, save

STUDY = study("batch_size")
MODES = (  # metric, legend, line style, marker
    ("test/acc", "moving averages", "-", "o"),
    ("test/acc_precise", "Precise BN", "--", "s"),
    ("test/acc_precise_nobessel", "Precise BN, no Bessel", ":", "D"),
    ("test/acc_weighted", "example weighting", "-.", "^"),
    ("test/acc_train_mode", "training mode, test batches of g", (0, (1, 3)), "v"),
)


def _plan() -> Plan:
    """The confirmatory seeds once they have run, else the pilot."""
    try:
        b.final(CONFIRMED, SIZE_BN[32])
        return CONFIRMED
    except (MissingResult, FileNotFoundError, KeyError):
        return PLAN


def _band(ax, xs, estimates: list[Estimate], color, line, label, marker: str = "o") -> None:
    means = [e.mean for e in estimates]
    ax.plot(xs, means, color=color, linestyle=line, marker=marker, ms=4, label=label)
    low = [e.interval()[0] if e.interval() else e.mean for e in estimates]
    high = [e.interval()[1] if e.interval() else e.mean for e in estimates]
    ax.fill_between(xs, low, high, color=color, alpha=0.12)


def groups_figure(plan: Plan) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", sharey=True)
    for ax, (arms, name) in zip(axes, ((SIZE_BN, "BN"), (SIZE_BRN, "Batch Renorm"))):
        color = STUDY.styles[arms[32]].color
        for metric, label, line, marker in MODES:
            ests = [Estimate.of(list(b.final(plan, arms[g], metric).values())) for g in arms]
            _band(ax, list(arms), ests, color, line, label, marker)
        for setup in SIZE_PER_EXAMPLE:
            e = Estimate.of(list(b.final(plan, setup).values()))
            style = STUDY.styles[setup]
            ax.axhline(e.mean, color=style.color, linestyle=style.line, label=STUDY.labels[setup])
        ax.set_xscale("log", base=2)
        ax.set_xticks(SIZE_GROUPS, [str(g) for g in SIZE_GROUPS])
        ax.set_xlabel("normalization group g (gradient over 32)")
        ax.set_title(name)
    axes[0].set_ylabel("final test accuracy")
    axes[1].legend(fontsize=7)
    seeds = len(b.final(plan, SIZE_BN[32]))
    fig.suptitle(
        f"The conv net on Fashion-MNIST, gradient over 32, statistics over groups of g: every evaluation "
        f"of the same runs ({'confirmatory' if plan is CONFIRMED else 'pilot'} seeds, {seeds}); "
        "mean over seeds, shaded: its 95% t-interval",
        fontsize=9,
    )
    return save(fig, "batch_size_groups.png")


def precise_figure(plan: Plan) -> Path:
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    cmap = plt.get_cmap("viridis")
    for i, g in enumerate(SIZE_GROUPS):
        arm = SIZE_BN[g]
        ma = b.series(plan, b.PATH, arm, "test/acc")
        pr = b.series(plan, b.PATH, arm, "test/acc_precise")
        steps = sorted(s for s in next(iter(pr.values())) if s > 0)
        ests = [
            paired({k: v[s] for k, v in pr.items()}, {k: v[s] for k, v in ma.items()})
            for s in steps
        ]
        _band(ax, steps, ests, cmap(i / len(SIZE_GROUPS)), "-", f"g = {g}")
        counts = [
            Estimate.of(list(b.final(plan, arm, f"test/acc_precise_n{n}").values()))
            for n in b.COUNTS
        ]
        _band(bx, b.COUNTS, counts, cmap(i / len(SIZE_GROUPS)), "-", f"g = {g}")
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("Precise BN − moving averages (test accuracy)")
    ax.set_title("(a) BN: Precise BN against moving averages over training")
    ax.legend(fontsize=7)
    bx.set_xscale("log")
    bx.set_xlabel("training examples for Precise BN")
    bx.set_ylabel("final test accuracy")
    bx.set_title("(b) Precise BN against its sample count")
    return save(fig, "batch_size_precise.png")


def small_data_figure(plan: Plan) -> Path | None:
    """BN over groups of g on the whole training set (``plan``'s seeds) and on its first
    :data:`~experiments.studies.SMALL_DATA` images (the pilot): final test accuracy, and
    training − test accuracy; None until the small-data runs exist."""
    try:
        b.final(PLAN, SIZE_BN[32], path=b.SMALL)
    except MissingResult:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    runs = ((plan, b.PATH, "whole training set", "-", "o"), (PLAN, b.SMALL, f"first {SMALL_DATA:,} images", "--", "s"))  # fmt: skip
    color = STUDY.styles[SIZE_BN[32]].color
    for at, path, label, line, marker in runs:
        n = len(b.final(at, SIZE_BN[32], path=path))
        name = f"{label} ({n} {'confirmatory' if at is CONFIRMED else 'pilot'} seeds)"
        tests = [
            Estimate.of(list(b.final(at, SIZE_BN[g], path=path).values())) for g in SIZE_GROUPS
        ]
        gaps = [Estimate.of(list(b.gap(at, SIZE_BN[g], path).values())) for g in SIZE_GROUPS]
        _band(ax, list(SIZE_GROUPS), tests, color, line, name, marker)
        _band(bx, list(SIZE_GROUPS), gaps, color, line, name, marker)
    for axis in (ax, bx):
        axis.set_xscale("log", base=2)
        axis.set_xticks(SIZE_GROUPS, [str(g) for g in SIZE_GROUPS])
        axis.set_xlabel("BN's normalization group g (gradient over 32)")
    bx.axhline(0, color="0.5", lw=0.8)
    ax.set_ylabel("final test accuracy")
    ax.set_title("(a) Test accuracy")
    bx.set_ylabel("training − test accuracy")
    bx.set_title("(b) Overfitting: training minus test accuracy")
    ax.legend(fontsize=7)
    fig.suptitle(
        "BN over groups of g on the whole training set and on its first "
        f"{SMALL_DATA:,} images (3,000 steps of 32); mean over seeds, shaded: its 95% t-interval",
        fontsize=9,
    )
    return save(fig, "batch_size_small_data.png")


def main() -> None:
    plan = _plan()
    for path in (groups_figure(plan), precise_figure(plan), small_data_figure(plan)):
        if path is not None:
            print(path)


if __name__ == "__main__":
    main()
