"""Batch Renormalization (Ioffe, 2017, https://arxiv.org/abs/1702.03275)."""

from __future__ import annotations

import math
import numbers

import torch
import torch.distributed as dist
from torch import Tensor, nn

from . import compiled
from ._base import BatchNormBase, _average, _functorch, _lerp_into, _symbolic
from .functional import (
    BatchRenormFunction,
    ScaleGrad,
    batch_renorm,
    batch_stats,
    values_per_channel,
)
from .schedules import LinearRamp, Schedule, paper_d_max, paper_r_max

PAPER_MOMENTUM = 0.01  # the paper's moving-average rate α
# Batch Renorm's gradient ablations (the class docstring): is its gain its gradient scaling?
ABLATIONS = (None, "bn_forward_r_grad", "renorm_forward_bn_grad")

_BRN_DOC = r"""Batch Renormalization over a {shape_desc} input (Batch Renorm paper, Algorithm 1).

    Training (per channel, statistics over the batch and spatial positions as in BN)::

        σ_B = sqrt(ε + mean((x − μ_B)²))                       # ε inside the std
        r = stop_gradient(clip(σ_B / σ, 1/r_max, r_max))
        d = stop_gradient(clip((μ_B − μ) / σ, −d_max, d_max))
        y = γ·((x − μ_B)/σ_B · r + d) + β
        μ ← μ + α(μ_B − μ),  σ ← σ + α(σ_B − σ)              # after r and d are computed

    Inference is plain BN with the moving statistics: ``y = γ (x − μ)/σ + β``. With
    ``r_max = 1, d_max = 0`` training is exactly BN; with ``r``, ``d`` unclipped the training output
    equals the inference output. :func:`bn.functional.batch_renorm` is this algorithm written out
    line by line; every implementation below is tested equal to it.

    The moving average is of the standard deviation σ (ε inside), as in the paper. It is stored
    as ``running_var = σ² − ε`` under torch's buffer names, so a checkpoint loads strictly into
    :class:`torch.nn.{bn_name}` and gives the same eval output (``sqrt(running_var + ε) = σ``).
    The layer is a subclass of :class:`torch.nn.{bn_name}`: tools that read the running statistics
    for inference (fusion, freezing) see the plain BN that Batch Renorm is at inference. fvcore's
    PreciseBN recomputes them as the population mean and a variance whose within-batch part is
    smaller by ``(m − 1)/m`` (it takes ``running_var`` after a momentum-1 step for a
    Bessel-corrected variance; here it is ``σ_B² − ε``, the biased one);
    :func:`bn.set_population_statistics` computes the exact estimators (SWA's
    ``torch.optim.swa_utils.update_bn`` runs this layer's own update with ``momentum=None``, a
    cumulative average of ``σ_B`` with ``r``, ``d`` applied, not Algorithm 2).

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
        ablation: ``None`` (default): Algorithm 1. Two ablations that separate Batch Renorm's
            forward correction from its gradient (with ``r``, ``d`` held constant, BRN's
            ``∂ℓ/∂x`` is ``r`` times BN's for the same upstream gradient):
            ``"bn_forward_r_grad"``: BN's output ``γ·x̂ + β``, with ``∂ℓ/∂x`` multiplied by this
            batch's ``r`` (``∂ℓ/∂γ``, ``∂ℓ/∂β`` are BN's); ``"renorm_forward_bn_grad"``:
            BRN's output, with ``∂ℓ/∂x`` divided by ``r``, i.e. BN's (``∂ℓ/∂γ``, ``∂ℓ/∂β`` are
            BRN's). Both keep BRN's moving statistics, so inference is the same as BRN's. They use
            the PyTorch path (not :mod:`bn.compiled`, not ``sync_stats``).
        impl, microbatch, sync_stats, process_group: as in :class:`bn.BatchNorm2d`; with
            microbatches, ``r`` and ``d`` are computed per microbatch, and ``μ``, ``σ`` get one update
            per step with the average of the microbatches' ``μ_B`` and ``σ_B``. ``impl="fast"``
            uses that with ``r``, ``d`` held constant a training step is a BN step with weight
            ``γ·r`` and bias ``γ·d + β``: torch's fused BN kernels, forward and backward
            (:class:`bn.functional.BatchRenormFunction`); small ``(N, C)`` CPU inputs go through a
            compiled kernel of the same algorithm (:mod:`bn.compiled`). ``impl="reference"``: the
            hand-derived backward of :class:`bn.functional.BatchNormFunction`.

    Shape:
        - Input: {shape}
        - Output: same shape as the input

    Example::

        >>> m = bn.{name}(16)  # the paper's schedule: r_max = 1, d_max = 0 for 5000 steps
        >>> y = m(torch.randn({example}))
        >>> m.current_r_max, m.current_d_max, int(m.num_batches_tracked)
        (1.0, 0.0, 1)
        >>> m.r_max = 3.0  # or fixed clips
        >>> m.current_r_max
        3.0
    """


