"""Gather a sweep of ``experiments.mnist`` runs into ``results/``.

    python -m scripts.collect_mnist curves MULTIRUN_DIR --out results/mnist/mnist --command "..."
    python -m scripts.collect_mnist sweep MULTIRUN_DIR --out results/mnist/lr_sweep.csv

``curves``: every run's metrics as one long CSV (``model,seed,step,metric,value``) plus
``summary.json`` (final accuracies per network, mean and spread over seeds, next to the paper's
Figure 1 readings; hyperparameters, commit, command). ``sweep``: one row per run with its
hyperparameters and final numbers.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

PAPER_FIG1 = {
    "source": "BN paper Fig. 1(a), read off the plot (approximate; the paper states no number)",
    "bn_test_acc_at_50k": [0.98, 0.99],
    "baseline_test_acc_at_50k": [0.95, 0.97],
}


def runs(sweep_dir: Path) -> list[Path]:
    found = sorted(p.parent for p in sweep_dir.rglob("summary.json"))
    if not found:
        raise SystemExit(f"error: no run with a summary.json under {sweep_dir}")
    return found


def seed_stats(values: list[float]) -> dict:
    """Mean, spread (population std) and per-seed values, rounded to 5 digits."""
    return {
        "mean": round(statistics.fmean(values), 5),
        "std": round(statistics.pstdev(values), 5),
        "per_seed": [round(v, 5) for v in values],
    }


def format_stat(entry: dict, key: str) -> str:
    """``mean±std`` of ``entry[key]`` for a table, or ``-`` when it is missing."""
    return f"{entry[key]['mean']:.4f}±{entry[key]['std']:.4f}" if key in entry else "-"


def sweep_parser(doc: str, out: Path | None = None) -> argparse.ArgumentParser:
    """The command line of a sweep collector: ``SWEEP_DIR --out --command --wall-time``."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--out", type=Path, default=out, required=out is None)
    p.add_argument("--command", default="", help="the command recorded in summary.json")
    p.add_argument("--wall-time", type=float, default=None, help="seconds, recorded too")
    return p


def collect_curves(sweep_dir: Path, out: Path, command: str, wall_time: float | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    summaries = []
    with (out / "runs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "seed", "step", "metric", "value"])
        for run in runs(sweep_dir):
            s = json.loads((run / "summary.json").read_text())
            summaries.append(s)
            with (run / "metrics.csv").open() as m:
                for r in csv.DictReader(m):
                    w.writerow([s["model"], s["seed"], r["step"], r["metric"], r["value"]])
    per_model: dict[str, dict] = {}
    for model in sorted({s["model"] for s in summaries}):
        ss = sorted((s for s in summaries if s["model"] == model), key=lambda s: s["seed"])
        entry = {
            "seeds": [s["seed"] for s in ss],
            "diverged": [s["diverged"] for s in ss],
            "steps_per_s": [s.get("steps_per_s") for s in ss],
        }
        for key in (
            "test_acc",
            "train_acc",
            "test_acc_population",
            "test_acc_population_no_bessel",
            "final_train_loss",
        ):
            values = [s[key] for s in ss if s.get(key) is not None]
            if values:
                entry[key] = seed_stats(values)
        per_model[model] = entry
    first = summaries[0]
    summary = {
        "data": first["data"],
        "steps": first["steps"],
        "lr": first["lr"],
        "init_std": first["init_std"],
        "git_commit": first["git_commit"],
        "command": command,
        "wall_time_s": wall_time,
        "models": per_model,
        "paper": PAPER_FIG1,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"{'model':10} {'test acc (running stats)':>26} {'population':>12} {'pop. no Bessel':>15} {'steps/s':>8}"
    )
    for model, e in per_model.items():
        sps = statistics.fmean([v for v in e["steps_per_s"] if v]) if any(e["steps_per_s"]) else 0
        print(
            f"{model:10} {format_stat(e, 'test_acc'):>26} {format_stat(e, 'test_acc_population'):>12} "
            f"{format_stat(e, 'test_acc_population_no_bessel'):>15} {sps:8.0f}"
        )
    print(
        f"paper (Fig. 1a, read off the plot): BN {PAPER_FIG1['bn_test_acc_at_50k']}, "
        f"baseline {PAPER_FIG1['baseline_test_acc_at_50k']}"
    )
    print(f"wrote {out / 'runs.csv'} and {out / 'summary.json'}")


def collect_sweep(sweep_dir: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = [
        "model",
        "seed",
        "lr",
        "init_std",
        "steps",
        "diverged",
        "test_acc",
        "train_acc",
        "final_train_loss",
    ]
    rows = [json.loads((r / "summary.json").read_text()) for r in runs(sweep_dir)]
    rows.sort(key=lambda s: (s["model"], s["lr"], s["init_std"], s["seed"]))
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out} ({len(rows)} runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["curves", "sweep"])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--command", default="")
    ap.add_argument("--wall-time", type=float, default=None)
    args = ap.parse_args()
    if args.kind == "curves":
        collect_curves(args.sweep_dir, args.out, args.command, args.wall_time)
    else:
        collect_sweep(args.sweep_dir, args.out)


if __name__ == "__main__":
    main()
