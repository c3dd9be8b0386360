"""The Figure 1 MLP's harness, shared by the studies that train it (``mnist``, ``mechanism``):
its data as the network reads them, each step's minibatches for every copy, and every copy's
accuracy."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from experiments.kit.data import compact_inputs, ensure_dataset, load_split, to_inputs
from experiments.kit.evaluation import best_accuracies
from experiments.kit.sampling import IIDBatches
from experiments.nets.mlp import SigmoidMLP


@dataclass
class Data:
    """The images as the network reads them: the 0/1 bytes themselves (binarized, the first
    layer reads them as they are) or grayscale floats in [0, 1]; the training pixels stay uint8,
    a quarter of the memory to read per mini-batch."""

    train_pixels: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    binarize: bool

    def inputs(self, pixels: torch.Tensor) -> torch.Tensor:
        return network_inputs(pixels, self.binarize)

    @property
    def x_train(self) -> torch.Tensor:
        return self.inputs(self.train_pixels)


def load_data(data: DictConfig) -> Data:
    raw = ensure_dataset(str(data.name), data.root, data.download, data.verify)
    train, test = load_split(raw, "train"), load_split(raw, "test")
    binarize = data.binarize
    x_test = network_inputs(compact_inputs(test.images, binarize), binarize)
    return Data(compact_inputs(train.images, binarize), train.labels, x_test, test.labels, binarize)


def network_inputs(pixels: torch.Tensor, binarize: bool) -> torch.Tensor:
    """What :class:`SigmoidMLP` reads of ``compact_inputs``: the 0/1 bytes themselves, or
    grayscale floats in [0, 1]."""
    return pixels if binarize else to_inputs(pixels, binarize)


def accuracies(
    model: SigmoidMLP, x: torch.Tensor, y: torch.Tensor, chunk: int = 2000
) -> list[float]:
    """Each copy's accuracy on ``(x, y)`` in inference mode (BN uses its running statistics).

    Runs ``chunk`` examples at a time: the same numbers, but the activations' memory is freed
    and reused from chunk to chunk. Whole-set activations (12 MB a layer for the test set) would
    be fresh memory at every evaluation, and faulting it in took longer than computing them."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        correct = sum(
            # the logits are a transposed view: argmax over contiguous rows is ~4x faster
            (model(xc).contiguous().argmax(-1) == yc).sum(-1)
            for xc, yc in zip(x.split(chunk), y.split(chunk))
        )
    model.train(was_training)
    return (correct.float() / len(y)).tolist()


def stacked_batches(data: Data, samplers: list[IIDBatches], batch_size: int):
    """``batches(start)``: each step's ``(copies, batch, features)`` inputs and labels, copy
    ``k``'s from ``samplers[k]``."""

    def batches(start: int):
        for step in itertools.count(start):
            idx = torch.cat([s.indices(step) for s in samplers])
            x = data.inputs(torch.index_select(data.train_pixels, 0, idx))
            y = torch.index_select(data.y_train, 0, idx)
            yield x.view(len(samplers), batch_size, -1), y.view(len(samplers), batch_size)

    return batches


class MLPTraining:
    """A Figure 1 MLP run for :class:`~experiments.kit.loop.TrainLoop`: its seeds' i.i.d.
    minibatches side by side (:func:`stacked_batches`), an SGD step, and a probe that evaluates
    and keeps its history (checkpointed): the MNIST and mechanism studies."""

    def __init__(self, data: Data, samplers: list[IIDBatches], batch_size: int, step, probe):
        self._batches = stacked_batches(data, samplers, batch_size)
        self._step, self.probe = step, probe

    def batches(self, start: int):
        return self._batches(start)

    def step(self, step: int, batch) -> dict:
        return self._step(step, batch)

    def evaluate(self, step: int) -> list[dict[str, float]]:
        return self.probe.evaluate(step)

    def summarize(self, logged: dict[str, list[float]]) -> dict[str, float | None]:
        return best_accuracies(logged)

    def state_dict(self):
        return self.probe.state_dict()

    def load_state_dict(self, state) -> None:
        self.probe.load_state_dict(state)
