"""The errors a study reports in one line instead of a traceback (``experiments.kit.config.run``
catches them): a bad setting, and data that cannot be had or read."""


class ConfigError(ValueError):
    """An invalid setting, reported before any training."""


class DataUnavailable(RuntimeError):
    """No source could provide the dataset; the message says what was tried and what to do."""


class BadDataFile(DataUnavailable, ValueError):
    """A data file that cannot be read as what it should be; the message names it."""


class UnsafeFile(ConfigError):
    """A file a run writes or reads that is a symbolic link (or not a plain file): followed, a
    write would land in whatever it points at. The message names it."""