def _bound_error(layer: str, name: str, what: str, value: object, minimum: float) -> ValueError:
    clip = (
        "r is clipped to [1/r_max, r_max]" if name == "r_max" else "d is clipped to [-d_max, d_max]"
    )
    return ValueError(
        f"{layer}: {name}={what} takes the value {value}, below the minimum {minimum:g} ({clip}); "
        f"set {name} >= {minimum:g}"
    )


def _check_bound(layer: str, name: str, value: float | Schedule, minimum: float) -> None:
    """Check a bound when it is set: a number, or a :class:`LinearRamp`'s smallest value (other
    schedules are checked at each use, :meth:`BatchRenormBase._bounds`)."""
    if isinstance(value, LinearRamp):
        lo, hi = value.bounds()
    elif callable(value):
        return
    elif isinstance(value, numbers.Real) or (isinstance(value, Tensor) and value.numel() == 1):
        lo = hi = float(value)
    else:
        raise ValueError(
            f"{layer}: {name}={value!r} must be a number or a schedule (a callable step -> value)"
        )
    if not lo >= minimum:  # also rejects NaN
        raise _bound_error(layer, name, repr(value), lo, minimum)
    if not math.isfinite(hi):  # an infinite bound makes the correction inf * 0 = NaN
        raise ValueError(
            f"{layer}: {name}={value!r} reaches {hi}; a bound must be finite (for no clipping in "
            "practice, a large finite value)"
        )


