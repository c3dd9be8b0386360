"""Why does BN help? The BN paper's claim (less internal covariate shift) and its critics'
measures side by side, on the Figure 1 networks (Santurkar et al., NeurIPS 2018; Yang et al.,
ICLR 2019; definitions below and in :mod:`experiments.kit.measures`).

    python -m experiments.mechanism setup=mech_bn seed=0
    make reproduce-mechanism     # its setups and seeds: make help; results/mechanism/mlp/

The network, data, batch, learning rate and initialisation are ``make reproduce-mnist``'s (the
sigmoid MLP of :mod:`experiments.mnist`, one seed per process). Every ``eval.every`` steps:

1. **Distributional ICS, three ways**: every unit's 15/50/85th percentile of its sigmoid input
   (a) on the test set in inference mode with the moving averages, (b) the same with population
   statistics recomputed just before (Algorithm 2 on ``probe.batches`` fixed training batches, on
   a copy), (c) in training mode on those fixed training batches; how far each unit's median and
   spread moved since the last evaluation, mean and 75th percentile over the units of a layer.
2. **Gradient ICS** (Santurkar et al., Def. 2.1) per layer (its weight, bias and BN's γ, β) on a
   fixed training batch, the earlier layers moved by the run's own SGD step (weight decay too).
3. **The loss along the gradient** at ``probe.etas`` × the learning rate: the loss band,
   gradient predictiveness and effective β-smoothness.
4. **Jacobian singular values**, per example on ``probe.jacobian_examples`` test images:
   (a) ``jacobian/``: per hidden layer ``l >= 2`` of the post-activation ``∂h_l/∂h_{l−1}``
   (``diag(act′)·diag(γ/σ)·W``, scaled by the sigmoid's slope, at most 1/4) and input to
   output, inference mode with the moving statistics. (b) ``jacobian_normalized/``: the BN
   paper's Sec. 3.3 conjecture (``J Jᵀ = I`` for normalized, Gaussian, uncorrelated layer
   inputs) in its own coordinates, at every evaluation from step 0: for every pair of
   consecutive hidden layers ``J_l = ∂x̂_{l+1}/∂x̂_l`` between the normalized pre-activations
   ``x̂_l = (z_l − E[z_l]) / sqrt(Var[z_l] + eps)``, ``z_l = W_l h_{l−1} (+ b_l)``. With BN the
   statistics are the population ones (Algorithm 2 over the ``probe.batches`` fixed training
   batches, on a copy; noisy BN's noise off), ``h_l = act(γ_l x̂_l + β_l)`` and
   ``J_l = diag(1/sqrt(Var[z_{l+1}] + eps))·W_{l+1}·diag(act′(γ_l x̂_l + β_l))·diag(γ_l)``;
   without BN every unit's mean ``μ_l`` and biased variance ``s_l²`` of ``z_l`` over all those
   batches' examples, with the BN layers' eps (:data:`BASELINE_EPS`), ``h_l = act(z_l)`` and
   ``J_l = diag(1/sqrt(s_{l+1}² + eps))·W_{l+1}·diag(act′(z_l))·diag(sqrt(s_l² + eps))``.
   ``act`` is the network's sigmoid or ReLU. ``J_l`` is built in closed form; logged under
   ``jacobian_normalized/layer{l}to{l+1}/``: ``sv_median``, ``sv_min``, ``sv_max``,
   ``sv_in_band`` (in [0.5, 2]) and ``isometry_gap`` (the mean ``|log10 σ_i|`` over examples
   and singular values, 0 for an isometry; a ``σ_i`` below 1e-6, e.g. a ReLU's inactive unit,
   counts as 1e-6). The paper's assumption, per hidden layer:
   ``jacobian_normalized/layer{l}/mean_abs_corr``, the mean absolute off-diagonal correlation
   between the units of ``x̂_l`` over the fixed batches' examples (BN: in the
   population-statistics network). With BN and perfectly white, uncorrelated, linear layers
   the singular values are ``sqrt((m − 1)/m)`` (``m`` = ``train.batch_size``), not 1:
   Algorithm 2's variance is ``m/(m − 1)`` times that of the batch-normalized inputs it sees.
5. **Weights**: per layer ``‖W‖``, ``‖∇W‖`` and the step's relative update ``‖ΔW‖/‖W‖``.

Every unit's percentiles (three ways) go to ``unit_percentiles.pt`` for the figures.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import hydra
import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import Tensor, nn

import bn
from experiments.kit import config
from experiments.kit.config import require
from experiments.kit.loop import Run, TrainLoop
from experiments.kit.measures import (
    gradient_ics,
    isometry_gap,
    jacobian_singular_values,
    landscape_along_gradient,
    mean_abs_correlation,
    spectrum_summary,
)
from experiments.kit.mlp_harness import Data, MLPTraining, accuracies, load_data, stacked_batches
from experiments.kit.norm import norm_factory
from experiments.kit.probes import SigmoidInputs, percentile_drift
from experiments.kit.run_summary import new_run
from experiments.kit.sampling import IIDBatches
from experiments.kit.seeds import derive_seed, fixed_seed
from experiments.nets.binary_linear import BinaryInputLinear
from experiments.nets.mlp import ACTIVATIONS, SigmoidMLP
from experiments.nets.mlp_step import SGDStep, split_noise
from experiments.nets.noisy import CovariateShiftNoise

STUDY = "mechanism"
WAYS = ("moving", "population", "train_mode")  # the three views of the sigmoid inputs
NORMALIZED = "jacobian_normalized"  # the metrics of the Sec. 3.3 probe (module docstring, 4)
BASELINE_EPS = 1e-5  # the BN layers' eps (configs/norm/batchnorm.yaml): the same coordinates
HiddenLayer = tuple[Tensor, Tensor | None, nn.Module | None, nn.Module]  # W, b, BN, activation


@dataclass
class Model:
    hidden: list[int] = MISSING
    init_std: float = MISSING
    noise: bool = MISSING  # Santurkar et al.'s noisy BN: CovariateShiftNoise after every BN
    activation: str = "sigmoid"  # or "relu": the same measurements on a ReLU network


@dataclass
class Train(config.TrainConf):
    weight_decay: float = MISSING  # L2 on the weight matrices (not on biases, γ, β)


@dataclass
class Probe:
    percentiles: list[float] = MISSING
    batches: int = (
        MISSING  # fixed training batches: population statistics (b) and training mode (c)
    )
    etas: list[float] = MISSING  # x train.lr (configs/mechanism.yaml)
    jacobian_examples: int = MISSING


@dataclass
class MechanismConf(config.StudyConf):
    resume_safe: ClassVar[tuple[str, ...]] = ("probe.",)  # measurements, not the run
    model: Model = field(default_factory=Model)
    train: Train = field(default_factory=Train)
    probe: Probe = field(default_factory=Probe)


config.register(STUDY, MechanismConf)


def check(cfg: DictConfig) -> None:
    config.check_common(cfg)
    p = cfg.probe
    require(
        [
            (isinstance(cfg.seed, int), f"seed={cfg.seed} must be one integer (sweep seeds with -m seed=0,1,2)"),
            (not cfg.model.noise or cfg.norm.kind != "none", "model.noise=true adds noise after BN: choose a norm"),
            (len(p.etas) >= 1 and all(e > 0 for e in p.etas), f"probe.etas={list(p.etas)} must be positive"),
            (50 in p.percentiles and len(p.percentiles) >= 3, "probe.percentiles must hold 50 and two others"),
            (cfg.model.activation in ACTIVATIONS,
             f"model.activation={cfg.model.activation} must be one of {', '.join(ACTIVATIONS)}"),
        ]
    )  # fmt: skip


def build_model(cfg: DictConfig, data: Data) -> SigmoidMLP:
    model = SigmoidMLP(
        norm_factory(cfg.norm, 1, cfg.train.steps), cfg.model.hidden, cfg.model.init_std,
        in_features=data.train_pixels.shape[1], copies=1, seeds=[cfg.seed],
        binary_input=data.binarize, activation=cfg.model.activation,
    )  # fmt: skip
    if cfg.model.noise:
        model.norms = nn.ModuleList(nn.Sequential(n, CovariateShiftNoise()) for n in model.norms)
    return model


# -- the network as plain functions of one example (copy 0, inference mode) ----------------------
def layer_functions(model: SigmoidMLP) -> list:
    """``f_l(h) = act(BN(W_l h + b_l))`` of every hidden layer (``act``: the network's sigmoid or
    ReLU) and the output layer's ``W h + b``, for one example ``h`` (a vector), BN with its
    current moving statistics."""
    fns = [_hidden_fn(w, b, norm, act) for w, b, norm, act in _hidden_layers(model)]
    out = model.output
    w, b = out.weight[0].detach(), out.bias[0, :, 0].detach()
    fns.append(lambda h, w=w, b=b: w @ h + b)
    return fns


def _hidden_layers(model: SigmoidMLP) -> list[HiddenLayer]:
    """Copy 0's hidden layers as ``(W, b, BN, act)``: ``W`` as ``(out, in)``, ``b`` (``None``
    with BN), detached; the BN layer without noisy BN's noise, or ``None``."""
    norms = list(model.norms) if model.norms is not None else [None] * len(model.hidden)
    layers = []
    for linear, norm, act in zip(model.hidden, norms, model.activations):
        w = linear.weight[0].t() if isinstance(linear, BinaryInputLinear) else linear.weight[0]
        b = None if linear.bias is None else linear.bias[0, :, 0].detach()
        layers.append((w.detach(), b, _bn_of(norm), act))
    return layers


