"""Figures of the open questions, made only from ``results/questions/``.

    python -m scripts.plot_questions   # every question whose results are committed

One figure per question (``results/figures/question_*.png`` and ``.svg``): BN before or after
the nonlinearity, non-Gaussianity, Batch Renorm as gradient scaling, dropout with BN, and the
small-data initialisation study. Curves are the mean over seeds with its 95% t-interval;
differences carry their 95% Student-t interval over seeds, paired by seed.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from experiments.studies import study
from scripts.analysis import committed
from scripts.analysis.stats import Estimate
from scripts.plotting import (
    TITLES,
    draw,
    figure_set,
    geometric,
    has,
    mean_band,
    plt,
    read_curves,
    read_rows,
    save,
    series,
    spread_band,
)

RESULTS = Path("results/questions")
LABELS = study("questions").labels
KEYS = {"test_acc": "test accuracy"}
GREY = "#7f7f7f"


def _summary(folder: Path) -> dict:
    return committed.read_summary(folder)


def _curves(ax, data: dict, setups: dict, metric: str = "test/acc") -> None:
    """Mean over seeds and its 95% t-interval of ``metric`` for each ``{setup: (label, color)}``."""
    for setup, (label, color) in setups.items():
        mean_band(ax, data, setup, metric, color, f"{label} ({{n}} seeds)", alpha=0.2)


def _zoom(ax, data: dict, setups: dict, metric: str = "test/acc", tail: float = 0.5) -> None:
    """A y-range that shows the second half of training, where the setups differ."""
    values = []
    for setup in setups:
        if has(data, setup):
            steps, v = series(data, setup, metric)
            values.append(v[:, steps >= tail * steps.max()])
    if values:
        lo, hi = min(v.min() for v in values), max(v.max() for v in values)
        pad = 0.15 * (hi - lo) + 1e-3
        ax.set_ylim(lo - pad, hi + pad)


def _accuracy_panel(ax, data: dict, setups: dict, title: str) -> None:
    """Test accuracy over training, zoomed on the second half, with a legend."""
    _curves(ax, data, setups)
    _zoom(ax, data, setups)
    ax.set(xlabel="training step", ylabel="test accuracy", title=title)
    ax.legend(fontsize=7, loc="lower right")


def _load(folder: Path) -> tuple[dict, dict] | None:
    """A results folder's curves and summary, or None before its runs are committed."""
    if not (folder / "runs.csv").exists():
        return None
    return read_curves(folder / "runs.csv"), _summary(folder)


def _differences(ax, summary: dict, base: str, others: dict, key: str = "test_acc") -> None:
    """Each ``others`` setup minus ``base`` per seed (dots) and its paired 95% interval (bar)."""
    b = summary["setups"][base]
    vb = dict(zip(b["seeds"], b[key]["per_seed"]))
    labels = []
    for i, (setup, (label, color)) in enumerate(others.items()):
        e = summary["setups"].get(setup)
        if e is None or key not in e:
            continue
        va = dict(zip(e["seeds"], e[key]["per_seed"]))
        diffs = [100 * (va[s] - vb[s]) for s in sorted(va.keys() & vb.keys())]
        est = Estimate.of(diffs)
        ax.plot([i] * len(diffs), diffs, "o", color=color, alpha=0.5, ms=4)
        if (ci := est.interval()) is not None:
            ax.errorbar(
                i + 0.15, est.mean, [[est.mean - ci[0]], [ci[1] - est.mean]], fmt="s",
                color=color, capsize=4, ms=5,
            )  # fmt: skip
        labels.append((i, label))
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks([i for i, _ in labels], [lab for _, lab in labels], rotation=15, fontsize=7)
    ax.set_ylabel(f"{KEYS.get(key, key)} − {LABELS.get(base, base)} (pp)")


# -- 1. BN before or after the nonlinearity ------------------------------------------------------
POSITIONS_CONV = {
    "nonorm": ("no BN", GREY), "bn32": ("BN before ReLU", "#dd8452"),
    "bn32_after": ("BN after ReLU", "#55a868"),
}  # fmt: skip
POSITIONS_MLP = {
    "baseline": ("no BN", GREY), "bn": ("BN before sigmoid", "#dd8452"),
    "bn_after": ("BN after sigmoid", "#55a868"),
}  # fmt: skip


def norm_position() -> Path | None:
    conv, mlp = _load(RESULTS / "norm_position/fashion_mnist"), _load(RESULTS / "mlp")
    if conv is None or mlp is None:
        return None
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), layout="constrained")
    for row, (data, summary), setups, name in (
        (0, conv, POSITIONS_CONV, "conv net (ReLU), Fashion-MNIST"),
        (1, mlp, POSITIONS_MLP, "Fig. 1 MLP (sigmoid), MNIST"),
    ):
        _accuracy_panel(axes[row, 0], data, setups, name)
        _differences(axes[row, 1], summary, next(iter(setups)), dict(list(setups.items())[1:]))
        axes[row, 1].set_title("final accuracy − no BN: seeds, mean, 95% interval")
    ax = axes[0, 2]
    _curves(ax, conv[0], POSITIONS_CONV, "train/loss")
    ax.set(
        xlabel="training step",
        ylabel="training loss",
        yscale="log",
        title="conv net: training loss",
    )
    ax = axes[1, 2]
    _curves(ax, mlp[0], POSITIONS_MLP, "shift/layer3/median")
    ax.set(
        xlabel="training step", yscale="log", ylabel="|Δ median| between evaluations",
        title="MLP: drift of the last layer's sigmoid input (Fig. 1)",
    )  # fmt: skip
    fig.suptitle("Open question 1: BN before or after the nonlinearity")
    return save(fig, "question_norm_position.png")


