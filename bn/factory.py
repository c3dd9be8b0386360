"""Build a normalization layer from a name, so models and configs can choose one."""

from __future__ import annotations

import functools
from collections.abc import Callable

from torch import nn

from .batchnorm import BatchNorm1d, BatchNorm2d
from .batchrenorm import BatchRenorm1d, BatchRenorm2d
from .lp_batchnorm import (
    L1BatchNorm1d,
    L1BatchNorm2d,
    LinfBatchNorm1d,
    LinfBatchNorm2d,
    MeanOnlyBatchNorm1d,
    MeanOnlyBatchNorm2d,
)

NormFactory = Callable[[int], nn.Module]

_LAYERS: dict[str, dict[int, Callable[..., nn.Module]]] = {
    "batchnorm": {1: BatchNorm1d, 2: BatchNorm2d},
    "batchrenorm": {1: BatchRenorm1d, 2: BatchRenorm2d},
    "torchbatchnorm": {1: nn.BatchNorm1d, 2: nn.BatchNorm2d},
    "l1batchnorm": {1: L1BatchNorm1d, 2: L1BatchNorm2d},
    "linfbatchnorm": {1: LinfBatchNorm1d, 2: LinfBatchNorm2d},
    "meanonlybatchnorm": {1: MeanOnlyBatchNorm1d, 2: MeanOnlyBatchNorm2d},
}
_ALIASES = {"bn": "batchnorm", "brn": "batchrenorm", "torchbn": "torchbatchnorm"}
NAMES = (
    "none", "batchnorm", "batchrenorm", "torch_batchnorm", "groupnorm", "layernorm",
    "l1_batchnorm", "linf_batchnorm", "meanonly_batchnorm",
)  # fmt: skip


def get_norm_layer(name: str | None, dims: int = 2, **kwargs) -> NormFactory:
    """A factory ``num_features -> layer`` for the norm called ``name``.

    Args:
        name: ``none``, ``batchnorm`` (``bn``), ``batchrenorm`` (``brn``), ``torch_batchnorm``,
            ``groupnorm``, ``layernorm``, ``l1_batchnorm``, ``linf_batchnorm`` or
            ``meanonly_batchnorm`` (underscores and case ignored).
        dims: 1 for ``(N, C)`` / ``(N, C, L)`` inputs, 2 for ``(N, C, H, W)``.
        **kwargs: constructor arguments of the layer (``groups`` sets GroupNorm's group count).
    """
    key = "none" if name is None else name.replace("_", "").replace("-", "").lower()
    key = _ALIASES.get(key, key)
    if key == "none":
        return lambda num_features: nn.Identity()
    if key in _LAYERS:
        if dims not in _LAYERS[key]:
            raise ValueError(f"get_norm_layer: dims={dims} must be 1 or 2")
        return functools.partial(_LAYERS[key][dims], **kwargs)
    if key == "groupnorm":
        groups = kwargs.pop("groups", 32)
        return lambda c: nn.GroupNorm(min(groups, c), c, **kwargs)
    if key == "layernorm":
        # LayerNorm over all of (C, H, W) is GroupNorm with one group.
        return lambda c: nn.GroupNorm(1, c, **kwargs)
    raise ValueError(f"get_norm_layer: unknown norm {name!r}; choose one of {NAMES}")
