"""What every run writes: ``metrics.csv`` (the source of truth), W&B (a mirror), ``summary.json``,
and atomic checkpoints. No file of a run folder is opened through a symbolic link: one planted
under a name the run writes or reads is refused (:class:`~experiments.kit.errors.UnsafeFile`),
never followed to overwrite or truncate what it points at."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from experiments.kit.errors import ConfigError
from experiments.kit.files import open_existing, write_whole

REPO = Path(__file__).resolve().parents[2]
CODE_PATHS = ("bn", "experiments", "configs", "scripts", "pyproject.toml")  # what a run executes


def _git(args: list[str], root: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=root)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_commit(root: Path = REPO) -> str:
    return (_git(["rev-parse", "HEAD"], root) or "").strip() or "unknown"


def cpu_capability() -> str:
    """The instruction set torch's own CPU kernels dispatch to ("AVX2", "AVX512", ...; the
    environment variable ``ATEN_CPU_CAPABILITY`` lowers it), and oneDNN's cap when
    ``ONEDNN_MAX_CPU_ISA`` sets one (its convolutions choose their own set). Kernels of different
    sets sum in different orders, so a float32 run reproduces bit for bit only where both are the
    same."""
    capability = torch.backends.cpu.get_cpu_capability()
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return f"{capability}, oneDNN at most {onednn.upper()}" if onednn else capability


def code_changes(root: Path = REPO) -> str | None:
    """``None`` when the code a run executes (:data:`CODE_PATHS`) is the commit's; else a short
    SHA-256 of its changes (the diff against HEAD and the untracked files' names and bytes), so a
    run made with uncommitted code says so, and two such runs say whether they ran the same code.
    Outside a git checkout: ``None``."""
    status = _git(["status", "--porcelain", "--untracked-files=all", "--", *CODE_PATHS], root)
    if not status or not status.strip():
        return None
    h = hashlib.sha256(
        (_git(["diff", "HEAD", "--no-ext-diff", "--", *CODE_PATHS], root) or "").encode()
    )
    for line in sorted(status.splitlines()):
        if line.startswith("??"):
            path = root / line[3:].strip()
            h.update(line.encode() + (path.read_bytes() if path.is_file() else b""))
    return h.hexdigest()[:16]


def _readable(row: dict) -> bool:
    """A whole ``step,metric,value`` row (not one cut short by a kill mid-write)."""
    try:
        int(row["step"]), float(row["value"])
    except (TypeError, ValueError, KeyError):
        return False
    return bool(row.get("metric"))


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
        wandb_dir: str | None = None,
    ) -> None:
        self.path = out_dir / "metrics.csv"
        rows = []
        if resume_step is not None and (self.path.exists() or self.path.is_symlink()):
            with open_existing(self.path, newline="") as f:
                logged = list(csv.DictReader(f))
            readable = [r for r in logged if _readable(r)]
            if torn := len(logged) - len(readable):  # a row cut short by a kill mid-write
                print(f"{self.path}: dropped {torn} unreadable row(s)", file=sys.stderr)
            rows = [r for r in readable if int(r["step"]) <= resume_step]
        self._at_resume = {r["metric"] for r in rows if int(r["step"]) == resume_step}
        self._resume_step = resume_step
        # W&B first: one that cannot start leaves no metrics.csv in the way of the retry
        self.wandb = None
        if mode != "disabled":
            self.wandb = _wandb_run(out_dir, mode, wandb_kwargs, wandb_dir)

        def write(f) -> None:
            writer = csv.writer(f)
            writer.writerow(["step", "metric", "value"])
            writer.writerows([r["step"], r["metric"], r["value"]] for r in rows)

        write_whole(self.path, write, sync=True, newline="")
        self._file = open_existing(self.path, "a", newline="")
        self._writer = csv.writer(self._file)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if step == self._resume_step:
            metrics = {k: v for k, v in metrics.items() if k not in self._at_resume}
        self._writer.writerows([step, k, f"{v:.6g}"] for k, v in metrics.items())
        self._file.flush()
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def sync(self) -> None:
        """The rows logged so far on the disk: before a checkpoint, so that one a power cut
        leaves never resumes past rows the log lost."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


def _wandb_run(out_dir: Path, mode: str, kwargs: dict[str, Any], wandb_dir: str | None = None):
    """A W&B run of the run in ``out_dir`` (resumed under the same id, kept in its
    ``wandb_id.txt``; ``WANDB_RUN_ID``, when set, is the id), its files in ``wandb_dir`` (default:
    ``out_dir``). ``online`` needs an API key and a reachable server: without them it fails with a
    message, not after a stall."""
    import wandb

    if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _wandb_netrc_key()):
        raise ConfigError(
            "logger.mode=online needs a W&B API key (`wandb login` or WANDB_API_KEY); "
            "use logger.mode=offline and `wandb sync` the run later"
        )
    if wandb_dir:
        Path(wandb_dir).mkdir(parents=True, exist_ok=True)
    id_file = out_dir / "wandb_id.txt"
    # a fresh run skips W&B's resume lookup (a network round trip)
    resumed = id_file.exists() or id_file.is_symlink()
    if resumed:
        with open_existing(id_file) as f:
            kept = f.read().strip()
    run_id = os.environ.get(WANDB_RUN_ENV["id"]) or (kept if resumed else uuid.uuid4().hex[:8])
    write_whole(id_file, lambda f: f.write(run_id))
    try:
        # create_new: a process may hold several runs (the MNIST study's stacked seeds).
        return wandb.init(
            mode=mode,
            dir=str(wandb_dir or out_dir),
            id=run_id,
            resume="allow" if resumed else None,
            reinit="create_new",
            # quiet on the console (~35 lines a run otherwise) unless the user set WANDB_SILENT
            settings=wandb.Settings(init_timeout=15, silent="WANDB_SILENT" not in os.environ),
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

        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        # in place, not replaced: another process may hold a lock on this very file
        self._file = open_existing(self.path, "r+")
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


REPLACED = ".replaced"  # where overwrite=true keeps the runs it replaced (hidden: never collected)


def move_aside(run_dir: Path, keep: set[str]) -> Path | None:
    """Move every entry of ``run_dir`` but ``keep`` into ``run_dir/.replaced/<time>/``: the earlier
    run that ``overwrite=true`` replaces, kept whole, out of the way of the new run (whose resume
    must never find the old checkpoint) and of collection (which skips hidden folders). Returns
    that folder, or None when there was nothing to move."""
    entries = sorted(p for p in run_dir.iterdir() if p.name not in keep | {REPLACED})
    if not entries:
        return None
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    dest, n = run_dir / REPLACED / stamp, 1
    while dest.exists():
        dest, n = run_dir / REPLACED / f"{stamp}_{n}", n + 1
    dest.mkdir(parents=True)
    for p in entries:
        os.replace(p, dest / p.name)
    return dest


def write_settings(folder: Path, cfg) -> None:
    """The run's settings, as Hydra records them: ``config.yaml`` (the composed config),
    ``overrides.yaml`` and ``hydra.yaml`` (the latter two inside a Hydra app only)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    folder.mkdir(parents=True, exist_ok=True)
    saved = {"config.yaml": cfg}
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        saved["overrides.yaml"] = hydra_cfg.overrides.task
        saved["hydra.yaml"] = OmegaConf.create({"hydra": hydra_cfg})
    for name, node in saved.items():
        write_whole(folder / name, lambda f, node=node: OmegaConf.save(node, f))


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON, whole and on the disk (:func:`write_whole` with ``sync``). NaN and infinities (not JSON) are written as ``null``, and
    the keys that held them are listed under ``"non_finite"``."""
    bad = sorted(k for k, v in data.items() if isinstance(v, float) and not math.isfinite(v))
    if bad:
        data = {**{k: (None if k in bad else v) for k, v in data.items()}, "non_finite": bad}
    text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_whole(path, lambda f: f.write(text), sync=True)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file, on the disk before it is renamed over ``path``: a kill or a
    power cut mid-write leaves the old checkpoint, never a torn one that a resume would load."""
    write_whole(path, lambda f: torch.save(state, f), "wb", sync=True)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint written by :func:`save_checkpoint`, loaded with ``weights_only=True`` (tensors
    and plain containers only: a crafted pickle cannot run code); a file that is not one ends
    the run with a message that names it."""

    try:
        with open_existing(path, "rb") as f:
            ckpt = torch.load(f, map_location="cpu", weights_only=True)
    except ConfigError:  # a symbolic link: refused, not read
        raise
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
    with open_existing(path, newline="") as f:
        return [
            (int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["metric"] == metric
        ]


def read_metrics(path: Path) -> dict[str, list[float]]:
    """Every logged value of every metric in a ``metrics.csv``, in order, from one read."""
    values: dict[str, list[float]] = defaultdict(list)
    with open_existing(path, newline="") as f:
        for r in csv.DictReader(f):
            values[r["metric"]].append(float(r["value"]))
    return values


# W&B's own environment variables, by the logger.* key each stands for ...
WANDB_ENV = {
    "mode": "WANDB_MODE", "project": "WANDB_PROJECT", "entity": "WANDB_ENTITY",
    "dir": "WANDB_DIR", "group": "WANDB_RUN_GROUP", "tags": "WANDB_TAGS",
}  # fmt: skip
# ... and by the wandb.init argument each stands for, of those the code sets for each run: its name,
# job type (the setup) and id (kept in wandb_id.txt).
WANDB_RUN_ENV = {"name": "WANDB_NAME", "job_type": "WANDB_JOB_TYPE", "id": "WANDB_RUN_ID"}
_WANDB_MODES = {"online": "online", "run": "online", "offline": "offline", "dryrun": "offline", "disabled": "disabled"}  # fmt: skip


def logger_settings(cfg) -> dict[str, Any]:
    """``cfg.logger`` with W&B's conventions: a ``WANDB_*`` variable the user set wins over the
    config's default, a ``logger.*`` key given on the command line wins over both."""
    from hydra.core.hydra_config import HydraConfig

    given: set[str] = set()
    for o in HydraConfig.get().overrides.task if HydraConfig.initialized() else []:
        key = o.lstrip("+~").split("=", 1)[0]
        if key == "logger" and o.startswith("~"):  # ~logger: no logger at all
            return {**{k: None for k in WANDB_ENV}, "mode": "disabled", "tags": []}
        if key == "logger":
            given |= set(WANDB_ENV)
        elif key.startswith("logger."):
            given.add(key.split(".")[1])
    settings = {key: cfg.logger.get(key) for key in WANDB_ENV}
    settings["mode"] = str(getattr(settings["mode"], "value", settings["mode"]))
    settings["tags"] = list(settings["tags"] or [])
    for key, var in WANDB_ENV.items():
        value = os.environ.get(var)
        if key not in given and value:
            settings[key] = [t for t in value.split(",") if t] if key == "tags" else value
    if settings["mode"] not in _WANDB_MODES:
        raise ConfigError(
            f"WANDB_MODE={settings['mode']} is not a W&B mode: online, offline or disabled"
        )
    settings["mode"] = _WANDB_MODES[settings["mode"]]
    return settings


def open_run_log(
    cfg, out_dir: Path, *, name: str, setup: str, seed: Any, resume_step: int | None
) -> RunLog:
    """The run's :class:`RunLog`, W&B set from :func:`logger_settings`: grouped by study and
    dataset, named ``name``, its job type the setup, tagged with study, setup and dataset, and its
    config the resolved config with this run's own seed (a list of seeds trains one W&B run per
    seed). ``WANDB_NAME``, ``WANDB_JOB_TYPE`` and ``WANDB_RUN_ID``, when set, win over the name,
    the job type and the run's id (:data:`WANDB_RUN_ENV`); ``WANDB_RUN_ID`` names one W&B run,
    so it is refused for a list of seeds or a sweep's job."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from experiments.kit.config import require, seed_list
    from experiments.kit.jobs import in_sweep

    study = HydraConfig.get().job.name if HydraConfig.initialized() else "run"
    data = cfg.data.name if "data" in cfg else None
    settings = logger_settings(cfg)
    if (run_id := os.environ.get(WANDB_RUN_ENV["id"])) and settings["mode"] != "disabled":
        seeds = len(seed_list(cfg.get("seed", 0)))
        why = f"WANDB_RUN_ID={run_id} names one W&B run: unset it to let"
        require(
            [
                (seeds == 1, f"{why} seed={cfg.seed} start {seeds} (one per seed)"),
                (not in_sweep(), f"{why} each job of the sweep start its own"),
            ]
        )
    config = OmegaConf.to_container(cfg, resolve=True)
    config.update(seed=seed, study=study, setup=setup)
    defaults = [t for t in (study, setup, data) if t]
    return RunLog(
        out_dir,
        mode=settings["mode"],
        resume_step=resume_step,
        wandb_dir=settings["dir"],
        wandb_kwargs=dict(
            project=settings["project"],
            entity=settings["entity"],
            group=settings["group"] or "-".join(t for t in (study, data) if t),
            name=os.environ.get(WANDB_RUN_ENV["name"]) or name,
            job_type=os.environ.get(WANDB_RUN_ENV["job_type"]) or setup,
            tags=list(dict.fromkeys([*defaults, *settings["tags"]])),
            config=config,
        ),
    )
