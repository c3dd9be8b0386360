"""Normalization followed by dropout and an activation, in one module (timm's ``BatchNormAct2d``
layout): what :func:`bn.convert_norm` turns timm's norm-act layers into, so that converting a
timm model keeps what those layers compute after the normalization."""

from __future__ import annotations

from torch import Tensor, nn

from .batchnorm import BatchNorm2d, _BatchNormXd
from .batchrenorm import BatchRenorm2d, _BatchRenormXd


class _NormAct:
    """The normalization of the class it is mixed into, then ``self.drop``, then ``self.act``
    (both ``nn.Identity`` unless given), under the names timm uses, so ``state_dict`` keys match."""

    def __init__(
        self, *args, drop: nn.Module | None = None, act: nn.Module | None = None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.drop = nn.Identity() if drop is None else drop
        self.act = nn.Identity() if act is None else act

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.drop(super().forward(x)))


class BatchNormAct2d(_NormAct, BatchNorm2d):
    """:class:`bn.BatchNorm2d`, then ``drop``, then ``act`` (keyword arguments, modules)."""


class BatchRenormAct2d(_NormAct, BatchRenorm2d):
    """:class:`bn.BatchRenorm2d`, then ``drop``, then ``act`` (keyword arguments, modules)."""


class _BatchNormActXd(_NormAct, _BatchNormXd):
    """BN over any input rank, then ``drop`` and ``act`` (from timm's ``SyncBatchNormAct``)."""


class _BatchRenormActXd(_NormAct, _BatchRenormXd):
    """Batch Renorm over any input rank, then ``drop`` and ``act``."""
