"""Configuration errors: every study validates its settings before it trains."""

from __future__ import annotations

from collections.abc import Iterable


class ConfigError(ValueError):
    """An invalid setting, reported before any training."""


def require(checks: Iterable[tuple[bool, str]]) -> None:
    """Raise :class:`ConfigError` with the message of the first failed ``(ok, message)``."""
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
