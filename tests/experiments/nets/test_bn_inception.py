"""BN-Inception's architecture (BN paper Figure 5): shapes, widths and parameter count, and the
fused form of its modules' 1x1 reductions."""

import copy

import pytest
import torch

import bn
from experiments.inception import build_optimizer
from experiments.nets.bn_inception import TABLE, BNInception, count_parameters

# Per-branch widths of Figure 5, summed: the table's output column says 576/576/1024 for 4c/4d/4e.
EXPECTED_CHANNELS = {
    "3a": 256, "3b": 320, "3c": 576, "4a": 576, "4b": 576,
    "4c": 608, "4d": 608, "4e": 1056, "5a": 1024, "5b": 1024,
}  # fmt: skip
EXPECTED_SIZE = {"3a": 28, "3b": 28, "3c": 14, "4a": 14, "4d": 14, "4e": 7, "5b": 7}


def test_module_outputs_follow_the_table_at_224_px():
    model = BNInception(1000).eval()
    with torch.no_grad():
        h = model.stem(torch.randn(1, 3, 224, 224))
        assert h.shape == (1, 192, 28, 28)
        for name, module in model.inception.items():
            h = module(h)
            assert h.shape[1] == EXPECTED_CHANNELS[name] == module.out_channels, name
            if name in EXPECTED_SIZE:
                assert h.shape[2:] == (EXPECTED_SIZE[name],) * 2, name
        assert model.fc(torch.flatten(model.pool(h), 1)).shape == (1, 1000)


def test_parameter_count_matches_the_tables_widths():
    # Summing the BN paper's Table 1 gives ~11.3M (conv weights, BN
    # γ/β, no conv biases, a 1024->1000 classifier); the paper states 13.6M without saying why.
    n = count_parameters(BNInception(1000))
    assert abs(n - 11.3e6) / 11.3e6 < 0.005
    separable = count_parameters(BNInception(1000, separable_stem=True))
    assert 0 < n - separable < 10_000  # "changes it by only about 6k"


@pytest.mark.parametrize("norm", ["none", "batchnorm", "batchrenorm", "torch_batchnorm"])
@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
def test_every_variant_is_the_same_class(norm, activation):
    model = BNInception(
        10, bn.get_norm_layer(norm), activation=activation, width=0.125, stem_stride=1
    )
    out = model(torch.randn(4, 3, 32, 32))
    assert out.shape == (4, 10) and torch.isfinite(out).all()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all((m.bias is None) == (norm != "none") for m in convs if m.groups == 1)


def test_our_bn_equals_torch_bn_inside_the_network():
    ours = BNInception(10, bn.BatchNorm2d, width=0.125, stem_stride=1)
    ref = BNInception(10, torch.nn.BatchNorm2d, width=0.125, stem_stride=1)
    ref.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(4, 3, 32, 32)
    torch.testing.assert_close(ours(x), ref(x))
    # Stem: 3 convs. Modules: 7 convs (1x1, reduce + 3x3, reduce + 3x3 + 3x3, projection),
    # 5 in the two stride-2 modules (no 1x1 branch, pass-through pool).
    assert sum(isinstance(m, bn.BatchNorm2d) for m in ours.modules()) == 3 + 8 * 7 + 2 * 5


