"""Gather a sweep of ``experiments.inception`` runs into ``results/inception/<setting>/``.

    python -m scripts.collect_inception MULTIRUN_DIR --out results/inception/fashion_mnist_cpu \\
        --command "make reproduce-inception-cpu"

Writes ``runs.csv`` (``variant,seed,step,metric,value``: every run's metrics), ``summary.json``
(per variant: the validation curve's maximum, the steps to reach the ``inception`` variant's
maximum, as the paper's Figure 3 counts "steps to 72.2%", and the paper's numbers beside them)
and ``fig3_table.md``, and prints the table.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from experiments.runlog import read_curve
from scripts.collect_mnist import runs, seed_stats, sweep_parser

# BN paper Figure 3 (ImageNet, single crop, batch 32 per step).
PAPER_FIG3 = {
    "source": "BN paper Sec. 4.2.2, Figure 3 (ImageNet validation, single crop)",
    "variants": {
        "inception": {"steps_to_baseline_max": 31.0e6, "max_acc": 0.722},
        "bn_baseline": {"steps_to_baseline_max": 13.3e6, "max_acc": 0.727},
        "bn_x5": {"steps_to_baseline_max": 2.1e6, "max_acc": 0.730},
        "bn_x30": {"steps_to_baseline_max": 2.7e6, "max_acc": 0.748},
        "bn_x5_sigmoid": {"steps_to_baseline_max": None, "max_acc": 0.698},
        # "never achieves better than 1/1000 accuracy": chance on ImageNet's 1000 classes
        "inception_sigmoid": {"steps_to_baseline_max": None, "max_acc": None},
    },
}
VARIANT_ORDER = list(PAPER_FIG3["variants"])
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
    """Figure 3's columns for every variant's (mean) validation curve."""
    target = max(acc for _, acc in curves[BASELINE]) if BASELINE in curves else None
    base_steps = steps_to(curves[BASELINE], target) if target is not None else None
    table = {}
    for variant, curve in curves.items():
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
        table[variant] = entry
    return table


def collect(sweep_dir: Path, out: Path, command: str, wall_time: float | None) -> dict:
    found = sorted(
        ((run, json.loads((run / "summary.json").read_text())) for run in runs(sweep_dir)),
        key=lambda rs: (_order(rs[1]["variant"]), rs[1]["seed"]),
    )
    out.mkdir(parents=True, exist_ok=True)
    with (out / "runs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "step", "metric", "value"])
        for run, s in found:
            with (run / "metrics.csv").open() as m:
                for r in csv.DictReader(m):
                    w.writerow([s["variant"], s["seed"], r["step"], r["metric"], r["value"]])
    per_variant: dict[str, list[tuple[Path, dict]]] = defaultdict(list)
    for run, s in found:
        per_variant[s["variant"]].append((run, s))
    curves = {
        v: mean_curve([read_curve(run / "metrics.csv", "test/acc") for run, _ in rs])
        for v, rs in per_variant.items()
    }
    first = found[0][1]
    table = summarize(curves, first["global_batch"])
    variants = {}
    for v, rs in per_variant.items():
        ss = [s for _, s in rs]
        variants[v] = {
            **table[v],
            "seeds": [s["seed"] for s in ss],
            "diverged": [s["diverged"] for s in ss],
            "max_test_acc": seed_stats([s["max_test_acc"] for s in ss]),
            "images_per_s": seed_stats([s["images_per_s"] for s in ss if s.get("images_per_s")]),
            "recipe": {
                "initial_lr": read_curve(rs[0][0] / "metrics.csv", "lr")[0][1],
                **{
                    k: ss[0][k]
                    for k in ("norm", "activation", "weight_decay", "lr_decay_every", "photometric")
                },
            },
        }
    summary = {
        "data": first["data"],
        "width": first["width"],
        "parameters": {v: rs[0][1]["parameters"] for v, rs in per_variant.items()},
        "steps": first["steps"],
        "global_batch": first["global_batch"],
        "git_commit": first["git_commit"],
        "command": command,
        "wall_time_s": wall_time,
        "note": "curves averaged over seeds before the maximum and the steps are read off them",
        "variants": variants,
        "paper": PAPER_FIG3,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table_md = fig3_table(summary)
    (out / "fig3_table.md").write_text(table_md)
    print(table_md)
    print(f"wrote {out / 'runs.csv'}, {out / 'summary.json'} and {out / 'fig3_table.md'}")
    return summary


def fig3_table(summary: dict) -> str:
    """The paper's Figure 3 as markdown, our reduced-setting numbers beside the paper's."""
    target = summary["variants"].get(BASELINE, {}).get("baseline_max_acc")
    head = f"steps to {target:.1%}" if target is not None else "steps to baseline max"
    lines = [
        f"BN paper Figure 3, reduced setting: {summary['data']}, width {summary['width']}, "
        f"{parameter_range(summary)} parameters, {summary['steps']} steps of {summary['global_batch']}.",
        "",
        f"| variant | ours: {head} | ours: max accuracy (at step) | paper: steps to 72.2% | paper: max accuracy |",
        "|---|---|---|---|---|",
    ]
    for v, e in summary["variants"].items():
        paper = PAPER_FIG3["variants"].get(v, {})
        reached = e.get("steps_to_baseline_max")
        speed = e.get("speedup_vs_baseline")
        ours_steps = (
            "never"
            if reached is None
            else f"{reached}" + (f" ({speed}x fewer)" if speed and v != BASELINE else "")
        )
        p_steps = paper.get("steps_to_baseline_max")
        p_text = "never" if p_steps is None else f"{p_steps / 1e6:.1f}M"
        if p_steps and v != BASELINE:
            p_text += f" ({PAPER_FIG3['variants'][BASELINE]['steps_to_baseline_max'] / p_steps:.1f}x fewer)"
        p_acc = paper.get("max_acc")
        lines.append(
            f"| {v} | {ours_steps} | {e['max_acc']:.2%} ({e['step_of_max']}) | {p_text} | "
            f"{'chance' if p_acc is None else f'{p_acc:.1%}'} |"
        )
    return "\n".join(lines) + "\n"


def parameter_range(summary: dict) -> str:
    """The parameter count, or its range over the variants (BN swaps conv biases for γ, β)."""
    counts = sorted(set(summary["parameters"].values()))
    return f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,}"


def _order(variant: str) -> int:
    return VARIANT_ORDER.index(variant) if variant in VARIANT_ORDER else len(VARIANT_ORDER)


def main() -> None:
    args = sweep_parser(__doc__).parse_args()
    collect(args.sweep_dir, args.out, args.command, args.wall_time)


if __name__ == "__main__":
    main()
