"""``bn`` on a GPU: the same numbers as on the CPU and as ``torch.nn`` on the GPU.

Every layer (BN and Batch Renorm, 1d/2d/3d), both implementations and microbatches, in float64
against the CPU; the fast BN against ``torch.nn`` (cuDNN); float16 and bfloat16 inputs; bfloat16
autocast; ``channels_last``; and torch's own BatchNorm ``ModuleInfo`` inputs
(``tests/bn/test_module_db.py``) on the GPU. Skipped where CUDA is absent (CI has none);
``scripts/gpu_check.py`` runs them on a GPU machine.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import bn
from tests.bn.test_module_db import CASES, Case, _buffers, _run

DEVICE = "cuda"
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

LAYERS = {  # dims: (torch.nn's class, BN, Batch Renorm, an input shape)
    1: (nn.BatchNorm1d, bn.BatchNorm1d, bn.BatchRenorm1d, (16, 6)),
    2: (nn.BatchNorm2d, bn.BatchNorm2d, bn.BatchRenorm2d, (8, 6, 5, 7)),
    3: (nn.BatchNorm3d, bn.BatchNorm3d, bn.BatchRenorm3d, (8, 6, 3, 4, 5)),
}
BOUNDS = {"r_max": 1.5, "d_max": 0.5}  # tight, so r and d are clipped on these inputs
VARIANTS = {  # name: (Batch Renorm?, constructor arguments)
    "bn-fast": (False, {}),
    "bn-reference": (False, {"impl": "reference"}),
    "bn-microbatch4": (False, {"microbatch": 4}),
    "brn-fast": (True, BOUNDS),
    "brn-reference": (True, {**BOUNDS, "impl": "reference"}),
    "brn-microbatch4": (True, {**BOUNDS, "microbatch": 4}),
    "brn-reference-microbatch4": (True, {**BOUNDS, "impl": "reference", "microbatch": 4}),
}


def _layer(dims: int, variant: str, dtype=torch.float64) -> nn.Module:
    """A layer with a non-trivial state: weights, and running statistics far from a batch's."""
    renorm, kwargs = VARIANTS[variant]
    layer = LAYERS[dims][2 if renorm else 1](LAYERS[dims][3][1], momentum=0.1, **kwargs)
    g = torch.Generator().manual_seed(dims)
    c = layer.num_features
    with torch.no_grad():
        layer.weight.copy_(torch.rand(c, generator=g) + 0.5)
        layer.bias.copy_(torch.randn(c, generator=g))
        layer.running_mean.copy_(torch.randn(c, generator=g))
        layer.running_var.copy_(torch.rand(c, generator=g) * 3 + 0.2)
    return layer.to(dtype)


def _input(shape, dtype=torch.float64, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(len(shape))
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 0.5).to(device, dtype)


def _step(layer: nn.Module, x: torch.Tensor):
    """Output, input gradient and parameter gradients of one forward + backward pass."""
    x = x.detach().clone().requires_grad_(True)
    y = layer(x)
    dy = torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view(y.shape)
    grads = torch.autograd.grad(y, [x, layer.weight, layer.bias], dy)
    return y, grads


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dims", list(LAYERS))
def test_gpu_matches_cpu_in_float64(dims, variant, training):
    """Output, every gradient and the running statistics after three steps, in float64."""
    cpu = _layer(dims, variant).train(training)
    gpu = copy.deepcopy(cpu).to(DEVICE)
    x = _input(LAYERS[dims][3])
    for step in range(3):
        y0, g0 = _step(cpu, x + step)
        y1, g1 = _step(gpu, (x + step).to(DEVICE))
        torch.testing.assert_close(y1.cpu(), y0)
        for a, b in zip(g1, g0):
            torch.testing.assert_close(a.cpu(), b)
    for k, v in cpu.state_dict().items():
        torch.testing.assert_close(gpu.state_dict()[k].cpu(), v, msg=k)


@pytest.mark.parametrize("renorm", [False, True], ids=["bn", "brn-identity"])
@pytest.mark.parametrize("dims", list(LAYERS))
def test_matches_torch_nn_on_gpu_in_float32(dims, renorm):
    """The fast path against ``torch.nn`` (cuDNN) in float32: Batch Renorm with ``r_max = 1``,
    ``d_max = 0`` is BN in training; both are plain BN with running statistics in eval."""
    torch_cls, bn_cls, brn_cls, shape = LAYERS[dims]
    c = shape[1]
    ours = (brn_cls(c, r_max=1.0, d_max=0.0, momentum=0.1) if renorm else bn_cls(c)).to(DEVICE)
    theirs = torch_cls(c).to(DEVICE)
    theirs.load_state_dict(ours.state_dict())
    x = _input(shape, torch.float32, DEVICE)
    y0, y1 = theirs(x), ours(x)
    for k in ("running_mean", "num_batches_tracked") + (() if renorm else ("running_var",)):
        torch.testing.assert_close(ours.state_dict()[k], theirs.state_dict()[k], msg=k)
    for training in (True, True, False):
        ours.train(training), theirs.train(training)
        if not training:  # Batch Renorm keeps its own running_var convention
            theirs.load_state_dict(ours.state_dict())
        y0, g0 = _step(theirs, x)
        y1, g1 = _step(ours, x)
        torch.testing.assert_close(y1, y0)
        for a, b in zip(g1, g0):
            torch.testing.assert_close(a, b)


