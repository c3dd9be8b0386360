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
is marked diverged and the others train on.

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
from experiments.kit.config import require
from experiments.kit.data import fixed_batches, load_splits
from experiments.kit.evaluation import accuracy
from experiments.kit.loop import Run, TrainLoop
from experiments.kit.measures import first_last_gradient_ratio
from experiments.kit.norm import norm_factory
from experiments.kit.run_summary import new_run, run_name
from experiments.kit.sampling import IIDBatches
from experiments.kit.seeds import derive_seed
from experiments.nets.deep_mlp import ACTIVATIONS, DeepMLP

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
            (isinstance(cfg.seed, int), f"seed={cfg.seed} must be one integer (sweep seeds with -m seed=0,1,2)"),
        ]
    )  # fmt: skip


def build_networks(cfg: DictConfig, in_features: int) -> nn.ModuleList:
    m, norm = cfg.model, norm_factory(cfg.norm, 1, cfg.train.steps)
    return nn.ModuleList(
        DeepMLP(d, m.width, m.activation, norm, in_features=in_features) for d in m.depths
    )


def train(cfg: DictConfig, out_dir: Path) -> list[dict]:
    """Train one network per depth; returns their summaries (each run's ``summary.json``)."""
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
    torch.manual_seed(cfg.seed)
    nets = build_networks(cfg, x_all.shape[1])
    g = torch.Generator().manual_seed(derive_seed(cfg.seed, "fixed-batch"))
    fixed = torch.randperm(len(y_all), generator=g)
    x_fixed, y_fixed = x_all[fixed[: cfg.train.batch_size]], y_all[fixed[: cfg.train.batch_size]]
    runs = make_runs(cfg, out_dir)
    sampler = IIDBatches(len(y_all), cfg.train.batch_size, derive_seed(cfg.seed, "train"))
    # one update for all parameters (the same arithmetic as the loop over them, in one call)
    optimizer = torch.optim.SGD(nets.parameters(), lr=cfg.train.lr, foreach=True)

    training = DepthTraining(nets, optimizer, sampler, x_all, y_all, x_fixed, y_fixed, test)
    loop = TrainLoop(
        model=nets, runs=runs, training=training,
        steps=cfg.train.steps, eval_every=cfg.eval.every, ckpt_dir=out_dir,
        batch_size=cfg.train.batch_size, optimizer=optimizer,
        job_name=run_name(runs[0].summary["setup_base"], cfg.seed),
        checkpoint_every=cfg.eval.checkpoint_every,
    )  # fmt: skip
    loop.start(cfg)
    result = loop.run()
    finals = [{"grad_ratio_init": _first(run, "grad_ratio")} for run in runs]
    return loop.finish(result, finals)


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


def make_runs(cfg: DictConfig, out_dir: Path) -> list[Run]:
    base = f"{config.setup_name()}_{cfg.model.activation}"
    m, t = cfg.model, cfg.train
    runs = []
    for depth in m.depths:
        run_dir = out_dir / f"depth{depth}"
        run_dir.mkdir(parents=True, exist_ok=True)
        own = {
            "setup": {"setup_base": base},
            "norm": {"activation": m.activation, "depth": depth, "width": m.width, "lr": t.lr, "batch_size": t.batch_size},
        }  # fmt: skip
        runs.append(new_run(cfg, STUDY, cfg.seed, run_dir, setup=f"{base}_d{depth}", after=own))
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
