"""Batch Renorm paper Sec. 4 (Figs. 1-2): BN and Batch Renorm on small and non-i.i.d. minibatches.

    python -m experiments.renorm setup=brn_micro4 seed=1                 # one run
    python -m experiments.renorm -m setup=bn32,brn32,bn_micro4,brn_micro4 seed=0,1
    python -m experiments.renorm scale=paper data.root=/data/imagenet100 setup=brn32   # GPUs
    torchrun --nproc_per_node=8 -m experiments.renorm scale=paper data.root=... setup=brn32

The setups (``configs/renorm/setup/``) differ only in the norm and the sampler;
``scale=cpu`` (a small conv net on Fashion-MNIST or MNIST) and ``scale=paper`` (Inception-v3 on an
image folder, RMSProp) run through the same code. Writes to the Hydra run directory: the resolved
config, ``metrics.csv`` (``step,metric,value``), ``summary.json`` and ``checkpoint.pt`` (and, with
``eval.step_losses=true``, every step's loss in ``step_losses.pt``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import MISSING, DictConfig
from torch import nn

import bn
from experiments.kit import classify, config
from experiments.kit import inference_modes as modes
from experiments.kit.config import require, seed_dirs, seed_list
from experiments.kit.data import first_examples, fixed_batches, load_splits
from experiments.kit.errors import ConfigError
from experiments.kit.evaluation import copy_accuracies, to_device
from experiments.kit.norm import apply_norm_options, norm_factory, norm_kwargs, weight_norm
from experiments.kit.sampling import IIDBatches, PairBatches
from experiments.kit.seeds import derive_seed
from experiments.kit.trainable import Parts, freeze, gamma_metrics
from experiments.loss_spikes import LossJumps
from experiments.nets.convnet import SmallConvNet
from experiments.nets.norms import norm_layers
from experiments.nets.stacked import GroupedLinear, copy_views

STUDY = "renorm"


@dataclass
class Train(config.ClassifierTrainConf):
    optimizer: str = MISSING  # sgd | rmsprop
    weight_decay: float = MISSING
    lr_decay_every: int = MISSING
    lr_decay_factor: float = MISSING
    trainable: config.Trainable = config.Trainable.all  # which parameters train (the rest frozen)
    # train on the first N training images only (0: every one); the MNIST study's train.subset
    # also logs the accuracy on them, and its default (null) is in its committed records
    first_images: int = 0


@dataclass
class Eval(config.ClassifierEvalConf):
    train_subset: int = MISSING
    train_mode: bool = MISSING
    pair_batch_size: int = MISSING
    clip_every: int = MISSING
    population_batches: int = MISSING
    step_losses: bool = MISSING
    inference_modes: bool = MISSING
    precise_batches: int = MISSING
    precise_counts: list[int] = MISSING


@dataclass
class Sampler:
    kind: str = MISSING  # iid | pairs
    per_label: int = MISSING


@dataclass
class Model:
    name: str = MISSING  # small_convnet | inception_v3
    widths: list[int] = field(default_factory=lambda: [16, 32, 64])
    first_stride: int = 2
    hidden: int = 128
    norm_position: config.NormPosition = config.NormPosition.before  # of the ReLU (small_convnet)
    pool_columns: int = (
        1  # small_convnet: the last average pooling's columns (3: one per item of a triple)
    )


@dataclass
class RenormConf(config.StudyConf):
    train: Train = field(default_factory=Train)
    eval: Eval = field(default_factory=Eval)
    sampler: Sampler = field(default_factory=Sampler)
    model: Model = field(default_factory=Model)


config.register(STUDY, RenormConf)

# Batch Renorm paper Secs. 4.2-4.3, top-1 ImageNet validation accuracy of Inception-v3 (paper
# scale: 50 workers x 32 examples).


# the norms whose inference reads moving averages, which population statistics can replace
RUNNING_STATISTICS = ("batchnorm", "batchrenorm", "torch_batchnorm")


def check(cfg: DictConfig) -> None:
    config.check_common(cfg)
    classify.check_seeds(cfg)
    n, s = cfg.norm, cfg.sampler
    require(
        [
            (s.kind in ("iid", "pairs"), f"sampler.kind={s.kind!r} must be iid or pairs"),
            (
                s.kind != "pairs" or (s.per_label >= 2 and cfg.train.batch_size % s.per_label == 0),
                f"sampler.per_label={s.per_label} must be at least 2 and divide "
                f"train.batch_size={cfg.train.batch_size}",
            ),
            (
                isinstance(cfg.seed, int) or cfg.model.name == "small_convnet",
                f"seed={seed_list(cfg.seed)}: seeds side by side are built for small_convnet; sweep "
                "the seeds of inception_v3 (-m seed=0,1,2)",
            ),
            (
                not cfg.train.first_images or cfg.train.first_images >= cfg.train.batch_size,
                f"train.first_images={cfg.train.first_images} must hold at least one batch (train.batch_size={cfg.train.batch_size})",
            ),
            (
                not cfg.eval.population_batches or n.kind in RUNNING_STATISTICS,
                f"eval.population_batches={cfg.eval.population_batches} needs a norm with moving "
                f"averages to replace; norm={n.kind} has none (set it to 0)",
            ),
            (
                cfg.model.name != "inception_v3" or n.kind in ("batchnorm", "batchrenorm"),
                f"norm={n.kind} is CPU-scale only; scale=paper converts Inception-v3's batch "
                "norms, so use norm=batchnorm or norm=batchrenorm",
            ),
        ]
    )


# torchvision's Inception-v3: a smaller input shrinks below a 3x3 kernel before its last modules
INCEPTION_V3_MIN_SIDE = 75


def check_input_side(cfg: DictConfig, side: int | None) -> None:
    """Raise :class:`ConfigError` if images ``side`` pixels wide are too small for the model."""
    if cfg.model.name == "inception_v3" and side is not None and side < INCEPTION_V3_MIN_SIDE:
        setting = "data.image_size" if cfg.data.name == "image_folder" else f"data={cfg.data.name}"
        raise ConfigError(
            f"{setting} gives {side}x{side} images; Inception-v3 needs at least "
            f"{INCEPTION_V3_MIN_SIDE}x{INCEPTION_V3_MIN_SIDE}"
        )


def build_model(cfg: DictConfig, in_channels: int, num_classes: int) -> nn.Module:
    if cfg.model.name == "small_convnet":
        m, steps = cfg.model, cfg.train.steps
        model = SmallConvNet(
            norm_factory(cfg.norm, 2, steps, True), norm_factory(cfg.norm, 1, steps, True),
            in_channels, num_classes, m.widths, m.first_stride, m.hidden,
            norm_position=str(m.norm_position), pool_columns=m.pool_columns,
            weight_norm=weight_norm(cfg.norm),
        )  # fmt: skip
    elif cfg.model.name == "inception_v3":
        if cfg.model.norm_position != "before":
            raise ConfigError("model.norm_position=after is built for small_convnet only")
        from torchvision.models import inception_v3

        model = inception_v3(
            weights=None, aux_logits=False, init_weights=True, num_classes=num_classes
        )
        kind, kw = str(cfg.norm.kind), norm_kwargs(cfg.norm, cfg.train.steps)
        model = bn.convert_norm(model, kind, **kw)
    else:
        raise ConfigError(f"model.name={cfg.model.name!r} must be small_convnet or inception_v3")
    return apply_norm_options(model, cfg.norm)


def build_copies(
    cfg: DictConfig,
    in_channels: int,
    num_classes: int,
    device: torch.device,
    memory_format: torch.memory_format,
) -> tuple[nn.Module, list[nn.Module]]:
    """``(model, copies)``: for one seed its network and ``[model]``; for a list of seeds the
    stack of their networks (each built as its seed alone would build it) and each copy as a
    plain network whose tensors are views of its block of the stack (what the evaluations run)."""
    build = partial(build_model, cfg, in_channels, num_classes)
    return classify.build_copies(cfg.seed, build, device, memory_format)


def convnet_parts(model: nn.Module, copies: int) -> Parts:
    """:class:`SmallConvNet` (one network, or a stack of ``copies``) as ``train.trainable``
    reads it: its norms, the convolution or linear layer before each, and its classifier."""
    if not isinstance(model, SmallConvNet):
        raise ConfigError("train.trainable other than all is built for model.name=small_convnet")

    def view(layer: nn.Module) -> Callable:
        if isinstance(layer, GroupedLinear):
            return lambda t, k: t[k]
        return lambda t, k: t.chunk(copies)[k]

    feeding, last = [], None
    for layer in model:
        if isinstance(layer, (nn.Conv2d, nn.Linear, GroupedLinear)):
            last = layer
        elif layer in norm_layers(model):
            feeding.append((last.weight, view(last)))
    output = list(model[-1].parameters())
    return Parts(norm_layers(model), feeding, output, copies)


def build_optimizer(t: DictConfig, params) -> torch.optim.Optimizer:
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    if t.optimizer == "rmsprop":
        # The Inception-v3 recipe the Batch Renorm paper trains with: decay 0.9, ε = 1.
        return torch.optim.RMSprop(
            params, lr=t.lr, alpha=0.9, eps=1.0, momentum=t.momentum, weight_decay=t.weight_decay
        )
    raise ConfigError(f"train.optimizer={t.optimizer!r} must be sgd or rmsprop")


def weight_norm_init(cfg: DictConfig, model: nn.Module, train_split, proc) -> None:
    """Salimans & Kingma's data-dependent initialization (:func:`bn.data_dependent_init_`) of a
    weight-normalized network, on one training minibatch per seed drawn from a stream of its
    own (``derive_seed(seed, "wn-init")``), so the training streams are those of every other
    setup; in training mode (a mean-only BN after a layer centres it with the batch's mean). A
    resumed run then loads its checkpoint over it."""
    seeds = seed_list(cfg.seed)
    idx = torch.cat([
        make_sampler(cfg.sampler, train_split, cfg.train.batch_size, derive_seed(s, "wn-init")).indices(0)
        for s in seeds
    ])  # fmt: skip
    (x,) = training_inputs(train_split, [idx], len(seeds), proc)
    bn.data_dependent_init_(model.train(), x)


def make_sampler(cfg: DictConfig, split, batch_size: int, seed: int):
    if cfg.kind == "pairs":
        return PairBatches(split.labels, batch_size, seed, cfg.per_label)
    return IIDBatches(len(split), batch_size, seed)


class RenormProbe:
    """Every Batch Renorm layer's ``r_max``, ``d_max`` and clipped fractions, read every
    ``every`` steps; the loop logs their mean over each evaluation interval. For ``copies``
    networks stacked channel-wise, each copy's own fractions (a list)."""

    def __init__(self, model: nn.Module, every: int, copies: int = 1) -> None:
        self.layers = [m for m in model.modules() if bn.is_batch_renorm(m)]
        self.every, self.copies = every, copies

    def __call__(self, step: int) -> dict[str, Any]:
        if not self.layers or step % self.every:
            return {}
        first = self.layers[0]
        out: dict[str, Any] = {
            "renorm/r_max": first.current_r_max,
            "renorm/d_max": first.current_d_max,
        }
        for i, m in enumerate(self.layers, 1):
            if self.copies == 1:
                r, d = m.r_clip_fraction, m.d_clip_fraction
            else:
                fractions = m.clip_fractions(self.copies)
                r, d = (None, None) if fractions is None else (f.tolist() for f in fractions)
            out[f"renorm/layer{i}/r_clipped"] = r
            out[f"renorm/layer{i}/d_clipped"] = d
        return out


def train_mode_accuracy(
    cfg: DictConfig, proc, models: list[nn.Module], test_split, stack: nn.Module | None = None
):
    """``test/acc_train_mode``: BN in training mode on test minibatches built like the training
    ones (the paper's control for non-i.i.d. minibatches), each seed's own (for seeds side by
    side, the ``stack`` reads them all at once); None when not asked for."""
    if not cfg.eval.train_mode:
        return None
    batches = train_mode_batches(cfg, test_split, cfg.eval.pair_batch_size)
    return partial(train_mode_accuracies, cfg, proc, models, test_split, stack, batches)


def train_mode_batches(cfg: DictConfig, test_split, batch_size: int) -> list[torch.Tensor]:
    """The test minibatches of ``batch_size`` that training-mode evaluation reads, drawn once by
    ``cfg.sampler`` from each seed's own stream (every seed's side by side in one batch)."""
    seeds = seed_list(cfg.seed)
    samplers = [
        make_sampler(cfg.sampler, test_split, batch_size, derive_seed(s, "test-pairs"))
        for s in seeds
    ]
    steps = range(len(test_split) // batch_size)
    return [torch.cat([sampler.indices(s) for sampler in samplers]) for s in steps]


def train_mode_accuracies(
    cfg: DictConfig, proc, models, test_split, stack: nn.Module | None, batches: list
) -> dict[str, list[float]]:
    """``{"test/acc_train_mode": each seed's accuracy}`` in training mode on ``batches``
    (:func:`train_mode_batches`; see :func:`train_mode_accuracy`)."""
    copies = len(seed_list(cfg.seed))
    batches_ = test_split.batches(batches)
    if copies > 1:
        batches_ = (classify.stack_batch(x, y, copies) for x, y in batches_)
    acc = copy_accuracies(models, batches_, proc.device, proc.memory_format, True, stack)
    return {"test/acc_train_mode": acc}


def norm_group(cfg: DictConfig) -> int:
    """``g``, the examples each BN layer normalizes over in training: the microbatch, or the
    whole minibatch."""
    return int(cfg.norm.microbatch or cfg.train.batch_size)


def training_inputs(train_split, index_batches: list[torch.Tensor], copies: int, proc):
    """The network's inputs of ``index_batches`` (every copy's examples side by side in one
    batch), on the run's device, for population statistics."""
    for x, y in train_split.batches(index_batches):
        if copies > 1:
            x, y = classify.stack_batch(x, y, copies)
        yield to_device((x, y), proc.device, proc.memory_format)[0]


def plain_copies(net: nn.Module, models: list[nn.Module], stack: nn.Module | None) -> list:
    """``net`` (the stack, or the one network, with other statistics) as networks to read each
    copy's accuracy through: itself, or for a stack plain copies holding its views (cheaper than
    the stack on large test batches)."""
    if stack is None:
        return [net]
    return copy_views(net, [copy.deepcopy(m) for m in models])


class InferenceModes:
    """With ``eval.inference_modes``, a BN network's test accuracy evaluated beside its moving
    averages (:mod:`experiments.kit.inference_modes`), ``g`` = :func:`norm_group`:

    - at every evaluation, ``test/acc_precise``: Precise BN from ``eval.precise_batches``
      training batches of ``g`` (Bessel's correction);
    - at the last, also ``test/acc_precise_nobessel`` (the same batches, no correction),
      ``test/acc_precise_n<n>`` for each ``n`` of ``eval.precise_counts`` (the first ``⌊n/g⌋``
      batches of the same stream, Bessel's correction), ``test/acc_weighted`` (test-example
      weighting, ``α = 1/g``) and ``test/acc_train_mode`` (training mode on i.i.d. test batches
      of ``g``).

    Each seed draws its own training batches (``derive_seed(seed, "precise-bn")``), the same at
    every evaluation; seeds side by side run as their stack."""

    def __init__(self, cfg: DictConfig, proc, models, splits, stack: nn.Module | None) -> None:
        self.cfg, self.proc, self.models, self.stack = cfg, proc, models, stack
        self.net = stack if stack is not None else models[0]
        self.train_split, self.test_split = splits
        self.g = norm_group(cfg)
        self.test_batches = fixed_batches(self.test_split, cfg.eval.batch_size)
        seeds = seed_list(cfg.seed)
        self.samplers = [
            IIDBatches(len(self.train_split), self.g, derive_seed(s, "precise-bn")) for s in seeds
        ]
        self.counts = {n: max(1, n // self.g) for n in cfg.eval.precise_counts}
        self.train_mode_batches = train_mode_batches(cfg, self.test_split, self.g)

    def _training_batches(self, count: int):
        """The inputs of the first ``count`` batches of every seed's Precise BN stream."""
        idx = [torch.cat([s.indices(step) for s in self.samplers]) for step in range(count)]
        return training_inputs(self.train_split, idx, len(self.samplers), self.proc)

    def _accuracy(self, net: nn.Module, weighted: bool = False) -> list[float]:
        """Each copy's test accuracy with ``net`` (the stack, or the one network, with other
        statistics), each copy run as a plain network (cheaper than the stack on large batches);
        ``weighted``: with test-example weighting."""
        p = self.proc
        nets = plain_copies(net, self.models, self.stack)
        if weighted:
            nets = [modes.example_weighted(n, self.g) for n in nets]
        batches = self.test_split.batches(self.test_batches)
        return copy_accuracies(nets, batches, p.device, p.memory_format)

    def every(self) -> dict[str, list[float]]:
        n = self.cfg.eval.precise_batches
        stats = modes.population_statistics(self.net, self._training_batches(n), [n])
        return {"test/acc_precise": self._accuracy(modes.with_statistics(self.net, stats[n], True))}

    def last(self) -> dict[str, list[float]]:
        n = self.cfg.eval.precise_batches
        counts = [n, *self.counts.values()]
        stats = modes.population_statistics(self.net, self._training_batches(max(counts)), counts)
        out = {
            "test/acc_precise_nobessel": self._accuracy(
                modes.with_statistics(self.net, stats[n], False)
            )
        }
        for count, batches in self.counts.items():
            net = modes.with_statistics(self.net, stats[batches], True)
            out[f"test/acc_precise_n{count}"] = self._accuracy(net)
        out["test/acc_weighted"] = self._accuracy(self.net, weighted=True)
        return out | train_mode_accuracies(
            self.cfg, self.proc, self.models, self.test_split, self.stack, self.train_mode_batches
        )


def population_accuracy(
    cfg: DictConfig, proc, models: list[nn.Module], splits: tuple, stack: nn.Module | None = None
):
    """``test/acc_population_no_bessel``: each seed's test accuracy with Algorithm 2's population
    statistics (BN paper; :func:`bn.set_population_statistics`) in place of its moving averages,
    from ``eval.population_batches`` training batches of its own stream (the same batches at
    every evaluation), set on a copy of the network; None when not asked for.

    Without Bessel's correction: Batch Renorm's moving averages follow each microbatch's biased
    ``σ_B``, and at microbatch 4 the hidden layer's statistics come from 4 values per channel,
    where ``m/(m − 1)`` would make the variance a third larger for a reason that is not the
    moving averages' lag. For seeds side by side the ``stack`` computes every copy's statistics
    in one pass per batch; the accuracy is read through plain copies, as ``test/acc`` is."""
    n = cfg.eval.population_batches
    if not n:
        return None
    seeds, (train_split, test_split) = seed_list(cfg.seed), splits
    samplers = [
        IIDBatches(len(train_split), cfg.train.batch_size, derive_seed(s, "population"))
        for s in seeds
    ]
    batches = [torch.cat([sampler.indices(k) for sampler in samplers]) for k in range(n)]
    test = fixed_batches(test_split, cfg.eval.batch_size)

    def extra() -> dict[str, list[float]]:
        net = copy.deepcopy(stack if stack is not None else models[0])
        inputs = training_inputs(train_split, batches, len(seeds), proc)
        bn.set_population_statistics(net, inputs, n, bessel=False)
        nets = plain_copies(net, models, stack)
        loaded = test_split.batches(test)
        acc = copy_accuracies(nets, loaded, proc.device, proc.memory_format)
        return {"test/acc_population_no_bessel": acc}

    return extra


class StepLosses:
    """Every step's training loss of each seed (:class:`~experiments.loss_spikes.LossJumps`):
    per evaluation interval its largest loss, largest jump and spikes, and the losses so far in
    each run's ``step_losses.pt`` (a float32 tensor, one per step), rewritten at every evaluation
    so a resumed run continues the file from its checkpoint's step."""

    FILE = "step_losses.pt"

    def __init__(self, run_dirs: list[Path], writes: bool) -> None:
        self.run_dirs, self.writes = run_dirs, writes
        self.jumps = LossJumps(len(run_dirs))

    def add(self, step: int, losses: list[float]) -> None:
        if step != self.jumps.steps:  # resumed: the losses before the checkpoint from the files
            self.jumps.restore([self._saved(d) for d in self.run_dirs], step)
        self.jumps.add(losses)

    def _saved(self, run_dir: Path) -> list[float]:
        path = run_dir / self.FILE
        if not path.exists():
            return []
        return torch.load(path, map_location="cpu", weights_only=True).tolist()

    def interval(self) -> dict[str, list[float]]:
        out = self.jumps.interval()
        if self.writes and out:
            for run_dir, losses in zip(self.run_dirs, self.jumps.losses):
                tmp = run_dir / (self.FILE + ".tmp")
                torch.save(torch.tensor(losses, dtype=torch.float32), tmp)
                os.replace(tmp, run_dir / self.FILE)
        return out


class RenormStep(classify.ClassifierStep):
    """The study's own scalars: every Batch Renorm layer's clipping at its steps
    (:class:`RenormProbe`) and, at every evaluation, those asked for: the test accuracy in
    training mode (:func:`train_mode_accuracy`), with population statistics
    (:func:`population_accuracy`), the per-step losses' maxima and jumps (:class:`StepLosses`),
    the batch-size study's inference modes (:class:`InferenceModes`; some at the last
    evaluation only), and with ``train.trainable`` other than ``all`` how many γ are near zero
    (:func:`~experiments.kit.trainable.gamma_metrics`)."""

    def __init__(
        self,
        clipping: RenormProbe,
        train_mode: Callable[[], dict[str, Any]] | None,
        population: Callable[[], dict[str, Any]] | None = None,
        losses: StepLosses | None = None,
        inference: InferenceModes | None = None,
        steps: int = 0,
        gammas: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.clipping, self.train_mode = clipping, train_mode
        self.population, self.losses = population, losses
        self.inference, self.steps, self.done = inference, steps, 0
        self.gammas = gammas

    def step_metrics(self, step: int) -> dict[str, Any]:
        self.done = step + 1
        return self.clipping(step)

    def record_loss(self, step: int, losses: list[float]) -> None:
        if self.losses is not None:
            self.losses.add(step, losses)

    def eval_metrics(self) -> dict[str, Any]:
        out = {} if self.train_mode is None else self.train_mode()
        if self.population is not None:
            out.update(self.population())
        if self.losses is not None:
            out.update(self.losses.interval())
        if self.inference is not None:
            out |= self.inference.every()
            if self.done >= self.steps:
                out |= self.inference.last()
        if self.gammas is not None:
            out |= self.gammas()
        return out


def train(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one setup; returns the summary also written to ``summary.json`` (rank 0)."""
    check(cfg)
    t = cfg.train
    proc = classify.start_process(cfg, out_dir)
    train_split, test_split, in_channels, num_classes = load_splits(
        cfg.data, pin_memory=torch.cuda.is_available()
    )
    train_split = first_examples(train_split, t.first_images)
    check_input_side(cfg, train_split.side)
    seeds = seed_list(cfg.seed)
    stacked = not isinstance(cfg.seed, int)
    if stacked and proc.world > 1:
        raise ConfigError(f"seed={list(seeds)}: a list of seeds trains in one process; launch one seed a process under torchrun")  # fmt: skip
    model, models = build_copies(cfg, in_channels, num_classes, proc.device, proc.memory_format)
    if weight_norm(cfg.norm):
        weight_norm_init(cfg, model, train_split, proc)
    optimizer = build_optimizer(t, [p for p in model.parameters() if p.requires_grad])
    gammas = None
    if t.trainable != "all":
        if t.grad_clip:  # the clipping norm would count the frozen entries' gradients
            raise ConfigError(f"train.trainable={t.trainable} freezes parameters after each step, while train.grad_clip={t.grad_clip} clips by a norm over all of them: set train.grad_clip=null")  # fmt: skip
        parts = convnet_parts(model, len(seeds))
        freezer = freeze(str(t.trainable), model, parts, seeds)
        optimizer.register_step_post_hook(lambda *_: freezer.restore())
        gammas = partial(gamma_metrics, parts.norms, len(seeds))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, t.lr_decay_every, t.lr_decay_factor)
    samplers = [
        make_sampler(cfg.sampler, train_split, t.batch_size, derive_seed(seed, "train", proc.rank))
        for seed in seeds
    ]
    clipping = RenormProbe(model, cfg.eval.clip_every, len(seeds) if stacked else 1)
    stack = model if stacked else None
    train_mode = train_mode_accuracy(cfg, proc, models, test_split, stack)
    population = population_accuracy(cfg, proc, models, (train_split, test_split), stack)
    losses = None
    if cfg.eval.step_losses:
        losses = StepLosses([d for _, d in seed_dirs(cfg.seed, out_dir)], proc.rank == 0)
    inference = None
    if cfg.eval.inference_modes and modes.batch_norms(model):
        inference = InferenceModes(cfg, proc, models, (train_split, test_split), stack)
    loop = classify.classifier_loop(
        cfg,
        proc,
        classify.Classifier(model, optimizer, scheduler, models if stacked else None),
        samplers if stacked else samplers[0],
        (train_split, test_split),
        study=STUDY,
        summary={
            "model": cfg.model.name,
            "microbatch": cfg.norm.microbatch,
            "sampler": cfg.sampler.kind,
        },
        step=RenormStep(clipping, train_mode, population, losses, inference, t.steps, gammas),
    )
    loop.start(cfg, writes_log=proc.rank == 0)
    return classify.finish(loop, loop.run())


@hydra.main(version_base="1.3", config_path=str(config.CONFIGS / STUDY), config_name=STUDY)
def main(cfg: DictConfig) -> float | None:
    return config.run_study(train, cfg)


def cli() -> None:
    """``python -m experiments.renorm`` (``bn-study renorm``)."""
    config.preflight(STUDY)
    main()


if __name__ == "__main__":
    cli()
