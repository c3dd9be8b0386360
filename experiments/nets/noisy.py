"""Santurkar et al. (2018)'s "noisy BN": covariate shift injected on purpose after each BN layer."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class CovariateShiftNoise(nn.Module):
    """``a ← s ⊙ a + m`` in training mode, identity in inference mode (Santurkar et al. 2018,
    Sec. 2.1; the paper's constants as we read them, not confirmed against its code).

    Every training forward (one per step and layer) draws the step's ``μ_t ~ U(−0.5, 0.5)`` and
    ``σ_t ~ U(1, 1.25)``, then per element ``m ~ U(μ_t − 0.1, μ_t + 0.1)`` and
    ``s ~ N(σ_t, 0.1²)``: a shift of mean and scale that changes every step, so the next layer
    sees a distribution that moves however the weights move. Draws come from torch's global
    generator: the mechanism study seeds it with the noise's own stream once the network is built,
    and its checkpoint restores it, so a resumed run draws the same noise.

    Args:
        mean_range: ``μ_t``'s interval. Default: ``(-0.5, 0.5)``.
        scale_range: ``σ_t``'s interval. Default: ``(1.0, 1.25)``.
        mean_spread: half-width of ``m``'s interval around ``μ_t``. Default: ``0.1``.
        scale_std: standard deviation of ``s`` around ``σ_t``. Default: ``0.1``.
    """

    def __init__(
        self,
        mean_range: tuple[float, float] = (-0.5, 0.5),
        scale_range: tuple[float, float] = (1.0, 1.25),
        mean_spread: float = 0.1,
        scale_std: float = 0.1,
    ) -> None:
        super().__init__()
        self.mean_range, self.scale_range = mean_range, scale_range
        self.mean_spread, self.scale_std = mean_spread, scale_std

    def sample(self, shape: torch.Size, like: Tensor) -> tuple[Tensor, Tensor, float, float]:
        """One step's ``(s, m, σ_t, μ_t)`` for an activation of ``shape``."""
        lo, hi = self.mean_range
        mu = lo + (hi - lo) * torch.rand(()).item()
        lo, hi = self.scale_range
        sigma = lo + (hi - lo) * torch.rand(()).item()
        m = torch.empty(shape, dtype=like.dtype, device=like.device)
        m.uniform_(mu - self.mean_spread, mu + self.mean_spread)
        s = torch.empty(shape, dtype=like.dtype, device=like.device).normal_(sigma, self.scale_std)
        return s, m, sigma, mu

    def forward(self, a: Tensor) -> Tensor:
        if not self.training:
            return a
        s, m, _, _ = self.sample(a.shape, a)
        return s * a + m

    def extra_repr(self) -> str:
        return (
            f"mean_range={self.mean_range}, scale_range={self.scale_range}, "
            f"mean_spread={self.mean_spread}, scale_std={self.scale_std}"
        )
