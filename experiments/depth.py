"""Gradients across depth at initialization and over the first training steps (mechanism study,
Yang et al., ICLR 2019: at initialization BN makes gradients explode with depth).

    python -m experiments.depth setup=deep_mlp_bn model.activation=relu seed=0
    make reproduce-depth     # its setups and seeds: make help; results/mechanism/depth/

One run trains a :class:`~experiments.nets.deep_mlp.DeepMLP` of every depth in ``model.depths``
side by side (plain SGD, the same i.i.d. MNIST batches of 60) and, every ``eval.every`` steps,
measures on one fixed training batch each network's loss and ``‖∂L/∂W_first‖ / ‖∂L/∂W_last‖``
(the input layer's and the classifier's weights), with BN in training mode (the statistics of
that batch, as in training). With ``eval.test_examples=N`` every evaluation also measures each
network's accuracy on the first ``N`` test images (MNIST's test files are in random order), BN
with its running statistics, which the fixed batch then leaves as they were.
Each depth is a run of its own (``<run dir>/depth<d>/``); a network whose loss stops being finite
is marked diverged and the others train on. A list of seeds (``seed=[0,1,2,3,4]``) trains them
side by side in one process: each depth's networks stacked
(:func:`~experiments.nets.stacked.stack_copies`, each copy its seed's network, batches and fixed
batch), one run per seed and depth (``<run dir>/seed<s>/depth<d>/``). The stack shares the cost
of each small layer between the seeds (``python -m scripts.bench_studies``); it computes what
the seeds' own runs would, to rounding. Deep BN networks amplify rounding (their gradients
explode with depth), so past about 32 layers a seed side by side and the same seed alone soon
differ visibly: two draws of one distribution, not one run twice.

    python -m experiments.depth -m setup=deep_mlp_bn train.lr=0.01,0.1,1 eval.test_examples=2000 \
        train.steps=1000 eval.every=250      # the depth x learning-rate grid (Yang et al. 2019)
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import hydra
import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import nn

from experiments.kit import config
from experiments.kit.config import require, seed_dirs, seed_list
from experiments.kit.data import fixed_batches, load_splits
from experiments.kit.evaluation import accuracy
from experiments.kit.loop import Run, TrainLoop
from experiments.kit.measures import first_last_gradient_ratio
from experiments.kit.norm import norm_factory
from experiments.kit.run_summary import new_run, run_name
from experiments.kit.sampling import IIDBatches
from experiments.kit.seeds import derive_seed
from experiments.nets.deep_mlp import ACTIVATIONS, DeepMLP
from experiments.nets.stacked import GroupedLinear, copy_losses, copy_views, stack_copies

STUDY = "depth"
CPU = torch.device("cpu")  # the study trains on the CPU


@dataclass
class Model:
    depths: list[int] = MISSING
    width: int = MISSING
    activation: str = MISSING  # relu | sigmoid | linear


@dataclass
class Eval(config.EvalConf):
    # > 0: every evaluation also measures test/acc_subset on the first this many test images
    test_examples: int = 0
    # write the checkpoint after an evaluation only this many steps after the last one (and at
    # the end): a run evaluated every step would otherwise write its six networks every step
    checkpoint_every: int = 100


@dataclass
class DepthConf(config.StudyConf):
    model: Model = field(default_factory=Model)
    eval: Eval = field(default_factory=Eval)


config.register(STUDY, DepthConf)


def check(cfg: DictConfig) -> None:
    config.check_common(cfg)
    m = cfg.model
    require(
        [
            (m.activation in ACTIVATIONS, f"model.activation={m.activation!r} must be one of {tuple(ACTIVATIONS)}"),
            (len(m.depths) >= 1 and all(d >= 1 for d in m.depths), f"model.depths={list(m.depths)} must be depths >= 1"),
            (len(set(m.depths)) == len(m.depths), f"model.depths={list(m.depths)} has repeated depths"),
        ]
    )  # fmt: skip


def build_networks(cfg: DictConfig, in_features: int) -> nn.ModuleList:
    m, norm = cfg.model, norm_factory(cfg.norm, 1, cfg.train.steps)
    return nn.ModuleList(
        DeepMLP(d, m.width, m.activation, norm, in_features=in_features) for d in m.depths
    )


def train(cfg: DictConfig, out_dir: Path) -> list[dict]:
    """Train one network per depth (and seed); returns their summaries (each run's
    ``summary.json``), depth by depth, the seeds of each depth in order."""
    check(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    train_split, test_split, _, _ = load_splits(cfg.data)
    x_all, y_all = train_split.x.flatten(1), train_split.labels
    test = None
    if cfg.eval.test_examples:
        test = [
            (test_split.x[idx].flatten(1), test_split.labels[idx])
            for idx in fixed_batches(test_split, cfg.eval.batch_size, cfg.eval.test_examples)
        ]
    seeds = seed_list(cfg.seed)
    per_seed = []
    for s in seeds:
        torch.manual_seed(s)
        per_seed.append(build_networks(cfg, x_all.shape[1]))
    fixed = [fixed_batch_indices(s, len(y_all), cfg.train.batch_size) for s in seeds]
    samplers = [
        IIDBatches(len(y_all), cfg.train.batch_size, derive_seed(s, "train")) for s in seeds
    ]
    stacked = not isinstance(cfg.seed, int)
    nets = nn.ModuleList(stack_copies(c) for c in zip(*per_seed)) if stacked else per_seed[0]
    # one update for all parameters (the same arithmetic as the loop over them, in one call)
    optimizer = torch.optim.SGD(nets.parameters(), lr=cfg.train.lr, foreach=True)
    if stacked:
        views = [copy_views(stack, c) for stack, c in zip(nets, zip(*per_seed))]
        training = StackedDepthTraining(nets, views, optimizer, samplers, x_all, y_all, fixed, test)
    else:
        x_fixed, y_fixed = x_all[fixed[0]], y_all[fixed[0]]
        training = DepthTraining(nets, optimizer, samplers[0], x_all, y_all, x_fixed, y_fixed, test)
    runs = make_runs(cfg, out_dir)
    loop = TrainLoop(
        model=nets, runs=runs, training=training,
        steps=cfg.train.steps, eval_every=cfg.eval.every, ckpt_dir=out_dir,
        batch_size=cfg.train.batch_size, optimizer=optimizer,
        job_name=run_name(runs[0].summary["setup_base"], *seeds),
        checkpoint_every=cfg.eval.checkpoint_every,
    )  # fmt: skip
    loop.start(cfg)
    result = loop.run()
    finals = [{"grad_ratio_init": _first(run, "grad_ratio")} for run in runs]
    return loop.finish(result, finals)


def fixed_batch_indices(seed: int, n: int, batch_size: int) -> torch.Tensor:
    """The training examples of seed ``seed``'s fixed batch, on which every evaluation measures."""
    g = torch.Generator().manual_seed(derive_seed(seed, "fixed-batch"))
    return torch.randperm(n, generator=g)[:batch_size]


