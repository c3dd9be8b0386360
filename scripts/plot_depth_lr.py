"""The figure of trainable depth against the learning rate, made only from
``results/mechanism/depth_lr/``.

    python -m scripts.plot_depth_lr

``depth_lr.png``: a heat map per network (with BN, without), depth against learning rate, each
cell the fraction of seeds whose run trains (:func:`scripts.claims.depth_lr.trains`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.kit.errors import MissingResult
from scripts.analysis.windows import PLAN
from scripts.claims import depth_lr as d
from scripts.plotting import figure_set, plt, save

PANELS = ((d.BN, "with BN"), (d.PLAIN, "without BN (He initialization)"))


def fractions(by_seed: dict[int, dict[float, dict[int, bool]]]) -> np.ndarray:
    """``(depths, rates)``: the fraction of seeds that train in each cell (NaN: no seed ran it)."""
    out = np.full((len(d.DEPTHS), len(d.RATES)), np.nan)
    for i, depth in enumerate(d.DEPTHS):
        for j, rate in enumerate(d.RATES):
            seen = [v[rate][depth] for v in by_seed.values() if depth in v.get(rate, {})]
            if seen:
                out[i, j] = sum(seen) / len(seen)
    return out


def figure(grid: d.Grid) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained", sharey=True)
    for ax, (norm, title) in zip(axes, PANELS):
        by_seed = grid.get(norm, {})
        share = fractions(by_seed)
        image = ax.imshow(share, origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
        for (i, j), v in np.ndenumerate(share):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.0%}", ha="center", va="center", fontsize=7, color="w" if v < 0.5 else "k")  # fmt: skip
        ax.set_xticks(range(len(d.RATES)), [f"{r:g}" for r in d.RATES])
        ax.set_yticks(range(len(d.DEPTHS)), [str(k) for k in d.DEPTHS])
        ax.set(xlabel="learning rate (plain SGD)", title=f"{title}, {len(by_seed)} seeds")
    axes[0].set_ylabel("hidden layers")
    fig.colorbar(image, ax=axes, label="fraction of seeds that train")
    fig.suptitle(
        f"Trainable depth against the learning rate (Yang et al. 2019): ReLU MLPs of width 100 on "
        f"MNIST, {d.DEPTH_LR_STEPS:,} steps;\na run trains if its loss stays finite and it ends at "
        f"{d.TRAINS:.0%} or more on {d.DEPTH_LR_TEST:,} test images"
    )
    return save(fig, "depth_lr.png")


@figure_set()
def main() -> None:
    try:
        grid = d.runs(PLAN)
    except MissingResult:
        print("no result committed for the depth x learning-rate grid: no figure")
        return
    print(f"figure: {figure(grid)}")


if __name__ == "__main__":
    main()
