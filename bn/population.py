"""Population statistics for inference (BN paper, Algorithm 2, steps 8-11)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from .functional import batch_stats, values_per_channel


def _default_forward(model: nn.Module, batch: Any) -> Any:
    x = batch[0] if isinstance(batch, (tuple, list)) else batch
    return model(x)


@torch.no_grad()
def set_population_statistics(
    model: nn.Module,
    batches: Iterable[Any],
    num_batches: int,
    *,
    bessel: bool = True,
    forward: Callable[[nn.Module, Any], Any] = _default_forward,
) -> int:
    """Set every BN layer's inference statistics from ``num_batches`` training mini-batches.

    For each normalization layer (any ``torch.nn`` ``_BatchNorm`` with running statistics, ours
    included) over mini-batches ``B`` of size ``m``::

        E[x]   = E_B[μ_B]
        Var[x] = m/(m − 1) · E_B[σ²_B]        (Bessel's correction; skipped if ``bessel=False``)

    For convolutional layers ``m`` is the number of values per channel in a batch, ``N·H·W``
    (the paper: Algorithm 2 "is modified similarly"). With microbatches (``microbatch=g``) each
    microbatch is a mini-batch of ``m = g·H·W`` values, as in training.

    The batches run through the training network ``N_BN^tr``: normalization layers use batch
    statistics, every other module runs in eval mode (no dropout). Afterwards every module's
    train/eval mode, every parameter and every other buffer (``num_batches_tracked`` included)
    are as before; only ``running_mean`` and ``running_var`` change.

    Args:
        model: the trained network.
        batches: an iterable of training mini-batches (e.g. a ``DataLoader``).
        num_batches: how many batches to average over.
        bessel: apply ``m/(m−1)``. Default: ``True``.
        forward: ``forward(model, batch)`` runs one batch. Default: ``model(batch[0])`` for a
            tuple/list batch, else ``model(batch)``.

    Returns:
        The number of batches used (fewer than ``num_batches`` if ``batches`` ran out).
    """
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    if not norms:
        raise ValueError(
            "set_population_statistics: the model has no BN layer with running statistics"
        )
    if num_batches < 1:
        raise ValueError(f"set_population_statistics: num_batches={num_batches} must be >= 1")

    modes = {m: m.training for m in model.modules()}
    saved = {m: {k: b.clone() for k, b in m.named_buffers(recurse=False)} for m in norms}
    sums: dict[nn.Module, list[Tensor | int]] = {m: [0, 0, 0] for m in norms}

    def record(module: nn.Module, args: tuple[Tensor, ...]) -> None:
        x = args[0]
        groups = x.shape[0] // module.microbatch if getattr(module, "microbatch", None) else 1
        mean, var = batch_stats(x, groups)
        m = values_per_channel(x, groups)
        if bessel:
            var = var * (m / (m - 1))
        acc = sums[module]
        acc[0] = acc[0] + mean.double().sum(0)
        acc[1] = acc[1] + var.double().sum(0)
        acc[2] += groups

    hooks = [m.register_forward_pre_hook(record) for m in norms]
    model.eval()
    for m in norms:
        m.train()
    used = 0
    try:
        for batch in batches:
            if used == num_batches:
                break
            forward(model, batch)
            used += 1
    finally:
        for h in hooks:
            h.remove()
        for m, mode in modes.items():
            m.train(mode)
        for m, buffers in saved.items():
            for k, b in buffers.items():
                getattr(m, k).copy_(b)
    if used == 0:
        raise ValueError("set_population_statistics: `batches` yielded no batch")
    for m in norms:
        mean_sum, var_sum, n = sums[m]
        m.running_mean.copy_(mean_sum / n)
        m.running_var.copy_(var_sum / n)
    return used
