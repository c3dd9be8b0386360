"""Batch statistics over every process of a ``torch.distributed`` group (cross-process BN).

Like ``nn.SyncBatchNorm``, but for CPU (gloo) as well as GPU, and for Batch Renorm too. The
statistics are the exact two-pass mean and biased variance of the union of all processes'
batches; both reductions are differentiable all-reduces, so each process's input gradient
accounts for how its examples moved every other process's statistics.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.nn.functional import all_reduce

from .functional import REDUCE_DIMS


def sync_enabled(process_group: dist.ProcessGroup | None) -> bool:
    """True when a process group with more than one member is there to synchronise over."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return dist.get_world_size(process_group) > 1


def global_batch_stats(
    xv: Tensor, process_group: dist.ProcessGroup | None
) -> tuple[Tensor, Tensor, int]:
    """Mean and biased variance of the group view ``xv`` ``(1, g, C, S)`` over all processes.

    Returns ``(mean, var, count)``: ``mean`` and ``var`` of shape ``(1, 1, C, 1)``, differentiable;
    ``count`` is the number of values per channel across all processes.
    """
    group = process_group if process_group is not None else dist.group.WORLD
    local_count = xv.shape[1] * xv.shape[3]
    sums = xv.sum(dim=REDUCE_DIMS, keepdim=True)
    count_t = torch.full((1, 1, 1, 1), float(local_count), dtype=xv.dtype, device=xv.device)
    packed = all_reduce(torch.cat([sums, count_t], dim=2), group=group)
    total_sum, total_count = packed[:, :, :-1], packed[:, :, -1:]
    mean = total_sum / total_count
    sq = ((xv - mean) ** 2).sum(dim=REDUCE_DIMS, keepdim=True)
    var = all_reduce(sq, group=group) / total_count
    return mean, var, int(total_count.item())
