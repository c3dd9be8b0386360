"""bn.compiled.used(): what a run records of the compiled operators it took (the compiled and
PyTorch paths agree to rounding, not bit for bit)."""

import pytest

from bn import compiled


@pytest.fixture
def operators(monkeypatch):
    """A fresh operator list, the module's own left as it was."""
    monkeypatch.setattr(compiled, "OPERATORS", [])
    return compiled.OPERATORS


def test_off_when_turned_off(operators):
    previous = compiled.set_enabled(False)
    try:
        assert compiled.used() == "off"
    finally:
        compiled.set_enabled(previous)


def test_the_operators_built_and_those_that_failed_are_named(operators):
    previous = compiled.set_enabled(True)
    try:
        built = compiled.LazyOp(lambda: lambda x: x, "the good kernel", "the slow path")
        failed = compiled.LazyOp(lambda: 1 / 0, "the broken kernel", "the slow path")
        compiled.LazyOp(lambda: lambda x: x, "the unused kernel", "the slow path")
        assert compiled.used() == "on, none used"
        assert built() is not None
        with pytest.warns(RuntimeWarning, match="could not build the broken kernel"):
            assert failed() is None
        assert compiled.used() == (
            "on: the good kernel; the broken kernel failed to build (ZeroDivisionError: "
            "division by zero)"
        )
    finally:
        compiled.set_enabled(previous)