def _bn_of(norm: nn.Module | None) -> nn.Module | None:
    return None if norm is None else split_noise(norm)[0]  # the noise is off in inference


def _hidden_fn(w: Tensor, b: Tensor | None, norm: nn.Module | None, act: nn.Module):
    units = w.shape[0]  # copy 0's channels of the norm: the first ``units``

    def f(h: Tensor) -> Tensor:
        z = w @ h + (0 if b is None else b)
        if norm is not None:
            z = F.batch_norm(
                z[None], norm.running_mean[:units], norm.running_var[:units],
                norm.weight[:units].detach(), norm.bias[:units].detach(), False, 0.0, norm.eps,
            )[0]  # fmt: skip
        return act(z)

    return f


def jacobian_metrics(model: SigmoidMLP, x: Tensor) -> dict[str, float]:
    """Per hidden layer ``l >= 2`` (the first reads 0/1 pixels) the singular values of
    ``∂h_l/∂h_{l−1}``, and of the input-output Jacobian ``∂logits/∂x``, per example."""
    fns = layer_functions(model)
    out: dict[str, float] = {}
    with torch.no_grad():
        hs = [x.float()]
        for f in fns[:-1]:
            hs.append(torch.stack([f(h) for h in hs[-1]]))
    for layer in range(1, len(fns) - 1):
        sv = jacobian_singular_values(fns[layer], hs[layer])
        out.update({f"jacobian/layer{layer + 1}/{k}": v for k, v in spectrum_summary(sv).items()})

    def whole(h: Tensor) -> Tensor:
        for f in fns:
            h = f(h)
        return h

    sv = jacobian_singular_values(whole, hs[0])
    out.update({f"jacobian/input_output/{k}": v for k, v in spectrum_summary(sv).items()})
    return out


