"""experiments.nets.binary_linear: the compiled binary-input layer equals the dense layer."""

import pytest
import torch

import bn
from bn import compiled
from experiments.nets import binary_linear
from experiments.nets.binary_linear import BinaryInputLinear
from experiments.nets.mlp import SigmoidMLP
from tests.compiled_ops import built_or_skip, without_compiler


@pytest.fixture
def op():
    """The compiled operator (a machine with a C++ compiler must be able to build it)."""
    return built_or_skip(
        binary_linear.binary_linear_op(), str(binary_linear.binary_linear_op.error)
    )


def _binary(*shape, density=0.15, seed=0, dtype=torch.uint8):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) < density).to(dtype)


def _dense(x, weight, bias):
    """``Wu + b`` by matrix product: weight (copies, in, out), x (copies or 1, N, in)."""
    y = torch.matmul(weight.transpose(1, 2), x.to(weight.dtype).transpose(1, 2))
    return y if bias is None else y + bias


@pytest.mark.parametrize("out", [3, 4, 10, 100, 130, 300])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_equals_dense_product_float64(op, out, shared, with_bias):
    copies, n, d = 3, 17, 61  # d not a multiple of 8: the pixel scan's tail
    x = _binary(1 if shared else copies, n, d)
    x[0, 0] = 0  # an image with no pixel set
    x[-1, 1] = 1  # and one with every pixel set
    g = torch.Generator().manual_seed(1)
    w = torch.randn(copies, d, out, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(copies, out, 1, dtype=torch.float64, generator=g, requires_grad=True)
    b = b if with_bias else None
    gy = torch.randn(copies, out, n, dtype=torch.float64, generator=g)
    y, ref = op(x, w, b), _dense(x, w, b)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    params = [w] if b is None else [w, b]
    for got, want in zip(torch.autograd.grad(y, params, gy), torch.autograd.grad(ref, params, gy)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.float32, torch.float64])
def test_input_dtypes(op, dtype):
    x = _binary(2, 9, 40, dtype=dtype)
    w = torch.randn(2, 40, 7)
    torch.testing.assert_close(op(x, w, None), _dense(x, w, None))


def test_float32_close_to_float64(op):
    x = _binary(3, 60, 784, density=0.13)
    w = torch.randn(3, 784, 100, dtype=torch.float64) * 0.1
    torch.testing.assert_close(
        op(x, w.float(), None).double(), _dense(x, w, None), rtol=1e-5, atol=1e-5
    )


def test_gradcheck(op):
    x = _binary(2, 5, 19, density=0.4)
    w = torch.randn(2, 19, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 6, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda w, b: op(x, w, b), (w, b))


@pytest.mark.parametrize("bad", [torch.tensor(2, dtype=torch.uint8), torch.tensor(0.5)])
@pytest.mark.parametrize("where", [11, 17])  # in a word of 8 pixels, in the row's last 4
def test_a_value_other_than_0_or_1_is_an_error(op, bad, where):
    x = _binary(1, 4, 20, dtype=bad.dtype)
    x[0, 2, where] = bad
    with pytest.raises(RuntimeError, match="other than 0 and 1"):
        op(x, torch.randn(1, 20, 5), None)


def test_gradient_of_the_bias_alone_and_no_gradient(op):
    """The ones are kept for a weight gradient only; a bias gradient or none needs no ones."""
    x, gy = _binary(2, 6, 30), torch.randn(2, 4, 6, dtype=torch.float64)
    w = torch.randn(2, 30, 4, dtype=torch.float64)
    b = torch.randn(2, 4, 1, dtype=torch.float64, requires_grad=True)
    (gb,) = torch.autograd.grad(op(x, w, b), b, gy)
    torch.testing.assert_close(gb, gy.sum(-1, keepdim=True))
    with torch.no_grad():
        y = op(x, w.requires_grad_(), b)
    assert y.grad_fn is None
    torch.testing.assert_close(y, _dense(x, w, b))


