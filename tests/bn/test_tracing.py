"""torch's tool chain on models holding ``bn`` layers: torch.fx (and torchvision's feature
extractor), torch.compile without graph breaks, torch.export in training mode, and ``bn.to_torch``
back to plain ``torch.nn``."""

import copy

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models.feature_extraction import create_feature_extractor

import bn
from tests.steps import assert_same_steps, train_steps

LAYERS = {
    "bn-fast": lambda: bn.BatchNorm2d(4),
    "bn-reference": lambda: bn.BatchNorm2d(4, impl="reference"),
    "brn": lambda: bn.BatchRenorm2d(4, r_max=1.5, d_max=0.5),
    "brn-schedule": lambda: bn.BatchRenorm2d(4),  # the paper's, mid-ramp (below)
    "brn-microbatch": lambda: bn.BatchRenorm2d(4, r_max=1.5, d_max=0.5, microbatch=2),
    "brn-reference": lambda: bn.BatchRenorm2d(4, r_max=1.5, d_max=0.5, impl="reference"),
}


BUFFERS = {"1.running_mean", "1.running_var"}  # the norm's


def _net(layer: str) -> nn.Module:
    torch.manual_seed(0)
    norm = LAYERS[layer]()
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        norm.num_batches_tracked.fill_(20_000)  # inside both of the paper's ramps
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), norm, nn.ReLU(), nn.Flatten(), nn.Linear(64, 2)
    ).double()


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_fx_symbolic_trace_computes_what_the_module_computes(layer, training):
    model = _net(layer).train(training)
    traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    assert_same_steps(train_steps(model), train_steps(traced), BUFFERS)


@pytest.mark.parametrize(
    "layer,message",
    [
        (lambda: bn.BatchNorm2d(4, microbatch=2), "per-microbatch"),
        (lambda: bn.BatchRenorm2d(4, sync_stats=True), "sync_stats=True"),
        (lambda: bn.BatchNorm2d(4, momentum=None), "momentum=None"),
    ],
    ids=["bn-microbatch", "sync", "cumulative"],
)
def test_fx_refuses_what_it_cannot_record(layer, message):
    with pytest.raises(NotImplementedError, match=f"cannot be traced by torch.fx.*{message}"):
        torch.fx.symbolic_trace(nn.Sequential(layer()))
    torch.fx.symbolic_trace(nn.Sequential(layer()).eval())  # inference traces


def _resnet18_batch_renorm() -> nn.Module:
    torch.manual_seed(0)
    return bn.convert_norm(torchvision.models.resnet18(num_classes=10), "batchrenorm").double()


@pytest.mark.slow
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_torchvision_feature_extractor(training):
    model = _resnet18_batch_renorm().train(training)
    extractor = create_feature_extractor(copy.deepcopy(model), {"layer2": "mid", "fc": "out"})
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64)
    features = {}
    model.layer2.register_forward_hook(lambda m, i, o: features.__setitem__("mid", o))
    out = model(x)
    got = extractor(x)
    torch.testing.assert_close(got["mid"], features["mid"])
    torch.testing.assert_close(got["out"], out)


@pytest.mark.slow
def test_compile_has_no_graph_break():
    explanation = torch._dynamo.explain(_resnet18_batch_renorm().train())(
        torch.randn(4, 3, 32, 32, dtype=torch.float64)
    )
    assert explanation.graph_break_count == 0, explanation.break_reasons


@pytest.mark.slow
@pytest.mark.parametrize("layer", list(LAYERS))
def test_every_layer_compiles_without_a_graph_break(layer):
    explanation = torch._dynamo.explain(_net(layer).train())(
        torch.randn(8, 3, 6, 6, dtype=torch.float64)
    )
    assert explanation.graph_break_count == 0, explanation.break_reasons


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["brn", "brn-schedule", "brn-microbatch", "bn-fast"])
def test_compile_fullgraph_computes_what_eager_computes(layer):
    model = _net(layer).train()
    compiled = torch.compile(copy.deepcopy(model), fullgraph=True, backend="aot_eager")
    assert_same_steps(train_steps(model), train_steps(compiled), BUFFERS)


