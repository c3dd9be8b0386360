"""``torch.func`` over models holding ``bn`` layers works as over ``torch.nn``'s, in float64."""

import copy

import pytest
import torch
from torch import nn
from torch.func import (
    functional_call,
    grad,
    hessian,
    jacfwd,
    jacrev,
    stack_module_state,
    vmap,
)

import bn

IDENTITY = {"r_max": 1.0, "d_max": 0.0}  # Batch Renorm that is exactly BN in training
LAYERS = {
    "bn-fast": lambda c, dims: (bn.BatchNorm1d, bn.BatchNorm2d)[dims - 1](c),
    "bn-reference": lambda c, dims: (bn.BatchNorm1d, bn.BatchNorm2d)[dims - 1](c, impl="reference"),
    "brn-fast": lambda c, dims: (bn.BatchRenorm1d, bn.BatchRenorm2d)[dims - 1](c, **IDENTITY),
    "brn-reference": lambda c, dims: (bn.BatchRenorm1d, bn.BatchRenorm2d)[dims - 1](
        c, impl="reference", **IDENTITY
    ),
}


def _model(norm: nn.Module, dims: int) -> nn.Module:
    torch.manual_seed(1)
    if dims == 1:
        body = [nn.Linear(5, 8), norm, nn.Tanh(), nn.Linear(8, 3)]
    else:
        body = [nn.Conv2d(2, 8, 3), norm, nn.Tanh(), nn.Flatten(), nn.Linear(8 * 4 * 4, 3)]
    return nn.Sequential(*body).double()


def _maml(model: nn.Module, dims: int) -> dict:
    """The meta-gradient of a two-step MAML inner loop (plain SGD on a support batch, loss on a
    query batch), BN in training mode: second derivatives through every layer."""
    g = torch.Generator().manual_seed(0)
    shape = (16, 5) if dims == 1 else (16, 2, 6, 6)
    support, query = (torch.randn(*shape, dtype=torch.float64, generator=g) for _ in range(2))
    labels = torch.randint(0, 3, (16,), generator=g)

    def loss(params, x):
        buffers = {k: b.clone() for k, b in model.named_buffers()}
        return nn.functional.cross_entropy(functional_call(model, (params, buffers), (x,)), labels)

    def meta(params):
        for _ in range(2):
            step = grad(loss)(params, support)
            params = {k: p - 0.1 * step[k] for k, p in params.items()}
        return loss(params, query)

    return grad(meta)(dict(model.named_parameters()))


@pytest.mark.parametrize("dims", [1, 2], ids=["linear", "conv"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_maml_meta_gradient_equals_torch(layer, dims):
    torch_norm = (nn.BatchNorm1d, nn.BatchNorm2d)[dims - 1](8)
    expected = _maml(_model(torch_norm, dims), dims)
    got = _maml(_model(LAYERS[layer](8, dims), dims), dims)
    assert expected.keys() == got.keys()
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], rtol=1e-10, atol=1e-12, msg=k)


LAYERS_1D = {
    "bn-fast": lambda: bn.BatchNorm1d(3),
    "bn-reference": lambda: bn.BatchNorm1d(3, impl="reference"),
    "bn-microbatch": lambda: bn.BatchNorm1d(3, microbatch=6),
    "brn-fast": lambda: bn.BatchRenorm1d(3, **IDENTITY),
    "brn-reference": lambda: bn.BatchRenorm1d(3, impl="reference", **IDENTITY),
    "brn-microbatch": lambda: bn.BatchRenorm1d(3, microbatch=6, **IDENTITY),
}


