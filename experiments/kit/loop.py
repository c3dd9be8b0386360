"""The one training loop of every study: steps, periodic evaluation, checkpoints, exact resume,
per-network divergence, and a progress bar.

A loop trains ``K >= 1`` networks in lockstep (the MNIST study stacks its seeds into one model):
each has its own :class:`Run` (directory, ``metrics.csv``, ``summary.json``), its own loss and its
own divergence. A study supplies what differs: the batch of step ``s`` (step-addressed, so a
resumed run needs no sampler state), one optimization step, and what an evaluation measures.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from hydra.core.hydra_config import HydraConfig
from torch import nn
from tqdm import tqdm

from bn import compiled as bn_compiled
from experiments.kit.config import resume_safe
from experiments.kit.distributed import any_rank, every_rank, rank_and_world
from experiments.kit.errors import ConfigError
from experiments.kit.files import refuse_link
from experiments.kit.identity import check_same_run, comparable_config, flat_config
from experiments.kit.norm import resume_fixed
from experiments.kit.runlog import (
    RunDirLock,
    RunLog,
    code_changes,
    cpu_capability,
    git_commit,
    load_checkpoint,
    move_aside,
    open_run_log,
    read_metrics,
    save_checkpoint,
    write_json,
    write_settings,
)

Scalars = dict[str, "float | list[float] | None"]


class Training(Protocol):
    """What a study hands :class:`TrainLoop`: its run as an object whose methods read top to
    bottom, one per thing the loop asks of it.

    Required:
        batches(start): the batches of steps ``start, start + 1, ...`` (step-addressed, so a
            resumed run needs no sampler state).
        step(step, batch): one optimization step; returns scalars, each a number (one network)
            or a list with one number per run; ``"loss"`` is required. Each is averaged over the
            steps since the last evaluation and logged as ``train/<name>`` (or ``<name>`` if it
            has a ``/``); ``None`` is skipped.
        evaluate(step): a dict of metrics per run (a list), or one dict.

    Optional, found by name:
        final_evaluate(): the end-of-run numbers (e.g. the full test set; None: none) that
            :meth:`TrainLoop.finish` adds when it is given none.
        stop(step, evals): after every evaluation (``evals``: one dict per run), a reason to end
            the run before ``steps``, or ``None``; the reason is kept in each summary.
        summarize(logged): the study's own summary keys from a run's logged metrics
            (``{metric: [values]}``), e.g. a classifier's best test accuracy.
        state_dict(), load_state_dict(state): the study's own state, checkpointed with the
            model (e.g. a probe's history); ``load_state_dict`` gets what ``state_dict``
            returned, ``None`` included.
    """

    def batches(self, start: int) -> Iterator[Any]: ...

    def step(self, step: int, batch: Any) -> Scalars: ...

    def evaluate(self, step: int) -> list[dict[str, float]] | dict[str, float]: ...


@dataclass
class Run:
    """One network's run: its name, directory, log and summary."""

    name: str
    out_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)
    log: RunLog | None = None
    diverged_at_step: int | None = None
    last_eval: dict[str, float] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def alive(self) -> bool:
        return self.diverged_at_step is None

    def add(self, name: str, value: float) -> None:
        self.sums[name] += value
        self.counts[name] += 1

    def take_means(self) -> dict[str, float]:
        """The ``train/...`` averages since the last evaluation, then a fresh start."""
        means = {_train_key(k): self.sums[k] / self.counts[k] for k in self.sums}
        self.sums.clear()
        self.counts.clear()
        return means


