"""One reader of the committed results (``results/<study>/.../summary.json`` and ``runs.csv``).

A folder's two files are read as one collection: a ``runs.csv`` that is not whole (cut short in
a row, a row of another length) or that does not hold exactly the setups and seeds its
``summary.json`` lists is :class:`BadResults`, never read as fewer seeds; an absent folder is a
:class:`MissingResult` (no result yet)."""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

from experiments.kit.errors import BadResults, MissingResult
from experiments.kit.files import ends_whole
from scripts.analysis.stats import AnalysisError, SeedMismatch

RESULTS = Path("results")
HEADER = ["setup", "seed", "step", "metric", "value"]  # every runs.csv's

Curves = dict[tuple[str, str], dict[int, dict[int, float]]]


def _file(path: str, name: str, root: Path) -> Path:
    file = root / path / name
    if not file.exists():
        raise MissingResult(f"{file} is not there (run the study that writes it)")
    return file


def summary(path: str, root: Path = RESULTS) -> dict:
    """``results/<path>/summary.json``, once its ``runs.csv`` (where there is one) is checked
    against it: a summary beside runs of another collection is not read either."""
    if (root / path / "runs.csv").exists():
        read_runs(root / path / "runs.csv")
    return read_summary(root / path)


def read_summary(folder: Path) -> dict:
    """``folder/summary.json``; a MissingResult if it is not there, BadResults if it is not JSON
    or not a collection's summary (a JSON object whose ``setups`` each list their ``seeds``)."""
    file = _file(str(folder), "summary.json", Path())
    try:
        data = json.loads(file.read_text())
    except ValueError as e:
        raise BadResults(f"{file} is not valid JSON ({e}): collect it again") from None
    setups = data.get("setups") if isinstance(data, dict) else None
    if not isinstance(setups, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("seeds"), list) for e in setups.values()
    ):
        raise BadResults(
            f"{file} is not a collection's summary.json (no setups, each with its seeds): "
            "collect it again"
        )
    return data


def curves(path: str, root: Path = RESULTS) -> Curves:
    """``{(setup, metric): {seed: {step: value}}}`` of ``results/<path>/runs.csv``, which must
    have its ``summary.json`` beside it."""
    folder = root / path
    if (folder / "runs.csv").exists() and not (folder / "summary.json").exists():
        raise BadResults(f"{folder} holds a runs.csv without its summary.json: collect it again")
    return read_runs(folder / "runs.csv")


def read_runs(file: Path) -> Curves:
    """``{(setup, metric): {seed: {step: value}}}`` of one ``runs.csv`` (steps in file order),
    read once per process; a MissingResult if it is not there, BadResults if it is not whole or,
    where a ``summary.json`` is beside it, does not hold exactly the setups and seeds it lists."""
    if not file.exists():
        raise MissingResult(f"{file} does not exist: run the study's make target first")
    return _read_runs(file.resolve())


@functools.cache
def _read_runs(file: Path) -> Curves:
    if not ends_whole(file):
        raise BadResults(f"{file} ends in the middle of a row (cut short?): collect it again")
    out: Curves = {}
    with file.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != HEADER:
            raise BadResults(f"{file} is not a runs.csv (its header is {reader.fieldnames})")
        for line, r in enumerate(reader, start=2):
            # the torn-row guard: a row with fewer fields holds None (a TypeError to convert),
            # one with more holds them under the key None
            try:
                if None in r:
                    raise ValueError
                key, seed = (r["setup"], r["metric"]), int(r["seed"])
                step, value = int(r["step"]), float(r["value"])
            except (KeyError, TypeError, ValueError):
                raise BadResults(f"{file}, line {line}: not a whole row of a runs.csv") from None
            out.setdefault(key, {}).setdefault(seed, {})[step] = value
    if file.with_name("summary.json").exists():
        _match(file, out, read_summary(file.parent)["setups"])
    return out


def _match(file: Path, runs: Curves, setups: dict) -> None:
    """BadResults unless ``runs`` holds rows of exactly the (setup, seed) pairs ``setups`` (its
    summary's) lists: a runs.csv cut short at a row's end, or one of another collection."""
    listed = {(setup, seed) for setup, e in setups.items() for seed in e["seeds"]}
    held = {(setup, seed) for (setup, _), by_seed in runs.items() for seed in by_seed}
    if listed == held:
        return
    lacking, extra = sorted(listed - held, key=str), sorted(held - listed, key=str)
    without = sorted({setup for setup, _ in lacking} - {setup for setup, _ in held}, key=str)
    what = (
        f"no rows of setup(s) {without}"
        if without
        else f"no rows of (setup, seed) {lacking[:4]}{' ...' if len(lacking) > 4 else ''}"
        if lacking
        else f"rows of (setup, seed) {extra[:4]} that it does not list"
    )
    raise BadResults(
        f"{file} does not match its summary.json: {what} (a collection cut short, or files of "
        "two collections): collect it again"
    )


