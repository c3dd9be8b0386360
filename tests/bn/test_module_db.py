"""torch's own BatchNorm test inputs through every ``bn`` layer and implementation.

The inputs are the ``ModuleInfo`` entries of ``torch.nn.BatchNorm1d/2d/3d`` that torch's generic
module tests (``test/test_modules.py``) use: affine and not, no bias, ``momentum=None`` (a
cumulative average), not tracking statistics, an empty batch (``N = 0``), 2-5D inputs. Each is run,
in float32 and float64, in training and in eval mode, through six ``bn`` variants, and the
properties those tests check are checked against ``torch.nn``: forward outputs and buffers,
gradients, second derivatives, ``state_dict`` both ways, pickling, non-contiguous inputs, memory
formats, factory arguments, bad arguments.

Variants: BN ``impl="fast"`` and ``"reference"``; Batch Renorm with ``r_max=1, d_max=0`` (exactly
BN in training) in both impls; BN and Batch Renorm with microbatches (statistics per half batch,
compared with torch's layer on each half). ``sync_stats=True`` gets these inputs split over two
processes in ``tests/bn/test_distributed.py``. Deliberate differences from torch, tested as such:
Batch Renorm's ``running_var`` follows its documented convention (``σ² − ε`` with σ the moving
average of ``σ_B``, not the moving average of the unbiased variance); Batch Renorm refuses
``track_running_stats=False``; a non-positive ``eps`` is refused when the layer is built, not at
its first forward pass; microbatch layers keep one running-statistics update per step (the average
over the microbatches), and return a contiguous output for a channels-last input.
"""

from __future__ import annotations

import copy
import inspect
import io
import pickle

import pytest
import torch
from torch import nn

import bn

_frozen = torch.backends.flags_frozen()
from torch.testing._internal.common_modules import module_db  # noqa: E402

if not _frozen:  # importing torch's test helpers freezes torch.backends' flags for the session
    torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True

INFOS = {
    i.module_cls: i
    for i in module_db
    if i.module_cls in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
}
OURS = {
    nn.BatchNorm1d: (bn.BatchNorm1d, bn.BatchRenorm1d),
    nn.BatchNorm2d: (bn.BatchNorm2d, bn.BatchRenorm2d),
    nn.BatchNorm3d: (bn.BatchNorm3d, bn.BatchRenorm3d),
}
IDENTITY = {"r_max": 1.0, "d_max": 0.0}  # Batch Renorm with r = 1, d = 0: BN in training
VARIANTS = {  # name: (Batch Renorm?, constructor arguments, microbatches?)
    "bn-fast": (False, {}, False),
    "bn-reference": (False, {"impl": "reference"}, False),
    "brn-fast": (True, IDENTITY, False),
    "brn-reference": (True, {**IDENTITY, "impl": "reference"}, False),
    "bn-microbatch": (False, {}, True),
    "brn-microbatch": (True, IDENTITY, True),
}
DTYPES = (torch.float32, torch.float64)


def _inputs(torch_cls, dtype=torch.float64, training=True):
    info = INFOS[torch_cls]
    return info.module_inputs_func(info, "cpu", dtype, True, training)


