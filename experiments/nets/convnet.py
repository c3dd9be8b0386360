"""The Batch Renorm study's CPU-scale network: a small conv net with a norm before (or after) every ReLU."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

import bn
from experiments.kit.norm import freeze_norm_scale

NORM_POSITIONS = ("before", "after")


class SmallConvNet(nn.Sequential):
    """The CPU-scale network of the Batch Renorm study: a norm layer before every ReLU (or after).

    ``conv3x3(c0, stride=first_stride) → norm → ReLU``, then for each further width a stride-2
    ``conv3x3 → norm → ReLU``, global average pooling, ``Linear(hidden) → norm → ReLU`` and a linear classifier.
    Convolutions and the hidden linear layer have no bias (the norm's β replaces it; with
    ``norm="none"`` they keep one). The hidden layer's norm sees one value per example and unit,
    so it is where small or non-i.i.d. minibatches hurt BN most.

    Args:
        norm: a :func:`bn.get_norm_layer` name (``batchnorm``, ``batchrenorm``, ``groupnorm``,
            ``layernorm``, ``none``, ...).
        in_channels, num_classes: input channels and classes.
        widths: channels of the convolutions; every one after the first halves the resolution.
        first_stride: stride of the first convolution (2 makes the net ~3x cheaper on 28x28).
        hidden: width of the hidden fully connected layer.
        fix_gamma: freeze every norm's scale γ at 1 (the Batch Renorm paper does: a ReLU follows,
            so the next layer absorbs the scale).
        norm_position: ``"before"`` the ReLU (the BN paper's ``g(BN(Wu))``) or ``"after"`` it
            (``BN(g(Wu + b))``, the BN authors' released Inception); with ``"after"`` the
            convolutions and the hidden linear layer keep their bias.
        **norm_kwargs: passed to every norm layer (``momentum``, ``microbatch``, ``r_max``, ...).
    """

    def __init__(
        self,
        norm: str = "batchnorm",
        in_channels: int = 1,
        num_classes: int = 10,
        widths: Sequence[int] = (16, 32, 64),
        first_stride: int = 2,
        hidden: int = 128,
        fix_gamma: bool = False,
        norm_position: str = "before",
        **norm_kwargs,
    ) -> None:
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position={norm_position!r} must be one of {NORM_POSITIONS}")
        has_norm = norm not in (None, "none")
        bias = not has_norm or norm_position == "after"

        def block(linear: nn.Module, norm_layer: nn.Module) -> list[nn.Module]:
            relu = nn.ReLU(inplace=True)
            return (
                [linear, norm_layer, relu]
                if norm_position == "before"
                else [linear, relu, norm_layer]
            )

        norm2d = bn.get_norm_layer(norm, dims=2, **norm_kwargs)
        norm1d = bn.get_norm_layer(norm, dims=1, **norm_kwargs)
        layers: list[nn.Module] = []
        c_in = in_channels
        for i, c in enumerate(widths):
            stride = first_stride if i == 0 else 2
            layers += block(nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=bias), norm2d(c))
            c_in = c
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        layers += block(nn.Linear(c_in, hidden, bias=bias), norm1d(hidden))
        layers.append(nn.Linear(hidden, num_classes))
        super().__init__(*layers)
        if fix_gamma:
            freeze_norm_scale(self)
