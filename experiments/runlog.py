"""What every run writes: ``metrics.csv`` (the source of truth), W&B (a mirror), ``summary.json``,
and atomic checkpoints."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import torch

LOGGER_MODES = ("online", "offline", "disabled")


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class RunLog:
    """Appends ``step,metric,value`` rows to ``metrics.csv`` and mirrors scalars to W&B.

    Rows are flushed as they are written, so a crash keeps everything logged so far. When
    resuming from a checkpoint at ``resume_step``, rows after it are dropped first (they will
    be logged again).
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        wandb_kwargs: dict[str, Any],
        mode: str,
        resume_step: int | None = None,
    ) -> None:
        self.path = out_dir / "metrics.csv"
        rows = []
        if resume_step is not None and self.path.exists():
            with self.path.open() as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        self._file = self.path.open("w", newline="")
        self._writer = csv.writer(self._file)
        self._writer.writerow(["step", "metric", "value"])
        self._writer.writerows([r["step"], r["metric"], r["value"]] for r in rows)
        self._file.flush()
        self.wandb = None
        if mode != "disabled":
            import wandb

            id_file = out_dir / "wandb_id.txt"
            run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
            id_file.write_text(run_id)
            # create_new: a process may hold several runs (the MNIST study's stacked seeds).
            self.wandb = wandb.init(
                mode=mode,
                dir=str(out_dir),
                id=run_id,
                resume="allow",
                reinit="create_new",
                **wandb_kwargs,
            )

    def log(
        self, step: int, metrics: dict[str, float], extra: dict[str, Any] | None = None
    ) -> None:
        self._writer.writerows([step, k, f"{v:.6g}"] for k, v in metrics.items())
        self._file.flush()
        if self.wandb is not None:
            self.wandb.log({**metrics, **(extra or {})}, step=step)

    def close(self) -> None:
        self._file.close()
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file, then rename: a kill mid-write leaves the old checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def read_curve(path: Path, metric: str) -> list[tuple[int, float]]:
    """Every logged ``(step, value)`` of ``metric`` in a ``metrics.csv``, in order."""
    with path.open() as f:
        return [
            (int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["metric"] == metric
        ]


def read_metric(path: Path, metric: str) -> list[float]:
    """Every logged value of ``metric`` in a ``metrics.csv``, in order."""
    return [value for _, value in read_curve(path, metric)]


def run_command(module: str) -> str:
    """The command line that started this run, as ``python -m <module> <overrides>``."""
    import sys

    return f"python -m {module} " + " ".join(sys.argv[1:])


def open_run_log(
    cfg, out_dir: Path, *, name: str, job_type: str, resume_step: int | None
) -> RunLog:
    """The run's :class:`RunLog` with W&B settings from ``cfg.logger`` and the resolved config."""
    from omegaconf import OmegaConf

    return RunLog(
        out_dir,
        mode=cfg.logger.mode,
        resume_step=resume_step,
        wandb_kwargs=dict(
            project=cfg.logger.project,
            group=cfg.logger.group,
            name=name,
            job_type=job_type,
            tags=list(cfg.logger.tags),
            config=OmegaConf.to_container(cfg, resolve=True),
        ),
    )
