"""Batch Renorm paper Sec. 4 (Figs. 1-2): BN and Batch Renorm on small and non-i.i.d. minibatches.

    python -m experiments.renorm setup=brn_micro4 seed=1                 # one run
    python -m experiments.renorm -m setup=bn32,brn32,bn_micro4,brn_micro4 seed=0,1
    python -m experiments.renorm scale=paper data.root=/data/imagenet100 setup=brn32   # GPUs
    torchrun --nproc_per_node=8 -m experiments.renorm scale=paper data.root=... setup=brn32

The setups (``configs/setup/``) differ only in the normalization and the sampler; ``scale=cpu``
(a small conv net on Fashion-MNIST or MNIST) and ``scale=paper`` (Inception-v3 on an image
folder, RMSProp) run through the same code. Writes to the Hydra run directory: the resolved
config, ``metrics.csv`` (``step,metric,value``), ``summary.json`` and ``checkpoint.pt``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import hydra
import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import nn

import bn
from bn.batchrenorm import _BatchRenormNd
from experiments import distributed
from experiments.checks import ConfigError, require, run_study
from experiments.engine import TrainLoop
from experiments.evaluation import accuracy, to_device
from experiments.models import SmallConvNet, freeze_norm_scale
from experiments.runlog import LOGGER_MODES, run_command
from experiments.sampling import IIDBatches, PairBatches
from experiments.splits import fixed_batches, load_splits

NORMS = ("batchnorm", "batchrenorm", "groupnorm", "layernorm", "none")
BATCH_NORMS = ("batchnorm", "batchrenorm")
SAMPLERS = ("iid", "pairs")
SCHEDULES = ("paper", "fixed")


def validate(cfg: DictConfig) -> None:
    t, n, s = cfg.train, cfg.norm, cfg.norm.schedule
    mb = n.microbatch
    require(
        [
            (n.kind in NORMS, f"norm.kind={n.kind!r} must be one of {NORMS}"),
            (
                cfg.sampler.kind in SAMPLERS,
                f"sampler.kind={cfg.sampler.kind!r} must be one of {SAMPLERS}",
            ),
            (s.kind in SCHEDULES, f"norm.schedule.kind={s.kind!r} must be one of {SCHEDULES}"),
            (t.lr > 0, f"train.lr={t.lr} must be positive"),
            (t.steps >= 1, f"train.steps={t.steps} must be at least 1"),
            (t.batch_size >= 1, f"train.batch_size={t.batch_size} must be at least 1"),
            (cfg.eval.every >= 1, f"eval.every={cfg.eval.every} must be at least 1"),
            (
                cfg.logger.mode in LOGGER_MODES,
                f"logger.mode={cfg.logger.mode!r} must be one of {LOGGER_MODES}",
            ),
            (
                s.r_max >= 1,
                f"norm.schedule.r_max={s.r_max} must be at least 1 (1 disables the r correction)",
            ),
            (
                s.d_max >= 0,
                f"norm.schedule.d_max={s.d_max} must be at least 0 (0 disables the d correction)",
            ),
            (
                mb is None or n.kind in BATCH_NORMS,
                f"norm.microbatch={mb} only applies to batchnorm/batchrenorm; {n.kind} normalizes "
                "each example on its own (set norm.microbatch=null)",
            ),
            (
                mb is None or (mb >= 2 and t.batch_size % mb == 0),
                f"norm.microbatch={mb} must be at least 2 and divide train.batch_size={t.batch_size}",
            ),
            (
                n.kind not in BATCH_NORMS or t.batch_size >= 2,
                f"train.batch_size={t.batch_size} gives {n.kind} one value per feature in the "
                "hidden layer: use train.batch_size >= 2",
            ),
            (
                cfg.sampler.kind != "pairs"
                or (cfg.sampler.per_label >= 2 and t.batch_size % cfg.sampler.per_label == 0),
                f"sampler.per_label={cfg.sampler.per_label} must be at least 2 and divide "
                f"train.batch_size={t.batch_size}",
            ),
            (
                cfg.model.name != "inception_v3" or n.kind in BATCH_NORMS,
                f"norm.kind={n.kind} is CPU-scale only; scale=paper converts Inception-v3's "
                "batch norms, so use batchnorm or batchrenorm",
            ),
        ]
    )


def norm_kwargs(cfg: DictConfig, total_steps: int) -> dict:
    """The constructor arguments of every norm layer, from ``cfg.norm``."""
    n = cfg.norm
    if n.kind == "groupnorm":
        return {"groups": n.groups, "eps": n.eps}
    if n.kind == "layernorm":
        return {"eps": n.eps}
    if n.kind == "none":
        return {}
    kw = {"momentum": n.momentum, "eps": n.eps, "microbatch": n.microbatch}
    if n.sync_stats:
        kw["sync_stats"] = True
    if n.kind == "batchrenorm":
        kw["r_max"], kw["d_max"] = renorm_schedules(n.schedule, total_steps)
    return kw


def renorm_schedules(s: DictConfig, total_steps: int):
    """``(r_max, d_max)``: the paper's ramps, their breakpoints scaled by
    ``total_steps / s.paper_steps`` so a short run keeps the paper's proportions (``paper``), or
    constants from step 0 (``fixed``: no plain-BN warm-up, no ramp)."""
    if s.kind == "fixed":
        return float(s.r_max), float(s.d_max)
    r_max = bn.paper_r_max(s.warmup, s.r_max_step, s.r_max)
    d_max = bn.paper_d_max(s.warmup, s.d_max_step, s.d_max)
    if s.paper_steps:
        factor = total_steps / s.paper_steps
        r_max, d_max = r_max.scaled(factor), d_max.scaled(factor)
    return r_max, d_max


def build_model(cfg: DictConfig, in_channels: int, num_classes: int) -> nn.Module:
    kw = norm_kwargs(cfg, cfg.train.steps)
    if cfg.model.name == "small_convnet":
        return SmallConvNet(
            cfg.norm.kind,
            in_channels,
            num_classes,
            widths=cfg.model.widths,
            first_stride=cfg.model.first_stride,
            hidden=cfg.model.hidden,
            fix_gamma=cfg.norm.fix_gamma,
            **kw,
        )
    if cfg.model.name == "inception_v3":
        from torchvision.models import inception_v3

        model = inception_v3(
            weights=None, aux_logits=False, init_weights=True, num_classes=num_classes
        )
        model = bn.convert_norm(model, cfg.norm.kind, **kw)
        if cfg.norm.fix_gamma:
            freeze_norm_scale(model)
        return model
    raise ConfigError(f"model.name={cfg.model.name!r} must be small_convnet or inception_v3")


def build_optimizer(cfg: DictConfig, params) -> torch.optim.Optimizer:
    t = cfg.train
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    if t.optimizer == "rmsprop":
        # The Inception-v3 recipe the Batch Renorm paper trains with: decay 0.9, ε = 1.
        return torch.optim.RMSprop(
            params, lr=t.lr, alpha=0.9, eps=1.0, momentum=t.momentum, weight_decay=t.weight_decay
        )
    raise ConfigError(f"train.optimizer={t.optimizer!r} must be sgd or rmsprop")


def make_sampler(cfg: DictConfig, split, batch_size: int, seed: int):
    if cfg.kind == "pairs":
        return PairBatches(split.labels, batch_size, seed, cfg.per_label)
    return IIDBatches(len(split), batch_size, seed)


class RenormProbe:
    """Reads every Batch Renorm layer's current r_max, d_max and clipped fractions."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, _BatchRenormNd)]

    def __bool__(self) -> bool:
        return bool(self.layers)

    def read(self) -> dict[str, float]:
        first = self.layers[0]
        out = {"renorm/r_max": first.current_r_max, "renorm/d_max": first.current_d_max}
        for i, m in enumerate(self.layers, 1):
            out[f"renorm/layer{i}/r_clipped"] = m.r_clip_fraction
            out[f"renorm/layer{i}/d_clipped"] = m.d_clip_fraction
        return out


