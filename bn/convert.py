"""Swap normalization layers in a model, and fold eval-mode BN into the layer before it."""

from __future__ import annotations

import copy
import itertools

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.lazy import LazyModuleMixin

from ._base import TORCH_TAKES_BIAS, BatchNormBase
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNormXd
from .batchrenorm import (
    PAPER_MOMENTUM,
    BatchRenorm1d,
    BatchRenorm2d,
    BatchRenorm3d,
    BatchRenormBase,
    _BatchRenormXd,
)
from .norm_act import (
    BatchNormAct2d,
    BatchRenormAct2d,
    _BatchNormActXd,
    _BatchRenormActXd,
    _NormAct,
)

_KINDS: dict[str, tuple[type[BatchNormBase], ...]] = {
    "batchnorm": (BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNormXd),
    "batchrenorm": (BatchRenorm1d, BatchRenorm2d, BatchRenorm3d, _BatchRenormXd),
}
# The same with dropout and an activation after the norm, where such a layer exists.
_KINDS_ACT: dict[str, dict[int, type[BatchNormBase]]] = {
    "batchnorm": {1: BatchNormAct2d, 3: _BatchNormActXd},
    "batchrenorm": {1: BatchRenormAct2d, 3: _BatchRenormActXd},
}
# nn.SyncBatchNorm takes any rank (N, C, *): it becomes the any-rank layer, index 3.
_TORCH_DIMS = {nn.BatchNorm1d: 0, nn.BatchNorm2d: 1, nn.BatchNorm3d: 2, nn.SyncBatchNorm: 3}
# timm's norm-dropout-activation layers, known by name so that timm need not be installed.
_TIMM_NORM_ACT = {
    "timm.layers.norm_act.BatchNormAct2d": 1,
    "timm.layers.norm_act.SyncBatchNormAct": 3,
}


def _classify(layer: nn.Module) -> tuple[int, bool] | None:
    """``(dimension index, has drop and act)`` of a BN layer the converters know exactly (0, 1, 2
    for 1d, 2d, 3d; 3 for any rank); ``None`` for any other module."""
    cls = type(layer)
    for kind, classes in _KINDS.items():
        if cls in classes:
            return classes.index(cls), False
        for i, act_cls in _KINDS_ACT[kind].items():
            if cls is act_cls:
                return i, True
    if cls in _TORCH_DIMS:
        return _TORCH_DIMS[cls], False
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name in _TIMM_NORM_ACT and isinstance(layer, _BatchNorm):
        return _TIMM_NORM_ACT[name], True
    return None


def _kind_of(layer: nn.Module, skip: tuple[type, ...]) -> tuple[int, bool] | None:
    """:func:`_classify`, ``None`` for the ``skip`` classes, and an error for any other BN layer:
    a subclass may compute more than the normalization (timm's ``BatchNormAct2d`` adds an
    activation), which replacing it would silently drop."""
    if isinstance(layer, skip):
        return None
    if isinstance(layer, torch.jit.ScriptModule) and "BatchNorm" in layer.original_name:
        raise ValueError(
            f"bn: cannot convert a TorchScript {layer.original_name}: convert the eager model, "
            "then script it"
        )
    found = _classify(layer)
    if found is None and isinstance(layer, _BatchNorm):
        cls = type(layer)
        if isinstance(layer, LazyModuleMixin) and layer.has_uninitialized_params():
            why = "its parameters are not initialized yet; run one forward pass first"
        else:
            why = (
                "a subclass of a BN layer may compute more than the normalization, which the "
                "conversion would drop; convert it yourself, or pass skip=(" + cls.__name__ + ",) "
                "to leave it as it is"
            )
        raise ValueError(f"bn: cannot convert {cls.__module__}.{cls.__qualname__}: {why}")
    return found


def _swap_all(module: nn.Module, skip: tuple[type, ...], make) -> nn.Module:
    """``module`` with every BN layer ``m`` the converters know replaced by ``make(m, found)``
    (``found`` from :func:`_kind_of`; ``make`` may return ``m``). Every replacement is built
    before any is put in place, so a refusal leaves the model as it was; a layer that appears
    twice gets one replacement."""
    found = _kind_of(module, skip)
    if found is not None:  # a single layer
        return make(module, found)
    built: dict[int, nn.Module] = {}
    places = []
    for parent in module.modules():
        for name, child in parent._modules.items():  # every slot (named_children skips repeats)
            found = None if child is None else _kind_of(child, skip)
            if found is not None:
                if id(child) not in built:
                    built[id(child)] = make(child, found)
                places.append((parent, name, built[id(child)]))
    for parent, name, new in places:
        parent.add_module(name, new)
    return module


