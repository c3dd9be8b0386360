"""Which parameters train (``train.trainable``), the rest frozen at their random initialization:
Frankle, Schwab & Morcos (2021, arXiv:2003.00152), "Training BatchNorm and only BatchNorm".

- ``all``: every parameter (the default; what every other run does);
- ``norm``: only the norm layers' γ and β;
- ``random``: the control of as many parameters, placed as γ and β are: in each layer that feeds a
  norm, :data:`PER_UNIT` weights per output channel (or unit), drawn once from a generator seeded
  by the run's seed alone (``derive_seed(seed, "trainable")``), so each unit trains as many
  parameters as its γ and β; everything else, γ and β included, frozen;
- ``output``: only the output layer's weights and bias.

A run is frozen by restoring the frozen entries to their initial values after every optimizer
step (:class:`Freezer`). For an element-wise optimizer (SGD with momentum and weight decay,
RMSprop, the MLP's plain SGD) that is the same trajectory as masking their gradients: each
trained entry's step reads only its own gradient, and that gradient is taken with the frozen
entries at their initial values. It also serves the MLP's compiled step, which has no autograd
graph to mask. The network is described to it as :class:`Parts`, one set per copy of a stack of
seeds, so a copy freezes what its seed alone would freeze.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from experiments.kit.errors import ConfigError
from experiments.kit.seeds import derive_seed

TRAINABLE = ("all", "norm", "random", "output")
PER_UNIT = 2  # γ and β: the random control trains as many weights per unit
# The γ a run has switched off: |γ| below this fraction of its layer's largest |γ|.
SMALL_GAMMA = 0.1
GAMMA_BINS = 20  # the histogram of |γ| / max |γ| over [0, 1], logged at every evaluation


@dataclass
class Parts:
    """A network as :func:`freeze` reads it.

    Args:
        norms: its norm layers (each with γ and β; ``K·C`` channels for ``K`` copies).
        feeding: the weight of each layer that feeds a norm, with ``view(tensor, k)``: copy
            ``k``'s block of a tensor of that weight's shape, as ``(units, ...)``: one row per
            output channel or unit of the norm it feeds.
        output: the output layer's parameters.
        copies: the networks side by side (1: one network).
    """

    norms: list[nn.Module]
    feeding: list[tuple[nn.Parameter, Callable[[Tensor, int], Tensor]]]
    output: list[nn.Parameter]
    copies: int = 1


def check_trainable(kind: str, norms: Sequence[nn.Module]) -> None:
    """Raise :class:`ConfigError` (one line) for a ``train.trainable`` the network cannot train."""
    if kind not in TRAINABLE:
        raise ConfigError(f"train.trainable={kind!r} must be one of {', '.join(TRAINABLE)}")
    if kind in ("norm", "random") and not norms:
        raise ConfigError(
            f"train.trainable={kind} trains (as many parameters as) the norms' γ and β; the "
            "network has no norm (use a setup with one)"
        )
    if kind == "norm" and any(
        getattr(m, "weight", None) is None
        or getattr(m, "bias", None) is None
        or not m.weight.requires_grad
        for m in norms
    ):
        raise ConfigError(
            "train.trainable=norm trains γ and β; a norm has none, or γ fixed "
            "(set norm.fix_gamma=false)"
        )


def masks(kind: str, parts: Parts, seeds: Sequence[int]) -> dict[nn.Parameter, Tensor]:
    """``{parameter: boolean mask}`` (True: trained) of the parameters ``kind`` trains; every
    parameter absent is frozen whole. ``seeds``: one per copy (the random control's draws)."""
    if len(seeds) != parts.copies:
        raise ValueError(f"{len(seeds)} seeds for {parts.copies} copies")
    if kind == "norm":
        chosen = [p for m in parts.norms for p in (m.weight, m.bias)]
        return {p: torch.ones_like(p, dtype=torch.bool) for p in chosen}
    if kind == "output":
        return {p: torch.ones_like(p, dtype=torch.bool) for p in parts.output}
    if kind != "random":
        raise ValueError(f"no masks for trainable={kind!r}")
    out = {p: torch.zeros_like(p, dtype=torch.bool) for p, _ in parts.feeding}
    for k, seed in enumerate(seeds):
        g = torch.Generator().manual_seed(derive_seed(seed, "trainable"))
        for p, view in parts.feeding:
            block = view(out[p], k)
            units, fan_in = block.shape[0], math.prod(block.shape[1:])
            if fan_in < PER_UNIT:
                raise ConfigError(
                    f"train.trainable=random: a layer with {fan_in} inputs per unit has fewer "
                    f"than {PER_UNIT} weights to train per unit"
                )
            picked = torch.rand(units, fan_in, generator=g).argsort(1)[:, :PER_UNIT]
            rows = torch.zeros(units, fan_in, dtype=torch.bool).scatter_(1, picked, True)
            block.copy_(rows.view(block.shape))
    return out


class Freezer:
    """Holds every parameter of ``model`` outside ``masks`` (and each masked one's False
    entries) at the value it has now: :meth:`restore` after every optimizer step."""

    def __init__(self, model: nn.Module, masks: dict[nn.Parameter, Tensor]) -> None:
        known = {id(p) for p in model.parameters()}
        if any(id(p) not in known for p in masks):
            raise ValueError("a mask for a parameter that is not the model's")
        self.frozen: list[tuple[nn.Parameter, Tensor, Tensor | None]] = []
        for p in model.parameters():
            mask = masks.get(p)
            if mask is not None and bool(mask.all()):
                continue
            kept = None if mask is None else mask.to(p.device)
            self.frozen.append((p, p.detach().clone(), kept))

    def restore(self) -> None:
        """Every frozen entry back to its initial value."""
        with torch.no_grad():
            for p, initial, mask in self.frozen:
                p.copy_(initial if mask is None else torch.where(mask, p, initial))


def freeze(kind: str, model: nn.Module, parts: Parts, seeds: Sequence[int]) -> Freezer | None:
    """The :class:`Freezer` of ``train.trainable=kind`` (``None`` for ``all``: nothing frozen)."""
    check_trainable(kind, parts.norms)
    if kind == "all":
        return None
    return Freezer(model, masks(kind, parts, seeds))


def trained_counts(kind: str, parts: Parts, seeds: Sequence[int]) -> list[int]:
    """The parameters ``kind`` trains in each copy (``all``: not counted, an error)."""
    chosen, views = masks(kind, parts, seeds), dict(parts.feeding)
    return [
        sum(
            int(views[p](m, k).sum()) if p in views else m.numel() // parts.copies
            for p, m in chosen.items()
        )
        for k in range(parts.copies)
    ]


def gamma_metrics(norms: Sequence[nn.Module], copies: int) -> dict[str, list[float]]:
    """How many of the norms' γ are switched off, one value per copy: over every channel (unit)
    of every norm, the fraction whose ``|γ|`` is below :data:`SMALL_GAMMA` of its layer's largest
    (``gamma/small_fraction``; per layer ``gamma/layer<i>/small_fraction``), and the histogram of
    ``|γ| / max |γ|`` in :data:`GAMMA_BINS` bins of ``[0, 1]`` (``gamma/hist<b>``: fractions)."""
    out: dict[str, list[float]] = {}
    for k in range(copies):
        ratios = []
        for i, m in enumerate(norms, 1):
            g = m.weight.detach().abs().float().chunk(copies)[k]
            r = g / g.max().clamp_min(torch.finfo(g.dtype).tiny)
            out.setdefault(f"gamma/layer{i}/small_fraction", []).append(
                (r < SMALL_GAMMA).float().mean().item()
            )
            ratios.append(r)
        r = torch.cat(ratios)
        out.setdefault("gamma/small_fraction", []).append((r < SMALL_GAMMA).float().mean().item())
        bins = (r * GAMMA_BINS).long().clamp(max=GAMMA_BINS - 1)
        counts = torch.bincount(bins, minlength=GAMMA_BINS).float() / len(r)
        for b, c in enumerate(counts):
            out.setdefault(f"gamma/hist{b:02d}", []).append(c.item())
    return out