# -- the Jacobian between consecutive normalized pre-activations (BN paper Sec. 3.3) -------------
@dataclass
class NormalizedLayer:
    """A hidden layer in the coordinates of the BN paper's Sec. 3.3: ``x̂ = (z − mean) / scale``
    of its pre-activation ``z = W h + b``, and the activation's input ``u = gain·x̂ + shift``.
    With BN ``gain, shift = γ, β``; without, ``scale, mean`` (``u = z``)."""

    weight: Tensor  # (out, in)
    bias: Tensor | None
    mean: Tensor
    scale: Tensor  # sqrt(Var[z] + eps)
    gain: Tensor
    shift: Tensor
    act: nn.Module


def normalized_layers(model: SigmoidMLP, fixed: list[Tensor]) -> list[NormalizedLayer]:
    """Copy 0's hidden layers in normalized coordinates, statistics over the ``fixed`` training
    batches: with BN its population statistics (Algorithm 2, on a copy; noisy BN's noise off),
    without BN every unit's mean and biased variance of ``z`` over all their examples, plus
    :data:`BASELINE_EPS`."""
    if model.norm_after:
        raise ValueError("normalized_layers: BN after the activation has no x̂ before it")
    if model.norms is None:
        return _standardized(model, _copy0(torch.cat(fixed, dim=-2)))
    m = copy.deepcopy(model)
    bn.set_population_statistics(m, iter(fixed), len(fixed))
    layers = []
    for w, b, norm, act in _hidden_layers(m):
        units = w.shape[0]
        gain = torch.ones_like(w[:, 0]) if norm.weight is None else norm.weight[:units].detach()
        shift = torch.zeros_like(gain) if norm.bias is None else norm.bias[:units].detach()
        scale = (norm.running_var[:units] + norm.eps).sqrt()
        layers.append(NormalizedLayer(w, b, norm.running_mean[:units], scale, gain, shift, act))
    return layers


