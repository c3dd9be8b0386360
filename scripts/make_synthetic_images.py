"""Write a small synthetic ImageNet-style folder (``root/{train,val}/<class>/*.png``) for tests
and smoke runs: each class is a colored shape at a random place on a noisy background, so a
network can learn it in a few steps.

    python -m scripts.make_synthetic_images /tmp/fake --classes 4 --train 16 --val 4 --size 80
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image


def make_image_folder(
    root: str | Path,
    classes: int = 4,
    train_per_class: int = 8,
    val_per_class: int = 4,
    size: int = 80,
    seed: int = 0,
) -> Path:
    """Create the folder and return ``root``."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    colors = rng.integers(0, 256, (classes, 3))
    for split, n in (("train", train_per_class), ("val", val_per_class)):
        for c in range(classes):
            folder = root / split / f"class_{c:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                img = rng.integers(0, 80, (size, size, 3))
                side = size // 3
                y, x = rng.integers(0, size - side, 2)
                img[y : y + side, x : x + side] = colors[c]
                Image.fromarray(img.astype(np.uint8)).save(folder / f"{split}_{c}_{i}.png")
    return root


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--train", type=int, default=8, help="training images per class")
    p.add_argument("--val", type=int, default=4, help="validation images per class")
    p.add_argument("--size", type=int, default=80, help="image side in pixels")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print(make_image_folder(a.root, a.classes, a.train, a.val, a.size, a.seed))


if __name__ == "__main__":
    main()
