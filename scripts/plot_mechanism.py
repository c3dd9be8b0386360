"""Figures of the mechanism study, made only from ``results/mechanism/mlp/`` (``runs.csv``,
``typical_unit.csv``; ``make reproduce-mechanism``).

    python -m scripts.plot_mechanism   # results/figures/mechanism_*.png (and .svg)

- ``mechanism_ics_three_ways``: how far the units' sigmoid inputs move between evaluations,
  per layer, measured (a) with BN's moving averages, (b) with population statistics recomputed
  just before, (c) in training mode on fixed training batches.
- ``mechanism_typical_unit``: Figure 1 (b, c) redrawn for the typical unit, three ways.
- ``mechanism_santurkar`` and ``mechanism_santurkar_relu``: gradient-based ICS and the loss
  landscape along the gradient (Santurkar et al. 2018, Figs. 5 and 4).
- ``mechanism_jacobian``: the BN paper's Sec. 3.3 conjecture in its own coordinates, BN against
  no BN (the sigmoid networks): the singular values of the Jacobian between consecutive
  normalized pre-activations (median, isometry gap, fraction in [0.5, 2]), the mean |corr|
  between a layer's normalized units (the paper's "uncorrelated" assumption), and, for
  contrast, the median singular value of the post-sigmoid Jacobian ``∂h3/∂h2``. The ReLU
  networks' normalized Jacobians are rank-deficient (their inactive units), so their gap mostly
  counts the floor of :func:`~experiments.kit.measures.isometry_gap`: not drawn.
- ``mechanism_weights``: ``‖W‖``, ``‖∇W‖`` and ``‖ΔW‖/‖W‖`` with and without weight decay.

Curves are the mean over seeds with its 95% t-interval.
"""

from __future__ import annotations

from pathlib import Path

from scripts.plotting import (
    draw,
    figure_set,
    has,
    mean_band,
    plt,
    read_curves,
    read_rows,
    save,
    series,
)

RESULTS = Path("results/mechanism/mlp")
SIGMOID = {
    "mech_baseline": ("no BN", "#4c72b0"),
    "mech_bn": ("BN", "#dd8452"),
    "mech_noisy_bn": ("noisy BN", "#8172b3"),
}
RELU = {"mech_relu_baseline": ("ReLU, no BN", "#64b5cd"), "mech_relu_bn": ("ReLU, BN", "#c44e52")}
DECAY = {
    "mech_baseline": ("no BN", "#4c72b0"),
    "mech_bn": ("BN", "#dd8452"),
    "mech_bn_wd1e-4": ("BN, L2 1e-4", "#55a868"),
    "mech_bn_wd1e-3": ("BN, L2 1e-3", "#c44e52"),
}
WAYS = {  # way: (label, line style)
    "moving": ("(a) moving averages, test set", "-"),
    "population": ("(b) population statistics, test set", "--"),
    "train_mode": ("(c) training mode, training batches", ":"),
}


def _data() -> dict:
    return read_curves(RESULTS / "runs.csv")


def _line(ax, data, setup, metric, color, label, style="-", band=True) -> None:
    mean_band(ax, data, setup, metric, color, f"{label} ({{n}})", style, band=band)


def ics_three_ways() -> Path:
    data = _data()
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), layout="constrained", sharey="row")
    for row, what in enumerate(("median", "spread")):
        for col, layer in enumerate((1, 2, 3)):
            ax = axes[row, col]
            for setup in ("mech_baseline", "mech_bn"):
                label, color = SIGMOID[setup]
                for way, (wlabel, style) in WAYS.items():
                    if setup == "mech_baseline" and way == "population":
                        continue  # without BN the same as (a)
                    metric = f"shift/{way}/layer{layer}/{what}_mean"
                    _line(
                        ax, data, setup, metric, color, f"{label} {wlabel[:3]}", style, band=False
                    )
            ax.set(yscale="log", xlabel="training step", title=f"hidden layer {layer}: {what}")
            if col == 0:
                ax.set_ylabel(f"|Δ {what}| between evaluations,\nmean over units")
    axes[0, 0].legend(fontsize=7, title="(seeds)", title_fontsize=7)
    fig.suptitle(
        "Internal covariate shift three ways (sigmoid inputs of the Figure 1 MLP): "
        + "; ".join(lab for lab, _ in WAYS.values())
    )
    return save(fig, "mechanism_ics_three_ways.png")


