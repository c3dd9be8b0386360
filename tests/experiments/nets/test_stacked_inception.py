"""BN-Inception's seeds side by side (experiments/nets/stacked.py): K stacked copies compute, and
train, exactly as K separate BN-Inception networks, in float64, for the study's variants (BN,
no norm with LRN, sigmoid), and each copy's dropout masks are its own."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bn
from experiments.inception import build_optimizer
from experiments.kit.classify import stack_batch
from experiments.nets.bn_inception import BNInception
from experiments.nets.lrn import LocalResponseNorm
from experiments.nets.stacked import (
    GroupedLinear,
    cat_per_copy,
    concat_convs,
    copy_losses,
    copy_views,
    split_copies,
    split_per_copy,
    stack_copies,
)
from tests.experiments.nets.test_stacked import copy_batches

K, N, SIZE = 3, 8, 16

# The study's setups' networks (configs/inception/setup/): BN-x5 (BN, no LRN), Inception (no
# norm, LRN), BN-x5-Sigmoid, BN-Baseline (BN and LRN), and BN-x5 with a column per triple's item.
VARIANTS = {
    "bn_x5": {"norm_layer": bn.BatchNorm2d},
    "inception": {"norm_layer": None, "lrn": True},
    "bn_x5_sigmoid": {"norm_layer": bn.BatchNorm2d, "activation": "sigmoid"},
    "bn_baseline": {"norm_layer": bn.BatchNorm2d, "lrn": True},
    "bn_x5_columns": {"norm_layer": bn.BatchNorm2d, "pool_columns": 3},  # the triples' head
    # each module's 1x1 reductions fused (model.fuse_reductions), stacked and alone
    "bn_baseline_fused": {"norm_layer": bn.BatchNorm2d, "lrn": True, "fuse": True},
}


def _nets(options: dict, seeds=range(K)) -> list[BNInception]:
    options = dict(options)
    fuse = options.pop("fuse", False)
    nets = []
    for seed in seeds:
        torch.manual_seed(seed)
        net = BNInception(10, width=0.0625, stem_stride=2, **options).double()
        nets.append(net.fuse_reductions() if fuse else net)
    return nets


def _block(stack: nn.Module, name: str, tensor: torch.Tensor, k: int) -> torch.Tensor:
    """Copy ``k``'s block of the stack's tensor ``name``."""
    owner = stack.get_submodule(name.rpartition(".")[0])
    if isinstance(owner, GroupedLinear) or tensor.dim() == 0:
        return tensor[k] if tensor.dim() else tensor
    return tensor.chunk(K)[k]


def _assert_blocks(stack: nn.Module, got: dict, want: list[dict], what: str) -> None:
    """Each of the stack's tensors ``got`` (by name) is, block by block, the copies' ``want``."""
    for name, tensor in got.items():
        for k, own in enumerate(want):
            torch.testing.assert_close(_block(stack, name, tensor, k), own[name], rtol=1e-10, atol=1e-12, msg=f"{what} {name} of copy {k}")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])  # fmt: skip
def test_stacked_copies_train_as_separate_networks(variant, memory_format):
    """Forward outputs, every gradient, and after three SGD steps (momentum, the study's L2 on
    conv and linear weights only) every parameter and BN buffer, copy by copy; then each copy's
    plain view evaluates as its own network."""
    options = VARIANTS[variant]
    nets = [n.to(memory_format=memory_format) for n in _nets(options)]
    stack = stack_copies(_nets(options)).to(memory_format=memory_format)
    views = copy_views(stack, _nets(options))
    opts = [build_optimizer(n, 0.05, 0.9, 1e-2) for n in nets]
    opt = build_optimizer(stack, 0.05, 0.9, 1e-2)
    for x, y in copy_batches(3, K, N, 3, SIZE):
        want = []
        for net, o, xk, yk in zip(nets, opts, x, y):
            loss = F.cross_entropy(net(xk.contiguous(memory_format=memory_format)), yk)
            o.zero_grad()
            loss.backward()
            want.append(loss.detach())
        xs, ys = stack_batch(x.flatten(0, 1), y.flatten(), K)
        losses = copy_losses(stack(xs.contiguous(memory_format=memory_format)), ys)
        opt.zero_grad()
        losses.sum().backward()
        torch.testing.assert_close(losses.detach(), torch.stack(want), rtol=1e-11, atol=1e-12)
        grads = {name: p.grad for name, p in stack.named_parameters()}
        _assert_blocks(stack, grads, [{n: p.grad for n, p in net.named_parameters()} for net in nets], "gradient")  # fmt: skip
        for o in [*opts, opt]:
            o.step()
    _assert_blocks(stack, stack.state_dict(), [net.state_dict() for net in nets], "after 3 steps:")
    x = torch.randn(N, 3, SIZE, SIZE, dtype=torch.float64).contiguous(memory_format=memory_format)
    with torch.no_grad():
        out = split_copies(stack.eval()(x.repeat(1, K, 1, 1)), K)
        for k, net in enumerate(nets):
            want = net.eval()(x)
            torch.testing.assert_close(out[:, k], want, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(views[k].eval()(x), want, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_with_dropout_the_stack_evaluates_as_the_separate_networks():
    """Inception's dropout (0.4) changes nothing in evaluation: the stack's copies there are the
    separate networks (their training with dropout draws other masks; see the next test)."""
    options = {**VARIANTS["bn_baseline"], "dropout": 0.4}
    nets, stack = _nets(options), stack_copies(_nets(options))
    x = torch.randn(N, 3, SIZE, SIZE, dtype=torch.float64)
    with torch.no_grad():
        out = split_copies(stack.eval()(x.repeat(1, K, 1, 1)), K)
        for k, net in enumerate(nets):
            torch.testing.assert_close(out[:, k], net.eval()(x), rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_each_copys_dropout_mask_is_its_own():
    """The stack's dropout draws one mask over all ``K·C`` features of the batch from torch's
    generator (as :class:`torch.nn.Dropout` does over any tensor), so copy ``k``'s mask is block
    ``k`` of that draw: copies of the same weights reading the same images drop different
    features, each about ``p`` of them, and each copy's output is its own features masked."""
    p, n = 0.4, 64
    stack = stack_copies(_nets({"dropout": p}, seeds=[7] * K))  # the same network K times
    features = {}
    stack.dropout.register_forward_hook(lambda m, i, o: features.update(x=i[0], y=o))
    stack.train()(torch.randn(n, 3, SIZE, SIZE, dtype=torch.float64).repeat(1, K, 1, 1))
    x, y = (features[key].view(n, K, -1) for key in ("x", "y"))
    torch.testing.assert_close(x[:, 1:], x[:, :1].expand_as(x[:, 1:]))  # the same features
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    for k in range(1, K):
        assert not torch.equal(kept[:, k], kept[:, 0]), f"copy {k} drew copy 0's mask"
    dropped = 1 - kept.double().mean((0, 2))
    assert ((dropped - p).abs() < 0.1).all(), dropped


