"""experiments.nets.mlp_step: the compiled SGD step equals the PyTorch step for every variant the
studies train, and anything it does not serve falls back to the PyTorch step."""

import copy
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import bn
from bn import compiled
from experiments.nets import kernels
from experiments.nets.binary_linear import binary_linear_op
from experiments.nets.mlp import SigmoidMLP
from experiments.nets.mlp_step import SGDStep, fused_reason
from experiments.nets.noisy import CovariateShiftNoise
from tests.compiled_ops import built_or_skip, without_compiler


@pytest.fixture
def op():
    return built_or_skip(kernels.mlp_step_op(), str(kernels.mlp_step_op.error))


def _model(norm="batchnorm", copies=2, noise=False, dtype=torch.float64, norm_kw=None, **kwargs):
    model = SigmoidMLP(
        bn.get_norm_layer(norm, dims=1, **(norm_kw or {})), hidden=(12, 9, 7), in_features=40,
        copies=copies, seeds=range(copies), **kwargs,
    ).to(dtype)  # fmt: skip
    if noise:
        model.norms = nn.ModuleList(nn.Sequential(n, CovariateShiftNoise()) for n in model.norms)
    return model


def _batches(copies, binary, dtype, steps=4, batch=10, shared=False, seed=0, features=40):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = (torch.rand(1 if shared else copies, batch, features, generator=g) < 0.2).to(
            torch.uint8
        )
        if not binary:
            x = torch.rand(x.shape, generator=g, dtype=dtype)
        yield x, torch.randint(0, 10, (copies, batch), generator=g)


def _train_both(model, lr, weight_decay, batches):
    """The same steps on two copies of ``model``: compiled and PyTorch; returns both models and
    the losses of each step."""
    twin = copy.deepcopy(model)
    fused, plain = SGDStep(model, lr, weight_decay), SGDStep(twin, lr, weight_decay, compiled=False)
    assert fused.fallback_reason is None and plain.fallback_reason == "compiled=False"
    losses = []
    for step, (x, y) in enumerate(batches):
        torch.manual_seed(step)  # noisy BN draws from the global generator: the same draws
        a = fused(x, y)
        torch.manual_seed(step)
        losses.append((a, plain(x, y)))
    return model, twin, losses


def _assert_states_close(a, b, **tol):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key], msg=key, **tol)


VARIANTS = [
    # norm, position, activation, noise, weight decay, binary input
    ("none", "before", "sigmoid", False, 0.0, True),
    ("none", "before", "relu", False, 1e-2, False),
    ("batchnorm", "before", "sigmoid", False, 0.0, True),
    ("batchnorm", "before", "sigmoid", False, 0.0, False),
    ("batchnorm", "after", "sigmoid", False, 0.0, True),
    ("batchnorm", "after", "relu", False, 1e-3, False),
    ("batchnorm", "before", "sigmoid", True, 0.0, True),
    ("batchnorm", "after", "sigmoid", True, 1e-2, True),
    ("batchnorm", "before", "relu", False, 1e-3, True),
    ("torch_batchnorm", "before", "sigmoid", False, 0.0, True),
]


@pytest.mark.parametrize("norm,position,activation,noise,decay,binary", VARIANTS)
@pytest.mark.parametrize("copies", [1, 3])
def test_compiled_step_equals_the_pytorch_step_in_float64(
    op, norm, position, activation, noise, decay, binary, copies
):
    norm_kw = {"momentum": 0.3, "eps": 1e-3} if norm != "none" else {}
    model = _model(
        norm, copies, noise, norm_kw=norm_kw, binary_input=binary, norm_position=position,
        activation=activation,
    )  # fmt: skip
    a, b, losses = _train_both(model, 0.7, decay, _batches(copies, binary, torch.float64))
    for fused, plain in losses:
        assert fused.shape == (copies,) and fused.dtype == torch.float64
        torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    _assert_states_close(a, b, rtol=1e-11, atol=1e-12)  # weights, γ, β, running stats, counters
    if a.norms is not None:
        assert int((a.norms[0][0] if noise else a.norms[0]).num_batches_tracked) == 4


@pytest.mark.parametrize("binary", [True, False])
def test_widths_and_a_batch_no_vector_divides(op, binary):
    """Every row block, column strip and cut vector of the step's matrix products (widths and a
    batch that no vector length divides, a strip wider than one), against the PyTorch step."""
    model = SigmoidMLP(
        bn.get_norm_layer("batchnorm", dims=1), hidden=(100, 37, 65), in_features=150, copies=2,
        seeds=range(2), binary_input=binary,
    ).double()  # fmt: skip
    batches = _batches(2, binary, torch.float64, steps=3, batch=70, features=150)
    a, b, losses = _train_both(model, 0.3, 1e-3, batches)
    for fused, plain in losses:
        torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    _assert_states_close(a, b, rtol=1e-11, atol=1e-12)


