"""One registered section of a study and its committed results, as the templates read them: a
collection's ``summary.json`` (checked as the claims table checks it) or a sweep's CSV."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.kit.errors import BadResults, OneLineError
from experiments.studies import CONFIRMATORY, STUDIES, Section, Study
from scripts.analysis import committed
from scripts.results_readme.text import num, seeds_text

# Every sweep's CSV (scripts.collect --sweep) holds these; its other columns are settings, or
# what a run measured (how it ended, and any study's seed statistics).
SWEEP_COLUMNS = ("setup", "seed", "diverged")  # and the study's accuracy column
OUTCOMES = frozenset(
    {
        *SWEEP_COLUMNS,
        "steps_done",
        "final_train_loss",
        *(k for s in STUDIES for k in (*s.stat_keys, s.sweep_accuracy)),
    }
)


class SectionError(OneLineError, ValueError):
    """Committed results that the document cannot describe as its prose reads them (a setting the
    prose names that the setups do not share or do not record, a sweep in which nothing varies)."""


@dataclass
class SectionView:
    """A registered section with its committed results (none where they are not committed), its
    tables, its prose and the claims that read it, filled in by the document."""

    section: Section
    study: Study
    root: Path  # results/
    summary: dict | None = None
    rows: list[dict] | None = None  # a sweep's CSV rows
    tables: list[Any] = field(default_factory=list)
    prose: str = ""
    claims: list[tuple[int, str]] = field(default_factory=list)  # (number in CLAIMS.md, claim)

    @property
    def anchor(self) -> str:
        return self.section.anchor

    @property
    def title(self) -> str:
        return self.section.title

    @property
    def path(self) -> str:
        return self.section.path

    @property
    def reproduction(self) -> str:
        return self.section.reproduction

    @property
    def folder(self) -> Path:
        return self.root / self.section.path

    @property
    def committed(self) -> bool:
        return self.summary is not None or self.rows is not None

    @property
    def confirmatory(self) -> bool:
        return self.section.path.split("/")[0] == CONFIRMATORY

    @property
    def commit(self) -> str:
        return str((self.summary or {}).get("git_commit") or "")[:7]

    @property
    def setups(self) -> dict[str, dict]:
        return self.summary["setups"] if self.summary else {}

    def label(self, setup: str) -> str:
        return self.study.labels.get(setup, setup)

    def values(self, key: str) -> dict[str, Any]:
        """``{setup: the value of key in its recorded config}``."""
        out = {}
        for name, e in self.setups.items():
            config = e.get("config", {})
            if key not in config:
                raise SectionError(
                    f"{self.folder / 'summary.json'}: setup {name} records no {key}, which the "
                    f"prose of section {self.anchor!r} reads"
                )
            out[name] = config[key]
        return out

    def shared(self, key: str) -> Any:
        """The value of a config key that every setup shares (a SectionError if they differ)."""
        found = self.values(key)
        if len({json.dumps(v) for v in found.values()}) != 1:
            raise SectionError(
                f"{self.folder / 'summary.json'}: the setups differ in {key} ({found}), which the "
                f"prose of section {self.anchor!r} names as one value"
            )
        return next(iter(found.values()))

    def distinct(self, key: str) -> list[float]:
        """A sweep's distinct values of a numeric column, in order."""
        return sorted({float(r[key]) for r in self.rows or []})

    def seeds(self) -> str:
        if self.rows is not None:
            return seeds_text({int(r["seed"]) for r in self.rows})
        lists = [e["seeds"] for e in self.setups.values()]
        text = seeds_text({seed for seeds in lists for seed in seeds})
        return text if all(x == lists[0] for x in lists) else f"{text}, fewer in some setups"

    def sweep_settings(self) -> str:
        return sweep_settings(self.rows or [])

    def files(self) -> list[str]:
        """The section's files, as paths under results/."""
        if self.rows is not None:
            return [self.section.path]
        return [
            f"{self.section.path}/{p.name}"
            for p in sorted(self.folder.iterdir())
            if p.is_file() and not p.name.startswith(".")
        ]

    def figures(self) -> list[dict]:
        out = []
        for f in self.section.figures:
            png = self.root / "figures" / f.file
            svg = png.with_suffix(".svg")
            out.append(
                {
                    "file": f.file,
                    "caption": f.caption,
                    "drawn": png.exists(),
                    "svg": svg.name if svg.exists() else None,
                }
            )
        return out

    def notes(self) -> list[str]:
        """What the summary records beside the setups' numbers, a sentence each: reused runs, the
        metrics runs.csv keeps, a note, parameter counts, the paper's numbers, diverged seeds."""
        summary = self.summary or {}
        out = []
        if reused := summary.get("reused"):
            names = ", ".join(self.label(x) for x in reused.get("setups", []))
            out.append(
                f"{names}: the runs of `{reused['folder']}` (`{reused.get('command', '?')}` at "
                f"`{str(reused.get('git_commit', ''))[:7]}`), taken rather than run again."
            )
        if kept := summary.get("metrics_kept"):
            listed = ", ".join(f"`{m}`" for m in kept)
            out.append(
                f"`runs.csv` keeps the metrics the claims read, those starting with {listed}."
            )
        if note := summary.get("note"):
            out.append(f"Note (`summary.json`): {note}.")
        if parameters := summary.get("parameters"):
            counts = "; ".join(f"{self.label(k)} {num(v)}" for k, v in parameters.items())
            out.append(f"Parameters: {counts}.")
        if paper := self.paper:
            out.append(self.paper_note(paper))
        for name, e in self.setups.items():
            if bad := [seed for seed, d in zip(e["seeds"], e.get("diverged", [])) if d]:
                out.append(
                    f"Diverged (a loss that became NaN or infinite): {self.label(name)}, "
                    f"seed{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}."
                )
        return [n for n in out if n]

    @property
    def paper(self) -> dict:
        """The numbers of the paper this section's study reproduces (its record's), not the
        summary's copy: that is the paper of the module that trained the runs, which a question
        asked of another study's network does not reproduce."""
        return self.study.paper if self.summary else {}

    @staticmethod
    def paper_note(paper: dict) -> str:
        """Where the table's column of the paper's numbers comes from. (A study whose paper
        numbers are not per setup names them in its prose, where it can say what they are.)"""
        source = paper.get("source", "")
        return f"The paper's column: {source}." if "setups" in paper and source else ""


