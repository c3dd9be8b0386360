"""The BN paper's Figure 3 from the BN-Inception study's runs: per setup, the validation curve's
maximum and the steps it takes to reach the ``inception`` setup's maximum (the paper's "steps to
72.2%"), next to the paper's numbers. The results pipeline calls :func:`extend` for this study.

Two protocols. *Fixed budget*: every setup runs ``train.steps`` and the target is the maximum of
Inception's seed-mean curve. *Converged* (``make reproduce-inception-converged``, the paper's):
Inception trains until its curve plateaus (``train.stop.plateau``), the target is the lowest of
its seeds' maxima (so every seed reaches it), and each variant trains until it reaches the
target (``train.stop.target``), plateaus below it, or hits the cap. The curves are a fixed
test subset evaluated often (``eval.test_subset``); the full test set is measured at the end.

    python -m experiments.inception_fig3 target RUN_DIR   # the converged protocol's target

In code, Figure 3's accuracy to reach is a *threshold*; ``target`` is the stopping rule's
(``train.stop.target``), which the converged protocol sets to it, and the recorded keys
(``target``, ``steps_to_target``).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import yaml

from experiments.kit.errors import CollectError, OneLineError
from experiments.kit.results import RUN_KEY, find_runs, seed_stats
from experiments.kit.runlog import read_curve
from experiments.papers import BN_FIG3

BASELINE = "inception"
SUBSET = "test/acc_subset"  # the converged protocol's curve


def steps_to(curve: list[tuple[int, float]], threshold: float) -> int | None:
    """The first step at which ``curve`` (``(step, accuracy)`` pairs) reaches ``threshold``."""
    return next((step for step, acc in curve if acc >= threshold), None)


def mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The seeds' mean accuracy at the steps every seed evaluated."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for curve in curves:
        for step, acc in curve:
            by_step[step].append(acc)
    return [(s, statistics.fmean(v)) for s, v in sorted(by_step.items()) if len(v) == len(curves)]


def summarize(curves: dict[str, list[tuple[int, float]]], images_per_step: int) -> dict[str, dict]:
    """Figure 3's columns for every setup's (mean) validation curve."""
    threshold = max(acc for _, acc in curves[BASELINE]) if BASELINE in curves else None
    base_steps = steps_to(curves[BASELINE], threshold) if threshold is not None else None
    table = {}
    for setup, curve in curves.items():
        best_step, best = max(curve, key=lambda sa: (sa[1], -sa[0]))
        entry = {
            "max_acc": round(best, 5),
            "step_of_max": best_step,
            "final_acc": round(curve[-1][1], 5),
        }
        if threshold is not None:
            reached = steps_to(curve, threshold)
            entry["baseline_max_acc"] = round(threshold, 5)
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
    if any(s.get("test_acc_subset") is not None for _, s in runs):
        return extend_converged(summary, runs, out)
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
    threshold = summary["setups"].get(BASELINE, {}).get("baseline_max_acc")
    head = f"steps to {threshold:.1%}" if threshold is not None else "steps to baseline max"
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
        p_steps, p_acc = _paper_cells(v, "x")
        lines.append(
            f"| {v} | {ours} | {e['max_acc']:.2%} ({e['step_of_max']}) | {p_steps} | {p_acc} |"
        )
    return "\n".join(lines) + "\n"


def _paper_cells(setup: str, times: str) -> tuple[str, str]:
    """Figure 3's steps to Inception's maximum (with the speed-up, ``times`` its sign) and maximum
    accuracy for ``setup``; "–" for a setup the paper did not train (a question's variant)."""
    paper = BN_FIG3["setups"]
    if setup not in paper:
        return "–", "–"
    steps, acc = paper[setup]["steps_to_baseline_max"], paper[setup]["max_acc"]
    text = "never" if steps is None else f"{steps / 1e6:.1f}M"
    if steps and setup != BASELINE:
        text += f" ({paper[BASELINE]['steps_to_baseline_max'] / steps:.1f}{times} fewer)"
    return text, "chance" if acc is None else f"{acc:.1%}"


def parameter_range(summary: dict) -> str:
    """The parameter count, or its range over the setups (BN swaps conv biases for γ, β)."""
    counts = sorted(set(summary["parameters"].values()))
    return f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,}"


# -- the converged protocol ------------------------------------------------------------------
def threshold_of(curves: list[list[tuple[int, float]]]) -> float:
    """The converged protocol's threshold: the lowest of the Inception seeds' maxima."""
    return min(max(acc for _, acc in curve) for curve in curves)


def seed_row(run: Path, s: dict, threshold: float) -> dict:
    """One run of the converged protocol: when it reached ``threshold``, its best, how it ended."""
    curve = read_curve(run / "metrics.csv", SUBSET)
    best_step, best = max(curve, key=lambda sa: (sa[1], -sa[0]))
    stopped = s.get("stopped", "")
    return {
        "seed": s["seed"],
        "steps_to_target": steps_to(curve, threshold),
        "max_acc_subset": best,
        "step_of_max": best_step,
        "steps_done": s["steps_done"],
        "ended_by": stopped.split(":")[0] if stopped else ("diverged" if s["diverged"] else "cap"),
        "test_acc": s.get("test_acc"),  # the full test set, at the end
    }