class DepthTraining:
    """One network per depth, trained in lockstep on the same minibatches; every evaluation
    measures each one's gradient ratio (first layer over last) and loss on a fixed batch, and
    with ``test`` (a list of ``(x, y)`` batches) its test accuracy."""

    def __init__(self, nets, optimizer, sampler, x_all, y_all, x_fixed, y_fixed, test=None) -> None:
        self.nets, self.optimizer, self.sampler = nets, optimizer, sampler
        self.x_all, self.y_all, self.x_fixed, self.y_fixed = x_all, y_all, x_fixed, y_fixed
        self.test = test

    def batches(self, start: int):
        for step in itertools.count(start):
            idx = self.sampler.indices(step)
            yield self.x_all[idx], self.y_all[idx]

    def step(self, step: int, batch) -> dict[str, list[float]]:
        x, y = batch
        losses = [F.cross_entropy(net(x), y) for net in self.nets]
        self.optimizer.zero_grad(set_to_none=True)
        torch.stack(losses).sum().backward()  # each network its own gradient
        self.optimizer.step()
        return {"loss": [loss.item() for loss in losses]}

    def evaluate(self, step: int) -> list[dict[str, float]]:
        out = []
        for net in self.nets:
            # the fixed batch is no training batch: where the running statistics are read (the
            # test accuracy), they are kept as training left them
            # (restored after the backward pass, which checks the buffers it saw are unchanged)
            with running_stats_kept(net) if self.test is not None else contextlib.nullcontext():
                loss = F.cross_entropy(net(self.x_fixed), self.y_fixed)
                ratio = first_last_gradient_ratio(
                    [lin.weight for lin in (net.linears[0], net.linears[-1])], loss
                )
            metrics = {"grad_ratio": ratio, "fixed_batch_loss": loss.item()}
            if self.test is not None:
                metrics["test/acc_subset"] = accuracy(net, self.test, CPU)
            out.append(metrics)
        return out


