"""The shared base of :class:`bn.BatchNorm2d` and :class:`bn.BatchRenorm2d` (and their 1d/3d kin)."""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.fx import Proxy
from torch.nn.modules.batchnorm import _BatchNorm

from . import _fx, distributed
from .functional import (
    BatchNormFunction,
    BatchNormFunctionForwardAD,
    BatchRenormFunction,
    _functorch,
    batch_stats,
    group_view,
    values_per_channel,
)

IMPLS = ("fast", "reference")
# torch's own base takes ``bias=`` from torch 2.14 on; before, a bias-free layer drops it here.
TORCH_TAKES_BIAS = "bias" in inspect.signature(_BatchNorm.__init__).parameters


def _symbolic(t: object) -> bool:
    """Whether ``t`` has no value to read now: a ``torch.fx`` proxy, or a tensor while
    ``torch.compile`` / ``torch.export`` trace (cheap checks: this runs at every step)."""
    return isinstance(t, Proxy) or torch.compiler.is_compiling()


def _lerp_into(buffer: Tensor, end: Tensor, weight: float) -> Tensor:
    """``buffer ← buffer + weight·(end − buffer)``, in place. Under torch.func out of place and
    copied in: vmap has no batching rule for ``lerp_`` (it would warn and loop over the batch),
    and has one for ``lerp`` and ``copy_``; the same kernel, the same numbers."""
    if _functorch():
        return buffer.copy_(torch.lerp(buffer, end, weight))
    return buffer.lerp_(end, weight)


def _average(t: Tensor) -> Tensor:
    """Average of per-microbatch statistics ``(G, C)`` over the microbatches."""
    return t[0] if t.shape[0] == 1 else t.mean(0)


