"""What one Hydra job of a study knows about itself: the command that reproduces it, whether it
is one job of a sweep, and how a sweep reports the jobs that failed.

A job of a sweep that fails with a known error (a bad setting, missing data, a run directory it
may not write) does not end the sweep: it prints its one line, leaves a record in the sweep
folder (``.failed_jobs/``) and returns, so every launcher (basic, joblib, submitit) runs the
other jobs. When the sweep is over, :class:`FailedJobs` (a Hydra callback every study's config
registers) names each failed job with its overrides and reason, and the process exits with 1.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode

FAILED_DIR = ".failed_jobs"  # in the sweep folder; hidden, so collection never reads it


def in_sweep() -> bool:
    """Whether this process runs one job of a Hydra multirun."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def job_overrides() -> list[str]:
    """This job's own settings as given (a sweep's job: its share of the sweep); outside a Hydra
    app, the command line's arguments."""
    if not HydraConfig.initialized():
        return sys.argv[1:]
    hc = HydraConfig.get()
    own = list(hc.overrides.task)
    if hc.mode == RunMode.RUN:  # where it ran, as typed (a sweep's folders are the sweep's)
        own += [o for o in hc.overrides.hydra if not o.startswith("hydra.mode=")]
    return own


def job_command(module: str) -> str:
    """The command that runs this job again: ``python -m <module>`` and its own overrides,
    quoted for a POSIX shell (under every launcher: not the sweep's command line, nor a
    launcher worker's arguments)."""
    return " ".join(["python", "-m", module, *(shlex.quote(o) for o in job_overrides())])


def record_failure(reason: str) -> None:
    """Keep a failed sweep job's overrides and reason for :class:`FailedJobs` to report."""
    hc = HydraConfig.get()
    folder = Path(hc.sweep.dir) / FAILED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    record = {"job": hc.job.num, "overrides": list(hc.overrides.task), "reason": reason}
    (folder / f"{hc.job.num}-{os.getpid()}.json").write_text(json.dumps(record) + "\n")


class FailedJobs(Callback):
    """After a sweep: one line per job that failed (its overrides and reason), then exit 1.

    Reads the records that jobs of this sweep wrote (those newer than its start: a folder
    reused by an earlier sweep keeps that sweep's records, unread)."""

    def __init__(self) -> None:
        self.started = time.time()

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self.started = time.time()

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        folder = Path(config.hydra.sweep.dir) / FAILED_DIR
        records = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            if path.stat().st_mtime >= self.started:
                try:
                    records.append(json.loads(path.read_text()))
                except (OSError, ValueError):
                    records.append(
                        {"job": path.stem, "overrides": [], "reason": "unreadable record"}
                    )
        if not records:
            return
        records.sort(key=lambda r: int(r["job"]) if str(r["job"]).isdigit() else 0)
        lines = [f"error: {len(records)} job(s) of the sweep in {folder.parent} failed:"]
        lines += [f"  job {r['job']} ({' '.join(r['overrides'])}): {r['reason']}" for r in records]
        sys.exit("\n".join(lines))