def train(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one setup; returns the summary also written to ``summary.json`` (rank 0)."""
    validate(cfg)
    t = cfg.train
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rank, world, device = distributed.setup(cfg.device)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_split, test_split, in_channels, num_classes = load_splits(
        cfg.data, pin_memory=torch.cuda.is_available()
    )

    torch.manual_seed(cfg.seed)
    memory_format = torch.channels_last if t.channels_last else torch.contiguous_format
    model = build_model(cfg, in_channels, num_classes).to(device, memory_format=memory_format)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(cfg, params)
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=t.lr_decay_every, gamma=t.lr_decay_factor
    )
    net = distributed.wrap(model, device)
    sampler = make_sampler(cfg.sampler, train_split, t.batch_size, cfg.seed * 1000 + rank)
    probe = RenormProbe(model)

    def batches(start: int):
        steps = (sampler.indices(s) for s in itertools.count(start))
        return train_split.batches(steps, seed=cfg.seed * 64 + rank, first_step=start)

    def step_fn(step: int, batch) -> dict[str, float | None]:
        x, y = to_device(batch, device, memory_format)
        logits = net(x)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if t.grad_clip:
            nn.utils.clip_grad_norm_(params, t.grad_clip)
        optimizer.step()
        out: dict[str, float | None] = {
            "loss": loss.item(),
            "acc_minibatch": (logits.argmax(1) == y).float().mean().item(),
        }
        if probe and step % cfg.eval.clip_every == 0:
            out.update(probe.read())
        return out

    e = cfg.eval
    test_batches = fixed_batches(test_split, e.batch_size)
    train_batches = fixed_batches(train_split, e.batch_size, e.train_subset)
    train_mode_batches = []
    if e.train_mode:  # test minibatches built like the training ones
        pair_eval = make_sampler(cfg.sampler, test_split, e.pair_batch_size, seed=10_000 + cfg.seed)
        train_mode_batches = [
            pair_eval.indices(s) for s in range(len(test_split) // e.pair_batch_size)
        ]

    def evaluate(step: int) -> dict[str, float]:
        if rank != 0:
            return {}
        metrics = {
            "test/acc": accuracy(model, test_split.batches(test_batches), device, memory_format),
            "train/acc": accuracy(model, train_split.batches(train_batches), device, memory_format),
        }
        if e.train_mode:
            metrics["test/acc_train_mode"] = accuracy(
                model,
                test_split.batches(train_mode_batches),
                device,
                memory_format,
                train_mode=True,
            )
        metrics["lr"] = optimizer.param_groups[0]["lr"]
        return metrics

    name = f"{cfg.setup_name}-s{cfg.seed}"
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
        batch_size=t.batch_size * world,
    )
    loop.start(cfg, job_type=cfg.setup_name, writes_log=rank == 0)  # one process writes the logs
    result = loop.run()

    summary = {
        "name": name,
        "setup": cfg.setup_name,
        "seed": cfg.seed,
        "data": cfg.data.name,
        "model": cfg.model.name,
        "norm": cfg.norm.kind,
        "microbatch": cfg.norm.microbatch,
        "sampler": cfg.sampler.kind,
        "steps": t.steps,
        "world_size": world,
        "steps_per_s": result.steps_per_s,
        "examples_per_s": result.examples_per_s,
        "command": run_command("experiments.renorm"),
    }
    loop.finish(result, summary)
    distributed.cleanup()
    return summary


@hydra.main(version_base="1.3", config_path="../configs", config_name="renorm")
def main(cfg: DictConfig) -> float | None:
    return run_study(train, cfg)


if __name__ == "__main__":
    main()