# -- 2. Non-Gaussianity --------------------------------------------------------------------------
def nongaussianity() -> Path | None:
    folder = RESULTS / "mlp"
    if not (folder / "runs.csv").exists():
        return None
    data = read_curves(folder / "runs.csv")
    layers = sorted(
        {int(m.split("/")[1][5:]) for k in data for m in data[k] if m.startswith("nongauss/layer")}
    )
    fig, axes = plt.subplots(2, len(layers), figsize=(4.2 * len(layers), 6.5), layout="constrained")
    for row, (stat, label) in enumerate(
        (("kurtosis", "excess kurtosis"), ("negentropy", "negentropy (log-cosh)"))
    ):
        for col, layer in enumerate(layers):
            ax = axes[row, col]
            for setup, (name, color) in POSITIONS_MLP.items():
                if not has(data, setup):
                    continue
                steps, med = series(data, setup, f"nongauss/layer{layer}/{stat}_median")
                _, q25 = series(data, setup, f"nongauss/layer{layer}/{stat}_q25")
                _, q75 = series(data, setup, f"nongauss/layer{layer}/{stat}_q75")
                ax.plot(steps, med.mean(0), color=color, label=f"{name}: median unit")
                ax.fill_between(
                    steps, q25.mean(0), q75.mean(0), color=color, alpha=0.15, lw=0,
                    label=f"{name}: 25th-75th percentile unit",
                )  # fmt: skip
            ref = next(k for k in POSITIONS_MLP if has(data, k))
            steps, control = series(data, ref, f"nongauss/control/{stat}_median")
            ax.plot(steps, control.mean(0), ":", color="k", label="standard-normal control")
            ax.set(xlabel="training step", ylabel=label, title=f"hidden layer {layer}")
            if stat == "negentropy":
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(
        "Open question 2: non-Gaussianity of the sigmoid inputs (Figure 1 MLP, MNIST test set): "
        "median over units, band = quartiles over units; mean over seeds"
    )
    return save(fig, "question_nongaussianity.png")


# -- 3. Batch Renorm as gradient scaling ---------------------------------------------------------
BRN_ARMS = {
    "bn_micro4": ("BN", "#4c72b0"), "brn_micro4": ("BRN", "#c44e52"),
    "bn_micro4_rgrad": ("BN forward, r × BN gradient", "#dd8452"),
    "brn_micro4_bngrad": ("BRN forward, BN gradient", "#55a868"),
}  # fmt: skip


def brn_gradient() -> Path | None:
    loaded = _load(RESULTS / "brn_gradient/fashion_mnist")
    if loaded is None:
        return None
    data, summary = loaded
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    _accuracy_panel(axes[0], data, BRN_ARMS, "test accuracy, microbatch 4")
    _differences(axes[1], summary, "bn_micro4", dict(list(BRN_ARMS.items())[1:]))
    axes[1].set_title("final test accuracy − BN: per seed, mean and 95% interval")
    fig.suptitle(
        "Open question 3: is Batch Renorm's gain its gradient scaling? (Fashion-MNIST, CPU scale)"
    )
    return save(fig, "question_brn_gradient.png")


# -- 4. Dropout with BN --------------------------------------------------------------------------
DROPOUT_ARMS = {
    "bn_x5": ("BN-x5 (no dropout, the paper)", "#c44e52"),
    "bn_x5_dropout": ("BN-x5 with dropout", "#dd8452"),
    "bn_baseline": ("BN-Baseline (dropout)", "#4c72b0"),
    "bn_baseline_nodropout": ("BN-Baseline without dropout", "#55a868"),
}


def dropout() -> Path | None:
    loaded = _load(RESULTS / "dropout")
    if loaded is None:
        return None
    data, summary = loaded
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), layout="constrained")
    _accuracy_panel(axes[0], data, DROPOUT_ARMS, "test accuracy")
    _curves(axes[1], data, DROPOUT_ARMS, "train/loss")
    axes[1].set(xlabel="training step", ylabel="training loss", yscale="log", title="training loss")
    key = "test_acc"
    for i, (setup, (_, color)) in enumerate(DROPOUT_ARMS.items()):
        e = summary["setups"].get(setup)
        if e is None or key not in e:
            continue
        v = [100 * x for x in e[key]["per_seed"]]
        axes[2].plot([i] * len(v), v, "o", color=color)
        axes[2].plot([i - 0.2, i + 0.2], [np.mean(v)] * 2, color=color)
    axes[2].set_xticks(
        range(len(DROPOUT_ARMS)), [lab for lab, _ in DROPOUT_ARMS.values()], rotation=15, fontsize=7
    )
    axes[2].set(ylabel="final test accuracy (%)", title="per seed (dots) and mean (line)")
    fig.suptitle(
        f"Open question 4: dropout with BN (BN-Inception, Fashion-MNIST 32 px, {summary['steps']} steps)"
    )
    return save(fig, "question_dropout.png")


