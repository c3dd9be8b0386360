"""bn.convert_norm, bn.convert_sync_batchnorm and inference fusion."""

import copy

import pytest
import torch
from torch import nn

import bn


def _torch_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(8, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU()),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
        nn.BatchNorm1d(10),
    )


def _randomize_stats(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 2)
                m.bias.normal_()


@pytest.mark.parametrize("kind", ["batchnorm", "batchrenorm"])
def test_convert_keeps_weights_and_outputs(kind):
    torch_model = _torch_model()
    _randomize_stats(torch_model)
    ours = bn.convert_norm(
        _copy(torch_model), kind, **({"r_max": 1.0, "d_max": 0.0} if kind == "batchrenorm" else {})
    )
    norms = [m for m in ours.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    expected_types = {
        "batchnorm": (bn.BatchNorm2d, bn.BatchNorm1d),
        "batchrenorm": (bn.BatchRenorm2d, bn.BatchRenorm1d),
    }[kind]
    assert len(norms) == 3
    assert [type(m) for m in norms] == [expected_types[0], expected_types[0], expected_types[1]]
    x = torch.randn(6, 3, 6, 6)
    torch.testing.assert_close(ours.eval()(x), torch_model.eval()(x))
    torch.testing.assert_close(ours.train()(x), torch_model.train()(x))


def _copy(model):
    import copy

    return copy.deepcopy(model)


def test_convert_applies_overrides():
    model = bn.convert_norm(_torch_model(), "batchrenorm", microbatch=2, momentum=0.01)
    layer = model[1]
    assert layer.microbatch == 2 and layer.momentum == 0.01


def test_convert_sync_keeps_renorm():
    model = nn.Sequential(
        bn.BatchRenorm2d(4, r_max=2.0, d_max=1.0), nn.BatchNorm2d(4), bn.BatchNorm1d(4)
    )
    synced = bn.convert_sync_batchnorm(model)
    assert type(synced[0]) is bn.BatchRenorm2d and synced[0].sync_stats
    assert synced[0].r_max == 2.0 and synced[0].d_max == 1.0
    assert type(synced[1]) is bn.BatchNorm2d and synced[1].sync_stats
    assert type(synced[2]) is bn.BatchNorm1d and synced[2].sync_stats
    # torch's own converter would have dropped the renorm:
    assert (
        type(nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(bn.BatchRenorm2d(4)))[0])
        is nn.SyncBatchNorm
    )


def test_fuse_bn_eval_gives_identical_outputs():
    model = bn.convert_norm(_torch_model(), "batchnorm")
    _randomize_stats(model)
    model.eval()
    fused = bn.fuse_bn_eval(model)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in fused.modules())
    x = torch.randn(5, 3, 6, 6)
    torch.testing.assert_close(fused(x), model(x), rtol=1e-5, atol=1e-5)


def test_bn_affine_is_algorithm_2_step_11():
    layer = bn.BatchNorm1d(3).eval()
    _randomize_stats(layer)
    scale, shift = bn.bn_affine(layer)
    x = torch.randn(4, 3)
    torch.testing.assert_close(layer(x), x * scale + shift)


def test_fuse_rejects_training_mode():
    with pytest.raises(ValueError, match="training mode"):
        bn.fuse_linear_bn(nn.Linear(2, 3), bn.BatchNorm1d(3))


def _source_layers():
    """torch's and ours, with non-default eps and momentum (torchvision's Inception-v3: 1e-3)."""
    return [
        nn.BatchNorm2d(4, eps=1e-3, momentum=0.3),
        bn.BatchNorm2d(4, eps=1e-3, momentum=0.3),
        bn.BatchRenorm2d(4, eps=1e-3, momentum=0.05, r_max=2.0, d_max=1.0),
    ]


