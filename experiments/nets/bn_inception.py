"""BN-Inception: the network of the BN paper's ImageNet experiments (appendix, Figure 5).

Every variant of the paper (Inception, BN-Baseline, BN-x5, BN-x30, BN-x5-Sigmoid) is this one
class: the norm layer and the nonlinearity are constructor arguments.

The per-branch widths are the printed ones, so modules 4c and 4d output 608 channels (the table
says 576) and 4e outputs 1056 (the table says 1024): the table's per-branch columns and its
output column disagree, and we follow the columns, as the Caffe model (and its PyTorch port),
tensorpack and Chainer do. TF-slim instead narrows 4c/4d's pool projections to 96.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

import bn
from experiments.nets.lrn import LocalResponseNorm
from experiments.nets.pooling import column_pooling
from experiments.nets.stacked import cat_per_copy, concat_convs, concat_norms, split_per_copy


@dataclass(frozen=True)
class ModuleSpec:
    """One row of the table: branch widths, pooling, and the module's stride."""

    n1x1: int
    n3x3_reduce: int
    n3x3: int
    double_reduce: int
    double: int
    pool: str  # "avg" or "max"
    proj: int | None  # 1x1 projection after the pool; None: pass the pooled input through
    stride: int = 1


# BN paper Figure 5, rows 3a-5b.
TABLE: dict[str, ModuleSpec] = {
    "3a": ModuleSpec(64, 64, 64, 64, 96, "avg", 32),
    "3b": ModuleSpec(64, 64, 96, 64, 96, "avg", 64),
    "3c": ModuleSpec(0, 128, 160, 64, 96, "max", None, stride=2),
    "4a": ModuleSpec(224, 64, 96, 96, 128, "avg", 128),
    "4b": ModuleSpec(192, 96, 128, 96, 128, "avg", 128),
    "4c": ModuleSpec(160, 128, 160, 128, 160, "avg", 128),
    "4d": ModuleSpec(96, 128, 192, 160, 192, "avg", 128),
    "4e": ModuleSpec(0, 128, 192, 192, 256, "max", None, stride=2),
    "5a": ModuleSpec(352, 192, 320, 160, 224, "avg", 128),
    "5b": ModuleSpec(352, 192, 320, 192, 224, "max", 128),
}


