"""The classification skeleton of the image studies (Batch Renorm, BN-Inception), written once:
the process set-up, step-addressed batches, one SGD-style step, the accuracy evaluation, and the
:class:`~experiments.kit.loop.TrainLoop` that runs them for one seed.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from experiments.kit import distributed
from experiments.kit.config import require, seed_dirs, seed_list, setup_name
from experiments.kit.data import fixed_batches
from experiments.kit.evaluation import best_accuracies, copy_accuracies, to_device
from experiments.kit.loop import Run, TrainLoop
from experiments.kit.run_summary import new_run, run_name
from experiments.kit.runlog import read_curve
from experiments.kit.seeds import derive_seed
from experiments.kit.stopping import StopRule
from experiments.nets.stacked import copy_losses, copy_views, split_copies, stack_copies


@dataclass
class Process:
    """Where this process trains: its rank among ``world`` processes, device, memory format and
    run directory."""

    rank: int
    world: int
    device: torch.device
    memory_format: torch.memory_format
    autocast: Callable[[], contextlib.AbstractContextManager]
    out_dir: Path


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
    return Process(rank, world, device, fmt, autocast, out_dir)


@dataclass
class Classifier:
    """What trains: the network, its optimizer and its learning-rate schedule. For seeds side by
    side ``model`` stacks one copy per seed (:func:`experiments.nets.stacked.stack_copies`) and
    ``copies`` are its copies as plain networks (:func:`~experiments.nets.stacked.copy_views`),
    which the evaluations run."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    copies: Sequence[nn.Module] | None = None


def build_copies(
    seed,
    build: Callable[[], nn.Module],
    device: torch.device,
    memory_format: torch.memory_format,
) -> tuple[nn.Module, list[nn.Module]]:
    """``(model, copies)`` for ``cfg.seed`` (``seed``): for one seed the network ``build()``
    makes after ``torch.manual_seed(seed)``, and ``[model]``; for a list of seeds the stack of
    their networks (:func:`~experiments.nets.stacked.stack_copies`, each built as its seed alone
    would build it) and each copy as a plain network whose tensors are views of its block of the
    stack (:func:`~experiments.nets.stacked.copy_views`: what the evaluations run)."""
    models = []
    for s in seed_list(seed):
        torch.manual_seed(s)
        models.append(build())
    if isinstance(seed, int):
        model = models[0].to(device, memory_format=memory_format)
        return model, [model]
    stack = stack_copies(models).to(device, memory_format=memory_format)
    return stack, copy_views(stack, models)


class ClassifierStep:
    """A study's own part of its classifier's steps and evaluations. The kit's methods add
    nothing; a study overrides those it needs."""

    # True: :meth:`augment` takes a stack's batch, ``(N, K·C, ...)``, and augments each copy's
    # channels as that copy's own; a stack of seeds refuses a step that augments without it.
    augments_stacks = False

    def augment(self, step: int, x: Tensor) -> Tensor:
        """Step ``step``'s batch ``x``, augmented on the device (for a stack of seeds, only
        with :attr:`augments_stacks`)."""
        return x

    def step_metrics(self, step: int) -> dict[str, Any]:
        """The study's scalars of step ``step`` (for a stack, each a value or a list with one
        per copy), logged as the loss is."""
        return {}

    def eval_metrics(self) -> dict[str, Any]:
        """The study's metrics of an evaluation (for a stack, each a value or a list with one
        per copy)."""
        return {}

    def record_loss(self, step: int, losses: list[float]) -> None:
        """Step ``step``'s training loss, one per copy (one seed: a list of one), for a study
        that reads every step's loss rather than the interval's mean the loop logs."""


def classifier_loop(
    cfg: DictConfig,
    proc: Process,
    net: Classifier,
    sampler,
    splits: tuple,
    *,
    study: str,
    summary: dict[str, Any] | None = None,
    step: ClassifierStep | None = None,
) -> TrainLoop:
    """The :class:`TrainLoop` of the classifier ``net`` of ``experiments.<study>``, trained with
    cross-entropy: one seed (``cfg.seed`` an integer), or several side by side (a list: ``net``
    a stack with its copies).

    ``sampler.indices(step)`` gives each step's examples of the training split (a list of
    samplers, one per seed, for a stack); ``splits`` is ``(train, test)``; ``step`` is the
    study's own part of the steps and evaluations. Each run is named ``<setup>-s<seed>`` and
    writes to ``proc.out_dir`` (one seed) or ``proc.out_dir/seed<k>/`` (a list); its summary
    starts with the keys every study records, then the study's ``summary``. ``train.stop`` may
    end a one-seed run before ``train.steps``."""
    training = ClassifierTraining(cfg, proc, net, sampler, splits, step or ClassifierStep())
    seeds = training.seeds
    summary = summary or {}
    runs = _runs(
        cfg,
        proc,
        study,
        {**summary, "copies": len(seeds)} if training.stacked else summary,
    )
    return TrainLoop(
        model=net.model,
        runs=runs,
        training=training,
        steps=cfg.train.steps,
        eval_every=cfg.eval.every,
        ckpt_dir=proc.out_dir,
        batch_size=cfg.train.batch_size * proc.world,
        optimizer=net.optimizer,
        scheduler=net.scheduler,
        job_name=run_name(setup_name(), *seeds),
    )