def _target(kind: str, index: int, act: bool) -> type[BatchNormBase]:
    return _KINDS_ACT[kind][index] if act else _KINDS[kind][index]


def _settings(layer: _BatchNorm, cls: type[_BatchNorm]) -> dict:
    """The constructor arguments of a ``cls`` that computes what ``layer`` computes."""
    s = dict(
        eps=layer.eps,
        momentum=layer.momentum,
        affine=layer.affine,
        track_running_stats=layer.track_running_stats,
    )
    if TORCH_TAKES_BIAS or issubclass(cls, BatchNormBase):  # else _rebuild shares the None bias
        s["bias"] = layer.bias is not None or not layer.affine
    if issubclass(cls, BatchNormBase):
        if isinstance(layer, BatchNormBase):
            s.update(
                impl=layer.impl,
                microbatch=layer.microbatch,
                sync_stats=layer.sync_stats,
                process_group=layer.process_group,
            )
        elif isinstance(layer, nn.SyncBatchNorm):
            s.update(sync_stats=True, process_group=layer.process_group)
        if issubclass(cls, BatchRenormBase):
            if isinstance(layer, BatchRenormBase):
                s.update(r_max=layer.r_max, d_max=layer.d_max)
            else:  # BN's update rate (torch's 0.1) is not Batch Renorm's: the paper's α
                s["momentum"] = PAPER_MOMENTUM
    elif issubclass(cls, nn.SyncBatchNorm):
        s["process_group"] = getattr(layer, "process_group", None)
    return s


def _rebuild(layer: _BatchNorm, cls: type[_BatchNorm], overrides: dict) -> _BatchNorm:
    settings = _settings(layer, cls) | overrides
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
    if isinstance(new, _NormAct):
        new.drop, new.act = layer.drop, layer.act  # shared, as the weights
    new.train(layer.training)
    return new


def convert_norm(
    module: nn.Module, kind: str = "batchnorm", *, skip: tuple[type, ...] = (), **overrides
) -> nn.Module:
    """Replace every BatchNorm1d/2d/3d and SyncBatchNorm (torch's or ours) in ``module`` with ours.

    Only those classes are replaced, matched exactly, and timm's ``BatchNormAct2d`` and
    ``SyncBatchNormAct`` (norm, dropout, activation), which become :class:`bn.BatchNormAct2d` (or
    the Batch Renorm one) with their ``drop`` and ``act`` kept. Any other subclass of a BN layer
    raises a ``ValueError`` naming its class, since replacing it could change what the model
    computes; list such classes in ``skip`` to leave them as they are. An uninitialized
    ``LazyBatchNorm*`` raises too (run one forward pass first).

    Weights are shared with the old layers, running statistics and ``num_batches_tracked``
    copied; settings (``eps``, ``momentum``, ``affine``, ``microbatch``, ...) are kept unless given
    in ``overrides``, with one exception: a BN layer that becomes Batch Renorm gets the paper's
    moving-average rate ``momentum=0.01`` (``α``), not BN's (torch's 0.1), unless ``momentum`` is
    in ``overrides``. An ``nn.SyncBatchNorm`` becomes a layer with ``sync_stats=True`` (and its
    process group) that accepts any input rank ``(N, C, *)``, as torch's does.

    Args:
        module: a model (changed in place and returned) or a single BN layer (returned new).
        kind: ``"batchnorm"`` or ``"batchrenorm"``.
        skip: BN classes to leave as they are.
        **overrides: constructor arguments for the new layers, e.g. ``microbatch=4`` or
            ``r_max=3.0``.

    Example::

        >>> model = bn.convert_norm(torchvision.models.resnet18(), "batchrenorm", microbatch=4)
        >>> sum(isinstance(m, bn.BatchRenorm2d) for m in model.modules())
        20
        >>> model.bn1.momentum, model.bn1.microbatch  # BN's momentum becomes the paper's α
        (0.01, 4)
    """
    if kind not in _KINDS:
        raise ValueError(f"convert_norm: kind={kind!r} is not one of {sorted(_KINDS)}")

    return _swap_all(module, skip, lambda m, found: _rebuild(m, _target(kind, *found), overrides))


