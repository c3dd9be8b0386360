"""Other libraries' sync-BN converters meeting ``bn``'s layers.

torch's ``nn.SyncBatchNorm.convert_sync_batchnorm`` (which timm's ``convert_sync_batchnorm`` and
Lightning's ``Trainer(sync_batchnorm=True)`` apply) rebuilds every ``_BatchNorm`` it finds, by
``isinstance``, as a plain ``nn.SyncBatchNorm``: a Batch Renorm layer would silently train as BN
from then on, and a microbatch layer would lose its per-microbatch statistics. Those converters
give ``bn`` no hook of their own, but each puts its replacement in place through
``nn.Module``'s registration (``add_module``/``setattr``), which calls torch's global module
registration hooks first. The hook below, installed when ``bn`` is imported, sees a plain
``nn.SyncBatchNorm`` rebuilt from a ``bn`` layer (holding its very parameters or running
statistics) about to take that layer's place, and puts :func:`bn.convert_sync_batchnorm`'s
layer there instead (Batch Renorm kept, statistics across processes; a microbatch layer left as
it is), with a warning naming what it did. Every other registration passes untouched, and so do
``bn``'s own conversions (:func:`own_conversion`).
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator

from torch import nn
from torch.nn.modules.module import register_module_module_registration_hook

from ._base import BatchNormBase

_OWN = contextvars.ContextVar("bn_own_conversion", default=False)


@contextlib.contextmanager
def own_conversion() -> Iterator[None]:
    """``bn``'s converters place their layers inside this: the hook leaves them alone."""
    token = _OWN.set(True)
    try:
        yield
    finally:
        _OWN.reset(token)


def _keep_bn_layer(parent: nn.Module, name: str, new: nn.Module) -> nn.Module | None:
    if type(new) is not nn.SyncBatchNorm or _OWN.get():
        return None
    old = parent._modules.get(name)
    if not isinstance(old, BatchNormBase) or not _rebuilt_from(new, old):
        return None
    from .convert import convert_sync_batchnorm  # (convert imports this module)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a kept microbatch layer: "nothing replaced" is expected
        kept = convert_sync_batchnorm(old, new.process_group)
    kept.train(new.training)
    warnings.warn(
        "nn.SyncBatchNorm was to replace bn's layers (torch's, timm's or Lightning's "
        "convert_sync_batchnorm), which would train Batch Renorm as plain BN and microbatch "
        "layers over the whole batch: bn put its own synchronized layers there instead, as "
        "bn.convert_sync_batchnorm does (Batch Renorm kept; microbatch layers left as they are)",
        UserWarning,
        stacklevel=3,
    )
    return kept


def _rebuilt_from(new: nn.Module, old: nn.Module) -> bool:
    """``new`` holds ``old``'s own tensors, as a converter's rebuild does (a layer a user builds
    and assigns in its place has its own: that choice is theirs)."""
    pairs = [(new.weight, old.weight), (new.running_mean, old.running_mean)]
    return any(a is not None and a is b for a, b in pairs)


_HANDLE = register_module_module_registration_hook(_keep_bn_layer)
