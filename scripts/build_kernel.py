"""Build (or load the cached build of) bn's compiled Batch Renorm CPU kernel, see bn/compiled.py.

    python -m scripts.build_kernel [-v]

``make install`` runs this, so the first Batch Renorm layer of a run does not wait for the
compiler. Exits 1 if the build fails; the layers then use the PyTorch path (same results, slower).
"""

from __future__ import annotations

import sys
import time

from bn import compiled


def main() -> None:
    t0 = time.perf_counter()
    try:
        compiled.build(verbose="-v" in sys.argv[1:])
    except Exception as e:
        print(f"bn: could not build the compiled Batch Renorm kernel: {e}", file=sys.stderr)
        print("bn: BatchRenorm1d will use the PyTorch path (same results, slower)", file=sys.stderr)
        sys.exit(1)
    print(f"bn: compiled Batch Renorm kernel ready ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
