"""What the follow-up literature measures to explain BN (Santurkar et al. 2018, Yang et al. 2019):
gradient-based internal covariate shift, smoothness of the loss along the gradient, Jacobian
singular values and how far they are from an isometry, the correlation between a layer's
components, and the gradient-norm ratio across depth.

Each function takes the network as given and leaves it as it found it (weights, BN statistics,
gradients, train/eval mode, torch's global random state), so a study can call it every K steps
without touching training. Every call of a ``loss_fn`` draws the same random numbers (a network
with noise, e.g. noisy BN, computes the same loss at the same weights), from a generator forked
off the global one.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from experiments.kit.seeds import fixed_seed

LossFn = Callable[[], Tensor]  # the loss of a fixed batch at the model's current weights
Step = Callable[[Tensor, Tensor], Tensor]  # (parameter, its gradient) -> the optimizer's step


@contextlib.contextmanager
def weights_restored(model: nn.Module) -> Iterator[None]:
    """Inside the block the model's weights and buffers may change; after it they are back."""
    saved = copy.deepcopy(model.state_dict())
    try:
        yield
    finally:
        model.load_state_dict(saved)


def _loss(loss_fn: LossFn) -> Tensor:
    """``loss_fn()`` with the same random draws at every call (from torch's CPU generator); the
    global state untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(fixed_seed("loss noise"))
        return loss_fn()


def _grads(loss_fn: LossFn, params: Sequence[Tensor]) -> list[Tensor]:
    return list(torch.autograd.grad(_loss(loss_fn), list(params)))


def _flat(tensors: Sequence[Tensor]) -> Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def gradient_ics(
    model: nn.Module,
    layers: Sequence[Sequence[Tensor]],
    loss_fn: LossFn,
    lr: float,
    step: Step | None = None,
) -> list[dict[str, float]]:
    """Santurkar et al. (2018), Def. 2.1: per layer ``i`` (``layers[i]``: all its parameters),
    ``G_i``, the loss gradient on the batch of ``loss_fn``, and ``G'_i``, the same gradient after
    the optimizer's update of the layers ``j < i`` only: ``p ← p − step(p, g)``, by default
    plain SGD, ``step = lr·g`` (pass the optimizer's, e.g. with weight decay).

    Returns per layer ``ics`` = ``‖G_i − G'_i‖``, ``ics_relative`` = that over ``‖G_i‖`` and
    ``cosine`` = ``cos(G_i, G'_i)``. The model (weights, buffers) is restored afterwards."""
    step = step or (lambda p, g: lr * g)
    params = [p for layer in layers for p in layer]
    with weights_restored(model):
        g = _grads(loss_fn, params)
        originals = [p.detach().clone() for p in params]
        per_layer, k = [], 0
        for layer in layers:
            per_layer.append(g[k : k + len(layer)])
            k += len(layer)
        out = []
        for i, layer in enumerate(layers):
            with torch.no_grad():
                for j in range(i):
                    for p, gj in zip(layers[j], per_layer[j]):
                        p.sub_(step(p, gj))
            g_shifted = _flat(_grads(loss_fn, list(layer)))
            with torch.no_grad():
                for p, original in zip(params, originals):
                    p.copy_(original)
            g_i = _flat(per_layer[i])
            diff = (g_i - g_shifted).norm().item()
            norm = g_i.norm().item()
            cos = torch.nn.functional.cosine_similarity(g_i, g_shifted, dim=0).item()
            out.append(
                {"ics": diff, "ics_relative": diff / norm if norm else float("nan"), "cosine": cos}
            )
    return out


def landscape_along_gradient(
    model: nn.Module, loss_fn: LossFn, etas: Sequence[float], params: Sequence[Tensor] | None = None
) -> dict[str, float | list[float]]:
    """Santurkar et al. (2018), Sec. 3.1: with ``g`` the gradient at the weights ``W``, the
    loss and the gradient at ``W − η·g`` for every ``η`` of ``etas``.

    Returns ``losses`` (one per ``η``; ``inf``/``nan`` kept, a step may diverge), the loss band
    ``loss_min``/``loss_max`` over the finite ones, ``grad_predictiveness`` =
    ``max_η ‖∇L(W − ηg) − g‖`` and ``beta_smoothness`` = ``max_η ‖∇L(W − ηg) − g‖ / ‖ηg‖``
    (over the ``η`` whose loss is finite)."""
    params = [p for p in model.parameters() if p.requires_grad] if params is None else list(params)
    losses, diffs, betas = [], [], []
    with weights_restored(model):
        g = [t.detach() for t in _grads(loss_fn, params)]
        g_norm = _flat(g).norm().item()
        originals = [p.detach().clone() for p in params]
        for eta in etas:
            with torch.no_grad():
                for p, p0, gp in zip(params, originals, g):
                    p.copy_(p0 - eta * gp)
            loss = _loss(loss_fn)
            losses.append(loss.item())
            if not torch.isfinite(loss):
                continue
            g_eta = torch.autograd.grad(loss, params)
            diff = (_flat(g_eta) - _flat(g)).norm().item()
            diffs.append(diff)
            betas.append(diff / (eta * g_norm) if g_norm else float("nan"))
    finite = [v for v in losses if v == v and abs(v) != float("inf")]
    return {
        "losses": losses,
        "loss_min": min(finite, default=float("nan")),
        "loss_max": max(finite, default=float("nan")),
        "grad_predictiveness": max(diffs, default=float("nan")),
        "beta_smoothness": max(betas, default=float("nan")),
    }


def jacobian_singular_values(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """The singular values of ``∂fn(x_b)/∂x_b`` for every example ``x_b`` of ``x``
    (``(batch, d_in)`` → ``(batch, min(d_in, d_out))``, descending). ``fn`` maps one example
    ``(d_in,)`` to ``(d_out,)``: a layer in inference mode (a BN network in training mode couples
    the examples of a batch, so it has no per-example Jacobian)."""
    jac = torch.func.vmap(torch.func.jacrev(fn))(x)  # (batch, d_out, d_in)
    return torch.linalg.svdvals(jac)


def spectrum_summary(svals: Tensor, band: tuple[float, float] = (0.5, 2.0)) -> dict[str, float]:
    """Median, min and max of the singular values, and the fraction within ``band``."""
    v = svals.flatten()
    return {
        "sv_median": v.median().item(),
        "sv_min": v.min().item(),
        "sv_max": v.max().item(),
        "sv_in_band": ((v >= band[0]) & (v <= band[1])).float().mean().item(),
    }


def isometry_gap(svals: Tensor, floor: float = 1e-6) -> float:
    """The mean of ``|log10 σ_i|`` over all the singular values ``svals`` (every example's): 0
    for an isometry, 1 when they are off by a factor of 10 on average. A value below ``floor``
    counts as ``floor`` (at most ``-log10(floor)`` decades each): a rank-deficient Jacobian (a
    ReLU's inactive units) has zeros that float32 returns as rounding noise of ~1e-7."""
    return svals.flatten().clamp_min(floor).log10().abs().mean().item()


def mean_abs_correlation(x: Tensor) -> float:
    """The mean absolute off-diagonal Pearson correlation between the columns of ``x``
    (``(examples, components)``): 0 for uncorrelated components. A constant column counts as
    uncorrelated with every other."""
    centred = x - x.mean(0)
    unit = centred / centred.norm(dim=0).clamp_min(torch.finfo(x.dtype).tiny)
    corr = unit.t() @ unit
    off = ~torch.eye(corr.shape[0], dtype=torch.bool, device=corr.device)
    return corr[off].abs().mean().item()


def first_last_gradient_ratio(weights: Sequence[Tensor], loss: Tensor) -> float:
    """``‖∂loss/∂W_first‖ / ‖∂loss/∂W_last‖`` for the weight matrices ``weights`` (in order):
    Yang et al. (2019) predict exponential growth with depth for BN networks at initialization."""
    first, last = torch.autograd.grad(loss, [weights[0], weights[-1]])
    return (first.norm() / last.norm()).item()
