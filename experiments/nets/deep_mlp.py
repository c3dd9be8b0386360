"""A deep fully connected network for the depth sweep (Yang et al. 2019)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "linear": nn.Identity,
}


class DeepMLP(nn.Sequential):
    """``depth`` hidden layers ``Linear → [norm] → activation`` of ``width`` units and a linear
    classifier. Weights ``N(0, gain² / fan_in)`` (``gain² = 2`` for ReLU, 1 otherwise: He and
    LeCun initialisations), biases zero; with a norm the hidden layers have no bias.

    Args:
        depth: number of hidden layers (``>= 1``).
        width: units per hidden layer.
        activation: ``relu``, ``sigmoid`` or ``linear``.
        norm_layer: ``num_features -> layer`` (e.g. ``bn.get_norm_layer("batchnorm", dims=1)``), or
            ``None`` (or a factory of ``nn.Identity``) for no normalization.
        in_features, num_classes: input and output sizes.
    """

    def __init__(
        self,
        depth: int,
        width: int = 100,
        activation: str = "relu",
        norm_layer: Callable[[int], nn.Module] | None = None,
        in_features: int = 784,
        num_classes: int = 10,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth={depth} must be at least 1")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} must be one of {tuple(ACTIVATIONS)}")
        layers: list[nn.Module] = []
        for i in range(depth):
            norm = None if norm_layer is None else norm_layer(width)  # draws nothing at random
            no_norm = norm is None or isinstance(norm, nn.Identity)
            layers.append(nn.Linear(in_features if i == 0 else width, width, bias=no_norm))
            if norm is not None:
                layers.append(norm)
            layers.append(ACTIVATIONS[activation]())
        layers.append(nn.Linear(width, num_classes))
        super().__init__(*layers)
        gain2 = 2.0 if activation == "relu" else 1.0
        with torch.no_grad():
            for m in self.linears:
                m.weight.normal_(0.0, (gain2 / m.in_features) ** 0.5)
                if m.bias is not None:
                    m.bias.zero_()

    @property
    def linears(self) -> list[nn.Linear]:
        """The weight layers, first to last (the classifier last)."""
        return [m for m in self if isinstance(m, nn.Linear)]