def _copy0(x: Tensor) -> Tensor:
    """Copy 0's examples of a batch: ``(batch, features)`` or ``(copies, batch, features)``."""
    return x if x.dim() == 2 else x[0]


def _standardized(model: SigmoidMLP, x: Tensor) -> list[NormalizedLayer]:
    layers, h = [], x.to(model.output.weight.dtype)
    with torch.no_grad():
        for w, b, _, act in _hidden_layers(model):
            z = h @ w.t() + (0 if b is None else b)
            var, mean = torch.var_mean(z, dim=0, correction=0)
            scale = (var + BASELINE_EPS).sqrt()
            layers.append(NormalizedLayer(w, b, mean, scale, scale, mean, act))
            h = act(z)
    return layers


def normalized_forward(
    layers: list[NormalizedLayer], x: Tensor
) -> tuple[list[Tensor], list[Tensor]]:
    """Every hidden layer's ``x̂`` and activation input ``u`` for the examples ``x``
    (``(batch, features)``), each ``(batch, units)``."""
    xhats, us = [], []
    h = x.to(layers[0].weight.dtype)
    for layer in layers:
        z = h @ layer.weight.t() + (0 if layer.bias is None else layer.bias)
        xhats.append((z - layer.mean) / layer.scale)
        us.append(layer.gain * xhats[-1] + layer.shift)
        h = layer.act(us[-1])
    return xhats, us


def normalized_jacobians(layers: list[NormalizedLayer], us: list[Tensor]) -> list[Tensor]:
    """``J_l = ∂x̂_{l+1}/∂x̂_l = diag(1/scale_{l+1})·W_{l+1}·diag(act′(u_l)·gain_l)`` per example
    (``us``: :func:`normalized_forward`'s), ``(batch, units_{l+1}, units_l)`` for every
    consecutive pair of hidden layers."""
    jacs = []
    for layer, u, nxt in zip(layers, us, layers[1:]):
        # the activation acts elementwise: its Jacobian's diagonal is one JVP with ones
        slope = torch.func.jvp(layer.act, (u,), (torch.ones_like(u),))[1]
        jacs.append((nxt.weight / nxt.scale[:, None])[None] * (slope * layer.gain)[:, None, :])
    return jacs


