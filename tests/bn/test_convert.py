"""bn.convert_norm, bn.convert_sync_batchnorm and inference fusion."""

import copy
import warnings

import pytest
import torch
import torchvision
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
    # torch's own converter would have dropped the renorm; bn puts its own layer in its place
    with pytest.warns(UserWarning, match="would train Batch Renorm as plain BN"):
        theirs = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(bn.BatchRenorm2d(4)))
    assert type(theirs[0]) is bn.BatchRenorm2d and theirs[0].sync_stats


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
    with pytest.warns(UserWarning, match="replaced no layer.*microbatch set"):
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


# -- what a conversion did: the report, the warning, frozen BN -------------------------------------


def _frozen_resnet18() -> nn.Module:
    """torchvision's resnet18 with FrozenBatchNorm2d (as its detectors' backbones have), its 20
    frozen layers' statistics, affine parameters and eps away from their defaults."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(
        num_classes=10, norm_layer=torchvision.ops.FrozenBatchNorm2d
    )
    with torch.no_grad():
        for i, m in enumerate(m for m in model.modules() if _is_frozen(m)):
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.5, 0.5)
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.eps = (1e-5, 1e-3)[i % 2]
    return model.double().eval()


def _is_frozen(m: nn.Module) -> bool:
    return type(m) is torchvision.ops.FrozenBatchNorm2d


def test_convert_norm_warns_when_it_replaces_nothing_and_names_the_frozen_option():
    model = _frozen_resnet18()
    with pytest.warns(UserWarning, match=r"replaced no layer.*20 FrozenBatchNorm2d.*frozen=True"):
        same, report = bn.convert_norm(model, "batchrenorm", return_report=True)
    assert same is model and sum(map(_is_frozen, model.modules())) == 20  # left as they were
    assert report == bn.ConversionReport(replaced=0, by_class={}, kept={"FrozenBatchNorm2d": 20})
    with pytest.warns(UserWarning, match=r"convert_norm replaced no layer.*no normalization layer"):
        bn.convert_norm(nn.Sequential(nn.Linear(2, 2)))
    with pytest.warns(UserWarning, match="convert_sync_batchnorm replaced no.*frozen BN layers"):
        bn.convert_sync_batchnorm(model)


def test_convert_norm_reports_what_it_replaced():
    model = _torch_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # replacing something warns nothing
        assert isinstance(bn.convert_norm(_copy(model)), nn.Sequential)  # the plain call as ever
        converted, report = bn.convert_norm(_copy(model), "batchrenorm", return_report=True)
    assert isinstance(converted[1], bn.BatchRenorm2d)
    assert report.replaced == 3 and report.by_class == {"BatchNorm2d": 2, "BatchNorm1d": 1}
    shared = nn.BatchNorm2d(3)  # one layer in two places: one replacement, counted once
    twice = nn.Sequential(shared, nn.ReLU(), shared, torchvision.ops.FrozenBatchNorm2d(3))
    twice, report = bn.convert_norm(twice, return_report=True)
    assert twice[0] is twice[2] and report.replaced == 1
    assert report.kept == {"FrozenBatchNorm2d": 1}  # frozen layers kept, and counted
    _, report = bn.convert_sync_batchnorm(
        nn.Sequential(nn.BatchNorm2d(3), bn.BatchRenorm2d(3, microbatch=2)), return_report=True
    )
    assert (report.replaced, report.kept) == (1, {"BatchRenorm2d": 1})


@pytest.mark.parametrize("kind", ["batchnorm", "batchrenorm"])
def test_frozen_true_converts_frozen_bn_with_the_same_inference(kind):
    model = _frozen_resnet18()
    frozen = [m for m in model.modules() if _is_frozen(m)]
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = model(x)
    converted, report = bn.convert_norm(model, kind, frozen=True, return_report=True)
    assert report.replaced == 20 and report.by_class == {"FrozenBatchNorm2d": 20}
    ours = [m for m in converted.modules() if isinstance(m, bn.BatchNormBase)]
    assert not any(map(_is_frozen, converted.modules()))
    assert all(type(m) is (bn.BatchNorm2d, bn.BatchRenorm2d)[kind == "batchrenorm"] for m in ours)
    for old, new in zip(frozen, ours, strict=True):  # carried exactly
        assert new.eps == old.eps and not new.training
        for name in ("weight", "bias", "running_mean", "running_var"):
            assert torch.equal(getattr(new, name), getattr(old, name)), name
        assert new.momentum == (0.1 if kind == "batchnorm" else 0.01)
    assert all(isinstance(m.weight, nn.Parameter) for m in ours)  # now trainable
    # FrozenBatchNorm2d computes x·s + (β − μ·s), F.batch_norm (x − μ)·s + β: equal in exact
    # arithmetic; in float64 they differ by a few ulps per layer, ~1e-15 after 20 layers. A
    # wrong statistic or eps (1e-3 vs 1e-5) moves the outputs by more than 1e-4.
    torch.testing.assert_close(converted(x), want, rtol=1e-12, atol=1e-12)


def test_frozen_true_converts_timm_frozen_norm_act():
    from timm.layers.norm_act import FrozenBatchNormAct2d

    layer = FrozenBatchNormAct2d(4, eps=1e-3, act_layer=nn.ReLU)
    with torch.no_grad():
        layer.running_mean.uniform_(-1, 1)
        layer.bias.uniform_(-1, 1)
    x = torch.randn(3, 4, 5, 5)
    for kind, cls in [("batchnorm", bn.BatchNormAct2d), ("batchrenorm", bn.BatchRenormAct2d)]:
        new = bn.convert_norm(nn.Sequential(layer), kind, frozen=True)[0].eval()
        assert type(new) is cls and new.act is layer.act and new.norm.eps == 1e-3
        torch.testing.assert_close(new(x), layer(x))


# -- revert_sync_batchnorm ------------------------------------------------------------------------


def _sync_candidates() -> nn.Sequential:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4, eps=1e-3),
        bn.BatchRenorm2d(4, momentum=0.05, r_max=1.5, d_max=0.5),
        bn.BatchNorm2d(4, microbatch=2),
        nn.Flatten(),
        bn.BatchRenorm1d(64, affine=False),
    ).double()
    _randomize_stats(model[1:4])
    return model


def _steps(model: nn.Module, training: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    model.train(training)
    return [model(torch.randn(4, 3, 6, 6, dtype=torch.float64, generator=g)) for _ in range(2)]


def test_revert_sync_batchnorm_undoes_convert_sync_batchnorm():
    model = _sync_candidates()
    synced = bn.convert_sync_batchnorm(_copy(model))
    assert [getattr(m, "sync_stats", None) for m in synced] == [None, True, True, False, None, True]
    reverted = bn.revert_sync_batchnorm(synced)
    assert reverted[3] is synced[3]  # not synced: left as it is
    assert [type(m) for m in reverted[1:]] == [
        bn.BatchNorm2d,  # torch's BN became ours when synced
        bn.BatchRenorm2d,
        bn.BatchNorm2d,
        nn.Flatten,
        bn.BatchRenorm1d,
    ]
    norms = [m for m in reverted.modules() if isinstance(m, bn.BatchNormBase)]
    assert not any(m.sync_stats or m.process_group for m in norms)
    assert (reverted[2].momentum, reverted[2].r_max, reverted[2].d_max) == (0.05, 1.5, 0.5)
    assert reverted[1].eps == 1e-3 and reverted[5].weight is None
    assert reverted.state_dict().keys() == model.state_dict().keys()
    for k, v in model.state_dict().items():
        assert torch.equal(reverted.state_dict()[k], v), k
    for training in (True, False):  # the same steps, and the same buffers after them
        a, b = _copy(model), _copy(reverted)
        for ya, yb in zip(_steps(a, training), _steps(b, training), strict=True):
            torch.testing.assert_close(yb, ya, rtol=0, atol=0)
        for (k, u), v in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(v, u, rtol=0, atol=0, msg=k)


def test_revert_sync_batchnorm_turns_torch_sync_batchnorm_into_per_process_bn():
    sync = nn.SyncBatchNorm(4, eps=1e-3, momentum=0.2).double()
    _randomize_stats(sync)
    reverted = bn.revert_sync_batchnorm(_copy(sync))
    assert isinstance(reverted, bn.BatchNormBase) and not bn.is_batch_renorm(reverted)
    assert not reverted.sync_stats and (reverted.eps, reverted.momentum) == (1e-3, 0.2)
    assert all(torch.equal(reverted.state_dict()[k], v) for k, v in sync.state_dict().items())
    for shape in [(6, 4), (6, 4, 3), (6, 4, 3, 3)]:  # any rank, as SyncBatchNorm; train and eval
        x = torch.randn(shape, dtype=torch.float64)
        for training in (True, False):
            torch.testing.assert_close(reverted.train(training)(x), sync.train(training)(x))
        torch.testing.assert_close(reverted.running_var, sync.running_var)
    assert type(bn.to_torch(reverted)) is nn.SyncBatchNorm  # and back to torch's, if wanted
    plain = nn.BatchNorm2d(4)
    assert bn.revert_sync_batchnorm(nn.Sequential(plain))[0] is plain  # nothing to revert
