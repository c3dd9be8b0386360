"""Seeds side by side (experiments/nets/stacked.py): K stacked copies of the conv net train
exactly as K separate networks, in float64, for every norm the conv-net studies use, and each
copy's plain-network view evaluates as its separate network."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bn
from experiments.kit.classify import stack_batch
from experiments.nets.convnet import SmallConvNet
from experiments.nets.stacked import (
    GroupedLinear,
    copy_losses,
    copy_views,
    split_copies,
    stack_copies,
)

K, N, SIZE = 3, 16, 12
FIXED = {"r_max": 1.5, "d_max": 0.3}  # tight bounds: r and d are clipped from the first step

# The norms of the renorm study's setups (configs/renorm/setup/) and its ablations.
NORMS = {
    "bn32": ("batchnorm", {}),
    "torch_bn": ("torch_batchnorm", {}),
    "brn32": ("batchrenorm", FIXED),
    "bn_micro4": ("batchnorm", {"microbatch": 4}),
    "brn_micro4": ("batchrenorm", {"microbatch": 4, **FIXED}),
    "brn_micro4_ramp": (
        "batchrenorm",
        {"microbatch": 4, "r_max": bn.paper_r_max(1, 3, 3.0), "d_max": bn.paper_d_max(1, 3, 2.0)},
    ),
    "bn_micro4_rgrad": (
        "batchrenorm",
        {"microbatch": 4, "ablation": "bn_forward_r_grad", **FIXED},
    ),
    "brn_micro4_bngrad": (
        "batchrenorm",
        {"microbatch": 4, "ablation": "renorm_forward_bn_grad", **FIXED},
    ),
    "noniid_bn_halves": ("batchnorm", {"microbatch": 8}),
    "groupnorm": ("groupnorm", {"groups": 4}),
    "layernorm": ("layernorm", {}),
    "nonorm": ("none", {}),
    "l1bn32": ("l1_batchnorm", {}),
    "linfbn32": ("linf_batchnorm", {}),
    # weight_norm: the network's option (bn.WeightNormConv2d/Linear before each norm slot)
    "weightnorm": ("none", {"weight_norm": True}),
    "wn_meanonly": ("meanonly_batchnorm", {"weight_norm": True}),
}


def _nets(norm: str, kwargs: dict, **options) -> list[SmallConvNet]:
    kwargs = dict(kwargs)
    options["weight_norm"] = kwargs.pop("weight_norm", False)
    nets = []
    for seed in range(K):
        torch.manual_seed(seed)
        layers = bn.get_norm_layer(norm, 2, **kwargs), bn.get_norm_layer(norm, 1, **kwargs)
        net = SmallConvNet(*layers, 1, 10, (4, 8), 2, 16, **options).double()
        nets.append(net)
    return nets


def copy_batches(
    steps: int, copies: int = K, n: int = N, channels: int = 1, size: int = SIZE
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` float64 batches of 10-class images, ``(copies, n, channels, size, size)``: each
    copy of a stack its own examples."""
    g = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(copies, n, channels, size, size, generator=g, dtype=torch.float64),
            torch.randint(0, 10, (copies, n), generator=g),
        )
        for _ in range(steps)
    ]


def _sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)


def _per_copy(layer: nn.Module, tensor: torch.Tensor, k: int) -> torch.Tensor:
    """Copy ``k``'s block of a stacked layer's parameter or buffer."""
    if isinstance(layer, GroupedLinear):
        return tensor[k]
    if tensor.dim() == 0:  # a step counter, shared
        return tensor
    return tensor.view(K, -1, *tensor.shape[1:])[k]


