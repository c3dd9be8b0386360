"""The compiled CPU kernel behind :class:`bn.BatchRenorm1d` on small ``(N, C)`` inputs.

At the size of a fully connected layer, ``(60, 100)`` say, Batch Renorm's training step written in
PyTorch operations costs about twenty small tensor operations and three autograd nodes, several
times its arithmetic. ``csrc/renorm_cpu.cpp`` computes the same thing (the statistics, ``r`` and
``d``, the output and the moving averages; then the whole backward pass) in one pass over the data
each way, as one autograd node. ``tests/bn/test_compiled.py`` holds it equal to the PyTorch path.

It is used for a training-mode Batch Renorm layer (``impl="fast"``, no ``sync_stats``) whose input
is a CPU float32/float64 ``(N, C)`` tensor of at most :data:`MAX_NUMEL` values, outside
``torch.compile`` and ``torch.func`` transforms; larger inputs go to PyTorch's multi-threaded
kernels, which are faster there. A backward pass that will be differentiated again
(``create_graph=True``) runs in differentiable ATen operations inside the kernel's autograd node,
so second derivatives are right here too.

The kernel is built with :func:`torch.utils.cpp_extension.load` the first time it is needed (about
30 s, up to minutes on a busy machine, announced by one line before it starts; it needs a C++
compiler and ninja: ``pip install bn-repro[compiled]``, or the research environment) and cached in
:func:`build_directory` (under ``TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``);
``make install`` builds it ahead. If the build fails, a warning says why and the layers use the
PyTorch path, which gives the same results, more slowly. ``BN_COMPILED=0`` in the environment, or ``set_enabled(False)``, turns it off.

    python -m scripts.build_kernel    # build it now

:func:`load_extension` builds any such extension the same way; the MNIST network's kernels
(``experiments/nets/kernels.py``) use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

SOURCE = Path(__file__).parent / "csrc" / "renorm_cpu.cpp"
NAME = "bn_repro_ops"  # the build folder; the operators live in torch.ops.bn_repro
MAX_NUMEL = 2**16  # above this, PyTorch's two-thread kernels beat the one-pass single-thread loops


def _enabled_by_environment() -> bool:
    return os.environ.get("BN_COMPILED", "1") != "0"


_enabled = _enabled_by_environment()


def set_enabled(flag: bool) -> bool:
    """Use the compiled kernel where it applies (``True``) or always the PyTorch path; returns the
    previous setting."""
    global _enabled
    previous, _enabled = _enabled, bool(flag)
    return previous


def enabled() -> bool:
    """Whether compiled kernels may be used (``BN_COMPILED`` and :func:`set_enabled`)."""
    return _enabled


OPERATORS: list[LazyOp] = []  # every LazyOp made, in order: what used() reports


class LazyOp:
    """A compiled operator, built on first call: ``op()`` returns it, or ``None`` when compiled
    kernels are turned off (:func:`enabled`) or when its build failed. A failed build is warned
    once, naming its cause (kept in ``error``) and what runs instead (``fallback``)."""

    def __init__(self, build: Callable[[], Callable], what: str, fallback: str) -> None:
        self.build, self.what, self.fallback = build, what, fallback
        self.op: Callable | None = None
        self.error: str | None = None
        self._lock = threading.Lock()
        OPERATORS.append(self)

    def __call__(self) -> Callable | None:
        if not _enabled or self.error is not None:
            return None
        if self.op is None:
            with self._lock:
                if self.op is None and self.error is None:
                    self._try_build()
        return self.op

    def _try_build(self) -> None:
        try:
            self.op = self.build()
        except Exception as e:  # no compiler, no ninja, a failed compile: fall back, say why
            self.error = reason(e)
            warnings.warn(
                f"could not build {self.what} ({self.error}); {self.fallback}. Install a C++ "
                "compiler and ninja to get it, or set BN_COMPILED=0 to skip the attempt.",
                RuntimeWarning,
                stacklevel=3,  # the layer that asked for the operator
            )


def used() -> str:
    """What a run's compiled operators were, for its record: ``"off"`` (``BN_COMPILED=0`` or
    :func:`set_enabled`), else each operator built so far (those a run called) and each whose
    build failed, or ``"on, none used"``. The compiled and PyTorch paths agree to rounding, not bit
    for bit, so a result names the one it took."""
    if not _enabled:
        return "off"
    built = [op.what for op in OPERATORS if op.op is not None]
    failed = [f"{op.what} failed to build ({op.error})" for op in OPERATORS if op.error]
    return "on: " + "; ".join(built + failed) if built or failed else "on, none used"


def status() -> str:
    """One line for logs and benchmarks: whether the kernel is in use, and if not, why."""
    if not _enabled:
        return "compiled Batch Renorm kernel: off (BN_COMPILED=0 or set_enabled(False))"
    if renorm_op() is None:
        return (
            f"compiled Batch Renorm kernel: unavailable ({renorm_op.error}); using the PyTorch path"
        )
    return f"compiled Batch Renorm kernel: in use for (N, C) CPU inputs of <= {MAX_NUMEL} values"


def build(verbose: bool = False) -> Callable:
    """Compile (or load the cached build of) ``csrc/renorm_cpu.cpp``; raises if that fails."""
    load_extension(NAME, SOURCE, "bn's Batch Renorm CPU kernel", verbose=verbose)
    return torch.ops.bn_repro.renorm_train


# torch.ops.bn_repro.renorm_train, built on first use; None when turned off or the build failed.
renorm_op = LazyOp(
    build,
    "the compiled Batch Renorm kernel",
    "BatchRenorm1d uses the PyTorch path, which gives the same results more slowly",
)


def _sources(source: Path | Sequence[Path]) -> list[Path]:
    return [source] if isinstance(source, Path) else list(source)


def build_directory(name: str = NAME, source: Path | Sequence[Path] = SOURCE) -> Path:
    """Where an extension is built and cached: one folder per source text (the ``.cpp`` files and
    the headers and ``.inc`` files beside them), torch and Python, so checkouts of different
    versions never rebuild over each other's build."""
    sources = _sources(source)
    folders = {s.parent for s in sources}
    headers = sorted(h for folder in folders for ext in ("*.h", "*.inc") for h in folder.glob(ext))
    key = f"{sys.version}|{torch.__version__}|".encode()
    key += b"".join(path.read_bytes() for path in (*sources, *headers))
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or _cpp_extension().get_default_build_root()
    return Path(root) / f"{name}-{hashlib.sha256(key).hexdigest()[:12]}"


