"""Schedules for Batch Renorm's clipping bounds ``r_max`` and ``d_max``.

Batch Renorm paper, Sec. 4: "we used r_max = 1, d_max = 0 (i.e. simply batchnorm) for the first
5000 training steps, after which these were gradually relaxed to reach r_max = 3 at 40k steps,
and d_max = 5 at 25k steps". The ramp's shape is not given; we use a linear one.

A schedule is any callable ``step -> value``. :class:`LinearRamp` accepts a Python number or a
tensor step (the layer passes its ``num_batches_tracked`` buffer, so no device sync is needed).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

Schedule = Callable[[int | Tensor], float | Tensor]


@dataclass(frozen=True)
class LinearRamp:
    """``start`` until ``start_step``, then linear to ``end`` at ``end_step``, constant after.

    Args:
        start: value up to and including ``start_step``.
        end: value from ``end_step`` on.
        start_step: last step at which the value is ``start``.
        end_step: first step at which the value is ``end`` (``>= start_step``).
    """

    start: float
    end: float
    start_step: int
    end_step: int

    def __post_init__(self) -> None:
        if self.end_step < self.start_step:
            raise ValueError(
                f"LinearRamp: end_step={self.end_step} is before start_step={self.start_step}; "
                "the ramp must end after it starts"
            )

    def __call__(self, step: int | Tensor) -> float | Tensor:
        span = max(self.end_step - self.start_step, 1)
        if isinstance(step, numbers.Real):
            frac = min(max((step - self.start_step) / span, 0.0), 1.0)
        else:  # a tensor, or a torch.fx proxy of one
            frac = ((step.to(torch.float32) - self.start_step) / span).clamp(0.0, 1.0)
        return self.start + (self.end - self.start) * frac

    def bounds(self) -> tuple[float, float]:
        """Smallest and largest value the ramp takes."""
        return min(self.start, self.end), max(self.start, self.end)

    def scaled(self, factor: float) -> LinearRamp:
        """The same shape with every breakpoint multiplied by ``factor`` (for shorter runs)."""
        return LinearRamp(
            self.start, self.end, round(self.start_step * factor), round(self.end_step * factor)
        )


# The Batch Renorm paper's schedule (Sec. 4): plain BN (r_max = 1, d_max = 0) for the first
# WARMUP steps of a run of about PAPER_STEPS, then r_max up to R_MAX by R_MAX_STEP and d_max up to
# D_MAX by D_MAX_STEP. The one source of these numbers (the study configs read them from here).
WARMUP, R_MAX, R_MAX_STEP, D_MAX, D_MAX_STEP = 5000, 3.0, 40_000, 5.0, 25_000
PAPER_STEPS = 160_000


def paper_r_max(
    warmup_steps: int = WARMUP, final_step: int = R_MAX_STEP, final: float = R_MAX
) -> LinearRamp:
    """The Batch Renorm paper's ``r_max``: 1 for ``warmup_steps``, then up to ``final``.

    Example::

        >>> r_max = bn.paper_r_max()
        >>> r_max(0), r_max(5000), r_max(22_500), r_max(40_000), r_max(10**6)
        (1.0, 1.0, 2.0, 3.0, 3.0)
    """
    return LinearRamp(1.0, final, warmup_steps, final_step)


def paper_d_max(
    warmup_steps: int = WARMUP, final_step: int = D_MAX_STEP, final: float = D_MAX
) -> LinearRamp:
    """The Batch Renorm paper's ``d_max``: 0 for ``warmup_steps``, then up to ``final``."""
    return LinearRamp(0.0, final, warmup_steps, final_step)


def scaled_paper_schedules(
    total_steps: int, paper_total_steps: int = PAPER_STEPS
) -> tuple[LinearRamp, LinearRamp]:
    """The paper's ``(r_max, d_max)`` with breakpoints scaled to a run of ``total_steps``.

    The paper trains for about 160k steps; a run of ``total_steps`` keeps the same proportions
    (plain BN for the first 1/32 of training, ``r_max`` at its cap after 1/4, ``d_max`` after 5/32).
    """
    factor = total_steps / paper_total_steps
    return paper_r_max().scaled(factor), paper_d_max().scaled(factor)
