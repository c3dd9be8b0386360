"""The BN paper's Figure 3 from the BN-Inception study's runs: per setup, the validation curve's
maximum and the steps it takes to reach the ``inception`` setup's maximum (the paper's "steps to
72.2%"), next to the paper's numbers. The results pipeline calls :func:`extend` for this study.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from experiments.kit.results import RUN_KEY
from experiments.kit.runlog import read_curve

# BN paper Figure 3 (ImageNet, single crop, batch 32 per step).
PAPER_FIG3 = {
    "source": "BN paper Sec. 4.2.2, Figure 3 (ImageNet validation, single crop)",
    "setups": {
        "inception": {"steps_to_baseline_max": 31.0e6, "max_acc": 0.722},
        "bn_baseline": {"steps_to_baseline_max": 13.3e6, "max_acc": 0.727},
        "bn_x5": {"steps_to_baseline_max": 2.1e6, "max_acc": 0.730},
        "bn_x30": {"steps_to_baseline_max": 2.7e6, "max_acc": 0.748},
        "bn_x5_sigmoid": {"steps_to_baseline_max": None, "max_acc": 0.698},
        # "never achieves better than 1/1000 accuracy": chance on ImageNet's 1000 classes
        "inception_sigmoid": {"steps_to_baseline_max": None, "max_acc": None},
    },
}
BASELINE = "inception"


def steps_to(curve: list[tuple[int, float]], target: float) -> int | None:
    """The first step at which ``curve`` (``(step, accuracy)`` pairs) reaches ``target``."""
    return next((step for step, acc in curve if acc >= target), None)


def mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The seeds' mean accuracy at the steps every seed evaluated."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for curve in curves:
        for step, acc in curve:
            by_step[step].append(acc)
    return [(s, statistics.fmean(v)) for s, v in sorted(by_step.items()) if len(v) == len(curves)]


def summarize(curves: dict[str, list[tuple[int, float]]], images_per_step: int) -> dict[str, dict]:
    """Figure 3's columns for every setup's (mean) validation curve."""
    target = max(acc for _, acc in curves[BASELINE]) if BASELINE in curves else None
    base_steps = steps_to(curves[BASELINE], target) if target is not None else None
    table = {}
    for setup, curve in curves.items():
        best_step, best = max(curve, key=lambda sa: (sa[1], -sa[0]))
        entry = {
            "max_acc": round(best, 5),
            "step_of_max": best_step,
            "final_acc": round(curve[-1][1], 5),
        }
        if target is not None:
            reached = steps_to(curve, target)
            entry["baseline_max_acc"] = round(target, 5)
            entry["steps_to_baseline_max"] = reached
            entry["images_to_baseline_max"] = None if reached is None else reached * images_per_step
            entry["speedup_vs_baseline"] = (
                None if reached in (None, 0) else round(base_steps / reached, 2)
            )
        table[setup] = entry
    return table


def extend(summary: dict, runs: list[tuple[Path, dict]], out: Path) -> None:
    """Add Figure 3's columns to every setup of ``summary``, the parameter counts and the
    initial learning rates, and write ``fig3_table.md``."""
    by_setup: dict[str, list[Path]] = defaultdict(list)
    for run, s in runs:
        by_setup[s[RUN_KEY]].append(run)
    curves = {
        k: mean_curve([read_curve(run / "metrics.csv", "test/acc") for run in rs])
        for k, rs in by_setup.items()
    }
    table = summarize(curves, summary["global_batch"])
    for setup, entry in summary["setups"].items():
        entry.update(table[setup])
        entry["initial_lr"] = read_curve(by_setup[setup][0] / "metrics.csv", "lr")[0][1]
    summary["parameters"] = {s[RUN_KEY]: s["parameters"] for _, s in runs}
    summary["note"] = (
        "curves averaged over seeds before the maximum and the steps are read off them"
    )
    (out / "fig3_table.md").write_text(fig3_table(summary))
    print(fig3_table(summary))


def fig3_table(summary: dict) -> str:
    """The paper's Figure 3 as markdown, our reduced-setting numbers beside the paper's."""
    paper = PAPER_FIG3["setups"]
    target = summary["setups"].get(BASELINE, {}).get("baseline_max_acc")
    head = f"steps to {target:.1%}" if target is not None else "steps to baseline max"
    lines = [
        f"BN paper Figure 3, reduced setting: {summary['data']}, width {summary['width']}, "
        f"{parameter_range(summary)} parameters, {summary['steps']} steps of {summary['global_batch']}.",
        "",
        f"| variant | ours: {head} | ours: max accuracy (at step) | paper: steps to 72.2% | paper: max accuracy |",
        "|---|---|---|---|---|",
    ]
    for v, e in summary["setups"].items():
        reached, speed = e.get("steps_to_baseline_max"), e.get("speedup_vs_baseline")
        ours = "never" if reached is None else f"{reached}"
        ours += f" ({speed}x fewer)" if reached is not None and speed and v != BASELINE else ""
        p_steps = paper.get(v, {}).get("steps_to_baseline_max")
        p_text = "never" if p_steps is None else f"{p_steps / 1e6:.1f}M"
        if p_steps and v != BASELINE:
            p_text += f" ({paper[BASELINE]['steps_to_baseline_max'] / p_steps:.1f}x fewer)"
        p_acc = paper.get(v, {}).get("max_acc")
        lines.append(
            f"| {v} | {ours} | {e['max_acc']:.2%} ({e['step_of_max']}) | {p_text} | "
            f"{'chance' if p_acc is None else f'{p_acc:.1%}'} |"
        )
    return "\n".join(lines) + "\n"


def parameter_range(summary: dict) -> str:
    """The parameter count, or its range over the setups (BN swaps conv biases for γ, β)."""
    counts = sorted(set(summary["parameters"].values()))
    return f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,}"
