"""The normalization algorithms of :mod:`bn` as functions.

- :func:`batch_renorm`: Batch Renorm paper Algorithm 1 (a training step, moving-average update
  included) in plain differentiable torch operations, line by line. It is the reference: every
  faster path of :class:`bn.BatchRenorm2d` is tested equal to it.
- :class:`BatchNormFunction`: BN paper Algorithm 1 with its hand-derived backward pass
  (``impl="reference"``, :func:`algorithm1_backward`); with Batch Renorm's ``r``, ``d`` it
  computes the BRN output.
- :class:`BatchRenormFunction`: the fast path of every layer. With ``r`` and ``d`` held constant, a
  Batch Renorm training step *is* a BN step with weight ``γ·r`` and bias ``γ·d + β``: the forward
  pass is one fused elementwise pass (``torch.batch_norm`` in its inference form, given the batch's
  statistics), the backward pass torch's own BN backward.
- :func:`batch_stats`: the per-channel statistics the layers take before normalizing.

The autograd functions are in the ``setup_context`` style, so ``torch.func`` transforms work
through them, and their backward passes are differentiable: second derivatives are those of the
forward pass (torch's BN for BN; for Batch Renorm, Algorithm 1's with ``r``, ``d`` constant).

Every training-mode computation works on the *group view* of an input of shape ``(N, C, *)``::

    x.reshape(G, g, C, S)    # G microbatches of g = N / G examples, C channels, S = prod(*)

and takes its statistics over dims ``(1, 3)``: per microbatch and channel, jointly over the
examples and the spatial positions (BN paper Sec. 3.2). Without microbatches ``G = 1``.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor
from torch.fx import Proxy

REDUCE_DIMS = (1, 3)
SMALL = 2**16  # below this many elements, per-call overhead outweighs memory traffic
CANCELLATION = 10.0  # mean² > this × var: E[x²] − E[x]² would lose over ~1e-5 of var (float32)


def group_view(x: Tensor, groups: int) -> Tensor:
    """``x`` of shape ``(N, C, *)`` as ``(G, N/G, C, prod(*))`` (a view when ``x`` is contiguous)."""
    return x.reshape(groups, x.shape[0] // groups, x.shape[1], math.prod(x.shape[2:]))


def values_per_channel(x: Tensor, groups: int = 1) -> int:
    """Number of values each channel's statistics are taken over: ``(N / G) * prod(*)``."""
    return (x.shape[0] // groups) * math.prod(x.shape[2:])


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype statistics are kept in: float32 for float16/bfloat16 inputs (as torch's kernels)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


# -- Batch Renorm paper, Algorithm 1: the reference ------------------------------------------------
def batch_renorm(
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    *,
    r_max: float | Tensor,
    d_max: float | Tensor,
    momentum: float = 0.01,
    eps: float = 1e-5,
    microbatch: int | None = None,
) -> Tensor:
    r"""Batch Renorm's training step (Batch Renorm paper, Algorithm 1) on ``x`` of shape ``(N, C, *)``.

    Written for reading, in plain differentiable torch operations; :class:`bn.BatchRenorm1d` /
    ``2d`` / ``3d`` compute the same thing faster, and record this function when ``torch.fx``
    traces them. It computes in the dtype of ``running_var`` and returns ``x``'s dtype; it checks
    no shapes beyond the microbatch size (an empty batch would write NaN into the statistics).
    Like :func:`torch.nn.functional.batch_norm`, it returns the output and updates
    ``running_mean`` and ``running_var`` in place; the moving average is of
    ``σ = sqrt(running_var + ε)``, stored back as ``running_var = σ² − ε``.

    Args:
        x: the input, ``(N, C, *)``.
        running_mean: ``μ``, ``(C,)``.
        running_var: ``σ² − ε``, ``(C,)``.
        weight, bias: ``γ`` and ``β``, ``(C,)``, or ``None`` (``γ = 1``, ``β = 0``).
        r_max, d_max: the clipping bounds (numbers or 0-d tensors).
        momentum: the moving averages' rate ``α``.
        eps: ``ε``.
        microbatch: examples per microbatch; each has its own statistics, ``r`` and ``d``, and the
            moving averages get one update with the average of the microbatches' ``μ_B``, ``σ_B``.

    Example::

        >>> x = torch.randn(32, 4, dtype=torch.float64)
        >>> mean, var = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
        >>> layer = bn.BatchRenorm1d(4, r_max=2.0, d_max=1.0).double()
        >>> y = bn.functional.batch_renorm(x, mean, var, r_max=2.0, d_max=1.0)
        >>> torch.allclose(y, layer(x)), torch.allclose(var, layer.running_var)
        (True, True)
    """
    if microbatch is not None and not isinstance(x, Proxy) and x.shape[0] % microbatch:
        raise ValueError(
            f"batch_renorm: microbatch={microbatch} does not divide the batch size {x.shape[0]}"
        )
    # (N, C, S) without shape arithmetic (for torch.fx), in the moving statistics' dtype (float32
    # for a float16 input of a float32 layer, as the layers compute their statistics)
    rows = x.unsqueeze(-1).flatten(2).to(running_var.dtype)
    xv = rows.unsqueeze(0) if microbatch is None else rows.unflatten(0, (-1, microbatch))
    mu = running_mean.view(1, 1, -1, 1)  # xv: (G, g, C, S)
    sigma = torch.sqrt(running_var + eps).view(1, 1, -1, 1)

    mu_b = xv.mean(REDUCE_DIMS, keepdim=True)
    sigma_b = torch.sqrt(((xv - mu_b) ** 2).mean(REDUCE_DIMS, keepdim=True) + eps)
    r = torch.clamp(sigma_b / sigma, 1 / r_max, r_max).detach()  # stop_gradient
    d = torch.clamp((mu_b - mu) / sigma, -d_max, d_max).detach()  # stop_gradient
    x_hat = (xv - mu_b) / sigma_b * r + d
    y = x_hat if weight is None else x_hat * weight.view(1, 1, -1, 1)
    y = y if bias is None else y + bias.view(1, 1, -1, 1)

    with torch.no_grad():  # μ ← μ + α(μ_B − μ),  σ ← σ + α(σ_B − σ)
        new_mu = mu + momentum * (mu_b.detach().mean(0, keepdim=True) - mu)
        new_sigma = sigma + momentum * (sigma_b.detach().mean(0, keepdim=True) - sigma)
        running_mean.copy_(new_mu.view(-1))
        running_var.copy_((new_sigma**2 - eps).view(-1))
    return y.to(x.dtype).view_as(x)


def _channels_last(x: Tensor) -> bool:
    """Whether ``x`` is a 4-D channels-last tensor (and not also a contiguous one, as when
    ``C = 1`` or ``H = W = 1``)."""
    cl = torch.channels_last
    return x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=cl)


def _memory_format(x: Tensor) -> torch.memory_format:
    return torch.channels_last if _channels_last(x) else torch.contiguous_format


# -- batch statistics -----------------------------------------------------------------------------
def _side_by_side(x: Tensor, groups: int) -> Tensor:
    """``(N, C, *)`` as ``(N/G, G*C, *)``: microbatch ``k``'s channels become ``k*C ... k*C+C-1``."""
    n, c = x.shape[:2]
    rest = x.shape[2:]
    xs = x.reshape(groups, n // groups, c, *rest).transpose(0, 1)
    return xs.reshape(n // groups, groups * c, *rest)


def _from_side_by_side(y: Tensor, groups: int) -> Tensor:
    g, gc = y.shape[:2]
    rest = y.shape[2:]
    c = gc // groups
    return y.reshape(g, groups, c, *rest).transpose(0, 1).reshape(g * groups, c, *rest)


def _functorch() -> bool:
    """Whether a torch.func transform (grad, vmap, jvp, ...) is active."""
    return torch._C._are_functorch_transforms_active()


@torch.no_grad()
def batch_stats(x: Tensor, groups: int = 1) -> tuple[Tensor, Tensor]:
    """Per-microbatch, per-channel mean and *biased* variance of ``x``, each of shape ``(G, C)``,
    in :func:`stats_dtype` (float32 for float16/bfloat16 inputs).

    No gradient: the layers use these for Batch Renorm's ``r``, ``d`` and for the moving averages.
    """
    x = x.detach()  # no_grad does not stop forward-mode AD (torch.func.jvp, hessian)
    n, c = x.shape[:2]
    acc = stats_dtype(x.dtype)
    if _functorch():
        # Operations vmap has batching rules for (not torch's Welford kernel, nor in-place ones,
        # which it would run in a loop with a warning), and no value read to choose a route.
        rows = x.reshape(groups, n // groups, c, -1).to(acc)
        mean = rows.mean(dim=(1, 3))
        return mean, (rows - mean.view(groups, 1, c, 1)).square().mean(dim=(1, 3))
    if x.dim() == 2:
        # No spatial positions: torch's fused Welford kernel, on the microbatches side by side.
        xs = (x if groups == 1 else _side_by_side(x, groups)).to(acc)
        mean, var = torch.batch_norm_update_stats(xs, None, None, 0.0)
        return mean.view(groups, c), var.view(groups, c)
    if x.numel() < SMALL or _channels_last(x):
        # Small inputs, and channels-last ones (whose per-channel values are strided): torch's
        # Welford kernel, one call per microbatch (each a channels-last slice). On channels-last
        # inputs its float32 sums depend on the thread count, as those of torch's BN do.
        stats = [
            torch.batch_norm_update_stats(xb.to(acc), None, None, 0.0) for xb in x.chunk(groups)
        ]
        return torch.stack([m for m, _ in stats]), torch.stack([v for _, v in stats])
    # Large inputs: sums over contiguous rows of spatial positions are several times faster on
    # CPU than the Welford kernel. E[x²] − E[x]² cancels when |mean| >> std; such (rare) channels
    # make the whole call take the two-pass route, (x − mean)² summed with the mean known. On an
    # accelerator the two-pass route is always taken: choosing would wait for the device.
    rows = x.reshape(n, c, -1)
    rows = rows if rows.dtype == acc else rows.to(acc)
    m = (n // groups) * rows.shape[-1]
    mean = rows.sum(-1).view(groups, -1, c).sum(1) / m
    # Traced by torch.compile or torch.export, too: the choice would be data-dependent.
    two_pass = x.device.type != "cpu" or torch.compiler.is_compiling()
    if not two_pass:
        sq = torch.linalg.vector_norm(rows, dim=-1).square_().view(groups, -1, c).sum(1)
        var = sq / m - mean.square()
        two_pass = bool((mean.square() > CANCELLATION * var).any())
    if two_pass:
        centered = rows.view(groups, -1, c, rows.shape[-1]) - mean.view(groups, 1, c, 1)
        var = centered.square_().mean(dim=REDUCE_DIMS)
    return mean, var.clamp_min_(0.0)


# -- the fast path --------------------------------------------------------------------------------
def _per_channel(t: Tensor, ndim: int) -> Tensor:
    """A ``(C,)`` tensor shaped to broadcast against an ``(N, C, *)`` input of ``ndim`` dims."""
    return t.view(1, -1, *[1] * (ndim - 2))


class ScaleGrad(torch.autograd.Function):
    """Identity forward; backward multiplies ``∂ℓ/∂x`` by ``scale`` per microbatch and channel.

    Args (of ``apply``): ``x`` ``(N, C, *)``; ``scale`` ``(G, C)`` (no gradient); ``groups``.
    The Batch Renorm gradient ablations use it (:class:`bn.BatchRenorm2d`'s ``ablation``).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale, groups):  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[override]
        _, scale, groups = inputs
        ctx.save_for_backward(scale)
        ctx.groups = groups

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        (scale,) = ctx.saved_tensors
        dx = group_view(dy, ctx.groups) * scale.to(dy.dtype)[:, None, :, None]
        return dx.view_as(dy), None, None


class BatchRenormFunction(torch.autograd.Function):
    """Batch Renorm's training step with ``r``, ``d`` held constant, as a BN step with weight
    ``γ·r`` and bias ``γ·d + β``; with ``r = d = None``, plain BN (the ``fast`` implementation).

    ``y = (γ·r)·x̂ + (γ·d + β)`` with ``x̂ = (x − μ_B)/sqrt(σ²_B + ε)`` for the batch statistics
    ``mean`` = ``μ_B`` and ``var`` = ``σ²_B`` given (shape ``(G, C)``, no gradient: BN's backward
    accounts for them). Backward: torch's BN backward with weight ``γ·r`` gives ``∂ℓ/∂x``,
    ``Σ ∂ℓ/∂y·x̂`` and ``Σ ∂ℓ/∂y``, and ``∂ℓ/∂γ = r·Σ ∂ℓ/∂y·x̂ + d·Σ ∂ℓ/∂y``, ``∂ℓ/∂β = Σ ∂ℓ/∂y``.
    When the backward pass is itself differentiated (``create_graph=True``: gradient penalties,
    meta-learning, Hessian-vector products) it is computed by :func:`algorithm1_backward` in
    differentiable operations instead, so second derivatives are those of the forward pass.

    Args (of ``apply``): ``x`` ``(N, C, *)``; ``weight``, ``bias`` ``(C,)`` or ``None``;
    ``mean``, ``var``, ``r``, ``d`` ``(G, C)`` (``r``, ``d`` may be ``None``); ``eps``; ``groups``
    (``G``, microbatches of ``N/G`` consecutive examples); ``process_group``: if given (``G = 1``),
    ``mean``/``var`` are over ``count`` values per channel on all its processes, and the backward
    pass all-reduces its two per-channel sums across them.
    """

    @staticmethod
    def forward(x, weight, bias, mean, var, r, d, eps, groups, process_group, count):  # type: ignore[override]
        dtype = stats_dtype(x.dtype)
        mean, var = mean.to(dtype), var.to(dtype)
        scale, shift = _fold(weight, bias, r, d, mean.shape, dtype)
        if groups == 1:
            return torch.batch_norm(
                x,
                None if scale is None else scale[0],
                None if shift is None else shift[0],
                mean[0],
                var[0],
                False,
                0.0,
                eps,
                torch.backends.cudnn.enabled,
            )
        # Per-microbatch affine maps: one broadcast multiply-add.
        invstd = torch.rsqrt(var + eps)
        a = invstd if scale is None else scale * invstd
        b = -mean * a if shift is None else shift - mean * a
        g, c = mean.shape
        # Written into a fresh output: a view of an intermediate would be an output that
        # autograd forbids an in-place op on (an in-place ReLU follows most norms).
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        a, b = a.view(g, 1, c, 1), b.view(g, 1, c, 1)
        if torch.compiler.is_compiling():  # traced with autograd, which refuses out=
            group_view(y, groups).copy_(torch.addcmul(b, group_view(x, groups), a))
        else:
            torch.addcmul(b, group_view(x, groups), a, out=group_view(y, groups))
        return y

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[override]
        x, weight, bias, mean, var, r, d, eps, groups, process_group, count = inputs
        ctx.save_for_backward(x, weight, mean, var, r, d)
        ctx.groups, ctx.eps, ctx.process_group, ctx.count = groups, eps, process_group, count
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x, weight, mean, var, r, d = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # the backward pass will be differentiated
            if ctx.process_group is not None:
                raise NotImplementedError(
                    "bn: second derivatives through sync_stats=True are not supported (nor are "
                    "they through torch's SyncBatchNorm); differentiate once, or normalize "
                    "per process"
                )
            xv = group_view(x, ctx.groups)
            dx, dweight, dbias = algorithm1_backward(
                group_view(dy, ctx.groups), xv, weight, r, d, ctx.eps, ctx.has_bias
            )
            return dx.view_as(x), dweight, dbias, *[None] * 8
        dtype = stats_dtype(x.dtype)
        mean, var = mean.to(dtype), var.to(dtype)
        invstd = torch.rsqrt(var + ctx.eps)
        scale = _scale(weight, r, mean.shape, dtype)
        # Whole batches: dy in x's layout (channels-last stays so, with torch's fast kernel).
        dy = dy.contiguous(
            memory_format=_memory_format(x) if ctx.groups == 1 else torch.contiguous_format
        )
        if ctx.process_group is not None:
            dx, dw, db = _sync_backward(ctx, dy, x, scale, mean, invstd)
        else:
            # Σ dy·x̂ and Σ dy are needed for the weight's gradient whenever d is there.
            mask = [need_x, need_w, (need_w and d is not None) or need_b]
            dx, dw, db = _bn_backward(dy, x, scale, mean, invstd, ctx.eps, ctx.groups, mask)
        dweight = dbias = None
        if weight is not None and need_w:
            dweight = (dw if r is None else dw * r).sum(0)
            if d is not None:
                dweight = dweight + (db * d).sum(0)
        if ctx.has_bias and need_b:
            dbias = db.sum(0)
        return dx, dweight, dbias, *[None] * 8


def _scale(weight, r, shape, dtype) -> Tensor | None:
    """``γ·r`` per microbatch, ``(G, C)``; ``None`` where it is 1."""
    w = None if weight is None else weight.detach().to(dtype)
    scale = w if r is None else (r.to(dtype) if w is None else r.to(dtype) * w)
    return None if scale is None else scale.expand(shape)


def _fold(weight, bias, r, d, shape, dtype) -> tuple[Tensor | None, Tensor | None]:
    """``(γ·r, γ·d + β)`` per microbatch, ``(G, C)``; ``None`` where they are 1 and 0."""
    b = None if bias is None else bias.detach().to(dtype)
    if r is None:
        shift = b
    else:
        shift = d.to(dtype) if weight is None else d.to(dtype) * weight.detach().to(dtype)
        shift = shift if b is None else shift + b
    return _scale(weight, r, shape, dtype), None if shift is None else shift.expand(shape)


def _bn_backward(dy, x, scale, mean, invstd, eps, groups, mask):
    """torch's BN backward (training form) per microbatch: ``dx``, ``Σ dy·x̂`` and ``Σ dy``,
    the last two of shape ``(G, C)``; ``None`` for each output ``mask`` leaves out."""

    def bn_backward(*args):
        # An output the mask leaves out is None on the CPU but an empty tensor on CUDA.
        outs = torch.ops.aten.native_batch_norm_backward(*args, mask)
        return tuple(out if wanted else None for out, wanted in zip(outs, mask))

    if groups == 1:
        w = None if scale is None else scale[0]
        dx, dw, db = bn_backward(dy, x, w, None, None, mean[0], invstd[0], True, eps)
        return dx, _row(dw), _row(db)
    if x.numel() < SMALL:
        # Small inputs: one call on the microbatches laid side by side as channels costs far
        # less than one call per microbatch.
        w = None if scale is None else scale.reshape(-1)
        dx, dw, db = bn_backward(
            _side_by_side(dy, groups),
            _side_by_side(x, groups),
            w,
            None,
            None,
            mean.reshape(-1),
            invstd.reshape(-1),
            True,
            eps,
        )
        dx = None if dx is None else _from_side_by_side(dx, groups)
        shape = mean.shape
        return dx, None if dw is None else dw.view(shape), None if db is None else db.view(shape)
    # Large inputs: each microbatch is a contiguous slice, written in place: no copies.
    dx = torch.empty_like(x, memory_format=torch.contiguous_format) if mask[0] else None
    dw = mean.new_empty(mean.shape) if mask[1] else None
    db = mean.new_empty(mean.shape) if mask[2] else None
    dxs = dx.chunk(groups) if dx is not None else [None] * groups
    for k, (dyk, xk, dxk) in enumerate(zip(dy.chunk(groups), x.chunk(groups), dxs)):
        outs = bn_backward(
            dyk,
            xk,
            None if scale is None else scale[k],
            None,
            None,
            mean[k],
            invstd[k],
            True,
            eps,
        )
        for out, part in zip(
            outs, (dxk, None if dw is None else dw[k], None if db is None else db[k])
        ):
            if part is not None:
                part.copy_(out)
    return dx, dw, db


def _row(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.unsqueeze(0)


def _sync_backward(ctx, dy, x, scale, mean, invstd):
    """BN's backward over the union of all processes' batches: the per-channel sums ``Σ dy`` and
    ``Σ dy·x̂`` are all-reduced, then ``dx = w·invstd·(dy − ΣDY/M − x̂·ΣDY·X̂/M)`` locally.
    The weight and bias gradients stay local (DDP sums them across processes)."""
    w = None if scale is None else scale[0]
    mean, invstd = mean[0], invstd[0]
    if x.numel() == 0:  # an empty shard adds nothing (torch's kernel would divide by its count)
        dw, db = torch.zeros_like(mean), torch.zeros_like(mean)
    else:
        _, dw, db = torch.ops.aten.native_batch_norm_backward(
            dy, x, w, None, None, mean, invstd, True, ctx.eps, [False, True, True]
        )
    totals = torch.cat([dw, db]).double()
    dist.all_reduce(totals, group=ctx.process_group)
    total_dw, total_db = (t.to(dw.dtype) for t in totals.chunk(2))
    dx = None
    if ctx.needs_input_grad[0]:
        k1 = invstd if w is None else w * invstd  # dx = k1·dy + k2·x + k3
        k2 = -k1 * invstd * total_dw / ctx.count
        k3 = -k1 * total_db / ctx.count - k2 * mean
        n = x.dim()
        dx = torch.addcmul(_per_channel(k3, n), x, _per_channel(k2, n))
        dx = dx.addcmul_(dy, _per_channel(k1, n)).to(x.dtype)
    return dx, _row(dw), _row(db)


# -- BN paper, Algorithm 1, with its hand-derived backward pass -----------------------------------
def _channel_view(t: Tensor | None) -> Tensor | None:
    """A per-channel ``(C,)`` tensor, or a per-microbatch ``(G, C)`` one, as ``(G|1, 1, C, 1)``."""
    if t is None:
        return None
    return t.reshape(-1, 1, t.shape[-1], 1)


def _moments(x: Tensor) -> tuple[Tensor, Tensor]:
    """Mini-batch mean and (biased) variance of a group view ``(G, g, C, S)``, ``(G, 1, C, 1)``."""
    mu = x.mean(dim=REDUCE_DIMS, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=REDUCE_DIMS, keepdim=True)
    return mu, var


def algorithm1_backward(
    dl_dy: Tensor,
    x: Tensor,
    gamma: Tensor | None,
    r: Tensor | None,
    d: Tensor | None,
    eps: float,
    has_beta: bool,
    mu: Tensor | None = None,
    var: Tensor | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The gradients of BN paper Algorithm 1 (with Batch Renorm's constant ``r``, ``d``), written
    as the paper derives them: ``∂ℓ/∂x̂``, ``∂ℓ/∂σ²_B``, ``∂ℓ/∂μ_B``, ``∂ℓ/∂x_i``, ``∂ℓ/∂γ``,
    ``∂ℓ/∂β``.

    ``dl_dy`` and ``x`` are group views ``(G, g, C, S)``; ``gamma`` is ``(C,)`` or ``None``; ``r``
    and ``d`` are ``(G, C)`` or ``None``. ``mu`` and ``var`` are the forward pass's ``μ_B`` and
    ``σ²_B`` (``(G, 1, C, 1)``, in :func:`stats_dtype`); without them they are computed here from
    ``x`` in differentiable operations, so that the result can be differentiated again (second
    derivatives). float16/bfloat16 are computed in float32; ``∂ℓ/∂x`` has ``x``'s dtype.
    """
    dtype = x.dtype
    x = x.to(stats_dtype(dtype))
    dl_dy = dl_dy.to(x.dtype)
    gamma_, r_, d_ = _channel_view(gamma), _channel_view(r), _channel_view(d)
    m = x.shape[1] * x.shape[3]
    s = REDUCE_DIMS
    if mu is None or var is None:
        mu, var = _moments(x)
    inv_std = 1.0 / torch.sqrt(var + eps)
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
        dl_dgamma = (dl_dy * z).sum(dim=(0, 1, 3)).to(gamma.dtype)
    if has_beta:
        dl_dbeta = dl_dy.sum(dim=(0, 1, 3))
    return dl_dx.to(dtype), dl_dgamma, dl_dbeta


class BatchNormFunction(torch.autograd.Function):
    """BN paper Algorithm 1 with its hand-derived backward pass (the ``reference`` implementation).

    Inputs are in the group view ``(G, g, C, S)``; ``gamma`` and ``beta`` have shape ``(C,)`` or
    are ``None`` (``affine=False``, ``bias=False``). ``r`` and ``d`` (shape ``(G, C)`` or ``None``)
    are Batch Renorm's corrections: constants here, they receive no gradient (BRN paper
    Algorithm 1: ``stop_gradient``). With ``r = 1`` and ``d = 0`` this is exactly BN.

    The backward pass is :func:`algorithm1_backward`, the paper's chain rule term by term. When it
    will itself be differentiated (``create_graph=True``), it recomputes ``μ_B`` and ``σ²_B`` from
    ``x`` so that second derivatives are right. float16/bfloat16 inputs are computed in float32
    and the output has the input's dtype, as torch's BN.

    Returns ``(y, μ_B, σ²_B)``, the statistics of shape ``(G, 1, C, 1)`` and without gradient.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x, gamma, beta, r, d, eps):  # type: ignore[override]
        dtype = x.dtype
        x = x.to(stats_dtype(dtype))
        gamma_, beta_, r_, d_ = (_channel_view(t) for t in (gamma, beta, r, d))
        mu, var = _moments(x)  # mini-batch mean and variance
        x_hat = (x - mu) / torch.sqrt(var + eps)  # normalize
        z = x_hat if r_ is None else x_hat * r_ + d_  # Batch Renorm correction
        y = z if gamma_ is None else gamma_ * z  # scale
        y = y if beta_ is None else y + beta_  # and shift
        return y.to(dtype), mu, var

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[override]
        x, gamma, beta, r, d, eps = inputs
        _, mu, var = output
        ctx.mark_non_differentiable(mu, var)
        ctx.save_for_backward(x, gamma, r, d, mu, var)
        ctx.eps, ctx.has_beta = eps, beta is not None

    @staticmethod
    def backward(ctx, dl_dy, _dl_dmu, _dl_dvar):  # type: ignore[override]
        x, gamma, r, d, mu, var = ctx.saved_tensors
        if torch.is_grad_enabled():  # to be differentiated again: the statistics as functions of x
            mu = var = None
        grads = algorithm1_backward(dl_dy, x, gamma, r, d, ctx.eps, ctx.has_beta, mu, var)
        return *grads, None, None, None


class BatchNormFunctionForwardAD(BatchNormFunction):
    """:class:`BatchNormFunction` with a forward-mode derivative, for ``torch.func``'s ``jvp``,
    ``jacfwd`` and ``hessian`` (the layers use it under ``torch.func`` transforms; elsewhere not,
    since ``torch.compile`` does not trace a custom ``jvp``)."""

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[override]
        BatchNormFunction.setup_context(ctx, inputs, output)
        x, gamma, _, r, d, _ = inputs
        ctx.save_for_forward(x, gamma, r, d, *output[1:])

    @staticmethod
    def jvp(ctx, x_t, gamma_t, beta_t, r_t, d_t, eps_t):  # type: ignore[override]
        """Forward-mode derivative: ``ẋ̂ = (ẋ − mean ẋ − x̂·mean(ẋ·x̂)) / σ_B`` and
        ``ẏ = γ·r·ẋ̂ + γ̇·(r·x̂ + d) + β̇`` (``r``, ``d`` constants)."""
        x, gamma, r, d, mu, var = ctx.saved_tensors
        xs = x.to(mu.dtype)
        gamma_, r_, d_ = _channel_view(gamma), _channel_view(r), _channel_view(d)
        inv_std = torch.rsqrt(var + ctx.eps)
        x_hat = (xs - mu) * inv_std
        y_t = torch.zeros_like(xs)
        if x_t is not None:
            t = x_t.to(xs.dtype)
            s = REDUCE_DIMS
            t_hat = inv_std * (
                t - t.mean(s, keepdim=True) - x_hat * (t * x_hat).mean(s, keepdim=True)
            )
            t_hat = t_hat if r_ is None else t_hat * r_
            y_t = y_t + (t_hat if gamma_ is None else gamma_ * t_hat)
        if gamma_t is not None:
            y_t = y_t + _channel_view(gamma_t) * (x_hat if r_ is None else x_hat * r_ + d_)
        if beta_t is not None:
            y_t = y_t + _channel_view(beta_t)
        return y_t.to(x.dtype), None, None
