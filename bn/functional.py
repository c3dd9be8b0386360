"""Stateless pieces shared by every normalization layer in :mod:`bn`.

Every training-mode computation works on the *group view* of an input of shape ``(N, C, *)``::

    x.reshape(G, g, C, S)    # G microbatches of g = N / G examples, C channels, S = prod(*)

and takes its statistics over dims ``(1, 3)``: per microbatch and channel, jointly over the
examples and the spatial positions (BN paper Sec. 3.2). Without microbatches ``G = 1``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

REDUCE_DIMS = (1, 3)
SMALL = 2**16  # below this many elements, per-call overhead outweighs memory traffic
CANCELLATION = 10.0  # mean² > this × var: E[x²] − E[x]² would lose over ~1e-5 of var (float32)


def group_view(x: Tensor, groups: int) -> Tensor:
    """``x`` of shape ``(N, C, *)`` as ``(G, N/G, C, prod(*))`` (a view when ``x`` is contiguous)."""
    return x.reshape(groups, x.shape[0] // groups, x.shape[1], -1)


def values_per_channel(x: Tensor, groups: int = 1) -> int:
    """Number of values each channel's statistics are taken over: ``(N / G) * prod(*)``."""
    return (x.shape[0] // groups) * math.prod(x.shape[2:])


def _side_by_side(x: Tensor, groups: int) -> Tensor:
    """``(N, C)`` as ``(N/G, G*C)``: microbatch ``k``'s channels become channels ``k*C ... k*C+C-1``."""
    n, c = x.shape
    return x.view(groups, n // groups, c).transpose(0, 1).reshape(n // groups, groups * c)


def _from_side_by_side(y: Tensor, groups: int) -> Tensor:
    g, gc = y.shape
    c = gc // groups
    return y.view(g, groups, c).transpose(0, 1).reshape(g * groups, c)


@torch.no_grad()
def batch_stats(x: Tensor, groups: int = 1) -> tuple[Tensor, Tensor]:
    """Per-microbatch, per-channel mean and *biased* variance of ``x``, each of shape ``(G, C)``.

    No gradient: the layers use these for Batch Renorm's ``r``, ``d`` and for the moving averages.
    """
    n, c = x.shape[:2]
    if x.dim() == 2:
        # No spatial positions: torch's fused Welford kernel, on the microbatches side by side.
        xs = x if groups == 1 else _side_by_side(x, groups)
        mean, var = torch.batch_norm_update_stats(xs, None, None, 0.0)
        return mean.view(groups, c), var.view(groups, c)
    if x.numel() < SMALL:
        stats = [torch.batch_norm_update_stats(xb, None, None, 0.0) for xb in x.chunk(groups)]
        return torch.stack([m for m, _ in stats]), torch.stack([v for _, v in stats])
    # Large inputs: sums over contiguous rows of spatial positions are several times faster on
    # CPU than the Welford kernel. E[x²] − E[x]² cancels when |mean| >> std; such (rare) channels
    # make the whole call take the two-pass route, (x − mean)² summed with the mean known. On an
    # accelerator the two-pass route is always taken: choosing would wait for the device.
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    rows = x.reshape(n, c, -1)
    rows = rows if rows.dtype == acc else rows.to(acc)
    m = (n // groups) * rows.shape[-1]
    mean = rows.sum(-1).view(groups, -1, c).sum(1) / m
    two_pass = x.device.type != "cpu"
    if not two_pass:
        sq = torch.linalg.vector_norm(rows, dim=-1).square_().view(groups, -1, c).sum(1)
        var = sq / m - mean.square()
        two_pass = bool((mean.square() > CANCELLATION * var).any())
    if two_pass:
        centered = rows.view(groups, -1, c, rows.shape[-1]) - mean.view(groups, 1, c, 1)
        var = centered.square_().mean(dim=REDUCE_DIMS)
    var = var.clamp_min_(0.0)
    return mean.to(x.dtype), var.to(x.dtype)


def batch_norm_train(
    x: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """Training-mode BN of each microbatch with PyTorch's fused kernel.

    ``weight`` and ``bias`` have shape ``(G, C)`` (one affine map per microbatch, which is how
    Batch Renorm's per-microbatch ``r`` and ``d`` enter), ``(C,)`` when ``G = 1``, or are ``None``.
    """
    if groups == 1:
        return F.batch_norm(x, None, None, weight, bias, True, 0.0, eps)
    if x.dim() == 2:
        # Tiny (N, C) inputs: one kernel call on the microbatches laid side by side as channels
        # costs far less than one call per microbatch.
        w = None if weight is None else weight.reshape(-1)
        b = None if bias is None else bias.reshape(-1)
        y = F.batch_norm(_side_by_side(x, groups), None, None, w, b, True, 0.0, eps)
        return _from_side_by_side(y, groups)
    # Large inputs: each microbatch is a contiguous slice, so a call per slice copies nothing.
    ws = [None] * groups if weight is None else weight.unbind(0)
    bs = [None] * groups if bias is None else bias.unbind(0)
    return torch.cat(
        [
            F.batch_norm(xb, None, None, w, b, True, 0.0, eps)
            for xb, w, b in zip(x.chunk(groups), ws, bs)
        ]
    )


def _channel_view(t: Tensor | None) -> Tensor | None:
    """A per-channel ``(C,)`` tensor, or a per-microbatch ``(G, C)`` one, as ``(G|1, 1, C, 1)``."""
    if t is None:
        return None
    return t.reshape(-1, 1, t.shape[-1], 1)


class BatchNormFunction(torch.autograd.Function):
    """BN paper Algorithm 1 with its hand-derived backward pass (the ``reference`` implementation).

    Inputs are in the group view ``(G, g, C, S)``; ``gamma`` and ``beta`` have shape ``(C,)`` or
    are ``None`` (``affine=False``, ``bias=False``). ``r`` and ``d`` (shape ``(G, C)`` or ``None``)
    are Batch Renorm's corrections: constants here, they receive no gradient (BRN paper
    Algorithm 1: ``stop_gradient``). With ``r = 1`` and ``d = 0`` this is exactly BN.

    The backward pass follows the paper's chain rule term by term: ``∂ℓ/∂x̂``, ``∂ℓ/∂σ²_B``,
    ``∂ℓ/∂μ_B``, ``∂ℓ/∂x_i``, ``∂ℓ/∂γ``, ``∂ℓ/∂β``.
    """

    @staticmethod
    def forward(ctx, x, gamma, beta, r, d, eps):  # type: ignore[override]
        gamma_, beta_, r_, d_ = (_channel_view(t) for t in (gamma, beta, r, d))
        mu = x.mean(dim=REDUCE_DIMS, keepdim=True)  # mini-batch mean
        var = ((x - mu) ** 2).mean(dim=REDUCE_DIMS, keepdim=True)  # mini-batch variance
        x_hat = (x - mu) / torch.sqrt(var + eps)  # normalize
        z = x_hat if r_ is None else x_hat * r_ + d_  # Batch Renorm correction
        y = z if gamma_ is None else gamma_ * z  # scale
        y = y if beta_ is None else y + beta_  # and shift
        ctx.save_for_backward(x, gamma, r, d, mu, var)
        ctx.eps, ctx.has_beta = eps, beta is not None
        return y

    @staticmethod
    def backward(ctx, dl_dy):  # type: ignore[override]
        x, gamma, r, d, mu, var = ctx.saved_tensors
        gamma_, r_, d_ = _channel_view(gamma), _channel_view(r), _channel_view(d)
        m = x.shape[1] * x.shape[3]
        s = REDUCE_DIMS
        inv_std = 1.0 / torch.sqrt(var + ctx.eps)
        x_hat = (x - mu) * inv_std

        dl_dz = dl_dy if gamma_ is None else dl_dy * gamma_
        dl_dxhat = dl_dz if r_ is None else dl_dz * r_
        dl_dvar = (dl_dxhat * (x - mu)).sum(s, keepdim=True) * -0.5 * inv_std**3
        dl_dmu = (dl_dxhat * -inv_std).sum(s, keepdim=True) + dl_dvar * (-2.0 * (x - mu)).mean(
            s, keepdim=True
        )
        dl_dx = dl_dxhat * inv_std + dl_dvar * 2.0 * (x - mu) / m + dl_dmu / m

        dl_dgamma = dl_dbeta = None
        if gamma is not None:
            z = x_hat if r_ is None else x_hat * r_ + d_
            dl_dgamma = (dl_dy * z).sum(dim=(0, 1, 3))
        if ctx.has_beta:
            dl_dbeta = dl_dy.sum(dim=(0, 1, 3))
        return dl_dx, dl_dgamma, dl_dbeta, None, None, None