class BatchRenormBase(BatchNormBase):
    """The base of :class:`BatchRenorm1d`, :class:`BatchRenorm2d` and :class:`BatchRenorm3d`
    (see there); ``isinstance(m, bn.BatchRenormBase)`` is :func:`bn.is_batch_renorm`."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = PAPER_MOMENTUM,
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
        ablation: str | None = None,
    ) -> None:
        name = type(self).__name__
        if ablation not in ABLATIONS:
            raise ValueError(f"{name}: ablation={ablation!r} is not one of {ABLATIONS}")
        if ablation is not None and (sync_stats or impl != "fast"):
            raise ValueError(
                f"{name}: ablation={ablation!r} runs on one process with impl='fast'; "
                "set sync_stats=False and impl='fast'"
            )
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
        self.ablation = ablation
        self._last: tuple | None = None  # r, d (unclipped) and the bounds of the last batch

    # The bounds are checked whenever they are set (plain numbers and LinearRamps once; other
    # schedules at each use, since only their values can tell).
    @property
    def r_max(self) -> float | Schedule:
        """Bound on ``r``: a number ``>= 1`` or a schedule ``step -> value``."""
        return self._r_max

    @r_max.setter
    def r_max(self, value: float | Schedule) -> None:
        _check_bound(type(self).__name__, "r_max", value, 1.0)
        self._r_max = value

    @property
    def d_max(self) -> float | Schedule:
        """Bound on ``|d|``: a number ``>= 0`` or a schedule ``step -> value``."""
        return self._d_max

    @d_max.setter
    def d_max(self, value: float | Schedule) -> None:
        _check_bound(type(self).__name__, "d_max", value, 0.0)
        self._d_max = value

    def _at(self, name: str, bound: float | Schedule, step: int | Tensor, minimum: float):
        if not callable(bound):
            return float(bound)
        value = bound(step)
        if isinstance(bound, LinearRamp):  # its range was checked when it was set
            return value
        if _functorch():  # a value under torch.func cannot be read to check it (eager steps do)
            return value
        if _symbolic(value) or (isinstance(value, Tensor) and value.device.type != "cpu"):
            # Checked on the device (or in the graph): reading the value would wait for it.
            torch._assert_async(value >= minimum, f"{type(self).__name__}: {name} < {minimum:g}")
        elif not value >= minimum:
            raise _bound_error(
                type(self).__name__, name, f"{bound!r} at step {int(step)}", float(value), minimum
            )
        return value

    def _bounds(self, step: Tensor | None = None) -> tuple[float | Tensor, float | Tensor]:
        """``(r_max, d_max)`` at the current step (``num_batches_tracked``, or ``step``)."""
        step = self.num_batches_tracked if step is None else step
        # On CPU in eager mode reading the step is free and plain-number schedules save a dozen
        # tiny tensor ops per call; on GPU, and when traced (compile, export, fx) or transformed
        # (torch.func), tensor arithmetic avoids a device sync or a data-dependent value.
        if not (_symbolic(step) or _functorch()) and step.device.type == "cpu":
            step = int(step)
        return self._at("r_max", self.r_max, step, 1.0), self._at("d_max", self.d_max, step, 0.0)

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

    def clip_fractions(self, blocks: int = 1) -> tuple[Tensor, Tensor] | None:
        """``(r, d)``: the fractions of the last training batch's ``r`` and ``d`` values that
        were clipped, each ``(blocks,)``, one per block of ``C / blocks`` consecutive channels
        (several networks stacked channel-wise, one block each). ``blocks=1`` gives
        :attr:`r_clip_fraction` and :attr:`d_clip_fraction`."""
        if self._last is None:
            return None
        if blocks < 1 or self.num_features % blocks:
            raise ValueError(f"blocks={blocks} must divide num_features={self.num_features}")
        r, d, r_max, d_max = self._last
        clipped = ((r < 1.0 / r_max) | (r > r_max), d.abs() > d_max)
        return tuple(c.reshape(-1, blocks, self.num_features // blocks).float().mean((0, 2)) for c in clipped)  # fmt: skip

    def _forward_batch_stats(self, x: Tensor, groups: int) -> Tensor:
        if self.ablation is not None:
            return self._forward_ablation(x, groups)
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

    def _forward_ablation(self, x: Tensor, groups: int) -> Tensor:
        """A training step of ``ablation`` (see the class): Algorithm 1's statistics, ``r``,
        ``d`` and moving averages, with the output or the input gradient of BN."""
        mean, var = batch_stats(x, groups)
        count = values_per_channel(x, groups)
        r, d = self._correction(mean, var)
        if self.ablation == "bn_forward_r_grad":
            xs, r_out, d_out = ScaleGrad.apply(x, r, groups), None, None
        else:  # renorm_forward_bn_grad
            xs, r_out, d_out = ScaleGrad.apply(x, r.reciprocal(), groups), r, d
        args = (self.eps, groups, None, count)
        y = BatchRenormFunction.apply(xs, self.weight, self.bias, mean, var, r_out, d_out, *args)
        self._update_running_stats(mean, var, count)
        return y

    def _unlike_torch(self) -> str | None:
        if self.training:
            return "Batch Renorm's r, d"
        return super()._unlike_torch()

    def _forward_traced(self, x: Tensor) -> Tensor:
        """What ``torch.fx`` records in training: Algorithm 1 in plain tensor operations
        (:func:`bn.functional.batch_renorm`), the bounds computed from the step buffer. A graph
        checks no shapes: an empty batch or one value per channel, which the layer refuses or
        passes through, are not caught there."""
        if not self.training:
            return super()._forward_traced(x)
        self._check_traceable(microbatch_ok=True)
        if self.ablation is not None:
            raise NotImplementedError(
                f"{self._get_name()}: ablation={self.ablation!r} cannot be traced by torch.fx"
            )
        step = self._buffer_node(x, "num_batches_tracked")
        r_max, d_max = self._bounds(step)
        step.add_(1)
        return batch_renorm(
            x,
            self._buffer_node(x, "running_mean"),
            self._buffer_node(x, "running_var"),
            self.weight,
            self.bias,
            r_max=r_max,
            d_max=d_max,
            momentum=self.momentum,
            eps=self.eps,
            microbatch=self.microbatch,
        )

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
            and not _functorch()  # torch.func cannot run C++ autograd functions
        )

    # Algorithm 1, the lines before and after the normalization (bn.functional.batch_renorm has
    # the whole algorithm in one place). No autograd: the statistics come without gradient.
    @torch.no_grad()
    def _correction(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """``r = clip(σ_B/σ, 1/r_max, r_max)``, ``d = clip((μ_B − μ)/σ, −d_max, d_max)``, ``(G, C)``."""
        inv_sigma = torch.rsqrt(self.running_var.to(var.dtype) + self.eps)
        r = torch.sqrt(var + self.eps) * inv_sigma  # σ_B / σ
        d = (mean - self.running_mean.to(mean.dtype)) * inv_sigma  # (μ_B − μ) / σ
        r_max, d_max = self._bounds()
        if not _functorch():  # no batched or wrapped tensor may stay on the layer
            self._last = (r, d, r_max, d_max)
        return torch.clamp(r, 1.0 / r_max, r_max), torch.clamp(d, -d_max, d_max)

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, count: int) -> None:
        """``μ ← μ + α(μ_B − μ)``, ``σ ← σ + α(σ_B − σ)`` (averages over microbatches)."""
        self.num_batches_tracked.add_(1)
        factor = self._average_factor()
        sigma = torch.sqrt(self.running_var + self.eps)
        _lerp_into(sigma, _average(torch.sqrt(var + self.eps)).to(sigma.dtype), factor)
        _lerp_into(self.running_mean, _average(mean).to(self.running_mean.dtype), factor)
        # no out=: vmap refuses it; no square_ under torch.func: vmap has no batching rule for it
        self.running_var.copy_((sigma.square() if _functorch() else sigma.square_()).sub_(self.eps))

    def extra_repr(self) -> str:
        s = super().extra_repr() + f", r_max={self.r_max!r}, d_max={self.d_max!r}"
        return s + (f", ablation={self.ablation!r}" if self.ablation is not None else "")


def is_batch_renorm(module: object) -> bool:
    """Whether ``module`` is one of :mod:`bn`'s Batch Renorm layers (any dimension)."""
    return isinstance(module, BatchRenormBase)


