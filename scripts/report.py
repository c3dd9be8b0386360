"""One self-contained page of every result: ``results/report.html``.

    python -m scripts.report          # (make report) offline, from the committed results

The page opens with the verdict counts and a table of contents; the claims table comes from the
claims themselves (``scripts.claims``), each claim linked to its study's section and figure;
then one section per study of the registry (``experiments.studies``): the command and commit
that produced it, each setup's numbers with their 95% t-interval over seeds (two seeds: both
values) beside the paper's, and its figures (PNG embedded as data; the vector files, SVG,
linked). It opens offline in any browser; links point only at files in ``results/``.
"""

from __future__ import annotations

import base64
import html
import math
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import jinja2

from experiments.kit.errors import BadResults, OneLineError
from experiments.studies import STUDIES, Section
from scripts.analysis import committed
from scripts.analysis.committed import RESULTS
from scripts.analysis.stats import Estimate
from scripts.claims.rules import MEANING, Verdict
from scripts.claims.table import (
    decide_all,
    design_text,
    family,
    headline,
    robustness,
    seeds_text,
    verdict_text,
)
from scripts.documents import write_document
from scripts.figure_sets import settle

OUT = RESULTS / "report.html"
FIGURES = RESULTS / "figures"
TEMPLATE = Path(__file__).with_name("report.html.j2")
STUDY_TABLES = ("fig3_table.md",)  # a study's own Markdown table, shown when its folder has one
BADGE = {
    Verdict.REPRODUCED: "ok",
    Verdict.PARTLY: "partly",
    Verdict.NOT_REPRODUCED: "no",
    Verdict.INCONCLUSIVE: "open",
    Verdict.NO_RESULT: "none",
}
# summary.json keys as the tables name them
COLUMNS = {
    "test_acc": "test accuracy",
    "max_test_acc": "best test accuracy",
    "train_acc": "training accuracy",
    "test_acc_population": "test accuracy, population statistics",
    "test_acc_population_no_bessel": "test accuracy, population statistics without Bessel's correction",
    "test_acc_train_mode": "test accuracy in training mode",
    "final_train_loss": "final training loss",
    "steps_per_s": "steps / s",
    "examples_per_s": "examples / s",
    "grad_ratio_init": "gradient ratio at initialization",
    "grad_ratio": "gradient ratio at the end",
    "fixed_batch_loss": "loss on a fixed batch",
}
PAPER_KEYS = {
    "test_acc": "test accuracy",
    "train_acc": "training accuracy",
    "test_acc_train_mode": "in training mode",
    "max_acc": "best accuracy",
    "at_step": "at step",
    "steps_to_baseline_max": "steps to Inception's best",
}


