"""Sudden jumps of the per-step training loss, defined before any run was looked at.

The Batch Renorm paper (Ioffe 2017, arXiv:1702.03275, Sec. 4) warns that raising ``r_max`` and
``d_max`` too fast causes "occasional large gradients" that "suddenly and severely increase the
loss". A step's *jump* is its loss divided by the median loss of the :data:`WINDOW` steps before
it (none for the first :data:`WINDOW` steps); a *spike* is a jump above :data:`RATIO`.

- :data:`WINDOW` = 50 steps: enough minibatch losses for a steady median (one minibatch of 32
  examples varies by tens of percent from the next), and short beside the learning rate's decay
  interval (500 steps) and the ramp (750 of the conv net's 3,000 steps), so the median follows
  the loss's slow decline rather than lagging it.
- :data:`RATIO` = 3: a loss three times its recent typical value, an increase no one would call
  mild ("severely"); the mean loss of 32 examples rarely leaves twice its median by chance.

No torch here: the claims read the same constants.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

WINDOW = 50
RATIO = 3.0


def jumps(losses: Sequence[float], window: int = WINDOW) -> list[float | None]:
    """Each step's loss over the median of the ``window`` losses before it; None for the first
    ``window`` steps and where a loss of the window is not finite (a resumed run's unknown ones)."""
    if window < 1:
        raise ValueError(f"window={window} must be at least 1")
    out: list[float | None] = []
    for t, loss in enumerate(losses):
        before = losses[max(t - window, 0) : t]
        usable = t >= window and all(math.isfinite(v) for v in before)
        out.append(loss / statistics.median(before) if usable else None)
    return out


class LossJumps:
    """Every step's loss of ``copies`` networks trained in lockstep, and per interval between
    two calls of :meth:`interval`: the largest loss, the largest jump and the number of spikes."""

    def __init__(self, copies: int, window: int = WINDOW, ratio: float = RATIO) -> None:
        if window < 1 or ratio <= 0:
            raise ValueError(f"window={window} must be at least 1 and ratio={ratio} above 0")
        self.window, self.ratio = window, ratio
        self.losses: list[list[float]] = [[] for _ in range(copies)]
        self.start = 0  # the first step of the current interval

    @property
    def steps(self) -> int:
        return len(self.losses[0])

    def add(self, losses: Sequence[float]) -> None:
        """One step's loss of every copy."""
        if len(losses) != len(self.losses):
            raise ValueError(f"{len(losses)} losses for {len(self.losses)} networks")
        for history, loss in zip(self.losses, losses):
            history.append(float(loss))

    def restore(self, losses: Sequence[Sequence[float]], step: int) -> None:
        """The losses of steps ``0..step-1`` (a resumed run's; missing ones are NaN, so no jump
        reads them), the next interval starting at ``step``."""
        if len(losses) != len(self.losses):
            raise ValueError(f"{len(losses)} histories for {len(self.losses)} networks")
        nan = float("nan")
        self.losses = [[*map(float, h[:step]), *[nan] * (step - len(h[:step]))] for h in losses]
        self.start = step

    def interval(self) -> dict[str, list[float]]:
        """``train/loss_max``, ``train/loss_jump`` (the largest jump) and ``train/loss_spikes``
        (jumps above the ratio) of the steps since the last call, one value per copy; a key is
        left out when no step of the interval has a value for it."""
        first, self.start = self.start, self.steps
        if first == self.steps:
            return {}
        out: dict[str, list[float]] = {"train/loss_max": [max(h[first:]) for h in self.losses]}
        lo = max(first, self.window)  # the interval's first step with a jump
        per_copy = [
            [j for j in jumps(h[lo - self.window :], self.window)[self.window :] if j is not None]
            for h in self.losses
        ]
        if all(per_copy):
            out["train/loss_jump"] = [max(j) for j in per_copy]
            out["train/loss_spikes"] = [float(sum(v > self.ratio for v in j)) for j in per_copy]
        return out
