"""Weight normalization (Salimans & Kingma 2016, arXiv:1602.07868) as layers.

Each output unit's weight vector is ``w = g · v / ‖v‖`` (Sec. 2), ``g`` a learnt scalar and ``v``
a learnt vector, so the weight's length is ``g`` whatever ``v`` is. The layers are
:class:`torch.nn.Conv2d` and :class:`torch.nn.Linear` with ``weight_g`` and ``weight_v`` in place
of ``weight`` (the ``state_dict`` keys of torch's ``torch.nn.utils.weight_norm``), leaves of the
module tree (no parametrization child), so tools that rebuild layers one by one see one module.
:func:`data_dependent_init_` is the paper's initialization (Sec. 3) from a minibatch.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lp_batchnorm import _channel_view, _stats_dims


def _normalized(v: Tensor, g: Tensor, dims: list[int]) -> Tensor:
    """``g · v / ‖v‖``, the norm over ``dims`` of ``v`` (every dimension but an output unit's)."""
    return v * (g / torch.linalg.vector_norm(v, dim=dims, keepdim=True))


class WeightNormed:
    """What weight-normalized layers share: ``weight_g`` and ``weight_v`` from a drawn ``weight``
    (:meth:`_reparametrize`), and the data-dependent initialization (:meth:`_initialized`, run by
    a forward pass while ``_init_pending``). A layer of another shape (a stack of several
    networks' layers) mixes it in to be found and initialized by :func:`data_dependent_init_`."""

    weight_g: nn.Parameter
    weight_v: nn.Parameter
    bias: nn.Parameter | None
    _init_pending: bool
    _norm_dims: list[int]

    def _reparametrize(self, dims: list[int] | None = None) -> None:
        """``weight`` → ``weight_v`` (its values) and ``weight_g`` (its norm over ``dims``:
        default every dimension but the first)."""
        w = self._parameters.pop("weight").detach()
        dims = list(range(1, w.dim())) if dims is None else dims
        self._norm_dims = dims  # fixed here, so that tracing reads no tensor's rank
        g = torch.linalg.vector_norm(w, dim=dims, keepdim=True)
        self.weight_g = nn.Parameter(g)
        self.weight_v = nn.Parameter(w.clone())
        self._init_pending = False

    @property
    def normalized_weight(self) -> Tensor:
        """``w = g · v / ‖v‖``, the weight the layer applies."""
        return _normalized(self.weight_v, self.weight_g, self._norm_dims)

    def _initialized(self, y: Tensor) -> Tensor:
        """The paper's initialization (Sec. 3) from this layer's first output ``y`` (computed with
        ``g = 1``, no bias): ``g ← 1/σ``, ``b ← −μ/σ`` per output unit (over the batch and every
        position), so the output has zero mean and unit variance. Returns what the layer now
        computes on that input: that output, or ``y/σ`` (its mean left in) without a bias."""
        self._init_pending = False
        mean, std = y.mean(_stats_dims(y.dim())), y.std(_stats_dims(y.dim()), unbiased=False)
        with torch.no_grad():
            self.weight_g.copy_((1 / std).view_as(self.weight_g))
            if self.bias is not None:
                self.bias.copy_((-mean / std).view_as(self.bias))
        if self.bias is None:
            return y / _channel_view(std, y.dim())
        return (y - _channel_view(mean, y.dim())) / _channel_view(std, y.dim())


class WeightNormConv2d(WeightNormed, nn.Conv2d):
    r"""A 2D convolution with weight normalization (Salimans & Kingma 2016, Sec. 2).

    Takes :class:`torch.nn.Conv2d`'s arguments and draws its weight as torch's does (so the same
    seed gives the same ``v``), then sets ``g = ‖v‖`` per output channel, so it starts out
    computing exactly what that convolution computes. ``weight_v`` has ``weight``'s shape and
    ``weight_g`` is ``(C_out, 1, 1, 1)``; ``normalized_weight`` is ``g · v / ‖v‖``, the norm over
    each output channel's ``(C_in/groups, kH, kW)`` values. Gradients reach ``g`` and ``v``
    (Sec. 2.1: the gradient of ``v`` is orthogonal to ``v``).

    Shape:
        - Input: ``(N, C_in, H, W)``
        - Output: ``(N, C_out, H_out, W_out)``, as :class:`torch.nn.Conv2d`

    Example::

        >>> m = bn.WeightNormConv2d(3, 8, 3, padding=1)
        >>> m(torch.randn(2, 3, 5, 5)).shape
        torch.Size([2, 8, 5, 5])
        >>> torch.allclose(m.normalized_weight.flatten(1).norm(dim=1), m.weight_g.flatten())
        True
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reparametrize()

    def forward(self, x: Tensor) -> Tensor:
        if self._init_pending:
            y = self._conv_forward(x, _normalized(self.weight_v, torch.ones_like(self.weight_g), self._norm_dims), None)  # fmt: skip
            return self._initialized(y)
        return self._conv_forward(x, self.normalized_weight, self.bias)


class WeightNormLinear(WeightNormed, nn.Linear):
    r"""A linear layer with weight normalization (Salimans & Kingma 2016, Sec. 2).

    Takes :class:`torch.nn.Linear`'s arguments and draws its weight as torch's does, then sets
    ``g = ‖v‖`` per output feature, so it starts out computing what that layer computes.
    ``weight_v`` is ``(out_features, in_features)``, ``weight_g`` ``(out_features, 1)``;
    ``normalized_weight`` is ``g · v / ‖v‖``, each row's norm.

    Shape:
        - Input: ``(*, in_features)``
        - Output: ``(*, out_features)``

    Example::

        >>> m = bn.WeightNormLinear(4, 3)
        >>> m(torch.randn(2, 4)).shape
        torch.Size([2, 3])
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reparametrize()

    def forward(self, x: Tensor) -> Tensor:
        if self._init_pending:
            if x.dim() != 2:
                raise ValueError("WeightNormLinear: the data-dependent initialization needs (N, in_features) inputs")  # fmt: skip
            return self._initialized(F.linear(x, _normalized(self.weight_v, torch.ones_like(self.weight_g), self._norm_dims)))  # fmt: skip
        return F.linear(x, self.normalized_weight, self.bias)


def is_weight_normed(module: nn.Module) -> bool:
    """Whether ``module`` is one of :mod:`bn.weight_norm`'s layers."""
    return isinstance(module, WeightNormed)


@torch.no_grad()
def data_dependent_init_(model: nn.Module, x: Tensor) -> nn.Module:
    """Salimans & Kingma's data-dependent initialization (Sec. 3), in place: one forward pass of
    ``model`` on the minibatch ``x`` in which each weight-normalized layer, in the order the
    pass reaches them, sets ``g`` and its bias so that its output over ``x`` has zero mean and
    unit variance per output unit (a layer without bias sets ``g`` alone: a mean-only BN after
    it, :class:`bn.MeanOnlyBatchNorm2d`, centres it), and passes that output on. ``v`` keeps its
    values (the paper draws it from a Gaussian; here it is torch's default initialization, whose
    scale ``v / ‖v‖`` removes). Other layers run as they are, in ``model``'s mode (a layer that
    updates running statistics in training mode updates them). Returns ``model``."""
    layers = [m for m in model.modules() if is_weight_normed(m)]
    if not layers:
        raise ValueError("data_dependent_init_: the model has no weight-normalized layer")
    with contextlib.ExitStack() as undo:
        for m in layers:
            m._init_pending = True
            undo.callback(setattr, m, "_init_pending", False)
        model(x)
    return model
