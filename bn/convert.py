"""Swap normalization layers in a model, and fold eval-mode BN into the layer before it."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Literal, overload

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm, _NormBase
from torch.nn.modules.lazy import LazyModuleMixin

from ._base import TORCH_TAKES_BIAS, BatchNormBase
from ._foreign_sync import own_conversion
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNormXd
from .batchrenorm import (
    PAPER_MOMENTUM,
    BatchRenorm1d,
    BatchRenorm2d,
    BatchRenorm3d,
    BatchRenormBase,
    _BatchRenormXd,
)
from .norm_act import _NormAct, norm_act

_KINDS: dict[str, tuple[type[BatchNormBase], ...]] = {
    "batchnorm": (BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNormXd),
    "batchrenorm": (BatchRenorm1d, BatchRenorm2d, BatchRenorm3d, _BatchRenormXd),
}
# nn.SyncBatchNorm takes any rank (N, C, *): it becomes the any-rank layer, index 3.
_TORCH_DIMS = {nn.BatchNorm1d: 0, nn.BatchNorm2d: 1, nn.BatchNorm3d: 2, nn.SyncBatchNorm: 3}
# timm's norm-dropout-activation layers, known by name so that timm need not be installed.
_TIMM_NORM_ACT = {
    "timm.layers.norm_act.BatchNormAct2d": 1,
    "timm.layers.norm_act.SyncBatchNormAct": 3,
}
# Frozen BN (statistics and affine parameters as buffers, no training step): torchvision's (which
# timm uses too) and timm's with dropout and activation; by name, as neither need be installed.
# The value: whether the layer has ``drop`` and ``act``. All are 2d (index 1).
_FROZEN = {
    "torchvision.ops.misc.FrozenBatchNorm2d": False,
    "timm.layers.norm_act.FrozenBatchNormAct2d": True,
}


def _class_name(layer: nn.Module) -> str:
    cls = type(layer)
    return f"{cls.__module__}.{cls.__qualname__}"


def _classify(layer: nn.Module) -> tuple[int, bool] | None:
    """``(dimension index, has drop and act)`` of a BN layer the converters know exactly (0, 1, 2
    for 1d, 2d, 3d; 3 for any rank); ``None`` for any other module."""
    cls = type(layer)
    for classes in _KINDS.values():
        if cls in classes:
            return classes.index(cls), False
    if cls in _TORCH_DIMS:
        return _TORCH_DIMS[cls], False
    name = _class_name(layer)
    if name in _TIMM_NORM_ACT and isinstance(layer, _BatchNorm):
        return _TIMM_NORM_ACT[name], True
    return None


def _frozen_act(layer: nn.Module) -> bool | None:
    """For a frozen BN layer (:data:`_FROZEN`), whether it has ``drop`` and ``act``; else ``None``."""
    return _FROZEN.get(_class_name(layer))


def _kind_of(layer: nn.Module) -> tuple[int, bool] | None:
    """:func:`_classify`, and an error for any other BN layer: a subclass may compute more than
    the normalization (timm's ``BatchNormAct2d`` adds an activation), which replacing it would
    silently drop."""
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
        raise ValueError(f"bn: cannot convert {_class_name(layer)}: {why}")
    return found


# make(layer, index) builds a known BN layer's replacement, a plain norm of the dimension index
# (or returns the layer, to keep it); make_frozen(layer) a frozen one's. Without make_frozen,
# frozen layers are kept. A layer with dropout and an activation gets them back by norm_act.
_Make = Callable[[nn.Module, int], nn.Module]
_MakeFrozen = Callable[[nn.Module], nn.Module]


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    """What :func:`bn.convert_norm` or :func:`bn.convert_sync_batchnorm` did to a model
    (``return_report=True``).

    Attributes:
        replaced: how many normalization layers were replaced (a layer held in two places counts once).
        by_class: the replaced layers counted by their class name, e.g. ``{"BatchNorm2d": 20}``.
        kept: the normalization layers left as they were, by class name: frozen BN layers without
            ``frozen=True``, the classes in ``skip``, and (for ``convert_sync_batchnorm``) layers
            with ``microbatch`` set.
    """

    replaced: int
    by_class: dict[str, int]
    kept: dict[str, int]


def _plan(
    layer: nn.Module, skip: tuple[type, ...], make: _Make, make_frozen: _MakeFrozen | None
) -> nn.Module | None:
    """What goes in ``layer``'s place: ``None`` if it is no BN layer, ``layer`` itself if kept.

    A norm-act layer's replacement keeps its ``drop`` and ``act`` (shared) outside the norm, in
    a :mod:`bn` norm-act block; a :mod:`bn` norm-act block is rebuilt around its norm's."""
    if isinstance(layer, skip):
        return layer
    if isinstance(layer, _NormAct):
        new = _plan(layer.norm, skip, make, make_frozen)
        if new is None or new is layer.norm:
            return None  # the walk goes on into the block, where its norm is kept (and counted)
        return norm_act(new, layer.drop, layer.act)
    act = _frozen_act(layer)
    if act is not None:
        new = layer if make_frozen is None else make_frozen(layer)
    else:
        found = _kind_of(layer)
        if found is None:
            return None
        act = found[1]
        new = make(layer, found[0])
    return norm_act(new, layer.drop, layer.act) if act and new is not layer else new


def _swap_all(
    module: nn.Module,
    skip: tuple[type, ...],
    make: _Make,
    make_frozen: _MakeFrozen | None = None,
) -> tuple[nn.Module, ConversionReport]:
    """``module`` with every BN layer the converters know replaced as :func:`_plan` says, and
    what was done. Every replacement is built before any is put in place, so a refusal leaves
    the model as it was; a layer that appears twice gets one replacement."""
    top = _plan(module, skip, make, make_frozen)
    if top is not None and not isinstance(module, skip):  # a single layer
        return top, _report({id(module): (module, top)})
    built: dict[int, tuple[nn.Module, nn.Module | None]] = {}
    places = []

    def visit(parent: nn.Module) -> None:
        for name, child in parent._modules.items():  # every slot (named_children skips repeats)
            if child is None:
                continue
            first = id(child) not in built
            if first:
                built[id(child)] = (child, _plan(child, skip, make, make_frozen))
            new = built[id(child)][1]
            if new is None:
                if first:
                    visit(child)
            elif new is not child:  # a kept layer is left whole, a replaced one's
                places.append((parent, name, new))  # children go with it, planned there

    visit(module)
    with own_conversion():
        for parent, name, new in places:
            parent.add_module(name, new)
    return module, _report(built)


def _report(built: dict[int, tuple[nn.Module, nn.Module | None]]) -> ConversionReport:
    replaced, kept = Counter(), Counter()
    for old, new in built.values():
        if new is not None:
            (kept if new is old else replaced)[type(old).__name__] += 1
    return ConversionReport(sum(replaced.values()), dict(replaced), dict(kept))


# torch's normalization layers, and others by name (timm's LayerNorm2d, RmsNorm2d, norm-act and
# frozen layers), not blocks that hold one (torchvision's Conv2dNormActivation).
_TORCH_NORMS = (_NormBase, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.LocalResponseNorm)
_NORM_NAME = re.compile(r"Norm(Act)?(\dd)?$")


def _is_norm(m: nn.Module) -> bool:
    if isinstance(m, _NormAct):  # bn's norm-act block: its norm is counted, not the block too
        return False
    return isinstance(m, _TORCH_NORMS) or bool(_NORM_NAME.search(type(m).__name__))


def _warn_if_nothing_replaced(
    function: str, module: nn.Module, report: ConversionReport, hint: str
) -> None:
    """A warning naming the normalization classes in ``module``, and ``hint``, when ``report``
    shows no layer replaced (e.g. a detector whose backbone holds only ``FrozenBatchNorm2d``)."""
    if report.replaced:
        return
    norms = Counter(type(m).__name__ for m in module.modules() if _is_norm(m))
    held = ", ".join(f"{n} {name}" for name, n in norms.most_common()) or "no normalization layer"
    warnings.warn(f"bn.{function} replaced no layer: the model holds {held}{hint}", stacklevel=3)


def _kept_frozen(report: ConversionReport) -> bool:
    return any(name.rsplit(".", 1)[1] in report.kept for name in _FROZEN)


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
    new.train(layer.training)
    return new


@torch.no_grad()
def _from_frozen(layer: nn.Module, cls: type[BatchNormBase], overrides: dict) -> BatchNormBase:
    """A ``cls`` computing in eval mode what the frozen BN ``layer``'s normalization computes: its
    ``eps``, its statistics and affine parameters copied (the buffers become trainable
    parameters); ``num_batches_tracked`` starts at 0."""
    settings = {"eps": layer.eps}
    if issubclass(cls, BatchRenormBase):
        settings["momentum"] = PAPER_MOMENTUM
    weight = layer.weight
    new = cls(weight.numel(), **(settings | overrides), device=weight.device, dtype=weight.dtype)
    for name in ("weight", "bias", "running_mean", "running_var"):
        if getattr(new, name) is not None:
            getattr(new, name).copy_(getattr(layer, name))
    return new.train(layer.training)


_SYNC_HINT = (
    "; left as they are: layers with microbatch set (per-microbatch statistics by design) and "
    "frozen BN layers (no batch statistics)"
)
_FROZEN_HINT = (
    "; pass frozen=True to convert FrozenBatchNorm2d too (its statistics, affine parameters and "
    "eps carried over)"
)


@overload
def convert_norm(
    module: nn.Module,
    kind: str = ...,
    *,
    skip: tuple[type, ...] = ...,
    frozen: bool = ...,
    return_report: Literal[False] = ...,
    **overrides,
) -> nn.Module: ...


@overload
def convert_norm(
    module: nn.Module,
    kind: str = ...,
    *,
    skip: tuple[type, ...] = ...,
    frozen: bool = ...,
    return_report: Literal[True],
    **overrides,
) -> tuple[nn.Module, ConversionReport]: ...


def convert_norm(
    module: nn.Module,
    kind: str = "batchnorm",
    *,
    skip: tuple[type, ...] = (),
    frozen: bool = False,
    return_report: bool = False,
    **overrides,
) -> nn.Module | tuple[nn.Module, ConversionReport]:
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

    Frozen BN layers (``torchvision.ops.FrozenBatchNorm2d``, which timm uses too, and timm's
    ``FrozenBatchNormAct2d``: the backbones of torchvision's detectors) are left as they are
    unless ``frozen=True``: then each becomes a 2d layer of ``kind`` (a norm-act layer for
    timm's, its ``drop`` and ``act`` kept) with its ``eps``, running statistics, weight and bias
    copied, so that in eval mode it computes what it computed. Its weight and bias become
    trainable parameters, and its ``num_batches_tracked`` starts at 0; the momentum is torch's
    0.1 (BN) or the paper's 0.01 (Batch Renorm) unless in ``overrides``.

    When no layer is replaced, a warning names the normalization classes the model holds.

    Args:
        module: a model (changed in place and returned) or a single BN layer (returned new).
        kind: ``"batchnorm"`` or ``"batchrenorm"``.
        skip: BN classes to leave as they are.
        frozen: convert frozen BN layers too. Default: ``False``.
        return_report: return ``(module, report)``, the :class:`bn.ConversionReport` saying how
            many layers were replaced and which were kept. Default: ``False``.
        **overrides: constructor arguments for the new layers, e.g. ``microbatch=4`` or
            ``r_max=3.0``.

    Example::

        >>> model = bn.convert_norm(torchvision.models.resnet18(), "batchrenorm", microbatch=4)
        >>> sum(isinstance(m, bn.BatchRenorm2d) for m in model.modules())
        20
        >>> model.bn1.momentum, model.bn1.microbatch  # BN's momentum becomes the paper's α
        (0.01, 4)
        >>> frozen_bn = torchvision.ops.FrozenBatchNorm2d
        >>> model = torchvision.models.resnet18(norm_layer=frozen_bn)
        >>> _, report = bn.convert_norm(model, frozen=True, return_report=True)
        >>> report
        ConversionReport(replaced=20, by_class={'FrozenBatchNorm2d': 20}, kept={})
    """
    if kind not in _KINDS:
        raise ValueError(f"convert_norm: kind={kind!r} is not one of {sorted(_KINDS)}")

    def make_frozen(m: nn.Module) -> nn.Module:
        return _from_frozen(m, _KINDS[kind][1], overrides)

    module, report = _swap_all(
        module,
        skip,
        lambda m, index: _rebuild(m, _KINDS[kind][index], overrides),
        make_frozen if frozen else None,
    )
    hint = _FROZEN_HINT if _kept_frozen(report) else ""
    _warn_if_nothing_replaced("convert_norm", module, report, hint)
    return (module, report) if return_report else module


@overload
def convert_sync_batchnorm(
    module: nn.Module,
    process_group: dist.ProcessGroup | None = ...,
    *,
    skip: tuple[type, ...] = ...,
    return_report: Literal[False] = ...,
) -> nn.Module: ...


@overload
def convert_sync_batchnorm(
    module: nn.Module,
    process_group: dist.ProcessGroup | None = ...,
    *,
    skip: tuple[type, ...] = ...,
    return_report: Literal[True],
) -> tuple[nn.Module, ConversionReport]: ...


def convert_sync_batchnorm(
    module: nn.Module,
    process_group: dist.ProcessGroup | None = None,
    *,
    skip: tuple[type, ...] = (),
    return_report: bool = False,
) -> nn.Module | tuple[nn.Module, ConversionReport]:
    """Make every BN layer compute its statistics across processes; BRN layers stay BRN.

    Unlike ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``, which rebuilds any ``_BatchNorm``
    subclass as plain ``SyncBatchNorm`` (silently dropping Batch Renorm), this keeps each layer's
    kind and settings and sets ``sync_stats=True``. torch's BatchNorm layers become ours.
    A layer with ``microbatch`` set is left as it is: its statistics are per microbatch of
    examples by design, the same whatever the number of processes; so are frozen BN layers,
    which have no batch statistics. Which classes are converted, and ``skip``, are as in
    :func:`convert_norm`; so are ``return_report`` and the warning when no layer is replaced.
    :func:`revert_sync_batchnorm` undoes it.
    """

    def make(m: nn.Module, index: int) -> nn.Module:
        if getattr(m, "microbatch", None) is not None:
            return m
        cls = type(m) if isinstance(m, BatchNormBase) else _KINDS["batchnorm"][index]
        return _rebuild(m, cls, {"sync_stats": True, "process_group": process_group})

    module, report = _swap_all(module, skip, make)
    hint = _SYNC_HINT if report.kept else ""
    _warn_if_nothing_replaced("convert_sync_batchnorm", module, report, hint)
    return (module, report) if return_report else module


_PER_PROCESS = {"sync_stats": False, "process_group": None}


def revert_sync_batchnorm(module: nn.Module, *, skip: tuple[type, ...] = ()) -> nn.Module:
    """Undo :func:`convert_sync_batchnorm`: every layer with cross-process statistics computes
    them on its own process again, e.g. to evaluate or fine-tune a DDP-trained model on one device.

    Each :mod:`bn` layer with ``sync_stats=True`` becomes the same class with ``sync_stats=False``
    and no process group, every other setting kept (Batch Renorm stays Batch Renorm). torch's
    ``nn.SyncBatchNorm`` (and timm's ``SyncBatchNormAct``) becomes :mod:`bn`'s per-process BN,
    as :func:`convert_norm` would make it but without ``sync_stats``: it accepts any input rank
    ``(N, C, *)``, as ``SyncBatchNorm`` does, and computes what ``SyncBatchNorm`` computes on a
    single process (:func:`bn.to_torch` then gives ``nn.SyncBatchNorm`` back). Other layers are
    left as they are. Parameters are shared with the old layers and buffers copied, so the
    ``state_dict`` is unchanged. Which classes are known, and ``skip``, are as in
    :func:`convert_norm`.

    Example::

        >>> model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), bn.BatchRenorm2d(4))
        >>> synced = bn.convert_sync_batchnorm(model)
        >>> [m.sync_stats for m in bn.revert_sync_batchnorm(synced)[1:]]
        [False, False]
    """

    def make(m: nn.Module, index: int) -> nn.Module:
        if isinstance(m, BatchNormBase):
            return _rebuild(m, type(m), _PER_PROCESS) if m.sync_stats else m
        if index == 3:  # torch's nn.SyncBatchNorm or timm's SyncBatchNormAct
            return _rebuild(m, _KINDS["batchnorm"][index], _PER_PROCESS)
        return m

    return _swap_all(module, skip, make)[0]


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

    torch's FX fusion tools (``torch.fx.experimental.optimization.fuse``, FX graph mode
    quantization's ``prepare_fx``) fold ``bn`` layers in eval mode without it, and plain BN
    layers in training (``prepare_qat_fx``); a Batch Renorm, microbatch or ``sync_stats`` layer
    in training they leave unfused, with a warning pointing here.

    Example::

        >>> model = bn.convert_norm(torchvision.models.resnet18(), "batchrenorm").eval()
        >>> plain = bn.to_torch(copy.deepcopy(model))
        >>> type(plain.bn1), torch.equal(plain(x := torch.randn(2, 3, 32, 32)), model(x))
        (<class 'torch.nn.modules.batchnorm.BatchNorm2d'>, True)
    """

    def make(m: nn.Module, index: int) -> nn.Module:
        if not isinstance(m, BatchNormBase):
            return m
        return _rebuild(m, nn.SyncBatchNorm if m.sync_stats else _TORCH_CLASSES[index], {})

    return _swap_all(module, (), make)[0]


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
            before, layer = seq._modules[prev], seq._modules[name]
            norm = layer.norm if isinstance(layer, _NormAct) else layer
            found = _classify(norm)
            if found is None or not isinstance(before, _FOLDABLE):
                continue  # not BN, or a BN subclass that may do more: left as it is
            seq._modules[prev] = _fold_into(before, norm)
            act = found[1] or norm is not layer
            seq._modules[name] = nn.Sequential(layer.drop, layer.act) if act else nn.Identity()
    return fused