def normalized_jacobian_metrics(
    model: SigmoidMLP, fixed: list[Tensor], x: Tensor
) -> dict[str, float]:
    """The BN paper's Sec. 3.3 conjecture in its own coordinates (module docstring, 4): per
    consecutive pair of hidden layers the singular values of ``∂x̂_{l+1}/∂x̂_l`` per example of
    ``x`` (:func:`spectrum_summary` and :func:`isometry_gap`), and per hidden layer the mean
    ``|corr|`` between the components of ``x̂_l`` over the ``fixed`` training batches."""
    layers = normalized_layers(model, fixed)
    out: dict[str, float] = {}
    with torch.no_grad():
        xhats, _ = normalized_forward(layers, _copy0(torch.cat(fixed, dim=-2)))
        for i, xhat in enumerate(xhats):
            out[f"{NORMALIZED}/layer{i + 1}/mean_abs_corr"] = mean_abs_correlation(xhat)
        _, us = normalized_forward(layers, x)
        for i, jac in enumerate(normalized_jacobians(layers, us)):
            summary = _spectrum(jac)
            out.update({f"{NORMALIZED}/layer{i + 1}to{i + 2}/{k}": v for k, v in summary.items()})
    return out


def _spectrum(jac: Tensor) -> dict[str, float]:
    """:func:`spectrum_summary` and :func:`isometry_gap` of every example's ``jac``; NaN if any
    entry is not finite (a diverged network: the SVD would raise)."""
    finite = bool(torch.isfinite(jac).all())
    sv = torch.linalg.svdvals(jac if finite else torch.zeros_like(jac))
    out = {**spectrum_summary(sv), "isometry_gap": isometry_gap(sv)}
    return out if finite else dict.fromkeys(out, float("nan"))


# -- the three views of the sigmoid inputs ------------------------------------------------------
def sigmoid_input_percentiles(
    model: SigmoidMLP,
    recorder: SigmoidInputs,
    qs: list[float],
    fixed: list[Tensor],
    x_test: Tensor,
    step: int = 0,
) -> dict[str, Tensor]:
    """``{way: (layers, len(qs), units)}``: the percentiles of every unit's sigmoid input,
    (a) ``moving``: test set, inference mode; (b) ``population``: the same after Algorithm 2 on
    the ``fixed`` training batches (on a copy; without BN equal to (a)); (c) ``train_mode``: the
    fixed batches in training mode (on a copy, so the moving averages do not move; noisy BN's
    noise drawn from ``fixed_seed("train-mode noise", step)``, not from the run's stream)."""
    out = {}
    with recorder, torch.no_grad():
        model.eval()(x_test)
    out["moving"] = recorder.percentiles(qs)[0]
    if model.norms is None:
        out["population"] = out["moving"]
    else:
        m = copy.deepcopy(model)
        bn.set_population_statistics(m, iter(fixed), len(fixed))
        rec = SigmoidInputs(m.activations)
        with rec, torch.no_grad():
            m.eval()(x_test)
        out["population"] = rec.percentiles(qs)[0]
    m = copy.deepcopy(model).train()
    rec = SigmoidInputs(m.activations)
    with rec, torch.no_grad(), torch.random.fork_rng(devices=[]):  # noisy BN: not the run's draws
        torch.default_generator.manual_seed(fixed_seed("train-mode noise", step))
        for x in fixed:
            m(x)
    out["train_mode"] = rec.percentiles(qs)[0]
    return out


def drift(prev: Tensor, now: Tensor, qs: list[float], prefix: str) -> dict[str, float]:
    """Per layer, how far each unit's median and spread moved (:func:`percentile_drift`): the
    mean and the 75th percentile over the layer's units."""
    out = {}
    for layer, moves in enumerate(percentile_drift(prev, now, qs), 1):
        for name, v in moves.items():
            out[f"{prefix}/layer{layer}/{name}_mean"] = v.mean().item()
            out[f"{prefix}/layer{layer}/{name}_q75"] = v.quantile(0.75).item()
    return out


# -- training -----------------------------------------------------------------------------------
def weight_matrices(model: SigmoidMLP) -> list[Tensor]:
    return [layer.weight for layer in (*model.hidden, model.output)]