def load_extension(
    name: str, source: Path | Sequence[Path], what: str, verbose: bool = False
) -> None:
    """Build (once per machine and source text) and load a C++ extension (one or more files) that
    registers torch operators; raises if the build fails. A build (not the load of a finished one)
    is announced before it starts: one warning-level record of the ``bn.compiled`` logger, in which
    ``what`` names the extension.

    A finished build is loaded as it is: its folder is named after the source's text, so a newer
    file date alone (a fresh checkout of the same code) does not rebuild it, as torch's build
    tool would, silently and for ~30 s, in the middle of a timed run.

    The library is built in a temporary folder and renamed into place, with its size and SHA-256
    recorded beside it (``<name>.so.sha256``); a library that does not match its record (cut
    short by a killed build or a full disk, which would kill the loading process with SIGBUS)
    or has none is built again. Processes that start together build it once (a file lock)."""
    folder = build_directory(name, source)
    library = folder / f"{name}.so"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / f"{folder.name}.lock"):
        if _intact(library):
            torch.ops.load_library(str(library))
            return
        cpp_extension = _cpp_extension()
        _put_ninja_on_path()
        # a warning-level record shows without any logging set up (Python's last resort: stderr)
        logging.getLogger(__name__).warning(
            "building %s (once per machine, 30 s to 2 min; BN_COMPILED=0 skips it)", what
        )
        for stale in folder.parent.glob(f"{folder.name}.build-*"):  # a build killed midway
            shutil.rmtree(stale, ignore_errors=True)  # (ours: the lock says none is running)
        staging = Path(tempfile.mkdtemp(prefix=f"{folder.name}.build-", dir=folder.parent))
        try:
            cpp_extension.load(  # builds and loads the library
                name=name,
                sources=[str(path) for path in _sources(source)],
                extra_cflags=["-O3"],
                build_directory=str(staging),
                is_python_module=False,
                verbose=verbose,
            )
            built = next(staging.glob(f"{name}*.so"))  # torch may add a version suffix
            record = staging / "record"
            record.write_text(_fingerprint(built))
            folder.mkdir(exist_ok=True)
            os.replace(built, library)  # the loaded copy stays valid: same file, new name
            os.replace(record, _record_of(library))
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _record_of(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"{path.stat().st_size} {digest.hexdigest()}"


def _intact(library: Path) -> bool:
    """Whether ``library`` is there and matches the size and hash recorded when it was built."""
    try:
        recorded = _record_of(library).read_text().split()
        if int(recorded[0]) != library.stat().st_size:  # the cheap check first
            return False
        return _fingerprint(library).split() == recorded
    except (OSError, ValueError, IndexError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (released by the system if the process dies)."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; concurrent builds each write a whole library
        yield
        return
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cpp_extension():
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its import warns "No CUDA runtime is found" on CPU machines
    try:
        from torch.utils import cpp_extension
    finally:
        logger.setLevel(level)
    return cpp_extension


def reason(e: Exception) -> str:
    """The informative line of a build error (a compiler's log ends in ninja's 'build stopped')."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    telling = [line for line in lines if re.search(r"error|not found|no such file", line, re.I)]
    line = (telling or lines or [repr(e)])[-1]
    return f"{type(e).__name__}: {line[:300]}"


def _put_ninja_on_path() -> None:
    """torch looks for ``ninja`` on ``PATH``; the ``ninja`` wheel puts it beside this Python,
    which is not on ``PATH`` when the environment is not activated."""
    if shutil.which("ninja"):
        return
    bin_dir = Path(sys.executable).parent
    try:
        import ninja

        bin_dir = Path(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
