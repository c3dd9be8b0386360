"""Figures of the Batch Renorm study, made only from the committed CSVs in ``results/renorm/``.

    python -m scripts.plot_renorm     # writes results/figures/renorm_*.png

Skips a dataset whose CSV is not there yet.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.studies import NONIID_DOSES, study
from scripts.analysis import committed
from scripts.analysis.stats import Estimate
from scripts.plotting import TITLES, figure_set, has, plt, read_curves, save, series, spread_band

RENORM = study("renorm")
LABELS = RENORM.labels

RESULTS = Path("results/renorm")
DATASETS = ("fashion_mnist", "mnist")
STYLE = RENORM.styles


def _curve(ax, data, setup, metric="test/acc", label=None, **kw) -> None:
    if not has(data, setup):
        return
    style = STYLE[setup]
    steps, v = series(data, setup, metric)
    kw = {"color": style.color, "ls": style.line, **kw}
    mean = spread_band(ax, steps, v, kw["color"])
    ax.plot(steps, mean, label=label or RENORM.legend(setup), **kw)


def _ylim(ax, data, setups, metric="test/acc") -> None:
    finals = [series(data, s, metric)[1][:, -1].min() for s in setups if has(data, s)]
    if finals:
        ax.set_ylim(max(0.0, min(finals) - 0.1), 1.0)


def small_minibatches(dataset: str, data: dict) -> Path:
    """Like the Batch Renorm paper's Fig. 1: test accuracy vs steps, minibatch 32 and microbatch 4."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained", sharey=True)
    panels = (
        ("(a) normalizing over the minibatch of 32", ("bn32", "brn32")),
        (
            "(b) microbatches of 4 (BN-32 for reference)",
            ("bn_micro4", "brn_micro4", "brn_micro4_jump", "groupnorm", "layernorm"),
        ),
    )
    for ax, (title, setups) in zip(axes, panels):
        if ax is axes[1]:
            _curve(ax, data, "bn32", color="#999999", label="BN, minibatch 32")
        for s in setups:
            _curve(ax, data, s)
        ax.set(xlabel="training step", title=title)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("test accuracy (inference mode)")
    _ylim(axes[0], data, ["bn32", "brn32", "bn_micro4", "brn_micro4"])
    seeds = len({seed for setup, seed in data if setup == "bn32"})
    fig.suptitle(f"Batch Renorm paper Fig. 1 at CPU scale: {TITLES[dataset]} ({seeds} seeds)")
    return save(fig, f"renorm_fig1_{dataset}.png")


def non_iid(dataset: str, data: dict) -> Path:
    """Like the Batch Renorm paper's Fig. 2: non-i.i.d. minibatches, test and training accuracy;
    and (c) the final accuracies against the number of labels in a minibatch."""
    fig = plt.figure(figsize=(15, 3.8), layout="constrained")
    axes = fig.subplots(1, 3, sharey=False)
    axes[1].sharey(axes[0])
    panels = (
        ("(a) the paper's 16 labels x 2 examples", "noniid_bn", ("noniid_bn_halves", "noniid_brn")),
        ("(b) 4 labels x 8 examples (stronger; beyond the paper)", "noniid8_bn", ("noniid8_brn",)),
    )
    for ax, (title, bn_setup, others) in zip(axes, panels):
        _curve(ax, data, bn_setup, label="BN, test (normal inference)")
        _curve(ax, data, bn_setup, "train/acc", ls=":", label="BN, training set (normal inference)")
        _curve(
            ax,
            data,
            bn_setup,
            "test/acc_train_mode",
            ls="--",
            label="BN, test in training mode on non-i.i.d. minibatches",
        )
        for s in others:
            _curve(ax, data, s, label=f"{RENORM.legend(s)}, test")
        ax.set(xlabel="training step", title=title)
        ax.legend(loc="lower right", fontsize=7)
    axes[0].set_ylabel("accuracy")
    _ylim(axes[0], data, ["noniid_bn", "noniid8_bn", "noniid_brn"])
    _doses(axes[2], dataset)
    fig.suptitle(
        f"Batch Renorm paper Fig. 2 at CPU scale: {TITLES[dataset]} (non-i.i.d. minibatches)"
    )
    return save(fig, f"renorm_fig2_{dataset}.png")


