"""train.trainable (experiments/kit/trainable.py), the BN-only study's option: which parameters
train, the rest frozen at initialization; the random control's count; the γ measurements."""

from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException
from torch import nn

from experiments import mnist, renorm
from experiments.kit.errors import ConfigError
from experiments.kit.identity import comparable_config, flat_config
from experiments.kit.trainable import PER_UNIT, gamma_metrics, masks, trained_counts
from tests.configs import compose_config

CONV_CHANNELS = 16 + 32 + 64 + 128  # the conv net's normalized channels and units
MLP_UNITS = 3 * 100
ARMS = ("norm", "random", "output")


def _conv(*extra):
    return compose_config("renorm", ["logger.mode=disabled", *extra])


def _conv_small(root: Path, *extra):
    return _conv(
        f"data.root={root}", "data.download=false", "data.verify=false", "train.steps=6",
        "train.lr_decay_every=2", "eval.every=3", "eval.batch_size=25", "eval.train_subset=60",
        *extra,
    )  # fmt: skip


def _mlp_small(root: Path, *extra):
    return compose_config(
        "mnist",
        [
            "data=fashion_mnist", f"data.root={root}", "data.download=false", "data.verify=false",
            "logger.mode=disabled", "train.steps=6", "eval.every=3", "train.batch_size=20",
            "population.num_batches=3", *extra,
        ],
    )  # fmt: skip


def _conv_parts(cfg, seeds):
    model, _ = renorm.build_copies(cfg, 1, 10, torch.device("cpu"), torch.contiguous_format)
    return model, renorm.convnet_parts(model, len(seeds))


def _mlp_parts(seeds, **kw):
    model = mnist.SigmoidMLP(nn.BatchNorm1d, copies=len(seeds), seeds=seeds, **kw)
    return model, mnist.mlp_parts(model)


@pytest.mark.parametrize("seed", ["3", "[3,5]"])
def test_the_random_control_trains_as_many_weights_per_unit_as_gamma_and_beta(seed):
    seeds = [3] if seed == "3" else [3, 5]
    cfg = _conv("setup=bn32_trained_random", f"seed={seed}")
    _, parts = _conv_parts(cfg, seeds)
    assert trained_counts("norm", parts, seeds) == [2 * CONV_CHANNELS] * len(seeds)
    assert trained_counts("random", parts, seeds) == [2 * CONV_CHANNELS] * len(seeds)
    for p, view in parts.feeding:  # PER_UNIT in every output channel of every copy
        m = masks("random", parts, seeds)[p]
        for k in range(len(seeds)):
            block = view(m, k)
            assert (block.flatten(1).sum(1) == PER_UNIT).all()
    _, mlp = _mlp_parts(seeds, binary_input=True)
    assert trained_counts("random", mlp, seeds) == [2 * MLP_UNITS] * len(seeds)
    assert trained_counts("norm", mlp, seeds) == [2 * MLP_UNITS] * len(seeds)
    assert trained_counts("output", mlp, seeds) == [100 * 10 + 10] * len(seeds)


def test_a_copys_random_weights_are_those_its_seed_alone_draws():
    _, stack = _conv_parts(_conv("setup=bn32_trained_random", "seed=[3,5]"), [3, 5])
    _, alone = _conv_parts(_conv("setup=bn32_trained_random", "seed=5"), [5])
    both, five = masks("random", stack, [3, 5]), masks("random", alone, [5])
    for (p, view), (q, _) in zip(stack.feeding, alone.feeding, strict=True):
        assert torch.equal(view(both[p], 1), five[q])
    assert not torch.equal(stack.feeding[0][1](both[stack.feeding[0][0]], 0), five[alone.feeding[0][0]])  # fmt: skip
    _, mlp_stack = _mlp_parts([3, 5], binary_input=True)
    _, mlp_alone = _mlp_parts([5], binary_input=True)
    both, five = masks("random", mlp_stack, [3, 5]), masks("random", mlp_alone, [5])
    for (p, view), (q, view1) in zip(mlp_stack.feeding, mlp_alone.feeding, strict=True):
        assert torch.equal(view(both[p], 1), view1(five[q], 0))


def _moved(before: dict, after: dict) -> dict[str, torch.Tensor]:
    """Per parameter (float tensors of the state), which entries changed."""
    return {k: after[k] != v for k, v in before.items() if k in after and v.is_floating_point()}


