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
from experiments.kit.evaluation import accuracy
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


def _run_dir(out: Path, summary: dict, side_by_side: bool) -> Path:
    return out / (f"seed{summary['seed']}" if side_by_side else "") / f"depth{summary['depth']}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "every,n,at,seeds",
    [(1, 3, 3, "seed=0"), (4, 1, 4, "seed=0"), (1, 3, 3, "seed=[0,1]")],
)  # checkpoint n is step at's
def test_resume_after_kill_matches_uninterrupted(root, tmp_path, monkeypatch, every, n, at, seeds):
    from tests.interrupt import killed_after_checkpoint

    run = ("train.steps=6", f"eval.checkpoint_every={every}", seeds)
    full = depth.train(_small(root, *run), tmp_path / "full")
    with killed_after_checkpoint(monkeypatch, n=n), pytest.raises(KeyboardInterrupt):
        depth.train(_small(root, *run), tmp_path / "killed")
    assert torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=False)["step"] == at
    resumed = depth.train(_small(root, *run, "resume=true"), tmp_path / "killed")
    side = "[" in seeds
    for a, b in zip(full, resumed, strict=True):
        assert metric_rows(_run_dir(tmp_path / "full", a, side)) == metric_rows(
            _run_dir(tmp_path / "killed", b, side)
        )
        assert a["grad_ratio"] == b["grad_ratio"]


@pytest.mark.slow
def test_a_diverging_network_stops_and_the_others_go_on(root, tmp_path):
    summaries = depth.train(_small(root, "setup=deep_mlp", "train.lr=1e6"), tmp_path)
    assert any(s["diverged"] for s in summaries)


@pytest.mark.slow
def test_a_diverging_copy_side_by_side_ends_where_its_seed_alone_does(root, tmp_path):
    """Seeds side by side: a copy whose loss stops being finite diverges at its own run's step,
    and the copies beside it (the other seed's, the shallow depth's) train as they would alone."""
    run = ("setup=deep_mlp", "model.depths=[1,6]", "train.lr=3", "train.steps=8", "eval.test_examples=30", "eval.every=4")  # fmt: skip
    side = depth.train(_small(root, *run, "seed=[0,1]"), tmp_path / "side")
    alone = [a for seed in (0, 1) for a in depth.train(_small(root, *run, f"seed={seed}"), tmp_path / f"s{seed}")]  # fmt: skip
    own = {(a["depth"], a["seed"]): a for a in alone}
    assert any(s["diverged"] for s in side) and not all(s["diverged"] for s in side)
    for s in side:
        a = own[(s["depth"], s["seed"])]
        assert (s["diverged"], s["steps_done"]) == (a["diverged"], a["steps_done"])
        if not s["diverged"]:
            assert s["test_acc_subset"] == a["test_acc_subset"]
            assert s["grad_ratio"] == pytest.approx(a["grad_ratio"], rel=1e-4, nan_ok=True)


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.activation=tanh", "model.activation='tanh' must be one of"),
        ("model.depths=[2,2]", "has repeated depths"),
        ("seed=[0,0]", "has repeated seeds"),
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
    depth.train(_small(root, "setup=deep_mlp_bn", "seed=[1,2]"), tmp_path / "sweep" / "side")
    out = tmp_path / "results"
    [summary] = collect(study("depth"), tmp_path / "sweep", out, "test", None)
    assert summary["setups"]["deep_mlp_bn_relu_d3"]["depth"] == 3
    assert summary["setups"]["deep_mlp_bn_relu_d3"]["seeds"] == [0, 1, 2]  # the stack's, nested
    from scripts import plot_depth, plotting

    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    assert plot_depth.figure(out).with_suffix(".svg").exists()


def test_an_identity_factory_is_no_norm():
    plain = DeepMLP(2, width=8)
    identity = DeepMLP(2, width=8, norm_layer=bn.get_norm_layer("none"))
    assert [m.bias is not None for m in identity.linears] == [True] * 3
    assert len(identity) == len(plain) + 2  # the Identity modules, in place of the norms


@pytest.mark.slow
def test_a_diverged_depth_keeps_no_test_accuracy_and_the_others_measure_theirs(root, tmp_path):
    """The learning-rate grid's runs: a rate at which one depth's loss stops being finite marks
    that run diverged (no final numbers) and the other depths of the process train on, each
    evaluated on the first test images."""
    cfg = _small(
        root,
        "setup=deep_mlp",
        "model.depths=[1,6]",
        "train.lr=3",
        "eval.test_examples=30",
        "eval.every=4",
    )
    summaries = depth.train(cfg, tmp_path)
    by_depth = {s["depth"]: s for s in summaries}
    assert by_depth[6]["diverged"] and "test_acc_subset" not in by_depth[6]
    assert not by_depth[1]["diverged"] and 0 <= by_depth[1]["test_acc_subset"] <= 1
    rows = metric_rows(tmp_path / "depth1")
    assert [int(r["step"]) for r in rows if r["metric"] == "test/acc_subset"] == [0, 4]


