"""Mini-batch index samplers with checkpointable state."""

from __future__ import annotations

import torch
from torch import Tensor


class EpochSampler:
    """Batches of indices without replacement: a fresh random permutation each epoch (the last
    partial batch of an epoch is dropped). Its state round-trips through ``state_dict``, so a
    resumed run sees the same batches as an uninterrupted one."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if not 1 <= batch_size <= n:
            raise ValueError(f"batch_size={batch_size} must be between 1 and the dataset size {n}")
        self.n, self.batch_size = n, batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self._new_epoch()

    def _new_epoch(self) -> None:
        self.perm = torch.randperm(self.n, generator=self.generator)
        self.pos = 0

    def next(self) -> Tensor:
        if self.pos + self.batch_size > self.n:
            self._new_epoch()
        idx = self.perm[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        return idx

    def __iter__(self):
        while True:
            yield self.next()

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "perm": self.perm, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self.perm, self.pos = state["perm"], state["pos"]
