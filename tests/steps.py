"""Training steps of a small double-precision network, compared between two versions of it (a
traced or compiled copy against the module): outputs, gradients and buffers step by step."""

from __future__ import annotations

import torch
from torch import Tensor, nn

Step = tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]


def _name(key: str) -> str:
    return key.removeprefix("_orig_mod.")  # torch.compile's wrapper


def train_steps(model: nn.Module, steps: int = 3) -> list[Step]:
    """Per step on a fixed stream of ``(8, 3, 6, 6)`` inputs: the output, the parameters'
    gradients and the buffers, by name."""
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        x = torch.randn(8, 3, 6, 6, dtype=torch.float64, generator=g) * 2 + 1
        model.zero_grad()
        y = model(x)
        y.square().sum().backward()
        grads = {_name(k): p.grad.clone() for k, p in model.named_parameters()}
        buffers = {_name(k): b.clone() for k, b in model.named_buffers()}
        out.append((y.detach(), grads, buffers))
    return out


def assert_same_steps(a: list[Step], b: list[Step], buffers: set[str]) -> None:
    """``b`` computes what ``a`` does: the same outputs and gradients, and every buffer ``b``
    holds (a traced module holds only those its graph reads, ``buffers`` among them) as ``a``'s."""
    for (ya, ga, ba), (yb, gb, bb) in zip(a, b, strict=True):
        torch.testing.assert_close(yb, ya)
        assert ga.keys() == gb.keys()
        for k, v in gb.items():
            torch.testing.assert_close(v, ga[k], msg=k)
        assert buffers <= bb.keys() <= ba.keys()
        for k, v in bb.items():
            torch.testing.assert_close(v, ba[k], msg=k)
