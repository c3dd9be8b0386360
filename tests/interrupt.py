"""Simulate a run killed right after its n-th checkpoint (for resume tests)."""

import contextlib

from experiments import engine


@contextlib.contextmanager
def killed_after_checkpoint(monkeypatch, n: int = 2):
    """Inside the block, ``TrainLoop`` raises ``KeyboardInterrupt`` after writing checkpoint ``n``."""
    original, calls = engine.TrainLoop.checkpoint, {"n": 0}

    def checkpoint_then_die(self):
        original(self)
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(engine.TrainLoop, "checkpoint", checkpoint_then_die)
    try:
        yield
    finally:
        monkeypatch.setattr(engine.TrainLoop, "checkpoint", original)
