"""The MNIST study's network (BN paper Sec. 4.1): a sigmoid MLP, several seeds side by side."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch
from torch import nn

from experiments.nets.binary_linear import BinaryInputLinear
from experiments.nets.convnet import NORM_POSITIONS

ACTIVATIONS = {"sigmoid": nn.Sigmoid, "relu": nn.ReLU}


class StackedLinear(nn.Module):
    """``copies`` independent linear maps ``Wu + b`` on feature-major inputs.

    ``u`` is ``(copies, in_features, batch)`` (copy ``k`` gets its own examples) or
    ``(in_features, batch)`` (the same examples for every copy); the output is
    ``(copies, out_features, batch)``. ``weight`` is ``(copies, out_features, in_features)``.
    """

    def __init__(self, copies: int, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(copies, out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(copies, out_features, 1)) if bias else None

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        copies, out_features, _ = self.weight.shape
        if u.dim() == 2:  # one matmul for all copies: (copies * out, in) @ (in, batch)
            wu = (self.weight.flatten(0, 1) @ u).view(copies, out_features, -1)
            return wu if self.bias is None else wu + self.bias
        if self.bias is None:
            return torch.bmm(self.weight, u)
        return torch.baddbmm(self.bias, self.weight, u)


class SigmoidMLP(nn.Module):
    """BN paper Sec. 4.1: ``784 → 100 → 100 → 100 → 10``, sigmoid hidden units; ``copies``
    independent networks side by side (one per seed), trained in lockstep.

    With a norm, each hidden layer is ``Wu → norm → sigmoid`` (no bias: the norm's β takes its
    role, paper Sec. 3.1), or with ``norm_position="after"`` ``Wu + b → sigmoid → norm``; the
    10-way output layer has no norm. Weights are drawn from
    ``N(0, init_std²)`` ("small random Gaussian values"), biases start at zero.

    Activations are feature-major, ``(copies, units, batch)``: a column per example, as the
    paper's ``Wu``. One batched matmul computes every copy's layer, and one norm layer with
    ``copies × units`` channels sees the ``(1, copies × units, batch)`` view, so every unit of
    every copy is normalized over its own mini-batch, as in a single network. Nothing is shared
    between copies; stacking them only shares the per-step overhead of these tiny layers.
    :class:`~experiments.nets.mlp_step.SGDStep` trains it (one compiled call a step).

    Args:
        norm_layer: ``num_features -> layer``, a per-unit batch norm over ``(1, C, batch)``
            (e.g. ``bn.get_norm_layer("batchrenorm", dims=1, r_max=3.0)``), or ``None`` (or a
            factory of ``nn.Identity``): no norm, the baseline.
        hidden: widths of the hidden layers.
        init_std: standard deviation of the Gaussian weight initialisation.
        in_features, num_classes: input and output sizes.
        copies: number of independent networks.
        seeds: one seed per copy for :meth:`reset_parameters`; ``None`` draws from torch's
            global generator.
        binary_input: the input is 0/1 (the paper's binarized images): the first layer is a
            :class:`~experiments.nets.binary_linear.BinaryInputLinear`, which sums the weights of the
            set pixels instead of multiplying by every pixel (same numbers, faster).
        norm_position: ``"before"`` the sigmoid (the paper) or ``"after"`` it.
        activation: ``"sigmoid"`` (the paper) or ``"relu"`` for the hidden units; the modules
            are kept in :attr:`activations` (the probes hook their inputs).
        norm_bias: keep the hidden layers' bias before the norm, where BN makes it redundant
            (its gradient is zero under BN; normalizing outside the gradient makes it grow).

    Shape:
        - Input: ``(batch, in_features)``, the same examples for every copy, or
          ``(copies, batch, in_features)``; with ``binary_input``, 0/1 ``uint8`` or ``bool``
          values do (the first layer reads them as they are).
        - Output: logits ``(copies, batch, num_classes)``.
    """

    def __init__(
        self,
        norm_layer: Callable[[int], nn.Module] | None = None,
        hidden: Sequence[int] = (100, 100, 100),
        init_std: float = 0.1,
        in_features: int = 784,
        num_classes: int = 10,
        copies: int = 1,
        seeds: Sequence[int] | None = None,
        binary_input: bool = False,
        norm_position: str = "before",
        activation: str = "sigmoid",
        norm_bias: bool = False,
    ) -> None:
        super().__init__()
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position={norm_position!r} must be one of {NORM_POSITIONS}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} must be one of {tuple(ACTIVATIONS)}")
        # Built first (they draw nothing at random): a factory of nn.Identity is no norm.
        norms = [norm_layer(copies * h) for h in hidden] if norm_layer is not None else []
        has_norm = any(not isinstance(n, nn.Identity) for n in norms)
        self.norm_after = norm_position == "after"
        widths = [in_features, *hidden]
        first = BinaryInputLinear if binary_input else StackedLinear
        self.hidden = nn.ModuleList(
            (first if i == 0 else StackedLinear)(
                copies, w_in, w_out, bias=not has_norm or self.norm_after or norm_bias
            )
            for i, (w_in, w_out) in enumerate(itertools.pairwise(widths))
        )
        self.norms = nn.ModuleList(norms) if has_norm else None
        self.activations = nn.ModuleList(ACTIVATIONS[activation]() for _ in hidden)
        self.output = StackedLinear(copies, widths[-1], num_classes)
        self.copies, self.init_std = copies, init_std
        self.reset_parameters(seeds)

    def reset_parameters(self, seeds: Sequence[int] | None = None) -> None:
        """Gaussian weights, zero biases; copy ``k``'s weights come from ``seeds[k]`` alone, so
        a copy is the same network whatever else is stacked with it."""
        if seeds is not None and len(seeds) != self.copies:
            raise ValueError(f"{len(seeds)} seeds for {self.copies} copies")
        generators = (
            [None] * self.copies
            if seeds is None
            else [torch.Generator().manual_seed(s) for s in seeds]
        )
        with torch.no_grad():
            for k, g in enumerate(generators):
                for layer in (*self.hidden, self.output):
                    weight = layer.weight[k]
                    if isinstance(layer, BinaryInputLinear):  # stored (in, out): draw as (out, in)
                        drawn = weight.new_empty(weight.t().shape)
                        weight.copy_(drawn.normal_(0.0, self.init_std, generator=g).t())
                    else:
                        weight.normal_(0.0, self.init_std, generator=g)
                    if layer.bias is not None:
                        layer.bias[k].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.t() if x.dim() == 2 else x.transpose(1, 2)  # feature-major
        norms = self.norms if self.norms is not None else [None] * len(self.hidden)
        for linear, norm, activation in zip(self.hidden, norms, self.activations):
            z = linear(x if isinstance(linear, BinaryInputLinear) else u)  # it reads batch-major
            if norm is not None and not self.norm_after:
                z = norm(z.view(1, -1, z.shape[-1])).view(z.shape)
            u = activation(z)
            if norm is not None and self.norm_after:
                u = norm(u.reshape(1, -1, u.shape[-1])).view(u.shape)
        return self.output(u).transpose(1, 2)
