"""Batch Normalization (Ioffe & Szegedy, 2015, https://arxiv.org/abs/1502.03167)."""

from __future__ import annotations

from torch import nn

from ._base import BatchNormBase

_BN_DOC = r"""Batch Normalization over a {shape_desc} input (BN paper, Algorithm 1).

    A drop-in replacement for :class:`torch.nn.{name}`: same constructor arguments and defaults,
    same parameters, buffers and ``state_dict`` keys, and a subclass of it, so code that looks for
    BN layers with ``isinstance(m, nn.{name})`` (fvcore's PreciseBN, freezing or fusing helpers)
    finds this one too. An empty batch (``N = 0``) gives an empty output, as torch's.

    .. math::
        \mu_B = \frac{{1}}{{m}}\sum_i x_i,\quad
        \sigma_B^2 = \frac{{1}}{{m}}\sum_i (x_i - \mu_B)^2,\quad
        y_i = \gamma\,\frac{{x_i - \mu_B}}{{\sqrt{{\sigma_B^2 + \epsilon}}}} + \beta

    Training normalizes with the biased mini-batch variance; the statistics of each channel are
    taken jointly over the batch and every spatial position (``m = N·prod(spatial)``, paper
    Sec. 3.2). ``running_var`` tracks the *unbiased* variance, as in torch and Algorithm 2.
    Inference uses the running statistics: ``y = γ (x − E[x]) / sqrt(Var[x] + ε) + β``.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance inside the square root. Default: ``1e-5``.
        momentum: update rate of the running statistics,
            ``running = (1 − momentum)·running + momentum·batch`` (TF/Keras ``decay = 1 − momentum``);
            ``None`` for a cumulative average. Default: ``0.1``.
        affine: learn ``γ`` (``weight``) and ``β`` (``bias``). Default: ``True``.
        track_running_stats: keep running statistics for inference; if ``False`` batch
            statistics are used in eval mode too. Default: ``True``.
        impl: ``"fast"`` (PyTorch's fused kernels) or ``"reference"`` (an explicit
            ``autograd.Function`` with the hand-derived backward of Algorithm 1). Default ``"fast"``.
        microbatch: if set, statistics are computed separately for each group of ``microbatch``
            consecutive examples (Batch Renorm paper Sec. 4.2), while the loss and gradient still
            cover the whole batch. Must divide the batch size. The running statistics get one
            update per step, with the average of the microbatches' means and unbiased variances.
            Default: ``None`` (the whole batch).
        sync_stats: compute the batch statistics over all processes of ``process_group``
            (like ``nn.SyncBatchNorm``, on CPU and GPU). Default: ``False``.
        process_group: the ``torch.distributed`` group for ``sync_stats``. Default: the world.

    Shape:
        - Input: {shape}
        - Output: same shape as the input

    Example::

        >>> m = bn.{name}(16)
        >>> y = m(torch.randn({example}))
        >>> y.shape == torch.Size([{example}]), isinstance(m, nn.{name})
        (True, True)
        >>> y.transpose(0, 1).reshape(16, -1).mean(1).abs().max() < 1e-6  # each channel centred
        tensor(True)
    """


class _BatchNormNd(BatchNormBase):
    def _uses_torch_forward(self, groups: int) -> bool:
        # Whole-batch, single-process "fast" BN is exactly torch's forward: reuse it.
        return self.impl == "fast" and groups == 1 and not self._sync()


class BatchNorm1d(_BatchNormNd, nn.BatchNorm1d):
    __doc__ = _BN_DOC.format(
        name="BatchNorm1d",
        shape_desc="2D or 3D",
        shape="``(N, C)`` or ``(N, C, L)``",
        example="8, 16",
    )
    _expected_dims = (2, 3)
    _shape_hint = "(N, C) or (N, C, L); use BatchNorm2d for (N, C, H, W)"


class BatchNorm2d(_BatchNormNd, nn.BatchNorm2d):
    __doc__ = _BN_DOC.format(
        name="BatchNorm2d", shape_desc="4D", shape="``(N, C, H, W)``", example="8, 16, 5, 5"
    )
    _expected_dims = (4,)
    _shape_hint = "(N, C, H, W); use BatchNorm1d for (N, C) or (N, C, L)"


class BatchNorm3d(_BatchNormNd, nn.BatchNorm3d):
    __doc__ = _BN_DOC.format(
        name="BatchNorm3d", shape_desc="5D", shape="``(N, C, D, H, W)``", example="8, 16, 3, 5, 5"
    )
    _expected_dims = (5,)
    _shape_hint = "(N, C, D, H, W)"


class _BatchNormXd(_BatchNormNd):
    """BN over an input of any rank ``(N, C, *)``: what :func:`bn.convert_norm` turns an
    ``nn.SyncBatchNorm`` into, since torch does not fix its input's rank (mmcv's ``_BatchNormXd``
    does the same when it reverts ``SyncBatchNorm``)."""

    _expected_dims = (2, 3, 4, 5)
    _shape_hint = "(N, C, *)"
