"""The depth sweep (mechanism study): the networks, one run per depth, the ratio it logs,
resume, and the figure from collected runs. Offline, on the tiny generated data."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import bn
from experiments import depth
from experiments.kit.errors import ConfigError
from experiments.kit.results import collect
from experiments.nets.deep_mlp import DeepMLP
from experiments.studies import study
from tests.configs import compose_config
from tests.runs import metric_rows


def _small(root: Path, *extra):
    return compose_config(
        "depth",
        [
            "data=fashion_mnist", f"data.root={root}", "data.download=false", "data.verify=false",
            "logger.mode=disabled", "train.steps=4", "train.batch_size=20", "model.depths=[1,3]",
            "model.width=16", *extra,
        ],
    )  # fmt: skip


def test_deep_mlp_layers_and_initialisation():
    torch.manual_seed(0)
    net = DeepMLP(
        3, width=400, activation="relu", norm_layer=bn.get_norm_layer("batchnorm", dims=1)
    )
    assert [type(m).__name__ for m in net][:3] == ["Linear", "BatchNorm1d", "ReLU"]
    assert len(net.linears) == 4 and all(m.bias is None for m in net.linears[:3])
    for m in net.linears:  # He initialisation: std sqrt(2 / fan_in)
        assert m.weight.std().item() == pytest.approx((2 / m.in_features) ** 0.5, rel=0.05)
    plain = DeepMLP(2, width=8, activation="sigmoid")
    assert all(m.bias is not None for m in plain.linears)
    with pytest.raises(ValueError, match="activation='tanh'"):
        DeepMLP(2, activation="tanh")


@pytest.mark.slow
def test_one_run_per_depth_and_the_logged_ratio(root, tmp_path):
    summaries = depth.train(_small(root), tmp_path)
    assert [s["depth"] for s in summaries] == [1, 3]
    assert [s["setup"] for s in summaries] == ["deep_mlp_bn_relu_d1", "deep_mlp_bn_relu_d3"]
    for s in summaries:
        rows = metric_rows(tmp_path / f"depth{s['depth']}")
        ratios = [(int(r["step"]), float(r["value"])) for r in rows if r["metric"] == "grad_ratio"]
        assert [step for step, _ in ratios] == [0, 1, 2, 3, 4]
        assert s["grad_ratio_init"] == pytest.approx(ratios[0][1], rel=1e-5)
        assert json.loads((tmp_path / f"depth{s['depth']}" / "summary.json").read_text()) == s


def test_the_ratio_is_the_first_over_the_last_layers_gradient_norm(root):
    cfg = _small(root)
    torch.manual_seed(0)
    [net, _] = depth.build_networks(cfg, 784)
    x, y = torch.randn(20, 784), torch.randint(0, 10, (20,))
    loss = F.cross_entropy(net(x), y)
    first, last = torch.autograd.grad(loss, [net.linears[0].weight, net.linears[-1].weight])
    from experiments.kit.measures import first_last_gradient_ratio

    loss = F.cross_entropy(net(x), y)
    ratio = first_last_gradient_ratio([net.linears[0].weight, net.linears[-1].weight], loss)
    assert ratio == pytest.approx((first.norm() / last.norm()).item())


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted(root, tmp_path, monkeypatch):
    from tests.interrupt import killed_after_checkpoint

    full = depth.train(_small(root, "train.steps=6"), tmp_path / "full")
    with killed_after_checkpoint(monkeypatch, n=3), pytest.raises(KeyboardInterrupt):
        depth.train(_small(root, "train.steps=6"), tmp_path / "killed")
    resumed = depth.train(_small(root, "train.steps=6", "resume=true"), tmp_path / "killed")
    for a, b in zip(full, resumed, strict=True):
        assert metric_rows(tmp_path / "full" / f"depth{a['depth']}") == metric_rows(
            tmp_path / "killed" / f"depth{b['depth']}"
        )
        assert a["grad_ratio"] == b["grad_ratio"]


@pytest.mark.slow
def test_a_diverging_network_stops_and_the_others_go_on(root, tmp_path):
    summaries = depth.train(_small(root, "setup=deep_mlp", "train.lr=1e6"), tmp_path)
    assert any(s["diverged"] for s in summaries)


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.activation=tanh", "model.activation='tanh' must be one of"),
        ("model.depths=[2,2]", "has repeated depths"),
        ("seed=[0,1]", "must be one integer"),
    ],
)
def test_invalid_settings_fail_before_training(root, tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        depth.train(_small(root, override), tmp_path)


@pytest.mark.slow
def test_collector_and_figure(root, tmp_path, monkeypatch):
    for setup in ("deep_mlp", "deep_mlp_bn"):
        for act in ("relu", "sigmoid", "linear"):
            depth.train(
                _small(root, f"setup={setup}", f"model.activation={act}"),
                tmp_path / "sweep" / f"{setup}_{act}",
            )
    out = tmp_path / "results"
    [summary] = collect(study("depth"), tmp_path / "sweep", out, "test", None)
    assert summary["setups"]["deep_mlp_bn_relu_d3"]["depth"] == 3
    from scripts import plot_depth, plotting

    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    assert plot_depth.figure(out).with_suffix(".svg").exists()


def test_an_identity_factory_is_no_norm():
    plain = DeepMLP(2, width=8)
    identity = DeepMLP(2, width=8, norm_layer=bn.get_norm_layer("none"))
    assert [m.bias is not None for m in identity.linears] == [True] * 3
    assert len(identity) == len(plain) + 2  # the Identity modules, in place of the norms