def test_input_gradient_and_double_backward_are_clear_errors(op):
    w = torch.randn(1, 20, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match="no gradient"):
        op(_binary(1, 4, 20).float().requires_grad_(), w, None)
    y = op(_binary(1, 4, 20), w, None)
    with pytest.raises(RuntimeError, match="no double backward.*BN_COMPILED=0"):
        torch.autograd.grad(y.pow(2).sum(), w, create_graph=True)


def test_layer_compiled_equals_its_dense_fallback(op):
    layer = BinaryInputLinear(3, 50, 20).double()
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = _binary(3, 8, 50)
    y = layer(x)
    assert "BinaryLinear" in y.grad_fn.name()
    gw = torch.autograd.grad(y.sum(), layer.weight)[0]
    previous = compiled.set_enabled(False)
    try:
        y_dense = layer(x)
    finally:
        compiled.set_enabled(previous)
    assert "BinaryLinear" not in y_dense.grad_fn.name()
    torch.testing.assert_close(y, y_dense)
    torch.testing.assert_close(gw, torch.autograd.grad(y_dense.sum(), layer.weight)[0])


@pytest.mark.parametrize("norm", ["none", "batchnorm"])
def test_network_with_binary_input_layer_equals_the_dense_network(op, norm):
    """Same initial weights (drawn in (out, in) order either way), outputs and gradients."""
    kw = dict(hidden=[16, 16], in_features=40, copies=2, seeds=[3, 4])
    layer = bn.get_norm_layer(norm, dims=1)
    dense = SigmoidMLP(layer, **kw).double()
    sparse = SigmoidMLP(layer, binary_input=True, **kw).double()
    torch.testing.assert_close(sparse.hidden[0].weight, dense.hidden[0].weight.transpose(1, 2))
    x = _binary(2, 12, 40, density=0.3)
    y_dense, y_sparse = dense(x.double()), sparse(x)
    torch.testing.assert_close(y_sparse, y_dense, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sparse(x[0]), dense(x[0].double()), rtol=1e-12, atol=1e-12)
    g_dense = torch.autograd.grad(y_dense.square().sum(), list(dense.parameters()))
    g_sparse = torch.autograd.grad(y_sparse.square().sum(), list(sparse.parameters()))
    torch.testing.assert_close(g_sparse[0], g_dense[0].transpose(1, 2), rtol=1e-12, atol=1e-12)
    for a, b in zip(g_sparse[1:], g_dense[1:]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_build_failure_warns_and_falls_back(monkeypatch):
    without_compiler(monkeypatch, binary_linear.binary_linear_op)
    monkeypatch.setattr(compiled, "_enabled", True)
    layer = BinaryInputLinear(2, 30, 5).double()
    with torch.no_grad():
        layer.weight.normal_()
    x = _binary(2, 6, 30)
    with pytest.warns(RuntimeWarning, match="could not build the binary-input linear layer"):
        y = layer(x)
    assert "Ninja is required" in binary_linear.binary_linear_op.error
    assert "BinaryLinear" not in y.grad_fn.name()
    torch.testing.assert_close(y, _dense(x, layer.weight, layer.bias))


@pytest.mark.slow
def test_bench_inputs_fall_back_to_mnist_like_digits(tmp_path):
    from scripts.bench_mnist import mnist_or_digits

    pixels, source = mnist_or_digits(tmp_path)  # no MNIST files there, and no download
    assert source == "synthetic digits" and pixels.dtype == torch.uint8
    assert pixels.shape == (60_000, 784) and set(pixels.unique().tolist()) == {0, 1}
    assert 0.12 < pixels.float().mean().item() < 0.14  # MNIST binarized at 127: 13.2%
    outside = pixels.view(-1, 28, 28).clone()
    outside[:, 4:24, 4:24] = 0
    assert not outside.any()
