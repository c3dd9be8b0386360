"""BN paper Sec. 4.1, Figure 1: a sigmoid MLP on MNIST with and without Batch Normalization.

    python -m experiments.mnist setup=bn seed=1                      # one run
    python -m experiments.mnist setup=bn 'seed=[0,1,2]'              # three seeds side by side
    python -m experiments.mnist -m setup=baseline,bn 'seed=[0,1,2]'  # a sweep: two jobs
    python -m experiments.mnist hydra.run.dir=outputs/run1 resume=true   # continue a killed run

``seed`` is one seed or a list. A list trains one network per seed in lockstep in this process
(:class:`~experiments.nets.mlp.SigmoidMLP` with ``copies``): the same numbers as separate runs
up to float rounding, at less CPU per network (``python -m scripts.bench_studies``). Each run
writes ``metrics.csv`` (``step,metric,value``), ``unit_percentiles.pt`` and ``summary.json`` to
the Hydra run directory (one seed) or to its ``seed<k>/`` subdirectories (a list); the job's
``checkpoint.pt`` and ``.hydra/config.yaml`` (the resolved config) sit in the Hydra run
directory.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import hydra
import torch
from omegaconf import MISSING, DictConfig
from torch import nn

import bn
from experiments.kit import config
from experiments.kit.config import require, seed_dirs, seed_list, setup_name
from experiments.kit.loop import Run, TrainLoop
from experiments.kit.mlp_harness import Data, MLPTraining, accuracies, load_data, stacked_batches
from experiments.kit.norm import norm_factory
from experiments.kit.probes import (
    SigmoidInputs,
    excess_kurtosis,
    negentropy,
    percentile_drift,
)
from experiments.kit.run_summary import new_run, run_name
from experiments.kit.sampling import FixedBatches, IIDBatches
from experiments.kit.seeds import derive_seed, fixed_seed
from experiments.kit.trainable import Freezer, Parts, freeze, gamma_metrics
from experiments.nets.binary_linear import BinaryInputLinear
from experiments.nets.mlp import SigmoidMLP
from experiments.nets.mlp_step import SGDStep
from experiments.nets.norms import norm_layers
from experiments.nets.outside_gradient import MODES as OUTSIDE_GRADIENT
from experiments.nets.outside_gradient import OutsideGradientNorm

STUDY = "mnist"


@dataclass
class Model:
    hidden: list[int] = MISSING
    init_std: float = MISSING
    norm_position: config.NormPosition = config.NormPosition.before  # of the sigmoid
    # keep each hidden layer's bias before its norm (BN makes it redundant: its gradient is 0)
    norm_bias: bool = False
    # BN with its statistics outside the gradient (experiments/nets/outside_gradient.py): detached,
    # moving, center; null: BN as the paper trains it
    outside_gradient: str | None = None


@dataclass
class Probe:
    unit: int = MISSING
    percentiles: list[float] = MISSING
    # every evaluation: each unit's excess kurtosis and negentropy (quartiles over units logged,
    # every unit's in unit_nongaussianity.pt), and the same on a standard-normal control
    nongaussian: bool = MISSING
    # every evaluation: the norm of each hidden layer's weights and bias (params/layer<l>/...)
    param_norms: bool = False


@dataclass
class Population:
    num_batches: int = MISSING


@dataclass
class Train(config.TrainConf):
    # train on the first N training images only (open question 5's small-data study); every evaluation
    # then also logs train/acc_subset, the accuracy on those N images
    subset: int | None = None
    # one random cut of the training set into batches, kept for the whole run (only the batches'
    # order is reshuffled each epoch); false: batches reshuffled every epoch, as in the paper
    fixed_composition: bool = False
    trainable: config.Trainable = config.Trainable.all  # which parameters train (the rest frozen)


@dataclass
class MnistConf(config.StudyConf):
    resume_safe: ClassVar[tuple[str, ...]] = ("probe.", "population.")  # measurements, not the run
    model: Model = field(default_factory=Model)
    train: Train = field(default_factory=Train)
    probe: Probe = field(default_factory=Probe)
    population: Population = field(default_factory=Population)


config.register(STUDY, MnistConf)


def check(cfg: DictConfig) -> None:
    config.check_common(cfg)
    width = cfg.model.hidden[-1] if cfg.model.hidden else 0
    require(
        [
            (len(cfg.model.hidden) >= 1 and min(cfg.model.hidden) >= 1, f"model.hidden={list(cfg.model.hidden)} must list at least one layer width, each at least 1"),
            (cfg.norm.kind != "groupnorm" and cfg.norm.kind != "layernorm", f"norm={cfg.norm.kind}: this network normalizes each unit over the mini-batch; use none, batchnorm, batchrenorm or torch_batchnorm"),
            (cfg.norm.microbatch is None, "norm.microbatch is not supported by the MNIST study; set norm.microbatch=null"),
            (0 <= cfg.probe.unit < width, f"probe.unit={cfg.probe.unit} must index a unit of the last hidden layer (0..{width - 1})"),
            (
                list(qs := cfg.probe.percentiles) == sorted(set(qs)) and 50 in qs and 0 <= qs[0] < 50 < qs[-1] <= 100,
                f"probe.percentiles={list(cfg.probe.percentiles)} must be increasing values in [0, 100] that include 50 and one on each side (the median and the spread's ends)",
            ),
            (cfg.train.subset is None or cfg.train.subset >= cfg.train.batch_size, f"train.subset={cfg.train.subset} must hold at least one batch (train.batch_size={cfg.train.batch_size})"),
            (cfg.model.outside_gradient in (None, *OUTSIDE_GRADIENT), f"model.outside_gradient={cfg.model.outside_gradient} must be one of {', '.join(OUTSIDE_GRADIENT)} or null"),
            (cfg.model.outside_gradient is None or cfg.norm.kind == "batchnorm", f"model.outside_gradient={cfg.model.outside_gradient} takes BN's place: use norm=batchnorm, not {cfg.norm.kind}"),
            (cfg.model.outside_gradient is None or cfg.model.norm_position == "before", "model.outside_gradient normalizes before the sigmoid: set model.norm_position=before"),
        ]
    )  # fmt: skip


class Figure1Probe:
    """Every evaluation of Figure 1: each copy's test accuracy, the 15/50/85th percentiles of
    every sigmoid's input on the test set (the "typical" one logged), and how far each layer's
    median and spread moved since the last evaluation (internal covariate shift, measured)."""

    def __init__(
        self,
        model: SigmoidMLP,
        data: Data,
        probe: DictConfig,
        runs: list[Run],
        small_data: bool = False,
        gammas: bool = False,
    ) -> None:
        self.model, self.data, self.runs = model, data, runs
        self.gammas = gammas  # train.trainable other than all: how many γ are near zero
        self.small_data = small_data  # train.subset: the training images' accuracy every evaluation
        self.unit, self.qs = probe.unit, list(probe.percentiles)
        self.recorder = SigmoidInputs(model.activations)
        self.history: list[list] = [[] for _ in runs]  # per run: (step, (layers, qs, units))
        # probe.nongaussian (the setting) and nongauss/... (its metrics) are recorded names: kept
        self.measure_nongaussianity = probe.nongaussian
        self.param_norms = probe.param_norms
        self.nongaussianity: list[list] = [[] for _ in runs]  # per run: (step, (2, layers, units))
        self._control: dict[str, float] | None = None

    def evaluate(self, step: int) -> list[dict[str, float]]:
        with self.recorder:
            accs = accuracies(self.model, self.data.x_test, self.data.y_test)
        train_accs = self.small_data and accuracies(
            self.model, self.data.x_train, self.data.y_train
        )
        measured = self.measure_nongaussianity and self.recorder.nongaussianity()
        pct = self.recorder.percentiles(self.qs)
        gammas = gamma_metrics(norm_layers(self.model), len(self.runs)) if self.gammas else {}
        out = []
        for k, run in enumerate(self.runs):
            metrics = {"test/acc": accs[k], **self._typical(pct[k])}
            if train_accs:
                metrics["train/acc_subset"] = train_accs[k]
            if run.alive:
                if self.history[k]:
                    metrics.update(self._shift(self.history[k][-1][1], pct[k]))
                self.history[k].append((step, pct[k]))
                if measured:
                    both = torch.stack([measured[0][k], measured[1][k]]).float()
                    metrics.update(self._nongaussianity_metrics(both))
                    self.nongaussianity[k].append((step, both))
            if self.param_norms:
                metrics.update(self._norms(k))
            metrics.update({key: v[k] for key, v in gammas.items()})
            out.append(metrics)
        return out

    def _norms(self, k: int) -> dict[str, float]:
        """Copy ``k``'s hidden layers: the norm of each one's weights and of its bias (0 for a
        layer without one)."""
        out = {}
        for layer, linear in enumerate(self.model.hidden, 1):
            bias = 0.0 if linear.bias is None else linear.bias[k].norm().item()
            out[f"params/layer{layer}/weight_norm"] = linear.weight[k].norm().item()
            out[f"params/layer{layer}/bias_norm"] = bias
        return out

    def _nongaussianity_metrics(self, both: torch.Tensor) -> dict[str, float]:
        """Per layer, the quartiles over units of the excess kurtosis and the negentropy, and
        the same numbers of a standard-normal sample the size of the test set (the control)."""
        if self._control is None:
            g = torch.Generator().manual_seed(fixed_seed("normal control"))
            normal = torch.randn(both.shape[-1], len(self.data.y_test), generator=g)
            control = torch.stack([excess_kurtosis(normal), negentropy(normal)]).float()
            self._control = self._quartiles(control[:, None], "nongauss/control")
        out = dict(self._control)
        for layer in range(both.shape[1]):
            out.update(self._quartiles(both[:, layer : layer + 1], f"nongauss/layer{layer + 1}"))
        return out

    @staticmethod
    def _quartiles(both: torch.Tensor, prefix: str) -> dict[str, float]:
        qs = torch.tensor([0.25, 0.5, 0.75])
        out = {}
        for name, values in zip(("kurtosis", "negentropy"), both):
            q = torch.nanquantile(values.flatten(), qs)
            out.update(
                {f"{prefix}/{name}_{s}": v.item() for s, v in zip(("q25", "median", "q75"), q)}
            )
        return out

    def _typical(self, pct: torch.Tensor) -> dict[str, float]:
        """The "typical" sigmoid: unit ``probe.unit`` of the last hidden layer."""
        return {
            f"sigmoid_input/p{q:g}": pct[-1, i, self.unit].item() for i, q in enumerate(self.qs)
        }

    def _shift(self, prev: torch.Tensor, pct: torch.Tensor) -> dict[str, float]:
        """Per hidden layer, the mean over units of how far the median and the spread (outer
        percentiles) of the sigmoid input moved since the last evaluation."""
        out = {}
        for layer, moves in enumerate(percentile_drift(prev, pct, self.qs), 1):
            out[f"shift/layer{layer}/median"] = moves["median"].mean().item()
            out[f"shift/layer{layer}/spread"] = moves["spread"].mean().item()
        return out

    def state_dict(self) -> dict:
        return {"history": self.history, "nongauss": self.nongaussianity}  # its checkpoint key

    def load_state_dict(self, state: dict) -> None:
        self.history, self.nongaussianity = state["history"], state["nongauss"]

    def save(self) -> None:
        """Every unit's percentiles at every evaluation, to each run's ``unit_percentiles.pt``."""
        for run, history in zip(self.runs, self.history):
            values = torch.stack([p for _, p in history]) if history else None
            torch.save(
                {"steps": [s for s, _ in history], "percentiles": self.qs, "values": values},
                run.out_dir / "unit_percentiles.pt",
            )
        runs = zip(self.runs, self.nongaussianity) if self.measure_nongaussianity else ()
        for run, measured in runs:
            torch.save(
                {
                    "steps": [s for s, _ in measured],
                    "measures": ["excess_kurtosis", "negentropy"],
                    "values": torch.stack([v for _, v in measured]) if measured else None,
                },
                run.out_dir / "unit_nongaussianity.pt",
            )


def sgd_step(model: SigmoidMLP, lr: float, freezer: Freezer | None = None):
    """Plain SGD (the paper's optimizer here) on every copy's own mean loss
    (:class:`~experiments.nets.mlp_step.SGDStep`: one compiled call where it applies); with a
    ``freezer`` (``train.trainable``), the frozen entries restored after every step."""
    sgd = SGDStep(model, lr)

    def step_fn(step: int, batch) -> dict[str, list[float]]:
        losses = sgd(*batch).tolist()
        if freezer is not None:
            freezer.restore()
        return {"loss": losses}

    return step_fn


def mlp_parts(model: SigmoidMLP) -> Parts:
    """The MLP as ``train.trainable`` reads it: its norms, the hidden layer before each (copy
    ``k``'s weight as ``(units, inputs)``), and its output layer."""

    def view(layer: nn.Module) -> Callable:
        if isinstance(layer, BinaryInputLinear):  # stored (copies, in, out)
            return lambda t, k: t[k].t()
        return lambda t, k: t[k]

    norms = norm_layers(model)
    feeding = [(layer.weight, view(layer)) for layer in model.hidden] if norms else []
    return Parts(norms, feeding, list(model.output.parameters()), model.copies)


def population_sampler(n: int, batch_size: int, seed: int) -> IIDBatches:
    """The training minibatches Algorithm 2 averages over for seed ``seed``: a stream of its own,
    none of any seed's training stream."""
    return IIDBatches(n, batch_size, seed=derive_seed(seed, "population"))


def population_accuracies(
    model: SigmoidMLP, cfg: DictConfig, data: Data, seeds: list[int]
) -> list[dict]:
    """Each copy's test accuracy with Algorithm 2's population statistics (from training
    batches), with and without Bessel's correction, and its training accuracy."""
    finals = [{"train/acc": a} for a in accuracies(model, data.x_train, data.y_train)]
    if cfg.norm.kind == "none" or cfg.model.outside_gradient is not None:
        return finals
    for key, bessel in (("test/acc_population", True), ("test/acc_population_no_bessel", False)):
        m = copy.deepcopy(model)
        samplers = [population_sampler(len(data.y_train), cfg.train.batch_size, s) for s in seeds]
        batches = (x for x, _ in stacked_batches(data, samplers, cfg.train.batch_size)(0))
        bn.set_population_statistics(m, batches, cfg.population.num_batches, bessel=bessel)
        for final, acc in zip(finals, accuracies(m, data.x_test, data.y_test)):
            final[key] = acc
    return finals


def hidden_norm(cfg: DictConfig):
    """The hidden layers' norm: ``cfg.norm``'s, or BN with its statistics outside the gradient
    (``model.outside_gradient``, at ``norm.momentum`` and ``norm.eps``)."""
    mode = cfg.model.outside_gradient
    if mode is None:
        return norm_factory(cfg.norm, 1, cfg.train.steps)
    return lambda n: OutsideGradientNorm(n, mode, momentum=cfg.norm.momentum, eps=cfg.norm.eps)


def make_runs(cfg: DictConfig, out_dir: Path, seeds: list[int]) -> list[Run]:
    own = {
        "norm": {"lr": cfg.train.lr, "init_std": cfg.model.init_std},
        "steps": {"copies": len(seeds), "train_subset": cfg.train.subset},
    }
    return [
        new_run(cfg, STUDY, seed, run_dir, after=own)
        for seed, run_dir in seed_dirs(cfg.seed, out_dir)
    ]


def train(cfg: DictConfig, out_dir: Path) -> list[dict]:
    """Train one network per seed of ``cfg.seed``; returns their summaries (also written to
    each run's ``summary.json``), in seed order."""
    check(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = load_data(cfg.data)
    if cfg.train.subset is not None:
        n = cfg.train.subset
        require(
            [
                (
                    n <= len(data.y_train),
                    f"train.subset={n} is more than the {len(data.y_train)} training images of {cfg.data.name}",
                )
            ]
        )
        data = dataclasses.replace(
            data, train_pixels=data.train_pixels[:n], y_train=data.y_train[:n]
        )
    seeds, batch_size = seed_list(cfg.seed), cfg.train.batch_size
    model = SigmoidMLP(
        hidden_norm(cfg), cfg.model.hidden, cfg.model.init_std,
        in_features=data.train_pixels.shape[1], copies=len(seeds), seeds=seeds,
        binary_input=data.binarize, norm_position=str(cfg.model.norm_position),
        norm_bias=cfg.model.norm_bias,
    )  # fmt: skip
    runs = make_runs(cfg, out_dir, seeds)
    trainable = str(cfg.train.trainable)
    freezer = freeze(trainable, model, mlp_parts(model), seeds)
    small_data = cfg.train.subset is not None
    probe = Figure1Probe(model, data, cfg.probe, runs, small_data, gammas=trainable != "all")
    sampler = FixedBatches if cfg.train.fixed_composition else IIDBatches
    samplers = [sampler(len(data.y_train), batch_size, derive_seed(s, "train")) for s in seeds]
    loop = TrainLoop(
        model=model,
        runs=runs,
        training=MLPTraining(
            data, samplers, batch_size, sgd_step(model, cfg.train.lr, freezer), probe
        ),
        steps=cfg.train.steps,
        eval_every=cfg.eval.every,
        ckpt_dir=out_dir,
        batch_size=batch_size,
        job_name=run_name(setup_name(), *seeds),
    )
    loop.start(cfg)
    result = loop.run()
    finals = population_accuracies(model, cfg, data, seeds) if any(r.alive for r in runs) else None
    probe.save()
    return loop.finish(result, finals)


@hydra.main(version_base="1.3", config_path=str(config.CONFIGS / STUDY), config_name=STUDY)
def main(cfg: DictConfig) -> float | None:
    return config.run_study(train, cfg)


def cli() -> None:
    """``python -m experiments.mnist`` (``bn-study mnist``)."""
    config.preflight(STUDY)
    main()


if __name__ == "__main__":
    cli()
