"""The normalization layers of a built network, as a whole: finding them and fixing their scale."""

from __future__ import annotations

import torch
from torch import nn


def norm_layers(model: nn.Module) -> list[nn.Module]:
    """Every normalization layer of ``model`` (batch, group or layer norm), in order."""
    kinds = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    return [m for m in model.modules() if isinstance(m, kinds)]


def freeze_norm_scale(model: nn.Module) -> None:
    """Fix every norm layer's γ at 1 (no gradient, so no optimizer or weight-decay update)."""
    for m in norm_layers(model):
        if getattr(m, "weight", None) is not None:
            with torch.no_grad():
                m.weight.fill_(1.0)
            m.weight.requires_grad_(False)
