"""Other libraries' BN converters on a model ``bn.convert_norm`` made: timm's
``freeze_batch_norm_2d`` and ``convert_sync_batchnorm``, torch's
``nn.SyncBatchNorm.convert_sync_batchnorm`` and Lightning's ``TorchSyncBatchNorm`` (what
``Trainer(sync_batchnorm=True)`` applies). They swap BN layers found by ``isinstance``; a norm-act
layer that was itself a BN layer became a plain BN, its activation silently dropped, and the sync
converters turned Batch Renorm into plain ``nn.SyncBatchNorm``: ``bn`` now puts its own
synchronized layer in the place they give (``bn/_foreign_sync.py``)."""

import copy

import pytest
import timm
import torch
from timm.layers import BatchNormAct2d as TimmBatchNormAct2d
from torch import nn

import bn
from tests.bn.test_convert_zoo import randomized


def _lightning_sync(model: nn.Module) -> nn.Module:
    plugins = pytest.importorskip("lightning.pytorch.plugins")
    return plugins.TorchSyncBatchNorm().apply(model)


TOOLS = {
    "timm-freeze": timm.layers.freeze_batch_norm_2d,
    "timm-sync": timm.layers.convert_sync_batchnorm,
    "torch-sync": nn.SyncBatchNorm.convert_sync_batchnorm,
    "lightning-sync": _lightning_sync,
}


def _timm_blocks() -> nn.Module:
    """Two of timm's norm-act layers, whose activations (ReLU, SiLU) change what they compute."""
    torch.manual_seed(0)
    return randomized(
        nn.Sequential(
            nn.Conv2d(3, 4, 3),
            TimmBatchNormAct2d(4, act_layer=nn.ReLU),
            nn.Conv2d(4, 4, 1),
            TimmBatchNormAct2d(4, act_layer=nn.SiLU),
        )
    )


def _outputs(model: nn.Module, training: bool) -> torch.Tensor:
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return model.train(training)(x)


def _apply(tool: str, model: nn.Module) -> nn.Module:
    if tool == "timm-freeze":
        return TOOLS[tool](model)
    with pytest.warns(UserWarning, match="bn put its own synchronized layers there"):
        return TOOLS[tool](model)


def _check_unchanged(tool: str, converted: nn.Module, kind: str) -> None:
    """Eval outputs unchanged; training outputs too (a frozen model computes in training what it
    computed in eval; the sync tools' layers, on one process, what ``bn``'s computed): the sync
    tools now leave ``bn``'s synchronized layers, Batch Renorm included."""
    after = _apply(tool, copy.deepcopy(converted))
    layers = [m for m in after.modules() if isinstance(m, bn.BatchNormBase)]
    if tool == "timm-freeze":
        assert not layers  # it did swap
    else:
        assert layers and all(m.sync_stats for m in layers)
        assert not any(type(m) is nn.SyncBatchNorm for m in after.modules())
    want = _outputs(copy.deepcopy(converted), False)
    torch.testing.assert_close(_outputs(after, False), want, rtol=1e-12, atol=1e-12)
    if tool == "timm-freeze":
        torch.testing.assert_close(_outputs(after, True), want, rtol=1e-12, atol=1e-12)
    else:
        want = _outputs(_open(copy.deepcopy(converted)), True)
        torch.testing.assert_close(_outputs(_open(after), True), want, rtol=0, atol=0)
    keys = [k for k in converted.state_dict() if tool != "timm-freeze" or "batches" not in k]
    assert list(after.state_dict()) == keys  # frozen BN has no step count


def _open(model: nn.Module) -> nn.Module:
    """Batch Renorm past its warm-up (r and d clipped to wide bounds), where it is not BN."""
    for m in model.modules():
        if bn.is_batch_renorm(m):
            m.r_max, m.d_max = 3.0, 5.0
    return model


