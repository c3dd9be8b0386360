"""Figures of the study of what BN buys, made only from ``results/what_bn_buys/``.

    python -m scripts.plot_what_bn_buys

``what_bn_buys_lr.png``: the conv net's final test accuracy against its initial learning rate,
with BN and without: every seed (a cross at chance: the run diverged), the mean with its 95%
t-interval over seeds, the pilot beside the confirmatory seeds once they have run, and the rates
the claims read marked. ``what_bn_buys_mlps.png``: the same for the Figure 1 MLP and the ReLU MLP
on MNIST, a row each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import PercentFormatter

from experiments.kit.errors import MissingResult
from experiments.studies import LR_MLP_RUN, LR_RELU_RUN, study
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import CONFIRMED, PLAN
from scripts.claims import what_bn_buys as w
from scripts.claims import what_bn_buys_mlp as m
from scripts.plotting import figure_set, interval_errors, plt, save

STUDY = study("what_bn_buys")
SEED_SETS = (
    ("pilot", PLAN),
    ("confirmatory", CONFIRMED),
)
MLPS = (
    (m.MLP, m.FIG1_MLP, m.steps(LR_MLP_RUN)),
    (m.RELU, m.RELU_MLP, m.steps(LR_RELU_RUN)),
)


def panel(ax, net: w.Net, data: dict, title: str, ylabel: str) -> None:
    """One network's seeds on ``ax``: every seed, each rate's mean with its 95% t-interval, a
    cross at chance where a run diverged, and the pilot's shared rate."""
    for j, k in enumerate((net.bn, net.plain)):
        style = STUDY.styles[k]
        shift = 1.04 if j else 1 / 1.04  # the two networks side by side at each rate
        means, lows, highs = [], [], []
        rates = sorted({r for by_rate in data[k].values() for r in by_rate})  # the ones it ran
        for r in rates:
            accs = [w.CHANCE if v[r] is None else v[r] for v in data[k].values()]
            dead = [v[r] is None for v in data[k].values()]
            x = np.full(len(accs), r * shift)
            ax.plot(x[~np.array(dead)], np.array(accs)[~np.array(dead)], ".", color=style.color, alpha=0.5, ms=4)  # fmt: skip
            if any(dead):
                ax.plot([r * shift], [w.CHANCE], "x", color=style.color, ms=7)
            e = Estimate.of(accs)
            below, above = interval_errors(e)
            means.append(e.mean)
            lows.append(below)
            highs.append(above)
        ax.errorbar(
            [r * shift for r in rates], means, yerr=[lows, highs], color=style.color,
            ls=style.line, marker="o", ms=4, capsize=2,
            label=f"{style.legend} ({len(data[k])} seeds)",
        )  # fmt: skip
    ax.axhline(w.TRAINS, color="k", lw=0.7, ls=":", label=f"trains: {w.TRAINS:.0%} or more")
    ax.axhline(w.CHANCE, color="k", lw=0.5)
    try:
        shared = w.shared_rate(net)
        ax.axvline(shared, color="k", lw=0.7, ls="--", label=f"shared rate {shared:g} (pilot)")
    except ValueError:
        pass  # no rate at which every pilot seed of both trains: none to mark
    ax.set_xscale("log")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set(xlabel="initial learning rate", ylabel=ylabel, title=title, ylim=(0, 1))
    ax.legend(fontsize=7, loc="lower left")


def _seed_sets(net: w.Net) -> list[tuple[str, dict]]:
    """The pilot's runs of ``net`` and, once they have run, its confirmatory seeds'."""
    sets = []
    for name, plan in SEED_SETS:
        try:
            sets.append((name, w.runs(plan, net)))
        except MissingResult:
            continue
    return sets


def lr_figure() -> Path:
    sets = _seed_sets(w.CONV)
    fig, axes = plt.subplots(
        1, len(sets), figsize=(5.6 * len(sets), 4), layout="constrained", squeeze=False, sharex=True
    )
    for ax, (name, data) in zip(axes[0], sets):
        title = f"{name} seeds (x: a diverged run, at chance)"
        panel(ax, w.CONV, data, title, "final test accuracy (Fashion-MNIST)")
    fig.suptitle(
        "What BN buys (Bjorck et al. 2018): the conv net with and without BN across initial rates\n"
        "batch 32, 3,000 steps, Fashion-MNIST; mean with its 95% t-interval over seeds, dots: seeds"
    )
    return save(fig, "what_bn_buys_lr.png")


def mlp_figure() -> Path:
    """The two MLPs, a row each (the Figure 1 MLP above the ReLU MLP), the pilot's seeds beside
    the confirmatory seeds once they have run."""
    nets = [(net, name, steps, _seed_sets(net)) for net, name, steps in MLPS]
    nets = [n for n in nets if n[3]]
    cols = max(len(sets) for *_, sets in nets)
    fig, axes = plt.subplots(
        len(nets),
        cols,
        figsize=(5.6 * cols, 4 * len(nets)),
        layout="constrained",
        squeeze=False,
        sharex="row",  # the confirmatory seeds' few rates on the pilot's grid
    )
    for row, (net, name, steps, sets) in zip(axes, nets):
        for ax, (seeds, data) in zip(row, sets):
            title = f"{name}, {steps:,} steps: {seeds} seeds"
            panel(ax, net, data, title, "final test accuracy (MNIST)")
        for ax in row[len(sets) :]:
            ax.set_visible(False)
    fig.suptitle(
        "What BN buys (Bjorck et al. 2018): the two MLPs with and without BN across initial rates\n"
        "batch 60, plain SGD at a constant rate; mean with its 95% t-interval over seeds, dots: "
        "seeds, x: a diverged run (at chance)"
    )
    return save(fig, "what_bn_buys_mlps.png")


@figure_set()
def main() -> None:
    try:
        w.runs(PLAN)
        print(f"figure: {lr_figure()}")
    except MissingResult:
        print("no result committed for the learning-rate control: no figure")
    if any(_seed_sets(net) for net, _, _ in MLPS):
        print(f"figure: {mlp_figure()}")
    else:
        print("no result committed for the MLPs across learning rates: no figure")


if __name__ == "__main__":
    main()
