"""The Batch Renorm study's conv net in plain PyTorch: three stride-2 3x3 convs (16, 32, 64) with
BN and ReLU, global average pooling, a 128-unit BN+ReLU layer and a classifier; SGD with
momentum and step decay, batch 32."""

from __future__ import annotations

import torch
from torch import nn

from scripts.peers._train import arguments, train


def network(norm: bool) -> nn.Sequential:
    layers, c_in = [], 1
    for c in (16, 32, 64):
        layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1, bias=not norm)]
        layers += [nn.BatchNorm2d(c, momentum=0.01, eps=1e-3)] if norm else []
        layers += [nn.ReLU(inplace=True)]
        c_in = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, 128, bias=not norm)]
    layers += [nn.BatchNorm1d(128, momentum=0.01, eps=1e-3)] if norm else []
    return nn.Sequential(*layers, nn.ReLU(inplace=True), nn.Linear(128, 10))


def main() -> None:
    args = arguments(
        __doc__, lr=0.05, momentum=0.9, batch_size=32, eval_every=300,
        lr_decay_every=500, lr_decay_factor=0.76,
    )  # fmt: skip
    torch.manual_seed(args.seed)
    train(args, network(args.norm == "bn"))


if __name__ == "__main__":
    main()