def layer_parameters(model: SigmoidMLP) -> list[list[Tensor]]:
    """Each layer's parameters, first to last: a hidden layer's weight (and bias) with its BN's
    γ and β; the output layer's weight and bias."""
    norms = list(model.norms) if model.norms is not None else [None] * len(model.hidden)
    layers = []
    for linear, norm in zip(model.hidden, norms):
        params = [linear.weight] + ([linear.bias] if linear.bias is not None else [])
        bn_layer = _bn_of(norm)
        if bn_layer is not None and bn_layer.weight is not None:
            params += [bn_layer.weight, bn_layer.bias]
        layers.append(params)
    layers.append([model.output.weight, model.output.bias])
    return layers


def sgd_step(model: SigmoidMLP, lr: float, weight_decay: float, every: int):
    """Plain SGD (the MNIST study's, :class:`~experiments.nets.mlp_step.SGDStep`), with L2 on
    the weight matrices; at every ``every``-th step also each layer's ``‖W‖``, ``‖∇W‖`` and
    relative update ``‖ΔW‖/‖W‖`` (the step's). Those are measured by autograd on a copy of the
    network, with the noise draws the step itself then makes, so every step trains the same way
    and a run equals ``make reproduce-mnist``'s network bit for bit."""
    sgd = SGDStep(model, lr, weight_decay)
    layer_of = {id(w): i + 1 for i, w in enumerate(weight_matrices(model))}
    layers = [layer_of.get(id(p)) for p in sgd.params]  # None: a bias, γ or β (no decay)

    def weight_metrics(batch) -> dict[str, float]:
        twin = SGDStep(copy.deepcopy(model), lr, weight_decay, compiled=False)
        with torch.random.fork_rng(devices=[]):  # noisy BN: the step's own draws, not consumed
            _, grads, updates = twin.gradients(*batch)
        out: dict[str, float] = {}
        with torch.no_grad():
            for p, g, u, layer in zip(twin.params, grads, updates, layers):
                if layer:
                    norm = p.norm().item()
                    out[f"weights/layer{layer}/norm"] = norm
                    out[f"weights/layer{layer}/grad_norm"] = g.norm().item()
                    out[f"weights/layer{layer}/relative_update"] = lr * u.norm().item() / norm
        return out

    def step_fn(step: int, batch) -> dict[str, float]:
        out = weight_metrics(batch) if (step + 1) % every == 0 else {}
        return {"loss": sgd(*batch).item(), **out}

    return step_fn


def make_run(cfg: DictConfig, out_dir: Path) -> Run:
    own = {
        "data": {"activation": str(cfg.model.activation)},
        "norm": {
            "noise": cfg.model.noise,
            "weight_decay": cfg.train.weight_decay,
            "lr": cfg.train.lr,
        },
    }
    return new_run(cfg, STUDY, cfg.seed, out_dir, after=own)


def train(cfg: DictConfig, out_dir: Path) -> dict:
    """One network (``cfg.seed``); returns its summary (also ``summary.json``)."""
    check(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = load_data(cfg.data)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, data)
    if cfg.model.noise:  # its own stream: under cfg.seed it would draw the weights' numbers
        torch.manual_seed(derive_seed(cfg.seed, "noise"))
    run = make_run(cfg, out_dir)
    sampler = IIDBatches(len(data.y_train), cfg.train.batch_size, derive_seed(cfg.seed, "train"))
    probe = Probes(cfg, model, data)
    step = sgd_step(model, cfg.train.lr, cfg.train.weight_decay, cfg.eval.every)
    loop = TrainLoop(
        model=model, runs=[run], training=MLPTraining(data, [sampler], cfg.train.batch_size, step, probe),
        steps=cfg.train.steps, eval_every=cfg.eval.every, ckpt_dir=out_dir, batch_size=cfg.train.batch_size,
    )  # fmt: skip
    loop.start(cfg)
    result = loop.run()
    probe.save(out_dir)
    [summary] = loop.finish(result)
    return summary


