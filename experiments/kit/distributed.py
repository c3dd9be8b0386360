"""Single-process or ``torchrun`` multi-process training: the same code path for both.

Under ``torchrun`` (``WORLD_SIZE`` > 1) each process trains on its own minibatches and
DistributedDataParallel averages the gradients. BN statistics stay per process, as in both
papers (50 workers x 32 examples), unless the norm layers are built with ``sync_stats=True``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from experiments.kit.errors import ConfigError


def setup(device: str = "auto") -> tuple[int, int, torch.device]:
    """``(rank, world_size, device)``; joins the process group when launched by ``torchrun``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if use_cuda and not torch.cuda.is_available():
        raise ConfigError(f"device={device!r} but no CUDA device is available; use device=cpu")
    dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    return rank, world, dev


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in DistributedDataParallel when a process group is running, else unchanged."""
    if not _several():
        return model
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def from_rank0(obj):
    """``obj`` as rank 0 has it, on every process (itself when not distributed)."""
    if not _several():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def every_rank(obj) -> list:
    """``[rank 0's obj, rank 1's obj, ...]`` on every process (``[obj]`` when not distributed)."""
    if not _several():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def any_rank(flags: list[bool]) -> list[bool]:
    """``flags[i]`` true if it is true in any process (``flags`` itself when not distributed)."""
    if not _several():
        return flags
    device = (
        torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    )
    t = torch.tensor(flags, dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of processes (``(0, 1)`` when not distributed)."""
    if not dist.is_initialized():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def _several() -> bool:
    """Whether this process is one of several in a process group."""
    return dist.is_initialized() and dist.get_world_size() > 1


def cleanup() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
