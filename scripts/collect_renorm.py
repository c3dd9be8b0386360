"""Gather a sweep of ``experiments.renorm`` runs into ``results/renorm/<data>/``.

    python -m scripts.collect_renorm MULTIRUN_DIR --out results/renorm --command "make reproduce-renorm"

Writes, per dataset, ``runs.csv`` (``setup,seed,step,metric,value``: every run's metrics) and
``summary.json`` (final and best accuracies per setup, mean and spread over seeds, next to the
paper's ImageNet numbers), and prints the table.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from scripts.collect_mnist import format_stat, runs, seed_stats, sweep_parser

# Batch Renorm paper Secs. 4.2-4.3, top-1 ImageNet validation accuracy of Inception-v3 (paper
# scale: 50 workers x 32 examples). Recalled in ../shared/reference/papers.md Sec. 2.3.
PAPER = {
    "source": "Batch Renorm paper Secs. 4.2-4.3 (Inception-v3, ImageNet; paper scale)",
    "setups": {
        "bn32": {"test_acc": 0.783, "at_step": 130_000},
        "brn32": {"test_acc": 0.785, "at_step": 130_000},
        "bn_micro4": {"test_acc": 0.742, "at_step": 210_000},
        "brn_micro4": {"test_acc": 0.765, "at_step": 130_000},
        "noniid_bn": {"test_acc": 0.67, "train_acc": 0.728, "test_acc_train_mode": 0.765},
        "noniid_bn_halves": {"test_acc": 0.774, "at_step": 140_000},
        "noniid_brn": {"test_acc": 0.786, "at_step": 120_000},
    },
}
SETUP_ORDER = [
    "bn32",
    "brn32",
    "bn_micro4",
    "brn_micro4",
    "noniid_bn",
    "noniid_bn_halves",
    "noniid_brn",
    "noniid8_bn",
    "noniid8_brn",
    "groupnorm",
    "layernorm",
    "brn_micro4_jump",
]
KEYS = ("test_acc", "max_test_acc", "train_acc", "test_acc_train_mode", "steps_per_s")


def collect(sweep_dir: Path, out_root: Path, command: str, wall_time: float | None) -> None:
    summaries = [(run, json.loads((run / "summary.json").read_text())) for run in runs(sweep_dir)]
    for data in sorted({s["data"] for _, s in summaries}):
        out = out_root / data
        out.mkdir(parents=True, exist_ok=True)
        mine = sorted(
            ((r, s) for r, s in summaries if s["data"] == data),
            key=lambda rs: (_order(rs[1]["setup"]), rs[1]["seed"]),
        )
        with (out / "runs.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["setup", "seed", "step", "metric", "value"])
            for run, s in mine:
                with (run / "metrics.csv").open() as m:
                    for r in csv.DictReader(m):
                        w.writerow([s["setup"], s["seed"], r["step"], r["metric"], r["value"]])
        setups: dict[str, dict] = {}
        for setup in sorted({s["setup"] for _, s in mine}, key=_order):
            ss = [s for _, s in mine if s["setup"] == setup]
            entry = {
                "norm": ss[0]["norm"],
                "microbatch": ss[0]["microbatch"],
                "sampler": ss[0]["sampler"],
                "seeds": [s["seed"] for s in ss],
                "diverged": [s["diverged"] for s in ss],
            }
            for key in KEYS:
                values = [s[key] for s in ss if s.get(key) is not None]
                if values:
                    entry[key] = seed_stats(values)
            setups[setup] = entry
        first = mine[0][1]
        summary = {
            "data": data,
            "scale": "cpu" if first["model"] == "small_convnet" else "paper",
            "model": first["model"],
            "steps": first["steps"],
            "git_commit": first["git_commit"],
            "command": command,
            "wall_time_s": wall_time,
            "setups": setups,
            "paper": PAPER,
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        _print_table(data, setups)
        print(f"wrote {out / 'runs.csv'} and {out / 'summary.json'}")


def _order(setup: str) -> int:
    return SETUP_ORDER.index(setup) if setup in SETUP_ORDER else len(SETUP_ORDER)


def _print_table(data: str, setups: dict) -> None:
    print(f"\n{data}: final accuracy, mean ± spread over seeds (paper: ImageNet, Inception-v3)")
    print(
        f"{'setup':18} {'test':>14} {'best test':>14} {'train':>14} {'train-mode test':>16} {'paper':>7}"
    )
    for setup, e in setups.items():
        paper = PAPER["setups"].get(setup, {}).get("test_acc")
        print(
            f"{setup:18} {format_stat(e, 'test_acc'):>14} {format_stat(e, 'max_test_acc'):>14} {format_stat(e, 'train_acc'):>14} "
            f"{format_stat(e, 'test_acc_train_mode'):>16} {paper if paper else '-':>7}"
        )


def main() -> None:
    args = sweep_parser(__doc__, out=Path("results/renorm")).parse_args()
    collect(args.sweep_dir, args.out, args.command, args.wall_time)


if __name__ == "__main__":
    main()
