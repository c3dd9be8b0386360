"""The BN paper's Figure 1 network in plain PyTorch: 784-100-100-100-10, sigmoid, BN before each
sigmoid (or none), N(0, 0.1^2) weights, SGD."""

from __future__ import annotations

import torch
from torch import nn

from scripts.peers._train import arguments, train


def network(norm: bool) -> nn.Sequential:
    layers, width = [], 784
    for _ in range(3):
        layers += [nn.Linear(width, 100, bias=not norm)]
        layers += [nn.BatchNorm1d(100)] if norm else []
        layers += [nn.Sigmoid()]
        width = 100
    net = nn.Sequential(*layers, nn.Linear(width, 10))
    with torch.no_grad():
        for m in net:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, 0.1)
                if m.bias is not None:
                    m.bias.zero_()
    return net


def main() -> None:
    args = arguments(__doc__, lr=1.0, batch_size=60, eval_every=500)
    torch.manual_seed(args.seed)
    train(args, network(args.norm == "bn"))


if __name__ == "__main__":
    main()