# -- 5. Note 001's small-data initialisation study -----------------------------------------------
SMALL = {"baseline": ("without BN", "#4c72b0"), "bn": ("with BN", "#dd8452")}


def _by_scale(rows: list[dict], setup: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Scales and ``(scales, seeds)`` values of ``key`` (NaN for a diverged run)."""
    scales = sorted({float(r["init_std"]) for r in rows if r["setup"] == setup})
    out = []
    for s in scales:
        vals = [r[key] for r in rows if r["setup"] == setup and float(r["init_std"]) == s]
        out.append([float(v) if v not in ("", "None", "nan") else np.nan for v in vals])
    width = max(len(v) for v in out)
    return np.array(scales), np.array([v + [np.nan] * (width - len(v)) for v in out])


def _over_seeds(f, v: np.ndarray) -> np.ndarray:
    """``f`` (``np.nanmean``, ``np.nanmin``, ...) over seeds; NaN where every seed diverged."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN scale: NaN, said once here
        return f(v, 1)


def best_scale(rows: list[dict], setup: str) -> float:
    """The scale with the highest mean final test accuracy over seeds."""
    scales, acc = _by_scale(rows, setup, "test_acc")
    return float(scales[np.nanargmax(_over_seeds(np.nanmean, acc))])


def init_scale_small() -> Path | None:
    folder = RESULTS / "init_scale_small"
    datasets = [d for d in TITLES if (folder / f"{d}.csv").exists()]
    if not datasets:
        return None
    full = Path("results/mnist/init_scale_sweep.csv")
    fig, axes = plt.subplots(
        len(datasets), 4, figsize=(16, 3.6 * len(datasets)), layout="constrained", squeeze=False
    )
    for row, d in enumerate(datasets):
        rows = read_rows(folder / f"{d}.csv")
        curves_csv = folder / f"{d}_curves.csv"
        curves = read_rows(curves_csv) if curves_csv.exists() else []
        for col, (key, title) in enumerate(
            (("train_acc", "training accuracy (1,000 images)"), ("test_acc", "test accuracy"),
             ("final_train_loss", "final training loss"))
        ):  # fmt: skip
            ax = axes[row, col]
            for setup, (label, color) in SMALL.items():
                scales, v = _by_scale(rows, setup, key)
                mean = spread_band(ax, scales, v.T, color, alpha=0.2, log=geometric(key))
                ax.plot(scales, mean, "o-", ms=3, color=color, label=label)
            if key == "test_acc" and d == "mnist" and full.exists():
                full_rows = read_rows(full)
                for setup, (label, color) in SMALL.items():
                    scales, v = _by_scale(full_rows, setup, key)
                    ax.plot(
                        scales,
                        _over_seeds(np.nanmean, v),
                        "--",
                        color=color,
                        alpha=0.7,
                        label=f"{label}, all 60,000 images, {full_rows[0]['steps']} steps",
                    )
            ax.set(xscale="log", xlabel="weight initialisation std", title=f"{TITLES[d]}: {title}")
            if key == "final_train_loss":
                ax.set_yscale("log")
            ax.legend(fontsize=7)
        ax = axes[row, 3]
        for setup, (label, color) in SMALL.items():
            scale = best_scale(rows, setup)
            for metric, style in (("train/acc_subset", "--"), ("test/acc", "-")):
                pts = [
                    r
                    for r in curves
                    if r["setup"] == setup
                    and float(r["init_std"]) == scale
                    and r["metric"] == metric
                ]
                steps = sorted({int(r["step"]) for r in pts})
                mean = [
                    np.mean([float(r["value"]) for r in pts if int(r["step"]) == s]) for s in steps
                ]
                epochs = np.array(steps) * 60 / 1000  # batches of 60 (the recipe's)
                which = "train" if metric.startswith("train") else "test"
                ax.plot(epochs, mean, style, color=color, label=f"{label}, std {scale:g}: {which}")
        ax.set(
            xlabel="epoch (1,000 images)",
            ylabel="accuracy",
            title=f"{TITLES[d]}: the best scale of each, over epochs",
        )
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        "Open question 5: sensitivity to the initial scale on 1,000 training images (3 seeds)"
    )
    return save(fig, "question_init_scale_small.png")


FIGURES = (norm_position, nongaussianity, brn_gradient, dropout, init_scale_small)


@figure_set()
def main() -> None:
    for f, path in zip(FIGURES, draw([(f,) for f in FIGURES])):
        print(
            f"figure: {path}"
            if path
            else f"skipped: {f.__name__} (its results are not committed yet)"
        )


if __name__ == "__main__":
    main()
