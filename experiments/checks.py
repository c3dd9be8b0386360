"""Configuration errors: every study validates its settings before it trains."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from omegaconf import DictConfig


class ConfigError(ValueError):
    """An invalid setting, reported before any training."""


def require(checks: Iterable[tuple[bool, str]]) -> None:
    """Raise :class:`ConfigError` with the message of the first failed ``(ok, message)``."""
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def run_study(
    train: Callable[[DictConfig, Path], dict | list[dict]], cfg: DictConfig
) -> float | None:
    """The body of every study's Hydra ``main``: train into the Hydra run directory; a bad
    setting or missing data ends the process with a one-line message instead of a traceback."""
    from hydra.core.hydra_config import HydraConfig

    from experiments.data import DataUnavailable

    try:
        result = train(cfg, Path(HydraConfig.get().runtime.output_dir))
    except (ConfigError, DataUnavailable) as e:
        sys.exit(f"error: {e}")
    # One summary, or one per seed (the MNIST study's stacked seeds): the mean test accuracy.
    summaries = result if isinstance(result, list) else [result]
    accs = [s["test_acc"] for s in summaries if s.get("test_acc") is not None]
    return statistics.fmean(accs) if accs else None
