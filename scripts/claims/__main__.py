"""``python -m scripts.claims [--check]``: write or check ``results/CLAIMS.md``."""

from __future__ import annotations

import argparse
import sys

from scripts.analysis.results import RESULTS
from scripts.analysis.stats import NonFinite
from scripts.claims.table import render

OUT = RESULTS / "CLAIMS.md"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="The papers' claims against the committed results.")
    p.add_argument("--check", action="store_true", help="compare with the committed file")
    args = p.parse_args(argv)
    try:
        text = render()
    except NonFinite as e:  # the committed results hold something no rule can decide on
        sys.exit(f"error: {e}; {OUT} left as it was")
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"error: {OUT} is not what `make claims` gives now; run `make claims`")
        print(f"{OUT} is up to date")
        return
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
