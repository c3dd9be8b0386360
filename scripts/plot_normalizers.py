"""Figure of the normalizers study, made only from ``results/normalizers/``.

    python -m scripts.plot_normalizers

``normalizers.png``: the conv net with each normalizer (BN, weight norm, weight norm with mean-only
BN, ℓ1 and ℓ∞ BN): test accuracy over training, the training loss over the first fifth of the run
(the early window the claims read shaded), and each normalizer's final test accuracy, its seeds as
dots (a diverged seed a cross at chance, as the rows read it) and their mean with its 95%
t-interval, the confirmatory seeds beside the pilot's once they have run. The curves are the
mean of the seeds that did not diverge (the legend gives the count).
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import PercentFormatter

from experiments.studies import CONFIRMATORY, study
from scripts.analysis import committed
from scripts.analysis.committed import RESULTS
from scripts.analysis.stats import Estimate
from scripts.claims import normalizers as n
from scripts.claims.measure import CHANCE
from scripts.plotting import figure_set, interval_errors, mean_band, plt, read_curves, save

STUDY = study("normalizers")
SETS = (("pilot", n.PATH), ("confirmatory", f"{CONFIRMATORY}/{n.PATH}"))


def _finals(path: str) -> dict[str, tuple[dict[int, float], dict[int, bool]]]:
    """Per setup, ``({seed: final test accuracy}, {seed: diverged})``: a diverged seed at chance,
    as the rows read it."""
    setups = committed.summary(path)["setups"]
    return {
        k: (
            committed.per_seed(path, k, "test_acc", diverged_as=CHANCE),
            committed.diverged(path, k),
        )
        for k in STUDY.labels
        if k in setups
    }


def _survivors(data: dict, path: str) -> tuple[dict, dict[str, int]]:
    """The curves of the seeds that did not diverge (a diverged seed's curves stop where it did,
    and the mean is drawn over the steps every curve has), and each setup's diverged count."""
    setups = committed.summary(path)["setups"]
    gone = {k: {s for s, d in committed.diverged(path, k).items() if d} for k in setups}
    kept = {key: v for key, v in data.items() if key[1] not in gone.get(key[0], set())}
    return kept, {k: len(v) for k, v in gone.items()}


def figure() -> Path:
    data, diverged = _survivors(read_curves(RESULTS / n.PATH / "runs.csv"), n.PATH)
    fig, (acc, loss, final) = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    for k, style in STUDY.styles.items():
        gone = f"; {diverged[k]} diverged, not drawn" if diverged.get(k) else ""
        label = f"{style.legend} ({{n}} seeds{gone})"
        mean_band(acc, data, k, "test/acc", style.color, label, style.line)
        mean_band(loss, data, k, "train/loss", style.color, style.legend, style.line)
    acc.yaxis.set_major_formatter(PercentFormatter(1.0))
    acc.set(xlabel="step", ylabel="test accuracy (Fashion-MNIST)", title="Test accuracy (pilot seeds)", ylim=(0.7, 0.93))  # fmt: skip
    acc.legend(fontsize=7, loc="lower right")
    loss.axvspan(0, n.EARLY_END, color="k", alpha=0.06, label=f"early window (to step {n.EARLY_END})")  # fmt: skip
    loss.set(xlabel="step", ylabel="training loss (interval mean)", yscale="log", xlim=(0, 1500), title="Training loss, first half (pilot seeds)")  # fmt: skip
    loss.legend(fontsize=7)
    names = list(STUDY.labels)
    drawn_lost = False
    for j, (name, path) in enumerate(SETS):
        if not (RESULTS / path / "summary.json").exists():
            continue
        for i, (k, (by_seed, gone)) in enumerate(_finals(path).items()):
            style = STUDY.styles[k]
            x = names.index(k) + (0.2 * j - 0.1)
            accs = list(by_seed.values())
            final.plot([x] * len(accs), accs, ".", color=style.color, alpha=0.4, ms=4)
            if lost := [by_seed[s] for s, d in gone.items() if d]:
                final.plot([x] * len(lost), lost, "x", color=style.color, ms=6, label="diverged (at chance)" if not drawn_lost else None)  # fmt: skip
                drawn_lost = True
            e = Estimate.of(accs)
            below, above = interval_errors(e)
            final.errorbar([x], [e.mean], yerr=[[below], [above]], color=style.color, marker="o" if j == 0 else "s", capsize=3, label=f"{name} seeds" if i == 0 else None)  # fmt: skip
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
