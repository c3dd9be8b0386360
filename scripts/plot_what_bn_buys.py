"""Figures of the study of what BN buys, made only from ``results/what_bn_buys/``.

    python -m scripts.plot_what_bn_buys

``what_bn_buys_lr.png``: the conv net's final test accuracy against its initial learning rate,
with BN and without: every seed (a cross at chance: the run diverged), the mean with its 95%
t-interval over seeds, the pilot beside the confirmatory seeds once they have run, and the rates
the claims read marked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import PercentFormatter

from experiments.kit.errors import MissingResult
from experiments.studies import study
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import CONFIRMED, PLAN
from scripts.claims import what_bn_buys as w
from scripts.plotting import figure_set, plt, save

STUDY = study("what_bn_buys")
SEED_SETS = (
    ("pilot", PLAN),
    ("confirmatory", CONFIRMED),
)


def lr_figure() -> Path:
    sets = []
    for name, plan in SEED_SETS:
        try:
            sets.append((name, w.runs(plan)))
        except MissingResult:
            continue
    fig, axes = plt.subplots(
        1, len(sets), figsize=(5.6 * len(sets), 4), layout="constrained", squeeze=False, sharex=True
    )
    for ax, (name, data) in zip(axes[0], sets):
        for j, k in enumerate((w.BN, w.PLAIN)):
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
                low, high = e.interval() or (e.mean, e.mean)
                means.append(e.mean)
                lows.append(e.mean - low)
                highs.append(high - e.mean)
            ax.errorbar(
                [r * shift for r in rates], means, yerr=[lows, highs], color=style.color,
                ls=style.line, marker="o", ms=4, capsize=2,
                label=f"{style.legend} ({len(data[k])} seeds)",
            )  # fmt: skip
        ax.axhline(w.TRAINS, color="k", lw=0.7, ls=":", label=f"trains: {w.TRAINS:.0%} or more")
        ax.axhline(w.CHANCE, color="k", lw=0.5)
        shared = w.shared_rate()
        ax.axvline(shared, color="k", lw=0.7, ls="--", label=f"shared rate {shared:g} (pilot)")
        ax.set_xscale("log")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set(
            xlabel="initial learning rate",
            ylabel="final test accuracy (Fashion-MNIST)",
            title=f"{name} seeds (x: a diverged run, at chance)",
            ylim=(0, 1),
        )
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(
        "What BN buys (Bjorck et al. 2018): the conv net with and without BN across initial rates\n"
        "batch 32, 3,000 steps, Fashion-MNIST; mean with its 95% t-interval over seeds, dots: seeds"
    )
    return save(fig, "what_bn_buys_lr.png")


@figure_set()
def main() -> None:
    try:
        w.runs(PLAN)
    except MissingResult:
        print("no result committed for the learning-rate control: no figure")
        return
    print(f"figure: {lr_figure()}")


if __name__ == "__main__":
    main()