class _Unit(nn.Sequential):
    """conv → norm → nonlinearity (the paper puts BN on the input of every nonlinearity)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, make_norm, act):
        norm = make_norm(c_out)
        has_norm = not isinstance(norm, nn.Identity)
        super().__init__(nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=not has_norm), norm, act())


class InceptionModule(nn.Module):
    """The four branches of one row, concatenated along channels (in a stack of ``copies``
    networks, :func:`~experiments.nets.stacked.stack_copies`, each copy's branches together).
    After :meth:`fuse_reductions`, the 1x1 units that read the module's input are one unit,
    ``reduce``."""

    def __init__(self, c_in: int, spec: ModuleSpec, w, make_norm, act) -> None:
        super().__init__()
        self.copies = 1
        self.reduce: nn.Sequential | None = None
        self.reduce_sizes: list[int] = []
        s = spec.stride

        def unit(a: int, b: int, k: int, stride: int = 1) -> _Unit:
            return _Unit(a, b, k, stride, make_norm, act)

        self.branch1x1 = unit(c_in, w(spec.n1x1), 1) if spec.n1x1 else None
        self.branch3x3 = nn.Sequential(
            unit(c_in, w(spec.n3x3_reduce), 1), unit(w(spec.n3x3_reduce), w(spec.n3x3), 3, s)
        )
        self.branch_double = nn.Sequential(
            unit(c_in, w(spec.double_reduce), 1),
            unit(w(spec.double_reduce), w(spec.double), 3),
            unit(w(spec.double), w(spec.double), 3, s),
        )
        pool = nn.AvgPool2d if spec.pool == "avg" else nn.MaxPool2d
        # Avg pools do not count the zero padding, so border activations are not shrunk.
        pool_kw = {"count_include_pad": False} if spec.pool == "avg" else {}
        self.branch_pool = nn.Sequential(
            pool(3, s, 1, **pool_kw), *([unit(c_in, w(spec.proj), 1)] if spec.proj else [])
        )
        self.out_channels = (
            (w(spec.n1x1) if spec.n1x1 else 0)
            + w(spec.n3x3)
            + w(spec.double)
            + (w(spec.proj) if spec.proj else c_in)
        )

    def fuse_reductions(self) -> None:
        """Make the 1x1 units that read the module's input (the 1x1 branch's, the 3x3 and double
        3x3 branches' reductions) one unit over their channels side by side, whose output is
        split between the branches: the same function of the same parameter values (a norm's
        statistics are per channel), one wide product where there were two or three narrow
        ones. The parameters' names change (``reduce.*``; the branches' later units move up)."""
        if self.reduce is not None:
            return
        heads = [u for u in (self.branch1x1, self.branch3x3[0], self.branch_double[0]) if u is not None]  # fmt: skip
        conv = concat_convs([u[0] for u in heads])
        self.reduce = nn.Sequential(conv, concat_norms([u[1] for u in heads]), heads[0][2])
        self.reduce_sizes = [u[0].out_channels for u in heads]
        self.branch1x1 = None
        self.branch3x3 = nn.Sequential(*self.branch3x3[1:])
        self.branch_double = nn.Sequential(*self.branch_double[1:])

    def forward(self, x: Tensor) -> Tensor:
        if self.reduce is None:
            branches = [self.branch3x3(x), self.branch_double(x), self.branch_pool(x)]
            if self.branch1x1 is not None:
                branches.insert(0, self.branch1x1(x))
        else:
            *ones, r3, rd = split_per_copy(self.reduce(x), self.reduce_sizes, self.copies)
            branches = [*ones, self.branch3x3(r3), self.branch_double(rd), self.branch_pool(x)]
        return cat_per_copy(branches, self.copies)


class BNInception(nn.Module):
    """BN-Inception (BN paper, Figure 5), with the norm and the nonlinearity as arguments.

    Args:
        num_classes: outputs of the final linear layer.
        norm_layer: ``num_features -> layer`` for every convolution's output
            (:class:`bn.BatchNorm2d`, ``bn.get_norm_layer("batchrenorm", r_max=3.0)``,
            ``torch.nn.BatchNorm2d``, ...), or ``None``: no norm (the paper's "Inception"), the
            convolutions with a bias.
        activation: ``relu`` or ``sigmoid``.
        width: multiplies every layer's width (``0.25`` for a small CPU model).
        separable_stem: the paper's first layer, a 7x7 depthwise convolution with depth
            multiplier 8 followed by a 1x1 pointwise one; ``False``: a plain 7x7 convolution.
        lrn: local response normalization after the two stem convolutions (the original
            Inception's; BN-x5 removes it): :class:`~experiments.nets.lrn.LocalResponseNorm`,
            torch's layer to the last bit.
        dropout: dropout before the classifier (Inception: 0.4; BN-x5 removes it).
        in_channels: input channels.
        stem_stride: the stem's total stride: ``8`` is the paper's (a stride-2 first conv and
            two stride-2 max pools: 224 px in, 28x28 at module 3a); ``4`` drops the second
            pool, ``2`` both pools, ``1`` every stride (for small inputs such as 32x32).
        pool_columns: the columns the last feature map is averaged into (``1``: global average
            pooling, the paper's); ``3`` keeps one per item of a triple
            (:mod:`experiments.kit.triples`, whose class depends on which item is where).

    Every convolution and pool is padded and the head is an adaptive average pooling, so any input
    size works, down to 1x1 (below the total stride, ``stem_stride`` x 4, the last modules see a
    single position). Weights are initialized for the nonlinearity
    (:meth:`reset_weights`), so the networks without BN start with the same activation scale.
    """

    def __init__(
        self,
        num_classes: int = 1000,
        norm_layer: Callable[[int], nn.Module] | None = bn.BatchNorm2d,
        activation: str = "relu",
        width: float = 1.0,
        separable_stem: bool = False,
        lrn: bool = False,
        dropout: float = 0.0,
        in_channels: int = 3,
        stem_stride: int = 8,
        pool_columns: int = 1,
    ) -> None:
        super().__init__()
        if activation not in ("relu", "sigmoid"):
            raise ValueError(f"activation={activation!r} must be 'relu' or 'sigmoid'")
        if width <= 0:
            raise ValueError(f"width={width} must be positive")
        if stem_stride not in (1, 2, 4, 8):
            raise ValueError(f"stem_stride={stem_stride} must be 1, 2, 4 or 8")
        make_norm = norm_layer if norm_layer is not None else bn.get_norm_layer("none")
        act = nn.ReLU if activation == "relu" else nn.Sigmoid

        def w(c: int) -> int:
            return max(1, round(c * width))

        stem: list[nn.Module] = []
        first_stride = 2 if stem_stride >= 2 else 1
        if separable_stem:
            mult = 8
            stem += [
                nn.Conv2d(
                    in_channels,
                    in_channels * mult,
                    7,
                    first_stride,
                    3,
                    groups=in_channels,
                    bias=False,
                ),
                _Unit(in_channels * mult, w(64), 1, 1, make_norm, act),
            ]
        else:
            stem.append(_Unit(in_channels, w(64), 7, first_stride, make_norm, act))
        if stem_stride >= 4:
            stem.append(nn.MaxPool2d(3, 2, 1))
        if lrn:
            stem.append(LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0))
        stem += [
            _Unit(w(64), w(64), 1, 1, make_norm, act),
            _Unit(w(64), w(192), 3, 1, make_norm, act),
        ]
        if lrn:
            stem.append(LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0))
        if stem_stride == 8:
            stem.append(nn.MaxPool2d(3, 2, 1))
        self.stem = nn.Sequential(*stem)

        modules, c = {}, w(192)
        for name, spec in TABLE.items():
            m = InceptionModule(c, spec, w, make_norm, act)
            modules[name] = m
            c = m.out_channels
        self.inception = nn.ModuleDict(modules)
        self.out_channels = c
        self.pool = column_pooling(pool_columns)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(c * pool_columns, num_classes)
        self.reset_weights(activation)

    def reset_weights(self, activation: str = "relu") -> None:
        """He-normal weights (fan-in, gain for ``activation``: sqrt(2) for ReLU, 1 for sigmoid),
        zero biases; the classifier gets gain 1. The paper does not state its initialization."""
        gain = nn.init.calculate_gain(activation)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.normal_(m.weight, 0.0, (1.0 if m is self.fc else gain) / _fan_in(m) ** 0.5)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def features(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        for m in self.inception.values():
            x = m(x)
        return x

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.dropout(torch.flatten(self.pool(self.features(x)), 1)))

    def fuse_reductions(self) -> BNInception:
        """Every module's :meth:`InceptionModule.fuse_reductions`, in place; returns ``self``.
        The network computes the same function with the same parameter values, faster on a CPU
        (``python -m scripts.bench_studies``); its ``state_dict`` has the fused modules' names.
        Fuse after building (so a seed draws the same weights) and before stacking copies."""
        for m in self.inception.values():
            m.fuse_reductions()
        return self


def _fan_in(m: nn.Module) -> int:
    return m.weight[0].numel()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
