"""BN with its statistics outside the gradient: the BN paper's founding argument (Sec. 2).

If the normalization's statistics are treated as constants by the gradient, gradient descent
ignores that the normalization undoes part of every update. The paper's example: a layer
``x = u + b`` normalized as ``x̂ = x − E[x]``; with ``E[x]`` a constant the gradient moves ``b``
although ``x̂`` and the loss do not change, so ``b`` grows without bound. The Batch Renorm paper
(Sec. 2) adds that normalizing by the moving averages during training "has been observed to lead
to the model blowing up".

These layers are deliberately wrong ways to train and live with the study that shows it, not in
:mod:`bn`: a user of the library should never reach for them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

MODES = ("detached", "moving", "center")


class OutsideGradientNorm(nn.Module):
    r"""Batch normalization of ``(N, C, L)`` inputs over ``N`` and ``L`` per channel, with the
    statistics outside the gradient.

    ``mode``:

    - ``"detached"``: :math:`\hat x = (x - \mathrm{sg}(\mu_B)) / \mathrm{sg}(\sigma_B)` with the
      mini-batch's mean and standard deviation held constant by the gradient (BN's forward, not
      its backward), then :math:`\gamma \hat x + \beta`.
    - ``"moving"``: :math:`\hat x = (x - \mu) / \sigma` with the moving averages in training too
      (updated after each batch), then :math:`\gamma \hat x + \beta`.
    - ``"center"``: the paper's example, :math:`\hat x = x - \mathrm{sg}(\mu_B)`: no scale, no
      :math:`\gamma, \beta` (the bias of the layer before is the parameter that grows).

    In evaluation every mode normalizes with the moving averages, as BN does.

    Args:
        num_features: ``C``.
        mode: one of ``"detached"``, ``"moving"``, ``"center"``.
        momentum: the moving averages' rate, torch's convention (``running = (1 − m) running + m
            batch``).
        eps: added to the variance.

    Shape:
        - Input: ``(N, C, L)``. Output: the same.
    """

    def __init__(
        self, num_features: int, mode: str, momentum: float = 0.1, eps: float = 1e-5
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} must be one of {MODES}")
        self.mode, self.momentum, self.eps = mode, momentum, eps
        self.affine = mode != "center"
        if self.affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: Tensor) -> Tensor:
        shape = (1, -1, 1)
        if self.training:
            with torch.no_grad():
                mean = x.mean((0, 2))
                var = x.var((0, 2), unbiased=False)
                n = x.numel() // x.shape[1]
                moving = (self.running_mean.clone(), self.running_var.clone())
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var * n / max(n - 1, 1), self.momentum)
            if self.mode == "moving":
                mean, var = moving
        else:
            mean, var = self.running_mean, self.running_var
        y = x - mean.view(shape)
        if self.mode != "center":
            y = y * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y

    def extra_repr(self) -> str:
        return f"{self.running_mean.numel()}, mode={self.mode}, momentum={self.momentum}, eps={self.eps}"
