"""Every study's data, in one module: MNIST and Fashion-MNIST read from their original IDX files
(:mod:`experiments.kit.fetch` gets and verifies them), ImageNet-style image folders, and the
splits the training loop reads batches from by index (:class:`TensorSplit` in memory,
:class:`FolderSplit` from disk).

    python -m experiments.kit.data mnist [root]     # fetch and verify a dataset before any run
"""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from experiments.kit import triples
from experiments.kit.errors import BadDataFile, ConfigError, DataUnavailable
from experiments.kit.fetch import SPLITS, ensure_dataset, find, launch_path
from experiments.kit.files import special_file
from experiments.kit.seeds import derive_seed, fixed_seed

CLASSES = 10  # MNIST's and Fashion-MNIST's


def in_memory_classes(name: str) -> int | None:
    """The classes of ``data.name`` when it is an in-memory dataset (MNIST, Fashion-MNIST or their
    triples); None for an image folder, whose classes are its folders."""
    if name in triples.BASES:
        return triples.CLASSES
    return CLASSES if name in triples.BASES.values() else None


@dataclass
class Split:
    images: torch.Tensor  # (N, 28, 28) uint8
    labels: torch.Tensor  # (N,) int64


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped): big-endian magic ``0 0 dtype ndim``, dims, data."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, OSError) as e:  # a truncated or corrupt .gz
        raise BadDataFile(
            f"{path} cannot be read ({type(e).__name__}: {e}); replace it with a complete copy"
        ) from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise BadDataFile(f"{path} is not an unsigned-byte IDX file (bad magic number)")
    ndim = data[3]
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != math.prod(dims):
        raise BadDataFile(f"{path}: header says {dims} but holds {body.size} values (truncated?)")
    return body.reshape(dims)


def load_split(raw: Path, split: str) -> Split:
    """The ``split`` (``train`` or ``test``) of the IDX files in ``raw``, checked for shape and
    for labels in ``[0, CLASSES)`` whether or not the files were verified (a label out of range
    would otherwise stop training mid-run with a kernel's index error)."""
    images_name, labels_name = SPLITS[split]
    images = read_idx(find(raw, images_name))
    labels_path = find(raw, labels_name)
    labels = read_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise BadDataFile(
            f"{raw}: {split} images {images.shape} and labels {labels.shape} do not match"
        )
    if labels.size and int(labels.max()) >= CLASSES:  # uint8: never below 0
        raise BadDataFile(
            f"{labels_path} holds label {int(labels.max())}; labels must be in [0, {CLASSES})"
        )
    return Split(torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)))


def preprocess(images: torch.Tensor, binarize: bool) -> torch.Tensor:
    """Flattened float inputs: binary (pixel > 127, the paper's "28x28 binary image") or [0, 1]."""
    return to_inputs(compact_inputs(images, binarize), binarize)


def compact_inputs(images: torch.Tensor, binarize: bool) -> torch.Tensor:
    """The inputs of :func:`preprocess` as flattened uint8 (0/1 or 0..255): a quarter of the
    memory to read for a random mini-batch; :func:`to_inputs` makes a batch of them float."""
    x = images.reshape(len(images), -1)
    return (x > 127).to(torch.uint8) if binarize else x


def to_inputs(compact: torch.Tensor, binarize: bool) -> torch.Tensor:
    """Float network inputs from :func:`compact_inputs`."""
    return compact.float() if binarize else compact.float() / 255.0


