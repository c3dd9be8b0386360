"""Mini-batch index samplers, addressed by step: a run resumed at any step (or a data loader that
reads ahead) gets exactly the batches of an uninterrupted run, with no sampler state to save."""

from __future__ import annotations

import torch
from torch import Tensor

from experiments.kit.errors import ConfigError
from experiments.kit.seeds import derive_seed


class IIDBatches:
    """Batch ``step`` of an i.i.d. stream: epochs of fresh random permutations (the last partial
    batch of an epoch is dropped).

    ``seed`` is the stream's own, ``derive_seed(run seed, stream)`` (with the process rank among
    its ids in a distributed run, whose processes draw different examples); epoch ``e`` is
    shuffled by ``derive_seed(seed, "epoch", e)``.
    """

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if not 1 <= batch_size <= n:
            raise ConfigError(
                f"train.batch_size={batch_size} must be between 1 and the dataset size {n}"
            )
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.per_epoch = n // batch_size
        self._epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def indices(self, step: int) -> Tensor:
        epoch, k = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(derive_seed(self.seed, "epoch", epoch))
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=g)
        return self._perm[k * self.batch_size : (k + 1) * self.batch_size]


class FixedBatches:
    """Batch ``step`` of a stream whose batches never change composition: one random permutation,
    cut into batches once, and every epoch visits those batches in a fresh random order (the
    examples that share a batch share it in every epoch; the last partial batch is dropped).

    The control for the BN paper's "shuffle training examples more thoroughly" (Sec. 4.2.1):
    beside :class:`IIDBatches` it separates the noise of a batch's composition, which BN's
    statistics carry, from the order in which SGD sees the examples. ``seed`` is the stream's
    own; the cut is drawn from ``derive_seed(seed, "composition")``, epoch ``e``'s order of the
    batches from ``derive_seed(seed, "epoch", e)``. Addressed by step, like :class:`IIDBatches`.
    """

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if not 1 <= batch_size <= n:
            raise ConfigError(
                f"train.batch_size={batch_size} must be between 1 and the dataset size {n}"
            )
        self.per_epoch = n // batch_size
        g = torch.Generator().manual_seed(derive_seed(seed, "composition"))
        cut = torch.randperm(n, generator=g)[: self.per_epoch * batch_size]
        self.batches = cut.view(self.per_epoch, batch_size)
        self.seed = seed
        self._epoch, self._order = -1, torch.empty(0, dtype=torch.long)

    def indices(self, step: int) -> Tensor:
        epoch, k = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(derive_seed(self.seed, "epoch", epoch))
            self._epoch, self._order = epoch, torch.randperm(self.per_epoch, generator=g)
        return self.batches[self._order[k]]


