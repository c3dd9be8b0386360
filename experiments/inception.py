"""BN paper Sec. 4.2 (Figs. 2-3): the BN-Inception variants, trained and evaluated alike.

    python -m experiments.inception variant=bn_x5 seed=1                      # one run, CPU scale
    python -m experiments.inception -m variant=inception,bn_baseline,bn_x5,bn_x30,bn_x5_sigmoid,inception_sigmoid
    python -m experiments.inception inception_scale=gpu data.root=/data/imagenet100 variant=bn_x30
    torchrun --nproc_per_node=8 -m experiments.inception inception_scale=gpu data.root=... variant=bn_x30

A variant (``configs/variant/``) sets the recipe: norm, nonlinearity, LRN, dropout and the
multipliers of the learning rate, L2, decay speed and photometric distortion; the scale
(``configs/inception_scale/``) sets the base values, the model size and the run length. Writes to
the Hydra run directory: the resolved config, ``metrics.csv`` (``step,metric,value``; the paper's
curve is ``test/acc``, single-crop validation accuracy), ``summary.json`` and ``checkpoint.pt``.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

import hydra
import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from experiments import distributed
from experiments.bn_inception import BNInception, count_parameters
from experiments.checks import require, run_study
from experiments.engine import TrainLoop
from experiments.evaluation import accuracy, to_device
from experiments.runlog import LOGGER_MODES, run_command
from experiments.sampling import ShardBatches
from experiments.splits import fixed_batches, load_splits

NORMS = ("none", "batchnorm", "batchrenorm", "torch_batchnorm")
ACTIVATIONS = ("relu", "sigmoid")


def validate(cfg: DictConfig) -> None:
    t, m = cfg.train, cfg.model
    require(
        [
            (m.norm in NORMS, f"model.norm={m.norm!r} must be one of {NORMS}"),
            (
                m.activation in ACTIVATIONS,
                f"model.activation={m.activation!r} must be one of {ACTIVATIONS}",
            ),
            (m.width > 0, f"model.width={m.width} must be positive"),
            (
                m.stem_stride in (1, 2, 4, 8),
                f"model.stem_stride={m.stem_stride} must be 1, 2, 4 or 8",
            ),
            (0 <= m.dropout < 1, f"model.dropout={m.dropout} must be in [0, 1)"),
            (
                t.lr > 0 and t.lr_mult > 0,
                f"train.lr={t.lr} and train.lr_mult={t.lr_mult} must be positive",
            ),
            (t.steps >= 1, f"train.steps={t.steps} must be at least 1"),
            (t.batch_size >= 1, f"train.batch_size={t.batch_size} must be at least 1"),
            (
                m.norm == "none" or t.batch_size >= 2,
                f"train.batch_size={t.batch_size} gives {m.norm} one value per channel in the last "
                "module (4x4 or smaller): use train.batch_size >= 2",
            ),
            (
                t.weight_decay >= 0 and t.wd_mult >= 0,
                "train.weight_decay and train.wd_mult must be >= 0",
            ),
            (t.lr_decay_every >= 1, f"train.lr_decay_every={t.lr_decay_every} must be at least 1"),
            (t.decay_speedup > 0, f"train.decay_speedup={t.decay_speedup} must be positive"),
            (
                0 < t.lr_decay_factor <= 1,
                f"train.lr_decay_factor={t.lr_decay_factor} must be in (0, 1]",
            ),
            (
                cfg.sampler.shard_size >= t.batch_size
                and cfg.sampler.shard_size % t.batch_size == 0,
                f"sampler.shard_size={cfg.sampler.shard_size} must be a multiple of "
                f"train.batch_size={t.batch_size}",
            ),
            (
                cfg.augment.photometric >= 0,
                f"augment.photometric={cfg.augment.photometric} must be >= 0",
            ),
            (cfg.eval.every >= 1, f"eval.every={cfg.eval.every} must be at least 1"),
            (
                cfg.logger.mode in LOGGER_MODES,
                f"logger.mode={cfg.logger.mode!r} must be one of {LOGGER_MODES}",
            ),
        ]
    )


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
    norm_kwargs = {}
    if m.norm != "none":
        norm_kwargs = {"momentum": m.momentum, "eps": m.eps}
        if m.sync_stats:
            norm_kwargs["sync_stats"] = True
    return BNInception(
        num_classes,
        norm=m.norm,
        activation=m.activation,
        width=m.width,
        separable_stem=m.separable_stem,
        lrn=m.lrn,
        dropout=m.dropout,
        in_channels=in_channels,
        stem_stride=m.stem_stride,
        **norm_kwargs,
    )


def build_optimizer(model: nn.Module, lr: float, momentum: float, weight_decay: float):
    """SGD with momentum; L2 on conv and linear weights only (not on biases or BN's γ, β)."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
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


def train(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one variant; returns the summary also written to ``summary.json`` (rank 0)."""
    validate(cfg)
    t, e = cfg.train, cfg.eval
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rank, world, device = distributed.setup(cfg.device)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_split, test_split, in_channels, num_classes = load_splits(
        cfg.data,
        size=cfg.data.get("image_size"),
        channels=cfg.data.get("channels", 1),
        pin_memory=device.type == "cuda",
    )
    hp = recipe(cfg, world)

    torch.manual_seed(cfg.seed)
    memory_format = torch.channels_last if t.channels_last else torch.contiguous_format
    model = build_model(cfg, in_channels, num_classes).to(device, memory_format=memory_format)
    optimizer = build_optimizer(model, hp["lr"], t.momentum, hp["weight_decay"])
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=hp["lr_decay_every"], gamma=t.lr_decay_factor
    )
    net = distributed.wrap(model, device)
    sampler = ShardBatches(
        len(train_split),
        t.batch_size,
        cfg.seed,
        cfg.sampler.shard_size,
        cfg.sampler.within_shard,
        rank,
        world,
    )
    use_amp = t.amp and device.type == "cuda"

    def autocast():
        return torch.autocast("cuda", torch.bfloat16) if use_amp else contextlib.nullcontext()

    def batches(start: int):
        steps = (sampler.indices(s) for s in itertools.count(start))
        return train_split.batches(steps, seed=cfg.seed * 64 + rank, first_step=start)

    def step_fn(step: int, batch) -> dict[str, float]:
        x, y = to_device(batch, device, memory_format)
        g = torch.Generator().manual_seed((cfg.seed * 1_000_003 + step) * 64 + rank)
        x = photometric(x, hp["photometric"], g)
        with autocast():
            logits = net(x)
        loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if t.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        optimizer.step()
        return {
            "loss": loss.item(),
            "acc_minibatch": (logits.argmax(1) == y).float().mean().item(),
        }

    test_batches = fixed_batches(test_split, e.batch_size)
    train_batches = (
        fixed_batches(train_split, e.batch_size, e.train_subset) if e.train_subset else []
    )

    def evaluate(step: int) -> dict[str, float]:
        if rank != 0:
            return {}
        with autocast():
            metrics = {
                "test/acc": accuracy(model, test_split.batches(test_batches), device, memory_format)
            }
            if train_batches:
                metrics["train/acc"] = accuracy(
                    model, train_split.batches(train_batches), device, memory_format
                )
        metrics["lr"] = optimizer.param_groups[0]["lr"]
        return metrics

    name = f"{cfg.variant_name}-s{cfg.seed}"
    loop = TrainLoop(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        batches=batches,
        step_fn=step_fn,
        evaluate=evaluate,
        steps=t.steps,
        eval_every=e.every,
        out_dir=out_dir,
        log=None,
        name=name,
        batch_size=hp["global_batch"],
    )
    loop.start(cfg, job_type=cfg.variant_name, writes_log=rank == 0)  # one process writes the logs
    result = loop.run()

    summary = {
        "name": name,
        "variant": cfg.variant_name,
        "seed": cfg.seed,
        "data": cfg.data.name,
        "norm": cfg.model.norm,
        "activation": cfg.model.activation,
        "width": cfg.model.width,
        "parameters": count_parameters(model),
        "initial_lr": hp["lr"],  # the last evaluation adds the final one as "lr"
        **{k: hp[k] for k in ("weight_decay", "lr_decay_every", "photometric", "global_batch")},
        "steps": t.steps,
        "world_size": world,
        "steps_per_s": result.steps_per_s,
        "images_per_s": result.examples_per_s,
        "command": run_command("experiments.inception"),
    }
    loop.finish(result, summary)
    distributed.cleanup()
    return summary


@hydra.main(version_base="1.3", config_path="../configs", config_name="inception")
def main(cfg: DictConfig) -> float | None:
    return run_study(train, cfg)


if __name__ == "__main__":
    main()
