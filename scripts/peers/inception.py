"""BN-Baseline (BN paper, Sec. 4.2: BN-Inception, Figure 5, with the original Inception's local
response normalization and dropout) in plain PyTorch at the study's CPU scale: every width x1/8,
a plain 7x7 stem of stride 2 with LRN after its first and last convolutions, 32x32 RGB inputs,
BN (momentum 0.01, eps 1e-3) before every ReLU, dropout 0.4 before the classifier; SGD with
momentum, L2 and exponential step decay, batch 32."""

from __future__ import annotations

import torch
from torch import nn

from scripts.peers._train import arguments, train

# Figure 5, rows 3a-5b: 1x1, 3x3 reduce, 3x3, double 3x3 reduce, double 3x3, pool, projection
# (0: none), stride.
ROWS = [
    (64, 64, 64, 64, 96, "avg", 32, 1), (64, 64, 96, 64, 96, "avg", 64, 1),
    (0, 128, 160, 64, 96, "max", 0, 2), (224, 64, 96, 96, 128, "avg", 128, 1),
    (192, 96, 128, 96, 128, "avg", 128, 1), (160, 128, 160, 128, 160, "avg", 128, 1),
    (96, 128, 192, 160, 192, "avg", 128, 1), (0, 128, 192, 192, 256, "max", 0, 2),
    (352, 192, 320, 160, 224, "avg", 128, 1), (352, 192, 320, 192, 224, "max", 128, 1),
]  # fmt: skip
WIDTH = 0.125
# the training recipe (BN-Baseline's at the study's CPU scale)
DEFAULTS = dict(
    lr=0.0015, momentum=0.9, weight_decay=2e-4, batch_size=32, eval_every=300,
    lr_decay_every=160, lr_decay_factor=0.96, channels_last=True,
)  # fmt: skip


def w(c: int) -> int:
    return max(1, round(c * WIDTH))


def unit(c_in: int, c_out: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False),
        nn.BatchNorm2d(c_out, momentum=0.01, eps=1e-3),
        nn.ReLU(inplace=True),
    )


class Mixed(nn.Module):
    def __init__(self, c_in: int, n1, r3, n3, rd, nd, pool, proj, s) -> None:
        super().__init__()
        self.b1 = unit(c_in, w(n1), 1) if n1 else None
        self.b3 = nn.Sequential(unit(c_in, w(r3), 1), unit(w(r3), w(n3), 3, s))
        self.bd = nn.Sequential(
            unit(c_in, w(rd), 1), unit(w(rd), w(nd), 3), unit(w(nd), w(nd), 3, s)
        )
        p = (
            nn.AvgPool2d(3, s, 1, count_include_pad=False)
            if pool == "avg"
            else nn.MaxPool2d(3, s, 1)
        )
        self.bp = nn.Sequential(p, *([unit(c_in, w(proj), 1)] if proj else []))
        self.out = (w(n1) if n1 else 0) + w(n3) + w(nd) + (w(proj) if proj else c_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branches = [self.b3(x), self.bd(x), self.bp(x)]
        return torch.cat(([self.b1(x)] if self.b1 is not None else []) + branches, 1)


def network() -> nn.Sequential:
    lrn = lambda: nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)  # noqa: E731
    layers = [unit(3, w(64), 7, 2), lrn(), unit(w(64), w(64), 1), unit(w(64), w(192), 3), lrn()]
    c = w(192)
    for row in ROWS:
        layers.append(Mixed(c, *row))
        c = layers[-1].out
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.4), nn.Linear(c, 10)]
    return nn.Sequential(*layers, *head)


def main() -> None:
    args = arguments(__doc__, **DEFAULTS)
    torch.manual_seed(args.seed)
    train(args, network())


if __name__ == "__main__":
    main()
