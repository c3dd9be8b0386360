"""BN paper Sec. 4.2 (Figs. 2-3): the BN-Inception variants, trained and evaluated alike.

    python -m experiments.inception setup=bn_x5 seed=1                      # one run, CPU scale
    python -m experiments.inception setup=bn_x5 'seed=[1000,1001,1002,1003,1004]'  # side by side
    python -m experiments.inception -m setup=inception,bn_baseline,bn_x5,bn_x30,bn_x5_sigmoid,inception_sigmoid
    python -m experiments.inception scale=gpu data.root=/data/imagenet100 setup=bn_x30
    torchrun --nproc_per_node=8 -m experiments.inception scale=gpu data.root=... setup=bn_x30

A setup (``configs/inception/setup/``) is one of the paper's variants: the norm,
nonlinearity, LRN, dropout and the multipliers of the learning rate, L2, decay speed and
photometric distortion; the scale (``configs/inception/scale/``) sets the base values, the model
size and the run length. Writes to the Hydra run directory: the resolved config, ``metrics.csv``
(``step,metric,value``; the paper's curve is ``test/acc``, single-crop validation accuracy),
``summary.json`` and ``checkpoint.pt``. A list of seeds trains their networks side by side in one
process (:mod:`experiments.nets.stacked`; CPU scale, no ``train.stop``), each seed's results in
``seed<k>/`` as its own run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import hydra
import torch
from omegaconf import MISSING, DictConfig
from torch import Tensor, nn

from experiments.kit import classify, config
from experiments.kit.config import require, seed_list
from experiments.kit.data import load_splits
from experiments.kit.errors import ConfigError
from experiments.kit.norm import apply_norm_options, norm_factory
from experiments.kit.sampling import ShardBatches
from experiments.kit.seeds import derive_seed
from experiments.nets.bn_inception import BNInception, count_parameters
from experiments.nets.stacked import GroupedLinear

STUDY = "inception"


@dataclass
class Model:
    activation: str = MISSING  # relu | sigmoid
    lrn: bool = MISSING
    dropout: float = MISSING
    width: float = MISSING
    separable_stem: bool = MISSING
    stem_stride: int = MISSING
    pool_columns: int = 1
    fuse_reductions: bool = False


@dataclass
class Train(config.ClassifierTrainConf):
    reference_batch: int = MISSING
    lr_mult: float = MISSING
    weight_decay: float = MISSING
    wd_mult: float = MISSING
    lr_decay_factor: float = MISSING
    lr_decay_every: int = MISSING
    decay_speedup: float = MISSING
    amp: bool = MISSING


@dataclass
class Sampler:
    shard_size: int = MISSING
    within_shard: bool = MISSING


@dataclass
class Augment:
    photometric: float = MISSING
    photometric_mult: float = MISSING


@dataclass
class Eval(config.ClassifierEvalConf):
    train_subset: int = MISSING


@dataclass
class InceptionConf(config.StudyConf):
    model: Model = field(default_factory=Model)
    train: Train = field(default_factory=Train)
    sampler: Sampler = field(default_factory=Sampler)
    augment: Augment = field(default_factory=Augment)
    eval: Eval = field(default_factory=Eval)


config.register(STUDY, InceptionConf)


def check(cfg: DictConfig) -> None:
    config.check_common(cfg)
    classify.check_seeds(cfg)
    t, m = cfg.train, cfg.model
    require(
        [
            (
                isinstance(cfg.seed, int) or cfg.data.name != "image_folder",
                f"seed={seed_list(cfg.seed)}: seeds side by side are built for the in-memory "
                "datasets (CPU scale); sweep the seeds of an image folder (-m seed=0,1,2)",
            ),
            (m.activation in ("relu", "sigmoid"), f"model.activation={m.activation!r} must be relu or sigmoid"),
            (m.stem_stride in (1, 2, 4, 8), f"model.stem_stride={m.stem_stride} must be 1, 2, 4 or 8"),
            (m.pool_columns >= 1, f"model.pool_columns={m.pool_columns} must be at least 1"),
            (
                cfg.sampler.shard_size >= t.batch_size and cfg.sampler.shard_size % t.batch_size == 0,
                f"sampler.shard_size={cfg.sampler.shard_size} must be a multiple of "
                f"train.batch_size={t.batch_size}",
            ),
        ]
    )  # fmt: skip


def recipe(cfg: DictConfig, world: int) -> dict[str, float]:
    """The variant's effective hyperparameters for a global batch of ``batch_size x world``.

    The scaling rule: the learning rate grows linearly with the global batch and the decay
    interval (in steps) shrinks with it, so a step of ``k x reference_batch`` examples moves as
    far as ``k`` reference steps and the schedule stays the same function of examples seen.
    """
    t = cfg.train
    k = t.batch_size * world / t.reference_batch
    return {
        "lr": t.lr * t.lr_mult * k,
        "weight_decay": t.weight_decay * t.wd_mult,
        "lr_decay_every": max(1, round(t.lr_decay_every / t.decay_speedup / k)),
        "photometric": cfg.augment.photometric * cfg.augment.photometric_mult,
        "global_batch": t.batch_size * world,
    }


def build_model(cfg: DictConfig, in_channels: int, num_classes: int) -> BNInception:
    m = cfg.model
    model = BNInception(
        num_classes,
        norm_layer=norm_factory(cfg.norm, 2, cfg.train.steps),
        activation=m.activation,
        width=m.width,
        separable_stem=m.separable_stem,
        lrn=m.lrn,
        dropout=m.dropout,
        in_channels=in_channels,
        stem_stride=m.stem_stride,
        pool_columns=m.pool_columns,
    )
    model = apply_norm_options(model, cfg.norm)
    return model.fuse_reductions() if m.fuse_reductions else model


_WEIGHTED = (nn.Conv2d, nn.Linear, GroupedLinear)  # the layers whose weights get L2


def build_optimizer(model: nn.Module, lr: float, momentum: float, weight_decay: float):
    """SGD with momentum; L2 on conv and linear weights only (not on biases or BN's γ, β), of
    one network or of a stack of them (whose classifier's biases are ``(copies, classes)``)."""
    weights = {id(m.weight) for m in model.modules() if isinstance(m, _WEIGHTED)}
    decay = [p for p in model.parameters() if id(p) in weights]
    rest = [p for p in model.parameters() if id(p) not in weights]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.SGD(groups, lr=lr, momentum=momentum)


def photometric(x: Tensor, strength: float, generator: torch.Generator) -> Tensor:
    """Random brightness and contrast per image: ``(x - mean) * c + mean + b`` with
    ``c ~ U(1 - s, 1 + s)`` and ``b ~ U(-s, s)`` (in units of the standardized input)."""
    if strength == 0:
        return x
    u = torch.rand(len(x), 2, generator=generator).mul_(2).sub_(1).mul_(strength).to(x.device)
    c, b = (1 + u[:, 0]).view(-1, 1, 1, 1), u[:, 1].view(-1, 1, 1, 1)
    mean = x.mean((1, 2, 3), keepdim=True)
    return (x - mean) * c + mean + b


class Photometric(classify.ClassifierStep):
    """Every training batch distorted by :func:`photometric` of ``strength``, its numbers drawn
    for each step and process from the run's seed; for seeds side by side, each copy's images
    (its block of channels) with the numbers of its own seed, as its run alone draws them."""

    augments_stacks = True

    def __init__(self, seeds: list[int], rank: int, strength: float) -> None:
        self.seeds, self.rank, self.strength = seeds, rank, strength

    def augment(self, step: int, x: Tensor) -> Tensor:
        def draws(seed: int) -> torch.Generator:
            return torch.Generator().manual_seed(derive_seed(seed, "photometric", self.rank, step))

        if len(self.seeds) == 1:
            return photometric(x, self.strength, draws(self.seeds[0]))
        copies = x.chunk(len(self.seeds), 1)
        return torch.cat([photometric(xk, self.strength, draws(s)) for xk, s in zip(copies, self.seeds)], 1)  # fmt: skip


def train(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one variant; returns the summary also written to ``summary.json`` (rank 0)."""
    check(cfg)
    t = cfg.train
    proc = classify.start_process(cfg, out_dir, amp=t.amp)
    train_split, test_split, in_channels, num_classes = load_splits(
        cfg.data,
        size=cfg.data.image_size,
        channels=cfg.data.channels,
        pin_memory=proc.device.type == "cuda",
    )
    hp = recipe(cfg, proc.world)
    seeds, stacked = seed_list(cfg.seed), not isinstance(cfg.seed, int)
    if stacked and proc.world > 1:
        raise ConfigError(f"seed={seeds}: a list of seeds trains in one process; launch one seed a process under torchrun")  # fmt: skip
    build = partial(build_model, cfg, in_channels, num_classes)
    model, models = classify.build_copies(cfg.seed, build, proc.device, proc.memory_format)
    # Dropout's masks, once built (a stack's: one draw over every copy's features, by its first
    # seed's stream).
    torch.manual_seed(derive_seed(seeds[0], "dropout", proc.rank))
    optimizer = build_optimizer(model, hp["lr"], t.momentum, hp["weight_decay"])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, hp["lr_decay_every"], t.lr_decay_factor)
    s = cfg.sampler
    samplers = [
        ShardBatches(
            len(train_split),
            t.batch_size,
            derive_seed(seed, "train"),
            s.shard_size,
            s.within_shard,
            proc.rank,
            proc.world,
        )
        for seed in seeds
    ]

    loop = classify.classifier_loop(
        cfg,
        proc,
        classify.Classifier(model, optimizer, scheduler, models if stacked else None),
        samplers if stacked else samplers[0],
        (train_split, test_split),
        study=STUDY,
        summary={
            "activation": cfg.model.activation,
            "width": cfg.model.width,
            "parameters": count_parameters(models[0]),
            "initial_lr": hp["lr"],  # the last evaluation adds the final one as "lr"
            **{k: hp[k] for k in ("weight_decay", "lr_decay_every", "photometric", "global_batch")},
        },
        step=Photometric(seeds, proc.rank, hp["photometric"]),
    )
    loop.start(cfg, writes_log=proc.rank == 0)
    return classify.finish(loop, loop.run())


@hydra.main(version_base="1.3", config_path=str(config.CONFIGS / STUDY), config_name=STUDY)
def main(cfg: DictConfig) -> float | None:
    return config.run_study(train, cfg)


def cli() -> None:
    """``python -m experiments.inception`` (``bn-study inception``)."""
    config.preflight(STUDY)
    main()


if __name__ == "__main__":
    cli()
