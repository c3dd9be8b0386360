"""Swap normalization layers in a model, and fold eval-mode BN into the layer before it."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ._base import BatchNormBase
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNormXd
from .batchrenorm import (
    PAPER_MOMENTUM,
    BatchRenorm1d,
    BatchRenorm2d,
    BatchRenorm3d,
    BatchRenormBase,
    _BatchRenormXd,
)

_KINDS: dict[str, tuple[type[BatchNormBase], ...]] = {
    "batchnorm": (BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNormXd),
    "batchrenorm": (BatchRenorm1d, BatchRenorm2d, BatchRenorm3d, _BatchRenormXd),
}
# nn.SyncBatchNorm takes any rank (N, C, *): it becomes the any-rank layer, index 3.
_TORCH_DIMS = {nn.BatchNorm1d: 0, nn.BatchNorm2d: 1, nn.BatchNorm3d: 2, nn.SyncBatchNorm: 3}


def _dim_index(layer: nn.Module) -> int | None:
    """0, 1, 2 for a 1d, 2d, 3d BN layer (torch's or ours), 3 for any rank (``SyncBatchNorm``);
    None for anything else."""
    for classes in _KINDS.values():
        for i, cls in enumerate(classes):
            if isinstance(layer, cls):
                return i
    for cls, i in _TORCH_DIMS.items():
        if isinstance(layer, cls):
            return i
    return None


def _settings(layer: _BatchNorm) -> dict:
    s = dict(
        eps=layer.eps,
        momentum=layer.momentum,
        affine=layer.affine,
        track_running_stats=layer.track_running_stats,
        bias=layer.bias is not None or not layer.affine,
    )
    if isinstance(layer, BatchNormBase):
        s.update(
            impl=layer.impl,
            microbatch=layer.microbatch,
            sync_stats=layer.sync_stats,
            process_group=layer.process_group,
        )
    elif isinstance(layer, nn.SyncBatchNorm):
        s.update(sync_stats=True, process_group=layer.process_group)
    if isinstance(layer, BatchRenormBase):
        s.update(r_max=layer.r_max, d_max=layer.d_max)
    return s


def _rebuild(layer: _BatchNorm, cls: type[BatchNormBase], overrides: dict) -> BatchNormBase:
    settings = _settings(layer)
    if not issubclass(cls, BatchRenormBase):
        settings.pop("r_max", None)
        settings.pop("d_max", None)
    elif not isinstance(layer, BatchRenormBase):
        # BN's update rate (torch's 0.1) is not Batch Renorm's: the paper's α for a new BRN.
        settings["momentum"] = PAPER_MOMENTUM
    settings.update(overrides)
    p = layer.weight if layer.weight is not None else layer.running_mean
    new = cls(
        layer.num_features,
        **settings,
        device=p.device if p is not None else None,
        dtype=p.dtype if p is not None else None,
    )
    if layer.affine and new.affine:
        new.weight, new.bias = layer.weight, layer.bias  # shared, like torch's converter
    if layer.track_running_stats and new.track_running_stats:
        with torch.no_grad():
            new.running_mean.copy_(layer.running_mean)
            new.running_var.copy_(layer.running_var)
            new.num_batches_tracked.copy_(layer.num_batches_tracked)
    new.train(layer.training)
    return new


def _replace(module: nn.Module, fn: Callable[[nn.Module], nn.Module | None]) -> nn.Module:
    new = fn(module)
    if new is not None:
        return new
    for name, child in module.named_children():
        module.add_module(name, _replace(child, fn))
    return module


def convert_norm(module: nn.Module, kind: str = "batchnorm", **overrides) -> nn.Module:
    """Replace every BatchNorm1d/2d/3d and SyncBatchNorm (torch's or ours) in ``module`` with ours.

    Weights are shared with the old layers, running statistics and ``num_batches_tracked``
    copied; settings (``eps``, ``momentum``, ``affine``, ``microbatch``, ...) are kept unless given
    in ``overrides``, with one exception: a BN layer that becomes Batch Renorm gets the paper's
    moving-average rate ``momentum=0.01`` (``α``), not BN's (torch's 0.1), unless ``momentum`` is
    in ``overrides``. An ``nn.SyncBatchNorm`` becomes a layer with ``sync_stats=True`` (and its
    process group) that accepts any input rank ``(N, C, *)``, as torch's does.

    Args:
        module: a model (changed in place and returned) or a single BN layer (returned new).
        kind: ``"batchnorm"`` or ``"batchrenorm"``.
        **overrides: constructor arguments for the new layers, e.g. ``microbatch=4`` or
            ``r_max=3.0``.

    Example::

        >>> model = bn.convert_norm(torchvision.models.resnet18(), "batchrenorm", momentum=0.01)
    """
    if kind not in _KINDS:
        raise ValueError(f"convert_norm: kind={kind!r} is not one of {sorted(_KINDS)}")

    def swap(m: nn.Module) -> nn.Module | None:
        i = _dim_index(m)
        return None if i is None else _rebuild(m, _KINDS[kind][i], overrides)

    return _replace(module, swap)


def convert_sync_batchnorm(
    module: nn.Module, process_group: dist.ProcessGroup | None = None
) -> nn.Module:
    """Make every BN layer compute its statistics across processes; BRN layers stay BRN.

    Unlike ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``, which rebuilds any ``_BatchNorm``
    subclass as plain ``SyncBatchNorm`` (silently dropping Batch Renorm), this keeps each layer's
    kind and settings and sets ``sync_stats=True``. torch's BatchNorm layers become ours.
    A layer with ``microbatch`` set is left as it is: its statistics are per microbatch of
    examples by design, the same whatever the number of processes.
    """

    def swap(m: nn.Module) -> nn.Module | None:
        i = _dim_index(m)
        if i is None:
            return None
        if getattr(m, "microbatch", None) is not None:
            return m
        cls = type(m) if isinstance(m, BatchNormBase) else _KINDS["batchnorm"][i]
        return _rebuild(m, cls, {"sync_stats": True, "process_group": process_group})

    return _replace(module, swap)


@torch.no_grad()
def bn_affine(layer: _BatchNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """The inference BN as one affine map ``y = scale·x + shift`` (Algorithm 2, step 11).

    ``scale = γ / sqrt(Var[x] + ε)``, ``shift = β − scale·E[x]``.
    """
    if layer.running_mean is None:
        raise ValueError(f"bn_affine: {layer} has no running statistics to fold")
    scale = torch.rsqrt(layer.running_var + layer.eps)
    shift = -layer.running_mean * scale
    if layer.weight is not None:
        scale = scale * layer.weight
        shift = shift * layer.weight
    if layer.bias is not None:
        shift = shift + layer.bias
    return scale, shift


_FOLDABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@torch.no_grad()
def fuse_linear_bn(layer: nn.Module, norm: _BatchNorm) -> nn.Module:
    """A copy of the ``Linear``/``Conv`` ``layer`` with the eval-mode ``norm`` after it folded in."""
    if not isinstance(layer, _FOLDABLE):
        raise ValueError(f"fuse_linear_bn: cannot fold BN into {type(layer).__name__}")
    if norm.training:
        raise ValueError(
            "fuse_linear_bn: the BN layer is in training mode; call model.eval() first"
        )
    out_features = layer.weight.shape[0]
    if out_features != norm.num_features:
        raise ValueError(
            f"fuse_linear_bn: {type(layer).__name__} has {out_features} outputs but the BN has "
            f"{norm.num_features} features"
        )
    scale, shift = bn_affine(norm)
    fused = copy.deepcopy(layer)
    fused.weight.mul_(scale.view(-1, *[1] * (layer.weight.dim() - 1)))
    bias = layer.bias if layer.bias is not None else torch.zeros_like(scale)
    fused.bias = nn.Parameter(scale * bias + shift)
    return fused


def fuse_bn_eval(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (in eval mode) with each BN that directly follows a ``Linear`` or
    ``Conv`` inside an ``nn.Sequential`` folded into it; the BN becomes ``nn.Identity``.
    Outputs are unchanged up to floating-point rounding."""
    fused = copy.deepcopy(model).eval()
    for seq in [m for m in fused.modules() if isinstance(m, nn.Sequential)]:
        names = list(seq._modules)
        for prev, name in itertools.pairwise(names):
            if isinstance(seq._modules[name], _BatchNorm) and isinstance(
                seq._modules[prev], _FOLDABLE
            ):
                seq._modules[prev] = fuse_linear_bn(seq._modules[prev], seq._modules[name])
                seq._modules[name] = nn.Identity()
    return fused
