"""Simulate a killed run (for resume tests)."""

import contextlib
import itertools

from experiments.kit import loop


@contextlib.contextmanager
def killed_after_checkpoint(monkeypatch, n: int = 2):
    """Inside the block, ``TrainLoop`` raises ``KeyboardInterrupt`` after writing checkpoint ``n``."""
    original, calls = loop.TrainLoop.checkpoint, {"n": 0}

    def checkpoint_then_die(self):
        original(self)
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(loop.TrainLoop, "checkpoint", checkpoint_then_die)
    try:
        yield
    finally:
        monkeypatch.setattr(loop.TrainLoop, "checkpoint", original)


def dies_at_step(batches, step: int):
    """``batches`` (``batches(start)`` yields the batches of steps ``start, start + 1, ...``)
    that raises ``KeyboardInterrupt`` instead of yielding the batch of ``step``: a kill in the
    middle of an evaluation interval."""

    def wrapped(start: int):
        for s, batch in zip(itertools.count(start), batches(start)):
            if s == step:
                raise KeyboardInterrupt
            yield batch

    return wrapped