def check_all(root: Path = RESULTS) -> None:
    """Every collection under ``root`` (each folder with a ``summary.json``, hidden ones aside)
    read and checked: BadResults at the first that is not whole or whose runs.csv does not
    match its summary, or that lacks its runs.csv."""
    for file in sorted(root.rglob("summary.json")):
        if any(part.startswith(".") for part in file.relative_to(root).parts):
            continue
        read_summary(file.parent)
        if not (file.parent / "runs.csv").exists():
            raise BadResults(f"{file.parent} holds a summary.json without its runs.csv")
        read_runs(file.parent / "runs.csv")


class Diverged(AnalysisError):
    """A run the claim reads diverged: its curves stop at the divergence, so a measure over
    them is undefined (the claims table reads such a row as undecidable, naming the run)."""


def _setup(path: str, setup: str, root: Path) -> dict:
    setups = summary(path, root)["setups"]
    if setup not in setups:
        raise BadResults(
            f"{root / path / 'summary.json'} has no setup {setup} (the summary of another "
            "study, or of a collection without it): collect it again"
        )
    return setups[setup]


def _diverged(path: str, setup: str, root: Path) -> list[int]:
    s = _setup(path, setup, root)
    return [seed for seed, d in zip(s["seeds"], s.get("diverged", [])) if d]


def diverged(path: str, setup: str, root: Path = RESULTS) -> dict[int, bool]:
    """``{seed: whether it diverged}`` for the seeds a setup's summary lists."""
    s = _setup(path, setup, root)
    bad = set(_diverged(path, setup, root))
    return {seed: seed in bad for seed in s["seeds"]}


def series(
    path: str, setup: str, metric: str, root: Path = RESULTS, keep_diverged: bool = False
) -> dict[int, dict[int, float]]:
    """``{seed: {step: value}}`` of one setup's metric, for exactly the seeds its summary lists:
    BadResults if the summary has no such setup (a summary of another study), a KeyError (a
    bug, not a missing result) if the committed runs never logged it, a SeedMismatch if some of
    the summary's seeds did not, and Diverged if one of them diverged (its curve stops there),
    unless ``keep_diverged``: then a diverged seed's curve is given as far as it goes, for a
    measure that says how such a run enters (:func:`diverged` names them)."""
    by_seed = curves(path, root).get((setup, metric))
    listed = _setup(path, setup, root)["seeds"]
    if not by_seed:
        raise KeyError(f"{setup} never logged {metric} in {root / path / 'runs.csv'}")
    if sorted(by_seed) != sorted(listed):
        raise SeedMismatch(
            f"{root / path}: {setup}'s {metric} holds seeds {sorted(by_seed)}, its summary.json "
            f"lists {sorted(listed)} (a runs.csv that does not match its summary)"
        )
    if (bad := _diverged(path, setup, root)) and not keep_diverged:
        raise Diverged(f"{setup} seed(s) {bad} diverged in {root / path}: no curve measure")
    return by_seed


def per_seed(
    path: str, setup: str, key: str, root: Path = RESULTS, diverged_as: float | None = None
) -> dict[int, float]:
    """``{seed: value}`` of a per-seed summary entry (``summary.json``'s
    ``setups.<setup>.<key>``). A diverged seed takes ``diverged_as`` (chance, for an accuracy:
    a network whose weights are no longer finite predicts no better); without it, Diverged.
    A diverged run records no end-of-run value, so the collection lists the others' alone: a
    list one value short per diverged seed holds the seeds that did not diverge, in order, and
    a setup whose every seed diverged has no entry at all."""
    s = _setup(path, setup, root)
    stat = s.get(key)
    per = stat.get("per_seed") if isinstance(stat, dict) else None
    bad = _diverged(path, setup, root)
    alive = [seed for seed in s["seeds"] if seed not in bad]
    if not alive and stat is None:
        values = {}
    elif isinstance(per, list) and bad and len(per) == len(alive) != len(s["seeds"]):
        values = dict(zip(alive, per)) | dict.fromkeys(bad)
    elif isinstance(per, list) and len(per) == len(s["seeds"]):
        values = dict(zip(s["seeds"], per))
    else:
        raise BadResults(
            f"{root / path / 'summary.json'}: {setup} has no {key} per seed for its seeds "
            f"{s['seeds']}: collect it again"
        )
    if bad and diverged_as is None:
        raise Diverged(f"{setup} seed(s) {bad} diverged in {root / path}: no {key}")
    return {seed: diverged_as if seed in bad else values[seed] for seed in s["seeds"]}


def rows(path: str, name: str, root: Path = RESULTS) -> list[dict[str, str]]:
    """The rows of ``results/<path>/<name>`` (a CSV other than runs.csv)."""
    with _file(path, name, root).open() as f:
        return list(csv.DictReader(f))