@pytest.mark.parametrize("tool", ["torch-sync", "timm-sync", "lightning-sync"])
def test_sync_converters_leave_batch_renorm_and_microbatch_layers_to_bn(tool):
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), bn.BatchRenorm2d(4, r_max=3.0, d_max=5.0), nn.ReLU(),
        bn.BatchNorm2d(4, microbatch=2), nn.BatchNorm2d(4),
    ).double()  # fmt: skip
    after = _apply(tool, copy.deepcopy(model))
    assert type(after[1]) is bn.BatchRenorm2d and after[1].sync_stats and after[1].r_max == 3.0
    assert after[3].microbatch == 2 and not after[3].sync_stats  # per microbatch: left as it is
    assert type(after[4]) is nn.SyncBatchNorm  # torch's own layers: theirs to convert
    torch.testing.assert_close(_outputs(after, True), _outputs(model, True), rtol=0, atol=0)


def test_a_sync_layer_a_user_puts_in_place_is_theirs():
    model = nn.Sequential(nn.Identity(), bn.BatchRenorm2d(4), bn.BatchNorm2d(4, sync_stats=True))
    model[0] = nn.SyncBatchNorm(4)  # not in a bn layer's place
    model[1] = nn.SyncBatchNorm(4)  # a layer of its own in a bn layer's place: the user's choice
    assert [type(m) for m in bn.to_torch(model)] == [nn.SyncBatchNorm] * 3  # bn's own conversion


@pytest.mark.parametrize("kind", ["batchnorm", "batchrenorm"])
@pytest.mark.parametrize("tool", TOOLS)
def test_a_converted_norm_act_layer_keeps_its_activation_through_other_converters(tool, kind):
    converted = bn.convert_norm(_timm_blocks(), kind)
    assert [type(m) for m in converted[1::2]] == [
        (bn.BatchNormAct2d, bn.BatchRenormAct2d)[kind == "batchrenorm"]
    ] * 2
    _check_unchanged(tool, converted, kind)


def test_a_norm_act_layer_has_timms_state_dict_keys_both_ways():
    """Checkpoints move between timm's model and the converted one, strictly."""
    timm_model = _timm_blocks()
    converted = bn.convert_norm(copy.deepcopy(timm_model), "batchrenorm")
    assert list(converted.state_dict()) == list(timm_model.state_dict())
    fresh = bn.convert_norm(nn.Sequential(*[copy.deepcopy(m) for m in _timm_blocks()]))
    fresh.load_state_dict(timm_model.state_dict())
    timm_model.load_state_dict(converted.state_dict())
    for k, v in timm_model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    fresh[1].load_state_dict({f"norm.{k}": v for k, v in fresh[1].state_dict().items()})


@pytest.mark.slow
@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("name", ["efficientnet_b0", "resnet18"])
def test_other_converters_on_a_converted_timm_model(name, tool):
    """Real timm models: efficientnet_b0's norm-act layers; resnet18 built with them."""
    torch.manual_seed(0)
    kwargs = {"norm_layer": TimmBatchNormAct2d} if name == "resnet18" else {}
    model = randomized(timm.create_model(name, pretrained=False, num_classes=10, **kwargs))
    converted = bn.convert_norm(model)
    assert any(isinstance(m, bn.BatchNormAct2d) for m in converted.modules())
    _check_unchanged(tool, converted, "batchnorm")


def test_a_kept_norm_act_block_is_counted_once_as_its_norm():
    model = nn.Sequential(bn.BatchNormAct2d(4, microbatch=2, act=nn.ReLU()))
    with pytest.warns(UserWarning, match=r"the model holds 1 BatchNorm2d;"):
        _, report = bn.convert_sync_batchnorm(model, return_report=True)
    assert report.kept == {"BatchNorm2d": 1} and model[0].norm.microbatch == 2
    renormed, report = bn.convert_norm(model, "batchrenorm", return_report=True)
    assert type(renormed[0]) is bn.BatchRenormAct2d and report.by_class == {"BatchNormAct2d": 1}
    assert isinstance(renormed[0].act, nn.ReLU) and renormed[0].norm.microbatch == 2
