"""The results pipeline of every study: a sweep's run directories into ``results/<study>/``.

A study's registry record (:class:`experiments.studies.Study`) says how its runs become results
(its setups' order, which summary keys to keep and to average over seeds, the paper's numbers, and
an optional hook for a study's own table); :func:`collect` writes the long-format ``runs.csv`` (``setup,seed,step,metric,value``)
and ``summary.json``. ``python -m scripts.collect <study> SWEEP_DIR --out DIR`` runs it.

A collection is written as one: every file of it into a new folder beside ``--out``, which then
takes ``--out``'s place in one rename, so a kill, a full disk or any other error leaves the
earlier results whole or the new ones whole, never a ``runs.csv`` of one beside the
``summary.json`` of the other. One collection at a time writes an ``--out``: a second one
started meanwhile is refused in one line (:func:`experiments.kit.files.written_alone`), not
left to replace the first's results unseen.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.kit.errors import Busy, CollectError
from experiments.kit.files import ends_whole, folder_as_one, writable, write_whole, written_alone
from experiments.kit.identity import comparable_config, stop_defaults
from experiments.kit.launch import config_with_stop_rule
from experiments.studies import Study

RUN_KEY = "setup"  # the run-key column of every runs.csv


def find_runs(sweep_dir: Path) -> list[tuple[Path, dict]]:
    """Every run under ``sweep_dir`` (a folder with a ``summary.json``) and its summary; hidden
    folders (``.replaced/``: runs that ``overwrite=true`` replaced) are not searched. A run
    folder without a summary (a run that did not finish) is refused, not skipped."""

    def visible(p: Path) -> bool:
        return not any(part.startswith(".") for part in p.relative_to(sweep_dir).parts)

    found = sorted(p.parent for p in sweep_dir.rglob("summary.json") if visible(p))
    unfinished = sorted(
        p.parent
        for p in sweep_dir.rglob("metrics.csv")
        if visible(p) and not (p.parent / "summary.json").exists()
    )
    if unfinished:
        raise CollectError(
            f"{unfinished[0]} holds a run that did not finish (metrics.csv, no "
            f"summary.json){f' and {len(unfinished) - 1} more' if len(unfinished) > 1 else ''}: "
            "finish it with resume=true or move it out of the sweep folder"
        )
    if not found:
        raise CollectError(f"no run with a summary.json under {sweep_dir}")
    return [(run, read_summary(run / "summary.json")) for run in found]


def recorded_study(summary: dict) -> str | None:
    """The study whose entry point made a run, as its summary records it: the module of its
    ``command`` (``python -m experiments.<study> ...``, :func:`experiments.kit.jobs.job_command`);
    None where it records none (a summary written by hand)."""
    words = str(summary.get("command", "")).split(maxsplit=3)
    if len(words) > 2 and words[:2] == ["python", "-m"] and words[2].startswith("experiments."):
        return words[2].removeprefix("experiments.")
    return None


def refuse_other_studies(study: str, runs: list[tuple[Path, dict]]) -> None:
    """One line for a run that another study made (a renorm run in a sweep folder of mnist's):
    collected, it would pass for a setup of ``study``. A run that records no study is taken."""
    for run, s in runs:
        if (other := recorded_study(s)) not in (None, study):
            raise CollectError(
                f"{run} holds a run of study {other} (experiments.{other}), not of "
                f"{study}: collect it with its own study, or move it out of the sweep folder"
            )


def read_summary(path: Path) -> dict:
    """A run's ``summary.json``; one that is not a JSON object (cut short, edited) is one line."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CollectError(f"{path} cannot be read ({e}): rerun that run or move it away") from None
    if not isinstance(summary, dict) or RUN_KEY not in summary or "seed" not in summary:
        raise CollectError(f"{path} is not a run's summary (no {RUN_KEY} and seed)")
    return summary


def check_poolable(runs: list[tuple[Path, dict]]) -> None:
    """Refuse to average runs over seeds unless they are the same setting: per setup, every
    run's resolved config (``summary["config"]``; a stopping rule it leaves out, read from the
    run's overrides: :func:`~experiments.kit.launch.config_with_stop_rule`) equal but for the
    seed and the keys that do not change a run's trajectory, and no seed twice. Names the first
    key that differs."""
    by_setup: dict[str, list[tuple[Path, dict]]] = {}
    for run, s in runs:
        by_setup.setdefault(s[RUN_KEY], []).append((run, s))
    for setup, rs in by_setup.items():
        seeds: dict[Any, Path] = {}
        for run, s in rs:
            if s["seed"] in seeds:
                raise CollectError(
                    f"{setup} has seed {s['seed']} twice ({seeds[s['seed']]} and {run}): "
                    "collect the two sweeps separately, or use --sweep for one row per run"
                )
            seeds[s["seed"]] = run
        known = [
            (run, planned(comparable_config(config_with_stop_rule(run, s))))
            for run, s in rs
            if "config" in s
        ]
        for run, config in known[1:]:
            first_run, first = known[0]
            if diff := sorted(
                k for k in first.keys() | config.keys() if first.get(k) != config.get(k)
            ):
                key = diff[0]
                raise CollectError(
                    f"the runs of {setup} differ in {key} ({first.get(key)!r} in {first_run}, "
                    f"{config.get(key)!r} in {run}{f'; {len(diff) - 1} more keys' if len(diff) > 1 else ''}): "
                    "they are not seeds of one setting; collect them separately, or use --sweep"
                )


def planned(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the stopping settings (``train.stop.*``) it leaves out read as their
    defaults (no rule): a record leaves out those at their default, and runs recorded before
    stopping rules were recorded leave out all, so by its record alone an old run that had a
    rule cannot be told apart from one without (:func:`check_poolable` reads the rule from the
    run's overrides first; an earlier collection's summary keeps no overrides)."""
    return {**stop_defaults(), **config}


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


def write_runs_csv(
    path: Path,
    runs: list[tuple[Path, dict]],
    reused: dict[tuple[str, int], list[list[str]]] | None = None,
    rank: Callable[[str], Any] = str,
    metrics: tuple[str, ...] = (),
) -> None:
    """Every run's ``metrics.csv`` in one long CSV, keyed by setup and seed, with the ``reused``
    runs' rows (``{(setup, seed): rows}``, from :meth:`Reuse.load`) in their places; with
    ``metrics``, only the metrics whose names start with one of them."""
    blocks = [((s[RUN_KEY], s["seed"]), run) for run, s in runs] + list((reused or {}).items())
    blocks.sort(key=lambda b: (rank(b[0][0]), b[0][1]))
    kept = (lambda m: m.startswith(metrics)) if metrics else (lambda m: True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([RUN_KEY, "seed", "step", "metric", "value"])
        for (setup, seed), source in blocks:
            if isinstance(source, list):
                w.writerows(row for row in source if kept(row[3]))
                continue
            with (source / "metrics.csv").open() as m:
                w.writerows(
                    [setup, seed, r["step"], r["metric"], r["value"]]
                    for r in csv.DictReader(m)
                    if kept(r["metric"])
                )


@dataclass(frozen=True)
class Reuse:
    """Setups taken from an earlier collection of the same study instead of being run again
    (e.g. a question's reference arms, already in ``results/renorm``).

    Args:
        folder: the collected folder (``runs.csv``, ``summary.json``); split like the output
            (``folder/<split_by value>``) when the study splits.
        setups: the setups to take; the sweep must not have run them.

    It checks what the summaries record: the study's ``summary_keys`` but the commit, the setups,
    their seeds and their rows, and every setting the setups of each collection share (lr,
    momentum, steps, the stopping rule, data, ...: from the runs' recorded configs). It cannot
    see a change of code since the earlier runs: rerun them after one.
    """

    folder: Path
    setups: tuple[str, ...]

    def load(self, study: Study, group: Any, summary: dict, ran: dict) -> tuple[dict, dict]:
        """``(summary entries by setup, runs.csv rows by (setup, seed))``, after checking that
        the earlier collection was made with the same ``study.summary_keys`` and seeds as the
        sweep's setups ``ran`` (:func:`per_setup`)."""
        folder = self.folder if group is None else self.folder / str(group)
        if not (folder / "summary.json").exists() or not (folder / "runs.csv").exists():
            raise CollectError(f"{folder} has no summary.json and runs.csv to reuse")
        try:
            earlier = json.loads((folder / "summary.json").read_text())
        except ValueError as e:
            raise CollectError(f"{folder / 'summary.json'} is not valid JSON ({e})") from None
        for key in study.summary_keys:
            if key != "git_commit" and earlier.get(key) != summary.get(key):
                raise CollectError(
                    f"{folder} was made with {key}={earlier.get(key)!r}, this sweep with "
                    f"{summary.get(key)!r}: run its setups here instead of reusing them"
                )
        if both := sorted(set(ran) & set(self.setups)):
            raise CollectError(f"the sweep ran {both}; reuse only setups it did not run")
        if missing := sorted(set(self.setups) - set(earlier["setups"])):
            raise CollectError(f"{folder} has no runs of {missing}")
        seeds = sorted({seed for e in ran.values() for seed in e["seeds"]})
        for k in self.setups:
            if earlier["setups"][k]["seeds"] != seeds:
                raise CollectError(
                    f"{folder} has {k} with seeds {earlier['setups'][k]['seeds']}, the "
                    f"sweep ran seeds {seeds}: run {k} here instead of reusing it"
                )
        _check_shared_settings(study.name, folder, earlier["setups"], ran, self.setups)
        rows = _reused_rows(folder / "runs.csv", self.setups)
        if lacking := sorted({(k, seed) for k in self.setups for seed in seeds} - set(rows)):
            raise CollectError(f"{folder / 'runs.csv'} has no rows of (setup, seed) {lacking}")
        entries = {k: earlier["setups"][k] for k in self.setups}
        info = {"folder": str(folder), "setups": list(self.setups)}
        info.update({k: earlier.get(k) for k in ("git_commit", "command")})
        summary["reused"] = info
        return entries, rows


def _reused_rows(path: Path, setups: tuple[str, ...]) -> dict[tuple[str, int], list[list[str]]]:
    """The rows of ``setups`` in an earlier ``runs.csv``, by (setup, seed); one cut short or
    not whole (a row with another number of fields) is refused, not copied into a new one."""
    torn = CollectError(f"{path} is not whole (cut short?): collect it again first")
    if not ends_whole(path):
        raise torn
    rows: dict[tuple[str, int], list[list[str]]] = {}
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if None in r or None in r.values():  # more fields than the header, or fewer
                raise torn
            if r[RUN_KEY] in setups:
                rows.setdefault((r[RUN_KEY], int(r["seed"])), []).append(list(r.values()))
    return rows


def _check_shared_settings(
    study: str, folder: Path, earlier: dict, ran: dict, reused: tuple
) -> None:
    """Refuse to reuse setups run with other settings than this sweep's: every recorded setting
    of a reused setup and of a setup run now must agree, its planned length too (``train.steps``,
    ``train.stop.*``: :func:`planned`), but for those either setup's own file sets (its norm, its
    options: :func:`experiments.kit.config.setup_settings`). How a run ended is not compared: one
    that stopped on a rule both share, or diverged, is an outcome, not another setting."""
    from experiments.kit.config import setup_settings

    def own(key: str, setups: tuple[str, ...]) -> bool:
        return any(key in s or any(key.startswith(g) for g in s if g.endswith(".")) for s in setups)

    for old_name in reused:
        recorded = earlier[old_name].get("config")
        for new_name, entry in ran.items():
            if not recorded or not entry.get("config"):
                continue
            before, now = planned(recorded), planned(entry["config"])
            settings = (setup_settings(study, old_name), setup_settings(study, new_name))
            for key in sorted(before.keys() & now.keys()):
                if before[key] != now[key] and not own(key, settings):
                    raise CollectError(
                        f"{folder} ran {old_name} with {key}={_shown(recorded, key)}, this "
                        f"sweep ran {new_name} with {_shown(entry['config'], key)}: run {old_name} "
                        "here instead of reusing it"
                    )


def _shown(recorded: dict, key: str) -> str:
    """A setting's value in an error; the stopping settings a record leaves out are their
    defaults (:func:`planned`), shown plainly."""
    return repr(planned(recorded)[key])


def per_setup(study: Study, runs: list[tuple[Path, dict]]) -> dict[str, dict]:
    """One entry per setup: its description, seeds, divergence and seed statistics."""
    setups: dict[str, dict] = {}
    for setup in sorted({s[RUN_KEY] for _, s in runs}, key=study.rank):
        ss = [s for _, s in runs if s[RUN_KEY] == setup]
        entry = {key: ss[0].get(key) for key in study.setup_keys}
        entry.update(seeds=[s["seed"] for s in ss], diverged=[s["diverged"] for s in ss])
        if configs := [s["config"] for s in ss if "config" in s]:  # one setting (check_poolable)
            entry["config"] = comparable_config(configs[0])
        for key in study.stat_keys:
            values = [s[key] for s in ss if s.get(key) is not None]
            if values:
                entry[key] = seed_stats(values)
        setups[setup] = entry
    return setups


def collect(
    study: Study,
    sweep_dir: Path,
    out: Path,
    command: str = "",
    wall_time: float | None = None,
    reuse: Reuse | None = None,
    metrics: tuple[str, ...] = (),
) -> list[dict]:
    """``runs.csv`` and ``summary.json`` of a sweep, in ``out`` (or ``out/<split_by value>``),
    with ``reuse``'s setups taken from an earlier collection; with ``metrics``, runs.csv holds
    only the metrics that start with one of them (recorded in the summary as ``metrics_kept``)."""
    if reuse is not None and study.extend is not None:
        raise CollectError(f"{study.name}'s results need every run (its extend hook): no reuse")
    found = sorted(find_runs(sweep_dir), key=lambda rs: (study.rank(rs[1][RUN_KEY]), rs[1]["seed"]))
    refuse_other_studies(study.name, found)
    groups = sorted({s.get(study.split_by) for _, s in found}) if study.split_by else [None]
    if study.split_by:  # each value names a folder: none may lead outside --out
        for group in groups:
            plain_name(group, study.split_by)
    parts = []  # every group checked (reuse.load) before any is written
    for group in groups:
        runs = [(r, s) for r, s in found if group is None or s.get(study.split_by) == group]
        check_poolable(runs)
        summary = {key: runs[0][1].get(key) for key in study.summary_keys}
        summary["git_dirty"] = any(s.get("git_dirty") for _, s in runs)
        if capabilities := sorted({s["cpu_capability"] for _, s in runs if "cpu_capability" in s}):
            summary["cpu_capability"] = "; ".join(capabilities)
        if kernels := sorted({s["compiled_kernels"] for _, s in runs if "compiled_kernels" in s}):
            summary["compiled_kernels"] = " | ".join(kernels)
        if resumed := sorted(
            {s["resumed_at_commit"] for _, s in runs if s.get("resumed_at_commit")}
        ):
            summary["resumed_at_commit"] = resumed
        setups = per_setup(study, runs)
        entries, rows = reuse.load(study, group, summary, setups) if reuse is not None else ({}, {})
        parts.append((group, runs, summary, {**setups, **entries}, rows))
    if out.exists() and not out.is_dir():
        raise CollectError(f"--out {out} is a file; give a folder for the collection")
    refuse_unwritable(out)
    written = []
    try:
        with written_alone(out), folder_as_one(out) as staged:  # every group's files, or none
            for group, runs, summary, merged, rows in parts:
                folder = staged if group is None else staged / str(group)
                folder.mkdir(exist_ok=True)
                write_collection(
                    study, folder, runs, summary, merged, rows, metrics, command, wall_time
                )
                written.append((out if group is None else out / str(group), summary))
    except Busy as e:
        raise CollectError(_busy(e)) from None
    except OSError as e:
        raise CollectError(
            f"{out} could not be written ({_why(e)}): it holds its earlier results, unchanged"
        ) from None
    for folder, summary in written:
        print_table(study, summary, folder)
    return [summary for _, summary in written]


def write_collection(
    study: Study,
    folder: Path,
    runs: list[tuple[Path, dict]],
    summary: dict,
    merged: dict[str, dict],
    rows: dict[tuple[str, int], list[list[str]]],
    metrics: tuple[str, ...],
    command: str,
    wall_time: float | None,
) -> None:
    """One group's ``runs.csv``, ``summary.json`` and the study's own files (its extend hook) in
    ``folder`` (a new one, put in place by :func:`collect` once every group is written)."""
    write_runs_csv(folder / "runs.csv", runs, rows, study.rank, metrics)
    setups = {k: merged[k] for k in sorted(merged, key=study.rank)}
    summary.update(command=command, wall_time_s=wall_time, setups=setups)
    if metrics:
        summary["metrics_kept"] = list(metrics)
    if (extend := study.extend_hook()) is not None:
        extend(summary, runs, folder)
    summary["paper"] = study.paper
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def plain_name(value: Any, key: str | None) -> str:
    """``str(value)`` if it names a folder inside the output (one plain path component), else a
    one-line error: a run's ``key`` (``data``), read from its summary, must not lead a write out
    of ``--out`` (``"../../x"``) or onto ``--out`` itself (``"."``)."""
    name = str(value)
    separators = {"/", "\\", "\0", os.sep, os.altsep} - {None}
    if name in ("", ".", "..") or any(c in name for c in separators):
        raise CollectError(
            f"a run's {key} is {value!r}, not a plain folder name: the collection writes "
            f"one folder per {key} inside --out; fix that run's summary.json"
        )
    return name


def refuse_unwritable(out: Path) -> None:
    """A one-line error, before anything is written, if ``out``'s folder cannot be written (a
    read-only ``results/``)."""
    if (blocked := writable(out.parent)) is not None:
        raise CollectError(f"{blocked} cannot be written (read-only?): {out} not written")


def _why(e: OSError) -> str:
    return f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}"


def _busy(e: Busy) -> str:
    """Two collections into one ``--out``: the second is refused, rather than replace the
    first's results unseen once both are done."""
    return f"{e}: another collection into it is under way; wait for it to end, or give another --out; nothing written"


def sweep_keys(study: Study, runs: list[tuple[Path, dict]]) -> list[str]:
    """A sweep table's columns for any study: setup and seed, every setting that differs between
    the runs (from each run's recorded config), then how each run ended and the study's numbers."""
    configs = [comparable_config(s.get("config", {})) for _, s in runs]
    varying = sorted(
        {k for c in configs for k in c if any(c.get(k) != other.get(k) for other in configs)}
    )
    return [RUN_KEY, "seed", *varying, "steps_done", "diverged", *study.stat_keys]


def collect_sweep(
    study: Study,
    sweep_dir: Path,
    out: Path,
    keys: list[str] | None = None,
    curves: Path | None = None,
    curve_metrics: list[str] | None = None,
) -> None:
    """One CSV row per run of a hyperparameter sweep: ``keys`` of its summary or of its recorded
    config (default: :func:`sweep_keys`, the settings that differ); with ``curves``, also every
    run's ``curve_metrics`` (all when None) over training in long format, keyed by ``keys``
    (``keys…,step,metric,value``): a sweep's runs share a setup name, so a ``runs.csv`` keyed by
    setup and seed could not tell them apart. Each file is written beside its name and renamed
    over it: a kill or a full disk leaves it as it was, or whole."""
    if out.is_dir():
        raise CollectError(f"--out {out} is a folder; give the CSV file to write")
    runs = find_runs(sweep_dir)
    refuse_other_studies(study.name, runs)
    found = [(run, {**s.get("config", {}), **s}) for run, s in runs]
    keys = keys or sweep_keys(study, found)

    def order(value: Any) -> tuple:  # numbers by value, anything else (None, lists) after, as text
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return (0, value, "") if number else (1, 0, str(value))

    found.sort(
        key=lambda rs: tuple(
            (study.rank(rs[1][k]) if k == RUN_KEY else order(rs[1].get(k))) for k in keys
        )
    )
    wanted = None if curve_metrics is None else set(curve_metrics)

    def table(f) -> None:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(s for _, s in found)

    def curve_rows(f) -> None:
        w = csv.writer(f)
        w.writerow([*keys, "step", "metric", "value"])
        for run, s in found:
            head = [s.get(k) for k in keys]
            with (run / "metrics.csv").open() as m:
                w.writerows(
                    [*head, r["step"], r["metric"], r["value"]]
                    for r in csv.DictReader(m)
                    if wanted is None or r["metric"] in wanted
                )

    files = [(out, table), *([(curves, curve_rows)] if curves is not None else [])]
    for path, _ in files:
        refuse_unwritable(path)
    with contextlib.ExitStack() as held:  # each file written by this collection alone
        for path, _ in files:
            try:
                held.enter_context(written_alone(path))
            except Busy as e:
                raise CollectError(_busy(e)) from None
            except OSError as e:
                raise CollectError(
                    f"{path} could not be written ({_why(e)}): nothing written"
                ) from None
        for path, write in files:
            try:
                tmp = path.with_name(f".{path.name}.tmp")
                write_whole(path, write, tmp=tmp, sync=True, newline="")
            except OSError as e:
                raise CollectError(
                    f"{path} could not be written ({_why(e)}): it is as it was"
                ) from None
            print(f"wrote {path}" + (f" ({len(found)} runs)" if path == out else ""))


def print_table(study: Study, summary: dict, folder: Path) -> None:
    keys = [k for k in study.stat_keys if any(k in e for e in summary["setups"].values())]
    print(f"\n{folder}: mean ± spread over seeds")
    print(f"{RUN_KEY:18} " + " ".join(f"{k:>22}" for k in keys))
    for setup, e in summary["setups"].items():
        print(f"{setup:18} " + " ".join(f"{format_stat(e, k):>22}" for k in keys))
    print(f"wrote {folder / 'runs.csv'} and {folder / 'summary.json'}")
