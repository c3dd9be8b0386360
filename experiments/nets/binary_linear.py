"""The first layer of the MNIST network, computed from the ones of its binary input.

The BN paper's network reads "28x28 binary images"; about one pixel in eight is set. For a 0/1 input
``u``, ``Wu`` is the sum of the columns of ``W`` picked by the ones of ``u``, and the weight gradient
of a column is the sum of the output gradients of the examples that have that pixel set.
``csrc/binary_linear_cpu.cpp`` (with ``csrc/binary_rows.h``) computes both that way: at the
study's sizes (three networks, 60 images) in 0.43x the dense layer's time for the forward pass
and 0.49x with the weight gradient (``python -m scripts.bench_mnist``; the dense products spend
most of their work multiplying by zero). The numbers are those of the dense layer up to float rounding;
``tests/experiments/nets/test_binary_linear.py`` holds them equal.

The operator is built on first use (:mod:`experiments.nets.kernels`). Without it (no compiler,
``BN_COMPILED=0``, a non-CPU or grayscale input) the layer computes the same thing with a dense
batched matrix product.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from experiments.nets.kernels import binary_linear_op

__all__ = ["BinaryInputLinear", "binary_linear_op"]


class BinaryInputLinear(nn.Module):
    """``copies`` independent linear maps ``Wu + b`` of a binary (0/1) input, batch-major.

    The same layer as :class:`experiments.nets.mlp.StackedLinear` (and initialised identically by
    :class:`~experiments.nets.mlp.SigmoidMLP`), but ``weight`` is stored input-major,
    ``(copies, in_features, out_features)``: the weights of one input pixel are contiguous, which
    is what summing the columns picked by the ones reads.

    Shape:
        - Input: ``(copies, batch, in_features)`` or ``(batch, in_features)`` (the same examples
          for every copy), of 0s and 1s: ``uint8``, ``bool`` or floating point.
        - Output: ``(copies, out_features, batch)``, feature-major like the rest of the network.

    A value other than 0 and 1 raises an error on the compiled path (the dense fallback cannot
    tell); use :class:`~experiments.nets.mlp.StackedLinear` for grayscale inputs.
    """

    def __init__(self, copies: int, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(copies, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(copies, out_features, 1)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        x3 = x.unsqueeze(0) if x.dim() == 2 else x
        op = binary_linear_op() if self._compiled_applies(x3) else None
        if op is not None:
            return op(x3.contiguous(), self.weight, self.bias)
        u = x3.to(self.weight.dtype).transpose(1, 2)  # (copies or 1, in, batch)
        wu = torch.matmul(self.weight.transpose(1, 2), u)
        return wu if self.bias is None else wu + self.bias

    def _compiled_applies(self, x: Tensor) -> bool:
        return (
            x.device.type == "cpu"
            and self.weight.device.type == "cpu"
            and self.weight.dtype in (torch.float32, torch.float64)
            and (self.bias is None or self.bias.dtype == self.weight.dtype)
            and not x.requires_grad
            and not torch.compiler.is_compiling()
        )
