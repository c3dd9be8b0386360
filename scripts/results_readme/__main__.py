"""``python -m scripts.results_readme [--check]``: write ``results/README.md`` from the committed
results, or check that the committed file is what they give."""

from __future__ import annotations

import argparse
import sys

from experiments.kit.errors import OneLineError
from scripts.analysis.committed import RESULTS
from scripts.documents import write_document
from scripts.results_readme.document import render

OUT = RESULTS / "README.md"


def first_difference(committed: str | None, fresh: str) -> str:
    """Where ``committed`` first differs from ``fresh``, in one line."""
    if committed is None:
        return "is not there"
    old, new = committed.splitlines(), fresh.splitlines()
    for i, (a, b) in enumerate(zip(old, new), start=1):
        if a != b:
            at = next((c for c, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return (
                f"differs at line {i}: it reads {_around(a, at)!r} where the results give "
                f"{_around(b, at)!r}"
            )
    if len(old) > len(new):
        return f"differs at line {len(new) + 1}: it goes on ({_around(old[len(new)], 0)!r}) where the results end"
    if len(old) < len(new):
        return f"differs at line {len(old) + 1}: it ends where the results give {_around(new[len(old)], 0)!r}"
    return "differs in its line endings"


def _around(line: str, at: int, width: int = 60) -> str:
    """The part of ``line`` around column ``at``, where two lines first differ."""
    start = max(0, min(at - width // 3, len(line) - width))
    part = line[start : start + width]
    return ("…" if start else "") + part + ("…" if start + width < len(line) else "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="results/README.md from the committed results.")
    p.add_argument("--check", action="store_true", help="compare with the committed file")
    args = p.parse_args(argv)
    try:
        text = render()
    except OneLineError as e:
        sys.exit(f"error: {e}; {OUT} left as it was")
    if args.check:
        committed = OUT.read_text() if OUT.exists() else None
        if committed != text:
            sys.exit(
                f"error: {OUT} {first_difference(committed, text)}: it is not what the committed "
                "results give; run `make results-readme`"
            )
        print(f"{OUT} is up to date")
        return
    write_document(OUT, text)


if __name__ == "__main__":
    main()
