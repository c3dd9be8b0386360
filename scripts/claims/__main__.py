"""``python -m scripts.claims [--check | --design]``: write or check ``results/CLAIMS.md``, or
print the power calculation that fixes each confirmatory reproduction's seeds."""

from __future__ import annotations

import argparse
import sys

from experiments.kit.errors import OneLineError
from scripts.analysis.committed import RESULTS, check_all
from scripts.analysis.power import SEARCH_LIMIT
from scripts.claims.claim import design, planned, seeds_to_run
from scripts.claims.table import CLAIMS, render
from scripts.documents import write_document

OUT = RESULTS / "CLAIMS.md"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="The papers' claims against the committed results.")
    p.add_argument("--check", action="store_true", help="compare with the committed file")
    p.add_argument(
        "--design", action="store_true", help="the confirmatory seed counts the pilots give"
    )
    args = p.parse_args(argv)
    if args.design:
        print_design()
        return
    try:
        check_all(RESULTS)  # every collection whole, those no claim reads too
        text = render()
    except OneLineError as e:  # results not whole, or that no rule can decide on
        sys.exit(f"error: {e}; {OUT} left as it was")
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"error: {OUT} is not what `make claims` gives now; run `make claims`")
        print(f"{OUT} is up to date")
        return
    write_document(OUT, text)


def print_design() -> None:
    """Each confirmatory claim's tests, the seeds each needs (from its pilot), and what every
    confirmatory reproduction must therefore run (experiments/studies.py holds these counts)."""
    needs = {}
    for c in CLAIMS:
        if c.confirm:
            print(f"{c.claim}\n  reads {', '.join(c.confirm)}")
            needs[c.claim] = design(c.rule, c.design_values())
            for key, need in needs[c.claim]:
                print(f"  {key}: {need.text() if need else 'a one-seed pilot: no spread'}")
    print()
    for name, (n, claims) in planned(CLAIMS).items():
        print(f"{name}: {n} seeds, the most that these rows need:")
        for c, k in claims:
            wanted = seeds_to_run(needs[c.claim], SEARCH_LIMIT)  # uncapped
            short = f"  (needs {wanted}: underpowered)" if wanted > k else ""
            print(f"  {k:3d}  {c.claim}{short}")


if __name__ == "__main__":
    main()