@dataclass
class LoopResult:
    """How a loop ended: the last step done and the throughput (evaluations included)."""

    step: int
    steps_per_s: float | None = None
    examples_per_s: float | None = None


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def own_rng_state(saved: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    """This process's generator states from a checkpoint's ``rng``: one entry per process, by
    rank."""
    rank, world = rank_and_world()
    if len(saved) != world:
        raise ConfigError(
            f"{path} was written by {len(saved)} process(es) and this run has {world}: resume "
            f"it with {len(saved)} processes in all"
        )
    return saved[rank]


class TrainLoop:
    """Runs ``training.step`` for steps ``start..steps-1`` and ``training.evaluate`` every
    ``eval_every`` steps.

    Args:
        model: the network (checkpointed; pass the unwrapped module).
        runs: one :class:`Run` per network trained in lockstep.
        training: the study's run, a :class:`Training`.
        steps, eval_every: the run's length and evaluation interval.
        ckpt_dir: holds ``checkpoint.pt``, written after each evaluation by the logging process
            with every process's generator state (so under ``torchrun`` each process checkpoints,
            and decides divergence, in step with the others).
        batch_size: examples per step per run (for examples/s).
        optimizer, scheduler: checkpointed with the model when given.
        job_name: the progress bar's label.
        checkpoint_every: write the checkpoint (and collect cycles) only after an evaluation at
            least this many steps after the last checkpoint, and after the last one; ``None``:
            after every evaluation. A resume goes back to the last checkpoint (the rows logged
            after it are logged again), so a run evaluated every step need not write its
            networks to disk every step.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        runs: list[Run],
        training: Training,
        steps: int,
        eval_every: int,
        ckpt_dir: Path,
        batch_size: int,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        job_name: str | None = None,
        checkpoint_every: int | None = None,
    ) -> None:
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(f"checkpoint_every={checkpoint_every} must be at least 1 (or None)")
        self.model, self.runs, self.optimizer, self.scheduler = model, runs, optimizer, scheduler
        if hasattr(training, "state_dict") != hasattr(training, "load_state_dict"):
            raise TypeError(
                f"{type(training).__name__}: define state_dict and load_state_dict together (a "
                "state saved but never restored would make a resumed run inexact)"
            )
        self.training = training
        self.steps, self.eval_every, self.batch_size = steps, eval_every, batch_size
        self.checkpoint_every = checkpoint_every
        self.checkpointed_at = 0  # the step of the last checkpoint written (or resumed from)
        self.ckpt_path = ckpt_dir / "checkpoint.pt"
        self.stopped: str | None = None
        self.job_name = job_name or runs[0].name
        self.writes_log = False
        self.lock: RunDirLock | None = None
        self.config: dict[str, Any] = {}
        self.resume_safe: tuple[str, ...] = ()
        self.step = 0
        self.unchanged_from: int | None = None  # the checkpoint's step, resumed with no change
        self.commit: str | None = None
        self.code_changes: str | None = None

    # -- checkpoint and resume ----------------------------------------------------------------
    def start(self, cfg, *, writes_log: bool = True) -> None:
        """Resume from ``checkpoint.pt`` when ``cfg.resume`` is set, then open every run's log
        (``metrics.csv``, W&B) on the process that ``writes_log`` (rank 0 of a distributed run).
        That process holds the run directory's lock until :meth:`finish`."""
        self.writes_log, self.config = writes_log, flat_config(cfg)
        self.resume_safe = resume_safe(cfg)
        self.commit = git_commit()  # the code that runs (HEAD may move before the run ends)
        self.code_changes = code_changes()  # and whether it is the commit's
        try:
            if writes_log:
                self.lock = RunDirLock(self.ckpt_path.parent)
                self._refuse_links()
                if not (cfg.resume or cfg.overwrite):
                    self._refuse_overwrite()
            resumed = cfg.resume and self._resume()
            if cfg.resume and not resumed and writes_log:
                tqdm.write(
                    f"{self.job_name}: resume=true but {self.ckpt_path} does not exist: starting at step 0"
                )
            if writes_log:  # every check has passed: only now is the run directory written
                self._record_settings(cfg, resumed)
            for run in self.runs if writes_log else []:
                run.log = open_run_log(
                    cfg,
                    run.out_dir,
                    name=run.name,
                    setup=run.summary.get("setup", run.name),
                    seed=run.summary.get("seed", cfg.get("seed")),
                    resume_step=self.step if resumed else None,
                )
        except BaseException:
            self._release()
            raise

    def _record_settings(self, cfg, resumed: bool) -> None:
        """``overwrite=true`` moves an earlier run aside; then the settings are written to
        ``.hydra/`` (a resumed run's to ``.hydra/resumed_at_step_<N>/``, the first kept)."""
        run_dir = self.ckpt_path.parent
        if cfg.overwrite and not resumed:
            keep = {self.lock.path.name} if self.lock is not None else set()
            if HydraConfig.initialized():  # Hydra's log of this job, open for writing
                keep.add(f"{HydraConfig.get().job.name}.log")
            moved = move_aside(run_dir, keep)
            if moved is not None:
                tqdm.write(f"{self.job_name}: overwrite=true: the earlier run is now in {moved}")
                for run in self.runs:
                    run.out_dir.mkdir(parents=True, exist_ok=True)
        settings = run_dir / ".hydra"
        write_settings(settings / f"resumed_at_step_{self.step}" if resumed else settings, cfg)

    def _refuse_links(self) -> None:
        """Refuse, before any training, a symbolic link planted under a name the run will write
        or read (each write refuses it too, but only when it comes: hours in, for a summary)."""
        names = ("metrics.csv", "metrics.tmp", "summary.json", "summary.tmp", "wandb_id.txt")
        for path in [self.ckpt_path, self.ckpt_path.with_suffix(".tmp")] + [
            run.out_dir / name for run in self.runs for name in names
        ]:
            refuse_link(path)

    def _refuse_overwrite(self) -> None:
        written = [self.ckpt_path] + [
            run.out_dir / name for run in self.runs for name in ("metrics.csv", "summary.json")
        ]
        found = [p for p in written if p.exists()]
        if found:
            raise ConfigError(
                f"{found[0].parent} already holds a run ({found[0].name}); continue it with "
                "resume=true, replace it with overwrite=true, or use another hydra.run.dir"
            )

    def _resume(self) -> bool:
        if not (self.ckpt_path.exists() or self.ckpt_path.is_symlink()):
            return False
        ckpt = load_checkpoint(self.ckpt_path)
        saved = ckpt.get("config", {})
        changed = check_same_run(
            self.ckpt_path, saved, self.config, self.resume_safe, fixed=resume_fixed(saved)
        )
        first_commands = ckpt.get("commands") or []
        for run, first in zip(self.runs, first_commands):
            if first and first != run.summary.get("command"):  # keep both
                run.summary["resumed_with_command"] = run.summary.get("command")
                run.summary["command"] = first
        if changed:
            tqdm.write(
                f"{self.job_name}: resumed with "
                + ", ".join(f"{k}={v[1]} (was {v[0]})" for k, v in changed.items())
            )
            for run in self.runs:
                run.summary["resumed_with"] = {**run.summary.get("resumed_with", {}), **changed}
        self.model.load_state_dict(ckpt["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(own_rng_state(ckpt["rng"], self.ckpt_path))
        for run, diverged_at in zip(self.runs, ckpt["diverged_at_step"]):
            run.diverged_at_step = diverged_at
        if hasattr(self.training, "load_state_dict"):
            self.training.load_state_dict(ckpt["study"])
        self.step = self.checkpointed_at = ckpt["step"]
        self.unchanged_from = None if changed else self.step
        if not any(key.startswith("train.stop.") for key in changed):  # a new rule may go on
            self.stopped = ckpt.get("stopped")
        for run, last in zip(self.runs, ckpt.get("last_eval") or [{}] * len(self.runs)):
            run.last_eval = dict(last)  # what the summary reports, if no evaluation follows
        first = ckpt.get("commit")
        if first and first != self.commit:
            for run in self.runs:
                run.summary["resumed_at_commit"] = self.commit
            self.commit = first
        earlier = ckpt.get("code_changes")
        if earlier != self.code_changes:  # uncommitted code in one part of the run or the other
            for run in self.runs:
                run.summary["code_changes_at_resume"] = self.code_changes
            self.code_changes = earlier or self.code_changes
        return True

    def checkpoint(self) -> None:
        rng = every_rank(rng_state())  # each process's own: dropout masks differ by rank
        if not self.writes_log:  # one process writes
            return
        for run in self.runs:
            if run.log is not None:
                run.log.sync()
        save_checkpoint(
            self.ckpt_path,
            {
                "model": self.model.state_dict(),
                "optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
                "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                "rng": rng,
                "step": self.step,
                "diverged_at_step": [run.diverged_at_step for run in self.runs],
                "study": self.training.state_dict()
                if hasattr(self.training, "state_dict")
                else None,
                "stopped": self.stopped,
                "last_eval": [run.last_eval for run in self.runs],
                "commit": self.commit,
                "code_changes": self.code_changes,
                "commands": [run.summary.get("command") for run in self.runs],
                "config": self.config,
            },
        )

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> LoopResult:
        if self.step == 0:  # the networks at initialisation: the start of every curve
            self._evaluate_and_log(with_train=False)
        t0, step0 = time.perf_counter(), self.step
        bar = tqdm(
            total=self.steps,
            initial=self.step,
            desc=self.job_name,
            unit="step",
            mininterval=2,
            dynamic_ncols=True,
            disable=None if self.writes_log else True,
        )
        batches = self.training.batches(self.step)
        stop = getattr(self.training, "stop", None)
        # Everything built so far (modules, data, the imported libraries) lives for the whole
        # run: frozen, the collector stops re-scanning it. Between evaluations the automatic
        # collections are off (a step's objects die by reference count) and one collection at
        # each evaluation frees any cycles. For the Figure 1 MLP, whose step is ~0.5 ms, the
        # freeze saved 10% of the run and the pause another ~3% (alternated runs).
        gc.collect()
        gc.freeze()
        collecting = gc.isenabled()
        gc.disable()
        try:
            while (
                self.step < self.steps and any(run.alive for run in self.runs) and not self.stopped
            ):
                scalars = self.training.step(self.step, next(batches))
                if self.scheduler is not None:
                    self.scheduler.step()
                self.step += 1
                self._record(scalars)
                bar.update(1)
                if self.step % self.eval_every == 0 or self.step == self.steps:
                    evals = self._evaluate_and_log(with_train=True)
                    bar.set_postfix(self._postfix(t0, step0))
                    self.stopped = stop(self.step, evals) if stop else None
                    if self._checkpoint_due():
                        self.checkpoint()
                        self.checkpointed_at = self.step
                        gc.collect()
                    if self.stopped:
                        break
        except BaseException:
            self._release()  # a killed run leaves its directory free for the resume
            raise
        finally:
            bar.close()
            gc.unfreeze()
            if collecting:
                gc.enable()
        return self._result(time.perf_counter() - t0, step0)

    def _checkpoint_due(self) -> bool:
        """After this evaluation: the last one, a stopped run, or ``checkpoint_every`` steps on."""
        if self.checkpoint_every is None or self.step >= self.steps or self.stopped:
            return True
        return self.step - self.checkpointed_at >= self.checkpoint_every

    def _record(self, scalars: Scalars) -> None:
        """Each live run's scalars of this step; a non-finite loss marks its run diverged (in
        every process when it is non-finite in any: they stop at the same step)."""
        per_run = {
            k: v if isinstance(v, list) else [v] * len(self.runs) for k, v in scalars.items()
        }
        diverged = any_rank([not math.isfinite(loss) for loss in per_run["loss"]])
        for k, run in enumerate(self.runs):
            if not run.alive:
                continue  # its network trains on, isolated from the others, and is ignored
            loss = per_run["loss"][k]
            if diverged[k]:
                run.diverged_at_step = self.step
                if run.log is not None:
                    run.log.log(self.step, {"train/loss": loss})
                    seen = loss if not math.isfinite(loss) else "not finite in another process"
                    tqdm.write(
                        f"{run.name}: loss is {seen} at step {self.step}: the run diverged (lower "
                        "the learning rate or the initial weights); stopping it, earlier results are kept"
                    )
                continue
            for name, values in per_run.items():
                if values[k] is not None:
                    run.add(name, values[k])

    def _evaluate_and_log(self, with_train: bool) -> list[dict[str, float]]:
        evals = self.training.evaluate(self.step)
        evals = evals if isinstance(evals, list) else [evals] * len(self.runs)
        for run, metrics in zip(self.runs, evals):
            if not run.alive:
                continue
            run.last_eval = metrics
            if run.log is not None:
                run.log.log(self.step, {**metrics, **(run.take_means() if with_train else {})})
        return evals

    def _postfix(self, t0: float, step0: int) -> dict[str, str]:
        live = [run for run in self.runs if run.alive]
        keys = [k for k in (live[0].last_eval if live else {}) if "acc" in k]
        postfix = {k: "/".join(f"{run.last_eval[k]:.4f}" for run in live) for k in keys}
        rate = (self.step - step0) * self.batch_size / (time.perf_counter() - t0)
        postfix["ex/s"] = f"{rate:.0f}"
        return postfix

    def _result(self, elapsed: float, step0: int) -> LoopResult:
        result = LoopResult(step=self.step)
        if elapsed > 0 and self.step > step0:
            result.steps_per_s = round((self.step - step0) / elapsed, 2)
            result.examples_per_s = round(result.steps_per_s * self.batch_size, 1)
        return result

    # -- the end ------------------------------------------------------------------------------
    def finish(
        self, result: LoopResult, finals: list[dict[str, float]] | None = None
    ) -> list[dict]:
        """Complete every run's summary (how it ended, the commit, its last evaluation as
        ``test_acc``, ..., and ``finals``: the study's end-of-run numbers per run, also logged at
        the last step), close the logs and write each ``summary.json``. Returns the summaries."""
        commit, capability = self.commit or git_commit(), cpu_capability()
        kernels = bn_compiled.used()
        final_evaluate = getattr(self.training, "final_evaluate", None)
        if finals is None and final_evaluate is not None:
            finals = final_evaluate()  # None: nothing beyond the last evaluation
            if finals is not None and not isinstance(finals, list):
                finals = [finals] * len(self.runs)
        for k, run in enumerate(self.runs):
            if (kept := self._kept_summary(run, result)) is not None:
                run.summary = kept
                if run.log is not None:
                    run.log.close()
                continue
            s = run.summary
            s.update(steps_done=run.diverged_at_step or result.step, diverged=not run.alive)
            s.update(git_commit=commit, cpu_capability=capability, steps_per_s=result.steps_per_s)
            s["compiled_kernels"] = kernels
            s.update(git_dirty=self.code_changes is not None, code_changes=self.code_changes)
            # what collection compares across seeds
            s["config"] = comparable_config(self.config, self.resume_safe)
            if self.stopped:
                s["stopped"] = self.stopped
            if not run.alive:
                s["diverged_at_step"] = run.diverged_at_step
            else:
                s.update({key.replace("/", "_"): v for key, v in run.last_eval.items()})
                if finals:
                    s.update({key.replace("/", "_"): v for key, v in finals[k].items()})
            if run.log is None:
                continue
            if run.alive and finals and finals[k]:
                run.log.log(result.step, finals[k])
            logged = read_metrics(run.log.path)
            s["final_train_loss"] = (logged["train/loss"] or [None])[-1]
            if (summarize := getattr(self.training, "summarize", None)) is not None:
                s.update(summarize(logged))
            run.log.close()
            write_json(run.out_dir / "summary.json", s)
        self._release()
        return [run.summary for run in self.runs]

    def _kept_summary(self, run: Run, result: LoopResult) -> dict | None:
        """The ``summary.json`` of a run that ``resume=true`` found finished (no step left to do,
        no setting changed), kept as it is: rewritten, it would lose its throughput (no step
        ran) and its record of the compiled kernels. A sweep resumed as a whole (an interrupted
        ``scripts.reproduce``) passes over its finished runs so."""
        if not self.writes_log or self.unchanged_from != result.step:
            return None
        try:
            return json.loads((run.out_dir / "summary.json").read_text())
        except (OSError, ValueError):  # none (killed before it was written), or unreadable
            return None

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def _train_key(name: str) -> str:
    return name if "/" in name else f"train/{name}"
