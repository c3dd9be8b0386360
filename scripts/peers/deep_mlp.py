"""The depth study's networks in plain PyTorch: 2 to 64 hidden ReLU layers of 100 units with BN
(or none), He-normal weights, SGD; the six depths trained one after another, each step's loss on
a fixed training batch recorded as the study does."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from scripts.peers._train import arguments

DEPTHS = (2, 4, 8, 16, 32, 64)


def network(depth: int, norm: bool) -> nn.Sequential:
    layers, width = [], 784
    for _ in range(depth):
        layers += [nn.Linear(width, 100, bias=not norm)]
        layers += [nn.BatchNorm1d(100)] if norm else []
        layers += [nn.ReLU()]
        width = 100
    net = nn.Sequential(*layers, nn.Linear(width, 10))
    for m in net:
        if isinstance(m, nn.Linear):
            gain = 1.0 if m is net[-1] else 2.0
            nn.init.normal_(m.weight, 0.0, (gain / m.in_features) ** 0.5)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return net


def main() -> None:
    args = arguments(__doc__, lr=0.01, batch_size=60, eval_every=1)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = torch.load(args.data, weights_only=True)
    x, y = data["x_train"], data["y_train"]
    g = torch.Generator().manual_seed(args.seed)
    fixed = torch.randint(0, len(x), (args.batch_size,), generator=g)
    for depth in DEPTHS:
        net = network(depth, args.norm == "bn")
        opt = torch.optim.SGD(net.parameters(), lr=args.lr)
        for step in range(args.steps):
            idx = torch.randint(0, len(x), (args.batch_size,), generator=g)
            loss = F.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % args.eval_every == 0:
                with torch.no_grad():
                    F.cross_entropy(net(x[fixed]), y[fixed]).item()
    print(f"trained depths {DEPTHS} for {args.steps} steps each")


if __name__ == "__main__":
    main()
