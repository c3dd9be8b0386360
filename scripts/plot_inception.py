"""Figures of the BN-Inception study, made only from the committed CSVs in ``results/inception/``.

    python -m scripts.plot_inception  # writes results/figures/inception_fig2_<setting>.png

``inception_fig3_curve.png``: Figure 3 as the claims decide it
(:mod:`scripts.analysis.time_to_accuracy`): each variant's speed-up over Inception at every
target of the grid with its 95% interval, and every arm's smoothed maximum, the pilot beside the
confirmatory seeds (once they have run).

One figure per setting (a folder of ``results/inception/`` with ``runs.csv`` and
``summary.json``): (a) validation accuracy against steps, like the paper's Figure 2, with the
``inception`` variant's maximum and the step where each variant reaches it marked; (b) the
training loss; (c) the paper's Figure 3 numbers next to ours as steps-to-baseline-maximum bars.
A fixed-budget setting draws the seed-mean curves; a converged-protocol setting (runs that stop
at the target or on a plateau, so the seeds' curves end at different steps) draws every seed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.ticker import PercentFormatter

from experiments.inception_fig3 import BASELINE, parameter_range, protocol_name
from experiments.kit.errors import MissingResult
from experiments.papers import BN_FIG3
from experiments.studies import study
from scripts.analysis import committed
from scripts.analysis import steps_to_target as fig3
from scripts.analysis import time_to_accuracy as tta
from scripts.analysis.windows import CONFIRMED, PLAN
from scripts.plotting import TITLES, figure_set, has, plt, read_curves, save, series

SUBSET = "test/acc_subset"

RESULTS = Path("results/inception")
INCEPTION = study("inception")
STYLE = INCEPTION.styles


def figure2(setting: Path) -> Path:
    data = read_curves(setting / "runs.csv")
    summary = committed.read_summary(setting)
    variants = [v for v in INCEPTION.setups if has(data, v)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.9), layout="constrained")
    if "converged" in summary:
        c = summary["converged"]
        _converged_accuracy_panel(axes[0], data, c, variants, setting)
        _loss_panel(axes[1], data, variants, per_seed=True)
        if c["target"] is None:
            _chance_lines(axes[0], axes[1], c["classes"])
            _best_panel(axes[2], c, variants)
        else:
            _converged_steps_panel(axes[2], c, variants, setting)
        protocol = protocol_name(summary["converged"])
    else:
        _accuracy_panel(axes[0], data, summary, variants)
        _loss_panel(axes[1], data, variants)
        _steps_panel(axes[2], summary, variants)
        protocol = f"fixed budget of {summary['steps']} steps"
    fig.suptitle(
        f"BN-Inception variants, reduced setting, {protocol}: {TITLES.get(summary['data'], summary['data'])}, width "
        f"{summary['width']}, {parameter_range(summary)} parameters, batch {summary['global_batch']}"
    )
    return save(fig, f"inception_fig2_{setting.name}.png")


def _accuracy_panel(ax, data: dict, summary: dict, variants: list[str]) -> None:
    for v in variants:
        color, style, label = STYLE[v].color, STYLE[v].line, INCEPTION.legend(v)
        steps, acc = series(data, v, "test/acc")
        ax.plot(steps, acc.mean(0), color=color, ls=style, label=label)
        reached = summary["setups"][v].get("steps_to_baseline_max")
        if reached is not None:
            ax.plot([reached], [summary["setups"][v]["baseline_max_acc"]], "o", color=color, ms=4)
    threshold = summary["setups"].get(BASELINE, {}).get("baseline_max_acc")
    if threshold is not None:
        ax.axhline(threshold, color="k", lw=0.7, ls="--")
        ax.annotate(
            f"Inception's max {threshold:.1%}",
            (0, threshold),
            xytext=(4, 3),
            textcoords="offset points",
            fontsize=7,
        )
    ax.set(
        xlabel="training step",
        ylabel="validation accuracy (single crop)",
        title="(a) validation accuracy (cf. paper Fig. 2)",
        ylim=(0, 1),
    )
    ax.legend(loc="lower right", fontsize=7)


def _loss_panel(ax, data: dict, variants: list[str], per_seed: bool = False) -> None:
    for v in variants:
        color, style, label = STYLE[v].color, STYLE[v].line, INCEPTION.legend(v)
        if per_seed:
            for i, (steps, loss) in enumerate(_seed_curves(data, v, "train/loss")):
                ax.plot(steps, loss, color=color, ls=style, lw=1, label=label if i == 0 else None)
            continue
        steps, loss = series(data, v, "train/loss")
        ax.plot(steps, loss.mean(0), color=color, ls=style, label=label)
    ax.set(
        xlabel="training step",
        ylabel="training loss (mean since last evaluation)",
        title="(b) training loss",
        yscale="log",
    )


def _steps_panel(ax, summary: dict, variants: list[str]) -> None:
    rows = [v for v in variants if v != "inception_sigmoid"]
    base_paper = BN_FIG3["setups"][BASELINE]["steps_to_baseline_max"]
    base_ours = summary["setups"].get(BASELINE, {}).get("steps_to_baseline_max")
    y = range(len(rows))
    ours = [_fraction(summary["setups"][v].get("steps_to_baseline_max"), base_ours) for v in rows]
    paper = [_fraction(BN_FIG3["setups"][v]["steps_to_baseline_max"], base_paper) for v in rows]
    ax.barh([i + 0.2 for i in y], ours, height=0.4, color="#dd8452", label="ours (reduced setting)")
    ax.barh([i - 0.2 for i in y], paper, height=0.4, color="#4c72b0", label="paper (ImageNet)")
    for i, (o, p) in enumerate(zip(ours, paper)):
        if o == 0:
            ax.text(0.01, i + 0.2, "never", va="center", fontsize=7)
        if p == 0:
            ax.text(0.01, i - 0.2, "never", va="center", fontsize=7)
    ax.set_yticks(list(y), [INCEPTION.legend(v) for v in rows])
    ax.invert_yaxis()
    ax.set(
        xlabel="steps to Inception's max / Inception's steps",
        xlim=(0, 1.05),
        title="(c) steps to the baseline's max (cf. Fig. 3)",
    )
    ax.legend(loc="lower right", fontsize=7)


def _seed_curves(data: dict, setup: str, metric: str) -> list[tuple[list, list]]:
    return [v[metric] for (s, _), v in sorted(data.items()) if s == setup and metric in v]


def _converged_accuracy_panel(ax, data: dict, c: dict, variants: list[str], folder: Path) -> None:
    for v in variants:
        color, style, label = STYLE[v].color, STYLE[v].line, INCEPTION.legend(v)
        for i, (steps, acc) in enumerate(_seed_curves(data, v, SUBSET)):
            ax.plot(steps, acc, color=color, ls=style, lw=1, label=label if i == 0 else None)
        if c["target"] is not None:
            for step in fig3.steps(v, c["target"], folder).values():
                if step is not None:
                    ax.plot([step], [c["target"]], "o", color=color, ms=4)
    if c["target"] is not None:
        ax.axhline(
            c["target"], color="k", lw=0.7, ls="--",
            label=f"Inception's max {c['target']:.2%}\n(its lowest seed's smoothed plateau)",
        )  # fmt: skip
    ax.set(
        xlabel="training step",
        ylabel=f"accuracy on {c['test_subset']} fixed test images",
        title="(a) validation accuracy, every seed (cf. paper Fig. 2)",
        ylim=(0, 1),
    )
    ax.legend(loc="lower right", fontsize=7)


def _chance_lines(acc_ax, loss_ax, classes: int) -> None:
    """Chance on the accuracy panel (drawn on a log scale, where chance and the arms that learn
    both show) and on the loss panel (ln classes: uniform predictions)."""
    acc_ax.set(yscale="log", ylim=(0.3 / classes, 1))
    acc_ax.axhline(1 / classes, color="k", lw=0.7, ls=":", label=f"chance, 1/{classes:,}")
    acc_ax.legend(loc="lower right", fontsize=7)
    loss_ax.axhline(math.log(classes), color="k", lw=0.7, ls=":", label=f"chance, ln {classes:,}")
    loss_ax.legend(loc="lower left", fontsize=7)


def _best_panel(ax, c: dict, variants: list[str]) -> None:
    """Each arm's best evaluation on the test subset, seed by seed, where Inception never left
    chance and there is no target to count steps to."""
    for i, v in enumerate(variants):
        best = [r["max_acc_subset"] for r in c["setups"][v]["seeds"]]
        ax.barh(i, np.mean(best), height=0.5, color=STYLE[v].color, alpha=0.6)
        ax.plot(best, [i] * len(best), "k.", ms=5)
        ax.text(max(best) * 1.15, i, ", ".join(f"{b:.2%}" for b in best), va="center", fontsize=7)
    ax.axvline(1 / c["classes"], color="k", lw=0.7, ls=":")
    ax.set_yticks(range(len(variants)), [INCEPTION.legend(v) for v in variants])
    ax.invert_yaxis()
    ax.set(
        xscale="log", xlim=(0.3 / c["classes"], 3),
        xlabel="best accuracy on the test subset (bars: seed mean; dots: seeds; dotted: chance)",
        title="(c) each arm's best; no target: Inception never left chance",
    )  # fmt: skip


def _converged_steps_panel(ax, c: dict, variants: list[str], folder: Path) -> None:
    threshold = c["target"]
    rows = [v for v in variants if v != "inception_sigmoid"]
    base_paper = BN_FIG3["setups"][BASELINE]["steps_to_baseline_max"]
    base = np.mean(list(fig3.steps(BASELINE, threshold, folder).values()))
    for i, v in enumerate(rows):
        steps = list(fig3.steps(v, threshold, folder).values())
        reached = [s / base for s in steps if s is not None]
        mean = float(np.mean(reached)) if len(reached) == len(steps) else 0.0
        ax.barh(
            i + 0.2, mean, height=0.4, color="#dd8452", label="ours (seed mean)" if i == 0 else None
        )
        ax.plot(reached, [i + 0.2] * len(reached), "k.", ms=4)
        paper = _fraction(BN_FIG3["setups"][v]["steps_to_baseline_max"], base_paper)
        ax.barh(
            i - 0.2,
            paper,
            height=0.4,
            color="#4c72b0",
            label="paper (ImageNet)" if i == 0 else None,
        )
        if mean == 0:
            text = f"never ({len(reached)}/{len(steps)} seeds reached it)"
            ax.text(0.01, i + 0.2, text, va="center", fontsize=7)
        if paper == 0:
            ax.text(0.01, i - 0.2, "never", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [INCEPTION.legend(v) for v in rows])
    ax.invert_yaxis()
    ax.set(
        xlabel="steps to Inception's max / Inception's mean steps (dots: seeds)",
        xlim=(0, max(1.05, *(b.get_width() * 1.1 for b in ax.patches))),
        title="(c) steps to Inception's max (cf. Fig. 3)",
    )
    ax.legend(loc="lower right", fontsize=7)


def _fraction(steps: float | None, base: float | None) -> float:
    """``steps / base``; 0 draws as "never"."""
    return 0.0 if steps is None or not base else steps / base


# The speed-ups drawn (a variant against Inception) and the arms whose maxima are drawn.
SPEEDUPS = ("bn_baseline", "bn_x5", "bn_x30", "bn_baseline_x5")
MAXIMA = ("inception", "bn_baseline", "bn_x5", "bn_x30", "bn_baseline_x5", "bn_x5_sigmoid", "inception_x5", "inception_sigmoid")  # fmt: skip
NEAR_CHANCE = 0.2  # panel (b) writes out maxima below this instead of stretching its axis to them
SEED_SETS = (
    ("pilot", PLAN, "o"),
    ("confirmatory", CONFIRMED, "s"),
)


def _held(plan, arm: str) -> bool:
    try:
        tta.require_arms(plan, arm)
    except MissingResult:
        return False
    return True


def _pilot_seeds() -> str:
    """How many seeds the pilot ran of Inception (and so of every trained arm)."""
    plan = SEED_SETS[0][1]
    n = len(tta.curves(plan, BASELINE)) if _held(plan, BASELINE) else 0
    return f"{n} seed{'s' * (n != 1)} an arm"


def figure3_curve() -> Path:
    """Figure 3 as the claims decide it: (a) the speed-up curve, (b) the maxima."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.2), layout="constrained")
    shown = []
    for k, (name, plan, marker) in enumerate(SEED_SETS):
        arms = [v for v in SPEEDUPS if _held(plan, v) and _held(plan, BASELINE)]
        if arms:
            shown.append(name)
        for j, v in enumerate(arms):
            curve = tta.curve(plan, v)
            x = np.array([100 * s.target for s in curve]) + 0.12 * (j - 1.5) + 0.5 * k
            mid = np.array([10**s.estimate.mean for s in curve])
            # no interval (no spread at all): a bare point
            ends = np.array(
                [[10**e for e in s.estimate.interval() or (s.estimate.mean,) * 2] for s in curve]
            )
            ax.errorbar(
                x, mid, yerr=[mid - ends[:, 0], ends[:, 1] - mid], color=STYLE[v].color,
                ls=STYLE[v].line, marker=marker, ms=4, capsize=2, mfc="none" if k == 0 else None,
                label=f"{INCEPTION.legend(v)}, {name} ({curve[0].seeds[1]} seeds)",
            )  # fmt: skip
            # where runs never reached a target: the other end of the censored estimate
            other = [(x_, 10**s.largest.mean) for x_, s in zip(x, curve) if s.censored]
            if other:
                ax.plot(*zip(*other), "x", color=STYLE[v].color, ms=4)
            paper = BN_FIG3["setups"].get(v, {}).get("steps_to_baseline_max")
            if paper and k == 0:
                factor = BN_FIG3["setups"][BASELINE]["steps_to_baseline_max"] / paper
                ax.axhline(factor, color=STYLE[v].color, lw=0.8, ls=":")
                ax.text(0.99, factor, f"paper {INCEPTION.legend(v)} {factor:.1f}×", transform=ax.get_yaxis_transform(), fontsize=7, color=STYLE[v].color, ha="right", va="bottom")  # fmt: skip
    ax.axhline(1, color="k", lw=0.7)
    ax.axvline(100 * tta.HEADLINE, color="k", lw=0.7, ls="--")
    ax.set_yscale("log")
    ax.set(
        xlabel="target: accuracy on the fixed test subset (%); dashed: the target the rows decide at\n"
        "points: runs that never reached a target at their last evaluation (Inception) or the cap "
        "(the variant); x: the other way round",
        ylabel="speed-up over Inception (ratio of geometric-mean steps)",
        title="(a) steps to each target, Inception's over the variant's (95% intervals)",
    )
    ax.legend(fontsize=6.5, loc="upper left")
    low = []  # arms at chance, written out rather than drawn far left of the others
    for k, (name, plan, marker) in enumerate(SEED_SETS):
        for i, v in enumerate(MAXIMA):
            if not _held(plan, v):
                continue
            best = list(tta.maxima(plan, v).values())  # a diverged run's: up to its divergence
            y = i + (0.2 if k else -0.2)
            if max(best) < NEAR_CHANCE:
                spread = (
                    f"{min(best):.1%}" if len(best) == 1 else f"{min(best):.1%}–{max(best):.1%}"
                )
                low.append(
                    (y, f"{name}: {spread}, {len(best)} seed{'s' * (len(best) > 1)} (chance)")
                )
                continue
            bx.plot(best, [y] * len(best), marker, color=STYLE[v].color, ms=3.5, mfc="none" if k == 0 else None)  # fmt: skip
            bx.plot([np.mean(best)], [y], "|", color="k", ms=9)
    left = bx.get_xlim()[0]
    for y, text in low:
        bx.text(left, y, " " + text, fontsize=7, va="center")
    bx.xaxis.set_major_formatter(PercentFormatter(1.0))
    bx.set_yticks(range(len(MAXIMA)), [INCEPTION.legend(v) for v in MAXIMA], fontsize=7)
    bx.set_ylim(len(MAXIMA) - 0.5, -0.5)  # top to bottom, the written-out rows inside
    bx.set(
        xlabel="smoothed maximum on the fixed test subset (dots: seeds, hollow: pilot; bar: mean)",
        title="(b) each arm's maximum (centred moving average of 5 evaluations)",
    )
    missing = [n for n, _, _ in SEED_SETS if n not in shown]
    note = f"; {', '.join(missing)} seeds: not run yet" if missing else ""
    fig.suptitle(
        "BN paper Figure 3 at CPU scale as a time-to-accuracy curve: Fashion-MNIST 32 px, BN-Inception "
        f"width 1/8 (pilot: the converged runs, {_pilot_seeds()}{note})"
    )
    return save(fig, "inception_fig3_curve.png")


@figure_set()
def main() -> None:
    for setting in sorted(p.parent for p in RESULTS.glob("*/runs.csv")):
        print(f"figure: {figure2(setting)}")
    if _held(PLAN, BASELINE):
        print(f"figure: {figure3_curve()}")


if __name__ == "__main__":
    main()
