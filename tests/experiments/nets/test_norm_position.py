"""BN before or after the nonlinearity (open question 1): the modules come in the intended
order and the networks compute what that order says, checked against the layers applied by hand."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bn
from experiments.nets.convnet import SmallConvNet
from experiments.nets.mlp import SigmoidMLP


def _kinds(net: nn.Module) -> list[str]:
    names = {nn.Conv2d: "conv", nn.Linear: "linear", nn.ReLU: "relu"}
    out = []
    for m in net:
        kind = next((v for k, v in names.items() if isinstance(m, k)), None)
        if kind is None and isinstance(m, nn.modules.batchnorm._NormBase):
            kind = "norm"
        if kind is not None:
            out.append(kind)
    return out


def test_convnet_before_and_after():
    before = _kinds(SmallConvNet(widths=(4, 8)))
    after = _kinds(SmallConvNet(widths=(4, 8), norm_position="after"))
    assert before == [
        "conv",
        "norm",
        "relu",
        "conv",
        "norm",
        "relu",
        "linear",
        "norm",
        "relu",
        "linear",
    ]
    assert after == [
        "conv",
        "relu",
        "norm",
        "conv",
        "relu",
        "norm",
        "linear",
        "relu",
        "norm",
        "linear",
    ]


def test_convnet_keeps_its_biases_only_without_a_norm_before_the_relu():
    def biased(net):
        return [m.bias is not None for m in net if isinstance(m, (nn.Conv2d, nn.Linear))]

    assert biased(SmallConvNet(widths=(4,))) == [False, False, True]
    assert biased(SmallConvNet(widths=(4,), norm_position="after")) == [
        True,
        True,
        True,
    ]
    assert biased(SmallConvNet(None, None, widths=(4,))) == [True, True, True]


def test_convnet_after_computes_bn_of_the_relu():
    torch.manual_seed(0)
    net = SmallConvNet(widths=(4,), hidden=6, norm_position="after").double()
    x = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    conv, _, _, _, _, lin, _, _, out = net
    h = F.batch_norm(F.relu(conv(x)), None, None, training=True, eps=net[2].eps)
    h = h.mean((2, 3))
    h = F.batch_norm(F.relu(lin(h)), None, None, training=True, eps=net[7].eps)
    torch.testing.assert_close(net.train()(x), out(h))


def test_mlp_after_computes_bn_of_the_sigmoid():
    net = SigmoidMLP(bn.BatchNorm1d, hidden=(7, 5), in_features=6, norm_position="after", seeds=[0])
    net = net.double()
    with torch.no_grad():
        for layer in net.hidden:
            layer.bias.normal_()  # the hidden layers keep a bias when BN comes after
    x = torch.randn(9, 6, dtype=torch.float64)
    u = x
    for layer in net.hidden:
        z = u @ layer.weight[0].t() + layer.bias[0, :, 0]
        u = F.batch_norm(torch.sigmoid(z), None, None, training=True, eps=net.norms[0].eps)
    expected = u @ net.output.weight[0].t() + net.output.bias[0, :, 0]
    torch.testing.assert_close(net.train()(x)[0], expected)


def test_mlp_before_is_unchanged_by_the_option():
    a = SigmoidMLP(bn.BatchNorm1d, hidden=(7,), in_features=6, seeds=[1])
    b = SigmoidMLP(bn.BatchNorm1d, hidden=(7,), in_features=6, seeds=[1], norm_position="before")
    x = torch.randn(4, 6)
    assert torch.equal(a(x), b(x)) and a.hidden[0].bias is None


def test_an_unknown_position_is_refused():
    with pytest.raises(ValueError, match="norm_position='inside' must be one of"):
        SmallConvNet(norm_position="inside")
    with pytest.raises(ValueError, match="norm_position='inside' must be one of"):
        SigmoidMLP(norm_position="inside")