class ClassifierTraining:
    """One classifier run for :class:`TrainLoop` (see :func:`classifier_loop`): the batches of
    its sampler(s), a cross-entropy step, the accuracy evaluations, and ``train.stop``'s rule
    (its curve checkpointed)."""

    def __init__(
        self,
        cfg: DictConfig,
        proc: Process,
        net: Classifier,
        sampler,
        splits: tuple,
        study_step: ClassifierStep,
    ) -> None:
        self.cfg, self.proc, self.out_dir, self.optimizer = cfg, proc, proc.out_dir, net.optimizer
        self.train_split = splits[0]
        self.net = distributed.wrap(net.model, proc.device)
        self.params = [p for p in net.model.parameters() if p.requires_grad]
        self.stacked = not isinstance(cfg.seed, int)
        self.seeds = seed_list(cfg.seed)
        self.samplers = sampler if self.stacked else [sampler]
        augments = type(study_step).augment is not ClassifierStep.augment
        augments = augments and not study_step.augments_stacks
        if self.stacked and (augments or len(self.samplers) != len(self.seeds)):
            raise ValueError("a stack of seeds takes one sampler per seed and no augmentation but one by copy (ClassifierStep.augments_stacks)")  # fmt: skip
        copies = net.copies
        if self.stacked and (copies is None or len(copies) != len(self.seeds)):
            raise ValueError("a stack of seeds is evaluated through its copies: pass one per seed")
        self.study_step = study_step
        self.models = list(copies) if self.stacked else [net.model]  # what the evaluations run
        self.stack = net.model if self.stacked else None  # one pass of it evaluates every copy
        e = cfg.eval
        self.test_split = splits[1]
        self.test_key = "test/acc_subset" if e.test_subset else "test/acc"
        self.test_batches = fixed_batches(self.test_split, e.batch_size, e.test_subset or None)
        self.train_batches = (
            fixed_batches(self.train_split, e.batch_size, e.train_subset) if e.train_subset else []
        )
        s = cfg.train.stop
        self.rule = StopRule(self.test_key, s.target, s.plateau, s.min_steps)

    def batches(self, start: int) -> Iterator:
        steps = itertools.count(start)
        if not self.stacked:
            indices = (self.samplers[0].indices(s) for s in steps)
            seed = derive_seed(self.cfg.seed, "augment", self.proc.rank)
            return self.train_split.batches(indices, seed=seed, first_step=start)
        indices = (torch.cat([s.indices(step) for s in self.samplers]) for step in steps)
        return (stack_batch(x, y, len(self.seeds)) for x, y in self.train_split.batches(indices))

    def step(self, step: int, batch) -> dict[str, Any]:
        x, y = to_device(batch, self.proc.device, self.proc.memory_format)
        x = self.study_step.augment(step, x)
        with self.proc.autocast():
            logits = self.net(x)
        if self.stacked:
            losses = copy_losses(logits.float(), y)
        else:
            losses = F.cross_entropy(logits.float(), y)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()  # a stack: each copy the gradient of its own loss
        if self.cfg.train.grad_clip:
            nn.utils.clip_grad_norm_(self.params, self.cfg.train.grad_clip)
        self.optimizer.step()
        if self.stacked:
            hits = (split_copies(logits, len(self.seeds)).argmax(-1) == y).float().mean(0)
            out = {"loss": losses.tolist(), "acc_minibatch": hits.tolist()}
        else:
            out = {"loss": losses.item(), "acc_minibatch": (logits.argmax(1) == y).float().mean().item()}  # fmt: skip
        self.study_step.record_loss(step, out["loss"] if self.stacked else [out["loss"]])
        return {**out, **self.study_step.step_metrics(step)}

    def evaluate(self, step: int) -> list[dict[str, float]] | dict[str, float]:
        """``test/acc`` on the test split (or, with ``eval.test_subset``, ``test/acc_subset`` on
        that many fixed test examples), ``train/acc`` on the first ``eval.train_subset`` training
        examples (inference mode), the study's own metrics and the learning rate.
        Only rank 0 evaluates."""
        if self.proc.rank != 0:
            return {}
        metrics = {self.test_key: self._accuracies(self.test_split, self.test_batches)}
        if self.train_batches:
            metrics["train/acc"] = self._accuracies(self.train_split, self.train_batches)
        metrics.update(self.study_step.eval_metrics())
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        return self._per_run(metrics)

    def final_evaluate(self) -> list[dict[str, float]] | dict[str, float] | None:
        """``test/acc`` on the whole test split at the end, when the evaluations measured a
        subset (``None`` otherwise). Only rank 0 evaluates."""
        if not self.cfg.eval.test_subset:
            return None
        if self.proc.rank != 0:
            return {}
        everything = fixed_batches(self.test_split, self.cfg.eval.batch_size)
        return self._per_run({"test/acc": self._accuracies(self.test_split, everything)})

    def _accuracies(self, split, batches: list[Tensor]) -> list[float]:
        """Each model's top-1 accuracy over ``batches`` of ``split`` (inference mode)."""
        with self.proc.autocast():
            loaded = split.batches(batches)
            return copy_accuracies(
                self.models, loaded, self.proc.device, self.proc.memory_format, stack=self.stack
            )

    def _per_run(self, metrics: dict[str, Any]) -> list[dict[str, float]] | dict[str, float]:
        """``{key: one value per copy}`` as one dict per run (one seed: the dict itself)."""
        if not self.stacked:
            return {k: v[0] if isinstance(v, list) else v for k, v in metrics.items()}
        return [
            {k: v[i] if isinstance(v, list) else v for k, v in metrics.items()}
            for i in range(len(self.models))
        ]

    def stop(self, step: int, evals: list[dict[str, float]]) -> str | None:
        rule = self.rule
        if not rule.active:
            return None
        if rule.curve is None and self.proc.rank == 0:  # resumed without its curve
            # as an uninterrupted run's: its evaluations after initialization, before this one
            rule.curve = [
                (s, v)
                for s, v in read_curve(self.out_dir / "metrics.csv", rule.metric)
                if 0 < s < step
            ]
        return distributed.from_rank0(rule.update(step, evals[0]) if self.proc.rank == 0 else None)

    def summarize(self, logged: dict[str, list[float]]) -> dict[str, float | None]:
        return best_accuracies(logged)

    def state_dict(self) -> dict | None:
        return self.rule.state_dict() if self.rule.active else None

    def load_state_dict(self, state: dict) -> None:
        if self.rule.active:
            self.rule.load_state_dict(state)