@pytest.mark.parametrize("layer", ["brn", "brn-schedule", "brn-microbatch"])
def test_export_in_training_mode(layer):
    model = _net(layer).train()
    x = torch.randn(8, 3, 6, 6, dtype=torch.float64)
    traced = copy.deepcopy(model)
    exported = torch.export.export(traced, (x,)).module()
    for _ in range(2):  # the buffers move, and the exported module moves them the same way
        torch.testing.assert_close(exported(x), model(x))
        for (name, a), b in zip(model.named_buffers(), exported.buffers(), strict=True):
            torch.testing.assert_close(b, a, msg=name)
    last = traced[1]._last  # the exported layer keeps no fake tensor for its clip fractions
    assert last is None or not any(isinstance(t, torch._subclasses.FakeTensor) for t in last)


def test_fx_graph_reads_the_step_when_it_runs():
    """The schedule is computed in the graph from the step buffer: traced at one step, run at
    another, the graph clips as the layer does there (not as at trace time)."""
    model = _net("brn-schedule").train()
    traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    for m in (model, traced):
        m.get_submodule("1").num_batches_tracked.fill_(5_000)  # r_max = 1, d_max = 0 there
    assert_same_steps(train_steps(model, 1), train_steps(traced, 1), BUFFERS)
    assert model[1].current_r_max > 1.0  # and it moved on by one step


def test_to_torch_gives_plain_layers_with_the_same_inference():
    model = _resnet18_batch_renorm()
    model(torch.randn(4, 3, 32, 32, dtype=torch.float64))  # a step: statistics move
    model.eval()
    plain = bn.to_torch(copy.deepcopy(model))
    norms = [m for m in plain.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(norms) == 20 and all(type(m) is nn.BatchNorm2d for m in norms)
    assert plain.state_dict().keys() == model.state_dict().keys()
    for k, v in model.state_dict().items():
        assert torch.equal(plain.state_dict()[k], v), k
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    torch.testing.assert_close(plain(x), model(x), rtol=0, atol=0)


def test_to_torch_for_sync_and_norm_act_layers():
    sync = bn.to_torch(bn.BatchRenorm2d(3, sync_stats=True, momentum=0.05))
    assert type(sync) is nn.SyncBatchNorm and sync.momentum == 0.05
    act = bn.BatchNormAct2d(3, act=nn.ReLU()).eval()
    plain = bn.to_torch(act)
    assert isinstance(plain, nn.Sequential) and type(plain[0]) is nn.BatchNorm2d
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(plain(x), act(x))


# -- torch's FX fusion tools: they fold bn layers as torch's own ----------------------------------


def _batch_norm_calls(graph_module: torch.fx.GraphModule) -> int:
    """BN calls left in a graph: functional ``batch_norm`` or a call to a BN module."""
    calls = 0
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and "batch_norm" in str(node.target):
            calls += 1
        elif node.op == "call_module":
            calls += isinstance(
                graph_module.get_submodule(node.target), nn.modules.batchnorm._BatchNorm
            )
    return calls


def _module_types(model: nn.Module) -> dict[str, int]:
    types: dict[str, int] = {}
    for m in model.modules():
        types[type(m).__name__] = types.get(type(m).__name__, 0) + 1
    return types


def _resnet18_pair(kind: str) -> tuple[nn.Module, nn.Module]:
    """torchvision's resnet18 after one training step, and the same converted to ``kind``."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).double()
    model(torch.randn(4, 3, 32, 32, dtype=torch.float64))  # statistics away from their defaults
    return model, bn.convert_norm(copy.deepcopy(model), kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["batchnorm", "batchrenorm"])
def test_fx_fuse_folds_bn_layers_as_torchs(kind):
    from torch.fx.experimental.optimization import fuse

    theirs, ours = (m.eval() for m in _resnet18_pair(kind))
    fused_theirs, fused_ours = fuse(theirs), fuse(ours)
    assert _batch_norm_calls(fused_ours) == _batch_norm_calls(fused_theirs) == 0  # 20 before
    assert fused_ours.state_dict().keys() == fused_theirs.state_dict().keys()
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    torch.testing.assert_close(fused_ours(x), ours(x))
    assert sum(isinstance(m, bn.BatchNormBase) for m in ours.modules()) == 20  # model unchanged


# FX graph mode quantization's own warnings: it is deprecated, and its observers say so.
QUANT_WARNINGS = ("ignore::DeprecationWarning", "ignore:Please use quant_min:UserWarning")


@pytest.mark.filterwarnings(*QUANT_WARNINGS)
def test_fx_fusion_and_plain_tracing_of_a_small_model():
    """fuse and prepare_fx fold Conv→bn and Linear→bn in eval mode; a plain trace still records
    the layer's F.batch_norm. In training, BN fails fuse's own check, as torch's BN does; a Batch
    Renorm layer, which torch's BN is not, is left unfused with a warning."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx
    from torch.fx.experimental.optimization import fuse

    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), bn.BatchRenorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(16, 5)
    )
    model.append(bn.BatchNorm1d(5)).eval()
    assert _batch_norm_calls(fuse(model)) == 0
    x = torch.randn(2, 3, 6, 6)
    prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("x86"), (x,))
    assert _batch_norm_calls(prepared) == 0 and "ConvReLU2d" in _module_types(prepared)
    traced = torch.fx.symbolic_trace(model)
    assert _batch_norm_calls(traced) == 2 and "1.running_mean" in dict(traced.named_buffers())
    with pytest.warns(UserWarning, match="fuse leaves this BatchRenorm2d unfused.*bn.to_torch"):
        fuse(model[:3].train())
    with pytest.raises(AssertionError, match="Fusion only for eval"), pytest.warns(UserWarning):
        fuse(model.train())


