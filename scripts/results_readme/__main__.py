"""``python -m scripts.results_readme [--check]``: write ``results/README.md`` from the committed
results, or check that the committed file is what they give."""

from __future__ import annotations

import argparse
import sys

from experiments.kit.files import write_whole
from scripts.analysis.results import RESULTS, BadResults
from scripts.analysis.stats import AnalysisError
from scripts.results_readme.document import render
from scripts.results_readme.sections import SectionError

OUT = RESULTS / "README.md"


def first_difference(committed: str | None, fresh: str) -> str:
    """Where ``committed`` first differs from ``fresh``, in one line."""
    if committed is None:
        return "is not there"
    old, new = committed.splitlines(), fresh.splitlines()
    for i, (a, b) in enumerate(zip(old, new), start=1):
        if a != b:
            return f"differs at line {i}: it reads {_clip(a)!r} where the results give {_clip(b)!r}"
    if len(old) > len(new):
        return f"differs at line {len(new) + 1}: it goes on ({_clip(old[len(new)])!r}) where the results end"
    if len(old) < len(new):
        return f"differs at line {len(old) + 1}: it ends where the results give {_clip(new[len(old)])!r}"
    return "differs in its line endings"


def _clip(line: str, width: int = 60) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="results/README.md from the committed results.")
    p.add_argument("--check", action="store_true", help="compare with the committed file")
    args = p.parse_args(argv)
    try:
        text = render()
    except (AnalysisError, BadResults, SectionError) as e:
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
    try:
        write_whole(OUT, lambda f: f.write(text), tmp=OUT.with_name(f".{OUT.name}.tmp"))
    except OSError as e:
        sys.exit(f"error: {OUT} could not be written ({e.strerror or e}); it is as it was")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