# -- splits: what the training loop reads batches from -------------------------------------

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class TensorSplit:
    """Examples held in memory: ``x`` ``(n, ...)`` and integer ``labels`` ``(n,)``."""

    def __init__(self, x: Tensor, labels: Tensor) -> None:
        self.x, self.labels = x, labels

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def side(self) -> int:
        """The images' width in pixels (the last dimension of ``x``)."""
        return self.x.shape[-1]

    def batches(
        self, indices: Iterable[Tensor], seed: int | None = None, first_step: int = 0
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """The examples of each index tensor (``seed``, ``first_step``: see :class:`FolderSplit`;
        examples in memory are not augmented)."""
        for idx in indices:
            yield self.x[idx], self.labels[idx]


def first_examples(split: TensorSplit | FolderSplit, n: int) -> TensorSplit | FolderSplit:
    """The first ``n`` examples of ``split`` (``train.first_images``: a smaller training set, the
    same images in every run); ``0``: all of it."""
    if not n:
        return split
    if not isinstance(split, TensorSplit):
        raise ConfigError(
            f"train.first_images={n} takes the first images of data held in memory (MNIST, "
            "Fashion-MNIST and their triples), not of an image folder (use a smaller folder)"
        )
    if n > len(split):
        raise ConfigError(f"train.first_images={n} is more than the {len(split)} training images")
    return TensorSplit(split.x[:n], split.labels[:n])


class FolderSplit:
    """An image folder (``root/<class>/<image>``) read by ``num_workers`` loader processes."""

    def __init__(
        self, dataset, num_workers: int = 4, pin_memory: bool = False, side: int | None = None
    ) -> None:
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        self.labels = torch.as_tensor(dataset.targets)
        self.side = side  # the images' width in pixels after the transform, where known

    def __len__(self) -> int:
        return len(self.labels)

    def batches(
        self, indices: Iterable[Tensor], seed: int | None = None, first_step: int = 0
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """The examples of each index tensor, read and transformed by the worker processes.

        With ``seed``, the random transform of the ``j``-th example of batch ``k`` is seeded by
        ``derive_seed(seed, "item", first_step + k, j, bits=63)``: a run resumed at step
        ``first_step`` gets exactly the augmented images of an uninterrupted one, whatever the
        number of workers. torch's CPU generator keeps the low 32 bits of the seed, so a run of
        millions of images has a few pairs that draw the same transform (``seeds.py``)."""
        loader = torch.utils.data.DataLoader(
            _SeededItems(self.dataset),
            batch_sampler=_IndexLists(indices, seed, first_step),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=False,
            generator=torch.Generator(),  # its worker seeds must not draw on the global RNG
        )
        try:
            yield from loader
        except BadDataFile as e:  # from a worker: its message is the traceback's last line
            raise BadDataFile(str(e).strip().splitlines()[-1].split("BadDataFile: ")[-1]) from None


class _IndexLists(torch.utils.data.Sampler):
    """Index lists of ``(index, seed or None)`` pairs, one list per batch."""

    def __init__(self, indices: Iterable[Tensor], seed: int | None, first_step: int) -> None:
        self.indices, self.seed, self.first_step = indices, seed, first_step

    def __iter__(self):
        for k, idx in enumerate(self.indices, self.first_step):
            if self.seed is None:
                yield [(i, None) for i in idx.tolist()]
            else:
                yield [
                    (i, derive_seed(self.seed, "item", k, j, bits=63))
                    for j, i in enumerate(idx.tolist())
                ]


class _SeededItems(torch.utils.data.Dataset):
    """``dataset[i]`` with torch's CPU generator seeded for the transform, restored afterwards
    (with no workers the dataset runs in the training process, whose generators drive dropout;
    a GPU's are left alone)."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: tuple[int, int | None]):
        i, seed = item
        try:
            if seed is None:
                return self.dataset[i]
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)
                return self.dataset[i]
        except OSError as e:  # PIL's UnidentifiedImageError, a truncated or vanished file
            path = self.dataset.samples[i][0]
            raise BadDataFile(
                f"image {path} cannot be read ({type(e).__name__}); remove or replace it, then "
                "continue with resume=true"
            ) from None


def fixed_batches(split, batch_size: int, limit: int | None = None) -> list[Tensor]:
    """Evaluation batches over ``limit`` examples of ``split`` (default: all of them).

    A tensor split's first ``limit`` examples (MNIST's files are in random order); an image
    folder's are sorted by class, so there a fixed random subset, the same in every run."""
    n = len(split)
    stop = n if limit is None else min(n, limit)
    if stop < n and isinstance(split, FolderSplit):
        g = torch.Generator().manual_seed(fixed_seed("evaluation subset"))
        order = torch.randperm(n, generator=g)[:stop].sort().values
    else:
        order = torch.arange(stop)
    return list(order.split(batch_size))


def _refuse_folder_loops(folder: Path) -> None:
    """ImageFolder walks class folders following links: a link back to a folder above it repeats
    the images it reaches (or, with two, never ends). Refuse any such link, naming it."""
    seen: set[Path] = set()
    for dirpath, _, _ in os.walk(folder, followlinks=True):
        real = Path(dirpath).resolve()
        if real in seen:
            raise DataUnavailable(
                f"{dirpath} leads to {real}, already read (a link to a folder above it, or to one read "
                "elsewhere): "
                "remove the link, or the images it reaches would be read again and again"
            )
        seen.add(real)


def _plain_image_file(path: str) -> bool:
    """ImageFolder's test of a file to list: an image by its suffix, and a plain file, else a
    :class:`DataUnavailable` naming it (a named pipe called ``x.jpg`` would block a loader
    worker, and with it the run, for ever)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    if not has_file_allowed_extension(path, IMG_EXTENSIONS):
        return False
    if special_file(path):
        raise DataUnavailable(
            f"{path} is not a plain file (a named pipe, socket or device): remove it "
            "from the image folder"
        )
    return True


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
        _refuse_folder_loops(folder)
        try:
            dataset = datasets.ImageFolder(
                str(folder), transform=tf, is_valid_file=_plain_image_file
            )
        except DataUnavailable:
            raise
        except (FileNotFoundError, RuntimeError) as e:
            raise DataUnavailable(f"image folder {folder} is malformed: {e}") from None
        splits.append(FolderSplit(dataset, num_workers, pin_memory, side=image_size))
    train, val = splits
    if train.dataset.classes != val.dataset.classes:
        raise DataUnavailable(
            f"{root}/train and {root}/val have different class folders; they must match"
        )
    return train, val, len(train.dataset.classes)


def _physical_memory() -> int | None:
    """This machine's memory in bytes (``None`` where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _refuse_padding_beyond_memory(n: int, size: int, name: str) -> None:
    """Raise :class:`ConfigError` if ``n`` images padded to ``size`` x ``size`` would not fit in
    memory: the process would grow until the system killed it."""
    # float32, and standardizing holds two more copies of the padded images for a moment
    need = 3 * n * size * size * 4
    have = _physical_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"data.image_size={size} pads {n} {name} images to {size}x{size}: about "
            f"{need / 2**30:.0f} GiB, more than this machine's {have / 2**30:.0f} GiB"
        )


