"""The depth study's networks in plain PyTorch: 2 to 64 hidden ReLU layers of 100 units with BN
(or none), He-normal weights, SGD; the six depths trained one after another. Every
``--eval-every`` steps it measures what the study measures at an evaluation: the loss on a fixed
training batch (in training mode), with ``--ratio`` also the first layer's gradient norm over the
classifier's on it (as ``python -m experiments.depth`` does), and with ``--test-examples N`` the
accuracy on the first N test images (inference mode, as ``eval.test_examples=N``)."""

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


def fixed_batch_measures(
    net: nn.Sequential, x: torch.Tensor, y: torch.Tensor, ratio: bool
) -> list[float]:
    """The fixed batch's loss and, with ``ratio``, ``‖∂L/∂W_first‖ / ‖∂L/∂W_last‖``."""
    if not ratio:
        with torch.no_grad():
            return [F.cross_entropy(net(x), y).item()]
    loss = F.cross_entropy(net(x), y)
    first, last = torch.autograd.grad(loss, [net[0].weight, net[-1].weight])
    return [loss.item(), (first.norm() / last.norm()).item()]


def test_accuracy(net: nn.Sequential, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
    net.eval()
    with torch.no_grad():
        right = sum(
            int((net(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum())
            for i in range(0, len(y), batch)
        )
    net.train()
    return right / len(y)


def main() -> None:
    args = arguments(__doc__, lr=0.01, batch_size=60, eval_every=1, extra=_extra)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = torch.load(args.data, weights_only=True)
    x, y = data["x_train"], data["y_train"]
    x_test, y_test = data["x_test"][: args.test_examples], data["y_test"][: args.test_examples]
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
                fixed_batch_measures(net, x[fixed], y[fixed], args.ratio)
                if args.test_examples:
                    test_accuracy(net, x_test, y_test)
    print(f"trained depths {DEPTHS} for {args.steps} steps each")


def _extra(ap) -> None:
    ap.add_argument("--ratio", action="store_true", help="the gradient ratio at every evaluation")
    ap.add_argument(
        "--test-examples", type=int, default=0, help="test accuracy on this many images"
    )


if __name__ == "__main__":
    main()
