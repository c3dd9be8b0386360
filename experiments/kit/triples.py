"""A 1,000-class data set made of MNIST or Fashion-MNIST: each example is three items of the base
split side by side (``1 x 28 x 84``), its class ``100·a + 10·b + c`` of the items' labels
``a, b, c`` from left to right.

It stands in for ImageNet's 1,000 classes where the Batch Renorm paper's non-i.i.d. minibatches
(Ioffe 2017, arXiv:1702.03275, Sec. 4.3: 16 labels x 2 images) need many classes: over ten
classes a same-class pair is barely likelier than under i.i.d. sampling, over 1,000 it is 33
times likelier. Every class gets the same number of examples (:data:`PER_CLASS`); a split's
triples are built from that split of the base data alone, so no test triple shares an item with
a training one. The choice of items is fixed (:func:`~experiments.kit.seeds.fixed_seed`), the same
in every run; the triples are assembled from the base items batch by batch (:class:`TripleSplit`),
never stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor

from experiments.kit.errors import ConfigError
from experiments.kit.seeds import fixed_seed

BASES = {"mnist_triples": "mnist", "fashion_mnist_triples": "fashion_mnist"}  # data.name → base
ITEMS, BASE_CLASSES = 3, 10
CLASSES = BASE_CLASSES**ITEMS
PER_CLASS = {"train": 60, "test": 10}  # examples of each of the 1,000 classes


def digits(label: Tensor) -> Tensor:
    """The base labels ``(a, b, c)`` of triple classes ``100·a + 10·b + c``: shape ``(..., 3)``."""
    powers = BASE_CLASSES ** torch.arange(ITEMS - 1, -1, -1)
    return torch.div(label[..., None], powers, rounding_mode="floor") % BASE_CLASSES


def triple_items(labels: Tensor, per_class: int, split: str) -> tuple[Tensor, Tensor]:
    """``(items, classes)``: for each of the ``CLASSES · per_class`` triples, the indices into
    the base split (``labels``, ``(n,)``) of its three items, ``(m, 3)``, and its class, ``(m,)``.

    The items of label ``d`` at position ``p`` are read off fresh random orders of the split's
    label-``d`` examples, one after another, so each is used as evenly as the counts allow. The
    triples come in a fixed random order (a run reading the first ``N`` examples, for a training
    subset, reads every class). Every random order is drawn from
    ``fixed_seed("triples", split id, ...)``: the same triples in every run.
    """
    if per_class < 1:
        raise ConfigError(f"per_class={per_class}: a triple class needs at least one example")
    if split not in PER_CLASS:
        raise ConfigError(f"split={split!r} must be one of {sorted(PER_CLASS)}")
    split_id = list(PER_CLASS).index(split)
    labels = torch.as_tensor(labels, dtype=torch.long)
    classes = torch.arange(CLASSES).repeat_interleave(per_class)
    wanted = digits(classes)  # (m, 3): the label each triple needs at each position
    items = torch.empty_like(wanted)
    for d in range(BASE_CLASSES):
        pool = (labels == d).nonzero().flatten()
        if not len(pool):
            raise ConfigError(
                f"the base {split} split holds no example of label {d}: its triples cannot be built"
            )
        for p in range(ITEMS):
            slots = (wanted[:, p] == d).nonzero().flatten()
            g = torch.Generator().manual_seed(fixed_seed("triples", split_id, p, d))
            rounds = -(-len(slots) // len(pool))
            order = torch.cat([torch.randperm(len(pool), generator=g) for _ in range(rounds)])
            items[slots, p] = pool[order[: len(slots)]]
    g = torch.Generator().manual_seed(fixed_seed("triples order", split_id))
    shuffle = torch.randperm(len(classes), generator=g)
    return items[shuffle], classes[shuffle]


class TripleSplit:
    """Triples of a base split's images, assembled batch by batch: what the training loop reads.

    Args:
        base: the base split's inputs, ``(n, C, H, W)`` (standardized, padded as asked).
        items: each triple's three indices into ``base``, ``(m, 3)``, left to right.
        labels: each triple's class, ``(m,)``.
    """

    def __init__(self, base: Tensor, items: Tensor, labels: Tensor) -> None:
        self.base, self.items, self.labels = base, items, labels

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def side(self) -> int:
        """The images' width in pixels: three items'."""
        return ITEMS * self.base.shape[-1]

    def images(self, idx: Tensor) -> Tensor:
        """The triples ``idx``, ``(len(idx), C, H, 3·W)``: their items side by side."""
        x = self.base[self.items[idx]]  # (b, 3, C, H, W)
        return torch.cat(x.unbind(1), dim=-1)

    def batches(
        self, indices: Iterable[Tensor], seed: int | None = None, first_step: int = 0
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """The examples of each index tensor (in memory: no augmentation, as
        :class:`~experiments.kit.data.TensorSplit`)."""
        for idx in indices:
            yield self.images(idx), self.labels[idx]


def triple_split(base: Tensor, base_labels: Tensor, split: str) -> TripleSplit:
    """The triples of one base split (``base`` its inputs, ``base_labels`` their labels)."""
    items, classes = triple_items(base_labels, PER_CLASS[split], split)
    return TripleSplit(base, items, classes)