def _doses(ax, dataset: str) -> None:
    """Final test accuracy against the labels per minibatch of 32 (mean over seeds, whiskers the
    95% t-interval of the mean): BN at inference and in training mode, Batch Renorm, and BN on
    i.i.d. minibatches for reference."""
    summary = committed.read_summary(RESULTS / dataset)["setups"]
    if not any(NONIID_DOSES[k][0] in summary for k in NONIID_DOSES):
        ax.set_axis_off()
        ax.text(
            0.5, 0.5, "(c) no dose setups in this collection", ha="center", transform=ax.transAxes
        )
        return
    lines = (
        ("BN, normal inference", 0, "test_acc", "-"),
        ("BN, training-mode inference", 0, "test_acc_train_mode", "--"),
        ("Batch Renorm, normal inference", 1, "test_acc", "-"),
    )
    for name, which, key, ls in lines:
        doses = [k for k in sorted(NONIID_DOSES) if NONIID_DOSES[k][which] in summary]
        if not doses:
            continue
        stats = [summary[NONIID_DOSES[k][which]][key] for k in doses]
        ax.errorbar(
            [32 // k for k in doses], [s["mean"] for s in stats], yerr=[_half(s) for s in stats],
            color=STYLE[NONIID_DOSES[doses[0]][which]].color, ls=ls, marker="o", capsize=3,
            label=name,
        )  # fmt: skip
    labels = [32 // k for k in sorted(NONIID_DOSES) if NONIID_DOSES[k][0] in summary]
    if "bn32" in summary:
        ax.axhline(
            summary["bn32"]["test_acc"]["mean"],
            color="#999999",
            ls=":",
            label="BN, i.i.d. minibatches",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(labels, [f"{n} × {32 // n}" for n in labels])
    ax.invert_xaxis()
    ax.set(
        xlabel="labels × examples per label in a minibatch of 32 (fewer labels: right)",
        ylabel="final test accuracy",
        title="(c) the dose: labels per minibatch (whiskers: 95% t-interval)",
    )
    ax.legend(loc="lower left", fontsize=7)


def clipping(dataset: str, data: dict) -> Path:
    """r_max, d_max and the fraction of r and d clipped per layer over training (seed 0)."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), layout="constrained")
    runs = [s for s in ("brn32", "brn_micro4") if (s, 0) in data]
    if runs:
        steps, v = data[(runs[0], 0)]["renorm/r_max"]
        axes[0].plot(steps, v, label="r_max")
        steps, v = data[(runs[0], 0)]["renorm/d_max"]
        axes[0].plot(steps, v, label="d_max")
    axes[0].set(xlabel="training step", title="(a) r_max, d_max (paper's shape, scaled)")
    axes[0].legend()
    for ax, which in zip(axes[1:], ("r", "d")):
        for s in runs:
            metrics = data[(s, 0)]
            layers = sorted(k for k in metrics if k.endswith(f"/{which}_clipped"))
            for i, k in enumerate(layers):
                steps, v = metrics[k]
                ax.plot(
                    steps,
                    v,
                    color=STYLE[s].color,
                    ls=STYLE[s].line,
                    alpha=0.4 + 0.6 * (i + 1) / len(layers),
                    label=f"{RENORM.legend(s)}: layer {i + 1}",
                )
        ax.set(
            xlabel="training step",
            ylabel=f"fraction of {which} clipped",
            title=f"({'b' if which == 'r' else 'c'}) {which} clipped (all clipped while {which}_max is "
            f"{'1' if which == 'r' else '0'})",
            ylim=(-0.02, 1.0),
        )
        ax.legend(fontsize=6, ncol=2)
    fig.suptitle(
        f"Batch Renorm's corrections over training: {TITLES[dataset]} (seed 0; each point is the "
        "mean over the steps since the previous one)"
    )
    return save(fig, f"renorm_clipping_{dataset}.png")


def final_bars() -> Path | None:
    """Final test accuracy of every setup, each dataset next to the paper's ImageNet numbers."""
    summaries = {d: RESULTS / d / "summary.json" for d in DATASETS}
    summaries = {d: committed.read_summary(p.parent) for d, p in summaries.items() if p.exists()}
    if not summaries:
        return None
    panels = [*summaries.items(), ("paper", None)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), layout="constrained")
    for ax, (name, summary) in zip(np.atleast_1d(axes), panels):
        rows = []
        for setup in RENORM.setups:
            if summary is None:
                p = RENORM.paper["setups"].get(setup)
                if p:
                    rows.append((setup, p["test_acc"], 0.0))
                    if "test_acc_train_mode" in p:
                        rows.append((f"{setup} (train-mode inf.)", p["test_acc_train_mode"], 0.0))
            elif setup in summary["setups"]:
                e = summary["setups"][setup]
                rows.append((setup, e["test_acc"]["mean"], _half(e["test_acc"])))
                if "test_acc_train_mode" in e:
                    t = e["test_acc_train_mode"]
                    rows.append((f"{setup} (train-mode inf.)", t["mean"], _half(t)))
        labels, means, halves = zip(*rows, strict=True)
        y = np.arange(len(rows))[::-1]
        ax.barh(y, means, xerr=halves, color="#dd8452" if summary is None else "#4c72b0")
        for yi, m in zip(y, means):
            ax.text(m, yi, f" {m:.3f}", va="center", fontsize=7)
        ax.set_yticks(y, [_label(lab) for lab in labels], fontsize=7)
        lo = min(means)
        ax.set_xlim(max(0.0, lo - 0.1), 1.0 if summary is not None else 0.85)
        title = (
            "paper: ImageNet, Inception-v3\n(paper scale)"
            if summary is None
            else f"ours: {TITLES[name]}, small conv net\n(CPU scale, {summary['steps']} steps)"
        )
        ax.set(xlabel="final test accuracy", title=title)
    fig.suptitle(
        "Batch Renorm study: every setup (bars: mean over seeds; whiskers: 95% t-interval of the mean)"
    )
    return save(fig, "renorm_final.png")


def _half(stat: dict) -> float:
    """Half the 95% t-interval of a per-seed statistic (0 with one seed)."""
    ci = Estimate.of(stat["per_seed"]).interval()
    return 0.0 if ci is None else ci[1] - stat["mean"]


def _label(setup: str) -> str:
    base, sep, _ = setup.partition(" (train-mode inf.)")
    return LABELS.get(base, base) + (", training-mode inference" if sep else "")


@figure_set()
def main() -> None:
    made = []
    for dataset in DATASETS:
        path = RESULTS / dataset / "runs.csv"
        if not path.exists():
            continue
        data = read_curves(path)
        made += [small_minibatches(dataset, data), non_iid(dataset, data), clipping(dataset, data)]
    made.append(final_bars())
    for p in made:
        if p is not None:
            print(f"figure: {p}")


if __name__ == "__main__":
    main()
