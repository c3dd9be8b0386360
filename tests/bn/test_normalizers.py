"""The other normalizers of ``bn``: ℓ1 and ℓ∞ BN, mean-only BN (:mod:`bn.lp_batchnorm`) and
weight normalization (:mod:`bn.weight_norm`): what they compute, their gradients (float64
gradcheck), running statistics in training and eval mode, ``state_dict`` round trips, parity with
torch where torch has the layer, torch.fx and torch.compile."""

import copy
import math
import warnings

import pytest
import torch
from torch import nn

import bn
from tests.steps import assert_same_steps, train_steps

LP = {
    "l1": (bn.L1BatchNorm2d, lambda c, d: c.abs().mean(d) * math.sqrt(math.pi / 2)),
    "linf": (bn.LinfBatchNorm2d, lambda c, d: c.abs().amax(d)),
}


def _x(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 1


@pytest.mark.parametrize("kind", list(LP))
def test_lp_batchnorm_normalizes_by_its_scale_and_tracks_it(kind):
    cls, scale = LP[kind]
    m = cls(4, momentum=0.2, eps=0.0).double()
    with torch.no_grad():
        m.weight.uniform_(0.5, 2)
        m.bias.uniform_(-1, 1)
    x = _x(8, 4, 3, 3)
    dims = [0, 2, 3]
    mean = x.mean(dims, keepdim=True)
    s = scale(x - mean, dims).view(1, -1, 1, 1)
    want = (x - mean) / s * m.weight.view(1, -1, 1, 1) + m.bias.view(1, -1, 1, 1)
    torch.testing.assert_close(m(x), want)
    torch.testing.assert_close(m.running_mean, 0.2 * mean.flatten())
    torch.testing.assert_close(m.running_var, 0.8 + 0.2 * s.flatten() ** 2)
    assert int(m.num_batches_tracked) == 1


def test_l1_scale_estimates_sigma_for_gaussian_values():
    """Hoffer et al.'s constant: on Gaussian values ℓ1 BN divides by about σ, as BN does."""
    x = torch.randn(4096, 3, dtype=torch.float64) * torch.tensor(
        [0.5, 1.0, 4.0], dtype=torch.float64
    )
    m = bn.L1BatchNorm1d(3, momentum=1.0, affine=False).double()
    m(x)
    torch.testing.assert_close(m.running_var.sqrt(), x.std(0), rtol=0.05, atol=0)


@pytest.mark.parametrize("kind", list(LP))
def test_lp_batchnorm_in_eval_mode_is_torch_batchnorm_with_its_buffers(kind):
    cls, _ = LP[kind]
    m = cls(4).double()
    for seed in range(3):
        m(_x(8, 4, 3, 3, seed=seed))
    ref = nn.BatchNorm2d(4).double()
    ref.load_state_dict(m.state_dict())  # the same keys, strictly
    m.load_state_dict(ref.state_dict())
    x = _x(5, 4, 3, 3, seed=9)
    before = copy.deepcopy(m.state_dict())
    torch.testing.assert_close(m.eval()(x), ref.eval()(x))
    for k, v in m.state_dict().items():  # eval mode updates nothing
        torch.testing.assert_close(v, before[k])


@pytest.mark.parametrize(
    "cls",
    [bn.L1BatchNorm2d, bn.LinfBatchNorm2d, bn.MeanOnlyBatchNorm2d],
    ids=["l1", "linf", "mean-only"],
)
def test_gradcheck(cls):
    m = cls(3).double()
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(0.5, 1.5)
    x = _x(4, 3, 2, 2).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, *p: m(x), (x, *m.parameters()))


def test_mean_only_batchnorm_centres_and_uses_its_running_mean():
    m = bn.MeanOnlyBatchNorm1d(4, momentum=0.5).double()
    with torch.no_grad():
        m.bias.uniform_(-1, 1)
    x = _x(16, 4)
    torch.testing.assert_close(m(x), x - x.mean(0) + m.bias)
    torch.testing.assert_close(m.running_mean, 0.5 * x.mean(0))
    assert sorted(m.state_dict()) == ["bias", "num_batches_tracked", "running_mean"]
    assert m.weight is None and m.running_var is None
    torch.testing.assert_close(m.eval()(x), x - m.running_mean + m.bias)
    other = bn.MeanOnlyBatchNorm1d(4).double()
    other.load_state_dict(m.state_dict())
    torch.testing.assert_close(other.eval()(x), m(x))


