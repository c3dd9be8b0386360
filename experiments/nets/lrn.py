"""Local response normalization (Krizhevsky et al. 2012), the original Inception's stem layer.

:class:`LocalResponseNorm` computes exactly what :class:`torch.nn.LocalResponseNorm` computes,
bit for bit, forward and backward, in about half the time on a CPU, and can treat its channels as
``copies`` blocks (seeds stacked side by side, :mod:`experiments.nets.stacked`) whose windows
never cross from one block into the next.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, autograd, nn


def _window_sum(x: Tensor, size: int, left: int) -> Tensor:
    """``out[c] = x[c - left] + ... + x[c - left + size - 1]`` along dim 2 of a 5-D tensor,
    zero outside it, added in that order (from zero, as ATen's pooling kernels do)."""
    c = x.shape[2]
    padded = F.pad(x, (0, 0, 0, 0, left, size - 1 - left))
    out = padded[:, :, 0:c]
    for i in range(1, size):
        out = out + padded[:, :, i : i + c]
    return out


class _ChannelWindowMean(autograd.Function):
    """The mean of each channel's window of ``size`` channels (dim 2 of ``(N, K, C, H, W)``; zero
    padded, ``size // 2`` channels before it): ``avg_pool3d`` over the padded squares in
    :func:`torch.nn.functional.local_response_norm`, with its kernels' order of additions both
    ways (the sum divided by ``size``; the gradient divided by ``size``, then each input's
    windows added in order), so the result is the same to the last bit and the plain slices'
    additions replace ATen's 3-D pooling of a 1-wide depth (the slow part of the layer)."""

    @staticmethod
    def forward(ctx, x: Tensor, size: int) -> Tensor:
        ctx.size = size
        return _window_sum(x, size, size // 2) / size

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        size = ctx.size
        return _window_sum(grad / size, size, size - 1 - size // 2), None


class LocalResponseNorm(nn.LocalResponseNorm):
    r"""Local response normalization across channels, over ``copies`` blocks of channels.

    .. math::
        b_c = a_c \left(k + \frac{\alpha}{n} \sum_{c'} a_{c'}^2\right)^{-\beta}

    the sum over the ``n = size`` channels around ``c`` (zero beyond the first and the last
    channel of ``c``'s block). With ``copies=1`` this is :class:`torch.nn.LocalResponseNorm`, with
    the same result to the last bit, forward and backward.

    Args:
        size: ``n``, the channels in each window.
        alpha: multiplies the windows' mean square. Default: ``1e-4``.
        beta: the exponent. Default: ``0.75``.
        k: added to the scaled mean square. Default: ``1``.
        copies: blocks of channels normalized alone (networks stacked side by side); must
            divide ``C``. Default: ``1``.

    Shape:
        - Input: ``(N, C, H, W)``
        - Output: same shape as the input

    Example::

        >>> import torch
        >>> x = torch.randn(2, 8, 4, 4)
        >>> m = LocalResponseNorm(5, copies=2)
        >>> torch.equal(m(x)[:, 4:], LocalResponseNorm(5)(x[:, 4:]))
        True
    """

    def __init__(
        self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0, copies: int = 1
    ) -> None:
        super().__init__(size, alpha, beta, k)
        if copies < 1:
            raise ValueError(f"LocalResponseNorm: copies={copies} must be at least 1")
        self.copies = copies

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"LocalResponseNorm: expected (N, C, H, W), got shape {tuple(x.shape)}")  # fmt: skip
        n, c, h, w = x.shape
        if c % self.copies:
            raise ValueError(f"LocalResponseNorm: copies={self.copies} does not divide {c} channels")  # fmt: skip
        # torch's steps (square, window mean, scale, shift, power, divide), the window mean alone
        # done by slices: the autograd graph, and so every gradient, is torch's.
        div = x.mul(x).view(n, self.copies, c // self.copies, h, w)
        div = _ChannelWindowMean.apply(div, self.size).view(n, c, h, w)
        div = div.mul(self.alpha).add(self.k).pow(self.beta)
        return x / div

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", copies={self.copies}" if self.copies != 1 else "")