def convert_sync_batchnorm(
    module: nn.Module,
    process_group: dist.ProcessGroup | None = None,
    *,
    skip: tuple[type, ...] = (),
) -> nn.Module:
    """Make every BN layer compute its statistics across processes; BRN layers stay BRN.

    Unlike ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``, which rebuilds any ``_BatchNorm``
    subclass as plain ``SyncBatchNorm`` (silently dropping Batch Renorm), this keeps each layer's
    kind and settings and sets ``sync_stats=True``. torch's BatchNorm layers become ours.
    A layer with ``microbatch`` set is left as it is: its statistics are per microbatch of
    examples by design, the same whatever the number of processes. Which classes are converted,
    and ``skip``, are as in :func:`convert_norm`.
    """

    def make(m: nn.Module, found: tuple[int, bool]) -> nn.Module:
        if getattr(m, "microbatch", None) is not None:
            return m
        cls = type(m) if isinstance(m, BatchNormBase) else _target("batchnorm", *found)
        return _rebuild(m, cls, {"sync_stats": True, "process_group": process_group})

    return _swap_all(module, skip, make)


_TORCH_CLASSES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def to_torch(module: nn.Module) -> nn.Module:
    """Replace every layer of :mod:`bn` in ``module`` with ``torch.nn``'s, e.g. for deployment.

    Parameters are shared with the old layers and running statistics copied, so inference
    computes exactly what it computed (Batch Renorm's ``running_var = σ² − ε`` is what torch's
    BN reads as its variance). ``bn.BatchNorm1d/2d/3d`` and ``bn.BatchRenorm1d/2d/3d`` become
    ``nn.BatchNorm1d/2d/3d`` (training then is torch's BN: whole-batch statistics, no ``r``,
    ``d``); layers with ``sync_stats=True`` and any-rank layers become ``nn.SyncBatchNorm``;
    :class:`bn.BatchNormAct2d` and :class:`bn.BatchRenormAct2d` become
    ``nn.Sequential(norm, drop, act)`` (their ``state_dict`` keys gain a ``0.``).

    Example::

        >>> model = bn.convert_norm(torchvision.models.resnet18(), "batchrenorm").eval()
        >>> plain = bn.to_torch(copy.deepcopy(model))
        >>> type(plain.bn1), torch.equal(plain(x := torch.randn(2, 3, 32, 32)), model(x))
        (<class 'torch.nn.modules.batchnorm.BatchNorm2d'>, True)
    """

    def make(m: nn.Module, found: tuple[int, bool]) -> nn.Module:
        if not isinstance(m, BatchNormBase):
            return m
        index, act = found
        new = _rebuild(m, nn.SyncBatchNorm if m.sync_stats else _TORCH_CLASSES[index], {})
        return nn.Sequential(new, m.drop, m.act) if act else new

    return _swap_all(module, (), make)


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


def fuse_linear_bn(layer: nn.Module, norm: _BatchNorm) -> nn.Module:
    """A copy of the ``Linear``/``Conv`` ``layer`` with the eval-mode ``norm`` after it folded in.

    ``norm`` must be a BN layer the converters know exactly (torch's or ours, not one that also
    applies an activation, whose output the fused layer could not give)."""
    found = _classify(norm)
    if found is None or found[1]:
        raise ValueError(
            f"fuse_linear_bn: {type(norm).__qualname__} computes more than the normalization; "
            "only plain BN layers fold into the layer before them (see fuse_bn_eval)"
        )
    return _fold_into(layer, norm)


@torch.no_grad()
def _fold_into(layer: nn.Module, norm: _BatchNorm) -> nn.Module:
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
    ``Conv`` inside an ``nn.Sequential`` folded into it; the BN becomes ``nn.Identity`` (a
    norm-act layer, ``nn.Sequential(drop, act)``). Only the BN classes the converters know are
    folded; other subclasses are left as they are. Outputs are unchanged up to floating-point
    rounding.

    Example::

        >>> model = nn.Sequential(nn.Conv2d(3, 8, 3), bn.BatchNorm2d(8), nn.ReLU())
        >>> _ = model(torch.randn(4, 3, 8, 8))  # a training step moves the running statistics
        >>> fused = bn.fuse_bn_eval(model)
        >>> fused[1], torch.allclose(fused(x := torch.randn(2, 3, 8, 8)), model.eval()(x), atol=1e-6)
        (Identity(), True)
    """
    fused = copy.deepcopy(model).eval()
    for seq in [m for m in fused.modules() if isinstance(m, nn.Sequential)]:
        names = list(seq._modules)
        for prev, name in itertools.pairwise(names):
            before, norm = seq._modules[prev], seq._modules[name]
            found = _classify(norm)
            if found is None or not isinstance(before, _FOLDABLE):
                continue  # not BN, or a BN subclass that may do more: left as it is
            seq._modules[prev] = _fold_into(before, norm)
            seq._modules[name] = nn.Sequential(norm.drop, norm.act) if found[1] else nn.Identity()
    return fused
