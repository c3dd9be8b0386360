"""Numbers as the document writes them, and its paragraphs wrapped as the repository's prose is."""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

WIDTH = 100
# a line that Markdown would read as the start of another block, were a wrapped line to begin so
BLOCK_START = re.compile(r"(\d+[.)]|[-+*>#|])(\s|$)")
LIST_ITEM = re.compile(r"(\s*)([-*] |\d+\. )")


def pct(v: float, digits: int = 2) -> str:
    return f"{v:.{digits}%}"


def num(v: Any) -> str:
    """An integer with thousands separators, a float in its shortest form."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    return f"{v:g}"


def seeds_text(seeds: Iterable[int]) -> str:
    """``0–4``, ``1000–1049 (50)``, or the seeds listed where they are not consecutive."""
    s = sorted(seeds)
    if not s:
        return "none"
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]}" + (f" ({len(s)})" if len(s) > 5 else "")
    return ", ".join(map(str, s))


def geometric_mean(values: Sequence[float]) -> float:
    """Of positive numbers; 0 if one of them is 0 (a value below a file's resolution)."""
    if any(v == 0 for v in values):
        return 0.0
    return 10 ** (sum(math.log10(v) for v in values) / len(values))


def finite(values: Iterable[Any]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _fill(text: str, first: str, rest: str, width: int) -> list[str]:
    """``text`` wrapped to ``width``, narrower if a wrapped line would open another block."""
    for w in range(width, width // 2, -1):
        lines = textwrap.wrap(
            text,
            w,
            initial_indent=first,
            subsequent_indent=rest,
            break_long_words=False,
            break_on_hyphens=False,
        )
        if not any(BLOCK_START.match(line.lstrip()) for line in lines[1:]):
            return lines
    return [first + text]  # pragma: no cover - no width avoids it: one long line


def reflow(markdown: str, width: int = WIDTH) -> str:
    """Every paragraph and list item of ``markdown`` wrapped to ``width``, blocks one blank line
    apart; headings, tables and code blocks kept as they are."""
    out: list[str] = []
    unit: list[str] = []  # the lines of one paragraph or list item
    code = False

    def flush() -> None:
        if not unit:
            return
        item = LIST_ITEM.match(unit[0])
        first = item.group(0) if item else ""
        text = " ".join(line.strip() for line in unit)[len(first.strip()) :].strip()
        out.extend(_fill(text, first, " " * len(first), width))
        unit.clear()

    for line in markdown.split("\n"):
        if line.startswith("```"):
            flush()
            code = not code
            out.append(line)
        elif code or line.startswith(("#", "|", "<")):
            flush()
            out.append(line)
        elif not line.strip():
            flush()
            if out and out[-1]:  # one blank line between blocks
                out.append("")
        else:
            if LIST_ITEM.match(line):
                flush()
            unit.append(line)
    flush()
    return "\n".join(out)
