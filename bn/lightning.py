"""A Lightning ``LayerSync`` plugin for :mod:`bn`'s layers: statistics across processes while
Lightning trains with DDP, Batch Renorm kept.

``Trainer(sync_batchnorm=True)`` applies Lightning's ``TorchSyncBatchNorm``, which calls
``torch.nn.SyncBatchNorm.convert_sync_batchnorm``: every BN layer, Batch Renorm included, becomes
torch's plain ``SyncBatchNorm``. Pass this plugin instead::

    >>> from bn.lightning import SyncBatchNormPlugin  # doctest: +SKIP
    >>> trainer = lightning.Trainer(strategy="ddp", plugins=[SyncBatchNormPlugin()])  # doctest: +SKIP

Lightning is imported when the plugin is first asked for, not with this module or with
:mod:`bn`; without Lightning (``lightning`` or ``pytorch_lightning``) asking for it raises an
``ImportError`` that says so.
"""

from __future__ import annotations

import functools

import torch.distributed as dist
from torch import nn

from .convert import convert_sync_batchnorm, revert_sync_batchnorm


@functools.cache
def _plugin_class() -> type:
    try:
        from lightning.pytorch.plugins.layer_sync import LayerSync
    except ImportError:
        try:
            from pytorch_lightning.plugins.layer_sync import LayerSync
        except ImportError:
            raise ImportError(
                "bn.lightning.SyncBatchNormPlugin needs Lightning: pip install lightning"
            ) from None

    class SyncBatchNormPlugin(LayerSync):
        """Lightning's ``LayerSync`` with :func:`bn.convert_sync_batchnorm` and
        :func:`bn.revert_sync_batchnorm`: ``apply`` gives every BN layer (torch's, made ours,
        and :mod:`bn`'s) statistics across the processes of ``process_group``, Batch Renorm
        staying Batch Renorm; ``revert``, after fitting, per-process statistics again, every
        parameter, buffer and other setting kept.

        Args:
            process_group: the processes to synchronise over. Default: ``None``, all of them.
        """

        def __init__(self, process_group: dist.ProcessGroup | None = None) -> None:
            self.process_group = process_group

        def apply(self, model: nn.Module) -> nn.Module:
            return convert_sync_batchnorm(model, self.process_group)

        def revert(self, model: nn.Module) -> nn.Module:
            return revert_sync_batchnorm(model)

    SyncBatchNormPlugin.__module__ = __name__
    return SyncBatchNormPlugin


def __getattr__(name: str) -> type:
    if name == "SyncBatchNormPlugin":
        return _plugin_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
