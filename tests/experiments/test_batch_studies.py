"""The batch studies on the Figure 1 MLP: batches of a fixed composition, and BN with its
statistics outside the gradient (the BN paper's Sec. 2 argument)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from experiments import mnist
from experiments.kit.errors import ConfigError
from experiments.kit.identity import ADDED_LATER, comparable_config, flat_config
from experiments.kit.sampling import FixedBatches, IIDBatches
from experiments.nets.mlp import SigmoidMLP
from experiments.nets.outside_gradient import OutsideGradientNorm
from tests.configs import compose_config
from tests.runs import metric_rows


def _batches(sampler, epoch: int) -> list[frozenset[int]]:
    start = epoch * sampler.per_epoch
    return [frozenset(sampler.indices(s).tolist()) for s in range(start, start + sampler.per_epoch)]


def test_fixed_batches_keep_their_members_and_reshuffle_their_order():
    fixed, iid = FixedBatches(60, 6, seed=3), IIDBatches(60, 6, seed=3)
    first, second = _batches(fixed, 0), _batches(fixed, 1)
    assert set(first) == set(second) and first != second  # the same batches, another order
    assert sorted(i for b in first for i in b) == list(range(60))  # each example once an epoch
    assert set(_batches(iid, 0)) != set(_batches(iid, 1))  # the control reshuffles its members
    late = FixedBatches(60, 6, seed=3)  # addressed by step: a resumed run gets the same batches
    assert torch.equal(late.indices(17), fixed.indices(17))
    assert set(_batches(FixedBatches(60, 6, seed=4), 0)) != set(first)


def test_fixed_batches_refuse_a_batch_larger_than_the_data():
    with pytest.raises(ConfigError, match="train.batch_size=70"):
        FixedBatches(60, 70, seed=0)


def _input(seed: int = 0) -> torch.Tensor:
    return torch.randn(16, 5, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_detached_statistics_have_bns_forward_and_not_its_gradient():
    x = _input().requires_grad_()
    layer = OutsideGradientNorm(5, "detached", eps=1e-5).double()
    y = layer(x)
    ref = F.batch_norm(x, None, None, training=True, eps=1e-5)
    torch.testing.assert_close(y, ref)
    upstream = _input(1)
    (g,) = torch.autograd.grad((y * upstream).sum(), x)
    (g_bn,) = torch.autograd.grad((ref * upstream).sum(), x)
    sigma = (x.var((0, 2), unbiased=False) + 1e-5).sqrt().view(1, -1, 1)
    torch.testing.assert_close(g, upstream / sigma)  # the statistics held constant
    assert not torch.allclose(g, g_bn)


def test_the_papers_example_moves_the_bias_and_not_the_output():
    """BN paper Sec. 2: x = u + b, x̂ = x − E[x] with E[x] outside the gradient; a gradient step
    on b leaves x̂, and so the loss, where they were."""
    u = _input()
    b = torch.zeros(1, 5, 1, dtype=torch.float64, requires_grad=True)
    layer = OutsideGradientNorm(5, "center").double()
    target = _input(2)
    loss = ((layer(u + b) - target) ** 2).mean()
    (grad,) = torch.autograd.grad(loss, b)
    assert grad.abs().min() > 1e-3  # b moves
    with torch.no_grad():
        after = layer(u + b - 0.5 * grad)
        torch.testing.assert_close(after, layer(u + b))
        torch.testing.assert_close(((after - target) ** 2).mean(), loss.detach())


def test_moving_averages_normalize_in_training_and_update_after():
    x = _input() * 3 + 2
    layer = OutsideGradientNorm(5, "moving", momentum=0.5, eps=0.0).double()
    torch.testing.assert_close(layer(x), x)  # the averages at their start: mean 0, variance 1
    mean = x.mean((0, 2))
    torch.testing.assert_close(layer.running_mean, 0.5 * mean)
    layer.eval()
    expected = (x - layer.running_mean.view(1, -1, 1)) / layer.running_var.sqrt().view(1, -1, 1)
    torch.testing.assert_close(layer(x), expected)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode='sg'"):
        OutsideGradientNorm(3, "sg")


@pytest.mark.parametrize(("mode", "moves"), [(None, False), ("detached", True), ("center", True)])
def test_the_bias_before_the_norm_learns_only_outside_the_gradient(mode, moves):
    cfg = compose_config("mnist", ["setup=bn_bias", f"model.outside_gradient={mode or 'null'}"])
    torch.manual_seed(0)
    net = SigmoidMLP(mnist.hidden_norm(cfg), [8, 8], 0.5, in_features=6, norm_bias=True).double()
    x, y = torch.randn(12, 6, dtype=torch.float64), torch.randint(10, (12,))
    F.cross_entropy(net(x)[0], y).backward()
    biggest = max(layer.bias.grad.abs().max().item() for layer in net.hidden)
    assert (biggest > 1e-6) == moves, biggest  # under BN the mean subtraction removes it


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.outside_gradient=sg", "model.outside_gradient=sg must be one of"),
        ("norm=none", "takes BN's place"),
        ("model.norm_position=after", "normalizes before the sigmoid"),
    ],
)
def test_bad_outside_gradient_settings_are_refused_in_one_line(override, message):
    cfg = compose_config("mnist", ["setup=bn_detached", override])
    with pytest.raises(ConfigError, match=message):
        mnist.check(cfg)


@pytest.mark.parametrize("setup", ["bn", "baseline"])
def test_a_run_at_the_new_settings_defaults_is_recorded_as_before(setup):
    flat = flat_config(compose_config("mnist", [f"setup={setup}"]))
    assert "model.norm_bias" in flat
    recorded = comparable_config(flat)
    assert not {"model.norm_bias", "model.outside_gradient", "train.fixed_composition"} & set(
        recorded
    )
    changed = comparable_config(flat_config(compose_config("mnist", [f"setup={setup}_fixed"])))
    assert changed["train.fixed_composition"] is True


@pytest.mark.parametrize(("study", "setup"), [("mnist", "bn"), ("renorm", "bn32")])
def test_every_setting_added_later_is_left_out_at_its_default(study, setup):
    """ADDED_LATER holds each key at the value the study's config gives it by default, so a run
    at that value records what runs recorded before the key existed."""
    flat = flat_config(compose_config(study, [f"setup={setup}"]))
    mine = {k: v for k, v in ADDED_LATER.items() if k in flat}
    assert mine and all(flat[k] == v for k, v in mine.items()), mine
    assert not set(mine) & set(comparable_config(flat))


@pytest.mark.slow
def test_a_detached_run_logs_its_parameter_norms(root, tmp_path):
    cfg = compose_config(
        "mnist",
        [
            "setup=bn_detached", "data=fashion_mnist", f"data.root={root}", "data.download=false",
            "data.verify=false", "logger.mode=disabled", "train.steps=20", "eval.every=10",
            "train.batch_size=20", "probe.param_norms=true", "seed=[0,1]",
        ],
    )  # fmt: skip
    summaries = mnist.train(cfg, tmp_path)
    assert "test_acc_population" not in summaries[0]  # the library's Algorithm 2 needs BN layers
    rows = metric_rows(tmp_path / "seed0")
    bias = [float(r["value"]) for r in rows if r["metric"] == "params/layer2/bias_norm"]
    assert len(bias) == 3 and bias[0] == 0.0 and bias[-1] > 0.0