def test_width_multiplier_and_small_inputs():
    small = BNInception(10, width=0.25, stem_stride=1)
    assert count_parameters(small) < count_parameters(BNInception(10)) / 10
    assert small(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert set(TABLE) == set(EXPECTED_CHANNELS)
    with pytest.raises(ValueError, match="activation"):
        BNInception(10, activation="tanh")


@pytest.mark.parametrize("norm", ["batchnorm", "batchrenorm"])
def test_our_norms_train_under_bfloat16_autocast(norm):
    """The GPU recipe's mixed precision, checked with CPU autocast: bfloat16 activations, float32
    statistics and gradients, outputs close to the float32 network's."""
    torch.manual_seed(0)
    model = BNInception(10, bn.get_norm_layer(norm), width=0.125, stem_stride=2).to(
        memory_format=torch.channels_last
    )
    x = torch.randn(8, 3, 32, 32).to(memory_format=torch.channels_last)
    reference = model(x).detach()
    with torch.autocast("cpu", torch.bfloat16):
        y = model(x)
    assert y.dtype == torch.bfloat16
    torch.nn.functional.cross_entropy(y.float(), torch.arange(8)).backward()
    first = model.stem[0]
    assert (
        first[1].running_mean.dtype == torch.float32 and first[0].weight.grad.dtype == torch.float32
    )
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    torch.testing.assert_close(y.float(), reference, atol=0.15, rtol=0.05)


@pytest.mark.parametrize("stem_stride", [1, 2, 4, 8])
def test_any_input_size_down_to_the_ranges_lowest_trains(stem_stride):
    """Every layer is padded, so the smallest ``data.image_size`` the ranges table admits needs
    no minimum of the network's own."""
    from experiments.kit.ranges import RANGES

    side = int(RANGES["data.image_size"].low)
    model = BNInception(3, width=0.05, stem_stride=stem_stride).train()
    model(torch.randn(2, 3, side, side)).sum().backward()


@pytest.mark.parametrize("columns", [1, 3])
def test_the_head_keeps_one_column_per_item_of_a_triple(columns):
    """32x96 triples (three 32 px items side by side) and 1,000 classes: the classifier sees each
    channel's mean over each item's third of the last feature map (one column per item; with
    one, the global mean), so it can tell which item is where."""
    torch.manual_seed(0)
    model = BNInception(1000, width=0.0625, stem_stride=2, pool_columns=columns).eval()
    assert model.fc.in_features == model.out_channels * columns
    x = torch.randn(2, 3, 32, 96)
    with torch.no_grad():
        features = model.features(x)
        pooled = torch.flatten(model.pool(features), 1)
        assert model(x).shape == (2, 1000)
    n, c, h, w = features.shape
    thirds = features.reshape(n, c, h, columns, w // columns).mean(dim=(2, 4))
    torch.testing.assert_close(pooled, thirds.flatten(1))


def test_a_head_of_no_columns_is_refused():
    with pytest.raises(ValueError, match=r"^pool_columns=0 must be at least 1"):
        BNInception(10, pool_columns=0)


def _fused_pair(norm: str, activation: str, seed: int = 0) -> tuple[BNInception, BNInception]:
    """A float64 BN-Inception of the study's CPU shape, and the same network fused."""
    torch.manual_seed(seed)
    plain = BNInception(10, bn.get_norm_layer(norm), activation, width=0.0625, stem_stride=2)
    plain = plain.double()
    return plain, copy.deepcopy(plain).fuse_reductions()


@pytest.mark.slow
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])  # fmt: skip
@pytest.mark.parametrize(
    ("norm", "activation"),
    [("batchnorm", "relu"), ("batchrenorm", "relu"), ("none", "relu"), ("batchnorm", "sigmoid")],
)
def test_fused_reductions_train_as_the_plain_network(norm, activation, memory_format):
    """Each module's 1x1 units on its input as one unit: three SGD steps (momentum, the study's
    L2 on conv and linear weights only) give the plain network's losses, and after them its
    outputs in evaluation and its norms' running statistics, in float64."""
    plain, fused = (n.to(memory_format=memory_format) for n in _fused_pair(norm, activation))
    assert count_parameters(fused) == count_parameters(plain)
    assert all(m.reduce is not None and m.branch1x1 is None for m in fused.inception.values())
    opts = [build_optimizer(n, 0.05, 0.9, 1e-2) for n in (plain, fused)]
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(8, 3, 16, 16, dtype=torch.float64, generator=generator)
        x = x.contiguous(memory_format=memory_format)
        y = torch.randint(0, 10, (8,), generator=generator)
        losses = []
        for net, opt in zip((plain, fused), opts):
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-11, atol=1e-12)
    x = torch.randn(8, 3, 16, 16, dtype=torch.float64).contiguous(memory_format=memory_format)
    with torch.no_grad():
        torch.testing.assert_close(fused.eval()(x), plain.eval()(x), rtol=1e-10, atol=1e-12)
    for name, m in plain.inception.items():
        heads = [u[1] for u in (m.branch1x1, m.branch3x3[0], m.branch_double[0]) if u is not None]
        for key, value in fused.inception[name].reduce[1].state_dict().items():
            want = torch.cat([h.state_dict()[key] for h in heads]) if value.dim() else heads[0].state_dict()[key]  # fmt: skip
            torch.testing.assert_close(value, want, rtol=1e-10, atol=1e-12, msg=f"{name} {key}")


def test_the_fused_network_is_the_plain_one_with_its_parameters_moved():
    plain, fused = _fused_pair("batchnorm", "relu")
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    torch.testing.assert_close(fused(x), plain(x), rtol=1e-10, atol=1e-12)
    names = dict(fused.named_parameters())
    fused.fuse_reductions()
    assert dict(fused.named_parameters()) == names
    m, f = plain.inception["3a"], fused.inception["3a"]
    assert f.reduce_sizes == [m.branch1x1[0].out_channels, m.branch3x3[0][0].out_channels, m.branch_double[0][0].out_channels]  # fmt: skip
    want = torch.cat([m.branch1x1[0].weight, m.branch3x3[0][0].weight, m.branch_double[0][0].weight])  # fmt: skip
    assert torch.equal(f.reduce[0].weight, want)
    assert torch.equal(f.branch3x3[0][0].weight, m.branch3x3[1][0].weight)
    assert len(fused.inception["3c"].reduce_sizes) == 2  # 3c and 4e have no 1x1 branch


def test_a_norm_that_mixes_channels_cannot_be_fused():
    torch.manual_seed(0)
    net = BNInception(10, bn.get_norm_layer("layernorm"), width=0.0625, stem_stride=2)
    with pytest.raises(ValueError, match="group norms whose groups differ in size"):
        net.fuse_reductions()
