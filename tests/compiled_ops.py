"""The compiled operators the tests exercise: built, or skipped where they cannot be."""

import shutil
from collections.abc import Callable

import pytest

HAS_COMPILER = shutil.which("c++") is not None or shutil.which("g++") is not None


def built_or_skip(op: Callable | None, why: str) -> Callable:
    """``op``; if it is ``None`` (not built), fail on a machine with a C++ compiler, where the
    build must work (``why`` says what went wrong), and skip on one without."""
    if op is None:
        assert not HAS_COMPILER, f"a C++ compiler is present, yet: {why}"
        pytest.skip("no C++ compiler: the compiled operator cannot be built here")
    return op


def without_compiler(monkeypatch: pytest.MonkeyPatch, op) -> None:
    """Make the :class:`bn.compiled.LazyOp` ``op`` build afresh, and fail the way a machine
    without ninja does."""

    def no_compiler(verbose=False):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(op, "build", no_compiler)
    monkeypatch.setattr(op, "op", None)
    monkeypatch.setattr(op, "error", None)
