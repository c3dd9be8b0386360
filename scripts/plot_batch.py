"""Figures of the batch studies on the Figure 1 MLP, made only from ``results/``.

    python -m scripts.plot_batch

``batch_composition.png``: final test accuracy with batches reshuffled every epoch and with each
batch's composition fixed, without and with BN, MNIST and Fashion-MNIST: every seed, the mean
with its 95% t-interval, the pilot beside the confirmatory seeds once they have run.
``outside_gradient.png``: BN against BN with its statistics outside the gradient over training:
the norm of the hidden layers' weights and biases, the training loss and the test accuracy, the
median over seeds and every seed (a run that went non-finite ends where it did).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import PercentFormatter

from experiments.kit.errors import MissingResult
from experiments.studies import study
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import CONFIRMED, PLAN, Plan
from scripts.claims import batch_composition as c
from scripts.claims import outside_gradient as o
from scripts.claims.measure import final_accuracy
from scripts.plotting import figure_set, interval_errors, plt, save

COMPOSITION, OUTSIDE = study("batch_composition"), study("outside_gradient")
SEED_SETS = (("pilot", PLAN), ("confirmatory", CONFIRMED))


def _available(read) -> list[tuple[str, Plan]]:
    out = []
    for name, plan in SEED_SETS:
        try:
            read(plan)
        except MissingResult:
            continue
        out.append((name, plan))
    return out


def _has(plan: Plan, data: str) -> bool:
    try:
        final_accuracy(plan, c._path(data), "bn")
    except MissingResult:
        return False
    return True


def composition_figure(sets: list[tuple[str, Plan]]) -> Path:
    fig, axes = plt.subplots(
        len(sets), len(c.DATASETS), figsize=(5.2 * len(c.DATASETS), 3.6 * len(sets)),
        layout="constrained", squeeze=False,
    )  # fmt: skip
    for row, (name, plan) in zip(axes, sets):
        for ax, (data, title) in zip(row, c.DATASETS.items()):
            if not _has(plan, data):
                ax.set_axis_off()
                ax.text(
                    0.5,
                    0.5,
                    f"{title}: {name} seeds not run yet",
                    ha="center",
                    transform=ax.transAxes,
                )
                continue
            for x, setup in enumerate(COMPOSITION.setups):
                style = COMPOSITION.styles[setup]
                accs = list(final_accuracy(plan, c._path(data), setup).values())
                e = Estimate.of(accs)
                below, above = interval_errors(e)
                ax.plot(np.full(len(accs), x + 0.15), accs, ".", color=style.color, alpha=0.5, ms=4)
                ax.errorbar(
                    [x], [e.mean], yerr=[[below], [above]], color=style.color,
                    marker="o" if style.line == "-" else "s", mfc="white" if style.line != "-" else style.color,
                    capsize=3, ls="none",
                )  # fmt: skip
            ax.set_xticks(range(len(COMPOSITION.setups)), [COMPOSITION.legend(s) for s in COMPOSITION.setups], fontsize=8)  # fmt: skip
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=2))
            ax.set(ylabel="final test accuracy", title=f"{title}: {name} seeds ({len(accs)})")
            ax.grid(axis="y", lw=0.3)
    fig.suptitle(
        "The batch's composition: batches reshuffled every epoch or fixed once (only their order "
        "reshuffled)\nthe Figure 1 MLP, 50,000 steps of 60; mean with its 95% t-interval over seeds, dots: seeds",
        fontsize=10,
    )
    return save(fig, "batch_composition.png")


def _median_curve(by_seed: dict[int, dict[int, float]]) -> tuple[list[int], list[float]]:
    """The median over the seeds that reached each step (a few seeds that blow up would pull a
    mean of norms and losses wherever they go)."""
    steps = sorted({s for curve in by_seed.values() for s in curve})
    medians = [float(np.median([c[s] for c in by_seed.values() if s in c])) for s in steps]
    return steps, medians


def outside_figure(name: str, plan: Plan) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), layout="constrained")
    for setup in OUTSIDE.setups:
        style = OUTSIDE.styles[setup]
        label = OUTSIDE.legend(setup)
        panels = (
            o.parameter_norms(plan, setup),
            o._curves(plan, setup, "train/loss"),
            o._curves(plan, setup, "test/acc"),
        )
        for ax, by_seed in zip(axes, panels):
            for curve in by_seed.values():
                steps = sorted(curve)
                ax.plot(steps, [curve[s] for s in steps], color=style.color, lw=0.4, alpha=0.35)
            ax.plot(*_median_curve(by_seed), color=style.color, ls=style.line, lw=1.6, label=label)
    axes[0].set(
        yscale="log", ylabel="‖θ‖: hidden layers' weights and biases", title="Parameter norm"
    )
    axes[1].set(
        yscale="log", ylabel="training loss (mean over each interval)", title="Training loss"
    )
    axes[2].set(ylabel="test accuracy (moving averages)", title="Test accuracy", ylim=(0, 1))
    axes[2].yaxis.set_major_formatter(PercentFormatter(1.0))
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(lw=0.3)
    axes[0].legend(fontsize=8)
    seeds = len(o.parameter_norms(plan, o.BN))
    fig.suptitle(
        f"Normalizing outside the gradient (BN paper Sec. 2): the Figure 1 MLP on MNIST, {name} seeds "
        f"({seeds}); thick: median over seeds, thin: each seed",
        fontsize=10,
    )
    return save(fig, "outside_gradient.png")


@figure_set()
def main() -> None:
    sets = [(n, plan) for n, plan in SEED_SETS if any(_has(plan, d) for d in c.DATASETS)]
    if sets:
        print(f"figure: {composition_figure(sets)}")
    else:
        print("no result committed for the batch's composition: no figure")
    sets = _available(lambda plan: o.parameter_norms(plan, o.BN))
    if sets:
        print(f"figure: {outside_figure(*sets[-1])}")
    else:
        print("no result committed for normalizing outside the gradient: no figure")


if __name__ == "__main__":
    main()
