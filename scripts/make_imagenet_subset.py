"""Build an ImageNet-N subset (``DST/{train,val}/<wnid>/``) from a full ImageNet tree.

    python -m scripts.make_imagenet_subset /data/imagenet /data/imagenet100 --classes 100 --resize 256
    python -m scripts.make_imagenet_subset SRC DST --class-list classes.txt --train-per-class 300

``SRC`` holds ``train/<wnid>/*.JPEG`` and ``val/<wnid>/*.JPEG`` (torchvision's ``ImageFolder``
layout; ImageNet's validation images come flat, sort them into class folders first, e.g. with the
``valprep.sh`` of the PyTorch ImageNet example). Classes: the first ``--classes`` in sorted order,
or those listed in ``--class-list`` (one wnid per line, ``#`` comments). Images: a seeded random
``--train-per-class``/``--val-per-class`` of each class (default: all). ``--resize S`` stores each
image with its short side at ``S`` pixels (never enlarged) as JPEG, which makes loading several
times faster; without it, images are copied (or symlinked with ``--link``). Re-running skips the
images already written, so an interrupted build can be resumed. Writes ``classes.txt`` and
``manifest.json`` (source, options, counts) into ``DST``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from experiments.kit.files import special_file

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}


class SubsetError(ValueError):
    """A missing or malformed source tree, or an impossible request."""


def read_class_list(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [c for c in lines if c]


def list_images(folder: Path, root: Path | None = None) -> list[Path]:
    """The image files of ``folder``. With ``root``, a file that a link leads outside ``root``
    (a linked file, or one in a linked folder) is skipped with a warning: the subset copies (or
    links to) only what the source tree holds."""
    images = []
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() in IMAGE_SUFFIXES and special_file(p):
            raise SubsetError(
                f"{p} is not a plain file (a named pipe, socket or device): remove it"
            )
        if p.suffix.lower() not in IMAGE_SUFFIXES or not p.is_file():
            continue
        # the whole path resolved: a linked file, or a file in a linked class folder
        if root is not None and not p.resolve().is_relative_to(root.resolve()):
            print(
                f"warning: skipping {p}: a link to {p.resolve()}, outside {root}", file=sys.stderr
            )
            continue
        images.append(p)
    return images


def check_source(src: Path) -> list[str]:
    """The class folders of ``src/train`` (and ``src/val``, which must match)."""
    if not src.is_dir():
        raise SubsetError(f"source {src} does not exist")
    found = {}
    for split in ("train", "val"):
        folder = src / split
        if not folder.is_dir():
            raise SubsetError(f"{folder} does not exist: the source must hold train/ and val/")
        if list_images(folder):
            raise SubsetError(
                f"{folder} holds images directly: sort them into {folder}/<wnid>/ first "
                "(e.g. with valprep.sh from the PyTorch ImageNet example)"
            )
        found[split] = sorted(p.name for p in folder.iterdir() if p.is_dir())
        if not found[split]:
            raise SubsetError(f"{folder} has no class folders")
    missing = sorted(set(found["train"]) - set(found["val"]))
    if missing:
        raise SubsetError(f"{len(missing)} classes have no val/ folder, e.g. {missing[:3]}")
    return found["train"]


def choose_classes(available: list[str], n: int | None, class_list: Path | None) -> list[str]:
    if class_list is not None:
        wanted = read_class_list(class_list)
        unknown = [c for c in wanted if c not in set(available)]
        if unknown:
            raise SubsetError(
                f"{len(unknown)} classes of {class_list} are not in the source, e.g. {unknown[:3]}"
            )
        if len(set(wanted)) != len(wanted):
            raise SubsetError(f"{class_list} lists a class twice")
        return wanted
    if n is None:
        return available
    if not 1 <= n <= len(available):
        raise SubsetError(f"--classes {n} must be between 1 and the {len(available)} in the source")
    return available[:n]


def sample(images: list[Path], k: int | None, seed: int, key: str) -> list[Path]:
    """``k`` of ``images`` (all when ``k`` is None or larger), the same for the same seed."""
    if k is None or k >= len(images):
        return images
    return sorted(random.Random(f"{seed}/{key}").sample(images, k))


def _write(job: tuple[Path, Path, int | None, bool]) -> str | None:
    """Write one image: ``"written"``, ``"there"`` (already written), or why it could not be
    (an unreadable image is skipped; nothing half-written is left under its name)."""
    src, dst, resize, link = job
    if dst.exists():
        return "there"
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    try:
        _store(src, tmp, resize, link)
    except (OSError, ValueError) as e:  # PIL's UnidentifiedImageError is an OSError
        tmp.unlink(missing_ok=True)
        return f"{src}: {type(e).__name__}: {e}"
    except Exception as e:
        if type(e).__name__ != "DecompressionBombError":  # PIL's: too many pixels to trust
            raise
        tmp.unlink(missing_ok=True)
        return f"{src}: {type(e).__name__}: {e}"
    os.replace(tmp, dst)
    return "written"


def _store(src: Path, tmp: Path, resize: int | None, link: bool) -> None:
    if resize is not None:
        from PIL import Image

        with Image.open(src) as img:
            img = img.convert("RGB")
            scale = resize / min(img.size)
            if scale < 1:
                size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
                img = img.resize(size, Image.Resampling.BICUBIC)
            img.save(tmp, format="JPEG", quality=90)
    elif link:
        os.symlink(src.resolve(), tmp)
    else:
        shutil.copyfile(src, tmp)


def build_subset(
    src: Path,
    dst: Path,
    classes: int | None = None,
    class_list: Path | None = None,
    train_per_class: int | None = None,
    val_per_class: int | None = None,
    resize: int | None = None,
    link: bool = False,
    seed: int = 0,
    workers: int = 8,
) -> dict:
    """Build the subset and return its manifest (also written to ``dst/manifest.json``)."""
    if resize is not None and resize < 8:
        raise SubsetError(f"--resize {resize} must be at least 8 pixels")
    if resize is not None and link:
        raise SubsetError("--link stores no pixels, so it cannot be combined with --resize")
    for name, k in (("--train-per-class", train_per_class), ("--val-per-class", val_per_class)):
        if k is not None and k < 1:
            raise SubsetError(f"{name} {k} must be at least 1")
    chosen = choose_classes(check_source(src), classes, class_list)
    jobs, counts = [], {"train": {}, "val": {}}
    for split, k in (("train", train_per_class), ("val", val_per_class)):
        for wnid in chosen:
            picked = sample(list_images(src / split / wnid, src), k, seed, f"{split}/{wnid}")
            if not picked:
                raise SubsetError(f"{src / split / wnid} has no images")
            counts[split][wnid] = len(picked)
            for p in picked:
                name = p.with_suffix(".JPEG").name if resize is not None else p.name
                jobs.append((p, dst / split / wnid / name, resize, link))
    dst.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max(1, workers)) as pool:
        outcomes = list(pool.map(_write, jobs, chunksize=64))
    written = outcomes.count("written")
    failed = [o for o in outcomes if o not in ("written", "there")]
    for (_, target, _, _), outcome in zip(jobs, outcomes):
        if outcome not in ("written", "there"):  # skipped: not in the subset
            counts[target.parent.parent.name][target.parent.name] -= 1
    for line in failed:
        print(f"warning: skipped {line}", file=sys.stderr)
    (dst / "classes.txt").write_text("\n".join(chosen) + "\n")
    manifest = {
        "source": str(src.resolve()),
        "classes": len(chosen),
        "train_images": sum(counts["train"].values()),
        "val_images": sum(counts["val"].values()),
        "train_per_class": train_per_class,
        "val_per_class": val_per_class,
        "short_side": resize,
        "seed": seed,
        "written_now": written,
        "unreadable_skipped": failed,
        "short_classes": {
            split: {c: n for c, n in counts[split].items() if k is not None and n < k}
            for split, k in (("train", train_per_class), ("val", val_per_class))
        },
    }
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="full ImageNet tree with train/<wnid>/ and val/<wnid>/")
    p.add_argument("dst", type=Path)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--classes", type=int, help="the first N classes in sorted order")
    which.add_argument("--class-list", type=Path, help="a file with one wnid per line")
    p.add_argument("--train-per-class", type=int, help="training images per class (default: all)")
    p.add_argument("--val-per-class", type=int, help="validation images per class (default: all)")
    p.add_argument("--resize", type=int, help="store with this short side (JPEG)")
    p.add_argument("--link", action="store_true", help="symlink instead of copying (no --resize)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    a = p.parse_args()
    try:
        m = build_subset(
            a.src,
            a.dst,
            a.classes,
            a.class_list,
            a.train_per_class,
            a.val_per_class,
            a.resize,
            a.link,
            a.seed,
            a.workers,
        )
    except SubsetError as e:
        sys.exit(f"error: {e}")
    print(
        f"{a.dst}: {m['classes']} classes, {m['train_images']} train and {m['val_images']} val "
        f"images ({m['written_now']} written now"
        + (
            f", {len(m['unreadable_skipped'])} unreadable ones skipped"
            if m["unreadable_skipped"]
            else ""
        )
        + ")"
    )


if __name__ == "__main__":
    main()