def typical_unit() -> Path:
    rows = read_rows(RESULTS / "typical_unit.csv")
    panels = [("mech_baseline", "moving", "no BN (test set)")] + [
        ("mech_bn", way, f"BN {label}") for way, (label, _) in WAYS.items()
    ]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), layout="constrained", sharey=True)
    for ax, (setup, way, title) in zip(axes, panels):
        mine = [r for r in rows if r["setup"] == setup and r["way"] == way]
        if not mine:
            continue
        seed = min(int(r["seed"]) for r in mine)
        mine = [r for r in mine if int(r["seed"]) == seed]
        unit = mine[0]["unit"]
        qs = sorted({float(r["percentile"]) for r in mine}, reverse=True)
        for q, style in zip(qs, ("--", "-", ":", "-.")):
            pts = [(int(r["step"]), float(r["value"])) for r in mine if float(r["percentile"]) == q]
            ax.plot(*zip(*pts), style, color=SIGMOID[setup][1], label=f"{q:g}th percentile")
        ax.set(xlabel="training step", title=f"{title}\nunit {unit} of layer 3, seed {seed}")
    axes[0].set_ylabel("input to the typical sigmoid")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        "Figure 1 (b, c) redrawn: the typical unit (the median over units of the total median "
        "drift, measured with population statistics) of the last hidden layer"
    )
    return save(fig, "mechanism_typical_unit.png")


def santurkar(setups: dict, name: str, file: str) -> Path:
    data = _data()
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), layout="constrained")
    for setup, (label, color) in setups.items():
        _line(axes[0, 0], data, setup, "test/acc", color, label)
        for layer, style in ((2, ":"), (4, "-")):
            tag = f"{label}, layer {layer}"
            _line(
                axes[0, 1],
                data,
                setup,
                f"grad_ics/layer{layer}/ics_relative",
                color,
                tag,
                style,
                False,
            )
            _line(
                axes[0, 2], data, setup, f"grad_ics/layer{layer}/cosine", color, tag, style, False
            )
        if has(data, setup):
            steps, lo = series(data, setup, "landscape/loss_min")
            _, hi = series(data, setup, "landscape/loss_max")
            axes[1, 0].fill_between(
                steps, lo.mean(0), hi.mean(0), color=color, alpha=0.35, lw=0, label=label
            )
        _line(axes[1, 1], data, setup, "landscape/grad_predictiveness", color, label)
        _line(axes[1, 2], data, setup, "landscape/beta_smoothness", color, label)
    axes[0, 0].set(ylabel="test accuracy", ylim=(0.9, 1.0), title="test accuracy (seeds)")
    axes[0, 1].set(
        ylabel="‖G − G′‖ / ‖G‖", yscale="log", title="gradient ICS (Def. 2.1), relative ℓ2"
    )
    axes[0, 2].set(ylabel="cos(G, G′)", title="gradient ICS, cosine")
    axes[1, 0].set(
        ylabel="loss", yscale="log", title="loss band: min-max of L(W − ηg), η = 0.25-9.5 lr"
    )
    axes[1, 1].set(ylabel="max ‖∇L(W − ηg) − g‖", yscale="log", title="gradient predictiveness")
    axes[1, 2].set(
        ylabel="max ‖∇L(W − ηg) − g‖ / ‖ηg‖", yscale="log", title="effective β-smoothness"
    )
    for ax in axes.flat:
        ax.set_xlabel("training step")
    for ax in (axes[0, 0], axes[0, 1], axes[1, 0]):
        ax.legend(fontsize=6)
    fig.suptitle(
        f"Santurkar et al.'s measures, {name}: on a fixed training batch of 60, every evaluation "
        "(lower is smoother / less shift; cosine: 1 = no shift)"
    )
    return save(fig, file)


def _require(data: dict, setups: dict, metrics: list[str]) -> None:
    """End the script with one line if a setup in ``runs.csv`` lacks a metric a figure draws (a
    collection from before the metric was measured)."""
    for setup in setups:
        for metric in metrics:
            if has(data, setup) and not any(
                metric in v for (s, _), v in data.items() if s == setup
            ):
                raise SystemExit(
                    f"error: {RESULTS / 'runs.csv'} has no {metric} for {setup}: "
                    "rerun the study (make reproduce-mechanism)"
                )


PAIRS = {"layer1to2": (1, 2), "layer2to3": (2, 3)}  # the Sec. 3.3 probe's consecutive layers


def _partial(lower: int, upper: int, x: str = r"\hat{x}") -> str:
    return rf"$\partial {x}_{upper} / \partial {x}_{lower}$"


