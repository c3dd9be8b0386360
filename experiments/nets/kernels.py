"""The MNIST network's compiled CPU kernels, one library built once per machine.

- ``binary_linear``: the binary-input first layer (:mod:`experiments.nets.binary_linear`);
- ``mlp_sgd_step``: a whole SGD step of :class:`~experiments.nets.mlp.SigmoidMLP`
  (:mod:`experiments.nets.mlp_step`);
- ``small_matmul``: ``a @ b`` by that step's own matrix-product kernel (its tests and the
  benchmark's compute floor call it).

All are built on first use like :mod:`bn.compiled`'s kernel (about 40 s, cached; ``make install``
builds them ahead). Without them (no compiler, ``BN_COMPILED=0``) the network computes the same
thing in PyTorch operations, more slowly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from bn import compiled

CSRC = Path(__file__).parent / "csrc"
SOURCES = (CSRC / "binary_linear_cpu.cpp", CSRC / "mlp_step_cpu.cpp")  # and csrc/*.h, *.inc
NAME = "bn_repro_experiments_ops"  # the operators live in torch.ops.bn_repro_experiments


def build(verbose: bool = False) -> Callable:
    """Compile (or load the cached build of) the library; raises on failure."""
    compiled.load_extension(NAME, SOURCES, "the MNIST network's kernels", verbose=verbose)
    return torch.ops.bn_repro_experiments


def _op(name: str) -> Callable[[], Callable]:
    return lambda: getattr(build(), name)


# Each operator, built on first use; None when compiled kernels are turned off (BN_COMPILED=0)
# or the build failed (warned once).
binary_linear_op = compiled.LazyOp(
    _op("binary_linear"),
    "the binary-input linear layer",
    "the MNIST network's first layer uses a dense matrix product instead (same results, slower)",
)
mlp_step_op = compiled.LazyOp(
    _op("mlp_sgd_step"),
    "the MNIST network's fused training step",
    "the network trains through PyTorch's autograd instead (same results, slower)",
)
small_matmul_op = compiled.LazyOp(
    _op("small_matmul"),
    "the MNIST network's matrix-product kernel",
    "only ATen's products are timed",
)