def markdown_table(text: str, source: str) -> str:
    """The first Markdown table in ``text`` (a study's own table, read from ``source``) as HTML."""
    rows = [
        line.strip().strip("|").split(" | ") for line in text.splitlines() if line.startswith("|")
    ]
    if not rows:
        raise BadResults(f"{source} holds no table to show (collect the study again)")
    head, body = rows[0], rows[2:]
    cell = lambda c: html.escape(c.strip()).replace("**", "")  # noqa: E731
    out = ["<table><tr>" + "".join(f"<th>{cell(c)}</th>" for c in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in body]
    return "\n".join(out) + "</table>"


def _number(key: str, v: float) -> str:
    return f"{v:.2%}" if "acc" in key else f"{v:.4g}"


# Speeds are measurements of a process, not draws over seeds: seeds trained side by side share
# one, so they get their range (or their one value), never a t-interval.
THROUGHPUT = ("steps_per_s", "examples_per_s")


def spread(key: str, stat: dict) -> str:
    """A seed statistic as ``mean [95% t-interval]``, the one value of a single seed, or two
    seeds' mean and both values (a t-interval of one degree of freedom reaches far beyond what an
    accuracy can be); a speed (:data:`THROUGHPUT`) as its value, or ``mean (range low–high)``
    when runs differ."""
    values = [v for v in stat.get("per_seed", []) if v is not None and math.isfinite(v)]
    if key in THROUGHPUT and len(set(values)) > 1:
        low, high = min(values), max(values)
        return f"{_number(key, stat['mean'])} (range {_number(key, low)}–{_number(key, high)})"
    if len(values) < 2 or key in THROUGHPUT:
        return _number(key, stat["mean"]) if values else "–"
    if len(values) == 2:
        return f"{_number(key, stat['mean'])} ({', '.join(_number(key, v) for v in values)})"
    e = Estimate.of(values)
    low, high = e.interval()
    return f"{_number(key, e.mean)} [{_number(key, low)}, {_number(key, high)}]"


def paper_text(entry: dict) -> str:
    """The paper's numbers for one setup, as a reader would write them."""
    parts = []
    for k, v in entry.items():
        name = PAPER_KEYS.get(k, k.replace("_", " "))
        if v is None:
            parts.append(f"{name}: never" if k.startswith("steps") else f"{name}: –")
        elif "acc" in k:
            parts.append(f"{name} {v:.1%}")
        elif k.startswith("steps"):
            parts.append(f"{name} {v / 1e6:.1f}M")
        else:
            parts.append(f"{name} {v:,}")
    return "; ".join(parts)


def stat_columns(setups: dict[str, dict]) -> list[str]:
    """The seed statistics a summary's setups hold (their study's ``stat_keys``): those
    :data:`COLUMNS` names first, in its order, then any other (:func:`column_name`)."""
    held = dict.fromkeys(
        k for e in setups.values() for k, v in e.items() if isinstance(v, dict) and "mean" in v
    )
    return [k for k in COLUMNS if k in held] + [k for k in held if k not in COLUMNS]


def column_name(key: str) -> str:
    return COLUMNS.get(key, key.replace("_", " "))


def setups_table(summary: dict, labels: dict[str, str], paper: dict | None = None) -> dict:
    """A column per seed statistic the summary holds (:func:`stat_columns`), and one of
    ``paper``'s numbers per setup where it has them: the numbers of the paper the section's study
    reproduces (its record's ``paper``, :mod:`experiments.papers`), headed by where they come
    from. Not the summary's copy: that is the paper of the module that trained the runs, which a
    study asking its own questions (the open questions) shares without measuring what it
    measured."""
    setups = summary.get("setups", {})
    keys = stat_columns(setups)
    source = (paper or {}).get("source", "")
    paper = (paper or {}).get("setups", {})
    rows = [
        {
            "setup": labels.get(name, name),
            "key": name,
            "seeds": len(e.get("seeds", [])),
            "cells": [spread(k, e[k]) if isinstance(e.get(k), dict) else "–" for k in keys],
            "paper": paper_text(paper[name]) if name in paper else "–",
        }
        for name, e in setups.items()
    ]
    columns = [
        (
            column_name(k),
            "value or mean (range)" if k in THROUGHPUT else "mean [95% t-interval] or (two seeds)",
        )
        for k in keys
    ]
    return {"columns": columns, "rows": rows, "paper": bool(paper), "paper_source": source}


def wall_text(seconds: object, source: Path) -> str:
    """A collection's wall time as text (``–`` if it has none); anything but a finite number of
    seconds is BadResults naming ``source``."""
    if seconds is None:
        return "–"
    number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if not number or not math.isfinite(seconds) or seconds < 0:
        raise BadResults(
            f"{source}: wall_time_s is {seconds!r}, not a number of seconds: collect it again"
        )
    return f"{seconds:,.0f} s" if seconds else "–"


def figure(file: str, caption: str) -> dict:
    path = FIGURES / file
    svg = path.with_suffix(".svg")
    return {
        "anchor": "fig-" + path.stem.replace("_", "-"),
        "name": file,
        "caption": caption,
        "data": base64.b64encode(path.read_bytes()).decode() if path.exists() else None,
        "svg": f"figures/{quote(svg.name)}" if svg.exists() else None,
    }


def section(
    s: Section, labels: dict[str, str], claims: list[dict], paper: dict | None = None
) -> dict:
    """One section of the page; ``paper``: its study's (:func:`setups_table`)."""
    folder = RESULTS / s.path
    out: dict = {
        "anchor": s.anchor,
        "title": s.title,
        "reproduction": s.reproduction,
        "figures": [figure(f.file, f.caption) for f in s.figures],
        "claims": [c for c in claims if c["section"] == s.anchor],
        "files": [],
        "tables": [],
        "setups": None,
        "summary": None,
    }
    if folder.is_file():
        out["files"] = [(folder.name, quote(s.path))]
        return out
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        return out
    summary = committed.read_summary(folder)
    out["summary"] = {
        "command": summary.get("command") or "–",
        "commit": str(summary.get("git_commit") or "–")[:7],
        "wall": wall_text(summary.get("wall_time_s"), summary_path),
    }
    out["files"] = [
        (name, f"{quote(s.path)}/{name}")
        for name in ("runs.csv", "summary.json")
        if (folder / name).exists()
    ]
    for name in STUDY_TABLES:
        if (folder / name).exists():
            text = (folder / name).read_text()
            out["tables"].append((text.split("\n")[0], markdown_table(text, str(folder / name))))
    out["setups"] = setups_table(summary, labels, paper)
    return out


def claim_rows() -> tuple[list[dict], Counter, str]:
    outcomes = decide_all()
    holds = family(outcomes)
    rows = []
    for i, o in enumerate(outcomes):
        c, d = o.claim, o.decision
        rows.append(
            {
                "n": i + 1,
                "source": c.source,
                "claim": c.claim,
                "paper": c.paper,
                "ours": o.measured.text if o.measured else f"no result ({o.missing})",
                "seeds": seeds_text(o),
                "pilot": (
                    f"{o.pilot.measured.text} → {o.pilot.decision.verdict.value}" if o.pilot else ""
                ),
                "design": design_text(o) if o.needs else "",
                "method": c.method,
                "rule": c.rule.text(),
                "verdict": d.verdict.value,
                "verdict_text": verdict_text(o).replace("**", ""),
                "badge": BADGE[d.verdict],
                "parts": [(name, p.verdict.value, BADGE[p.verdict]) for name, p in d.parts],
                "robustness": robustness(o).replace("**", ""),
                "fragile": any(fd.verdict is not d.verdict for _, fd in o.flips),
                "holm": {True: "✓", False: "✗"}.get(holds.get(i), "—"),
                "section": c.section,
                "figure": "fig-" + Path(c.figure).stem.replace("_", "-") if c.figure else None,
            }
        )
    return rows, Counter(o.verdict for o in outcomes), headline(outcomes, holds)


def render() -> str:
    settle(FIGURES)  # the figures read are one set, not a killed set's half
    claims, counts, summary = claim_rows()
    studies = [
        {
            "anchor": f"study-{study.name}",
            "title": study.title,
            "sections": [section(s, study.labels, claims, study.paper) for s in study.sections],
        }
        for study in STUDIES
    ]
    titles = {s["anchor"]: s["title"] for st in studies for s in st["sections"]}
    for c in claims:
        c["section_title"] = titles[c["section"]]
    placed = {f["name"] for st in studies for s in st["sections"] for f in s["figures"]}
    unplaced = [
        figure(p.name, p.name) for p in sorted(FIGURES.glob("*.png")) if p.name not in placed
    ]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE.parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(TEMPLATE.name).render(
        claims=claims,
        summary=summary,
        counts=[(v.value, counts[v], BADGE[v]) for v in Verdict if counts[v]],
        meanings=[(v.value, m, BADGE[v]) for v, m in MEANING.items()],
        studies=studies,
        unplaced=unplaced,
    )


def main() -> None:
    """Write :data:`OUT`; results that are not whole (or that no rule can decide on) end it in
    one line, and the page is left as it was."""
    try:
        committed.check_all(RESULTS)  # every collection whole, those no claim reads too
        page = render()
    except OneLineError as e:  # results not whole, or that no rule can decide on
        sys.exit(f"error: {e}; {OUT} left as it was")
    write_document(OUT, page)


if __name__ == "__main__":
    main()
