"""Tiny IDX datasets written on the fly (tests never touch the network)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> Path:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    data = header + array.astype(np.uint8).tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def make_dataset(
    root: Path,
    folder: str = "FashionMNIST",
    n_train: int = 200,
    n_test: int = 50,
    compress: bool = False,
    seed: int = 0,
) -> Path:
    """Learnable tiny data: each class lights up its own block of pixels, plus noise."""
    rng = np.random.default_rng(seed)
    raw = root / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n)
        images = (rng.random((n, 28, 28)) < 0.1) * 255
        for i, y in enumerate(labels):
            images[i, 2 * y : 2 * y + 4, 4:24] = 255
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images, compress)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels, compress)
    return raw