def test_cat_per_copy_keeps_each_copys_channels_together():
    xs = [torch.randn(2, K * c, 3, 3) for c in (2, 1, 4)]
    want = torch.cat([torch.cat([x.chunk(K, 1)[k] for x in xs], 1) for k in range(K)], 1)
    assert torch.equal(cat_per_copy(xs, K), want)
    last = cat_per_copy([x.contiguous(memory_format=torch.channels_last) for x in xs], K)
    assert torch.equal(last, want) and last.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(cat_per_copy(xs, 1), torch.cat(xs, 1))


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])  # fmt: skip
def test_split_per_copy_undoes_cat_per_copy(memory_format):
    sizes = (2, 1, 4)
    x = torch.randn(2, K * sum(sizes), 3, 3).contiguous(memory_format=memory_format)
    parts = split_per_copy(x, sizes, K)
    for part, c in zip(parts, sizes):
        assert part.shape == (2, K * c, 3, 3)
        assert part.is_contiguous(memory_format=memory_format)
    for k, own in enumerate(x.chunk(K, 1)):
        for part, want in zip(parts, own.split(sizes, 1)):
            assert torch.equal(part.chunk(K, 1)[k], want)
    assert torch.equal(cat_per_copy(parts, K), x)
    assert [p.shape[1] for p in split_per_copy(x, (10, 11), 1)] == [10, 11]


def test_concat_convs_refuses_convolutions_that_differ_in_more_than_their_outputs():
    assert concat_convs([nn.Conv2d(4, 2, 1), nn.Conv2d(4, 3, 1)]).weight.shape == (5, 4, 1, 1)
    for other in (nn.Conv2d(5, 2, 1), nn.Conv2d(4, 2, 3), nn.Conv2d(4, 2, 1, bias=False)):
        with pytest.raises(ValueError, match="differ in more than their output channels"):
            concat_convs([nn.Conv2d(4, 2, 1), other])
    with pytest.raises(ValueError, match="groups=1"):
        concat_convs([nn.Conv2d(4, 2, 1, groups=2), nn.Conv2d(4, 2, 1, groups=2)])


def test_stacked_lrn_windows_stay_inside_each_copy():
    layers = [nn.LocalResponseNorm(5, alpha=0.5, beta=0.75, k=1.0) for _ in range(K)]
    stacked = stack_copies([nn.Sequential(m) for m in layers])[0]
    assert isinstance(stacked, LocalResponseNorm) and stacked.copies == K
    x = torch.randn(2, K * 6, 4, 4, dtype=torch.float64) * 3
    want = torch.cat([m(xk) for m, xk in zip(layers, x.chunk(K, 1))], 1)
    torch.testing.assert_close(stacked(x), want, rtol=1e-12, atol=1e-12)
