"""The figure of Batch Renorm's α and the ramp's loss spikes, made only from the committed
``results/renorm_alpha/fashion_mnist/runs.csv`` (and the confirmatory seeds' once they have run).

    python -m scripts.plot_renorm_alpha     # writes results/figures/renorm_alpha.png

(a) Test accuracy over training with the moving averages (solid) and with population statistics
(dashed), for α = 0.001, 0.01 and 0.1; (b) with and without the r_max/d_max ramp, the mean
per-step loss of each evaluation interval (solid) and its largest per-step loss (dotted);
(c) the largest jump (a step's loss over the median of the steps before it) per interval, the
spike threshold marked. Mean over seeds with its 95% t-interval.
"""

from __future__ import annotations

from pathlib import Path

from experiments.loss_spikes import RATIO, WINDOW
from experiments.studies import study
from scripts.claims.brn_paper import ALPHA_PATH, ALPHAS, JUMP, RAMP_WINDOW_END, RAMPED
from scripts.plotting import figure_set, has, plt, read_curves, save, series, spread_band

RENORM = study("renorm")
PILOT = Path("results") / ALPHA_PATH


def _line(ax, data, setup: str, metric: str, ls: str, label: str) -> None:
    if not has(data, setup):
        return
    steps, v = series(data, setup, metric)
    color = RENORM.styles[setup].color
    ax.plot(steps, spread_band(ax, steps, v, color), color=color, ls=ls, label=label)


def alpha_figure(data: dict) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2), layout="constrained")
    ax = axes[0]
    for setup, alpha in ALPHAS.items():
        _line(ax, data, setup, "test/acc", "-", f"α = {alpha:g}, moving averages")
        _line(ax, data, setup, "test/acc_population_no_bessel", "--", f"α = {alpha:g}, population")
    ax.set(xlabel="training step", ylabel="test accuracy", ylim=(0.5, 0.95))
    ax.set_title("(a) moving averages against population statistics")
    ax.legend(fontsize=7, loc="lower right")
    for ax, metrics, title in (
        (axes[1], (("train/loss", "-", "mean"), ("train/loss_max", ":", "largest")), "(b) per-step training loss over each interval"),
        (axes[2], (("train/loss_jump", "-", "largest jump"),), f"(c) loss over the median of the previous {WINDOW} steps"),
    ):  # fmt: skip
        for setup, name in ((RAMPED, "ramp"), (JUMP, "no ramp")):
            for metric, ls, what in metrics:
                _line(ax, data, setup, metric, ls, f"{name}: {what}")
        ax.axvspan(
            0, RAMP_WINDOW_END, color="#dddddd", alpha=0.5, lw=0, label="the ramp's intervals"
        )
        ax.set(xlabel="training step (end of the interval)", yscale="log", title=title)
        ax.legend(fontsize=7)
    axes[2].axhline(RATIO, color="k", lw=0.7, ls="--", label=f"spike: above {RATIO:g}x")
    axes[2].legend(fontsize=7)
    seeds = len({seed for setup, seed in data if setup == RAMPED})
    fig.suptitle(
        f"Batch Renorm at microbatch 4 (Fashion-MNIST, {seeds} seeds): the moving averages' rate α "
        "and raising r_max/d_max at once"
    )
    return save(fig, "renorm_alpha.png")


@figure_set()
def main() -> None:
    if not (PILOT / "runs.csv").exists():
        print(f"no result committed in {PILOT}: no figure")
        return
    print(f"figure: {alpha_figure(read_curves(PILOT / 'runs.csv'))}")


if __name__ == "__main__":
    main()
