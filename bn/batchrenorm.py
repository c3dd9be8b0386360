"""Batch Renormalization (Ioffe, 2017, https://arxiv.org/abs/1702.03275)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from . import compiled
from ._base import _average, _NormBase
from .schedules import LinearRamp, Schedule, paper_d_max, paper_r_max

_BRN_DOC = r"""Batch Renormalization over a {shape_desc} input (Batch Renorm paper, Algorithm 1).

    Training (per channel, statistics over the batch and spatial positions as in BN)::

        σ_B = sqrt(ε + mean((x − μ_B)²))                       # ε inside the std
        r = stop_gradient(clip(σ_B / σ, 1/r_max, r_max))
        d = stop_gradient(clip((μ_B − μ) / σ, −d_max, d_max))
        y = γ·((x − μ_B)/σ_B · r + d) + β
        μ ← μ + α(μ_B − μ),  σ ← σ + α(σ_B − σ)              # after r and d are computed

    Inference is plain BN with the moving statistics: ``y = γ (x − μ)/σ + β``. With
    ``r_max = 1, d_max = 0`` training is exactly BN; with ``r``, ``d`` unclipped the training output
    equals the inference output.

    The moving average is of the standard deviation σ (ε inside), as in the paper. It is stored
    as ``running_var = σ² − ε`` under torch's buffer names, so a checkpoint loads strictly into
    :class:`torch.nn.{bn_name}` and gives the same eval output (``sqrt(running_var + ε) = σ``).

    ``r_max`` and ``d_max`` are numbers (fixed clips) or schedules ``step -> value`` (default: the
    paper's, :func:`bn.paper_r_max` / :func:`bn.paper_d_max`: 1 and 0 for 5000 steps, then linear to
    3 at 40k and 5 at 25k). The step is the ``num_batches_tracked`` buffer, so a schedule survives
    checkpoint and resume. After each training batch, :attr:`r_clip_fraction` and
    :attr:`d_clip_fraction` hold the fraction of ``r`` and ``d`` values that were clipped.

    Args:
        num_features: ``C``, the number of channels.
        eps: ``ε``. Default: ``1e-5``.
        momentum: the paper's moving-average rate ``α`` (torch's update-rate convention);
            ``None`` for a cumulative average. Default: ``0.01`` (the paper's value).
        affine: learn ``γ`` and ``β``. Default: ``True``.
        track_running_stats: must be ``True``: Batch Renorm needs the moving statistics.
        r_max: bound on ``r`` (``>= 1``), a number or a schedule. Default: the paper's schedule.
        d_max: bound on ``|d|`` (``>= 0``), a number or a schedule. Default: the paper's schedule.
        impl, microbatch, sync_stats, process_group: as in :class:`bn.BatchNorm2d`; with
            microbatches, ``r`` and ``d`` are computed per microbatch, and ``μ``, ``σ`` get one update
            per step with the average of the microbatches' ``μ_B`` and ``σ_B``. With
            ``impl="fast"``, small ``(N, C)`` CPU inputs go through a compiled kernel of the same
            algorithm (:mod:`bn.compiled`).

    Shape:
        - Input: {shape}
        - Output: same shape as the input

    Example::

        >>> m = bn.{name}(16, r_max=3.0, d_max=5.0)
        >>> y = m(torch.randn({example}))
    """


def _check_bound(layer: str, name: str, value: float | Schedule, minimum: float) -> None:
    if isinstance(value, LinearRamp):
        lo = value.bounds()[0]
    elif callable(value):
        return
    else:
        lo = float(value)
    if not lo >= minimum:  # also rejects NaN
        raise ValueError(
            f"{layer}: {name}={value!r} takes the value {lo}, below the minimum {minimum} "
            f"({'r is clipped to [1/r_max, r_max]' if name == 'r_max' else 'd is clipped to [-d_max, d_max]'}); "
            f"set {name} >= {minimum:g}"
        )


class _BatchRenormNd(_NormBase):
    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.01,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
        r_max: float | Schedule = paper_r_max(),  # noqa: B008 (immutable)
        d_max: float | Schedule = paper_d_max(),  # noqa: B008 (immutable)
        impl: str = "fast",
        microbatch: int | None = None,
        sync_stats: bool = False,
        process_group: dist.ProcessGroup | None = None,
    ) -> None:
        name = type(self).__name__
        if not track_running_stats:
            raise ValueError(
                f"{name}: track_running_stats=False is impossible: Batch Renorm normalizes "
                "with its moving statistics during training; set track_running_stats=True"
            )
        _check_bound(name, "r_max", r_max, 1.0)
        _check_bound(name, "d_max", d_max, 0.0)
        super().__init__(
            num_features,
            eps,
            momentum,
            affine,
            track_running_stats,
            device,
            dtype,
            bias=bias,
            impl=impl,
            microbatch=microbatch,
            sync_stats=sync_stats,
            process_group=process_group,
        )
        self.r_max = r_max
        self.d_max = d_max
        self._last: tuple | None = None  # r, d (unclipped) and the bounds of the last batch

    @staticmethod
    def _at(bound: float | Schedule, step: int | Tensor) -> float | Tensor:
        return bound(step) if callable(bound) else float(bound)

    def _bounds(self) -> tuple[float | Tensor, float | Tensor]:
        """``(r_max, d_max)`` at the current step (``num_batches_tracked``)."""
        step = self.num_batches_tracked
        # On CPU reading the step is free and plain-number schedules save a dozen tiny tensor
        # ops per call; on GPU, tensor arithmetic avoids a device sync.
        step = int(step) if step.device.type == "cpu" else step
        return self._at(self.r_max, step), self._at(self.d_max, step)

    @property
    def current_r_max(self) -> float:
        """``r_max`` for the next training batch."""
        return float(self._bounds()[0])

    @property
    def current_d_max(self) -> float:
        """``d_max`` for the next training batch."""
        return float(self._bounds()[1])

    @property
    def r_clip_fraction(self) -> Tensor | None:
        """Fraction of the last training batch's ``r`` values that were clipped."""
        if self._last is None:
            return None
        r, _, r_max, _ = self._last
        return ((r < 1.0 / r_max) | (r > r_max)).float().mean()

    @property
    def d_clip_fraction(self) -> Tensor | None:
        """Fraction of the last training batch's ``d`` values that were clipped."""
        if self._last is None:
            return None
        _, d, _, d_max = self._last
        return (d.abs() > d_max).float().mean()

    def _forward_batch_stats(self, x: Tensor, groups: int) -> Tensor:
        op = compiled.renorm_op() if self._compiled_applies(x) else None
        if op is None:
            return super()._forward_batch_stats(x, groups)
        # The same steps as the PyTorch path (_correction, normalization, _update_running_stats)
        # in one compiled call: bounds at the current step, the average's rate after the count.
        r_max, d_max = self._bounds()
        self.num_batches_tracked.add_(1)
        y, r, d = op(
            x.contiguous(),
            self.weight,
            self.bias,
            self.running_mean,
            self.running_var,
            groups,
            self.eps,
            float(r_max),
            float(d_max),
            self._average_factor(),
        )
        self._last = (r, d, r_max, d_max)
        return y

    def _compiled_applies(self, x: Tensor) -> bool:
        """Whether :mod:`bn.compiled`'s kernel computes this training step (see there)."""
        dtype = x.dtype
        return (
            x.dim() == 2
            and x.device.type == "cpu"
            and dtype in (torch.float32, torch.float64)
            and x.numel() <= compiled.MAX_NUMEL
            and self.impl == "fast"
            and not self.sync_stats
            and self.running_mean.dtype == dtype
            and (self.weight is None or self.weight.dtype == dtype)
            and (self.bias is None or self.bias.dtype == dtype)
            and not torch.compiler.is_compiling()
        )

    # No autograd here: mean and var come without gradient (stop_gradient), the rest are buffers.
    def _correction(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        inv_sigma = torch.rsqrt(self.running_var + self.eps)
        r = torch.sqrt(var + self.eps) * inv_sigma  # σ_B / σ
        d = (mean - self.running_mean) * inv_sigma  # (μ_B − μ) / σ
        r_max, d_max = self._bounds()
        self._last = (r, d, r_max, d_max)
        return torch.clamp(r, 1.0 / r_max, r_max), torch.clamp(d, -d_max, d_max)

    def _update_running_stats(self, mean: Tensor, var: Tensor, count: int) -> None:
        """The paper's update: moving averages of μ_B and of σ_B (not of the variance)."""
        self.num_batches_tracked.add_(1)
        factor = self._average_factor()
        sigma = torch.sqrt(self.running_var + self.eps)
        sigma.lerp_(_average(torch.sqrt(var + self.eps)).to(sigma.dtype), factor)
        self.running_mean.lerp_(_average(mean).to(self.running_mean.dtype), factor)
        torch.sub(sigma.square_(), self.eps, out=self.running_var)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", r_max={self.r_max!r}, d_max={self.d_max!r}"


class BatchRenorm1d(_BatchRenormNd):
    __doc__ = _BRN_DOC.format(
        name="BatchRenorm1d",
        bn_name="BatchNorm1d",
        shape_desc="2D or 3D",
        shape="``(N, C)`` or ``(N, C, L)``",
        example="8, 16",
    )
    _expected_dims = (2, 3)
    _shape_hint = "(N, C) or (N, C, L); use BatchRenorm2d for (N, C, H, W)"


class BatchRenorm2d(_BatchRenormNd):
    __doc__ = _BRN_DOC.format(
        name="BatchRenorm2d",
        bn_name="BatchNorm2d",
        shape_desc="4D",
        shape="``(N, C, H, W)``",
        example="8, 16, 5, 5",
    )
    _expected_dims = (4,)
    _shape_hint = "(N, C, H, W); use BatchRenorm1d for (N, C) or (N, C, L)"


class BatchRenorm3d(_BatchRenormNd):
    __doc__ = _BRN_DOC.format(
        name="BatchRenorm3d",
        bn_name="BatchNorm3d",
        shape_desc="5D",
        shape="``(N, C, D, H, W)``",
        example="8, 16, 3, 5, 5",
    )
    _expected_dims = (5,)
    _shape_hint = "(N, C, D, H, W)"


__all__ = ["BatchRenorm1d", "BatchRenorm2d", "BatchRenorm3d"]
