"""``convert_norm`` on real model zoos: torchvision's classification models and timm's families.

BN → BN must change nothing a model computes (train and eval outputs, every gradient); BN →
Batch Renorm must keep every module that is not a BN layer, timm's activations inside its
``BatchNormAct2d`` included.
"""

import copy

import pytest
import timm
import torch
import torchvision
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

import bn

TORCHVISION = [
    "resnet18",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "regnet_y_400mf",
    "shufflenet_v2_x0_5",
    "mnasnet0_5",
]
TIMM = ["resnet18", "efficientnet_b0", "mobilenetv3_small_050", "regnety_002", "convnext_atto"]


def randomized(model: nn.Module) -> nn.Module:
    """``model`` in float64 with every BN's running statistics and affine parameters away from
    their defaults (a conversion that dropped one would then show)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model.double()


def _build(zoo: str, name: str) -> nn.Module:
    torch.manual_seed(0)
    if zoo == "torchvision":
        return randomized(getattr(torchvision.models, name)(weights=None, num_classes=10))
    return randomized(timm.create_model(name, pretrained=False, num_classes=10))


def _outputs_and_grads(model: nn.Module, training: bool):
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    model.train(training)
    torch.manual_seed(2)  # the same dropout and stochastic-depth draws in both models
    y = model(x)
    y.square().sum().backward()
    return y.detach(), {k: p.grad for k, p in model.named_parameters()}


def _convert(model: nn.Module, kind: str = "batchnorm") -> nn.Module:
    """``bn.convert_norm``, which warns where it replaces nothing (timm's ConvNeXt: LayerNorm)."""
    if any(isinstance(m, _BatchNorm) for m in model.modules()):
        return bn.convert_norm(model, kind)
    with pytest.warns(UserWarning, match="replaced no layer: the model holds .*LayerNorm2d"):
        return bn.convert_norm(model, kind)


MODELS = [("torchvision", n) for n in TORCHVISION] + [("timm", n) for n in TIMM]


@pytest.mark.slow
@pytest.mark.parametrize("zoo,name", MODELS, ids=[f"{z}-{n}" for z, n in MODELS])
def test_bn_to_bn_changes_nothing(zoo, name):
    model = _build(zoo, name)
    converted = _convert(copy.deepcopy(model))
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    ours = [m for m in converted.modules() if isinstance(m, _BatchNorm)]
    assert len(ours) == len(norms) and all(isinstance(m, bn.BatchNormBase) for m in ours)
    assert converted.state_dict().keys() == model.state_dict().keys()
    for training in (True, False):
        a, b = copy.deepcopy(model), copy.deepcopy(converted)
        ya, grads_a = _outputs_and_grads(a, training)
        yb, grads_b = _outputs_and_grads(b, training)
        torch.testing.assert_close(yb, ya, rtol=1e-12, atol=1e-12)
        # In order: a norm-act layer's parameters are its norm's (``bn1.norm.weight``).
        for (k, g), h in zip(grads_a.items(), grads_b.values(), strict=True):
            torch.testing.assert_close(h, g, rtol=1e-10, atol=1e-12, msg=k)
        for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
            torch.testing.assert_close(v, u, rtol=1e-12, atol=1e-12, msg=k)


def _non_bn_modules(model: nn.Module) -> list[tuple[str, type]]:
    """Every module but the BN layers; a norm-act layer of ``bn`` (a block that holds the norm as
    ``norm``) counts as a BN layer, its ``drop`` and ``act`` as the modules they were."""
    norms = (_BatchNorm, bn.BatchNormAct2d, bn.BatchRenormAct2d)
    return [(n, type(m)) for n, m in model.named_modules() if not isinstance(m, norms)]


@pytest.mark.slow
@pytest.mark.parametrize("zoo,name", MODELS, ids=[f"{z}-{n}" for z, n in MODELS])
def test_bn_to_batch_renorm_keeps_every_other_module(zoo, name):
    model = _build(zoo, name)
    converted = _convert(copy.deepcopy(model), "batchrenorm")
    assert _non_bn_modules(converted) == _non_bn_modules(model)
    for n, m in model.named_modules():
        if isinstance(m, _BatchNorm):
            c = converted.get_submodule(n)
            assert bn.is_batch_renorm(getattr(c, "norm", c)), n
    converted.eval()
    model.eval()
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    # Inference is BN with the same statistics, so the converted model computes the same.
    torch.testing.assert_close(converted(x), model(x), rtol=1e-10, atol=1e-10)


def test_timm_norm_act_keeps_its_activation():
    layer = timm.layers.BatchNormAct2d(4, act_layer=nn.ReLU)
    converted = bn.convert_norm(layer)
    assert type(converted) is bn.BatchNormAct2d and converted.act is layer.act
    x = torch.randn(3, 4, 2, 2)
    torch.testing.assert_close(converted(x), layer(x))
    assert (converted(x) >= 0).all()
    renorm = bn.convert_norm(layer, "batchrenorm")
    assert type(renorm) is bn.BatchRenormAct2d and renorm.act is layer.act


def test_an_unknown_subclass_is_refused_by_name():
    class NormThenScale(nn.BatchNorm2d):
        def forward(self, x):
            return 2 * super().forward(x)

    model = nn.Sequential(
        nn.BatchNorm2d(3), nn.Conv2d(3, 4, 1), NormThenScale(4), nn.BatchNorm2d(4)
    )
    kinds = [type(m) for m in model]
    refused = r"cannot convert .*NormThenScale.*skip=\(NormThenScale,\)"
    for convert in (bn.convert_norm, bn.convert_sync_batchnorm, bn.to_torch):
        with pytest.raises(ValueError, match=refused):
            convert(model)
        assert [type(m) for m in model] == kinds  # nothing replaced, before or after it
    converted = bn.convert_norm(model, skip=(NormThenScale,))
    assert type(converted[2]) is NormThenScale and type(converted[3]) is bn.BatchNorm2d


def test_fusion_keeps_the_activation_of_a_norm_act_layer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), bn.BatchNormAct2d(8, act=nn.ReLU())).eval()
    with torch.no_grad():
        model[1].norm.running_mean.uniform_(-1, 1)
        model[1].norm.bias.uniform_(-1, 1)
    fused = bn.fuse_bn_eval(model)
    assert isinstance(fused[1], nn.Sequential) and isinstance(fused[1][1], nn.ReLU)
    x = torch.randn(2, 3, 6, 6)
    torch.testing.assert_close(fused(x), model(x))
    with pytest.raises(ValueError, match="BatchNormAct2d computes more than the normalization"):
        bn.fuse_linear_bn(model[0], model[1])


def test_an_uninitialized_lazy_layer_is_refused():
    model = nn.Sequential(nn.LazyBatchNorm2d())
    with pytest.raises(ValueError, match="LazyBatchNorm2d.*run one forward pass first"):
        bn.convert_norm(model)
    model(torch.randn(2, 3, 4, 4))  # now a BatchNorm2d
    assert type(bn.convert_norm(model)[0]) is bn.BatchNorm2d


def test_a_layer_that_cannot_be_built_leaves_the_model_as_it_was():
    """Batch Renorm refuses track_running_stats=False when it is built: the BN before it in the
    model must not have been replaced already."""
    model = nn.Sequential(nn.BatchNorm2d(3), nn.BatchNorm2d(3, track_running_stats=False))
    with pytest.raises(ValueError, match="track_running_stats=False is impossible"):
        bn.convert_norm(model, "batchrenorm")
    assert [type(m) for m in model] == [nn.BatchNorm2d, nn.BatchNorm2d]


def test_a_shared_layer_gets_one_replacement():
    norm = nn.BatchNorm2d(3)
    model = nn.Sequential(norm, nn.ReLU(), norm)
    converted = bn.convert_norm(model)
    assert converted[0] is converted[2] and type(converted[0]) is bn.BatchNorm2d