def read(s: Section, study: Study, root: Path) -> SectionView:
    """The section with its committed results, if any: a folder's ``summary.json``, or a CSV."""
    view = SectionView(s, study, root)
    where = root / s.path
    if where.is_file():
        view.rows = read_sweep(where, study.sweep_accuracy)
    elif (where / "summary.json").exists():
        view.summary = committed.read_summary(where)
    return view


def read_sweep(file: Path, accuracy: str = "test_acc") -> list[dict]:
    """A sweep's CSV (``scripts.collect --sweep``): BadResults if it lacks a sweep's columns (the
    final test accuracy's is ``accuracy``), holds no run, or a row is not whole."""
    with file.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = (*SWEEP_COLUMNS, accuracy)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise BadResults(f"{file} is not a sweep's CSV (no {', '.join(missing)} column)")
        rows = list(reader)
    for line, r in enumerate(rows, start=2):
        if None in r or any(v is None for v in r.values()):
            raise BadResults(f"{file}, line {line}: not a whole row: collect it again")
    if not rows:
        raise BadResults(f"{file} holds no runs: collect it again")
    return rows


def swept(rows: list[dict]) -> list[str]:
    """The settings of a sweep that vary between the runs of a setup (a setting that only tells
    the setups apart, such as its norm, is the setup's)."""
    setups = {r["setup"] for r in rows}
    return [
        c
        for c in rows[0]
        if c not in OUTCOMES
        and any(len({r[c] for r in rows if r["setup"] == x}) > 1 for x in setups)
    ]


def sweep_settings(rows: list[dict]) -> str:
    """The settings every run of a sweep shares, as text."""
    keys = (
        [c for c in rows[0] if c not in OUTCOMES and len({r[c] for r in rows}) == 1] if rows else []
    )

    def shown(text: str) -> str:
        value = as_number(text)
        return text if isinstance(value, str) else num(value)

    return ", ".join(f"`{k}` = {shown(rows[0][k])}" for k in keys)


def as_number(text: str) -> Any:
    try:
        v = float(text)
    except ValueError:
        return text
    return int(v) if v.is_integer() else v
