"""The BN paper's Figure 3 from the BN-Inception study's runs, as the protocol's own record: per
setup, the validation curve's maximum and the steps it takes to reach the ``inception`` setup's
maximum (the paper's "steps to 72.2%"), next to the paper's numbers, in ``fig3_table.md`` and the
collection's summary. The results pipeline calls :func:`extend` for this study.

This record's target, Inception's maximum
(:func:`scripts.analysis.steps_to_target.inception_max`), is the lowest of the Inception seeds'
plateaus, each the maximum of its curve smoothed by a centred moving average: a number computed
from the data, which moves with every seed. The claims table decides Figure 3 otherwise, on a
time-to-accuracy curve at targets fixed in advance and on each arm's maximum
(:mod:`scripts.analysis.time_to_accuracy`); this record decides nothing.

Three protocols. *Fixed budget*: every setup runs ``train.steps``; each setup's maximum and steps
are read off its seed-mean curve. *Converged* (``make reproduce-inception-converged``, the pilot):
Inception trains until its curve plateaus (``train.stop.plateau``), and each variant trains until
it reaches the stopping level (``train.stop.target``: the lowest of the Inception seeds' single
best evaluations, never below the target, so a variant stopped there has reached the target),
plateaus below it, or hits the cap. *Every arm to its own plateau* (``make confirm-inception``,
the confirmatory seeds): each run stops at its plateau or the cap, whatever it reached. The curves
are a fixed test subset evaluated often (``eval.test_subset``); the full test set is measured at
the end.

    python -m experiments.inception_fig3 target RUN_DIR   # the converged protocol's stopping level
    python -m experiments.inception_fig3 refresh results/inception/fashion_mnist_converged
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

import yaml

from experiments.kit.data import in_memory_classes
from experiments.kit.errors import CollectError, OneLineError
from experiments.kit.results import RUN_KEY, find_runs, seed_stats
from experiments.kit.runlog import read_curve
from experiments.papers import BN_FIG3
from scripts.analysis.steps_to_target import CHANCE_SE, chance_ceiling, inception_max, rule

BASELINE = "inception"
SUBSET = "test/acc_subset"  # the converged protocol's curve


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


def summarize(
    curves: dict[str, list[tuple[int, float]]], images_per_step: int, target: float | None
) -> dict[str, dict]:
    """Figure 3's columns for every setup's (mean) validation curve: its maximum and when it
    reaches ``target`` (Inception's maximum; None: no Inception runs)."""
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
                None
                if reached in (None, 0) or base_steps is None
                else round(base_steps / reached, 2)
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
        k: [read_curve(run / "metrics.csv", "test/acc") for run in rs] for k, rs in by_setup.items()
    }
    initial_lrs = {k: read_curve(rs[0] / "metrics.csv", "lr")[0][1] for k, rs in by_setup.items()}
    summary["parameters"] = {s[RUN_KEY]: s["parameters"] for _, s in runs}
    fixed_budget(summary, curves, initial_lrs, out)


def fixed_budget(
    summary: dict,
    curves: dict[str, list[list[tuple[int, float]]]],
    initial_lrs: dict[str, float],
    out: Path,
) -> None:
    """The fixed-budget protocol's Figure 3 from every setup's seeds' test curves (in seed
    order): its columns added to ``summary``'s setups with their ``initial_lrs``, and
    ``fig3_table.md`` in ``out``."""
    target = inception_max(curves[BASELINE]) if BASELINE in curves else None
    means = {k: mean_curve(cs) for k, cs in curves.items()}
    table = summarize(means, summary["global_batch"], target)
    for setup, entry in summary["setups"].items():
        entry.update(table[setup])
        entry["initial_lr"] = initial_lrs[setup]
    summary["note"] = (
        f"Inception's maximum (the target) is {rule()}; each setup's maximum and steps are "
        "read off its seed-mean curve"
    )
    _write_table(out, fig3_table(summary))


def _write_table(out: Path, table: str) -> None:
    (out / "fig3_table.md").write_text(table)
    print(table)