def load_splits(
    data, size: int | None = None, channels: int = 1, pin_memory: bool = False
) -> tuple[TensorSplit | FolderSplit, TensorSplit | FolderSplit, int, int]:
    """``(train, test, channels, num_classes)`` for a ``data`` config (``configs/data/``).

    An image folder gives its ``train``/``val`` at ``data.image_size`` with 3 channels (it has no
    ``binarize``: a colour photograph has no one threshold). MNIST and Fashion-MNIST are held in
    memory, thresholded at 127 first if ``data.binarize`` (:func:`compact_inputs`), standardized
    with the training set's mean and std; ``size``
    pads their 28x28 images evenly with background to ``size`` x ``size``, and ``channels=3``
    repeats the gray channel (for networks built for RGB input). ``mnist_triples`` and
    ``fashion_mnist_triples`` are their base data prepared so, then set side by side in threes
    (:mod:`experiments.kit.triples`: ``size`` x ``3·size`` images, 1,000 classes).
    """
    if data.name == "image_folder":
        if data.binarize:
            raise ConfigError(
                "data.binarize=true does not apply to an image folder (colour images)"
            )
        if data.image_size is None:
            raise ConfigError("data.image_size=null: an image folder needs a size to crop to")
        train, test, classes = image_folder_splits(
            launch_path(data.root), data.image_size, data.num_workers, pin_memory
        )
        return train, test, 3, classes
    base = triples.BASES.get(str(data.name), str(data.name))
    raw = ensure_dataset(base, data.root, data.download, data.verify)
    train_images, test_images = load_split(raw, "train"), load_split(raw, "test")
    x_train, x_test = (
        preprocess(s.images, data.binarize).view(len(s.images), 1, *s.images.shape[1:])
        for s in (train_images, test_images)
    )  # the MLPs' inputs (binary or [0, 1]) as images
    if size is not None and size != x_train.shape[-1]:
        pad = size - x_train.shape[-1]
        if pad < 0:
            raise ConfigError(
                f"data.image_size={size} is smaller than {data.name}'s images "
                f"({x_train.shape[-1]} px): they are padded, never cropped"
            )
        _refuse_padding_beyond_memory(len(x_train) + len(x_test), size, data.name)
        padding = (pad // 2, pad - pad // 2) * 2
        x_train = torch.nn.functional.pad(x_train, padding)
        x_test = torch.nn.functional.pad(x_test, padding)
    mean, std = x_train.mean(), x_train.std()
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    if channels != 1:  # a view: batches are copied out of it, the dataset is not
        x_train = x_train.expand(-1, channels, -1, -1)
        x_test = x_test.expand(-1, channels, -1, -1)
    if base != data.name:  # three items side by side, 1,000 classes (experiments.kit.triples)
        return (
            triples.triple_split(x_train, train_images.labels, "train"),
            triples.triple_split(x_test, test_images.labels, "test"),
            channels,
            in_memory_classes(str(data.name)),
        )
    train = TensorSplit(x_train, train_images.labels)
    return (
        train,
        TensorSplit(x_test, test_images.labels),
        channels,
        in_memory_classes(str(data.name)),
    )


if __name__ == "__main__":
    import sys

    name = sys.argv[1] if len(sys.argv) > 1 else "mnist"
    root = sys.argv[2] if len(sys.argv) > 2 else "data"
    try:
        print(f"{name}: {ensure_dataset(name, root)}")
    except (DataUnavailable, ValueError) as e:
        sys.exit(f"error: {e}")