def converged_entry(rows: list[dict], base_steps: list[int] | None) -> dict:
    """A setup's seeds: mean steps to the target (when every seed reached it), its speed-up
    over Inception's mean and the range of the speed-up over all (Inception, variant) seed
    pairs."""
    reached = [r["steps_to_target"] for r in rows if r["steps_to_target"] is not None]
    entry = {
        "seeds": rows,
        "reached": f"{len(reached)}/{len(rows)}",
        "max_acc_subset": seed_stats([r["max_acc_subset"] for r in rows]),
        "test_acc_end": _stats([r["test_acc"] for r in rows if r["test_acc"] is not None]),
        "steps_to_target": None,
        "speedup": None,
    }
    if reached and len(reached) == len(rows):
        entry["steps_to_target"] = seed_stats(reached)
        if base_steps and all(reached):
            entry["speedup"] = round(statistics.fmean(base_steps) / statistics.fmean(reached), 2)
            pairs = [b / r for b in base_steps for r in reached]
            entry["speedup_range"] = [round(min(pairs), 2), round(max(pairs), 2)]
    return entry


def extend_converged(summary: dict, runs: list[tuple[Path, dict]], out: Path) -> None:
    """The converged protocol's Figure 3 (``summary["converged"]``) and ``fig3_table.md``."""
    by_setup: dict[str, list[tuple[Path, dict]]] = defaultdict(list)
    for run, s in runs:
        by_setup[s[RUN_KEY]].append((run, s))
    if BASELINE not in by_setup:
        raise CollectError(f"the converged protocol needs the {BASELINE!r} runs (its target)")
    threshold = threshold_of([read_curve(r / "metrics.csv", SUBSET) for r, _ in by_setup[BASELINE]])
    rows = {k: [seed_row(r, s, threshold) for r, s in rs] for k, rs in by_setup.items()}
    base = [r["steps_to_target"] for r in rows[BASELINE]]
    summary["converged"] = {
        "target": threshold,
        "target_rule": "the lowest of the Inception seeds' maxima on the test subset",
        **eval_settings(runs),
        "cap": max(s["steps"] for _, s in runs),
        "setups": {k: converged_entry(v, base) for k, v in rows.items()},
    }
    summary["parameters"] = {s[RUN_KEY]: s["parameters"] for _, s in runs}
    (out / "fig3_table.md").write_text(converged_table(summary))
    print(converged_table(summary))


def eval_settings(runs: list[tuple[Path, dict]]) -> dict:
    """``test_subset`` and ``eval_every`` from a run's summary, or from the config Hydra saved
    beside it (runs made before the summary recorded them)."""
    for _, s in runs:
        if "test_subset" in s:
            return {"test_subset": s["test_subset"], "eval_every": s["eval_every"]}
    saved = yaml.safe_load((runs[0][0] / ".hydra" / "config.yaml").read_text())["eval"]
    return {"test_subset": saved["test_subset"], "eval_every": saved["every"]}


def converged_table(summary: dict) -> str:
    """The converged protocol's Figure 3 as markdown, the paper's numbers beside ours."""
    c = summary["converged"]
    lines = [
        f"BN paper Figure 3, converged protocol at CPU scale: {summary['data']}, width "
        f"{summary['width']}, {parameter_range(summary)} parameters, batch {summary['global_batch']}, "
        f"cap {c['cap']} steps; curves on {c['test_subset']} fixed test images every "
        f"{c['eval_every']} steps. Target: {c['target']:.2%} ({c['target_rule']}).",
        "",
        f"| variant | ours: steps to {c['target']:.2%} (per seed) | ours: speed-up (range over seed pairs) "
        "| ours: best on the subset until the run ended | ours: full test at the end | how the runs ended "
        "| paper: steps to 72.2% | paper: max accuracy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v, e in c["setups"].items():
        per_seed = ", ".join(
            "never" if r["steps_to_target"] is None else str(r["steps_to_target"])
            for r in e["seeds"]
        )
        steps = (
            f"{e['steps_to_target']['mean']:.0f}"
            if e["steps_to_target"] is not None
            else ("never" if e["reached"].startswith("0/") else f"{e['reached']} seeds")
        )
        speed = (
            ""
            if e["speedup"] is None or v == BASELINE
            else f"{e['speedup']}× [{e['speedup_range'][0]}, {e['speedup_range'][1]}]"
        )
        p_steps, p_acc = _paper_cells(v, "×")
        ended = ", ".join(f"{r['ended_by']} at {r['steps_done']}" for r in e["seeds"])
        lines.append(
            f"| {v} | {steps} ({per_seed}) | {speed} | {e['max_acc_subset']['mean']:.2%} "
            f"| {_mean(e['test_acc_end'])} | {ended} | {p_steps} | {p_acc} |"
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def _stats(values: list[float]) -> dict | None:
    return seed_stats(values) if values else None


def _mean(stat: dict | None) -> str:
    return "-" if stat is None else f"{stat['mean']:.2%}"


def converged_threshold(run_dir: Path) -> float:
    """The converged protocol's threshold: the lowest maximum of the ``inception`` runs under
    ``run_dir`` (their test-subset curves)."""
    curves = [
        read_curve(run / "metrics.csv", SUBSET)
        for run, s in find_runs(run_dir)
        if s[RUN_KEY] == BASELINE
    ]
    if not curves or not all(curves):
        raise CollectError(f"no {BASELINE} run with a {SUBSET} curve under {run_dir}")
    return threshold_of(curves)


def stop_at_target(run_dir: Path) -> list[str]:
    """The variants' overrides: stop at :func:`converged_threshold` (``scripts.reproduce`` calls this
    between the protocol's two stages)."""
    return [f"train.stop.target={converged_threshold(run_dir)!r}"]


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="The converged protocol's target accuracy.")
    p.add_argument("command", choices=["target"])
    p.add_argument("run_dir", type=Path, help="a folder holding the inception runs")
    args = p.parse_args(argv)
    try:
        print(repr(converged_threshold(args.run_dir)))
    except OneLineError as e:  # no runs to read it from
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
