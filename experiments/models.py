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


class SmallConvNet(nn.Sequential):
    """The CPU-scale network of the Batch Renorm study: a norm layer before every ReLU.

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
        **norm_kwargs,
    ) -> None:
        has_norm = norm not in (None, "none")
        norm2d = bn.get_norm_layer(norm, dims=2, **norm_kwargs)
        norm1d = bn.get_norm_layer(norm, dims=1, **norm_kwargs)
        layers: list[nn.Module] = []
        c_in = in_channels
        for i, c in enumerate(widths):
            stride = first_stride if i == 0 else 2
            layers += [
                nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=not has_norm),
                norm2d(c),
                nn.ReLU(inplace=True),
            ]
            c_in = c
        layers += [
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(c_in, hidden, bias=not has_norm),
            norm1d(hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        ]
        super().__init__(*layers)
        if fix_gamma:
            freeze_norm_scale(self)


def norm_layers(model: nn.Module) -> list[nn.Module]:
    """Every normalization layer of ``model`` (batch, group or layer norm), in order."""
    kinds = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    return [m for m in model.modules() if isinstance(m, kinds)]


def freeze_norm_scale(model: nn.Module) -> None:
    """Fix every norm layer's γ at 1 (no gradient, so no optimizer or weight-decay update)."""
    for m in norm_layers(model):
        if getattr(m, "weight", None) is not None:
            with torch.no_grad():
                m.weight.fill_(1.0)
            m.weight.requires_grad_(False)
