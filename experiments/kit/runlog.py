"""What every run writes: ``metrics.csv`` (the source of truth), W&B (a mirror), ``summary.json``,
and atomic checkpoints."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch


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
    be logged again; the kept rows are written to a new file that replaces the old one, so a
    kill meanwhile loses nothing), and a row already logged at ``resume_step`` is not logged twice.
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
        self._at_resume = {r["metric"] for r in rows if int(r["step"]) == resume_step}
        self._resume_step = resume_step
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["step", "metric", "value"])
            writer.writerows([r["step"], r["metric"], r["value"]] for r in rows)
        os.replace(tmp, self.path)
        self._file = self.path.open("a", newline="")
        self._writer = csv.writer(self._file)
        self.wandb = None
        if mode != "disabled":
            self.wandb = _wandb_run(out_dir, mode, wandb_kwargs)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if step == self._resume_step:
            metrics = {k: v for k, v in metrics.items() if k not in self._at_resume}
        self._writer.writerows([step, k, f"{v:.6g}"] for k, v in metrics.items())
        self._file.flush()
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def close(self) -> None:
        self._file.close()
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


def _wandb_run(out_dir: Path, mode: str, kwargs: dict[str, Any]):
    """A W&B run in ``out_dir`` (resumed under the same id). ``online`` needs an API key and a
    reachable server: without them it fails within seconds, with a message, not after a stall."""
    import wandb

    from experiments.kit.config import ConfigError

    if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _wandb_netrc_key()):
        raise ConfigError(
            "logger.mode=online needs a W&B API key (`wandb login` or WANDB_API_KEY); "
            "use logger.mode=offline and `wandb sync` the run later"
        )
    id_file = out_dir / "wandb_id.txt"
    run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
    id_file.write_text(run_id)
    try:
        # create_new: a process may hold several runs (the MNIST study's stacked seeds).
        return wandb.init(
            mode=mode,
            dir=str(out_dir),
            id=run_id,
            resume="allow",
            reinit="create_new",
            settings=wandb.Settings(init_timeout=15),
            **kwargs,
        )
    except Exception as e:  # W&B's own errors (no server, bad key, ...) have no common base
        raise ConfigError(
            f"W&B could not start ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else 'no message'}); "
            "use logger.mode=offline (no network needed) or logger.mode=disabled"
        ) from None


def _wandb_netrc_key() -> bool:
    import netrc

    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


class RunDirLock:
    """Holds ``<run dir>/.lock`` for a run's life, so a second process cannot write into the same
    run directory. An OS lock (``flock``): it is released when the process ends, however it ends,
    so a lock left by a killed run is never in the way."""

    def __init__(self, run_dir: Path) -> None:
        import fcntl

        from experiments.kit.config import ConfigError

        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        self._file = self.path.open("a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "another process"
            self._file.close()
            raise ConfigError(
                f"{run_dir} is in use by {holder}; wait for it to finish or use another "
                "hydra.run.dir"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"process {os.getpid()}")
        self._file.flush()

    def release(self) -> None:
        self._file.close()


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON, atomically. NaN and infinities (not JSON) are written as ``null``, and
    the keys that held them are listed under ``"non_finite"``."""
    bad = sorted(k for k, v in data.items() if isinstance(v, float) and not math.isfinite(v))
    if bad:
        data = {**{k: (None if k in bad else v) for k, v in data.items()}, "non_finite": bad}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")
    os.replace(tmp, path)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file, then rename: a kill mid-write leaves the old checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint written by :func:`save_checkpoint`, loaded with ``weights_only=True`` (tensors
    and plain containers only: a crafted pickle cannot run code); a file that is not one ends
    the run with a message that names it."""
    from experiments.kit.config import ConfigError

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, foreign or not a torch file at all
        raise ConfigError(
            f"{path} is not a checkpoint this code can resume from ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else 'unreadable'}); move it away "
            "or use another hydra.run.dir"
        ) from None
    if not isinstance(ckpt, dict) or "step" not in ckpt or "model" not in ckpt:
        raise ConfigError(
            f"{path} is not a checkpoint of this code's training loop; move it away or use "
            "another hydra.run.dir"
        )
    return ckpt


def read_curve(path: Path, metric: str) -> list[tuple[int, float]]:
    """Every logged ``(step, value)`` of ``metric`` in a ``metrics.csv``, in order."""
    with path.open() as f:
        return [
            (int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["metric"] == metric
        ]


def read_metrics(path: Path) -> dict[str, list[float]]:
    """Every logged value of every metric in a ``metrics.csv``, in order, from one read."""
    values: dict[str, list[float]] = defaultdict(list)
    with path.open() as f:
        for r in csv.DictReader(f):
            values[r["metric"]].append(float(r["value"]))
    return values


def run_command(module: str) -> str:
    """The command line that started this run, as ``python -m <module> <overrides>``."""
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