def test_test_accuracy_is_the_share_right_in_inference_mode_and_keeps_the_running_stats(root):
    cfg = _small(root)
    torch.manual_seed(0)
    [net, _] = depth.build_networks(cfg, 784)
    net(torch.randn(20, 784))  # running statistics away from their start
    before = {k: v.clone() for k, v in net.named_buffers()}
    x, y = torch.randn(25, 784), torch.randint(0, 10, (25,))
    net.eval()
    expected = (net(x).argmax(1) == y).float().mean().item()
    net.train()
    assert accuracy(net, [(x[:10], y[:10]), (x[10:], y[10:])], depth.CPU) == pytest.approx(expected)  # fmt: skip
    assert net.training
    with depth.running_stats_kept(net):
        net(torch.randn(20, 784) * 5)
    assert all(torch.equal(v, before[k]) for k, v in net.named_buffers())
    # a BN run's evaluation with test accuracy: the fixed batch's ratio, then the buffers back
    training = depth.DepthTraining([net], None, None, None, None, x[:20], y[:20], [(x, y)])
    [measured] = training.evaluate(0)
    assert measured["test/acc_subset"] == pytest.approx(expected) and measured["grad_ratio"] > 0
    assert all(torch.equal(v, before[k]) for k, v in net.named_buffers())


def test_checkpoint_every_below_one_is_refused(root, tmp_path):
    with pytest.raises(ConfigError, match="eval.checkpoint_every"):
        depth.train(_small(root, "eval.checkpoint_every=0"), tmp_path)


def _trainings(seeds, x, y, test, norm="batchnorm"):
    """The depth study's training of ``seeds`` side by side and of each seed alone, in float64
    (1 and 3 hidden layers of 16 units)."""
    factory = bn.get_norm_layer(norm, dims=1)

    def nets(seed):
        torch.manual_seed(seed)
        return torch.nn.ModuleList(DeepMLP(d, 16, "relu", factory, in_features=x.shape[1]).double() for d in (1, 3))  # fmt: skip

    def fixed(seed):
        return depth.fixed_batch_indices(seed, len(y), 20)

    def sampler(seed):
        return depth.IIDBatches(len(y), 20, depth.derive_seed(seed, "train"))

    alone = []
    for s in seeds:
        net = nets(s)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, foreach=True)
        f = fixed(s)
        alone.append(depth.DepthTraining(net, opt, sampler(s), x, y, x[f], y[f], test))
    per_seed = [nets(s) for s in seeds]
    stacks = torch.nn.ModuleList(depth.stack_copies(c) for c in zip(*per_seed))
    views = [depth.copy_views(st, c) for st, c in zip(stacks, zip(*per_seed))]
    opt = torch.optim.SGD(stacks.parameters(), lr=0.1, foreach=True)
    side = depth.StackedDepthTraining(stacks, views, opt, [sampler(s) for s in seeds], x, y, [fixed(s) for s in seeds], test)  # fmt: skip
    return side, alone


@pytest.mark.parametrize("norm", ["batchnorm", "none"])
def test_seeds_side_by_side_train_and_measure_what_each_seed_alone_does(norm):
    """Three seeds stacked: every step's losses and every evaluation's fixed-batch loss,
    gradient ratio and test accuracy are each seed's own run's (float64), depth by depth."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 12, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (200,), generator=g)
    test = [(x[:50] + 0.1, y[:50])]
    seeds = [3, 0, 7]
    side, alone = _trainings(seeds, x, y, test, norm)
    for step in range(6):
        losses = side.step(step, next(side.batches(step)))["loss"]
        each = [t.step(step, next(t.batches(step)))["loss"] for t in alone]  # [seed][depth]
        expected = [each[k][d] for d in range(2) for k in range(len(seeds))]
        assert losses == pytest.approx(expected, rel=1e-10)
        measured = side.evaluate(step)
        own = [t.evaluate(step) for t in alone]
        for i, m in enumerate(measured):
            d, k = divmod(i, len(seeds))
            assert m.keys() == own[k][d].keys()
            for key, value in own[k][d].items():
                assert m[key] == pytest.approx(value, rel=1e-9), (key, d, k)


@pytest.mark.slow
def test_a_list_of_seeds_writes_one_run_per_seed_and_depth(root, tmp_path):
    seeds = _small(root, "seed=[0,1]", "eval.test_examples=30")
    summaries = depth.train(seeds, tmp_path / "side")
    assert [(s["depth"], s["seed"]) for s in summaries] == [(1, 0), (1, 1), (3, 0), (3, 1)]
    alone = {
        (a["depth"], seed): a
        for seed in (0, 1)
        for a in depth.train(_small(root, f"seed={seed}", "eval.test_examples=30"), tmp_path / f"s{seed}")
    }  # fmt: skip
    for s in summaries:
        run = tmp_path / "side" / f"seed{s['seed']}" / f"depth{s['depth']}"
        assert json.loads((run / "summary.json").read_text()) == s
        own = alone[(s["depth"], s["seed"])]
        assert s["setup"] == own["setup"] and s["test_acc_subset"] == own["test_acc_subset"]
        for key in ("grad_ratio_init", "grad_ratio", "final_train_loss"):
            assert s[key] == pytest.approx(own[key], rel=1e-4), key
