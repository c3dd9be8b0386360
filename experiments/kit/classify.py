"""The classification skeleton of the image studies (Batch Renorm, BN-Inception), written once:
the process set-up, step-addressed batches, one SGD-style step, the accuracy evaluation, and the
:class:`~experiments.kit.loop.TrainLoop` that runs them for one seed.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from experiments.kit import distributed
from experiments.kit.config import setup_name
from experiments.kit.data import fixed_batches
from experiments.kit.evaluation import accuracy, to_device
from experiments.kit.jobs import job_command
from experiments.kit.loop import Run, TrainLoop
from experiments.kit.runlog import read_curve
from experiments.kit.stopping import StopRule


@dataclass
class Process:
    """Where this process trains: its rank among ``world`` processes, device and memory format."""

    rank: int
    world: int
    device: torch.device
    memory_format: torch.memory_format
    autocast: Callable[[], contextlib.AbstractContextManager]


def start_process(cfg: DictConfig, out_dir: Path, amp: bool = False) -> Process:
    """Threads, the process group under ``torchrun``, the device, and the run directory."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rank, world, device = distributed.setup(cfg.device)
    out_dir.mkdir(parents=True, exist_ok=True)
    use_amp = amp and device.type == "cuda"

    def autocast() -> contextlib.AbstractContextManager:
        return torch.autocast("cuda", torch.bfloat16) if use_amp else contextlib.nullcontext()

    fmt = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
    return Process(rank, world, device, fmt, autocast)


def classifier_loop(
    cfg: DictConfig,
    proc: Process,
    out_dir: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    sampler,
    splits: tuple,
    study: str,
    summary: dict,
    transform: Callable[[int, Tensor], Tensor] | None = None,
    step_extra: Callable[[int], dict[str, float]] | None = None,
    eval_extra: Callable[[], dict[str, float]] | None = None,
) -> TrainLoop:
    """One seed's :class:`TrainLoop` for a classifier trained with cross-entropy.

    ``sampler.indices(step)`` gives each step's examples; ``transform(step, x)`` augments a batch
    on the device; ``step_extra(step)`` and ``eval_extra()`` add a study's own scalars to a step
    and to an evaluation. The run is named ``<setup>-s<seed>``; its summary starts as ``summary``
    plus the keys every study records. ``train.stop`` may end it before ``train.steps``."""
    train_split = splits[0]
    net = distributed.wrap(model, proc.device)
    params = [p for p in model.parameters() if p.requires_grad]
    setup = setup_name()
    run = Run(
        name=f"{setup}-s{cfg.seed}",
        out_dir=out_dir,
        summary={
            "name": f"{setup}-s{cfg.seed}",
            "setup": setup,
            "seed": cfg.seed,
            "data": str(cfg.data.name),
            "norm": str(cfg.norm.kind),
            "steps": cfg.train.steps,
            "world_size": proc.world,
            "eval_every": cfg.eval.every,
            "test_subset": cfg.eval.test_subset,
            "command": job_command(f"experiments.{study}"),
            **summary,
        },
    )

    def batches(start: int):
        steps = (sampler.indices(s) for s in itertools.count(start))
        return train_split.batches(steps, seed=cfg.seed * 64 + proc.rank, first_step=start)

    def step_fn(step: int, batch) -> dict[str, float]:
        x, y = to_device(batch, proc.device, proc.memory_format)
        if transform is not None:
            x = transform(step, x)
        with proc.autocast():
            logits = net(x)
        loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.train.grad_clip:
            nn.utils.clip_grad_norm_(params, cfg.train.grad_clip)
        optimizer.step()
        out = {"loss": loss.item(), "acc_minibatch": (logits.argmax(1) == y).float().mean().item()}
        return out if step_extra is None else {**out, **step_extra(step)}

    evaluate, final_evaluate = accuracy_evaluation(cfg, proc, model, optimizer, splits, eval_extra)
    s = cfg.train.stop
    rule = StopRule(
        "test/acc_subset" if cfg.eval.test_subset else "test/acc", s.target, s.plateau, s.min_steps
    )

    def stop(step: int, evals: list[dict[str, float]]) -> str | None:
        if rule.curve is None and proc.rank == 0:  # resumed from a checkpoint without its curve
            rule.curve = [
                (s, v) for s, v in read_curve(out_dir / "metrics.csv", rule.metric) if s < step
            ]
        return distributed.from_rank0(rule.update(step, evals[0]) if proc.rank == 0 else None)

    return TrainLoop(
        model=model,
        runs=[run],
        batches=batches,
        step_fn=step_fn,
        evaluate=evaluate,
        final_evaluate=final_evaluate,
        stop=stop if rule.active else None,
        state=(rule.state, rule.load) if rule.active else None,
        steps=cfg.train.steps,
        eval_every=cfg.eval.every,
        ckpt_dir=out_dir,
        batch_size=cfg.train.batch_size * proc.world,
        optimizer=optimizer,
        scheduler=scheduler,
    )


def accuracy_evaluation(cfg, proc: Process, model, optimizer, splits, extra=None):
    """``(evaluate, final_evaluate)``. ``evaluate(step)``: ``test/acc`` on the test split (or,
    with ``eval.test_subset``, ``test/acc_subset`` on that many fixed test examples),
    ``train/acc`` on the first ``eval.train_subset`` training examples (inference mode), the
    study's ``extra`` metrics and the learning rate. ``final_evaluate()``: ``test/acc`` on the
    whole test split when the evaluations measured a subset, else ``None``. Only rank 0
    evaluates."""
    train_split, test_split = splits
    e = cfg.eval
    args = (proc.device, proc.memory_format)
    test_key = "test/acc_subset" if e.test_subset else "test/acc"
    test_batches = fixed_batches(test_split, e.batch_size, e.test_subset or None)
    train_batches = (
        fixed_batches(train_split, e.batch_size, e.train_subset) if e.train_subset else []
    )

    def evaluate(step: int) -> dict[str, float]:
        if proc.rank != 0:
            return {}
        with proc.autocast():
            metrics = {test_key: accuracy(model, test_split.batches(test_batches), *args)}
            if train_batches:
                metrics["train/acc"] = accuracy(model, train_split.batches(train_batches), *args)
        if extra is not None:
            metrics.update(extra())
        metrics["lr"] = optimizer.param_groups[0]["lr"]
        return metrics

    def final_evaluate() -> dict[str, float]:
        if proc.rank != 0:
            return {}
        batches = test_split.batches(fixed_batches(test_split, e.batch_size))
        with proc.autocast():
            return {"test/acc": accuracy(model, batches, *args)}

    return evaluate, (final_evaluate if e.test_subset else None)


def finish(loop: TrainLoop, result) -> dict:
    """The run's summary (written to ``summary.json`` by rank 0), with its throughput."""
    loop.runs[0].summary["examples_per_s"] = result.examples_per_s
    [summary] = loop.finish(result)
    distributed.cleanup()
    return summary
