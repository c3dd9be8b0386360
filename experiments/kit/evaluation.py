"""Moving batches to the device and measuring top-1 accuracy, shared by the studies."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn


def to_device(
    batch: tuple[Tensor, Tensor], device: torch.device, memory_format: torch.memory_format
) -> tuple[Tensor, Tensor]:
    x, y = batch
    x = x.to(device, non_blocking=True, memory_format=memory_format)
    return x, y.to(device, non_blocking=True)


def accuracy(
    model: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    device: torch.device,
    memory_format: torch.memory_format = torch.contiguous_format,
    train_mode: bool = False,
) -> float:
    """Top-1 accuracy over ``batches``; ``train_mode`` normalizes with each batch's own
    statistics (the model is copied first, so its moving averages do not change)."""
    return copy_accuracies([model], batches, device, memory_format, train_mode)[0]


@torch.no_grad()
def copy_accuracies(
    models: Sequence[nn.Module],
    batches: Iterable[tuple[Tensor, Tensor]],
    device: torch.device,
    memory_format: torch.memory_format = torch.contiguous_format,
    train_mode: bool = False,
) -> list[float]:
    """Each model's top-1 accuracy over ``batches``: the copies of a stack of seeds
    (:func:`experiments.nets.stacked.copy_views`), or one model.

    A batch ``(x, y)`` with labels ``(N,)`` is read by every model; with labels ``(N, K)``, a
    stacked batch (:func:`experiments.kit.classify.stack_batch`), model ``k`` reads its own
    examples, channels ``k·C ..`` of ``x``. ``train_mode`` normalizes with each batch's own
    statistics (the models are copied first, so their moving averages do not change)."""
    models = [copy.deepcopy(m) for m in models] if train_mode else list(models)
    was_training = [m.training for m in models]
    for m in models:
        m.train(train_mode)
    correct = [0] * len(models)
    total = 0
    for x, y in batches:
        x, y = to_device((x, y), device, memory_format)
        shared = y.dim() == 1
        xs = [x] * len(models) if shared else x.chunk(len(models), dim=1)
        for k, (model, xk) in enumerate(zip(models, xs)):
            yk = y if shared else y[:, k]
            correct[k] += (model(xk).argmax(1) == yk).sum().item()
        total += len(y)
    for m, mode in zip(models, was_training):
        m.train(mode)
    return [c / max(total, 1) for c in correct]