SHAPES = [(100, 100, 60), (100, 60, 100), (10, 100, 60), (37, 150, 70), (6, 5, 17), (1, 1, 1),
          (7, 3, 200)]  # fmt: skip


def _products(dtype):
    """For every shape in SHAPES, from seeded inputs: the product kernel's results (``kernel``:
    A·B; A·B + bias; fma(alpha, A·B, beta·C) with alpha and beta not 1; Aᵀ·B from A stored
    transposed) and ATen's for the same (``aten``), each computed in this process."""
    g = torch.Generator().manual_seed(0)
    matmul = kernels.build().small_matmul
    out = {}
    for m, k, p in SHAPES:
        a, at = (
            torch.randn(m, k, generator=g, dtype=dtype),
            torch.randn(k, m, generator=g, dtype=dtype),
        )
        b = torch.randn(k, p, generator=g, dtype=dtype)
        bias, c = (
            torch.randn(m, generator=g, dtype=dtype),
            torch.randn(m, p, generator=g, dtype=dtype),
        )
        out[f"{m}x{k}x{p}"] = {
            "inputs": (a, at, b, bias, c),
            "kernel": (
                matmul(a, b), matmul(a, b, bias=bias), matmul(a, b, c=c, beta=0.999, alpha=-0.3),
                matmul(at, b, transpose_a=True),
            ),
            "aten": (
                a @ b, a @ b + bias[:, None], torch.addmm(c, a, b, beta=0.999, alpha=-0.3), at.t() @ b,
            ),
        }  # fmt: skip
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_product_kernel_sums_each_element_in_order_with_fused_multiply_adds(op, dtype):
    """C[i, j] = fma(A[i, K-1], B[K-1, j], ... fma(A[i, 0], B[0, j], 0)): the order every build
    shares, checked element by element for every shape's first and last row; then the epilogues
    (+ bias, fma(alpha, ·, beta·C)) and a transposed A, on top of that sum. The references round
    float64 values to float32 once: float64 holds each product and sum exactly but in rare cases
    of double rounding, which these seeds do not meet."""
    tol = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {}
    for name, case in _products(dtype).items():
        (a, at, b, bias, c), (plain, with_bias, update, transposed) = case["inputs"], case["kernel"]
        for got, want in zip(case["kernel"], case["aten"]):
            torch.testing.assert_close(got, want, msg=name, **tol)
        assert torch.equal(transposed, kernels.build().small_matmul(at.t().contiguous(), b)), name
        assert torch.equal(with_bias, plain + bias[:, None]), name
        if dtype == torch.float64:
            continue  # float64 steps cannot be rounded once through a wider type
        alpha, beta = (torch.tensor(v, dtype=dtype).double() for v in (-0.3, 0.999))
        scaled = (beta * c.double()).to(dtype).double()  # beta·C, one rounding
        assert torch.equal(update, (alpha * plain.double() + scaled).to(dtype)), name
        for i in {0, a.shape[0] - 1}:
            ref = torch.zeros(b.shape[1], dtype=torch.float64)
            for k in range(a.shape[1]):  # a·b is exact in float64: one rounding a step, as an fma
                ref = (ref + a[i, k].double() * b[k].double()).to(dtype).double()
            assert torch.equal(plain[i], ref.to(dtype)), name


def _row_sums(dtype):
    """The binary first layer's sums of weight rows, forward and for the weight's gradient, at
    widths of one, several and many vectors."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for width in (100, 130, 300):
        x = (torch.rand(3, 17, 61, generator=g) < 0.2).to(torch.uint8)
        w = torch.randn(3, 61, width, generator=g, dtype=dtype, requires_grad=True)
        y = binary_linear_op()(x, w, None)
        (grad,) = torch.autograd.grad(y, w, torch.randn(y.shape, generator=g, dtype=dtype))
        out[f"width {width}"] = (y.detach(), grad)
    return out


def _kernels(dtype):
    return {
        "products": {k: v["kernel"] for k, v in _products(dtype).items()},
        "aten": {k: v["aten"] for k, v in _products(dtype).items()},
        "row sums": _row_sums(dtype),
    }


REPO = Path(__file__).resolve().parents[3]


def _in_a_process(args: list[str], capability: str, **kwargs) -> subprocess.CompletedProcess:
    """``python args`` in this checkout, its torch using the instruction set ``capability``."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, timeout=300, check=False, **kwargs
    )


