"""Normalization followed by dropout and an activation (timm's ``BatchNormAct2d``): what
:func:`bn.convert_norm` turns timm's norm-act layers into, so that converting a timm model keeps
what those layers compute after the normalization.

The norm is a child module, ``norm``, not the block itself: tools that swap BN layers by
``isinstance`` (``torch.nn.SyncBatchNorm.convert_sync_batchnorm``, which Lightning's
``sync_batchnorm=True`` calls, timm's ``convert_sync_batchnorm`` and ``freeze_batch_norm_2d``)
then replace the norm alone and keep the activation; a norm-act layer that is itself a BN layer
would be replaced whole by a plain BN, its activation dropped. The ``state_dict`` keys are those
of timm's layer all the same (``weight``, ``running_mean``, ..., not ``norm.weight``).
"""

from __future__ import annotations

from torch import Tensor, nn

from ._base import BatchNormBase
from .batchnorm import BatchNorm2d, _BatchNormXd
from .batchrenorm import BatchRenorm2d, _BatchRenormXd

_NORM = "norm."


def _flat_keys(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    """``state_dict`` hook: the norm's entries under the block's own prefix, in their order."""
    mine = [k for k in state_dict if k.startswith(prefix)]  # the block's: the last entries
    for key in mine:
        value = state_dict.pop(key)
        rest = key[len(prefix) :]
        state_dict[prefix + rest.removeprefix(_NORM)] = value


def _nested_keys(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """``load_state_dict`` pre-hook: the block's own entries (flat, or under ``norm.``) back
    under ``norm.``, so the norm loads them."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        rest = key[len(prefix) :]
        if rest.split(".", 1)[0] not in module._modules:
            state_dict[prefix + _NORM + rest] = state_dict.pop(key)


class _NormAct(nn.Module):
    """``act(drop(norm(x)))``, with the norm's ``state_dict`` entries under the block's name."""

    _norm_class: type[BatchNormBase]

    def __init__(
        self, *args, drop: nn.Module | None = None, act: nn.Module | None = None, **kwargs
    ) -> None:
        super().__init__()
        self._hold(self._norm_class(*args, **kwargs), drop, act)

    def _hold(self, norm: nn.Module, drop: nn.Module | None, act: nn.Module | None) -> None:
        self.norm = norm
        self.drop = nn.Identity() if drop is None else drop
        self.act = nn.Identity() if act is None else act
        self.register_state_dict_post_hook(_flat_keys)
        self.register_load_state_dict_pre_hook(_nested_keys)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.drop(self.norm(x)))


class BatchNormAct2d(_NormAct):
    r""":class:`bn.BatchNorm2d`, then dropout, then an activation: timm's ``BatchNormAct2d``.

    Args:
        num_features: :math:`C` from an expected input of size :math:`(N, C, H, W)`.
        *args, **kwargs: the other arguments of :class:`bn.BatchNorm2d` (``eps``, ``momentum``,
            ``microbatch``, ...).
        drop: the module applied after the normalization. Default: ``nn.Identity()``.
        act: the module applied after ``drop``. Default: ``nn.Identity()``.

    Attributes:
        norm: the :class:`bn.BatchNorm2d`; ``drop``, ``act``: the modules given.

    Shape:
        - Input: :math:`(N, C, H, W)`
        - Output: :math:`(N, C, H, W)` (same shape as input)

    Examples::

        >>> layer = bn.BatchNormAct2d(8, act=nn.ReLU())
        >>> bool((layer(torch.randn(4, 8, 3, 3)) >= 0).all())
        True
        >>> list(layer.state_dict())  # timm's keys, not norm.weight
        ['weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked']
    """

    _norm_class = BatchNorm2d


class BatchRenormAct2d(_NormAct):
    r""":class:`bn.BatchRenorm2d`, then dropout, then an activation.

    Args:
        num_features: :math:`C` from an expected input of size :math:`(N, C, H, W)`.
        *args, **kwargs: the other arguments of :class:`bn.BatchRenorm2d` (``r_max``,
            ``d_max``, ``momentum``, ...).
        drop: the module applied after the normalization. Default: ``nn.Identity()``.
        act: the module applied after ``drop``. Default: ``nn.Identity()``.

    Attributes:
        norm: the :class:`bn.BatchRenorm2d`; ``drop``, ``act``: the modules given.

    Shape:
        - Input: :math:`(N, C, H, W)`
        - Output: :math:`(N, C, H, W)` (same shape as input)
    """

    _norm_class = BatchRenorm2d


class _BatchNormActXd(_NormAct):
    """BN over any input rank, then ``drop`` and ``act`` (from timm's ``SyncBatchNormAct``)."""

    _norm_class = _BatchNormXd


class _BatchRenormActXd(_NormAct):
    """Batch Renorm over any input rank, then ``drop`` and ``act``."""

    _norm_class = _BatchRenormXd


_BLOCKS = {
    b._norm_class: b for b in (BatchNormAct2d, BatchRenormAct2d, _BatchNormActXd, _BatchRenormActXd)
}


def norm_act(norm: nn.Module, drop: nn.Module, act: nn.Module) -> nn.Module:
    """``norm``, then ``drop``, then ``act``, in one module: the norm-act block of ``norm``'s
    class, or, for a norm of another library (``torch.nn``'s), ``nn.Sequential(norm, drop, act)``."""
    block_class = _BLOCKS.get(type(norm))
    if block_class is None:
        return nn.Sequential(norm, drop, act)
    block = block_class.__new__(block_class)
    nn.Module.__init__(block)
    block._hold(norm, drop, act)
    return block