@pytest.mark.slow
@pytest.mark.filterwarnings(*QUANT_WARNINGS)
def test_prepare_fx_fuses_bn_layers_as_torchs():
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    x = torch.randn(2, 3, 32, 32)
    prepared = [
        prepare_fx(m.float().eval(), get_default_qconfig_mapping("x86"), (x,))
        for m in _resnet18_pair("batchrenorm")
    ]
    theirs, ours = (_module_types(p) for p in prepared)
    assert ours["ConvReLU2d"] == theirs["ConvReLU2d"] == 9 and ours == theirs
    assert _batch_norm_calls(prepared[1]) == _batch_norm_calls(prepared[0]) == 0
    for p in prepared:
        p(x)  # calibration
    quantized = [convert_fx(p) for p in prepared]
    torch.testing.assert_close(quantized[1](x), quantized[0](x), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.filterwarnings(*QUANT_WARNINGS)
def test_prepare_qat_fx_fuses_bn_and_says_when_it_cannot():
    """In training, plain BN is torch's BN and fuses as torch's (ConvBn2d, ConvBnReLU2d);
    Batch Renorm is not, and stays unfused with a warning naming bn.to_torch."""
    from torch.ao.quantization import get_default_qat_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_qat_fx

    qconfig, x = get_default_qat_qconfig_mapping("x86"), torch.randn(2, 3, 32, 32)
    theirs, ours = (
        prepare_qat_fx(m.float().train(), qconfig, (x,)) for m in _resnet18_pair("batchnorm")
    )
    assert _module_types(ours) == _module_types(theirs)
    assert _module_types(ours)["ConvBnReLU2d"] == 9 and _module_types(ours)["ConvBn2d"] == 11
    brn = _resnet18_pair("batchrenorm")[1].float().train()
    with pytest.warns(UserWarning, match="leaves this BatchRenorm2d unfused.*bn.to_torch"):
        prepared = prepare_qat_fx(brn, qconfig, (x,))
    assert "ConvBn2d" not in _module_types(prepared)
