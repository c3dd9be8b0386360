"""The figure of the BN-only study (Frankle et al. 2021), made only from ``results/bn_only/``.

    python -m scripts.plot_bn_only

``bn_only.png``: per network, each arm's final test accuracy (every seed, and the mean with its
95% t-interval over seeds) against chance; and the γ-and-β-only arm's |γ| / max |γ| over every
channel of every norm at its last evaluation (the histogram's mean over seeds), with the
threshold below which a γ counts as switched off. The pilot's seeds.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.ticker import PercentFormatter

from experiments.kit.errors import MissingResult
from experiments.kit.trainable import GAMMA_BINS, SMALL_GAMMA
from experiments.studies import study
from scripts.analysis import committed
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import PLAN
from scripts.claims import bn_only as b
from scripts.claims.measure import CHANCE, final_accuracy
from scripts.plotting import figure_set, interval_errors, plt, save

STUDY = study("bn_only")


def _histogram(net: str) -> tuple[np.ndarray, int]:
    """The γ-and-β-only arm's histogram of |γ| / max |γ| at its last evaluation, averaged over
    seeds, and the seeds."""
    per_bin = []
    for k in range(GAMMA_BINS):
        curves = committed.series(b.PATHS[net], b.NORM[net], f"gamma/hist{k:02d}", PLAN.results)
        per_bin.append([c[max(c)] for _, c in sorted(curves.items())])
    values = np.array(per_bin)  # (bins, seeds)
    return values.mean(1), values.shape[1]


def figure() -> Path:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), layout="constrained")
    for row, net in zip(axes, b.NETS):
        ax = row[0]
        for i, arm in enumerate(b.ARMS[net]):
            style = STUDY.styles[arm]
            accs = np.array(list(final_accuracy(PLAN, b.PATHS[net], arm).values()))
            e = Estimate.of(accs)
            below, above = interval_errors(e)
            ax.plot(np.full(len(accs), i) + 0.12, accs, ".", color=style.color, alpha=0.6, ms=5)
            ax.errorbar(
                [i], [e.mean], yerr=[[below], [above]], color=style.color,
                marker="o", ms=6, capsize=4,
            )  # fmt: skip
            ax.annotate(f"{e.mean:.1%}", (i, e.mean), xytext=(-34, 0), textcoords="offset points", fontsize=7, va="center")  # fmt: skip
        ax.axhline(CHANCE, color="k", lw=0.6, ls=":", label="chance")
        ax.axhline(b.FAR_ABOVE.value, color="k", lw=0.6, ls="--", label="five times chance")
        ax.set_xticks(
            range(len(b.ARMS[net])),
            [textwrap.fill(STUDY.legend(a), 16) for a in b.ARMS[net]],
            fontsize=8,
        )
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set(ylim=(0, 1), ylabel="final test accuracy", title=b.NETS[net])
        ax.legend(fontsize=7, loc="lower left")
        ax = row[1]
        hist, seeds = _histogram(net)
        edges = np.linspace(0, 1, GAMMA_BINS + 1)
        ax.bar(edges[:-1], hist, width=1 / GAMMA_BINS, align="edge", color=STUDY.styles[b.NORM[net]].color, edgecolor="w")  # fmt: skip
        ax.axvline(
            SMALL_GAMMA, color="k", lw=0.8, ls="--", label=f"switched off: below {SMALL_GAMMA:g}"
        )
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set(
            xlabel="|γ| / its layer's largest |γ| (every channel of every norm)",
            ylabel="share of channels",
            title=f"{b.NETS[net]}: γ and β alone, last step (mean of {seeds} seeds)",
        )
        ax.legend(fontsize=7)
    fig.suptitle(
        "Training BatchNorm and only BatchNorm (Frankle et al. 2021): everything else frozen at "
        "initialization\nmean with its 95% t-interval over seeds, dots: seeds; each arm at its "
        "study's learning rate"
    )
    return save(fig, "bn_only.png")


@figure_set()
def main() -> None:
    try:
        for net in b.NETS:
            final_accuracy(PLAN, b.PATHS[net], b.NORM[net])
    except MissingResult:
        print("no result committed for the BN-only study: no figure")
        return
    print(f"figure: {figure()}")


if __name__ == "__main__":
    main()