def _kernels_in_a_process(tmp_path, capability: str):
    """The kernels' results in a fresh process whose torch uses ``capability``."""
    path = tmp_path / f"{capability}.pt"
    code = (
        "import sys, torch; from tests.experiments.nets.test_mlp_step import _kernels; "
        "torch.save({str(d): _kernels(d) for d in (torch.float32, torch.float64)}, sys.argv[1])"
    )
    assert _in_a_process(["-c", code, str(path)], capability).returncode == 0
    return torch.load(path, weights_only=True)


@pytest.mark.slow
def test_the_avx2_builds_give_the_avx512_builds_bits(op, tmp_path):
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("needs a CPU whose torch kernels use AVX-512")
    avx2 = _kernels_in_a_process(tmp_path, "avx2")
    for dtype in (torch.float32, torch.float64):
        here = _kernels(dtype)
        for name, results in here["products"].items():
            for i, (c, c2) in enumerate(zip(results, avx2[str(dtype)]["products"][name])):
                assert torch.equal(c, c2), (dtype, name, i)
        for name, (y, grad) in here["row sums"].items():
            y2, grad2 = avx2[str(dtype)]["row sums"][name]
            assert torch.equal(y, y2) and torch.equal(grad, grad2), (dtype, name)


@pytest.mark.slow
def test_where_torch_uses_neither_the_products_are_atens(op, tmp_path):
    plain = _kernels_in_a_process(tmp_path, "default")
    for dtype in (torch.float32, torch.float64):
        for name, results in plain[str(dtype)]["products"].items():
            for i, (c, aten) in enumerate(zip(results, plain[str(dtype)]["aten"][name])):
                assert torch.equal(c, aten), (dtype, name, i)  # ATen's route, bit for bit


@pytest.mark.slow
def test_where_torch_uses_neither_the_step_takes_atens_products(op):
    """The step's other route (ATen's batched products) still equals the PyTorch step: the float64
    tests above, rerun in a process whose torch uses no AVX2."""
    tests = [f"{__file__}::test_widths_and_a_batch_no_vector_divides"] + [
        f"{__file__}::test_compiled_step_equals_the_pytorch_step_in_float64[{case}]"
        for case in ("3-none-before-relu-False-0.01-False", "1-batchnorm-after-sigmoid-True-0.01-True")
    ]  # fmt: skip
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    run = _in_a_process(pytest_args, "default", capture_output=True, text=True)
    assert run.returncode == 0 and "4 passed" in run.stdout, run.stdout[-2000:]


@pytest.mark.parametrize("binary", [True, False])
def test_an_input_shared_by_every_copy(op, binary):
    model = _model(copies=3, binary_input=binary)
    a, b, _ = _train_both(model, 0.5, 1e-3, _batches(3, binary, torch.float64, shared=True))
    _assert_states_close(a, b, rtol=1e-11, atol=1e-12)


def test_a_two_dimensional_input_is_the_same_batch_for_every_copy(op):
    model = _model(copies=2, binary_input=True)
    twin = copy.deepcopy(model)
    x, y = next(_batches(1, True, torch.float64, shared=True))
    y = torch.cat([y, y])
    SGDStep(model, 0.5)(x[0], y)  # (batch, features)
    SGDStep(twin, 0.5, compiled=False)(x, y)
    _assert_states_close(model, twin, rtol=1e-11, atol=1e-12)


def test_float32_matches_to_float_rounding(op):
    model = _model(copies=3, dtype=torch.float32, binary_input=True)
    a, b, losses = _train_both(model, 0.5, 0.0, _batches(3, True, torch.float32, steps=1))
    torch.testing.assert_close(losses[0][0], losses[0][1], rtol=1e-5, atol=1e-6)
    _assert_states_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_diverged_copy_reports_a_non_finite_loss_and_leaves_the_others(op):
    model = _model(copies=2, dtype=torch.float32, binary_input=True)
    with torch.no_grad():
        model.output.weight[1].fill_(float("nan"))
    twin = copy.deepcopy(model)
    x, y = next(_batches(2, True, torch.float32))
    fused, plain = SGDStep(model, 0.5)(x, y), SGDStep(twin, 0.5, compiled=False)(x, y)
    assert fused[0].isfinite() and not fused[1].isfinite() and not plain[1].isfinite()
    torch.testing.assert_close(fused[0], plain[0])
    torch.testing.assert_close(model.output.weight[0], twin.output.weight[0])


