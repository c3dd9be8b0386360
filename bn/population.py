"""Population statistics for inference (BN paper, Algorithm 2, steps 8-11)."""

from __future__ import annotations

import itertools
import numbers
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from .functional import batch_stats, values_per_channel


def _default_forward(model: nn.Module, batch: Any) -> Any:
    x = batch[0] if isinstance(batch, (tuple, list)) else batch
    return model(x)


ESTIMATORS = ("batch_mean", "population")


def _check_num_batches(num_batches: Any) -> int:
    integral = isinstance(num_batches, numbers.Integral) and not isinstance(num_batches, bool)
    if not integral and isinstance(num_batches, float) and num_batches.is_integer():
        integral = True  # 100.0 from a config is fine; 2.5, NaN and inf are not
    if not integral or num_batches < 1:
        raise ValueError(
            f"set_population_statistics: num_batches={num_batches!r} must be a whole number >= 1 "
            "(how many batches to average over)"
        )
    return min(int(num_batches), sys.maxsize)  # islice takes no more; no loader holds more


@torch.no_grad()
def set_population_statistics(
    model: nn.Module,
    batches: Iterable[Any],
    num_batches: int,
    *,
    bessel: bool = True,
    estimator: str = "batch_mean",
    forward: Callable[[nn.Module, Any], Any] = _default_forward,
) -> int:
    """Set every BN layer's inference statistics from ``num_batches`` training mini-batches.

    For each normalization layer (any ``torch.nn`` ``_BatchNorm`` with running statistics, ours
    included) over mini-batches ``B`` of size ``m``, ``estimator="batch_mean"`` (the default) is
    the BN paper's Algorithm 2::

        E[x]   = E_B[μ_B]
        Var[x] = m/(m − 1) · E_B[σ²_B]        (Bessel's correction; skipped if ``bessel=False``)

    For convolutional layers ``m`` is the number of values per channel in a batch, ``N·H·W``
    (the paper: Algorithm 2 "is modified similarly"). With microbatches (``microbatch=g``) each
    microbatch is a mini-batch of ``m = g·H·W`` values, as in training.

    ``estimator="population"`` is fvcore's PreciseBN default (``fvcore.nn.update_bn_stats``,
    "Rethinking 'Batch' in BatchNorm", Appendix): the mean and variance of all the values the
    batches bring to a channel taken together, ``Var[x] = E[x²] − E[x]²`` with every batch
    weighted by its size (``M/(M − 1)·`` that with ``bessel=True``, ``M`` the total count; fvcore
    has no Bessel's correction, ``bessel=False``). It is better than the batch mean when batches
    are small.

    The batches run through the training network ``N_BN^tr``: normalization layers use batch
    statistics, every other module runs in eval mode (no dropout). With Batch Renorm layers, whose
    training output reads their moving averages through ``r`` and ``d``, those averages move
    towards the batches' statistics during the pass (they are put back afterwards), so the later
    layers' statistics depend on the order of the batches: an estimate that sets the statistics
    layer by layer, each measured with the layers before it already set, is the consistent one
    and is not implemented. BN layers are unaffected. Afterwards every module's
    train/eval mode, every parameter and every other buffer (``num_batches_tracked`` included)
    are as before; only ``running_mean`` and ``running_var`` change. Exactly ``num_batches``
    batches are taken from ``batches`` (fewer if it runs out).

    With ``bessel=True`` this computes what ``torch.optim.swa_utils.update_bn`` computes for
    BN layers (equal and unequal batch sizes alike), except that ``update_bn`` runs the whole
    model in training mode (dropout on), uses every batch of its loader, and leaves
    ``num_batches_tracked`` reset to the number of batches.

    Args:
        model: the trained network.
        batches: an iterable of training mini-batches (e.g. a ``DataLoader``).
        num_batches: how many batches to average over, a whole number ``>= 1``.
        bessel: apply ``m/(m−1)``. Default: ``True``.
        estimator: ``"batch_mean"`` (Algorithm 2) or ``"population"`` (PreciseBN). Default:
            ``"batch_mean"``.
        forward: ``forward(model, batch)`` runs one batch. Default: ``model(batch[0])`` for a
            tuple/list batch, else ``model(batch)``.

    Returns:
        The number of batches used (fewer than ``num_batches`` if ``batches`` ran out).
    """
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    others = [
        type(m).__name__
        for m in model.modules()
        if not isinstance(m, _BatchNorm) and "running_mean" in dict(m.named_buffers(recurse=False))
    ]
    if others:
        raise ValueError(
            f"set_population_statistics: {others[0]} keeps running statistics of another kind "
            "than BN's (Algorithm 2 estimates the mean and variance); it would be left as it is"
        )
    if not norms:
        raise ValueError(
            "set_population_statistics: the model has no BN layer with running statistics"
        )
    num_batches = _check_num_batches(num_batches)
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"set_population_statistics: estimator={estimator!r} is not one of {ESTIMATORS}"
        )

    modes = {m: m.training for m in model.modules()}
    saved = {m: {k: b.clone() for k, b in m.named_buffers(recurse=False)} for m in norms}
    # Per layer, float64 sums over (micro)batches: of μ_B and σ²_B (batch_mean), or of
    # m·μ_B and m·(σ²_B + μ_B²) (population); and the count of batches, or of values.
    sums: dict[nn.Module, list[Tensor | int]] = {m: [0, 0, 0] for m in norms}

    def record(module: nn.Module, args: tuple[Tensor, ...]) -> None:
        x = args[0]
        groups = x.shape[0] // module.microbatch if getattr(module, "microbatch", None) else 1
        m = values_per_channel(x, groups)
        if m < 2:
            raise ValueError(
                f"set_population_statistics: a batch of input shape {tuple(x.shape)} holds {m} "
                f"value{'' if m == 1 else 's'} per channel for {module._get_name()}, so its "
                "variance is undefined; use batches of at least 2 examples"
            )
        mean, var = (t.double() for t in batch_stats(x, groups))
        acc = sums[module]
        if estimator == "batch_mean":
            if bessel:
                var = var * (m / (m - 1))
            acc[0] = acc[0] + mean.sum(0)
            acc[1] = acc[1] + var.sum(0)
            acc[2] += groups
        else:
            acc[0] = acc[0] + m * mean.sum(0)
            acc[1] = acc[1] + m * (var + mean.square()).sum(0)
            acc[2] += m * groups

    hooks = [m.register_forward_pre_hook(record) for m in norms]
    model.eval()
    for m in norms:
        m.train()
    used = 0
    try:
        for batch in itertools.islice(batches, num_batches):
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
        first, second, n = sums[m]
        mean = first / n
        if estimator == "batch_mean":
            var = second / n
        else:
            var = (second / n - mean.square()).clamp_min(0.0)
            if bessel:
                var = var * (n / (n - 1))
        m.running_mean.copy_(mean)
        m.running_var.copy_(var)
    return used
