"""Moving batches to the device and measuring top-1 accuracy, shared by the studies."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn


def best_accuracies(logged: dict[str, list[float]]) -> dict[str, float | None]:
    """A classifier's best test accuracy over its evaluations (``max_test_acc``; and
    ``max_test_acc_subset`` when ``eval.test_subset`` measures the full test set only at the end):
    :class:`~experiments.kit.loop.TrainLoop`'s ``summarize`` for the classifier studies."""
    out = {"max_test_acc": max(logged["test/acc"], default=None)}
    if logged["test/acc_subset"]:
        out["max_test_acc_subset"] = max(logged["test/acc_subset"])
    return out


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


def per_example(net: nn.Module) -> bool:
    """Whether ``net`` in inference mode computes each example's output from that example alone:
    every norm layer with moving statistics normalizes by them (one without, such as
    ``track_running_stats=False``, normalizes by the batch's own), so its evaluation may be cut
    into batches of any size with the same results."""
    return all(
        getattr(m, "running_mean", None) is not None
        for m in net.modules()
        if hasattr(m, "track_running_stats")
    )


@torch.no_grad()
def copy_accuracies(
    models: Sequence[nn.Module],
    batches: Iterable[tuple[Tensor, Tensor]],
    device: torch.device,
    memory_format: torch.memory_format = torch.contiguous_format,
    train_mode: bool = False,
    stack: nn.Module | None = None,
) -> list[float]:
    """Each model's top-1 accuracy over ``batches``: the copies of a stack of seeds
    (:func:`experiments.nets.stacked.copy_views`), or one model.

    A batch ``(x, y)`` with labels ``(N,)`` is read by every model; with labels ``(N, K)``, a
    stacked batch (:func:`experiments.kit.classify.stack_batch`), model ``k`` reads its own
    examples, channels ``k·C ..`` of ``x``. Given the ``stack`` itself, one pass of it serves
    every copy (cheaper than ``K`` passes): of a stacked batch, whole; of a batch every model
    reads, ``x`` repeated for each copy, about ``N / K`` examples a pass (as many values as one
    model's pass of ``N``), where inference maps each example on its own (:func:`per_example`);
    otherwise copy by copy. ``train_mode`` normalizes with each batch's own statistics (the
    models are copied first, so their moving averages do not change)."""
    models = list(models)
    if train_mode:
        models = [copy.deepcopy(m) for m in models]
        stack = copy.deepcopy(stack)
    nets = [*models, *([stack] if stack is not None else [])]
    was_training = [m.training for m in nets]
    for m in nets:
        m.train(train_mode)
    correct = torch.zeros(len(models), dtype=torch.long)
    total = 0
    one_pass = stack is not None and not train_mode and per_example(stack)
    for x, y in batches:
        x, y = to_device((x, y), device, memory_format)
        if y.dim() == 2 and stack is not None:
            correct += (stack(x).view(len(y), len(models), -1).argmax(-1) == y).sum(0).cpu()
        elif y.dim() == 1 and one_pass:
            k = len(models)
            for xc, yc in zip(x.split(-(-len(y) // k)), y.split(-(-len(y) // k))):
                xs = xc.repeat(1, k, *[1] * (xc.dim() - 2)).contiguous(memory_format=memory_format)
                correct += (stack(xs).view(len(yc), k, -1).argmax(-1) == yc[:, None]).sum(0).cpu()
        else:
            shared = y.dim() == 1
            xs = [x] * len(models) if shared else x.chunk(len(models), dim=1)
            for k, (model, xk) in enumerate(zip(models, xs)):
                yk = y if shared else y[:, k]
                correct[k] += (model(xk).argmax(1) == yk).sum().cpu()
        total += len(y)
    for m, mode in zip(nets, was_training):
        m.train(mode)
    return [c / max(total, 1) for c in correct.tolist()]
