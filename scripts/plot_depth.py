"""The depth sweep's figure (mechanism study), made only from ``results/mechanism/depth/runs.csv``.

    python -m scripts.plot_depth   # writes results/figures/depth_gradient_ratio.png (and .svg)

Per activation, ``‖∂L/∂W_first‖ / ‖∂L/∂W_last‖`` against depth: with BN at initialization and
after 1, 10 and 100 SGD steps, and without BN at initialization and after 100 steps; the
geometric mean over seeds, the band from the smallest to the largest seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import NullLocator

from scripts.analysis import committed
from scripts.plotting import SPREAD, TITLES, figure_set, plt, read_curves, save, t_band

RESULTS = Path("results/mechanism/depth")
ACTIVATIONS = ("sigmoid", "relu", "linear")
LINES = [  # (setup base, step, color, style, label)
    ("deep_mlp_bn", 0, "#c44e52", "-", "BN, at init"),
    ("deep_mlp_bn", 1, "#dd8452", "-", "BN, after 1 step"),
    ("deep_mlp_bn", 10, "#ccb974", "-", "BN, after 10 steps"),
    ("deep_mlp_bn", 100, "#55a868", "-", "BN, after 100 steps"),
    ("deep_mlp", 0, "#4c4c4c", "--", "no BN, at init"),
    ("deep_mlp", 100, "#8c8c8c", ":", "no BN, after 100 steps"),
]


def ratio_at(data: dict, setup: str, step: int) -> list[float]:
    """Every seed's gradient ratio of ``setup`` at ``step`` (a seed that diverged before is absent)."""
    out = []
    for (s, _), metrics in sorted(data.items()):
        if s == setup and "grad_ratio" in metrics:
            steps, values = metrics["grad_ratio"]
            out += [v for st, v in zip(steps, values) if st == step]
    return out


def figure(folder: Path = RESULTS) -> Path:
    data = read_curves(folder / "runs.csv")
    summary = committed.read_summary(folder)
    depths = sorted({e["depth"] for e in summary["setups"].values()})
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), layout="constrained", sharey=True)
    for ax, act in zip(axes, ACTIVATIONS):
        for base, step, color, style, label in LINES:
            rows = [(d, ratio_at(data, f"{base}_{act}_d{d}", step)) for d in depths]
            rows = [(d, v) for d, v in rows if v and all(x > 0 and np.isfinite(x) for x in v)]
            if not rows:
                continue
            ds = [d for d, _ in rows]
            width = max(len(v) for _, v in rows)
            logs = np.full((width, len(rows)), np.nan)
            for j, (_, v) in enumerate(rows):
                logs[: len(v), j] = np.log10(v)
            mean, low, high = (10**x for x in t_band(logs))  # the geometric mean and its interval
            ax.plot(ds, mean, color=color, ls=style, marker="o", ms=3, label=label)
            ax.fill_between(ds, low, high, color=color, alpha=0.15)
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set(xscale="log", yscale="log", xlabel="hidden layers", title=f"{act}")
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.xaxis.set_minor_locator(NullLocator())
    axes[0].set_ylabel("‖∂L/∂W_first‖ / ‖∂L/∂W_last‖ (fixed batch of 60)")
    axes[-1].legend(fontsize=7, loc="upper left")
    fig.suptitle(
        f"Gradients across depth (Yang et al. 2019): width-100 MLPs on {TITLES.get(summary['data'], summary['data'])}, SGD lr "
        f"{summary['lr']}, batch {summary['batch_size']}; geometric mean over seeds\n{SPREAD} (of the log)"
    )
    return save(fig, "depth_gradient_ratio.png")


@figure_set()
def main() -> None:
    if (RESULTS / "runs.csv").exists():
        print(f"figure: {figure()}")
    else:
        print(f"skipped: no {RESULTS / 'runs.csv'} yet (make reproduce-depth)")


if __name__ == "__main__":
    main()
