"""``torch.func`` over models holding ``bn`` layers works as over ``torch.nn``'s, in float64."""

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

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


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_vmap_over_an_ensemble(impl):
    """Model ensembling (``stack_module_state`` + ``vmap``) with batch statistics, as torch's
    documentation does it for BN (``track_running_stats=False``)."""
    models = [
        nn.Sequential(
            nn.Linear(5, 8), bn.BatchNorm1d(8, impl=impl, track_running_stats=False), nn.ReLU()
        ).double()
        for _ in range(3)
    ]
    params, buffers = stack_module_state(models)
    x = torch.randn(10, 5, dtype=torch.float64)
    base = models[0]

    def run(p, b, x):
        return functional_call(base, (p, b), (x,))

    ys = vmap(run, in_dims=(0, 0, None))(params, buffers, x)
    for y, model in zip(ys, models):
        torch.testing.assert_close(y, model(x))
    gs = vmap(grad(lambda p, b, x: run(p, b, x).square().sum()), in_dims=(0, 0, None))(
        params, buffers, x
    )
    for k, model in enumerate(models):
        model.zero_grad()
        model(x).square().sum().backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(gs[name][k], p.grad, msg=name)
