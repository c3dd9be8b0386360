"""The Batch Renorm study's CPU-scale network: a small conv net with a norm before (or after) every ReLU."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

import bn
from experiments.nets.norms import freeze_norm_scale
from experiments.nets.pooling import column_pooling

NORM_POSITIONS = ("before", "after")


class SmallConvNet(nn.Sequential):
    """The CPU-scale network of the Batch Renorm study: a norm layer before every ReLU (or after).

    ``conv3x3(c0, stride=first_stride) → norm → ReLU``, then for each further width a stride-2
    ``conv3x3 → norm → ReLU``, global average pooling, ``Linear(hidden) → norm → ReLU`` and a linear classifier.
    Convolutions and the hidden linear layer have no bias (the norm's β replaces it; with
    ``norm="none"`` they keep one). The hidden layer's norm sees one value per example and unit,
    so it is where small or non-i.i.d. minibatches hurt BN most.

    Args:
        norm_layer: ``num_features -> layer`` after each convolution (:class:`bn.BatchNorm2d`,
            ``bn.get_norm_layer("groupnorm", groups=8)``, ...), or ``None``: no norm there.
        linear_norm_layer: the same for the hidden linear layer, on ``(N, C)`` values
            (:class:`bn.BatchNorm1d`, ...), or ``None``.
        in_channels, num_classes: input channels and classes.
        widths: channels of the convolutions; every one after the first halves the resolution.
        first_stride: stride of the first convolution (2 makes the net ~3x cheaper on 28x28).
        hidden: width of the hidden fully connected layer.
        fix_gamma: freeze every norm's scale γ at 1 (the Batch Renorm paper does: a ReLU follows,
            so the next layer absorbs the scale).
        norm_position: ``"before"`` the ReLU (the BN paper's ``g(BN(Wu))``) or ``"after"`` it
            (``BN(g(Wu + b))``, the BN authors' released Inception); with ``"after"`` the
            convolutions and the hidden linear layer keep their bias.
        pool_columns: the columns the last feature map is averaged into (1: global average
            pooling; 3: one per item of a row of three, so the hidden layer knows which item
            is where).
        weight_norm: the convolutions and the hidden linear layer (those a norm follows) are
            weight-normalized (:class:`bn.WeightNormConv2d`, :class:`bn.WeightNormLinear`,
            drawn as the plain layers are); the classifier stays plain.
    """

    def __init__(
        self,
        norm_layer: Callable[[int], nn.Module] | None = bn.BatchNorm2d,
        linear_norm_layer: Callable[[int], nn.Module] | None = bn.BatchNorm1d,
        in_channels: int = 1,
        num_classes: int = 10,
        widths: Sequence[int] = (16, 32, 64),
        first_stride: int = 2,
        hidden: int = 128,
        fix_gamma: bool = False,
        norm_position: str = "before",
        pool_columns: int = 1,
        weight_norm: bool = False,
    ) -> None:
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position={norm_position!r} must be one of {NORM_POSITIONS}")
        after = norm_position == "after"

        def block(linear: nn.Module, norm: nn.Module) -> list[nn.Module]:
            relu = nn.ReLU(inplace=True)
            return [linear, norm, relu] if not after else [linear, relu, norm]

        def norm_of(factory: Callable[[int], nn.Module] | None, c: int) -> nn.Module:
            return nn.Identity() if factory is None else factory(c)

        def bias(norm: nn.Module) -> bool:  # before the norm, its β replaces the bias
            return after or isinstance(norm, nn.Identity)

        conv = bn.WeightNormConv2d if weight_norm else nn.Conv2d
        linear = bn.WeightNormLinear if weight_norm else nn.Linear
        layers: list[nn.Module] = []
        c_in = in_channels
        for i, c in enumerate(widths):
            norm = norm_of(norm_layer, c)  # built first: a norm draws nothing at random
            stride = first_stride if i == 0 else 2
            layers += block(conv(c_in, c, 3, stride, padding=1, bias=bias(norm)), norm)
            c_in = c
        layers += [column_pooling(pool_columns), nn.Flatten()]
        norm = norm_of(linear_norm_layer, hidden)
        layers += block(linear(c_in * pool_columns, hidden, bias=bias(norm)), norm)
        layers.append(nn.Linear(hidden, num_classes))
        super().__init__(*layers)
        if fix_gamma:
            freeze_norm_scale(self)