def _torch_arguments(torch_cls, module_input) -> dict:
    """The constructor arguments of a torch ``ModuleInput``, every one named, defaults filled."""
    c = module_input.constructor_input
    bound = inspect.signature(torch_cls).bind(*c.args, **c.kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _cases():
    for torch_cls in INFOS:
        for index, module_input in enumerate(_inputs(torch_cls)):
            for variant, (renorm, _, _) in VARIANTS.items():
                args = _torch_arguments(torch_cls, module_input)
                if renorm and not args["track_running_stats"]:
                    continue  # refused: test_batch_renorm_refuses_not_tracking_stats
                desc = module_input.desc or "default"
                for dtype in DTYPES:
                    for training in (True, False):
                        mode = "train" if training else "eval"
                        name = f"{torch_cls.__name__}-{desc}-{variant}-{str(dtype)[6:]}-{mode}"
                        yield pytest.param(torch_cls, index, variant, dtype, training, id=name)


CASES = list(_cases())


class Case:
    """One torch input run through one ``bn`` variant, and torch's layer built the same way."""

    def __init__(self, torch_cls, index, variant, dtype, training):
        module_input = _inputs(torch_cls, dtype, training)[index]
        self.x = module_input.forward_input.args[0].detach()
        self.args = _torch_arguments(torch_cls, module_input) | {"dtype": dtype}
        self.renorm, extra, self.microbatched = VARIANTS[variant]
        kwargs = dict(self.args, **extra)
        self.groups = 1
        if self.microbatched:
            n = self.x.shape[0]
            kwargs["microbatch"] = max(n // 2, 1)
            self.groups = n // kwargs["microbatch"]
        self.kwargs = kwargs
        self.ours = OURS[torch_cls][self.renorm](**kwargs).train(training)
        self.torch = torch_cls(**self.args).train(training)
        g = torch.Generator().manual_seed(index)
        n = self.torch.num_features
        weight, bias = torch.rand(n, generator=g) + 0.5, torch.randn(n, generator=g)
        with torch.no_grad():  # the same, non-trivial state in both
            for t in (self.ours, self.torch):
                if t.weight is not None:
                    t.weight.copy_(weight)
                if t.bias is not None:
                    t.bias.copy_(bias)
                if t.running_mean is not None:
                    t.running_mean.copy_(torch.linspace(-0.5, 0.5, n))
                    t.running_var.copy_(torch.linspace(0.5, 2.0, n))
                    t.num_batches_tracked.fill_(3)
        self.training = training

    def expected(self, x: torch.Tensor) -> torch.Tensor:
        """torch's output: its layer on the whole batch, or on each microbatch separately."""
        batch_stats = self.training or self.torch.running_mean is None
        if not self.microbatched or not batch_stats or x.numel() == 0:
            return self.torch(x)
        params = dict(self.torch.named_parameters())
        outputs = []
        for chunk in x.chunk(self.groups):
            buffers = {k: b.clone() for k, b in self.torch.named_buffers()}
            outputs.append(torch.func.functional_call(self.torch, (params, buffers), (chunk,)))
        return torch.cat(outputs)

    def expected_buffers(self, before: dict, x: torch.Tensor) -> dict:
        """The running statistics after a step: torch's BN update for whole-batch BN; for Batch
        Renorm and microbatches, their documented rule (one update with the microbatches'
        average; Batch Renorm's σ average stored as ``running_var = σ² − ε``)."""
        after = {k: v.clone() for k, v in before.items()}
        if not (self.training and self.args["track_running_stats"]):
            return after
        after["num_batches_tracked"] += 1
        if x.numel() == 0:
            return after
        if not self.renorm and not self.microbatched:
            return {k: v.clone() for k, v in self.torch.state_dict().items() if k in before}
        chunks = x.detach().double().chunk(self.groups)
        dims = [0, *range(2, x.dim())]
        means = torch.stack([c.mean(dims) for c in chunks]).mean(0)
        variances = torch.stack([c.var(dims, correction=0) for c in chunks])
        count = chunks[0].numel() // x.shape[1]
        momentum = self.args["momentum"]
        f = 1.0 / float(after["num_batches_tracked"]) if momentum is None else momentum
        eps = self.args["eps"]
        rm, rv = before["running_mean"].double(), before["running_var"].double()
        after["running_mean"] = (rm + f * (means - rm)).to(rm.dtype)
        if self.renorm:
            sigma = torch.sqrt(rv + eps)
            sigma = sigma + f * (torch.sqrt(variances + eps).mean(0) - sigma)
            after["running_var"] = sigma.square() - eps
        else:
            unbiased = (variances * count / (count - 1)).mean(0)
            after["running_var"] = rv + f * (unbiased - rv)
        for k in ("running_mean", "running_var"):
            after[k] = after[k].to(before[k].dtype)
        return after


def _buffers(module) -> dict:
    return {
        k: v.clone() for k, v in module.state_dict().items() if not k.endswith(("weight", "bias"))
    }


def _run(case: Case, x: torch.Tensor, layer=None):
    """Output and every gradient (input, weight, bias) of ``layer`` (ours by default) for a fixed
    upstream gradient."""
    layer = case.ours if layer is None else layer
    x = x.clone().requires_grad_(True)
    y = layer(x) if layer is not case.torch else case.expected(x)
    dy = torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view(y.shape)
    params = [p for p in (layer.weight, layer.bias) if p is not None]
    grads = torch.autograd.grad(y, [x, *params], dy, allow_unused=True) if y.requires_grad else ()
    return y, [torch.zeros_like(t) if g is None else g for g, t in zip(grads, [x, *params])]


@pytest.mark.parametrize("torch_cls,index,variant,dtype,training", CASES)
def test_forward_and_buffers(torch_cls, index, variant, dtype, training):
    case = Case(torch_cls, index, variant, dtype, training)
    before = _buffers(case.ours)
    y = case.ours(case.x)
    expected = case.expected(case.x)
    assert y.shape == case.x.shape and y.dtype == dtype
    torch.testing.assert_close(y, expected)
    after = _buffers(case.ours)
    assert after.keys() == before.keys()
    for k, v in case.expected_buffers(before, case.x).items():
        torch.testing.assert_close(after[k], v, msg=k)


@pytest.mark.parametrize("torch_cls,index,variant,dtype,training", CASES)
def test_gradients(torch_cls, index, variant, dtype, training):
    case = Case(torch_cls, index, variant, dtype, training)
    _, ours = _run(case, case.x)
    _, theirs = _run(case, case.x, case.torch)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def _pure(case: Case):
    """The layer as a function of ``(x, weight, bias)`` whose every call starts from the same
    buffers (gradcheck calls it many times)."""
    names = [n for n in ("weight", "bias") if getattr(case.ours, n) is not None]

    def f(x, *params):
        buffers = {k: b.clone() for k, b in case.ours.named_buffers()}
        return torch.func.functional_call(case.ours, (dict(zip(names, params)), buffers), (x,))

    return f, [getattr(case.ours, n).detach().requires_grad_(True) for n in names]


@pytest.mark.slow
@pytest.mark.parametrize(
    "torch_cls,index,variant,dtype,training", [c for c in CASES if c.values[3] == torch.float64]
)
def test_second_derivatives(torch_cls, index, variant, dtype, training):
    """gradcheck and gradgradcheck in float64 (the backward pass of every implementation is
    itself differentiable, as torch's)."""
    case = Case(torch_cls, index, variant, dtype, training)
    f, params = _pure(case)
    inputs = (case.x.clone().requires_grad_(True), *params)
    assert torch.autograd.gradcheck(f, inputs, fast_mode=True)
    assert torch.autograd.gradgradcheck(f, inputs, fast_mode=True)


@pytest.mark.parametrize("torch_cls,index,variant,dtype,training", CASES)
def test_state_dict_both_ways(torch_cls, index, variant, dtype, training):
    case = Case(torch_cls, index, variant, dtype, training)
    case.ours(case.x)  # a step, so the buffers hold something
    theirs = type(case.torch)(**case.args)
    theirs.load_state_dict(case.ours.state_dict(), strict=True)
    back = type(case.ours)(**case.kwargs)
    back.load_state_dict(theirs.state_dict(), strict=True)
    for k, v in case.ours.state_dict().items():
        assert torch.equal(theirs.state_dict()[k], v) and torch.equal(back.state_dict()[k], v)
    x = case.x.detach()
    y = case.ours.eval()(x)
    torch.testing.assert_close(back.eval()(x), y, rtol=0, atol=0)
    if case.args["track_running_stats"]:  # inference is plain BN with the running statistics
        torch.testing.assert_close(theirs.eval()(x), y)


@pytest.mark.slow
@pytest.mark.parametrize("torch_cls,index,variant,dtype,training", CASES)
def test_pickle_deepcopy_and_save(torch_cls, index, variant, dtype, training):
    case = Case(torch_cls, index, variant, dtype, training)
    case.ours(case.x)
    buffer = io.BytesIO()
    torch.save(case.ours, buffer)
    buffer.seek(0)
    copies = [
        copy.deepcopy(case.ours),
        pickle.loads(pickle.dumps(case.ours)),
        torch.load(buffer, weights_only=False),  # our own file
    ]
    x = case.x.detach()
    expected = copy.deepcopy(case.ours)(x)
    for other in copies:
        assert type(other) is type(case.ours) and repr(other) == repr(case.ours)
        torch.testing.assert_close(other(x), expected)


def _non_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The same values in a tensor whose memory holds every other element."""
    doubled = torch.repeat_interleave(x.detach(), 2, dim=-1)
    out = doubled[..., ::2]
    assert x.numel() == 0 or not out.is_contiguous()
    return out


@pytest.mark.parametrize("torch_cls,index,variant,dtype,training", CASES)
def test_non_contiguous_inputs(torch_cls, index, variant, dtype, training):
    reference = Case(torch_cls, index, variant, dtype, training)
    y0, g0 = _run(reference, reference.x)
    case = Case(torch_cls, index, variant, dtype, training)
    y1, g1 = _run(case, _non_contiguous(reference.x))
    torch.testing.assert_close(y1, y0)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(_buffers(case.ours), _buffers(reference.ours))


@pytest.mark.parametrize(
    "torch_cls,index,variant,dtype,training",
    [c for c in CASES if c.values[0] is not nn.BatchNorm1d],
)
def test_memory_format(torch_cls, index, variant, dtype, training):
    """channels_last (4D) and channels_last_3d (5D) inputs: the same numbers as contiguous ones,
    and the output in torch's memory format wherever torch's kernel computes it."""
    fmt = torch.channels_last if torch_cls is nn.BatchNorm2d else torch.channels_last_3d
    reference = Case(torch_cls, index, variant, dtype, training)
    y0, g0 = _run(reference, reference.x)
    case = Case(torch_cls, index, variant, dtype, training)
    y1, g1 = _run(case, reference.x.contiguous(memory_format=fmt))
    torch.testing.assert_close(y1, y0)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b)
    if not case.microbatched:
        theirs = case.torch(case.x.detach().contiguous(memory_format=fmt))
        assert y1.is_contiguous(memory_format=fmt) == theirs.is_contiguous(memory_format=fmt)


@pytest.mark.parametrize("torch_cls", list(INFOS))
@pytest.mark.parametrize("renorm", [False, True], ids=["bn", "brn"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_factory_kwargs(torch_cls, renorm, dtype):
    extra = IDENTITY if renorm else {}
    ours = OURS[torch_cls][renorm](3, device="cpu", dtype=dtype, **extra)
    theirs = torch_cls(3, device="cpu", dtype=dtype)
    assert {k: (v.dtype, v.device) for k, v in ours.state_dict().items()} == {
        k: (v.dtype, v.device) for k, v in theirs.state_dict().items()
    }


@pytest.mark.parametrize("torch_cls", list(INFOS))
@pytest.mark.parametrize("renorm", [False, True], ids=["bn", "brn"])
def test_error_inputs(torch_cls, renorm):
    """torch's error inputs (``eps <= 0``). Deliberate difference: torch raises at the first
    forward pass, ``bn`` when the layer is built."""
    info = INFOS[torch_cls]
    errors = info.module_error_inputs_func(info, "cpu", torch.float32, False, True)
    assert errors
    for error in errors:
        c = error.module_error_input.constructor_input
        with pytest.raises(error.error_type):
            torch_cls(*c.args, **c.kwargs)(*error.module_error_input.forward_input.args)
        with pytest.raises(error.error_type, match="must be positive"):
            OURS[torch_cls][renorm](*c.args, **c.kwargs)


@pytest.mark.parametrize("torch_cls", list(INFOS))
def test_batch_renorm_refuses_not_tracking_stats(torch_cls):
    """Deliberate difference: Batch Renorm normalizes with its moving statistics in training,
    so it cannot do without them."""
    inputs = [
        m for m in _inputs(torch_cls) if not _torch_arguments(torch_cls, m)["track_running_stats"]
    ]
    assert inputs
    for module_input in inputs:
        with pytest.raises(ValueError, match="track_running_stats=False is impossible"):
            OURS[torch_cls][True](**_torch_arguments(torch_cls, module_input))