class Probes:
    """Every evaluation's measurements (the module docstring's 1-4) of one network."""

    def __init__(self, cfg: DictConfig, model: SigmoidMLP, data: Data) -> None:
        self.model, self.data, self.lr = model, data, cfg.train.lr
        self.weight_decay = cfg.train.weight_decay
        self.qs, p = list(cfg.probe.percentiles), cfg.probe
        fixed_sampler = IIDBatches(
            len(data.y_train), cfg.train.batch_size, derive_seed(cfg.seed, "fixed-batch")
        )
        batches = stacked_batches(data, [fixed_sampler], cfg.train.batch_size)(0)
        fixed = [next(batches) for _ in range(p.batches)]
        self.fixed_x = [x for x, _ in fixed]
        self.probe_batch = fixed[0]  # gradient ICS and the landscape: this batch, every time
        self.etas = [e * cfg.train.lr for e in p.etas]
        self.jacobian_x = data.x_test[: p.jacobian_examples]
        self.recorder = SigmoidInputs(model.activations)
        self.history: list[tuple[int, dict[str, Tensor]]] = []

    def evaluate(self, step: int) -> dict[str, float]:
        model = self.model
        [acc] = accuracies(model, self.data.x_test, self.data.y_test)
        metrics = {"test/acc": acc}
        pct = sigmoid_input_percentiles(
            model, self.recorder, self.qs, self.fixed_x, self.data.x_test, step
        )
        if self.history:
            for way in WAYS:
                metrics.update(drift(self.history[-1][1][way], pct[way], self.qs, f"shift/{way}"))
        self.history.append((step, pct))
        metrics.update(self._gradient_measures())
        metrics.update(jacobian_metrics(model.eval(), self.jacobian_x))
        model.train()
        metrics.update(normalized_jacobian_metrics(model, self.fixed_x, self.jacobian_x))
        return metrics

    def _gradient_measures(self) -> dict[str, float]:
        m = copy.deepcopy(self.model).train()
        x, y = self.probe_batch

        def loss_fn() -> Tensor:
            return F.cross_entropy(m(x).transpose(1, 2), y)

        layers = layer_parameters(m)
        matrices = {id(w) for w in weight_matrices(m)}

        def sgd(p: Tensor, g: Tensor) -> Tensor:  # sgd_step's update
            return self.lr * (g + self.weight_decay * p if id(p) in matrices else g)

        out = {}
        for i, ics in enumerate(gradient_ics(m, layers, loss_fn, self.lr, sgd)):
            out.update({f"grad_ics/layer{i + 1}/{k}": v for k, v in ics.items()})
        params = [p for layer in layers for p in layer]
        land = landscape_along_gradient(m, loss_fn, self.etas, params)
        out.update({f"landscape/{k}": v for k, v in land.items() if k != "losses"})
        for eta, loss in zip(self.etas, land["losses"]):
            out[f"landscape/loss_at_{eta / self.lr:g}lr"] = (
                loss if math.isfinite(loss) else float("nan")
            )
        return out

    def state_dict(self) -> list:
        return self.history

    def load_state_dict(self, history: list) -> None:
        self.history = history

    def save(self, out_dir: Path) -> None:
        """Every unit's percentiles, the three ways, at every evaluation: ``unit_percentiles.pt``
        (``values``: ``(evaluations, ways, layers, percentiles, units)``)."""
        values = None
        if self.history:
            values = torch.stack([torch.stack([pct[w] for w in WAYS]) for _, pct in self.history])
        torch.save(
            {"steps": [s for s, _ in self.history], "ways": list(WAYS), "percentiles": self.qs, "values": values},
            out_dir / "unit_percentiles.pt",
        )  # fmt: skip


@hydra.main(version_base="1.3", config_path=str(config.CONFIGS / STUDY), config_name=STUDY)
def main(cfg: DictConfig) -> float | None:
    return config.run_study(train, cfg)


def cli() -> None:
    """``python -m experiments.mechanism`` (``bn-study mechanism``)."""
    config.preflight(STUDY, objective=False)
    main()


if __name__ == "__main__":
    cli()