@pytest.mark.parametrize("source", range(3))
@pytest.mark.parametrize("kind", ["batchnorm", "batchrenorm"])
def test_convert_keeps_eps_and_momentum(source, kind):
    layer = _source_layers()[source]
    new = bn.convert_norm(layer, kind)
    assert new.eps == 1e-3
    if kind == "batchnorm" or bn.is_batch_renorm(layer):
        assert new.momentum == layer.momentum
    else:  # BN becoming Batch Renorm: the paper's α, not BN's rate
        assert new.momentum == 0.01
    assert bn.convert_norm(_source_layers()[source], kind, momentum=0.2).momentum == 0.2
    synced = bn.convert_sync_batchnorm(_source_layers()[source])
    assert (synced.eps, synced.momentum, synced.sync_stats) == (1e-3, layer.momentum, True)


def test_convert_to_batchrenorm_uses_the_paper_momentum():
    model = bn.convert_norm(_torch_model(), "batchrenorm")
    norms = [m for m in model.modules() if bn.is_batch_renorm(m)]
    assert len(norms) == 3 and all(m.momentum == 0.01 for m in norms)


def test_convert_norm_converts_sync_batchnorm():
    sync = nn.SyncBatchNorm(4, eps=1e-3, momentum=0.2)
    _randomize_stats(sync)
    model = nn.Sequential(nn.Conv2d(3, 4, 1), sync)
    for kind in ("batchnorm", "batchrenorm"):
        converted = bn.convert_norm(_copy(model), kind)[1]
        assert not isinstance(converted, nn.SyncBatchNorm)
        assert isinstance(converted, bn.BatchNormBase) and converted.sync_stats
        assert bn.is_batch_renorm(converted) == (kind == "batchrenorm")
        assert converted.eps == 1e-3 and converted.process_group is sync.process_group
        torch.testing.assert_close(converted.weight, sync.weight, rtol=0, atol=0)
        torch.testing.assert_close(converted.running_var, sync.running_var, rtol=0, atol=0)
        converted.eval()
        for shape in [(5, 4), (5, 4, 3), (5, 4, 3, 3)]:  # like SyncBatchNorm, any rank
            x = torch.randn(shape)
            want = torch.nn.functional.batch_norm(
                x, sync.running_mean, sync.running_var, sync.weight, sync.bias, eps=1e-3
            )
            torch.testing.assert_close(converted(x), want)
    assert not any(
        isinstance(m, nn.SyncBatchNorm) for m in bn.convert_sync_batchnorm(_copy(model)).modules()
    )


def test_convert_sync_keeps_microbatch():
    model = nn.Sequential(bn.BatchRenorm2d(4, microbatch=2), bn.BatchNorm2d(4, microbatch=4))
    synced = bn.convert_sync_batchnorm(model)
    assert [m.microbatch for m in synced] == [2, 4]
    assert not any(m.sync_stats for m in synced)  # per-microbatch statistics stay per microbatch
    assert bn.is_batch_renorm(synced[0])


def test_conversion_keeps_the_step_count():
    """num_batches_tracked is copied, so a Batch Renorm schedule goes on where it was."""
    layer = nn.BatchNorm2d(3)
    layer.num_batches_tracked.fill_(22_500)
    converted = bn.convert_norm(layer, "batchrenorm")
    assert int(converted.num_batches_tracked) == 22_500
    assert converted.current_r_max == 2.0  # the paper's ramp, halfway from 5k to 40k


def test_a_scripted_bn_layer_is_refused_by_name():
    scripted = torch.jit.script(nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)))
    with pytest.raises(ValueError, match="cannot convert a TorchScript BatchNorm2d"):
        bn.convert_norm(scripted)


def test_torchscript_is_refused_plainly_and_to_torch_is_the_route():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), bn.BatchNorm2d(4), nn.ReLU())
    for layer in (bn.BatchNorm2d(4), bn.BatchRenorm2d(4), bn.BatchNorm2d(4, microbatch=2)):
        with pytest.raises(RuntimeError, match="TorchScript is not supported.*bn.to_torch"):
            torch.jit.script(nn.Sequential(layer))
    with pytest.raises(RuntimeError):
        torch.jit.script(model)
    assert type(model[1]) is bn.BatchNorm2d  # the refused model is as it was
    scripted = torch.jit.script(bn.to_torch(copy.deepcopy(model)))
    x = torch.randn(2, 3, 5, 5)
    for mode in (True, False):
        torch.testing.assert_close(scripted.train(mode)(x), model.train(mode)(x))