HALF = {torch.float16: 2e-3, torch.bfloat16: 2e-2}  # tolerances: a few units of the last place


@pytest.mark.parametrize("dtype", list(HALF), ids=["float16", "bfloat16"])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dims", [1, 2])
def test_half_precision_inputs(dims, variant, dtype):
    """A float16/bfloat16 input with float32 parameters (as under autocast, and as torch.nn
    allows): the output and input gradient come back in the input's dtype, the parameters'
    gradients and running statistics stay float32, and the numbers are the float32 layer's on
    the same (rounded) input, to the half type's precision."""
    reference = _layer(dims, variant, torch.float32).to(DEVICE)
    layer = copy.deepcopy(reference)
    x = _input(LAYERS[dims][3], dtype, DEVICE)
    y, grads = _step(layer, x)
    assert y.dtype == dtype and grads[0].dtype == dtype
    assert grads[1].dtype == grads[2].dtype == torch.float32
    assert layer.running_mean.dtype == layer.running_var.dtype == torch.float32
    y0, grads0 = _step(reference, x.float())
    tol = HALF[dtype]
    torch.testing.assert_close(y.float(), y0, rtol=tol, atol=tol)
    for a, b in zip(grads, grads0):
        torch.testing.assert_close(a.float(), b, rtol=tol, atol=tol * b.abs().max().item())
    for k, v in reference.state_dict().items():
        torch.testing.assert_close(layer.state_dict()[k], v, rtol=tol, atol=tol, msg=k)


@pytest.mark.parametrize("renorm", [False, True], ids=["bn", "brn-identity"])
def test_bfloat16_autocast_matches_torch_nn(renorm):
    """Under bfloat16 autocast after a convolution: the dtype torch.nn's layer returns, and its
    numbers."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, 3).to(DEVICE)
    ours = (
        bn.BatchRenorm2d(8, r_max=1.0, d_max=0.0, momentum=0.1) if renorm else bn.BatchNorm2d(8)
    ).to(DEVICE)
    theirs = nn.BatchNorm2d(8).to(DEVICE)
    x = torch.randn(8, 3, 12, 12, device=DEVICE)
    with torch.autocast(DEVICE, torch.bfloat16):
        h = conv(x)
        y1, y0 = ours(h), theirs(h)
    assert y1.dtype == y0.dtype
    torch.testing.assert_close(y1.float(), y0.float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(ours.running_mean, theirs.running_mean)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_channels_last(variant):
    """A channels_last input gives the contiguous input's numbers, and (whole batch) the memory
    format torch.nn's layer returns."""
    layer = _layer(2, variant, torch.float32).to(DEVICE)
    x = _input(LAYERS[2][3], torch.float32, DEVICE)
    y0, g0 = _step(copy.deepcopy(layer), x)
    y1, g1 = _step(layer, x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(y1, y0)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b)
    if "microbatch" not in variant:
        theirs = nn.BatchNorm2d(6).to(DEVICE)(x.contiguous(memory_format=torch.channels_last))
        assert y1.is_contiguous(memory_format=torch.channels_last) == theirs.is_contiguous(
            memory_format=torch.channels_last
        )


@pytest.mark.parametrize("torch_cls,index,variant,dtype,training", CASES)
def test_module_db_inputs_on_gpu(torch_cls, index, variant, dtype, training):
    """torch's ModuleInfo inputs on the GPU: output, gradients and buffers as torch.nn's layer
    on the GPU (or, for Batch Renorm and microbatches, their documented update rule)."""
    case = Case(torch_cls, index, variant, dtype, training)
    case.ours.to(DEVICE), case.torch.to(DEVICE)
    x = case.x.to(DEVICE)
    before = _buffers(case.ours)
    y1, g1 = _run(case, x)
    y0, g0 = _run(case, x, case.torch)
    torch.testing.assert_close(y1, y0)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b)
    after = _buffers(case.ours)
    for k, v in case.expected_buffers(before, x).items():
        torch.testing.assert_close(after[k], v, msg=k)
