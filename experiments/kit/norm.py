"""The ``norm`` config group, consumed the same way by every study.

``configs/norm/<kind>.yaml`` (schema :class:`~experiments.kit.config.NormConf`) becomes a
factory ``num_features -> layer`` through :func:`bn.get_norm_layer` (:func:`norm_factory`), the
``norm_layer`` every network takes, so ``norm.momentum=0.05`` (or any other norm key) reaches the
layer by one path in every study.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig
from torch import nn

import bn
from experiments.kit.config import WEIGHT_NORM_KINDS
from experiments.kit.errors import ConfigError
from experiments.nets.norms import freeze_norm_scale

# Keys of cfg.norm that each kind's layer takes.
_LAYER_KEYS = {
    "batchnorm": ("momentum", "eps", "impl", "microbatch"),
    "batchrenorm": ("momentum", "eps", "impl", "microbatch"),
    "torch_batchnorm": ("momentum", "eps"),
    "groupnorm": ("groups", "eps"),
    "layernorm": ("eps",),
    "l1_batchnorm": ("momentum", "eps"),
    "linf_batchnorm": ("momentum", "eps"),
    "weightnorm": (),
    "weightnorm_meanonly": ("momentum",),
    "none": (),
}
# The norm-slot layer of each weight-normalized kind (None: none, and the layers keep their bias).
_WEIGHT_NORM_SLOT = {"weightnorm": None, "weightnorm_meanonly": "meanonly_batchnorm"}


def norm_kwargs(norm: DictConfig, total_steps: int) -> dict:
    """The constructor arguments of ``norm.kind``'s layer; Batch Renorm's schedule is scaled
    to a run of ``total_steps`` (see :func:`renorm_bounds`)."""
    kind = str(norm.kind)
    kw = {key: _plain(norm[key]) for key in _LAYER_KEYS[kind]}
    if kind in ("batchnorm", "batchrenorm") and norm.sync_stats:
        kw["sync_stats"] = True
    if kind == "batchrenorm":
        kw["r_max"], kw["d_max"] = renorm_bounds(norm.schedule, total_steps)
        if norm.get("ablation") is not None:
            kw["ablation"] = str(norm.ablation)
    return kw


def norm_factory(
    norm: DictConfig, dims: int, total_steps: int, builds_weight_norm: bool = False
) -> Callable[[int], nn.Module] | None:
    """``num_features -> layer`` for ``cfg.norm`` and ``dims`` (1: ``(N, C[, L])``, 2: images),
    the ``norm_layer`` every network takes; ``None`` for ``norm.kind=none`` (no norm layer, and
    the layers before it keep their bias). A weight-normalized kind (:func:`weight_norm`) gives
    its norm-slot layer (mean-only BN, or ``None``); the network must build the weight
    normalization itself, which the caller says it does (``builds_weight_norm``)."""
    kind = str(norm.kind)
    if kind in WEIGHT_NORM_KINDS:
        if not builds_weight_norm:
            raise ConfigError(f"norm={kind} reparameterizes the layers before the norm; only the renorm study's small_convnet builds it")  # fmt: skip
        slot = _WEIGHT_NORM_SLOT[kind]
        return None if slot is None else bn.get_norm_layer(slot, dims=dims, **norm_kwargs(norm, total_steps))  # fmt: skip
    if kind == "none":
        return None
    return bn.get_norm_layer(kind, dims=dims, **norm_kwargs(norm, total_steps))


def weight_norm(norm: DictConfig) -> bool:
    """Whether ``cfg.norm`` weight-normalizes the layers before each norm slot (Salimans & Kingma
    2016: :class:`bn.WeightNormConv2d`, :class:`bn.WeightNormLinear`)."""
    return str(norm.kind) in WEIGHT_NORM_KINDS


def renorm_bounds(s: DictConfig, total_steps: int):
    """``(r_max, d_max)``: the paper's ramps, their breakpoints scaled by
    ``total_steps / s.paper_steps`` so a short run keeps the paper's proportions (``paper``), or
    constants from step 0 (``fixed``: no plain-BN warm-up, no ramp)."""
    if s.kind == "fixed":
        return float(s.r_max), float(s.d_max)
    r_max = bn.paper_r_max(s.warmup, s.r_max_step, s.r_max)
    d_max = bn.paper_d_max(s.warmup, s.d_max_step, s.d_max)
    if s.paper_steps:
        factor = total_steps / s.paper_steps
        r_max, d_max = r_max.scaled(factor), d_max.scaled(factor)
    return r_max, d_max


def resume_fixed(flat: dict[str, Any]) -> dict[str, str]:
    """The settings outside ``norm.*`` that the run's norm layers depend on, by flat key, each
    with what a run of ``flat`` (its flat config) holds (``{old}``, ``{new}``: the key's values):
    a resume may change these settings for other runs (:mod:`experiments.kit.identity`), not for
    this one. A Batch Renorm ramp scaled to the run's length (``norm.schedule.paper_steps``,
    :func:`renorm_bounds`) fixes ``train.steps``."""
    if (
        flat.get("norm.kind") == "batchrenorm"
        and flat.get("norm.schedule.kind") == "paper"
        and flat.get("norm.schedule.paper_steps")
    ):
        return {
            "train.steps": "a Batch Renorm run whose r_max/d_max ramp is scaled to "
            "train.steps={old} (norm.schedule.paper_steps): resuming with train.steps={new} "
            "would change the ramp mid-run"
        }
    return {}


def apply_norm_options(model: nn.Module, norm: DictConfig) -> nn.Module:
    """What ``cfg.norm`` sets on a built model rather than on each layer: ``fix_gamma``."""
    if norm.fix_gamma:
        freeze_norm_scale(model)
    return model


def _plain(value):
    return str(value) if isinstance(value, str) else value
