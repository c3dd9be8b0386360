"""Simulate a killed run (for resume tests)."""

import contextlib
import itertools
import time

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


def hang_after_checkpoint(where: str, n: int) -> None:
    """From now on in this process, a ``TrainLoop`` whose checkpoint's path holds ``where``
    writes ``hanging`` beside its ``n``-th checkpoint, then never returns: a job to interrupt
    (another process's test sends the signal once ``hanging`` is there)."""
    original, seen = loop.TrainLoop.checkpoint, {}

    def checkpoint_then_hang(self):
        original(self)
        path = str(self.ckpt_path)
        if where in path:
            seen[path] = seen.get(path, 0) + 1
            if seen[path] == n:
                (self.ckpt_path.parent / "hanging").touch()
                while True:
                    time.sleep(1)

    loop.TrainLoop.checkpoint = checkpoint_then_hang
