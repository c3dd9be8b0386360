"""Figure of the normalizers study, made only from ``results/normalizers/``.

    python -m scripts.plot_normalizers

``normalizers.png``: the conv net with each normalizer (BN, weight norm, weight norm with mean-only
BN, ℓ1 and ℓ∞ BN): test accuracy over training, the training loss over the first fifth of the run
(the early window the claims read shaded), and each normalizer's final test accuracy, its seeds as
dots and their mean with its 95% t-interval, the confirmatory seeds beside the pilot's once they
have run.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import PercentFormatter

from experiments.studies import CONFIRMATORY, study
from scripts.analysis import committed
from scripts.analysis.committed import RESULTS
from scripts.analysis.stats import Estimate
from scripts.claims import normalizers as n
from scripts.plotting import figure_set, mean_band, plt, read_curves, save

STUDY = study("normalizers")
SETS = (("pilot", n.PATH), ("confirmatory", f"{CONFIRMATORY}/{n.PATH}"))


def _finals(path: str) -> dict[str, list[float]]:
    summary = committed.summary(path)["setups"]
    return {k: summary[k]["test_acc"]["per_seed"] for k in STUDY.labels if k in summary}


def figure() -> Path:
    data = read_curves(RESULTS / n.PATH / "runs.csv")
    fig, (acc, loss, final) = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    for k, style in STUDY.styles.items():
        mean_band(
            acc, data, k, "test/acc", style.color, f"{style.legend} ({{n}} seeds)", style.line
        )
        mean_band(loss, data, k, "train/loss", style.color, style.legend, style.line)
    acc.yaxis.set_major_formatter(PercentFormatter(1.0))
    acc.set(xlabel="step", ylabel="test accuracy (Fashion-MNIST)", title="Test accuracy (pilot seeds)", ylim=(0.7, 0.93))  # fmt: skip
    acc.legend(fontsize=7, loc="lower right")
    loss.axvspan(0, n.EARLY_END, color="k", alpha=0.06, label=f"early window (to step {n.EARLY_END})")  # fmt: skip
    loss.set(xlabel="step", ylabel="training loss (interval mean)", yscale="log", xlim=(0, 1500), title="Training loss, first half (pilot seeds)")  # fmt: skip
    loss.legend(fontsize=7)
    names = list(STUDY.labels)
    for j, (name, path) in enumerate(SETS):
        if not (RESULTS / path / "summary.json").exists():
            continue
        for i, (k, accs) in enumerate(_finals(path).items()):
            style = STUDY.styles[k]
            x = names.index(k) + (0.2 * j - 0.1)
            final.plot([x] * len(accs), accs, ".", color=style.color, alpha=0.4, ms=4)
            e = Estimate.of(accs)
            low, high = e.interval() or (e.mean, e.mean)
            final.errorbar([x], [e.mean], yerr=[[e.mean - low], [high - e.mean]], color=style.color, marker="o" if j == 0 else "s", capsize=3, label=f"{name} seeds" if i == 0 else None)  # fmt: skip
    final.set_xticks(range(len(names)), [STUDY.labels[k] for k in names], rotation=20, ha="right", fontsize=8)  # fmt: skip
    final.yaxis.set_major_formatter(PercentFormatter(1.0))
    final.set(ylabel="final test accuracy", title="Final test accuracy: seeds, mean and 95% t-interval")  # fmt: skip
    final.legend(fontsize=7)
    fig.suptitle(
        "Other normalizers in BN's place: the renorm study's conv net, batch 32, 3,000 steps, "
        "Fashion-MNIST"
    )
    return save(fig, "normalizers.png")


@figure_set()
def main() -> None:
    if not (RESULTS / n.PATH / "summary.json").exists():
        print("no result committed for the normalizers study: no figure")
        return
    print(f"figure: {figure()}")


if __name__ == "__main__":
    main()
