"""Batch statistics over every process of a ``torch.distributed`` group (cross-process BN).

Like ``nn.SyncBatchNorm``, but for CPU (gloo) as well as GPU, and for Batch Renorm too. The
statistics are the exact two-pass mean and biased variance of the union of all processes'
batches. They carry no gradient: :class:`bn.functional.BatchRenormFunction`'s backward pass
all-reduces its per-channel sums instead, so each process's input gradient accounts for how its
examples moved every other process's statistics.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from .functional import REDUCE_DIMS, group_view, stats_dtype


def sync_enabled(process_group: dist.ProcessGroup | None) -> bool:
    """True when a process group with more than one member is there to synchronise over."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return dist.get_world_size(process_group) > 1


@torch.no_grad()
def global_batch_stats(
    x: Tensor, process_group: dist.ProcessGroup | None
) -> tuple[Tensor, Tensor, int]:
    """Mean and biased variance of ``x`` ``(N, C, *)`` per channel over all processes.

    Returns ``(mean, var, count)``: ``mean`` and ``var`` of shape ``(1, C)`` in
    :func:`bn.functional.stats_dtype`; ``count`` is the number of values per channel across all
    processes. Sums travel in float64, so counts and sums stay exact across many processes.
    """
    group = process_group if process_group is not None else dist.group.WORLD
    xv = group_view(x.detach(), 1)
    xv = xv.to(stats_dtype(x.dtype))
    local = torch.tensor([float(xv.shape[1] * xv.shape[3])], dtype=torch.float64, device=x.device)
    packed = torch.cat([xv.sum(dim=REDUCE_DIMS).view(-1).double(), local])
    dist.all_reduce(packed, group=group)
    count = packed[-1]
    mean = (packed[:-1] / count).to(xv.dtype)
    sq = (xv - mean.view(1, 1, -1, 1)).square_().sum(dim=REDUCE_DIMS).view(-1).double()
    dist.all_reduce(sq, group=group)
    var = (sq / count).to(xv.dtype)
    return mean.view(1, -1), var.view(1, -1), int(count.item())
