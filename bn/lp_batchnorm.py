"""Batch normalization with other measures of scale, and with none (mean-only).

- :class:`L1BatchNorm2d` (and ``1d``): the batch's mean absolute deviation in place of its standard
  deviation (Santurkar et al. 2018, arXiv:1805.11604, Sec. 3.3; Hoffer et al. 2018,
  arXiv:1803.01814, Sec. 4, with the factor ``√(π/2)`` that makes it an estimate of σ for Gaussian
  values).
- :class:`LinfBatchNorm2d` (and ``1d``): the batch's largest absolute deviation (Santurkar et al.).
- :class:`MeanOnlyBatchNorm2d` (and ``1d``): subtract the batch mean, no division (Salimans &
  Kingma 2016, arXiv:1602.07868, Sec. 4: the companion of weight normalization,
  :mod:`bn.weight_norm`).

All three keep ``running_mean`` (and the first two ``running_var``) like :class:`torch.nn.BatchNorm2d`
and use them in eval mode, so an ℓp layer in eval mode computes what a torch BN layer with the same
buffers computes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.fx import Proxy
from torch.nn.modules.batchnorm import _NormBase

from . import _fx

_L1_GAUSSIAN = math.sqrt(math.pi / 2)  # σ / E|x − μ| for a Gaussian


def _stats_dims(rank: int) -> list[int]:
    return [d for d in range(rank) if d != 1]


def _channel_view(t: Tensor, rank: int) -> Tensor:
    return t.view([1, -1] + [1] * (rank - 2))


def _check_dims(name: str, x: Tensor, dims: tuple[int, ...]) -> None:
    if isinstance(x, Proxy):  # torch.fx symbolic tracing: the rank is not known
        return
    if x.dim() not in dims:
        raise ValueError(
            f"{name}: expected a {' or '.join(f'{d}D' for d in dims)} input, got {x.dim()}D"
        )


class _RunningNorm(_NormBase):
    """The running-average bookkeeping the layers share (torch's ``momentum`` convention)."""

    _dims: tuple[int, ...] = (4,)

    def _check_input_dim(self, x: Tensor) -> None:
        _check_dims(type(self).__name__, x, self._dims)

    def _rank(self, x: Tensor) -> int:
        """The input's rank; under torch.fx tracing, the one the class takes (2D layers)."""
        if not isinstance(x, Proxy):
            return x.dim()
        if len(self._dims) > 1:
            raise TypeError(f"{type(self).__name__} under torch.fx: the input's rank ({' or '.join(map(str, self._dims))}) is not known while tracing; trace the 2D layer")  # fmt: skip
        return self._dims[0]

    def _buffer(self, x: Tensor, name: str) -> Tensor:
        """Buffer ``name``; under torch.fx tracing, the graph's node for it
        (:func:`bn._fx.buffer_node`), so the traced graph reads and updates the buffer when it
        runs rather than holding a constant made from it while tracing."""
        return _fx.buffer_node(self, x, name) if isinstance(x, Proxy) else getattr(self, name)

    def _factor(self, x: Tensor) -> float:
        """This step's update rate of the running statistics (counting the step)."""
        if isinstance(x, Proxy) and self.momentum is None:
            raise NotImplementedError(
                f"{type(self).__name__}: cannot be traced by torch.fx in training mode: the "
                "cumulative average (momentum=None) needs the step count as a number; trace it "
                "in eval mode, or use torch.compile / torch.export"
            )
        self._buffer(x, "num_batches_tracked").add_(1)
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def _uses_batch(self) -> bool:
        return self.training or not self.track_running_stats


class _LpBatchNorm(_RunningNorm):
    def _scale(self, centred: Tensor, dims: list[int]) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        rank = self._rank(x)
        dims = _stats_dims(rank)
        if self._uses_batch():
            mean = x.mean(dims)
            centred = x - _channel_view(mean, rank)
            scale_sq = self._scale(centred, dims).square()
            if self.training and self.track_running_stats:
                with torch.no_grad():
                    f = self._factor(x)
                    self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), f)
                    self.running_var.lerp_(scale_sq.detach().to(self.running_var.dtype), f)
        else:
            mean, scale_sq = self._buffer(x, "running_mean"), self._buffer(x, "running_var")
            centred = x - _channel_view(mean, rank)
        y = centred * _channel_view(torch.rsqrt(scale_sq + self.eps), rank)
        if self.affine:
            y = y * _channel_view(self.weight, rank) + _channel_view(self.bias, rank)
        return y


_LP_DOC = r"""Batch normalization by the batch's {what} over a {shape_desc} input.

    Training normalizes each channel by its mean ``μ_B`` and scale ``s_B`` over the batch and
    every spatial position, ``y = γ (x − μ_B) / sqrt(s_B² + ε) + β``, with
    {formula}
    ``running_mean`` and ``running_var`` track ``μ_B`` and ``s_B²`` (``running = (1 − momentum)·
    running + momentum·batch``; no Bessel correction: ``s_B`` is not a variance), and eval mode
    uses them: ``y = γ (x − running_mean) / sqrt(running_var + ε) + β``, what
    :class:`torch.nn.{torch_name}` computes in eval mode from the same buffers, whose
    ``state_dict`` keys these are. {note}

    Args:
        num_features: ``C``, the number of channels.
        eps: added to ``s_B²`` inside the square root. Default: ``1e-5``.
        momentum: update rate of the running statistics; ``None`` for a cumulative average.
            Default: ``0.1``.
        affine: learn ``γ`` (``weight``) and ``β`` (``bias``). Default: ``True``.
        track_running_stats: keep running statistics for inference; if ``False`` batch
            statistics are used in eval mode too. Default: ``True``.

    Shape:
        - Input: {shape}
        - Output: same shape as the input

    Example::

        >>> m = bn.{name}(16)
        >>> m(torch.randn({example})).shape
        torch.Size([{example}])
    """

