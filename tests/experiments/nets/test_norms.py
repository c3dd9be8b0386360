"""experiments/nets/norms.py, and the networks' place below the kit: no module of
experiments/nets imports experiments.kit (the kit builds the networks, not the other way)."""

from pathlib import Path

import torch
from torch import nn

import bn
from experiments.nets.convnet import SmallConvNet
from experiments.nets.norms import freeze_norm_scale, norm_layers
from tests.imports import imported_modules

NETS = Path(__file__).resolve().parents[3] / "experiments" / "nets"


def test_no_network_imports_the_kit():
    modules = sorted(NETS.glob("*.py"))
    assert len(modules) > 5
    for path in modules:
        kit = {
            m
            for m in imported_modules(path)
            if m == "experiments.kit" or m.startswith("experiments.kit.")
        }
        assert not kit, (path.name, kit)


def test_the_import_check_sees_both_forms(tmp_path):
    (tmp_path / "m.py").write_text("import experiments.kit.norm\nfrom experiments import kit\n")
    assert {"experiments.kit.norm", "experiments.kit"} <= imported_modules(tmp_path / "m.py")


def test_a_frozen_scale_is_one_and_gets_no_gradient():
    model = SmallConvNet(linear_norm_layer=lambda c: nn.LayerNorm(c), fix_gamma=False)
    for m in norm_layers(model):
        nn.init.uniform_(m.weight, 2.0, 3.0)
    freeze_norm_scale(model)
    layers = norm_layers(model)
    assert [type(m) for m in layers] == [bn.BatchNorm2d] * 3 + [nn.LayerNorm]
    for m in layers:
        assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.weight.requires_grad
        assert m.bias.requires_grad  # β still learns
    model(torch.randn(4, 1, 28, 28)).sum().backward()
    assert all(m.weight.grad is None for m in layers)
    assert len(norm_layers(SmallConvNet(norm_layer=None, linear_norm_layer=None))) == 0