class PairBatches:
    """Non-i.i.d. minibatches (Batch Renorm paper Sec. 4.3): ``batch_size / per_label`` labels
    drawn with replacement, then ``per_label`` different examples of each drawn label (the paper:
    16 labels x 2 examples).

    The batch is laid out in ``per_label`` slices, ``[first of each group, second of each group,
    ...]``, so normalizing each slice separately (``microbatch = batch_size / per_label``) is the
    paper's "BN applied separately to two halves, one example of each pair in each half".
    Addressed by step, like :class:`IIDBatches`.

    Args:
        labels: the label of every example, ``(n,)``.
        batch_size: a multiple of ``per_label``; the paper uses 32.
        seed: the stream's own, ``derive_seed(run seed, stream)`` (with the process rank among
            its ids in a distributed run); step ``k`` draws from ``derive_seed(seed, "step", k)``.
        per_label: examples of each drawn label (2 in the paper).
    """

    def __init__(self, labels: Tensor, batch_size: int, seed: int, per_label: int = 2) -> None:
        if per_label < 2 or batch_size < per_label or batch_size % per_label:
            raise ConfigError(
                f"batch_size={batch_size} must be a multiple of per_label={per_label} (>= 2) "
                "for non-i.i.d. minibatches"
            )
        labels = torch.as_tensor(labels)
        self.batch_size, self.seed, self.per_label = batch_size, seed, per_label
        classes, counts = labels.unique(return_counts=True)
        usable = counts >= per_label
        if not usable.any():
            raise ConfigError(f"no label has the {per_label} examples a non-i.i.d. group needs")
        self.classes, self.counts = classes[usable], counts[usable]
        # Examples grouped by label: class k's examples are order[start[k] : start[k] + counts[k]].
        self.order = torch.argsort(labels, stable=True)
        self.start = (torch.cumsum(counts, 0) - counts)[usable]

    def indices(self, step: int) -> Tensor:
        g = torch.Generator().manual_seed(derive_seed(self.seed, "step", step))
        groups = self.batch_size // self.per_label
        k = torch.randint(len(self.classes), (groups,), generator=g)  # labels, with replacement
        n = self.counts[k]
        # per_label different members of each drawn label, one at a time: a uniform rank among
        # the members not yet taken, stepped past the taken ones (kept sorted) in turn.
        taken = torch.empty(groups, 0, dtype=torch.long)
        picks = []
        for j in range(self.per_label):
            u = (torch.rand(groups, generator=g) * (n - j)).long()
            for c in range(j):
                u += (u >= taken[:, c]).long()
            picks.append(u)
            taken = torch.sort(torch.cat([taken, u[:, None]], 1), 1).values
        members = self.order[self.start[k, None] + torch.stack(picks, 1)]
        return members.t().flatten()


class ShardBatches:
    """Batch ``step`` of a dataset read shard by shard, as the BN paper's ImageNet workers read it.

    A fixed random order of the examples is cut into shards of ``shard_size``; every epoch visits
    the shards in a fresh random order. With ``within_shard=False`` each shard is read in its
    stored order, so the same examples keep landing in a minibatch together (the original
    Inception's input); ``True`` also shuffles inside every shard each epoch (BN-x5's "shuffle
    training examples more thoroughly", BN paper Sec. 4.2.1). Addressed by step, like
    :class:`IIDBatches`. The examples past the last whole shard are never read.

    Args:
        n: dataset size.
        batch_size: examples per step; must divide ``shard_size``.
        seed: the stream's own, ``derive_seed(run seed, stream)``, the same in every process of a
            distributed run: they share the cut into shards, ``derive_seed(seed, "shards")``;
            process ``rank`` visits its shards in epoch ``e`` in the order drawn from
            ``derive_seed(seed, "epoch", e, rank)``.
        shard_size: examples per shard (``n`` or more: one shard).
        within_shard: shuffle inside each shard every epoch.
        rank, world: a distributed run deals the shards round-robin to its processes.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        seed: int,
        shard_size: int,
        within_shard: bool,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        shard_size = min(shard_size, n - n % batch_size)
        if batch_size < 1 or shard_size < batch_size or shard_size % batch_size:
            raise ConfigError(
                f"batch_size={batch_size} must divide shard_size={shard_size} (and the dataset "
                f"size {n} must hold one shard)"
            )
        cut = torch.Generator().manual_seed(derive_seed(seed, "shards"))
        shards = torch.randperm(n, generator=cut)
        shards = shards[: n - n % shard_size].view(-1, shard_size)
        if len(shards) < world:
            raise ConfigError(f"{len(shards)} shards of {shard_size} cannot feed {world} processes")
        self.shards = shards[rank::world][: len(shards) // world]
        self.batch_size, self.seed, self.within_shard = batch_size, seed, within_shard
        self.rank = rank
        self.per_epoch = self.shards.numel() // batch_size
        self._epoch, self._order = -1, torch.empty(0, dtype=torch.long)

    def indices(self, step: int) -> Tensor:
        epoch, k = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(derive_seed(self.seed, "epoch", epoch, self.rank))
            order = self.shards[torch.randperm(len(self.shards), generator=g)]
            if self.within_shard:
                order = order.gather(1, torch.argsort(torch.rand(order.shape, generator=g), 1))
            self._epoch, self._order = epoch, order.flatten()
        return self._order[k * self.batch_size : (k + 1) * self.batch_size]