_L1_FORMULA = r"""``s_B = √(π/2) · mean|x − μ_B|`` (the mean absolute deviation, scaled to estimate σ
    for Gaussian values: Hoffer et al. 2018, Sec. 4; Santurkar et al. 2018, Sec. 3.3, divide by
    the mean absolute deviation itself, which differs by that constant, one a learnt γ absorbs)."""
_LINF_FORMULA = r"""``s_B = max|x − μ_B|`` (the largest absolute deviation: Santurkar et al. 2018,
    Sec. 3.3); its gradient reaches the input through the largest deviation alone."""
_LINF_NOTE = (
    "Outputs lie in ``[−1, 1]`` before ``γ``: their scale is smaller than BN's, by a factor "
    "that grows with the number of values per channel."
)


class L1BatchNorm1d(_LpBatchNorm):
    _dims = (2, 3)

    def _scale(self, centred: Tensor, dims: list[int]) -> Tensor:
        return centred.abs().mean(dims) * _L1_GAUSSIAN


class L1BatchNorm2d(L1BatchNorm1d):
    _dims = (4,)


class LinfBatchNorm1d(_LpBatchNorm):
    _dims = (2, 3)

    def _scale(self, centred: Tensor, dims: list[int]) -> Tensor:
        return centred.abs().amax(dims)


class LinfBatchNorm2d(LinfBatchNorm1d):
    _dims = (4,)


class _MeanOnlyBatchNorm(_RunningNorm):
    def __init__(
        self,
        num_features: int,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(num_features, 0.0, momentum, False, track_running_stats, device, dtype)
        self.affine = affine
        self.bias = nn.Parameter(torch.zeros(num_features, device=device, dtype=dtype)) if affine else None  # fmt: skip
        if track_running_stats:
            self.register_buffer("running_var", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.num_batches_tracked.zero_()

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        rank = self._rank(x)
        if self._uses_batch():
            mean = x.mean(_stats_dims(rank))
            if self.training and self.track_running_stats:
                with torch.no_grad():
                    self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), self._factor(x))  # fmt: skip
        else:
            mean = self._buffer(x, "running_mean")
        y = x - _channel_view(mean, rank)
        return y if self.bias is None else y + _channel_view(self.bias, rank)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


_MEAN_ONLY_DOC = r"""Mean-only batch normalization over a {shape_desc} input (Salimans & Kingma 2016,
    arXiv:1602.07868, Sec. 4).

    Training subtracts each channel's mean over the batch and every spatial position and adds a
    learnt bias, ``y = x − μ_B + β``, with no division: the scale is left to the weights, whose
    weight normalization (:class:`bn.WeightNormConv2d`, :class:`bn.WeightNormLinear`) sets it.
    ``running_mean`` tracks ``μ_B`` (``running = (1 − momentum)·running + momentum·μ_B``) and eval
    mode uses it: ``y = x − running_mean + β``. There is no ``weight`` and no ``running_var``.

    Args:
        num_features: ``C``, the number of channels.
        momentum: update rate of the running mean; ``None`` for a cumulative average.
            Default: ``0.1``.
        affine: learn ``β`` (``bias``). Default: ``True``.
        track_running_stats: keep the running mean for inference; if ``False`` the batch mean is
            used in eval mode too. Default: ``True``.

    Shape:
        - Input: {shape}
        - Output: same shape as the input

    Example::

        >>> m = bn.{name}(16)
        >>> y = m(torch.randn({example}))
        >>> y.transpose(0, 1).reshape(16, -1).mean(1).abs().max() < 1e-6  # each channel centred
        tensor(True)
    """


class MeanOnlyBatchNorm1d(_MeanOnlyBatchNorm):
    _dims = (2, 3)


class MeanOnlyBatchNorm2d(_MeanOnlyBatchNorm):
    _dims = (4,)


_SHAPES = {
    1: dict(
        shape_desc="2D or 3D",
        shape="``(N, C)`` or ``(N, C, L)``",
        example="8, 16",
        torch_name="BatchNorm1d",
    ),
    2: dict(
        shape_desc="4D", shape="``(N, C, H, W)``", example="8, 16, 4, 4", torch_name="BatchNorm2d"
    ),
}
for _cls, _d in ((L1BatchNorm1d, 1), (L1BatchNorm2d, 2)):
    _cls.__doc__ = _LP_DOC.format(name=_cls.__name__, what="mean absolute deviation", formula=_L1_FORMULA, note="", **_SHAPES[_d])  # fmt: skip
for _cls, _d in ((LinfBatchNorm1d, 1), (LinfBatchNorm2d, 2)):
    _cls.__doc__ = _LP_DOC.format(name=_cls.__name__, what="largest absolute deviation", formula=_LINF_FORMULA, note=_LINF_NOTE, **_SHAPES[_d])  # fmt: skip
for _cls, _d in ((MeanOnlyBatchNorm1d, 1), (MeanOnlyBatchNorm2d, 2)):
    _cls.__doc__ = _MEAN_ONLY_DOC.format(name=_cls.__name__, **_SHAPES[_d])