@pytest.mark.slow
@pytest.mark.parametrize("setup", list(NORMS))
@pytest.mark.parametrize("options", [{}, {"norm_position": "after"}, {"fix_gamma": True}], ids=["before", "after", "fix_gamma"])  # fmt: skip
def test_stacked_copies_train_as_separate_networks(setup, options):
    norm, kwargs = NORMS[setup]
    if norm == "none" and options:
        pytest.skip("no norm: nothing to place or fix")
    if setup == "wn_meanonly" and "fix_gamma" in options:
        pytest.skip("mean-only BN has no γ to fix")
    nets = _nets(norm, kwargs, **options)
    stack = stack_copies(_nets(norm, kwargs, **options))
    views = copy_views(stack, _nets(norm, kwargs, **options))  # follow the stack as it trains
    opts = [_sgd([p for p in n.parameters() if p.requires_grad]) for n in nets]
    opt = _sgd([p for p in stack.parameters() if p.requires_grad])
    for x, y in copy_batches(5):
        want = []
        for net, o, xk, yk in zip(nets, opts, x, y):
            loss = F.cross_entropy(net(xk), yk)
            o.zero_grad()
            loss.backward()
            o.step()
            want.append(loss.item())
        xs, ys = stack_batch(x.flatten(0, 1), y.flatten(), K)
        losses = copy_losses(stack(xs), ys)
        opt.zero_grad()
        losses.sum().backward()
        opt.step()
        torch.testing.assert_close(losses.detach(), torch.tensor(want, dtype=torch.float64), rtol=1e-11, atol=1e-12)  # fmt: skip
        for i, layer in enumerate(stack):
            if bn.is_batch_renorm(layer):  # each copy's clipped fractions, as its own net's
                r, d = layer.clip_fractions(K)
                torch.testing.assert_close(r, torch.stack([n[i].r_clip_fraction for n in nets]))
                torch.testing.assert_close(d, torch.stack([n[i].d_clip_fraction for n in nets]))
    for i, layer in enumerate(stack):
        for name, got in layer.state_dict().items():
            for k, net in enumerate(nets):
                want = net[i].state_dict()[name]
                torch.testing.assert_close(_per_copy(layer, got, k), want, rtol=1e-10, atol=1e-12, msg=f"{i}.{name}")  # fmt: skip
    x = torch.randn(N, 1, SIZE, SIZE, dtype=torch.float64)
    with torch.no_grad():
        eval_out = split_copies(stack.eval()(x.repeat(1, K, 1, 1)), K)
        for k, net in enumerate(nets):
            want = net.eval()(x)
            torch.testing.assert_close(eval_out[:, k], want, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(views[k].eval()(x), want, rtol=1e-10, atol=1e-12)


def test_a_nan_copy_leaves_the_others_alone():
    nets = _nets("batchnorm", {"microbatch": 4})
    stack = stack_copies(nets)
    with torch.no_grad():
        stack[0].weight[:4].fill_(float("nan"))  # copy 0's first convolution
    x, y = copy_batches(1)[0]
    losses = copy_losses(stack(stack_batch(x.flatten(0, 1), y.flatten(), K)[0]), y.t())
    losses.sum().backward()
    assert losses[0].isnan() and losses[1:].isfinite().all()
    grad = stack[0].weight.grad
    assert grad[4:].isfinite().all()


def test_grouped_linear_is_k_linear_layers():
    layers = [nn.Linear(5, 3).double() for _ in range(K)]
    grouped = stack_copies([nn.Sequential(m) for m in layers])[0]
    assert isinstance(grouped, GroupedLinear)
    x = torch.randn(7, K, 5, dtype=torch.float64)
    want = torch.cat([m(x[:, k]) for k, m in enumerate(layers)], 1)
    torch.testing.assert_close(grouped(x.flatten(1)), want, rtol=1e-12, atol=1e-12)


def test_stacked_group_norms_normalize_each_copys_groups_alone():
    """K GroupNorms of 2 groups stacked: 2·K groups, none spanning two copies' channels."""
    torch.manual_seed(0)
    layers = [nn.GroupNorm(2, 4).double() for _ in range(K)]
    for m in layers:
        nn.init.normal_(m.weight), nn.init.normal_(m.bias)
    stacked = stack_copies([nn.Sequential(m) for m in layers])[0]
    x = torch.randn(5, K * 4, 3, 3, dtype=torch.float64)
    x = x * torch.arange(1, K * 4 + 1, dtype=torch.float64).view(1, -1, 1, 1)  # unlike scales
    want = torch.cat([m(x[:, 4 * k : 4 * k + 4]) for k, m in enumerate(layers)], 1)
    torch.testing.assert_close(stacked(x), want, rtol=1e-12, atol=1e-12)


def test_stack_batch_puts_each_copys_examples_in_its_channels():
    x = torch.arange(K * N * 2 * 2 * 2.0).view(K * N, 2, 2, 2)  # copies' batches one after another
    y = torch.arange(K * N)
    xs, ys = stack_batch(x, y, K)
    assert xs.shape == (N, K * 2, 2, 2) and ys.shape == (N, K)
    for k in range(K):
        torch.testing.assert_close(xs[:, 2 * k : 2 * k + 2], x[k * N : (k + 1) * N])
        torch.testing.assert_close(ys[:, k], y[k * N : (k + 1) * N])


def test_layers_that_cannot_be_split_by_copy_are_refused():
    with pytest.raises(ValueError, match="cannot split Embedding"):
        stack_copies([nn.Sequential(nn.Embedding(3, 2)) for _ in range(2)])
    with pytest.raises(ValueError, match="different types"):
        stack_copies([nn.Sequential(nn.ReLU()), nn.Sequential(nn.Sigmoid())])
    nets = _nets("batchnorm", {})
    nets[1][1].num_batches_tracked += 1
    with pytest.raises(ValueError, match="num_batches_tracked differ"):
        stack_copies(nets)


def test_clip_fractions_by_block():
    layer = bn.BatchRenorm1d(6, r_max=1.2, d_max=0.1)
    layer.running_var.fill_(4.0)  # σ_B/σ = 1/2 in the first three channels: clipped
    x = torch.randn(32, 6)
    x[:, 3:] *= 2
    layer(x)
    r, d = layer.clip_fractions(2)
    assert r.tolist() == [1.0, pytest.approx(r[1].item())] and 0 <= r[1] < 1
    torch.testing.assert_close(torch.stack([r.mean(), d.mean()]), torch.stack([layer.r_clip_fraction, layer.d_clip_fraction]))  # fmt: skip
    with pytest.raises(ValueError, match="must divide"):
        layer.clip_fractions(4)


@pytest.mark.parametrize("train_mode", [False, True])
def test_a_stacked_batch_scores_each_copy_as_its_own_network(train_mode):
    """copy_accuracies on stacked batches: one pass of the stack gives each copy the accuracy
    its separate network gets on its own examples; in training mode nothing is changed."""
    from experiments.kit.evaluation import copy_accuracies

    norm, kwargs = NORMS["brn_micro4"]
    nets = _nets(norm, kwargs)
    stack = stack_copies(_nets(norm, kwargs))
    views = copy_views(stack, _nets(norm, kwargs))
    batches = [stack_batch(x.flatten(0, 1), y.flatten(), K) for x, y in copy_batches(3)]
    before = {k: v.clone() for k, v in stack.state_dict().items()}
    cpu = torch.device("cpu")
    got = copy_accuracies(views, batches, cpu, train_mode=train_mode, stack=stack)
    assert got == copy_accuracies(views, batches, cpu, train_mode=train_mode)  # copy by copy
    for k, net in enumerate(nets):
        own = [(x.chunk(K, 1)[k], y[:, k]) for x, y in batches]
        assert got[k] == copy_accuracies([net], own, cpu, train_mode=train_mode)[0]
    assert all(torch.equal(before[k], v) for k, v in stack.state_dict().items())


@pytest.mark.parametrize("norm", ["bn32", "brn_micro4", "groupnorm", "weightnorm"])
def test_a_batch_every_copy_reads_is_scored_by_passes_of_the_stack(norm):
    """copy_accuracies on test batches (labels ``(N,)``): the stack's passes over the images
    repeated for each copy, ``N / K`` a pass, give each copy the accuracy it gets alone; labels
    that copy 0 predicts make the copies' accuracies differ, so a copy read as another fails."""
    from experiments.kit.evaluation import copy_accuracies

    stack = stack_copies(_nets(*NORMS[norm]))
    views = copy_views(stack, _nets(*NORMS[norm]))
    with torch.no_grad():  # moving averages of each copy's own examples
        x, y = copy_batches(1)[0]
        stack(stack_batch(x.flatten(0, 1), y.flatten(), K)[0])
        if norm == "weightnorm":
            stack(stack_batch(x.flatten(0, 1), y.flatten(), K)[0])
    for net in (stack, *views):
        net.eval()
    g = torch.Generator().manual_seed(1)
    images = [torch.randn(n, 1, SIZE, SIZE, generator=g, dtype=torch.float64) for n in (17, 5)]
    with torch.no_grad():
        batches = [(x, views[0](x).argmax(1)) for x in images]
    cpu = torch.device("cpu")
    passes = []
    hook = stack.register_forward_hook(lambda m, args, out: passes.append(len(args[0])))
    got = copy_accuracies(views, batches, cpu, stack=stack)
    hook.remove()
    assert passes == [6, 6, 5, 2, 2, 1]  # ⌈N / K⌉ images a pass
    assert got == copy_accuracies(views, batches, cpu)  # copy by copy
    assert got[0] == 1.0 and len(set(got)) > 1


def test_per_example_inference_needs_every_norm_to_keep_moving_statistics():
    from experiments.kit.evaluation import per_example

    assert per_example(_nets(*NORMS["bn32"])[0])
    assert per_example(_nets(*NORMS["layernorm"])[0])
    assert not per_example(nn.Sequential(nn.Conv2d(1, 4, 3), bn.BatchNorm2d(4, track_running_stats=False)))  # fmt: skip


def test_weight_normed_stack_initializes_each_copy_from_its_own_batch():
    """Salimans & Kingma's data-dependent initialization of a stack of weight-normalized nets
    (``bn.data_dependent_init_`` on the stacked batch) sets each copy's ``g`` and biases as that
    copy's own initialization on its own examples does."""
    norm, kwargs = NORMS["weightnorm"]
    nets = _nets(norm, kwargs)
    stack = stack_copies(_nets(norm, kwargs))
    ((x, y),) = copy_batches(1)
    for net, xk in zip(nets, x):
        bn.data_dependent_init_(net, xk)
    bn.data_dependent_init_(stack, stack_batch(x.flatten(0, 1), y.flatten(), K)[0])
    assert isinstance(stack[-4], bn.weight_norm.WeightNormed)  # the hidden layer, grouped
    for i, layer in enumerate(stack):
        for name, got in layer.state_dict().items():
            for k, net in enumerate(nets):
                want = net[i].state_dict()[name]
                torch.testing.assert_close(_per_copy(layer, got, k), want, rtol=1e-10, atol=1e-12, msg=f"{i}.{name}")  # fmt: skip
