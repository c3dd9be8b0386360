"""Ways to evaluate a trained BN network beside its moving averages, for the batch-size study.

A network whose BN layers normalize over groups of ``g`` examples (``norm.microbatch=g``, or the
whole minibatch) can be evaluated with:

- its moving averages (the usual ``test/acc``);
- Precise BN (:func:`population_statistics`, :func:`with_statistics`): population statistics
  recomputed after training from ``⌊n/g⌋`` training batches of ``g`` examples, run through the
  training network (the BN paper's Algorithm 2, as :func:`bn.set_population_statistics` with
  ``estimator="batch_mean"``, with or without Bessel's correction ``m/(m − 1)``, ``m = g·H·W``
  values per channel of a convolution, ``g`` of the hidden linear layer), every sample count from
  one pass;
- test-example weighting (:func:`example_weighted`, Summers & Dinneen 2020,
  arXiv:1906.03548): each test example normalized as if it were one member of a normalization
  batch of ``g`` whose other ``g − 1`` members bring the population statistics::

      α = 1/g
      μ_i  = α·m1_i + (1 − α)·μ_pop
      σ²_i = α·m2_i + (1 − α)·(σ²_pop + μ_pop²) − μ_i²
      y_i  = γ·(x_i − μ_i)/√(σ²_i + ε) + β

  with ``m1_i``, ``m2_i`` the example's own mean and mean square of the channel (over its
  ``H·W`` positions; for the linear layer its value and its square) and ``μ_pop``, ``σ²_pop``
  the layer's moving averages.

Every function works on a copy, or restores what it changes: the network's parameters and
buffers are left as they were. The networks may be stacks of seeds side by side
(:mod:`experiments.nets.stacked`): every BN layer's statistics are per channel, so a stack's
layer holds each copy's in its block of channels.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bn.functional import batch_stats, values_per_channel

# One layer's population statistics from the first k batches: (mean, mean biased variance, m),
# m the values per channel of one batch (Bessel's correction is m/(m − 1))
Stats = tuple[Tensor, Tensor, int]


def batch_norms(model: nn.Module) -> list[_BatchNorm]:
    """The layers of ``model`` with running statistics (BN and Batch Renorm)."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


@torch.no_grad()
def population_statistics(
    net: nn.Module, batches: Iterable[Tensor], counts: Sequence[int]
) -> dict[int, list[Stats]]:
    """For each ``k`` of ``counts``, every BN layer's population statistics (BN paper
    Algorithm 2: the mean over batches of each batch's mean and of its biased variance) from the
    first ``k`` of the input ``batches``, run through the training network (BN layers in
    training mode with their own microbatches, every other module in inference mode). The
    network is left as it was; every layer's buffers are restored after each batch, so a Batch
    Renorm layer's ``r`` and ``d`` come from its trained moving averages throughout."""
    counts = sorted(set(counts))
    if not counts or counts[0] < 1:
        raise ValueError(f"population_statistics: counts={counts} must be whole numbers >= 1")
    norms = batch_norms(net)
    if not norms:
        raise ValueError("population_statistics: the network has no BN layer")
    saved = {m: {k: b.clone() for k, b in m.named_buffers(recurse=False)} for m in norms}
    modes = {m: m.training for m in net.modules()}
    sums: dict[nn.Module, list] = {m: [0, 0, 0] for m in norms}

    def record(module: nn.Module, args: tuple[Tensor, ...]) -> None:
        x = args[0]
        groups = x.shape[0] // module.microbatch if getattr(module, "microbatch", None) else 1
        mean, var = (t.double() for t in batch_stats(x, groups))
        acc = sums[module]
        acc[0], acc[1], acc[2] = (
            acc[0] + mean.mean(0),
            acc[1] + var.mean(0),
            values_per_channel(x, groups),
        )

    hooks = [m.register_forward_pre_hook(record) for m in norms]
    net.eval()
    for m in norms:
        m.train()
    out: dict[int, list[Stats]] = {}
    used = 0
    try:
        for x in batches:
            net(x)
            used += 1
            for m, buffers in saved.items():
                for k, b in buffers.items():
                    getattr(m, k).copy_(b)
            if used in counts:
                out[used] = [(sums[m][0] / used, sums[m][1] / used, sums[m][2]) for m in norms]
            if used == counts[-1]:
                break
    finally:
        for h in hooks:
            h.remove()
        for m, mode in modes.items():
            m.train(mode)
    if used < counts[-1]:
        raise ValueError(f"population_statistics: {used} batches, fewer than {counts[-1]}")
    return out


def with_statistics(net: nn.Module, stats: list[Stats], bessel: bool) -> nn.Module:
    """A copy of ``net`` whose BN layers infer with ``stats`` (:func:`population_statistics`),
    their variances multiplied by ``m/(m − 1)`` with ``bessel``."""
    out = copy.deepcopy(net)
    for layer, (mean, var, m) in zip(batch_norms(out), stats, strict=True):
        layer.running_mean.copy_(mean)
        layer.running_var.copy_(var * (m / (m - 1)) if bessel else var)
    return out


def _example_weighted(g: int):
    """A forward hook that replaces an inference-mode BN layer's output by test-example
    weighting with ``α = 1/g`` (the module docstring's formula)."""
    alpha = 1.0 / g

    def hook(module: _BatchNorm, args: tuple[Tensor, ...], output: Tensor) -> Tensor:
        x = args[0]
        dims = tuple(range(2, x.dim()))  # an example's own positions: (H, W), or none
        xf = x.float()
        m1 = xf.mean(dims, keepdim=True) if dims else xf
        m2 = xf.square().mean(dims, keepdim=True) if dims else xf.square()
        shape = (1, -1) + (1,) * len(dims)
        mu_pop = module.running_mean.float().view(shape)
        var_pop = module.running_var.float().view(shape)
        mu = alpha * m1 + (1 - alpha) * mu_pop
        var = (alpha * m2 + (1 - alpha) * (var_pop + mu_pop.square()) - mu.square()).clamp_min(0)
        y = (xf - mu) * torch.rsqrt(var + module.eps)
        if module.weight is not None:
            y = y * module.weight.float().view(shape) + module.bias.float().view(shape)
        return y.to(output.dtype)

    return hook


def example_weighted(net: nn.Module, g: int) -> nn.Module:
    """A copy of ``net`` whose BN layers infer with test-example weighting at ``α = 1/g`` (the
    module docstring gives the formula) from their moving averages."""
    if g < 1:
        raise ValueError(f"example_weighted: g={g} must be at least 1")
    out = copy.deepcopy(net)
    layers = batch_norms(out)
    if not layers:
        raise ValueError("example_weighted: the network has no BN layer")
    for layer in layers:
        layer.register_forward_hook(_example_weighted(g))
    return out
