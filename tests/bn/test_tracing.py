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

LAYERS = {
    "bn-fast": lambda: bn.BatchNorm2d(4),
    "bn-reference": lambda: bn.BatchNorm2d(4, impl="reference"),
    "brn": lambda: bn.BatchRenorm2d(4, r_max=1.5, d_max=0.5),
    "brn-schedule": lambda: bn.BatchRenorm2d(4),  # the paper's, mid-ramp (below)
    "brn-microbatch": lambda: bn.BatchRenorm2d(4, r_max=1.5, d_max=0.5, microbatch=2),
    "brn-reference": lambda: bn.BatchRenorm2d(4, r_max=1.5, d_max=0.5, impl="reference"),
}


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


def _steps(model: nn.Module, steps: int = 3):
    """Outputs, parameter gradients and the norm's buffers after each of ``steps`` steps."""
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        x = torch.randn(8, 3, 6, 6, dtype=torch.float64, generator=g) * 2 + 1
        model.zero_grad()
        y = model(x)
        y.square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        buffers = {k.removeprefix("_orig_mod."): b.clone() for k, b in model.named_buffers()}
        out.append((y.detach(), grads, buffers))
    return out


def _assert_same_steps(a, b):
    """The same outputs, gradients and buffers (a traced module holds only the buffers its
    graph reads)."""
    for (ya, ga, ba), (yb, gb, bb) in zip(a, b, strict=True):
        torch.testing.assert_close(yb, ya)
        for u, v in zip(ga, gb, strict=True):
            torch.testing.assert_close(v, u)
        assert {"1.running_mean", "1.running_var"} <= bb.keys() <= ba.keys()
        for k, v in bb.items():
            torch.testing.assert_close(v, ba[k], msg=k)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_fx_symbolic_trace_computes_what_the_module_computes(layer, training):
    model = _net(layer).train(training)
    traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    _assert_same_steps(_steps(model), _steps(traced))


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
    _assert_same_steps(_steps(model), _steps(compiled))


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
    _assert_same_steps(_steps(model, 1), _steps(traced, 1))
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