def check_seeds(cfg: DictConfig) -> None:
    """What a list of seeds (trained side by side in one process) cannot do: each network's own
    gradient clipping, or its own stop rule; the error names the setting."""
    if isinstance(cfg.seed, int):
        return
    seeds, s = seed_list(cfg.seed), cfg.train.stop
    require(
        [
            (not cfg.train.grad_clip, f"train.grad_clip={cfg.train.grad_clip} clips each network's own gradient norm, which seeds side by side (seed={seeds}) would mix: set train.grad_clip=null or sweep the seeds (-m seed=0,1,2)"),
            (s.target is None and s.plateau is None, f"train.stop ends each run at its own step; seeds side by side (seed={seeds}) train in lockstep: sweep the seeds instead (-m seed=0,1,2)"),
        ]
    )  # fmt: skip


def _runs(cfg: DictConfig, proc: Process, study: str, summary: dict) -> list[Run]:
    """One :class:`Run` per seed: ``proc.out_dir`` itself for one seed, ``proc.out_dir/seed<k>/``
    for a list; its summary the kit's keys, the evaluation's settings and the study's
    ``summary``."""
    evaluation = {
        "world_size": proc.world,
        "eval_every": cfg.eval.every,
        "test_subset": cfg.eval.test_subset,
    }
    return [
        new_run(cfg, study, seed, run_dir, after={"steps": evaluation, "command": summary})
        for seed, run_dir in seed_dirs(cfg.seed, proc.out_dir)
    ]


def stack_batch(x: Tensor, y: Tensor, copies: int) -> tuple[Tensor, Tensor]:
    """The copies' batches, drawn one after the other (``(copies·N, C, ...)``, ``(copies·N,)``),
    as a stack reads them: ``(N, copies·C, ...)``, copy ``k``'s examples in channels
    ``k·C ..``, and labels ``(N, copies)``."""
    n = x.shape[0] // copies
    stacked = x.view(copies, n, *x.shape[1:]).transpose(0, 1).reshape(n, -1, *x.shape[2:])
    return stacked, y.view(copies, n).t()


def finish(loop: TrainLoop, result) -> dict:
    """The run's summary (written to ``summary.json`` by rank 0), with its throughput; for a
    stack of seeds, every run's summary in seed order."""
    for run in loop.runs:
        run.summary["examples_per_s"] = result.examples_per_s
    summaries = loop.finish(result)
    distributed.cleanup()
    return summaries[0] if len(summaries) == 1 and "copies" not in summaries[0] else summaries