def jacobian() -> Path:
    data = _data()
    setups = {k: v for k, v in SIGMOID.items() if k != "mech_noisy_bn"}
    prefix = "jacobian_normalized"
    corr = {layer: f"{prefix}/layer{layer}/mean_abs_corr" for layer in (1, 2, 3)}
    panels = [  # (row, column, metric, title)
        *[(0, c, f"{prefix}/{p}/sv_median", f"{_partial(*lk)}: median singular value")
          for c, (p, lk) in enumerate(PAIRS.items())],
        (0, 2, "jacobian/layer3/sv_median",
         f"for contrast {_partial(2, 3, 'h')} (after the sigmoid,\nmoving statistics): median singular value"),
        *[(1, c, f"{prefix}/{p}/isometry_gap", f"{_partial(*lk)}: isometry gap, mean |log$_{{10}}$ σ|")
          for c, (p, lk) in enumerate(PAIRS.items())],
        *[(2, c, m, rf"mean |corr| between the units of $\hat{{x}}_{layer}$")
          for c, (layer, m) in enumerate(corr.items())],
    ]  # fmt: skip
    _require(data, setups, [m for *_, m, _ in panels])
    fig, axes = plt.subplots(3, 3, figsize=(13, 10), layout="constrained")
    for row, col, metric, title in panels:
        ax = axes[row, col]
        for setup, (label, color) in setups.items():
            _line(ax, data, setup, metric, color, label)
        ax.set(yscale="log", xlabel="training step", title=title)
        if row == 0:
            ax.axhline(1.0, color="k", lw=0.6)
    ax = axes[1, 2]
    for setup, (label, color) in setups.items():
        for p, style in zip(PAIRS, (":", "-")):
            metric = f"{prefix}/{p}/sv_in_band"
            _line(ax, data, setup, metric, color, f"{label}, {p.replace('to', '→')}", style)
    ax.set(ylim=(0, 1), xlabel="training step", title="fraction of singular values in [0.5, 2]")
    ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("median σ")
    axes[1, 0].set_ylabel("mean |log$_{10}$ σ| (0: an isometry)")
    axes[2, 0].set_ylabel("mean |corr| (0: uncorrelated)")
    axes[0, 0].legend(fontsize=7, title="(seeds)", title_fontsize=7)
    fig.suptitle(
        r"BN paper Sec. 3.3 (BN may make $J J^T = I$) in its own coordinates: "
        r"$J = \partial\hat{x}_{l+1} / \partial\hat{x}_l$ between consecutive normalized "
        "pre-activations of the sigmoid MLP,\nper example on 100 test images; BN with population "
        "statistics (20 training batches), no BN standardized by its own mean and std there"
    )
    return save(fig, "mechanism_jacobian.png")


def weights() -> Path:
    data = _data()
    metrics = (
        ("norm", "‖W‖", "log"),
        ("grad_norm", "‖∇W‖", "log"),
        ("relative_update", "‖ΔW‖ / ‖W‖ per step", "log"),
    )
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), layout="constrained")
    for row, layer in enumerate((2, 4)):
        for col, (m, title, scale) in enumerate(metrics):
            ax = axes[row, col]
            for setup, (label, color) in DECAY.items():
                _line(ax, data, setup, f"weights/layer{layer}/{m}", color, label)
            ax.set(yscale=scale, xlabel="training step", title=f"layer {layer}: {title}")
    axes[0, 0].legend(fontsize=7, title="(seeds)", title_fontsize=7)
    fig.suptitle(
        "Scale invariance and the effective learning rate (BN paper Sec. 3.3): with BN a layer's "
        "output ignores ‖W‖, its gradient scales as 1/‖W‖, and weight decay sets ‖W‖"
    )
    return save(fig, "mechanism_weights.png")


@figure_set()
def main() -> None:
    if not (RESULTS / "runs.csv").exists():
        print(f"skipped: no {RESULTS / 'runs.csv'} yet (make reproduce-mechanism)")
        return
    jobs = [
        (ics_three_ways,), (santurkar, SIGMOID, "sigmoid MLP (Figure 1, MNIST, lr 1)", "mechanism_santurkar.png"),
        (santurkar, RELU, "ReLU MLP (MNIST, lr 0.1)", "mechanism_santurkar_relu.png"), (jacobian,), (weights,),
    ]  # fmt: skip
    if (RESULTS / "typical_unit.csv").exists():
        jobs.append((typical_unit,))
    for path in draw(jobs):
        print(f"figure: {path}")


if __name__ == "__main__":
    main()
