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

    def batches(
        self, indices: Iterable[Tensor], seed: int | None = None, first_step: int = 0
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """The examples of each index tensor (``seed``, ``first_step``: see :class:`FolderSplit`;
        examples in memory are not augmented)."""
        for idx in indices:
            yield self.x[idx], self.labels[idx]


class FolderSplit:
    """An image folder (``root/<class>/<image>``) read by ``num_workers`` loader processes."""

    def __init__(self, dataset, num_workers: int = 4, pin_memory: bool = False) -> None:
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        self.labels = torch.as_tensor(dataset.targets)

    def __len__(self) -> int:
        return len(self.labels)

    def batches(
        self, indices: Iterable[Tensor], seed: int | None = None, first_step: int = 0
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """The examples of each index tensor, read and transformed by the worker processes.

        With ``seed``, the random transform of the ``j``-th example of batch ``k`` is seeded by
        ``(seed, first_step + k, j)``: a run resumed at step ``first_step`` gets exactly the
        augmented images of an uninterrupted one, whatever the number of workers."""
        loader = torch.utils.data.DataLoader(
            _SeededItems(self.dataset),
            batch_sampler=_IndexLists(indices, seed, first_step),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=False,
            generator=torch.Generator(),  # its worker seeds must not draw on the global RNG
        )
        yield from loader


class _IndexLists(torch.utils.data.Sampler):
    """Index lists of ``(index, seed or None)`` pairs, one list per batch."""

    def __init__(self, indices: Iterable[Tensor], seed: int | None, first_step: int) -> None:
        self.indices, self.seed, self.first_step = indices, seed, first_step

    def __iter__(self):
        for k, idx in enumerate(self.indices, self.first_step):
            if self.seed is None:
                yield [(i, None) for i in idx.tolist()]
            else:
                base = (self.seed * 1_000_003 + k) * 65_536
                yield [(i, (base + j) % 2**63) for j, i in enumerate(idx.tolist())]


class _SeededItems(torch.utils.data.Dataset):
    """``dataset[i]`` with torch's RNG seeded for the transform, restored afterwards (with no
    workers the dataset runs in the training process, whose RNG drives dropout)."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: tuple[int, int | None]):
        i, seed = item
        if seed is None:
            return self.dataset[i]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.dataset[i]


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


def load_splits(
    data, size: int | None = None, channels: int = 1, pin_memory: bool = False
) -> tuple[TensorSplit | FolderSplit, TensorSplit | FolderSplit, int, int]:
    """``(train, test, channels, num_classes)`` for a ``data`` config (``configs/data/``).

    An image folder gives its ``train``/``val`` at ``data.image_size`` with 3 channels. MNIST and
    Fashion-MNIST are held in memory, standardized with the training set's mean and std; ``size``
    pads their 28x28 images evenly with background to ``size`` x ``size``, and ``channels=3``
    repeats the gray channel (for networks built for RGB input).
    """
    if data.name == "image_folder":
        train, test, classes = image_folder_splits(
            data.root, data.image_size, data.num_workers, pin_memory
        )
        return train, test, 3, classes
    from experiments.data import ensure_dataset, load_split

    raw = ensure_dataset(data.name, data.root, data.download)
    train_images, test_images = load_split(raw, "train"), load_split(raw, "test")
    x_train = train_images.images.float().div_(255).unsqueeze(1)
    x_test = test_images.images.float().div_(255).unsqueeze(1)
    if size is not None and size != x_train.shape[-1]:
        pad = size - x_train.shape[-1]
        if pad < 0:
            raise ValueError(f"size={size} is smaller than the images ({x_train.shape[-1]} px)")
        padding = (pad // 2, pad - pad // 2) * 2
        x_train = torch.nn.functional.pad(x_train, padding)
        x_test = torch.nn.functional.pad(x_test, padding)
    mean, std = x_train.mean(), x_train.std()
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    if channels != 1:  # a view: batches are copied out of it, the dataset is not
        x_train = x_train.expand(-1, channels, -1, -1)
        x_test = x_test.expand(-1, channels, -1, -1)
    train = TensorSplit(x_train, train_images.labels)
    return train, TensorSplit(x_test, test_images.labels), channels, 10
