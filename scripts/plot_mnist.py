"""Figures of the MNIST study, made only from the committed CSVs in ``results/mnist/``.

    python -m scripts.plot_mnist          # every figure: results/figures/*.png
    python -m scripts.plot_mnist mnist    # only Figure 1 and the covariate-shift figure of MNIST

Skips a figure whose CSV is not there yet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from experiments.studies import study
from scripts.plotting import (
    TITLES,
    draw,
    figure_set,
    has,
    plt,
    read_curves,
    read_rows,
    save,
    series,
    spread_band,
)

RESULTS = Path("results/mnist")
MNIST = study("mnist")
STYLE = MNIST.styles
COLORS = {setup: s.color for setup, s in STYLE.items()}
LABELS = {setup: MNIST.legend(setup) for setup in STYLE}


def figure1(dataset: str) -> Path | None:
    path = RESULTS / dataset / "runs.csv"
    if not path.exists():
        return None
    data = read_curves(path)
    models = [m for m in ("baseline", "bn") if has(data, m)]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), layout="constrained")
    ax = axes[0]
    for m in models:
        steps, acc = series(data, m, "test/acc")
        later = steps > 0  # a log axis: the early steps, where BN's lead opens, are visible
        mean = spread_band(ax, steps[later], acc[:, later], COLORS[m], alpha=0.25)
        ax.plot(
            steps[later], mean, color=COLORS[m], label=f"{LABELS[m]} (mean of {len(acc)} seeds)"
        )
    ax.set(
        xlabel="training step (log scale)",
        xscale="log",
        ylabel="test accuracy",
        title="(a) test accuracy",
        ylim=(0.7 if dataset == "mnist" else 0.5, 1.0),
    )
    ax.legend(loc="lower right")
    lims = []
    for ax, m, tag in zip(axes[1:], ("baseline", "bn"), ("(b)", "(c)")):
        if m not in models:
            continue
        seed = min(s for mm, s in data if mm == m)
        for q, style in (("p85", "--"), ("p50", "-"), ("p15", ":")):
            steps, v = data[(m, seed)][f"sigmoid_input/{q}"]
            ax.plot(steps, v, style, color=COLORS[m], label=f"{q[1:]}th percentile")
        ax.set(
            xlabel="training step",
            ylabel="input to a typical sigmoid",
            title=f"{tag} {LABELS[m][0].lower()}{LABELS[m][1:]} (last hidden layer, seed {seed})",
        )
        ax.legend(loc="lower right")
        lims.append(ax.get_ylim())
    for ax in axes[1:]:
        ax.set_ylim(min(lo for lo, _ in lims), max(hi for _, hi in lims))
    fig.suptitle(f"BN paper Figure 1 on {TITLES.get(dataset, dataset)} (our runs)")
    return save(fig, f"{dataset}_fig1.png")


def shift_figure(dataset: str) -> Path | None:
    path = RESULTS / dataset / "runs.csv"
    if not path.exists():
        return None
    data = read_curves(path)
    layers = sorted({k.split("/")[1] for v in data.values() for k in v if k.startswith("shift/")})
    fig, axes = plt.subplots(
        2, len(layers), figsize=(3.6 * len(layers), 5.2), sharex=True, sharey="row"
    )
    for j, layer in enumerate(layers):
        for i, what in enumerate(("median", "spread")):
            ax = axes[i, j]
            for m in ("baseline", "bn"):
                if not has(data, m):
                    continue
                steps, v = series(data, m, f"shift/{layer}/{what}")
                ax.plot(steps, v.mean(0), color=COLORS[m], label=LABELS[m])
            ax.set_yscale("log")
            ax.set_title(f"hidden {layer.replace('layer', 'layer ')}: change in {what}")
            if i == 1:
                ax.set_xlabel("training step")
        axes[0, 0].set_ylabel("mean |Δ median| over units\nbetween evaluations")
        axes[1, 0].set_ylabel("mean |Δ (p85 − p15)| over units\nbetween evaluations")
    axes[0, 0].legend()
    fig.suptitle(
        f"Internal covariate shift, measured on the test set ({TITLES.get(dataset, dataset)}; mean of seeds)"
    )
    return save(fig, f"{dataset}_covariate_shift.png")


def lr_sweep() -> Path | None:
    path = RESULTS / "lr_sweep.csv"
    if not path.exists():
        return None
    rows = read_rows(path)
    fig, ax = plt.subplots(figsize=(4.8, 3.4), layout="constrained")
    for m in ("baseline", "bn"):
        rs = sorted((r for r in rows if r["setup"] == m), key=lambda r: float(r["lr"]))
        lr = [float(r["lr"]) for r in rs]
        acc = [float(r["test_acc"]) if r["diverged"] == "False" else 0.0 for r in rs]
        ax.plot(lr, acc, "o-", color=COLORS[m], label=LABELS[m])
        for x, r in zip(lr, rs):
            if r["diverged"] == "True":
                ax.annotate("diverged", (x, 0.0), fontsize=7, rotation=90, va="bottom")
    ax.set(
        xscale="log",
        xlabel="learning rate (plain SGD)",
        ylabel="test accuracy",
        title=f"Learning-rate sweep ({rows[0]['steps']} steps)",
    )
    ax.legend()
    return save(fig, "mnist_lr_sweep.png")


def init_scale_sweep() -> Path | None:
    path = RESULTS / "init_scale_sweep.csv"
    if not path.exists():
        return None
    rows = read_rows(path)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), layout="constrained")
    for key, ax, title in zip(
        ("train_acc", "test_acc", "final_train_loss"),
        axes,
        ("training accuracy", "test accuracy", "training loss"),
    ):
        for m in ("baseline", "bn"):
            rs = sorted((r for r in rows if r["setup"] == m), key=lambda r: float(r["init_std"]))
            x = [float(r["init_std"]) for r in rs]
            y = [float(r[key]) if r[key] not in ("", "None") else np.nan for r in rs]
            ax.plot(x, y, "o-", color=COLORS[m], label=LABELS[m])
        ax.set(xscale="log", xlabel="weight initialisation std", title=title)
    axes[2].set_yscale("log")
    axes[0].legend()
    fig.suptitle(f"Weight-initialisation scale ({rows[0]['steps']} steps each)")
    return save(fig, "mnist_init_scale.png")


@figure_set()
def main(argv: list[str] | None = None) -> None:
    datasets = (argv if argv is not None else sys.argv[1:]) or list(TITLES)
    unknown = sorted(set(datasets) - set(TITLES))
    if unknown:
        raise SystemExit(f"unknown dataset(s) {unknown}; choose from {list(TITLES)}")
    jobs = [(f, d) for d in datasets for f in (figure1, shift_figure)]
    if set(datasets) == set(TITLES):
        jobs += [(lr_sweep,), (init_scale_sweep,)]
    for p in draw(jobs):
        if p is not None:
            print(f"figure: {p}")


if __name__ == "__main__":
    main()