def fig3_table(summary: dict) -> str:
    """The paper's Figure 3 as markdown, our reduced-setting numbers beside the paper's."""
    target = summary["setups"].get(BASELINE, {}).get("baseline_max_acc")
    head = f"steps to {target:.1%}" if target is not None else "steps to baseline max"
    rule_text = f" Target: Inception's maximum, {rule()}." if target is not None else ""
    lines = [
        f"BN paper Figure 3, reduced setting: {summary['data']}, width {summary['width']}, "
        f"{parameter_range(summary)} parameters, {summary['steps']} steps of {summary['global_batch']}.{rule_text}",
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
def stop_level(curves: list[list[tuple[int, float]]]) -> float:
    """The level the converged protocol's variants train to (``train.stop.target``): the lowest
    of the Inception seeds' single best evaluations, never below Figure 3's target."""
    return min(max(acc for _, acc in curve) for curve in curves)


def seed_row(curve: list[tuple[int, float]], s: dict) -> dict:
    """One run of the converged protocol (its ``curve`` on the test subset, its summary ``s``):
    its best and how it ended (:func:`converged_figure` adds when it reached the target)."""
    best_step, best = max(curve, key=lambda sa: (sa[1], -sa[0]))
    stopped = s.get("stopped", "")
    return {
        "seed": s["seed"],
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
    curves = {
        k: [read_curve(r / "metrics.csv", SUBSET) for r, _ in rs] for k, rs in by_setup.items()
    }
    rows = {k: [seed_row(c, s) for c, (_, s) in zip(curves[k], rs)] for k, rs in by_setup.items()}
    settings = {
        **eval_settings(runs), "cap": max(s["steps"] for _, s in runs), "classes": in_memory_classes(summary["data"]),
    }  # fmt: skip
    summary["converged"] = converged_figure(curves, rows, settings)
    summary["parameters"] = {s[RUN_KEY]: s["parameters"] for _, s in runs}
    _write_table(out, converged_table(summary))


def converged_figure(
    curves: dict[str, list[list[tuple[int, float]]]], rows: dict[str, list[dict]], settings: dict
) -> dict:
    """``summary["converged"]`` from every setup's seeds' test-subset curves and their
    :func:`seed_row`, in seed order; ``settings``: ``test_subset``, ``eval_every``, ``cap`` and
    ``classes`` (None: unknown). Where Inception's maximum is within chance's reach
    (:func:`~scripts.analysis.steps_to_target.chance_ceiling`), there is no target (None) and no
    run has steps to it."""
    target, target_rule = inception_max(curves[BASELINE]), f"{rule()}, on the test subset"
    if settings["classes"] is not None:
        ceiling = chance_ceiling(settings["classes"], settings["test_subset"])
        if target <= ceiling:
            target_rule = (
                f"Inception's maximum ({target_rule}), {target:.2%}, is within chance's "
                f"reach, {ceiling:.2%} ({1 / settings['classes']:.2%} and {CHANCE_SE} standard errors)"
            )
            target = None
    seeds = {
        k: [
            {
                "seed": r["seed"],
                "steps_to_target": None if target is None else steps_to(c, target),
                **_without(r, "seed"),
            }
            for c, r in zip(curves[k], rs)
        ]
        for k, rs in rows.items()
    }
    base = [r["steps_to_target"] for r in seeds[BASELINE]]
    return {
        "target": target,
        "target_rule": target_rule,
        "stop_target": stop_level(curves[BASELINE]),
        **settings,
        "setups": {k: converged_entry(v, base) for k, v in seeds.items()},
    }


def _without(row: dict, *keys: str) -> dict:
    return {k: v for k, v in row.items() if k not in keys}


def eval_settings(runs: list[tuple[Path, dict]]) -> dict:
    """``test_subset`` and ``eval_every`` from a run's summary, or from the config Hydra saved
    beside it (runs made before the summary recorded them)."""
    for _, s in runs:
        if "test_subset" in s:
            return {"test_subset": s["test_subset"], "eval_every": s["eval_every"]}
    saved = yaml.safe_load((runs[0][0] / ".hydra" / "config.yaml").read_text())["eval"]
    return {"test_subset": saved["test_subset"], "eval_every": saved["every"]}


def _endings(c: dict) -> set[str]:
    """How the runs of ``summary["converged"]`` ended (:func:`seed_row`'s ``ended_by``)."""
    return {r["ended_by"] for e in c["setups"].values() for r in e["seeds"]}


def protocol_name(c: dict) -> str:
    """The protocol of ``summary["converged"]``: a fixed budget where every run ended at the cap
    (or diverged), the paper's where some variant stopped at Inception's maximum, else every arm
    to its own plateau (Figure 3's confirmatory protocol)."""
    endings = _endings(c)
    if not endings & {"plateau", "target"}:  # every run to the cap, or diverged before it
        return f"every arm {c['cap']:,} steps" + (
            "" if c["target"] is None else ", Inception's maximum the target"
        )
    if "target" in endings:
        return "converged protocol (Inception to a plateau, the others to its maximum)"
    return PLATEAUS


PLATEAUS = "every arm to its own plateau or the cap"


def converged_table(summary: dict) -> str:
    """The converged protocol's Figure 3 as markdown, the paper's numbers beside ours."""
    c = summary["converged"]
    target = "none" if c["target"] is None else f"{c['target']:.2%}"
    stopped = (
        f' A run ended by "target" reached train.stop.target, {c["stop_target"]:.2%}: the lowest of the '
        "Inception seeds' single best evaluations, never below the target."
        if "target" in _endings(c)
        else ""
    )
    if protocol_name(c) == PLATEAUS:
        stopped += (
            " No run stopped at the target: it is derived from these runs, so this table is the "
            "protocol's record and no claim reads it (CLAIMS.md reads the steps to fixed accuracies)."
        )
    lines = [
        f"BN paper Figure 3, {protocol_name(c)} at CPU scale: {summary['data']}, width "
        f"{summary['width']}, {parameter_range(summary)} parameters, batch {summary['global_batch']}, "
        f"cap {c['cap']} steps; curves on {c['test_subset']} fixed test images every "
        f"{c['eval_every']} steps. Target: {target} ({c['target_rule']}).{stopped}",
        "",
        f"| variant | ours: steps to {'the target' if c['target'] is None else target} (per seed) | ours: speed-up (range over seed pairs) "
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
        ) + f" ({per_seed})"
        if c["target"] is None:
            steps = "–"
        speed = (
            ""
            if e["speedup"] is None or v == BASELINE
            else f"{e['speedup']}× [{e['speedup_range'][0]}, {e['speedup_range'][1]}]"
        )
        p_steps, p_acc = _paper_cells(v, "×")
        ended = ", ".join(f"{r['ended_by']} at {r['steps_done']}" for r in e["seeds"])
        lines.append(
            f"| {v} | {steps} | {speed} | {e['max_acc_subset']['mean']:.2%} "
            f"| {_mean(e['test_acc_end'])} | {ended} | {p_steps} | {p_acc} |"
        )
    return "\n".join(lines) + "\n"


def _stats(values: list[float]) -> dict | None:
    return seed_stats(values) if values else None


def _mean(stat: dict | None) -> str:
    return "-" if stat is None else f"{stat['mean']:.2%}"


def stop_target(run_dir: Path) -> float:
    """The converged protocol's stopping level (:func:`stop_level`) of the ``inception`` runs
    under ``run_dir`` (their test-subset curves)."""
    curves = [
        read_curve(run / "metrics.csv", SUBSET)
        for run, s in find_runs(run_dir)
        if s[RUN_KEY] == BASELINE
    ]
    if not curves or not all(curves):
        raise CollectError(f"no {BASELINE} run with a {SUBSET} curve under {run_dir}")
    return stop_level(curves)


def stop_at_target(run_dir: Path) -> list[str]:
    """The variants' overrides: stop at :func:`stop_target` (``scripts.reproduce`` calls this
    between the protocol's two stages)."""
    return [f"train.stop.target={stop_target(run_dir)!r}"]


def refresh(folder: Path) -> None:
    """Figure 3 again from a collection of this study (``folder``: its ``summary.json`` and
    ``runs.csv``) without its run folders: its columns in ``summary.json`` and ``fig3_table.md``,
    rewritten. What Figure 3 reads of each run beyond its curve is in the collection's summary
    (the converged protocol's per-seed rows, the initial learning rates, the parameter counts)."""
    summary = json.loads((folder / "summary.json").read_text())
    setups = summary["setups"]
    if "converged" in summary:
        c = summary["converged"]
        curves = _seed_curves(folder / "runs.csv", SUBSET, setups)
        rows = {
            k: [_without(r, "steps_to_target") for r in e["seeds"]] for k, e in c["setups"].items()
        }
        settings = {
            **{k: c[k] for k in ("test_subset", "eval_every", "cap")}, "classes": in_memory_classes(summary["data"]),
        }  # fmt: skip
        summary["converged"] = converged_figure(curves, rows, settings)
        _write_table(folder, converged_table(summary))
    else:
        curves = _seed_curves(folder / "runs.csv", "test/acc", setups)
        lrs = _seed_curves(folder / "runs.csv", "lr", setups)
        fixed_budget(summary, curves, {k: lr[0][0][1] for k, lr in lrs.items()}, folder)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def _seed_curves(
    runs_csv: Path, metric: str, setups: dict
) -> dict[str, list[list[tuple[int, float]]]]:
    """Every setup's seeds' ``(step, value)`` of ``metric`` in a ``runs.csv``, in the order of
    its seeds in ``setups`` (a collection's summary), as :func:`read_curve` reads a run's."""
    found: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
    with runs_csv.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] == metric:
                found[r[RUN_KEY], int(r["seed"])].append((int(r["step"]), float(r["value"])))
    return {k: [found[k, seed] for seed in e["seeds"]] for k, e in setups.items()}


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(
        description="The converged protocol's stopping level, or Figure 3 again from a collection."
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("target", help="the converged protocol's stopping level").add_argument(
        "run_dir", type=Path, help="a folder holding the inception runs"
    )
    sub.add_parser(
        "refresh", help="rewrite a collection's Figure 3 from its runs.csv"
    ).add_argument("folder", type=Path, help="a collection of this study (summary.json, runs.csv)")
    args = p.parse_args(argv)
    try:
        if args.command == "refresh":
            refresh(args.folder)
        else:
            print(repr(stop_target(args.run_dir)))
    except OneLineError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
