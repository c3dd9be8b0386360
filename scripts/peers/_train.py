"""The peers' training loop: plain PyTorch, nothing from this repository."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# what a peer prints of its training loop (after the first evaluation, through the last)
LOOP_LINE = "training loop:"


def arguments(
    description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None, **defaults
) -> argparse.Namespace:
    """The peers' shared options, ``extra(parser)`` adding a peer's own, then ``defaults``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", required=True, help="a .pt file: x_train, y_train, x_test, y_test")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--lr-decay-every", type=int, default=0, help="0: a constant learning rate")
    ap.add_argument("--lr-decay-factor", type=float, default=1.0)
    ap.add_argument("--norm", choices=("bn", "none"), default="bn")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument(
        "--train-eval", type=int, default=0, help="also the accuracy on N training images"
    )
    ap.add_argument(
        "--test-subset", type=int, default=0, help="test accuracy on the first N images (0: all)"
    )
    ap.add_argument("--seed", type=int, default=0)
    if extra is not None:
        extra(ap)
    ap.set_defaults(**defaults)
    return ap.parse_args()


def train(args: argparse.Namespace, model: nn.Module, loss_fn: Callable | None = None) -> float:
    """Train ``model`` on ``args.data`` with SGD; returns the last test accuracy."""
    torch.set_num_threads(1)
    data = torch.load(args.data, weights_only=True)
    x_train, y_train, x_test, y_test = (data[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    if args.test_subset:
        x_test, y_test = x_test[: args.test_subset], y_test[: args.test_subset]
    fmt = (
        torch.channels_last
        if args.channels_last and x_train.dim() == 4
        else torch.contiguous_format
    )
    model = model.to(memory_format=fmt)
    opt = sgd(model, args)
    sched = (
        torch.optim.lr_scheduler.StepLR(opt, args.lr_decay_every, args.lr_decay_factor)
        if args.lr_decay_every
        else None
    )
    loss_fn = loss_fn or F.cross_entropy
    g = torch.Generator().manual_seed(args.seed)

    def evaluation() -> float:
        if args.train_eval:
            evaluate(model, x_train[: args.train_eval], y_train[: args.train_eval], fmt)
        return evaluate(model, x_test, y_test, fmt)

    acc = evaluation()
    wall, cpu = time.perf_counter(), time.process_time()  # the loop: steps and their evaluations
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, len(x_train), (args.batch_size,), generator=g)
        train_step(model, opt, x_train[idx].contiguous(memory_format=fmt), y_train[idx], loss_fn)
        if sched is not None:
            sched.step()
        if step % args.eval_every == 0 or step == args.steps:
            acc = evaluation()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"test accuracy {acc:.4f} after {args.steps} steps")
    print(f"{LOOP_LINE} {wall:.4f} s wall, {cpu:.4f} s cpu")
    return acc


def sgd(model: nn.Module, args) -> torch.optim.SGD:
    """The peers' optimizer: SGD with ``args``' ``lr``, ``momentum`` and ``weight_decay``."""
    return torch.optim.SGD(
        model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x, y, loss_fn: Callable) -> None:
    """One training step: forward, loss, backward, update."""
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, fmt, chunk: int = 1000) -> float:
    model.eval()
    with torch.no_grad():
        correct = sum(
            (model(xc.contiguous(memory_format=fmt)).argmax(1) == yc).sum().item()
            for xc, yc in zip(x.split(chunk), y.split(chunk))
        )
    model.train()
    return correct / len(y)