def test_a_loss_beyond_float32_range_is_inf_as_in_pytorch(op):
    model = _model("none", copies=1, dtype=torch.float32, binary_input=True, init_std=1e37)
    twin = copy.deepcopy(model)
    x, y = next(_batches(1, True, torch.float32, batch=60))
    assert SGDStep(model, 1.0)(x, y).isinf().all()
    assert SGDStep(twin, 1.0, compiled=False)(x, y).isinf().all()


def test_a_label_out_of_range_is_refused(op):
    step = SGDStep(_model(copies=1, binary_input=True), 0.1)
    x, _ = next(_batches(1, True, torch.float64))
    with pytest.raises(RuntimeError, match="label is outside"):
        step(x, torch.full((1, 10), 10))


def test_the_operator_checks_every_shape_before_reading(op):
    model = _model(copies=2, binary_input=True)
    step = SGDStep(model, 0.1)
    tensors, _, options = step._fused
    x, y = next(_batches(2, True, torch.float64))
    wrong = [w.transpose(1, 2).contiguous() for w in tensors[0]]  # dense layout, binary flag on
    with pytest.raises(RuntimeError, match="hidden weight 0 has shape"):
        op(x, y, wrong, *tensors[1:], [], [], 0.1, 0.0, *options)
    with pytest.raises(RuntimeError, match="the output weight must be"):
        op(x, y, tensors[0], tensors[1], tensors[2][:, :, :3].contiguous(), *tensors[3:], [], [],
           0.1, 0.0, *options)  # fmt: skip


@pytest.mark.parametrize(
    "make,reason",
    [
        (lambda: _model("batchrenorm"), "BatchRenorm1d"),
        (lambda: _model(norm_kw={"microbatch": 5}), "microbatch"),
        (lambda: _model(norm_kw={"momentum": None}), "momentum=None"),
        (lambda: _model(norm_kw={"affine": False}), "affine=False"),
        (lambda: _model(dtype=torch.float16), "float16"),
    ],
)
def test_what_the_compiled_step_does_not_serve_takes_the_pytorch_step(make, reason):
    model = make()
    assert reason in fused_reason(model)
    step = SGDStep(model, 0.1)
    assert reason in step.fallback_reason


@pytest.mark.parametrize("setting,value", [("eps", 1e-2), ("momentum", 0.5)])
def test_norms_with_different_eps_or_momentum_take_the_pytorch_step(setting, value):
    """The compiled step takes one eps and one momentum for every norm: a model whose norms
    differ in either trains with the PyTorch step; the same non-default value in all is served."""
    model = _model(norm_kw={"eps": 1e-3, "momentum": 0.3})
    assert fused_reason(model) is None
    setattr(model.norms[1], setting, value)
    assert "norms with different momentum or eps" in fused_reason(model)
    assert "different momentum or eps" in SGDStep(model, 0.1).fallback_reason


def test_a_frozen_parameter_and_a_subclass_take_the_pytorch_step():
    model = _model()
    model.norms[0].weight.requires_grad_(False)
    assert "frozen" in fused_reason(model)

    class Custom(SigmoidMLP):
        pass

    assert "not a SigmoidMLP" in fused_reason(Custom(bn.BatchNorm1d, copies=1))


@pytest.mark.parametrize("disable", ["BN_COMPILED", "no compiler"])
def test_without_the_kernel_the_pytorch_step_gives_the_same_numbers(monkeypatch, disable):
    if disable == "BN_COMPILED":
        monkeypatch.setattr(compiled, "_enabled", False)
    else:
        without_compiler(monkeypatch, kernels.mlp_step_op)
        monkeypatch.setattr(compiled, "_enabled", True)
    model = _model(copies=2, binary_input=False)
    twin = copy.deepcopy(model)
    fused, plain = SGDStep(model, 0.5), SGDStep(twin, 0.5, compiled=False)
    for x, y in itertools.islice(_batches(2, False, torch.float64), 2):
        if disable == "no compiler" and kernels.mlp_step_op.error is None:
            with pytest.warns(RuntimeWarning, match="could not build the MNIST network's fused"):
                fused(x, y)
        else:
            fused(x, y)
        plain(x, y)
    _assert_states_close(model, twin, rtol=0, atol=0)  # the same path: bit for bit


def test_in_inference_mode_the_step_is_the_pytorch_one(op):
    model = _model(copies=1, binary_input=True).eval()
    twin = copy.deepcopy(model)
    x, y = next(_batches(1, True, torch.float64))
    SGDStep(model, 0.1)(x, y)
    SGDStep(twin, 0.1, compiled=False)(x, y)
    _assert_states_close(model, twin, rtol=0, atol=0)
    assert int(model.norms[0].num_batches_tracked) == 0  # inference: no statistics update