@pytest.mark.parametrize(
    "cls",
    [bn.L1BatchNorm2d, bn.LinfBatchNorm2d, bn.MeanOnlyBatchNorm2d],
    ids=["l1", "linf", "mean-only"],
)
def test_a_wrong_input_rank_is_refused(cls):
    with pytest.raises(ValueError, match="expected a 4D input"):
        cls(3)(torch.randn(4, 3))


def _wn_pair(layer: str):
    torch.manual_seed(0)
    if layer == "conv":
        ours = bn.WeightNormConv2d(3, 5, 3, padding=1).double()
        plain = nn.Conv2d(3, 5, 3, padding=1).double()
        x = _x(2, 3, 4, 4)
    else:
        ours = bn.WeightNormLinear(6, 5).double()
        plain = nn.Linear(6, 5).double()
        x = _x(4, 6)
    with torch.no_grad():
        plain.weight.copy_(ours.weight_v)
        plain.bias.copy_(ours.bias)
    return ours, plain, x


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_weight_norm_matches_torchs_parametrization(layer):
    ours, plain, x = _wn_pair(layer)
    with torch.no_grad():
        ours.weight_g.mul_(torch.linspace(0.5, 2, ours.weight_g.numel(), dtype=torch.float64).view_as(ours.weight_g))  # fmt: skip
    ref = torch.nn.utils.parametrizations.weight_norm(plain)
    with torch.no_grad():
        ref.parametrizations.weight.original0.copy_(ours.weight_g)
        ref.parametrizations.weight.original1.copy_(ours.weight_v)
    y, y_ref = ours(x), ref(x)
    torch.testing.assert_close(y, y_ref)
    y.square().sum().backward()
    y_ref.square().sum().backward()
    torch.testing.assert_close(ours.weight_g.grad, ref.parametrizations.weight.original0.grad)
    torch.testing.assert_close(ours.weight_v.grad, ref.parametrizations.weight.original1.grad)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad)


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_weight_norm_starts_as_the_plain_layer_and_keeps_g_as_the_weights_length(layer):
    ours, plain, x = _wn_pair(layer)
    torch.testing.assert_close(ours(x), plain(x))
    with torch.no_grad():
        ours.weight_v.mul_(7.0)  # v's scale does not reach the output
    torch.testing.assert_close(ours(x), plain(x))
    norms = ours.normalized_weight.flatten(1).norm(dim=1)
    torch.testing.assert_close(norms, ours.weight_g.flatten())


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_weight_norm_gradcheck(layer):
    ours, _, x = _wn_pair(layer)
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, *p: ours(x), (x, *ours.parameters()))


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_weight_norm_state_dict_round_trip_and_torchs_legacy_keys(layer):
    ours, plain, x = _wn_pair(layer)
    assert sorted(ours.state_dict()) == ["bias", "weight_g", "weight_v"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's deprecated weight_norm
        legacy = torch.nn.utils.weight_norm(copy.deepcopy(plain))
    fresh = copy.deepcopy(ours)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(legacy.state_dict())
    torch.testing.assert_close(fresh(x), legacy(x))
    legacy.load_state_dict(ours.state_dict())
    torch.testing.assert_close(legacy(x), ours(x))


def test_data_dependent_init_standardizes_each_unit_over_the_batch():
    torch.manual_seed(0)
    net = nn.Sequential(
        bn.WeightNormConv2d(3, 6, 3), nn.ReLU(), nn.Flatten(), bn.WeightNormLinear(6 * 16, 5)
    ).double()
    x = _x(32, 3, 6, 6)
    v = [m.weight_v.clone() for m in (net[0], net[3])]
    bn.data_dependent_init_(net, x)
    h = net[0](x)
    torch.testing.assert_close(h.mean([0, 2, 3]), torch.zeros(6, dtype=torch.float64), atol=1e-10, rtol=0)  # fmt: skip
    torch.testing.assert_close(h.std([0, 2, 3], unbiased=False), torch.ones(6, dtype=torch.float64))  # fmt: skip
    out = net(x)
    torch.testing.assert_close(out.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-10, rtol=0)  # fmt: skip
    torch.testing.assert_close(out.std(0, unbiased=False), torch.ones(5, dtype=torch.float64))
    for m, before in zip((net[0], net[3]), v):  # v keeps its values
        torch.testing.assert_close(m.weight_v, before)
    assert not net[0]._init_pending and not net[3]._init_pending
    with pytest.raises(ValueError, match="no weight-normalized layer"):
        bn.data_dependent_init_(nn.Linear(2, 2), torch.randn(3, 2))


def test_data_dependent_init_without_bias_sets_g_for_a_mean_only_bn_after_it():
    torch.manual_seed(0)
    net = nn.Sequential(
        bn.WeightNormConv2d(3, 4, 3, bias=False), bn.MeanOnlyBatchNorm2d(4)
    ).double()
    x = _x(16, 3, 5, 5)
    bn.data_dependent_init_(net, x)
    y = net(x)
    torch.testing.assert_close(y.std([0, 2, 3], unbiased=False), torch.ones(4, dtype=torch.float64))  # fmt: skip
    torch.testing.assert_close(y.mean([0, 2, 3]), torch.zeros(4, dtype=torch.float64), atol=1e-10, rtol=0)  # fmt: skip


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_data_dependent_init_passes_on_what_each_layer_then_computes(bias):
    """The next layer is initialized on the output the layer gives after its initialization: with
    no bias that keeps its mean, which a mean-only BN after it sees (and tracks) in that pass."""
    torch.manual_seed(0)
    net = nn.Sequential(bn.WeightNormConv2d(3, 4, 3, bias=bias), bn.MeanOnlyBatchNorm2d(4)).double()  # fmt: skip
    x = _x(16, 3, 5, 5) + 1
    bn.data_dependent_init_(net, x)
    seen = net[0](x).mean([0, 2, 3])
    assert bias or seen.abs().min() > 0.1
    torch.testing.assert_close(net[1].running_mean, net[1].momentum * seen)


BUFFERS = {"1.running_mean", "3.running_var", "4.running_var"}  # every norm's, read by the graph


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        bn.WeightNormConv2d(3, 4, 3, bias=False), bn.MeanOnlyBatchNorm2d(4), nn.ReLU(),
        bn.L1BatchNorm2d(4), bn.LinfBatchNorm2d(4), nn.Flatten(), bn.WeightNormLinear(64, 2),
    ).double()  # fmt: skip


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_fx_symbolic_trace_computes_what_the_module_computes(training):
    """The traced graph reads (and in training updates) the layers' buffers, step counts too,
    rather than constants made from them while tracing."""
    model = _net().train(training)
    traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    constants = [n.target for n in traced.graph.nodes if n.op == "get_attr" and "constant" in n.target]  # fmt: skip
    assert not constants
    with torch.no_grad():  # running statistics away from their initial values
        for name, b in model.named_buffers():
            if "running" in name:
                b.uniform_(0.5, 2)
                traced.get_buffer(name).copy_(b)
    steps = train_steps(traced)
    assert_same_steps(train_steps(model), steps, BUFFERS)
    counts = {k for k in steps[-1][2] if k.endswith("num_batches_tracked")}
    assert counts == ({"1.num_batches_tracked", "3.num_batches_tracked", "4.num_batches_tracked"} if training else set())  # fmt: skip


@pytest.mark.parametrize("cls", [bn.L1BatchNorm2d, bn.MeanOnlyBatchNorm2d], ids=["l1", "mean-only"])
def test_fx_refuses_a_cumulative_average_in_training(cls):
    with pytest.raises(NotImplementedError, match="cannot be traced by torch.fx.*momentum=None"):
        torch.fx.symbolic_trace(nn.Sequential(cls(4, momentum=None)))
    torch.fx.symbolic_trace(nn.Sequential(cls(4, momentum=None)).eval())  # inference traces


@pytest.mark.slow
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_torch_compile_without_graph_breaks(training):
    model = _net().train(training)
    compiled = torch.compile(copy.deepcopy(model), backend="aot_eager", fullgraph=True)
    assert_same_steps(train_steps(model), train_steps(compiled), BUFFERS)


def test_get_norm_layer_builds_them():
    assert isinstance(bn.get_norm_layer("l1_batchnorm", 2)(4), bn.L1BatchNorm2d)
    assert isinstance(bn.get_norm_layer("linf_batchnorm", 1)(4), bn.LinfBatchNorm1d)
    assert isinstance(bn.get_norm_layer("meanonly_batchnorm", 2)(4), bn.MeanOnlyBatchNorm2d)
