"""The one table of every numeric setting's range, checked before a study trains.

A key a study does not have is skipped, so one table serves every study; rules that tie keys
together (a microbatch that divides the batch, a ramp that ends after its warm-up) stay with the
checks in :mod:`experiments.kit.config` and in each study's ``check``. One rule covers every
setting, listed here or not: no number in a config may be NaN or infinite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.kit.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``<`` where open); ``null`` says what null means, where allowed."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    null: str | None = None
    why: str = ""

    def admits(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def text(self) -> str:
        if self.high is None:
            if self.low == 0 and self.low_open:
                return "positive"
            return f"{'above' if self.low_open else 'at least'} {self.low:g}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {left}{self.low:g}, {self.high:g}{right}"


def at_least(low: float, **kw) -> Range:
    return Range(low=low, **kw)


def positive(**kw) -> Range:
    return Range(low=0, low_open=True, **kw)


RANGES: dict[str, Range] = {
    # every study
    "train.lr": positive(),
    "train.steps": at_least(1),
    "train.batch_size": at_least(1),
    "train.weight_decay": at_least(0),
    "train.momentum": Range(low=0, high=1, high_open=True, why="SGD's momentum"),
    "train.grad_clip": positive(null="no clipping"),
    "eval.every": at_least(1),
    "eval.batch_size": at_least(1),
    "threads": at_least(1, null="torch's default"),
    "data.num_workers": at_least(0, why="0: load in the training process"),
    "data.image_size": Range(
        low=1,
        high=1024,
        null="MNIST's own 28 px",
        why="pixels a side; ImageNet's networks take 224 to 299",
    ),
    "norm.eps": positive(),
    "norm.momentum": Range(low=0, high=1, null="a cumulative average"),
    "norm.groups": at_least(1),
    "norm.schedule.r_max": at_least(1, why="1 disables the r correction"),
    "norm.schedule.d_max": at_least(0, why="0 disables the d correction"),
    "norm.schedule.warmup": at_least(0),
    "norm.schedule.r_max_step": at_least(0),
    "norm.schedule.d_max_step": at_least(0),
    "norm.schedule.paper_steps": at_least(
        1, null="the breakpoints as given", why="the length of the run the breakpoints are for"
    ),
    # the classifier studies (renorm, inception)
    "eval.test_subset": at_least(0, why="0: the full test set"),
    "eval.train_subset": at_least(0, why="0 skips it"),
    "train.first_images": at_least(0, why="0: every training image"),
    # the depth study
    "eval.test_examples": at_least(0, why="0: no test accuracy"),
    "eval.checkpoint_every": at_least(1),
    "eval.clip_every": at_least(1),
    "eval.population_batches": at_least(0, why="0 skips it"),
    "eval.pair_batch_size": at_least(2, why="a batch with a statistic"),
    "train.stop.target": Range(low=0, high=1, low_open=True, null="no target", why="an accuracy"),
    "train.stop.plateau": positive(null="no plateau rule"),
    "train.stop.min_steps": at_least(0),
    "train.reference_batch": at_least(1),
    "train.lr_mult": positive(),
    "train.wd_mult": at_least(0),
    "train.lr_decay_every": at_least(1),
    "train.decay_speedup": positive(),
    "train.lr_decay_factor": Range(low=0, high=1, low_open=True),
    "model.width": positive(),
    "model.dropout": Range(low=0, high=1, high_open=True),
    "augment.photometric": at_least(0),
    # the MNIST networks (mnist, mechanism)
    "model.init_std": positive(),
    "population.num_batches": at_least(1),
    "probe.batches": at_least(1),
    "probe.jacobian_examples": at_least(1),
    "probe.unit": at_least(0),
}


def non_finite(cfg: Any, prefix: str = "") -> list[str]:
    """The dotted keys of every number in ``cfg`` (a config or a plain container) that is NaN
    or infinite."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(cfg, dict):
        return [k for key, v in cfg.items() for k in non_finite(v, f"{prefix}{key}.")]
    if isinstance(cfg, (list, tuple)):
        return [k for i, v in enumerate(cfg) for k in non_finite(v, f"{prefix}{i}.")]
    if isinstance(cfg, float) and not math.isfinite(cfg):
        return [prefix.rstrip(".")]
    return []


def check_ranges(cfg: DictConfig) -> None:
    """Raise :class:`~experiments.kit.errors.ConfigError` for the first setting of ``cfg`` that is
    NaN or infinite (any setting), or outside its range in :data:`RANGES`, naming it, its value
    and the range."""
    if bad := non_finite(cfg):
        value = OmegaConf.select(cfg, bad[0])
        raise ConfigError(f"{bad[0]}={value} must be a finite number")
    missing = object()
    for key, rule in RANGES.items():
        value = OmegaConf.select(cfg, key, default=missing)
        if value is missing or (value is None and rule.null is not None):
            continue
        if value is None or not rule.admits(value):
            extra = [f"or null: {rule.null}"] if rule.null else []
            extra += [rule.why] if rule.why else []
            note = f" ({'; '.join(extra)})" if extra else ""
            raise ConfigError(f"{key}={value} must be {rule.text()}{note}")