@contextlib.contextmanager
def running_stats_kept(net: nn.Module) -> Iterator[None]:
    """Inside the block the BN layers of ``net`` may update their running statistics; after it
    they are what they were (a measurement in training mode is no training batch)."""
    saved = {k: v.clone() for k, v in net.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for k, v in net.named_buffers():
                v.copy_(saved[k])


class StackedDepthTraining(DepthTraining):
    """:class:`DepthTraining` for seeds side by side: ``nets`` holds one stack per depth (its
    ``K`` copies the seeds' networks), ``views`` each stack's copies as plain networks (for the
    test accuracy), ``samplers`` and ``fixed`` (the fixed batches' indices) one per seed. A step
    and an evaluation return one value per depth and seed, depth by depth."""

    def __init__(self, nets, views, optimizer, samplers, x_all, y_all, fixed, test=None) -> None:
        x_fixed, y_fixed = self._side_by_side(x_all, y_all, torch.stack(fixed))
        super().__init__(nets, optimizer, None, x_all, y_all, x_fixed, y_fixed, test)
        self.views, self.samplers = views, samplers

    @staticmethod
    def _side_by_side(x_all, y_all, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The examples ``idx`` (``(K, N)``: each seed's) as a stack's input ``(N, K·D)`` and
        labels ``(N, K)``."""
        n = idx.shape[1]
        return x_all[idx].transpose(0, 1).reshape(n, -1), y_all[idx].t()

    def batches(self, start: int):
        for step in itertools.count(start):
            idx = torch.stack([sampler.indices(step) for sampler in self.samplers])
            yield self._side_by_side(self.x_all, self.y_all, idx)

    def step(self, step: int, batch) -> dict[str, list[float]]:
        x, y = batch
        losses = torch.cat([copy_losses(stack(x), y) for stack in self.nets])
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()  # each copy its own gradient
        self.optimizer.step()
        return {"loss": losses.tolist()}

    def evaluate(self, step: int) -> list[dict[str, float]]:
        out = []
        for stack, views in zip(self.nets, self.views):
            grouped = [m for m in stack if isinstance(m, GroupedLinear)]
            with running_stats_kept(stack) if self.test is not None else contextlib.nullcontext():
                losses = copy_losses(stack(self.x_fixed), self.y_fixed)
                first, last = torch.autograd.grad(losses.sum(), [grouped[0].weight, grouped[-1].weight])  # fmt: skip
            ratios = first.flatten(1).norm(dim=1) / last.flatten(1).norm(dim=1)
            for k, net in enumerate(views):
                metrics = {"grad_ratio": ratios[k].item(), "fixed_batch_loss": losses[k].item()}
                if self.test is not None:
                    metrics["test/acc_subset"] = accuracy(net, self.test, CPU)
                out.append(metrics)
        return out


def make_runs(cfg: DictConfig, out_dir: Path) -> list[Run]:
    """One run per depth (``out_dir/depth<d>/``), for a list of seeds one per depth and seed
    (``out_dir/seed<s>/depth<d>/``), depth by depth."""
    base = f"{config.setup_name()}_{cfg.model.activation}"
    m, t = cfg.model, cfg.train
    runs = []
    for depth in m.depths:
        for seed, seed_dir in seed_dirs(cfg.seed, out_dir):
            run_dir = seed_dir / f"depth{depth}"
            run_dir.mkdir(parents=True, exist_ok=True)
            own = {
                "setup": {"setup_base": base},
                "norm": {"activation": m.activation, "depth": depth, "width": m.width, "lr": t.lr, "batch_size": t.batch_size},
            }  # fmt: skip
            runs.append(new_run(cfg, STUDY, seed, run_dir, setup=f"{base}_d{depth}", after=own))
    return runs


def _first(run: Run, metric: str) -> float | None:
    from experiments.kit.runlog import read_curve

    curve = read_curve(run.out_dir / "metrics.csv", metric) if run.log else []
    return curve[0][1] if curve else None


@hydra.main(version_base="1.3", config_path=str(config.CONFIGS / STUDY), config_name=STUDY)
def main(cfg: DictConfig) -> float | None:
    return config.run_study(train, cfg)


def cli() -> None:
    """``python -m experiments.depth`` (``bn-study depth``)."""
    config.preflight(STUDY, objective=False)
    main()


if __name__ == "__main__":
    cli()
