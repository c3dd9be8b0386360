"""The errors the code reports in one line instead of a traceback.

Library code (the kit, the study modules, the analysis and the claims) raises one of these; the
command line that called it (a study's entry point, ``scripts.collect``, ``scripts.claims``,
``scripts.report``, ...) catches :class:`OneLineError` and ends with ``error: <message>`` and
exit status 1. Any other exception is a bug and keeps its traceback.
"""


class OneLineError(Exception):
    """An error whose message is the whole report: one line, naming what to fix."""


class ConfigError(OneLineError, ValueError):
    """An invalid setting, reported before any training."""


class UnsafeFile(ConfigError):
    """A file a run writes or reads that is a symbolic link (or not a plain file): followed, a
    write would land in whatever it points at. The message names it."""


class Busy(OneLineError):
    """A file or folder that another process is writing at this moment (it holds the lock
    beside it); the message names both."""


class DataUnavailable(OneLineError, RuntimeError):
    """No source could provide the dataset; the message says what was tried and what to do."""


class BadDataFile(DataUnavailable, ValueError):
    """A data file that cannot be read as what it should be; the message names it."""


class CollectError(OneLineError):
    """Runs that cannot be collected as asked (unfinished, of another study, not seeds of one
    setting, ...), or a collection that cannot be written; nothing of it was written."""


class BadResults(OneLineError, ValueError):
    """A results file that is there but not whole (a row cut short, a value that is no number)."""


class MissingResult(OneLineError, FileNotFoundError):
    """A study's results are not committed (its folder or file is absent): the claim has no
    result yet. Any other error is a bug and fails the claims table."""


class AnalysisError(OneLineError, ValueError):
    """Committed results the analysis plan cannot decide on as they are: the claims table stops
    with this one line rather than print a verdict from them (:mod:`scripts.analysis.stats`
    raises its kinds)."""