class BatchNormBase(_BatchNorm):
    """The base of every layer in :mod:`bn`: a ``torch.nn`` ``_BatchNorm`` with microbatch and
    cross-process statistics and a choice of implementation.

    Subclasses set ``_expected_dims`` and may override :meth:`_correction` (Batch Renorm's ``r``,
    ``d``) and :meth:`_update_running_stats`.
    """

    _expected_dims: tuple[int, ...] = ()
    _shape_hint: str = ""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
        impl: str = "fast",
        microbatch: int | None = None,
        sync_stats: bool = False,
        process_group: dist.ProcessGroup | None = None,
    ) -> None:
        if TORCH_TAKES_BIAS:
            super().__init__(
                num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
            )
        else:
            super().__init__(
                num_features, eps, momentum, affine, track_running_stats, device, dtype
            )
            if not bias:
                self.register_parameter("bias", None)
        name = type(self).__name__
        if impl not in IMPLS:
            raise ValueError(f"{name}: impl={impl!r} is not one of {IMPLS}")
        if microbatch is not None and (not isinstance(microbatch, int) or microbatch < 1):
            raise ValueError(
                f"{name}: microbatch={microbatch!r} must be a positive integer (examples per "
                "microbatch) or None to normalize over the whole batch"
            )
        if sync_stats and microbatch is not None:
            raise ValueError(
                f"{name}: sync_stats=True and microbatch={microbatch} contradict each other "
                "(one widens the statistics to all processes, the other narrows them); set one"
            )
        if sync_stats and impl == "reference":
            raise ValueError(
                f"{name}: impl='reference' is single-process; use impl='fast' with sync_stats=True"
            )
        if not eps > 0:
            raise ValueError(
                f"{name}: eps={eps} must be positive (it keeps sqrt(var + eps) away from 0)"
            )
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{name}: momentum={momentum} must lie in [0, 1] (or be None)")
        self.impl = impl
        self.microbatch = microbatch
        self.sync_stats = sync_stats
        self.process_group = process_group

    def reset_parameters(self) -> None:
        # As torch 2.14's; torch's before would zero the bias that ``bias=False`` removed.
        self.reset_running_stats()
        if self.affine:
            torch.nn.init.ones_(self.weight)
            if self.bias is not None:
                torch.nn.init.zeros_(self.bias)

    # -- checks -------------------------------------------------------------------------------
    def _check_input_dim(self, x: Tensor) -> None:
        if x.dim() not in self._expected_dims:
            raise ValueError(
                f"{self._get_name()} expects input of shape {self._shape_hint}, got a "
                f"{x.dim()}D input of shape {tuple(x.shape)}"
            )
        if x.shape[1] != self.num_features:
            raise ValueError(
                f"{self._get_name()}(num_features={self.num_features}) got an input with "
                f"{x.shape[1]} channels (dim 1); set num_features={x.shape[1]}"
            )

    def _groups(self, x: Tensor) -> int:
        """Number of microbatches in ``x``; raises if the batch cannot be normalized as set."""
        n = x.shape[0]
        if self.microbatch is None:
            groups = 1
        elif n % self.microbatch:
            raise ValueError(
                f"{self._get_name()}: microbatch={self.microbatch} does not divide the batch size "
                f"{n}; use a batch size that is a multiple of {self.microbatch} or another "
                "microbatch size"
            )
        else:
            groups = n // self.microbatch
        count = values_per_channel(x, groups)
        if count < 2 and not (self.sync_stats and self._sync()):
            what = "batch" if self.microbatch is None else f"microbatch of {self.microbatch}"
            raise ValueError(
                f"{self._get_name()}: a training {what} of input shape {tuple(x.shape)} has "
                f"{count} value{'' if count == 1 else 's'} per channel, so its variance is "
                "undefined; use a larger batch"
                + ("" if self.microbatch is None else " or a larger microbatch")
                + " (or call .eval() to use the running statistics)"
            )
        return groups

    def _sync(self) -> bool:
        return self.sync_stats and distributed.sync_enabled(self.process_group)

    # -- forward ------------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        if isinstance(x, Proxy):  # torch.fx symbolic tracing
            fused = _fx.record_for_fusion(self, x, self._unlike_torch())
            return self._forward_traced(x) if fused is None else fused
        self._check_input_dim(x)
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not use_batch_stats:
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        if x.numel() == 0 and not self._sync():
            # An empty batch (a detection head with no proposals, a last shard): torch's
            # behaviour, an empty output that keeps the graph, the statistics untouched.
            return self._torch_forward(x)
        groups = self._groups(x)
        if self._uses_torch_forward(groups):
            return self._torch_forward(x)
        return self._forward_batch_stats(x, groups)

    def _torch_forward(self, x: Tensor) -> Tensor:
        """torch's ``_BatchNorm.forward`` in training, without its second round of checks."""
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = self._average_factor()
        return torch.batch_norm(
            x,
            self.weight,
            self.bias,
            self.running_mean,
            self.running_var,
            True,
            factor,
            self.eps,
            torch.backends.cudnn.enabled,
        )

    def _unlike_torch(self) -> str | None:
        """Why this layer's forward pass, as it stands, is not what its ``torch.nn`` class
        computes; ``None`` when it is (inference with the running statistics, whatever the
        options; whole-batch, single-process BN in training)."""
        if not self.training and self.running_mean is not None:
            return None
        if self.microbatch is not None:
            return f"statistics per microbatch of {self.microbatch}"
        if self.sync_stats:
            return "statistics across processes (sync_stats=True)"
        return None

    @property
    def _fx_torch_layer(self) -> _BatchNorm:
        """This layer as its ``torch.nn`` class, on the same parameters and buffers: what a graph
        traced by torch's FX fusion tools calls in its place (see ``bn._fx``)."""
        return _fx.torch_layer(self)

    def _forward_traced(self, x: Tensor) -> Tensor:
        """What ``torch.fx`` records: the same computation without the shape checks and the
        choice of kernel, which symbolic tracing cannot follow. Inference and whole-batch BN are
        torch's ``F.batch_norm`` (as ``nn.BatchNorm*d`` records); Batch Renorm overrides this."""
        if self.training or self.running_mean is None:
            self._check_traceable()
            if self.training and self.track_running_stats:
                self._buffer_node(x, "num_batches_tracked").add_(1)
            training, momentum = True, self.momentum
        else:
            training, momentum = False, 0.0
        rm, rv = self.running_mean, self.running_var
        return F.batch_norm(x, rm, rv, self.weight, self.bias, training, momentum, self.eps)

    def _buffer_node(self, x: Tensor, name: str) -> Tensor:
        """This layer's buffer ``name`` as a node of the graph ``torch.fx`` is recording (``x`` is
        a proxy): :func:`bn._fx.buffer_node`."""
        return _fx.buffer_node(self, x, name)

    def _check_traceable(self, microbatch_ok: bool = False) -> None:
        """Raise if this layer's training step cannot be recorded by ``torch.fx``."""
        why = None
        if self.sync_stats:
            why = "cross-process statistics (sync_stats=True) are computed outside the graph"
        elif self.microbatch is not None and not microbatch_ok:
            why = "BN's per-microbatch statistics have no traced form"
        elif self.momentum is None and self.track_running_stats:
            why = "the cumulative average (momentum=None) needs the step count as a number"
        if why is not None:
            raise NotImplementedError(
                f"{self._get_name()}: cannot be traced by torch.fx in training mode: {why}; "
                "trace it in eval mode, or use torch.compile / torch.export"
            )

    def _uses_torch_forward(self, groups: int) -> bool:
        return False

    def _forward_batch_stats(self, x: Tensor, groups: int) -> Tensor:
        sync = self._sync()
        if sync:
            mean, var, count = distributed.global_batch_stats(x, self.process_group)
            if count == 0:  # every process's batch is empty: as torch, nothing to normalize
                return self._torch_forward(x)
            if count < 2:
                raise ValueError(
                    f"{self._get_name()}: the batches of all processes together hold one value "
                    "per channel; use larger batches"
                )
        else:
            mean, var = batch_stats(x, groups)
            count = values_per_channel(x, groups)

        r, d = self._correction(mean, var)
        functorch = _functorch()
        if sync and functorch:
            raise NotImplementedError(
                f"{self._get_name()}: torch.func transforms cannot run through sync_stats=True "
                "(its backward pass all-reduces outside autograd)"
            )
        # Under torch.func the reference's autograd function serves: it has a vmap rule and a
        # forward-mode derivative (jvp), and gives the same numbers.
        if self.impl == "reference" or functorch:
            fn = BatchNormFunctionForwardAD if functorch else BatchNormFunction
            y = fn.apply(group_view(x, groups), self.weight, self.bias, r, d, self.eps)[0]
            y = y.view_as(x)
        else:
            group = None
            if sync:
                group = dist.group.WORLD if self.process_group is None else self.process_group
            y = BatchRenormFunction.apply(
                x, self.weight, self.bias, mean, var, r, d, self.eps, groups, group, count
            )
        if self.training and self.track_running_stats:
            self._update_running_stats(mean, var, count)
        return y

    def __prepare_scriptable__(self) -> BatchNormBase:
        """``torch.jit.script`` (deprecated by torch) cannot compile this layer's Python. Torch
        would put whatever this returns into the user's model, so nothing is substituted: the
        error names the route (:func:`bn.to_torch` on a copy, then script that)."""
        raise RuntimeError(
            f"{self._get_name()}: TorchScript is not supported; use torch.compile or "
            "torch.export, or script bn.to_torch(copy.deepcopy(model)) (torch's layers, the same "
            "inference)"
        )

    # -- hooks for subclasses -----------------------------------------------------------------
    def _correction(self, mean: Tensor, var: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """Batch Renorm's ``(r, d)`` of shape ``(G, C)``; ``(None, None)`` for plain BN."""
        return None, None

    def _average_factor(self) -> float:
        """Weight of the new statistics in the moving average (torch's ``momentum`` convention)."""
        if self.momentum is None:  # cumulative moving average
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, count: int) -> None:
        """BN: moving averages of the mean and of the *unbiased* variance (torch's convention).

        With microbatches, one update per step with the average over microbatches of their
        means and of their unbiased variances (``count`` values per channel each).
        """
        self.num_batches_tracked.add_(1)
        factor = self._average_factor()
        _lerp_into(self.running_mean, _average(mean).to(self.running_mean.dtype), factor)
        unbiased = _average(var) * (count / (count - 1))
        _lerp_into(self.running_var, unbiased.to(self.running_var.dtype), factor)

    def extra_repr(self) -> str:
        s = super().extra_repr()
        if self.impl != "fast":
            s += f", impl={self.impl!r}"
        if self.microbatch is not None:
            s += f", microbatch={self.microbatch}"
        if self.sync_stats:
            s += ", sync_stats=True"
        return s
