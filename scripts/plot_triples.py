"""The figure of the non-i.i.d. study on 1,000 classes, made only from ``results/triples/``.

    python -m scripts.plot_triples

``triples_noniid.png``: (a) every arm's final test accuracy at inference (moving averages) and,
where measured, in training mode on test minibatches built like its training ones, at the
paper's 16 labels x 2 and i.i.d. (points on an axis of their own range); (b) the final
accuracies against the labels per minibatch of 32. Each a mean over seeds with its 95%
t-interval, the pilot beside the confirmatory seeds once they have run.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import PercentFormatter

from experiments.kit.errors import MissingResult
from experiments.studies import TRIPLES_DOSES, study
from scripts.analysis import committed
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import CONFIRMED, PLAN, Plan
from scripts.claims import triples as t
from scripts.claims.measure import final_accuracy
from scripts.plotting import figure_set, interval_errors, plt, save

STUDY = study("triples")
ARMS = (t.IID_BN, "brn32", t.BN, t.HALVES, t.BRN)
KEYS = (("test_acc", "inference", "-"), ("test_acc_train_mode", "training mode", "--"))


def _stat(plan: Plan, setup: str, key: str) -> tuple[float, float, float] | None:
    """(mean, below, above) of a setup's final accuracy ``key`` over seeds; None: not run or
    not measured."""
    try:
        setups = committed.read_summary(plan.results / t.PATH)["setups"]
    except MissingResult:
        return None
    if key not in setups.get(setup, {}):  # not run, or not evaluated so (training mode)
        return None
    values = list(final_accuracy(plan, t.PATH, setup, key).values())
    e = Estimate.of(values)
    return e.mean, *interval_errors(e)


def _arms(ax, plan: Plan) -> None:
    # Points, not bars: the arms differ by a few points near 95%, which bars from zero hide.
    offset = 0.15
    for j, (key, name, _) in enumerate(KEYS):
        for i, setup in enumerate(ARMS):
            stat = _stat(plan, setup, key)
            if stat is None:
                continue
            mean, below, above = stat
            ax.errorbar(i + (j - 0.5) * offset, mean, yerr=[[below], [above]], color=_color(setup),
                        marker="o" if j == 0 else "s", mfc=_color(setup) if j == 0 else "white",
                        capsize=3, ls="none", label=name if i == ARMS.index(t.BN) else None)  # fmt: skip
    ax.set_xticks(range(len(ARMS)), [STUDY.labels[s] for s in ARMS], rotation=20, ha="right", fontsize=7)  # fmt: skip
    ax.set_xlim(-0.5, len(ARMS) - 0.5)
    ax.set(
        ylabel="final test accuracy",
        title="(a) each arm: inference (filled) and training mode (open)",
    )
    ax.legend(fontsize=7, loc="lower left")


def _color(setup: str) -> str:
    return STUDY.styles[setup].color


def _doses(ax, plan: Plan) -> None:
    lines = (("BN", 0), ("Batch Renorm", 1))
    for name, which in lines:
        for key, mode, ls in KEYS:
            doses = sorted(TRIPLES_DOSES)
            stats = [_stat(plan, TRIPLES_DOSES[k][which], key) for k in doses]
            kept = [(32 // k, s) for k, s in zip(doses, stats) if s is not None]
            if not kept:
                continue
            ax.errorbar(
                [x for x, _ in kept], [s[0] for _, s in kept],
                yerr=[[s[1] for _, s in kept], [s[2] for _, s in kept]],
                color=_color(TRIPLES_DOSES[2][which]), ls=ls, marker="o", capsize=3, label=f"{name}, {mode}",
            )  # fmt: skip
    iid = _stat(plan, t.IID_BN, "test_acc")
    if iid is not None:
        ax.axhline(iid[0], color="k", lw=0.7, ls=":", label="BN, i.i.d. minibatches")
    ax.set_xscale("log", base=2)
    ax.set_xticks([32 // k for k in sorted(TRIPLES_DOSES)], [str(32 // k) for k in sorted(TRIPLES_DOSES)])  # fmt: skip
    ax.set(xlabel="labels per minibatch of 32", title="(b) dose-response")
    ax.legend(fontsize=7, loc="lower right")


def noniid_figure() -> Path:
    sets = []
    for name, plan in (("pilot", PLAN), ("confirmatory", CONFIRMED)):
        if _stat(plan, t.BN, "test_acc") is not None:
            sets.append((name, plan))
    fig, axes = plt.subplots(len(sets), 2, figsize=(11, 4.2 * len(sets)), layout="constrained", squeeze=False)  # fmt: skip
    for row, (name, plan) in zip(axes, sets):
        _arms(row[0], plan)
        _doses(row[1], plan)
        for ax in row:
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            ax.set_title(f"{ax.get_title()} ({name} seeds)", fontsize=9)
    fig.suptitle(
        "Batch Renorm paper Sec. 4.3 on 1,000 classes (MNIST triples): non-i.i.d. minibatches\n"
        "mean final test accuracy with its 95% t-interval over seeds"
    )
    return save(fig, "triples_noniid.png")


@figure_set()
def main() -> None:
    if _stat(PLAN, t.BN, "test_acc") is None:
        print("no result committed for the triples study: no figure")
        return
    print(f"figure: {noniid_figure()}")


if __name__ == "__main__":
    main()