def _expected(model: nn.Module, parts, kind: str, seeds) -> dict[str, torch.Tensor]:
    chosen = masks(kind, parts, seeds)
    return {
        name: chosen.get(p, torch.zeros_like(p, dtype=torch.bool))
        for name, p in model.named_parameters()
    }


def _check_frozen(before, after, expected, moving_buffers):
    moved = _moved(before, after)
    for name, trained in expected.items():
        assert not (moved[name] & ~trained).any(), f"{name}: a frozen entry moved"
    trained = sum(int(t.sum()) for t in expected.values())
    changed = sum(int(moved[n].sum()) for n in expected)
    assert changed >= 0.9 * trained, f"{changed} of {trained} trained entries moved"
    assert all(moved[b].any() for b in moving_buffers)  # BN's statistics still follow the batches


@pytest.mark.slow
@pytest.mark.parametrize("kind", ARMS)
def test_conv_net_trains_exactly_what_trainable_says(root, tmp_path, kind):
    cfg = _conv_small(root, f"setup=bn32_trained_{kind}", "seed=[3,5]")
    model, parts = _conv_parts(cfg, [3, 5])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    renorm.train(cfg, tmp_path)
    after = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["model"]
    _check_frozen(before, after, _expected(model, parts, kind, [3, 5]), ["1.running_mean"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ARMS)
def test_mlp_trains_exactly_what_trainable_says(root, tmp_path, kind):
    cfg = _mlp_small(root, f"setup=bn_trained_{kind}", "seed=[3,5]")
    model, parts = _mlp_parts([3, 5], binary_input=cfg.data.binarize)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    mnist.train(cfg, tmp_path)
    after = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["model"]
    _check_frozen(before, after, _expected(model, parts, kind, [3, 5]), ["norms.0.running_mean"])
    rows = (tmp_path / "seed3" / "metrics.csv").read_text()
    assert "gamma/small_fraction" in rows and "gamma/hist19" in rows


def test_gamma_metrics_count_each_copys_switched_off_channels():
    norm = nn.BatchNorm1d(8)
    with torch.no_grad():  # copy 0: 1 of 4 below a tenth of its largest; copy 1: none
        norm.weight.copy_(torch.tensor([2.0, -0.1, 1.0, 0.5, 1.0, 1.0, -1.0, 0.2]))
    out = gamma_metrics([norm], copies=2)
    assert out["gamma/small_fraction"] == [0.25, 0.0]
    assert out["gamma/layer1/small_fraction"] == [0.25, 0.0]
    assert out["gamma/hist00"] == [0.0, 0.0] and out["gamma/hist01"] == [0.25, 0.0]
    assert out["gamma/hist19"] == [0.25, 0.75] and out["gamma/hist04"] == [0.0, 0.25]
    assert all(sum(out[f"gamma/hist{b:02d}"][k] for b in range(20)) == 1 for k in (0, 1))


def test_trainable_is_recorded_only_away_from_all():
    flat = flat_config(_conv("setup=bn32_gamma"))
    assert "train.trainable" not in comparable_config(flat)
    flat = flat_config(_conv("setup=bn32_trained_norm"))
    assert comparable_config(flat)["train.trainable"] == "norm"


def test_an_unknown_trainable_is_rejected_when_composing():
    with pytest.raises(ConfigCompositionException, match="train.trainable=gamma") as e:
        compose_config("mnist", ["train.trainable=gamma"])
    assert "expected one of [all, norm, random, output]" in str(e.value.__cause__)


@pytest.mark.parametrize(
    ("study", "overrides", "message"),
    [
        ("renorm", ["setup=bn32", "train.trainable=norm"], "set norm.fix_gamma=false"),
        ("renorm", ["setup=nonorm", "train.trainable=random"], "the network has no norm"),
        (
            "renorm",
            ["setup=bn32_trained_norm", "seed=0", "train.grad_clip=2.0"],
            "set train.grad_clip=null",
        ),
        ("mnist", ["setup=baseline", "train.trainable=norm"], "the network has no norm"),
    ],
)
def test_a_trainable_the_network_cannot_train_fails_before_training(
    root, tmp_path, study, overrides, message
):
    small = _conv_small if study == "renorm" else _mlp_small
    with pytest.raises(ConfigError, match=message):
        (renorm if study == "renorm" else mnist).train(small(root, *overrides), tmp_path)
    assert not (tmp_path / "metrics.csv").exists()
