"""Datasets as the training loop sees them: labels (for samplers) and batches from index lists.

Two kinds share one interface, so every study runs unchanged from a tensor dataset held in memory
(MNIST, Fashion-MNIST) to an ImageNet-style image folder read by worker processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from torch import Tensor

from experiments.data import DataUnavailable

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class TensorSplit:
    """Examples held in memory: ``x`` ``(n, ...)`` and integer ``labels`` ``(n,)``."""

    def __init__(self, x: Tensor, labels: Tensor) -> None:
        self.x, self.labels = x, labels

    def __len__(self) -> int:
        return len(self.labels)

    def batches(self, indices: Iterable[Tensor]) -> Iterator[tuple[Tensor, Tensor]]:
        for idx in indices:
            yield self.x[idx], self.labels[idx]


class FolderSplit:
    """An image folder (``root/<class>/<image>``) read by ``num_workers`` loader processes."""

    def __init__(self, dataset, num_workers: int = 4, pin_memory: bool = False) -> None:
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        self.labels = torch.as_tensor(dataset.targets)

    def __len__(self) -> int:
        return len(self.labels)

    def batches(self, indices: Iterable[Tensor]) -> Iterator[tuple[Tensor, Tensor]]:
        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=_IndexLists(indices),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=False,
        )
        yield from loader


class _IndexLists(torch.utils.data.Sampler):
    def __init__(self, indices: Iterable[Tensor]) -> None:
        self.indices = indices

    def __iter__(self):
        for idx in self.indices:
            yield idx.tolist()


def fixed_batches(split, batch_size: int, limit: int | None = None) -> list[Tensor]:
    """Evaluation batches over ``limit`` examples of ``split`` (default: all of them).

    A tensor split's first ``limit`` examples (MNIST's files are in random order); an image
    folder's are sorted by class, so there a fixed random subset, the same in every run."""
    n = len(split)
    stop = n if limit is None else min(n, limit)
    if stop < n and isinstance(split, FolderSplit):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:stop].sort().values
    else:
        order = torch.arange(stop)
    return list(order.split(batch_size))


def image_folder_splits(
    root: str | Path, image_size: int, num_workers: int, pin_memory: bool = False
) -> tuple[FolderSplit, FolderSplit, int]:
    """``root/train`` and ``root/val`` as ImageNet-style splits, and the number of classes.

    Training images get a random-resized crop and a horizontal flip; validation images a resize
    to ``image_size · 8/7`` and a single center crop (the paper's single-crop evaluation).
    """
    from torchvision import datasets, transforms

    root = Path(root)
    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    train_tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            normalize,
        ]
    )
    val_tf = transforms.Compose(
        [
            transforms.Resize(round(image_size * 8 / 7)),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
            normalize,
        ]
    )
    splits = []
    for name, tf in (("train", train_tf), ("val", val_tf)):
        folder = root / name
        if not folder.is_dir():
            raise DataUnavailable(
                f"image folder {folder} does not exist: data.root must hold train/ and val/, "
                "each with one sub-folder of images per class, as in ImageNet's layout (for a "
                "smoke test, make one with `python -m scripts.make_synthetic_images DIR`)"
            )
        try:
            dataset = datasets.ImageFolder(str(folder), transform=tf)
        except (FileNotFoundError, RuntimeError) as e:
            raise DataUnavailable(f"image folder {folder} is malformed: {e}") from None
        splits.append(FolderSplit(dataset, num_workers, pin_memory))
    train, val = splits
    if train.dataset.classes != val.dataset.classes:
        raise DataUnavailable(
            f"{root}/train and {root}/val have different class folders; they must match"
        )
    return train, val, len(train.dataset.classes)
