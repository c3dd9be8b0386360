"""One reader of the committed results (``results/<study>/.../summary.json`` and ``runs.csv``)."""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

from scripts.analysis.stats import AnalysisError, SeedMismatch

RESULTS = Path("results")

Curves = dict[tuple[str, str], dict[int, dict[int, float]]]


class BadResults(ValueError):
    """A results file that is there but not whole (a row cut short, a value that is no number)."""


class MissingResult(FileNotFoundError):
    """A study's results are not committed (its folder or file is absent): the claim has no
    result yet. Any other error is a bug and fails the claims table."""


def _file(path: str, name: str, root: Path) -> Path:
    file = root / path / name
    if not file.exists():
        raise MissingResult(f"{file} is not there (run the study that writes it)")
    return file


def summary(path: str, root: Path = RESULTS) -> dict:
    """``results/<path>/summary.json``."""
    return read_summary(root / path)


def read_summary(folder: Path) -> dict:
    """``folder/summary.json``; a MissingResult if it is not there, BadResults if it is not JSON."""
    file = _file(str(folder), "summary.json", Path())
    try:
        return json.loads(file.read_text())
    except ValueError as e:
        raise BadResults(f"{file} is not valid JSON ({e}): collect it again") from None


def curves(path: str, root: Path = RESULTS) -> Curves:
    """``{(setup, metric): {seed: {step: value}}}`` of ``results/<path>/runs.csv``."""
    return read_runs(root / path / "runs.csv")


def read_runs(file: Path) -> Curves:
    """``{(setup, metric): {seed: {step: value}}}`` of one ``runs.csv`` (steps in file order),
    read once per process; a MissingResult if it is not there, BadResults if it is not whole."""
    if not file.exists():
        raise MissingResult(f"{file} does not exist: run the study's make target first")
    return _read_runs(file.resolve())


@functools.cache
def _read_runs(file: Path) -> Curves:
    out: Curves = {}
    with file.open() as f:
        for line, r in enumerate(csv.DictReader(f), start=2):
            try:
                key, seed = (r["setup"], r["metric"]), int(r["seed"])
                step, value = int(r["step"]), float(r["value"])
            except (KeyError, TypeError, ValueError):
                raise BadResults(f"{file}, line {line}: not a whole row of a runs.csv") from None
            out.setdefault(key, {}).setdefault(seed, {})[step] = value
    return out


class Diverged(AnalysisError):
    """A run the claim reads diverged: its curves stop at the divergence, so a measure over
    them is undefined (the claims table reads such a row as undecidable, naming the run)."""


def _setup(path: str, setup: str, root: Path) -> dict:
    setups = summary(path, root)["setups"]
    if setup not in setups:
        raise KeyError(f"{setup} is not a setup of {root / path / 'summary.json'}")
    return setups[setup]


def _diverged(path: str, setup: str, root: Path) -> list[int]:
    s = _setup(path, setup, root)
    return [seed for seed, d in zip(s["seeds"], s.get("diverged", [])) if d]


def series(path: str, setup: str, metric: str, root: Path = RESULTS) -> dict[int, dict[int, float]]:
    """``{seed: {step: value}}`` of one setup's metric, for exactly the seeds its summary lists:
    a KeyError (a bug, not a missing result) if the committed runs never logged it, a
    SeedMismatch if some of the summary's seeds did not (a runs.csv cut short), and Diverged if
    one of them diverged (its curve stops there)."""
    by_seed = curves(path, root).get((setup, metric))
    if not by_seed:
        raise KeyError(f"{setup} never logged {metric} in {root / path / 'runs.csv'}")
    listed = _setup(path, setup, root)["seeds"]
    if sorted(by_seed) != sorted(listed):
        raise SeedMismatch(
            f"{root / path}: {setup}'s {metric} holds seeds {sorted(by_seed)}, its summary.json "
            f"lists {sorted(listed)} (a runs.csv that does not match its summary)"
        )
    if bad := _diverged(path, setup, root):
        raise Diverged(f"{setup} seed(s) {bad} diverged in {root / path}: no curve measure")
    return by_seed


def per_seed(
    path: str, setup: str, key: str, root: Path = RESULTS, diverged_as: float | None = None
) -> dict[int, float]:
    """``{seed: value}`` of a per-seed summary entry (``summary.json``'s
    ``setups.<setup>.<key>``). A diverged seed takes ``diverged_as`` (chance, for an accuracy:
    a network whose weights are no longer finite predicts no better); without it, Diverged."""
    s = _setup(path, setup, root)
    values = dict(zip(s["seeds"], s[key]["per_seed"], strict=True))
    bad = _diverged(path, setup, root)
    if bad and diverged_as is None:
        raise Diverged(f"{setup} seed(s) {bad} diverged in {root / path}: no {key}")
    return {seed: diverged_as if seed in bad else v for seed, v in values.items()}


def rows(path: str, name: str, root: Path = RESULTS) -> list[dict[str, str]]:
    """The rows of ``results/<path>/<name>`` (a CSV other than runs.csv)."""
    with _file(path, name, root).open() as f:
        return list(csv.DictReader(f))
