"""Spawned processes for the multi-process tests: a free port, and a spawn that cannot hang."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_torchrun_would(rank: int, world: int, port: int) -> None:
    """The environment torchrun gives process ``rank`` of ``world`` on this machine."""
    env = dict(
        RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=world, MASTER_ADDR="127.0.0.1", MASTER_PORT=port
    )
    os.environ.update({k: str(v) for k, v in env.items()})


def spawn(fn: Callable, args: tuple, nprocs: int = 2, timeout: float = 300.0) -> None:
    """``fn(rank, *args)`` in ``nprocs`` processes; raises if one fails, and kills them all and
    raises if they have not ended within ``timeout`` seconds (a collective one process skipped)."""
    context = mp.spawn(fn, args=args, nprocs=nprocs, join=False)
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"{fn.__name__}: {nprocs} processes still running after {timeout} s")