class BatchRenorm1d(BatchRenormBase, nn.BatchNorm1d):
    __doc__ = _BRN_DOC.format(
        name="BatchRenorm1d",
        bn_name="BatchNorm1d",
        shape_desc="2D or 3D",
        shape="``(N, C)`` or ``(N, C, L)``",
        example="8, 16",
    )
    _expected_dims = (2, 3)
    _shape_hint = "(N, C) or (N, C, L); use BatchRenorm2d for (N, C, H, W)"


class BatchRenorm2d(BatchRenormBase, nn.BatchNorm2d):
    __doc__ = _BRN_DOC.format(
        name="BatchRenorm2d",
        bn_name="BatchNorm2d",
        shape_desc="4D",
        shape="``(N, C, H, W)``",
        example="8, 16, 5, 5",
    )
    _expected_dims = (4,)
    _shape_hint = "(N, C, H, W); use BatchRenorm1d for (N, C) or (N, C, L)"


class BatchRenorm3d(BatchRenormBase, nn.BatchNorm3d):
    __doc__ = _BRN_DOC.format(
        name="BatchRenorm3d",
        bn_name="BatchNorm3d",
        shape_desc="5D",
        shape="``(N, C, D, H, W)``",
        example="8, 16, 3, 5, 5",
    )
    _expected_dims = (5,)
    _shape_hint = "(N, C, D, H, W)"


class _BatchRenormXd(BatchRenormBase):
    """Batch Renorm over an input of any rank ``(N, C, *)`` (see ``bn.batchnorm._BatchNormXd``)."""

    _expected_dims = (2, 3, 4, 5)
    _shape_hint = "(N, C, *)"


__all__ = ["BatchRenorm1d", "BatchRenorm2d", "BatchRenorm3d", "BatchRenormBase", "is_batch_renorm"]
