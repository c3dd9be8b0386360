"""What torch's FX fusion tools see of a ``bn`` layer.

``torch.fx.experimental.optimization.fuse`` and ``torch.ao.quantization``'s FX graph mode
(``prepare_fx``, ``prepare_qat_fx``, ``fuse_fx``) fold a BN into the ``Conv``/``Linear`` before it
only where the graph calls a module whose type *is* ``nn.BatchNorm1d/2d/3d`` (they compare
``type(m)``, not ``isinstance``), and their tracers treat only ``torch.nn``'s modules as leaves: a
``bn`` layer, traced through into ``F.batch_norm``, would be left unfused without a word. Traced by
one of those tools, a ``bn`` layer that computes what its ``torch.nn`` class computes (any layer in
eval mode; plain BN in training) is recorded as a call to that class, built on the layer's own
parameters and buffers (:func:`torch_layer`), so the tools fuse it as they fuse torch's; any other
layer is traced as usual, with a warning naming :func:`bn.to_torch`. Other tracers
(``torch.fx.symbolic_trace``, torchvision's feature extractor) see the layer as before.
"""

from __future__ import annotations

import sys
import types
import warnings

from torch import Tensor, nn
from torch.fx import Proxy
from torch.nn.modules.batchnorm import _BatchNorm

# The attribute of a ``bn`` layer that a fusing tool's graph calls (a property: no state).
TORCH_LAYER = "_fx_torch_layer"
_TORCH_CLASSES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_FUSE = "torch.fx.experimental.optimization.fuse"
_QUANT_TRACER = "torch.ao.quantization FX graph mode (prepare_fx, prepare_qat_fx, fuse_fx)"


def _fuse_is_running() -> bool:
    """Whether ``torch.fx.experimental.optimization.fuse`` is on the call stack. It traces with
    a plain ``torch.fx.Tracer``, so only the stack tells it apart (checked at trace time only)."""
    module = sys.modules.get("torch.fx.experimental.optimization")
    code = getattr(getattr(module, "fuse", None), "__code__", None)
    frame: types.FrameType | None = sys._getframe(1)
    while code is not None and frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def fusing_tool(x: Proxy) -> str | None:
    """The name of the FX tool tracing ``x`` if it is one that fuses BN layers by exact type,
    else ``None``. Neither tool's module is imported here: a tool not imported is not running."""
    quant = sys.modules.get("torch.ao.quantization.fx.tracer")
    if quant is not None and isinstance(x.tracer, quant.QuantizationTracer):
        return _QUANT_TRACER
    return _FUSE if _fuse_is_running() else None


def buffer_node(layer: nn.Module, x: Proxy, name: str) -> Tensor:
    """``layer``'s buffer ``name`` as a node of the graph ``torch.fx`` is recording (``x`` is a
    proxy of that graph). The tracer records a buffer only when it reaches an operation as an
    argument: reading or updating the tensor itself (a view of it, an in-place step count) would
    happen once, at trace time, and a tensor made from it would be baked into the graph as a
    constant."""
    tracer = x.tracer  # type: ignore[attr-defined]
    path = "" if layer is tracer.root else tracer.path_of_module(layer) + "."
    return tracer.create_proxy("get_attr", path + name, (), {})


def torch_class(layer: _BatchNorm) -> type[_BatchNorm] | None:
    """``nn.BatchNorm1d/2d/3d``, whichever ``layer`` subclasses; ``None`` for any-rank layers."""
    return next((c for c in type(layer).__mro__ if c in _TORCH_CLASSES), None)


def torch_layer(layer: _BatchNorm) -> _BatchNorm:
    """``layer`` as its ``torch.nn`` class, holding the same parameter and buffer objects (not
    copies: what the graph's call updates, and what fusion reads, are the layer's own)."""
    cls = torch_class(layer)
    if cls is None:
        raise AttributeError(f"{type(layer).__name__} has no torch.nn class of fixed rank")
    twin = cls(
        layer.num_features,
        layer.eps,
        layer.momentum,
        layer.affine,
        layer.track_running_stats,
        device="meta",
    )
    for name in ("weight", "bias"):
        twin._parameters[name] = layer._parameters.get(name)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        twin._buffers[name] = layer._buffers.get(name)
    return twin.train(layer.training)


def record_for_fusion(layer: _BatchNorm, x: Proxy, unlike_torch: str | None) -> Proxy | None:
    """If a fusing tool traces ``x``: a call to :func:`torch_layer` recorded in its graph (the
    layer computing what its ``torch.nn`` class does, ``unlike_torch`` being ``None``), or a
    warning that the layer stays unfused and ``None``. ``None`` for any other tracer."""
    tool = fusing_tool(x)
    if tool is None or torch_class(layer) is None:
        return None  # any-rank layers stand for nn.SyncBatchNorm, which neither tool fuses
    if unlike_torch is not None:
        warnings.warn(
            f"bn: {tool} leaves this {type(layer).__name__} unfused: in training mode it is not "
            f"torch's BN ({unlike_torch}); fuse in eval mode, or call bn.to_torch(model) first "
            "(torch's layers, which train as plain BN)",
            stacklevel=2,
        )
        return None
    tracer = x.tracer
    path = "" if layer is tracer.root else tracer.path_of_module(layer) + "."
    return tracer.create_proxy("call_module", path + TORCH_LAYER, (x,), {})
