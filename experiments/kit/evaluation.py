"""Moving batches to the device and measuring top-1 accuracy, shared by the studies."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import Tensor, nn


def to_device(
    batch: tuple[Tensor, Tensor], device: torch.device, memory_format: torch.memory_format
) -> tuple[Tensor, Tensor]:
    x, y = batch
    x = x.to(device, non_blocking=True, memory_format=memory_format)
    return x, y.to(device, non_blocking=True)


@torch.no_grad()
def accuracy(
    model: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    device: torch.device,
    memory_format: torch.memory_format = torch.contiguous_format,
    train_mode: bool = False,
) -> float:
    """Top-1 accuracy over ``batches``; ``train_mode`` normalizes with each batch's own
    statistics (the model is copied first, so its moving averages do not change)."""
    if train_mode:
        model = copy.deepcopy(model)
    was_training = model.training
    model.train(train_mode)
    correct = total = 0
    for x, y in batches:
        x, y = to_device((x, y), device, memory_format)
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    model.train(was_training)
    return correct / max(total, 1)
