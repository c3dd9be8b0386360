"""One plain-SGD step of :class:`~experiments.nets.mlp.SigmoidMLP`, the Figure 1 network family.

Every copy takes a step on its own mean cross-entropy loss: ``W ← W − lr·(∇W + λ·W)`` for the
weight matrices (``λ``: L2 weight decay, 0 by default), ``p ← p − lr·∇p`` for biases, γ and β;
the norms' running statistics move as in a training forward pass.

Where it applies, the step is one compiled call (``csrc/mlp_step_cpu.cpp``): forward, loss,
backward and update without an autograd graph, with each weight update folded into the matrix
product that would have produced its gradient. Its matrix products are its own
(``csrc/small_gemm.h``), built for AVX-512 and for AVX2 and giving the same bits on both: which one
runs follows torch's own CPU dispatch (``ATEN_CPU_CAPABILITY``); where torch uses neither (or the
compiler is not GCC), ATen's products run instead. The sigmoid is ATen's, so a whole step still
rounds by the instruction set in its last bits. It serves every variant the studies train: no norm,
:class:`bn.BatchNorm1d` or :class:`torch.nn.BatchNorm1d` before or after the activation, noisy BN
(:class:`~experiments.nets.noisy.CovariateShiftNoise` after each norm), sigmoid or ReLU, binary or
grayscale input, float32 or float64, weight decay. Anything else (Batch Renorm, microbatches,
``momentum=None``, a frozen parameter, no compiler, ``BN_COMPILED=0``) takes the PyTorch path:
the modules, autograd and a foreach update. Both give the same numbers up to float rounding
(``tests/experiments/nets/test_mlp_step.py``); ``python -m scripts.bench_studies`` times them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import bn
from experiments.nets.binary_linear import BinaryInputLinear
from experiments.nets.kernels import mlp_step_op
from experiments.nets.mlp import SigmoidMLP
from experiments.nets.noisy import CovariateShiftNoise

_FUSED_NORMS = (bn.BatchNorm1d, nn.BatchNorm1d)  # exact classes: Batch Renorm is a subclass


class SGDStep:
    """``step(x, y)``: one SGD step of ``model`` on inputs ``x`` (``(copies or 1, batch,
    features)``, or ``(batch, features)`` for every copy) and labels ``y`` (``(copies, batch)``);
    returns each copy's mean loss before the step, a float64 tensor ``(copies,)``.

    Args:
        model: the network, in training mode.
        lr: the learning rate.
        weight_decay: L2 on the weight matrices (not on biases, γ, β).
        compiled: use the compiled step where it applies (:attr:`fallback_reason` says why not).
    """

    def __init__(
        self, model: SigmoidMLP, lr: float, weight_decay: float = 0.0, compiled: bool = True
    ) -> None:
        self.model, self.lr, self.weight_decay = model, lr, weight_decay
        self.params = list(model.parameters())
        matrices = {id(layer.weight) for layer in (*model.hidden, model.output)}
        self.decays = [id(p) in matrices for p in self.params]
        self.fallback_reason = fused_reason(model) if compiled else "compiled=False"
        self._fused = None if self.fallback_reason else _fused_arguments(model)
        self._binary_input = isinstance(model.hidden[0], BinaryInputLinear)

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        x = x.unsqueeze(0) if x.dim() == 2 else x  # (batch, features): the same for every copy
        op = mlp_step_op() if self._fused is not None and self._fusable(x) else None
        if op is None:
            return self.pytorch(x, y)
        tensors, noises, options = self._fused
        scales, shifts = [], []
        for channels, noise in noises:
            s, m, _, _ = noise.sample((1, channels, x.shape[1]), self.params[0])
            scales.append(s)
            shifts.append(m)
        with torch.no_grad():
            return op(x, y, *tensors, scales, shifts, self.lr, self.weight_decay, *options)

    def pytorch(self, x: Tensor, y: Tensor) -> Tensor:
        """The step in PyTorch operations; returns the losses as :meth:`__call__` does."""
        if x.dim() == 3 and x.shape[0] == 1:  # one batch for every copy: the model's 2-D form
            x = x[0]
        losses, _, updates = self.gradients(x, y)
        self.apply(updates)
        return losses

    def gradients(self, x: Tensor, y: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """``(losses, gradients, updates)`` by autograd, without taking the step; gradients and
        updates in :attr:`params` order (``update = ∇p + λ·p`` for a weight matrix, else ``∇p``)."""
        logits = self.model(x)
        losses = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(1)
        grads = list(torch.autograd.grad(losses.sum(), self.params))  # each copy its own
        updates = grads
        if self.weight_decay:
            with torch.no_grad():
                updates = [
                    g + self.weight_decay * p if decays else g
                    for p, g, decays in zip(self.params, grads, self.decays)
                ]
        return losses.detach().double(), grads, updates

    def apply(self, updates: list[Tensor]) -> None:
        """``p ← p − lr·update`` for every parameter."""
        with torch.no_grad():
            torch._foreach_add_(self.params, updates, alpha=-self.lr)

    def _fusable(self, x: Tensor) -> bool:
        """Per call: training mode, and an input the compiled step reads as the model would."""
        return (
            self.model.training
            and x.device.type == "cpu"
            and x.is_contiguous()
            and (self._binary_input or x.dtype == self.params[0].dtype)
        )


def fused_reason(model: nn.Module) -> str | None:
    """Why the compiled step cannot train ``model`` (``None``: it can)."""
    if type(model) is not SigmoidMLP:
        return f"{type(model).__name__} is not a SigmoidMLP"
    params = list(model.parameters())
    dtype = params[0].dtype
    if dtype not in (torch.float32, torch.float64):
        return f"{dtype} parameters"
    if any(p.dtype != dtype or p.device.type != "cpu" or not p.is_contiguous() for p in params):
        return "parameters of several dtypes or devices, or not contiguous"
    if not all(p.requires_grad for p in params):
        return "a frozen parameter (e.g. norm.fix_gamma)"
    if any(not isinstance(a, (nn.Sigmoid, nn.ReLU)) for a in model.activations):
        return "an activation other than sigmoid or ReLU"
    if len({type(a) for a in model.activations}) > 1:
        return "mixed activations"
    if model.norms is None:
        return None
    norms = [split_noise(n) for n in model.norms]
    for norm, _ in norms:
        if type(norm) not in _FUSED_NORMS:
            return f"{type(norm).__name__} (the compiled step serves BatchNorm1d)"
        if norm.momentum is None or not norm.affine or not norm.track_running_stats:
            return "a norm with momentum=None, affine=False or track_running_stats=False"
        if getattr(norm, "microbatch", None) is not None or getattr(norm, "sync_stats", False):
            return "microbatch or cross-process statistics"
        if norm.bias is None:
            return "a norm without β"
    first = norms[0][0]
    if any((n.momentum, n.eps) != (first.momentum, first.eps) for n, _ in norms):
        return "norms with different momentum or eps"
    if any(noise is not None and type(noise) is not CovariateShiftNoise for _, noise in norms):
        return "a module after the norm other than CovariateShiftNoise"
    if len({noise is None for _, noise in norms}) > 1:
        return "noise after some norms only"
    return None


def split_noise(norm: nn.Module) -> tuple[nn.Module, nn.Module | None]:
    """A norm layer, or noisy BN's ``Sequential(norm, noise)``, as ``(norm, noise or None)``."""
    if isinstance(norm, nn.Sequential) and len(norm) == 2:
        return norm[0], norm[1]
    return norm, None


def _fused_arguments(model: SigmoidMLP) -> tuple[list, list, list]:
    """The compiled step's tensor arguments (the model's own parameters and buffers, updated in
    place), its noise modules ``(channels, noise)`` and its options."""
    weights = [layer.weight for layer in model.hidden]
    biases = [layer.bias for layer in model.hidden if layer.bias is not None]
    norms = [split_noise(n) for n in model.norms] if model.norms is not None else []
    tensors = [
        weights, biases, model.output.weight, model.output.bias,
        [n.weight for n, _ in norms], [n.bias for n, _ in norms],
        [n.running_mean for n, _ in norms], [n.running_var for n, _ in norms],
        [n.num_batches_tracked for n, _ in norms],
    ]  # fmt: skip
    noises = [(n.num_features, noise) for n, noise in norms if noise is not None]
    momentum, eps = (norms[0][0].momentum, norms[0][0].eps) if norms else (0.0, 0.0)
    relu = isinstance(model.activations[0], nn.ReLU)
    binary = isinstance(model.hidden[0], BinaryInputLinear)
    return tensors, noises, [momentum, eps, model.norm_after, relu, binary]
