"""Build (or load the cached builds of) the compiled CPU kernels: bn's Batch Renorm kernel
(bn/compiled.py) and the MNIST network's binary-input layer and fused training step
(experiments/nets/kernels.py).

    python -m scripts.build_kernel [-v]

``make install`` runs this, so the first run does not wait for the compiler. Exits 1 if a build
fails; what needed it then uses the PyTorch path (same results, slower).
"""

from __future__ import annotations

import sys
import time

from bn import compiled
from experiments.nets import kernels

KERNELS = (
    ("bn's Batch Renorm kernel", compiled.build, "BatchRenorm1d"),
    (
        "the MNIST network's kernels",
        kernels.build,
        "the MNIST network's first layer and training step",
    ),
)


def main() -> None:
    verbose, failed = "-v" in sys.argv[1:], False
    for what, build, user in KERNELS:
        t0 = time.perf_counter()
        try:
            build(verbose=verbose)
        except Exception as e:
            print(f"could not build {what}: {e}", file=sys.stderr)
            print(f"{user} will use the PyTorch path (same results, slower)", file=sys.stderr)
            failed = True
            continue
        print(f"{what}: ready ({time.perf_counter() - t0:.1f} s)")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