def _hessian(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    def loss(x):
        buffers = {k: b.clone() for k, b in layer.named_buffers()}
        return (functional_call(layer, buffers, (x,)) ** 3).sum()

    return hessian(loss)(x)


@pytest.mark.parametrize("layer", list(LAYERS_1D))
def test_hessian_equals_torch(layer):
    """``torch.func.hessian`` (forward mode over reverse mode) through every path."""
    x = torch.randn(6, 3, dtype=torch.float64)
    expected = _hessian(nn.BatchNorm1d(3).double(), x)
    torch.testing.assert_close(_hessian(LAYERS_1D[layer]().double(), x), expected)


ENSEMBLE = {
    "bn-fast": lambda: bn.BatchNorm1d(8, track_running_stats=False),
    "bn-reference": lambda: bn.BatchNorm1d(8, impl="reference", track_running_stats=False),
    "bn-microbatch": lambda: bn.BatchNorm1d(8, microbatch=5),
    "brn": lambda: bn.BatchRenorm1d(8, r_max=2.0, d_max=1.0),
    "brn-schedule": lambda: bn.BatchRenorm1d(8),  # mid-ramp, below
    "brn-microbatch": lambda: bn.BatchRenorm1d(8, r_max=2.0, d_max=1.0, microbatch=5),
}


@pytest.mark.parametrize("layer", list(ENSEMBLE))
def test_vmap_over_an_ensemble(layer):
    """Model ensembling (``stack_module_state`` + ``vmap``): each copy's output, gradients and
    moving statistics are those of the copy run alone (the schedule is evaluated in float32
    under torch.func, as on a GPU: equal to float rounding)."""
    torch.manual_seed(0)
    models = [
        nn.Sequential(nn.Linear(5, 8), ENSEMBLE[layer](), nn.ReLU()).double() for _ in range(3)
    ]
    for model in models:
        if model[1].running_mean is not None:
            with torch.no_grad():
                model[1].running_mean.uniform_(-1, 1)
                model[1].num_batches_tracked.fill_(10_000)
    alone = [copy.deepcopy(m) for m in models]
    params, buffers = stack_module_state(models)
    x = torch.randn(10, 5, dtype=torch.float64)

    def loss(p, b, x):
        return functional_call(models[0], (p, b), (x,)).square().sum()

    grads = vmap(grad(loss), in_dims=(0, 0, None))(params, buffers, x)
    for k, model in enumerate(alone):
        model(x).square().sum().backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(grads[name][k], p.grad, msg=name)
        for name, b in model.named_buffers():
            torch.testing.assert_close(buffers[name][k], b, msg=name)


VMAP_2D = {
    "bn-fast": lambda: bn.BatchNorm2d(4),
    "bn-reference": lambda: bn.BatchNorm2d(4, impl="reference"),
    "bn-microbatch": lambda: bn.BatchNorm2d(4, microbatch=2),
    "brn": lambda: bn.BatchRenorm2d(4, r_max=2.0, d_max=1.0),
    "brn-microbatch": lambda: bn.BatchRenorm2d(4, r_max=2.0, d_max=1.0, microbatch=2),
}


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("layer", list(VMAP_2D))
def test_vmap_runs_on_batching_rules_without_a_fallback_warning(layer, training):
    """``functional_call`` + ``vmap`` over stacked copies: no operation falls back to a loop over
    the batch (torch warns "There is a performance drop because we have not yet implemented the
    batching rule for ..."), and each copy's output and moving statistics are its own."""
    import warnings

    torch.manual_seed(0)
    layers = [VMAP_2D[layer]().double().train(training) for _ in range(3)]
    for norm in layers:
        with torch.no_grad():
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
    alone = [copy.deepcopy(norm) for norm in layers]
    params, buffers = stack_module_state(layers)
    x = torch.randn(3, 8, 4, 5, 5, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = vmap(lambda p, b, x: functional_call(layers[0], (p, b), (x,)))(params, buffers, x)
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == []
    for k, norm in enumerate(alone):
        torch.testing.assert_close(y[k], norm(x[k]))
        for name, b in norm.named_buffers():
            torch.testing.assert_close(buffers[name][k], b, msg=name)


FORWARD_MODE = {
    **LAYERS_1D,
    "bn-microbatch-3": lambda: bn.BatchNorm1d(3, microbatch=2),
    "brn-clipped-microbatch-3": lambda: bn.BatchRenorm1d(3, microbatch=2, r_max=1.3, d_max=0.2),
    "brn-clipped": lambda: bn.BatchRenorm1d(3, r_max=1.3, d_max=0.2),
}


@pytest.mark.parametrize("layer", list(FORWARD_MODE))
def test_forward_mode_equals_reverse_mode(layer):
    """jacfwd (the layers' forward-mode derivative) equals jacrev, with respect to the input and
    the affine parameters, microbatches of 2 and clipped r and d included."""
    norm = FORWARD_MODE[layer]().double()
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1, generator=torch.Generator().manual_seed(0))
        norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
    x = torch.randn(6, 3, dtype=torch.float64) * 1.5 + 0.3

    def f(x, weight, bias):
        buffers = {k: b.clone() for k, b in norm.named_buffers()}
        return functional_call(norm, ({"weight": weight, "bias": bias}, buffers), (x,))

    args = (x, norm.weight.detach(), norm.bias.detach())
    forward = jacfwd(f, argnums=(0, 1, 2))(*args)
    reverse = jacrev(f, argnums=(0, 1, 2))(*args)
    for a, b in zip(forward, reverse, strict=True):
        torch.testing.assert_close(a, b)
