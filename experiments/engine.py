"""The training loop shared by the studies: steps, periodic evaluation, checkpoints, exact resume,
a clean stop on a diverging loss, and a progress bar.

A study supplies what differs: how batch ``step`` is made (step-addressed, so resuming needs no
sampler state), what one optimization step does, and what an evaluation measures.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from experiments.runlog import (
    RunLog,
    git_commit,
    open_run_log,
    read_metric,
    save_checkpoint,
    write_json,
)


@dataclass
class LoopResult:
    """How a loop ended: the last step done, whether the loss diverged, and the throughput."""

    step: int
    diverged: bool = False
    diverged_at_step: int | None = None
    steps_per_s: float | None = None
    examples_per_s: float | None = None
    last_eval: dict[str, float] = field(default_factory=dict)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class TrainLoop:
    """Runs ``step_fn`` for steps ``start..steps-1`` and ``evaluate`` every ``eval_every`` steps.

    Args:
        model: the network (its ``state_dict`` is checkpointed; pass the unwrapped module).
        optimizer: checkpointed with the model; ``scheduler`` likewise when given.
        batches: ``batches(start)`` yields the batches of steps ``start, start + 1, ...``.
        step_fn: ``step_fn(step, batch) -> dict`` does one optimization step and returns
            scalars (must include ``"loss"``); each is averaged over the steps that reported it
            since the last evaluation and logged as ``train/<name>`` (or as ``<name>`` when the
            name has a ``/``). A value of ``None`` is skipped.
        evaluate: ``evaluate(step) -> dict`` of metrics logged as they are (e.g. ``test/acc``).
        log: where metrics go; ``None`` on non-zero ranks of a distributed run.
        out_dir: holds ``checkpoint.pt`` (written after each evaluation on rank 0).
        batch_size: examples per step (for the progress bar's examples/s).
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: Callable[[int], Iterator[Any]],
        step_fn: Callable[[int, Any], dict[str, float | None]],
        evaluate: Callable[[int], dict[str, float]],
        steps: int,
        eval_every: int,
        out_dir: Path,
        log: RunLog | None,
        name: str,
        batch_size: int,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    ) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.batches, self.step_fn, self.evaluate = batches, step_fn, evaluate
        self.steps, self.eval_every = steps, eval_every
        self.ckpt_path = out_dir / "checkpoint.pt"
        self.log, self.name, self.batch_size = log, name, batch_size
        self.step = 0

    def resume(self) -> bool:
        """Load ``checkpoint.pt`` if there is one; True when it did."""
        if not self.ckpt_path.exists():
            return False
        ckpt = torch.load(self.ckpt_path, map_location="cpu", weights_only=False)
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        self.step = ckpt["step"]
        return True

    def start(self, cfg, *, job_type: str, writes_log: bool) -> None:
        """Resume from ``checkpoint.pt`` when ``cfg.resume`` is set, then open the run's log
        (``metrics.csv``, W&B) on the process that ``writes_log`` (rank 0 of a distributed run)."""
        resumed = cfg.resume and self.resume()
        if writes_log:
            self.log = open_run_log(
                cfg,
                self.ckpt_path.parent,
                name=self.name,
                job_type=job_type,
                resume_step=self.step if resumed else None,
            )

    def checkpoint(self) -> None:
        if self.log is None:  # only rank 0 writes
            return
        save_checkpoint(
            self.ckpt_path,
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                "rng": rng_state(),
                "step": self.step,
            },
        )

    def _log(self, metrics: dict[str, float]) -> None:
        if self.log is not None:
            self.log.log(self.step, metrics)

    def run(self) -> LoopResult:
        result = LoopResult(step=self.step)
        if self.step == 0:
            result.last_eval = self.evaluate(0)
            self._log(result.last_eval)
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        t0, step0 = time.perf_counter(), self.step
        bar = tqdm(
            total=self.steps,
            initial=self.step,
            desc=self.name,
            unit="step",
            mininterval=2,
            dynamic_ncols=True,
            disable=None if self.log is not None else True,
        )
        batches = self.batches(self.step)
        try:
            while self.step < self.steps:
                scalars = self.step_fn(self.step, next(batches))
                if self.scheduler is not None:
                    self.scheduler.step()
                self.step += 1
                loss = scalars["loss"]
                if not math.isfinite(loss):
                    result.diverged, result.diverged_at_step = True, self.step
                    self._log({"train/loss": loss})
                    tqdm.write(
                        f"{self.name}: loss is {loss} at step {self.step}: the run diverged "
                        "(lower the learning rate); stopping it, earlier results are kept"
                    )
                    break
                for k, v in scalars.items():
                    if v is not None:
                        sums[k] += v
                        counts[k] += 1
                bar.update(1)
                if self.step % self.eval_every == 0 or self.step == self.steps:
                    result.last_eval = self.evaluate(self.step)
                    train = {_train_key(k): sums[k] / counts[k] for k in sums}
                    self._log({**result.last_eval, **train})
                    sums.clear()
                    counts.clear()
                    elapsed = time.perf_counter() - t0
                    postfix = {k: f"{v:.4f}" for k, v in result.last_eval.items() if "acc" in k}
                    postfix["ex/s"] = f"{(self.step - step0) * self.batch_size / elapsed:.0f}"
                    bar.set_postfix(postfix)
                    self.checkpoint()
        finally:
            bar.close()
        elapsed = time.perf_counter() - t0
        result.step = self.step
        if elapsed > 0 and self.step > step0:
            result.steps_per_s = round((self.step - step0) / elapsed, 2)
            result.examples_per_s = round(result.steps_per_s * self.batch_size, 1)
        return result

    def finish(self, result: LoopResult, summary: dict[str, Any]) -> dict[str, Any]:
        """Complete a run's ``summary`` with how the loop ended, the git commit and the last
        evaluation (as ``test_acc``, ...); on the logging process also the best ``test/acc``,
        then close the log and write ``summary.json`` next to the checkpoint."""
        summary.update(steps_done=result.step, diverged=result.diverged, git_commit=git_commit())
        if result.diverged:
            summary["diverged_at_step"] = result.diverged_at_step
        else:
            summary.update({k.replace("/", "_"): v for k, v in result.last_eval.items()})
        if self.log is not None:
            summary["max_test_acc"] = max(read_metric(self.log.path, "test/acc"), default=None)
            self.log.close()
            write_json(self.ckpt_path.parent / "summary.json", summary)
        return summary


def _train_key(name: str) -> str:
    return name if "/" in name else f"train/{name}"
