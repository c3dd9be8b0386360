"""The document: the registry's studies and sections, their committed results and tables, the
prose macros of ``sections.md.j2`` and the frame ``readme.md.j2``, wrapped as prose is."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from experiments.studies import STUDIES, Study
from scripts.analysis.committed import RESULTS
from scripts.analysis.stats import LEVEL
from scripts.figure_sets import settle
from scripts.results_readme.bench import benches
from scripts.results_readme.sections import SectionError, SectionView, read
from scripts.results_readme.tables import tables
from scripts.results_readme.text import num, pct, reflow, seeds_text

HERE = Path(__file__).parent
FRAME = "readme.md.j2"
PROSE = "sections.md.j2"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE),
        autoescape=False,  # Markdown, not HTML
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(pct=pct, num=num, seeds=seeds_text)
    return env


def macro_name(anchor: str) -> str:
    """A section anchor's macro in ``sections.md.j2`` (``-`` written ``_``)."""
    return anchor.replace("-", "_")


def prose_macros(env: jinja2.Environment) -> dict[str, Any]:
    """The exported macros of the prose template: a section's by its anchor's macro name, a
    study's as ``study_<name>``."""
    module = env.get_template(PROSE).make_module()
    found = {name: getattr(module, name) for name in dir(module) if not name.startswith("_")}
    return {name: m for name, m in found.items() if isinstance(m, jinja2.runtime.Macro)}


def _claims() -> list[tuple[int, Any]]:
    """Every claim with its number in ``CLAIMS.md`` (the definitions: nothing is decided here)."""
    from scripts.claims.table import CLAIMS

    return list(enumerate(CLAIMS, start=1))


def _prose(macro: Any, s: SectionView) -> str:
    try:
        return str(macro(s)).strip("\n")
    except jinja2.UndefinedError as e:
        raise SectionError(
            f"section {s.anchor!r}: its prose reads what results/{s.path} does not hold "
            f"({e.message})"
        ) from None


def render(root: Path = RESULTS, studies: Sequence[Study] | None = None) -> str:
    """The document for the results under ``root`` and ``studies`` (the registry's)."""
    settle(root / "figures")  # the figures listed are one set, not a killed set's half
    studies = STUDIES if studies is None else studies
    env = environment()
    macros = prose_macros(env)
    claims = _claims()
    parts = []
    for study in studies:
        sections = []
        for sec in study.sections:
            s = read(sec, study, root)
            if s.committed:
                s.tables = tables(s)
                if macro := macros.get(macro_name(sec.anchor)):
                    s.prose = _prose(macro, s)
            s.claims = [
                (n, c.claim)
                for n, c in claims
                if c.section == sec.anchor or sec.reproduction in c.confirm
            ]
            sections.append(s)
        intro = macros.get(f"study_{macro_name(study.name)}")
        parts.append(
            {
                "study": study,
                "intro": str(intro()).strip("\n") if intro else "",
                "sections": sections,
            }
        )
    text = env.get_template(FRAME).render(
        studies=parts,
        benches=benches(root),
        gpu=(root / "bench" / "gpu" / "README.md").exists(),
        level=pct(LEVEL, 0),
    )
    return reflow(text).rstrip("\n") + "\n"
