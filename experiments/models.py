"""Networks of the studies; every normalization layer comes from :mod:`bn`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

import bn


class SigmoidMLP(nn.Sequential):
    """BN paper Sec. 4.1: ``784 → 100 → 100 → 100 → 10``, sigmoid hidden units.

    With a norm, each hidden layer is ``Linear(bias=False) → norm → Sigmoid`` (the norm's β takes
    the role of the dropped bias, paper Sec. 3.1); the 10-way output layer has no norm. Weights
    are drawn from ``N(0, init_std²)`` ("small random Gaussian values"), biases start at zero.

    Args:
        norm: ``"none"`` (the baseline) or a :func:`bn.get_norm_layer` name, e.g. ``"batchnorm"``.
        hidden: widths of the hidden layers.
        init_std: standard deviation of the Gaussian weight initialisation.
        in_features, num_classes: input and output sizes.
        **norm_kwargs: passed to the norm layer (``momentum``, ``eps``, ``impl``, ...).
    """

    def __init__(
        self,
        norm: str = "none",
        hidden: Sequence[int] = (100, 100, 100),
        init_std: float = 0.1,
        in_features: int = 784,
        num_classes: int = 10,
        **norm_kwargs,
    ) -> None:
        make_norm = bn.get_norm_layer(norm, dims=1, **norm_kwargs)
        has_norm = norm not in (None, "none")
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers.append(nn.Linear(width, h, bias=not has_norm))
            if has_norm:
                layers.append(make_norm(h))
            layers.append(nn.Sigmoid())
            width = h
        layers.append(nn.Linear(width, num_classes))
        super().__init__(*layers)
        self.init_std = init_std
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    m.weight.normal_(0.0, init_std)
                    if m.bias is not None:
                        m.bias.zero_()

    @property
    def sigmoids(self) -> list[nn.Sigmoid]:
        """The hidden layers' nonlinearities, first to last."""
        return [m for m in self if isinstance(m, nn.Sigmoid)]
