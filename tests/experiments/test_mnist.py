"""The MNIST study end to end on tiny generated data, with W&B disabled."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import ConfigCompositionException

import bn
from experiments import mnist
from experiments.kit import mlp_harness
from experiments.kit.errors import ConfigError
from experiments.kit.norm import norm_factory
from experiments.kit.probes import SigmoidInputs, order_statistics, percentiles
from experiments.nets.mlp import SigmoidMLP
from tests.configs import CONFIGS, compose_config
from tests.interrupt import dies_at_step
from tests.runs import metric_rows


def _cfg(overrides=()):
    return compose_config("mnist", overrides)


def _small(root: Path, *extra):
    return _cfg(
        [
            "data=fashion_mnist",
            f"data.root={root}",
            "data.download=false",
            "data.verify=false",
            "logger.mode=disabled",
            "train.steps=40",
            "eval.every=10",
            "train.batch_size=20",
            "train.lr=0.5",
            "population.num_batches=3",
            *extra,
        ]
    )


@pytest.mark.parametrize("setup", ["baseline", "bn", "bn_after"])
@pytest.mark.parametrize("dataset", ["mnist", "fashion_mnist"])
def test_every_config_composes(setup, dataset):
    cfg = _cfg([f"setup={setup}", f"data={dataset}"])
    mnist.check(cfg)
    layer = norm_factory(cfg.norm, 1, cfg.train.steps)
    position = str(cfg.model.norm_position)
    net = SigmoidMLP(layer, cfg.model.hidden, cfg.model.init_std, norm_position=position)
    assert net(torch.randn(4, 784)).shape == (1, 4, 10)
    assert (cfg.train.steps, cfg.train.batch_size, cfg.logger.mode) == (50000, 60, "offline")


@pytest.mark.slow
def test_grayscale_inputs_train(root, tmp_path):
    [summary] = mnist.train(_small(root, "setup=bn", "data.binarize=false"), tmp_path)
    assert not summary["diverged"] and math.isfinite(summary["final_train_loss"])


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["baseline", "bn", "bn_after"])
def test_short_run_writes_metrics_and_summary(root, tmp_path, setup):
    [summary] = mnist.train(_small(root, f"setup={setup}"), tmp_path)
    rows = metric_rows(tmp_path)
    metrics = {r["metric"] for r in rows}
    assert {
        "test/acc",
        "train/loss",
        "sigmoid_input/p15",
        "sigmoid_input/p50",
        "sigmoid_input/p85",
        "shift/layer3/median",
    } <= metrics
    assert sorted({int(r["step"]) for r in rows if r["metric"] == "test/acc"}) == [
        0,
        10,
        20,
        30,
        40,
    ]
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == summary
    assert not summary["diverged"]
    losses = [float(r["value"]) for r in rows if r["metric"] == "train/loss"]
    assert losses[-1] < losses[0]  # it learns
    assert summary["setup"] == setup and summary["name"] == f"{setup}-s0"
    if setup == "bn":
        assert summary["test_acc"] > 0.5
    if setup == "bn":
        assert {"test_acc_population", "test_acc_population_no_bessel"} <= summary.keys()
    assert (tmp_path / "checkpoint.pt").exists()
    pct = torch.load(tmp_path / "unit_percentiles.pt")
    assert pct["values"].shape == (5, 3, 3, 100)


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["probe.nongaussian=false", "probe.nongaussian=true"])
def test_resume_after_kill_matches_uninterrupted(root, tmp_path, monkeypatch, probe):
    [full] = mnist.train(_small(root, "setup=bn", "seed=3", probe), tmp_path / "full")

    original = mlp_harness.stacked_batches
    with monkeypatch.context() as m:  # killed before step 25, after the checkpoint of step 20
        m.setattr(mlp_harness, "stacked_batches", lambda *a: dies_at_step(original(*a), 25))
        with pytest.raises(KeyboardInterrupt):
            mnist.train(_small(root, "setup=bn", "seed=3", probe), tmp_path / "killed")
    [resumed] = mnist.train(
        _small(root, "setup=bn", "seed=3", probe, "resume=true"), tmp_path / "killed"
    )
    for name in ("unit_percentiles.pt", "unit_nongaussianity.pt"):
        if (tmp_path / "full" / name).exists():
            a = torch.load(tmp_path / "full" / name, weights_only=True)
            b = torch.load(tmp_path / "killed" / name, weights_only=True)
            assert a["steps"] == b["steps"] and torch.equal(a["values"], b["values"])

    for key in ("test_acc", "train_acc", "test_acc_population", "final_train_loss"):
        assert resumed[key] == full[key], key
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


@pytest.mark.slow
def test_non_gaussianity_probe_logs_quartiles_and_a_normal_control(root, tmp_path):
    mnist.train(_small(root, "setup=baseline", "probe.nongaussian=true"), tmp_path)
    rows = metric_rows(tmp_path)
    value = {(int(r["step"]), r["metric"]): float(r["value"]) for r in rows}
    for layer in (1, 2, 3):
        for measure in ("kurtosis", "negentropy"):
            q = [
                value[(40, f"nongauss/layer{layer}/{measure}_{s}")]
                for s in ("q25", "median", "q75")
            ]
            assert q == sorted(q)
    assert abs(value[(40, "nongauss/control/kurtosis_median")]) < 0.2  # the tiny test set: 100
    assert value[(40, "nongauss/control/negentropy_median")] < 1e-3
    saved = torch.load(tmp_path / "unit_nongaussianity.pt", weights_only=True)
    assert saved["steps"] == [0, 10, 20, 30, 40] and saved["values"].shape == (5, 2, 3, 100)
    assert not any(r["metric"].startswith("nongauss/") for r in _off_rows(root, tmp_path))


@pytest.mark.slow
def test_a_training_subset_is_all_the_network_sees(root, tmp_path):
    [summary] = mnist.train(_small(root, "setup=bn", "train.subset=40"), tmp_path)
    rows = metric_rows(tmp_path)
    subset_acc = [
        (int(r["step"]), float(r["value"])) for r in rows if r["metric"] == "train/acc_subset"
    ]
    assert [s for s, _ in subset_acc] == [0, 10, 20, 30, 40] and summary["train_subset"] == 40
    assert summary["train_acc"] == pytest.approx(
        subset_acc[-1][1]
    )  # the final one is on the subset too
    with pytest.raises(ConfigError, match="train.subset=10 must hold at least one batch"):
        mnist.train(_small(root, "setup=bn", "train.subset=10"), tmp_path / "bad")


def _off_rows(root: Path, tmp_path: Path) -> list[dict]:
    mnist.train(_small(root, "setup=baseline"), tmp_path / "off")
    return metric_rows(tmp_path / "off")


@pytest.mark.slow
def test_resume_with_other_seeds_is_refused(root, tmp_path):
    mnist.train(_small(root, "setup=baseline", "seed=[1,2]", "train.steps=10"), tmp_path)
    with pytest.raises(ConfigError, match=r"holds the run of seed=\[1, 2\], not seed=\[1, 3\]"):
        mnist.train(_small(root, "setup=baseline", "seed=[1,3]", "resume=true"), tmp_path)


@pytest.mark.slow
def test_a_resume_may_change_the_probes_which_the_record_leaves_out(root, tmp_path):
    """The probes and the population statistics measure the run, they do not change it (the
    study's ``resume_safe``): a resume may change them, and the recorded setting has none."""
    mnist.train(_small(root, "setup=bn", "train.steps=20"), tmp_path)
    again = ("train.steps=40", "probe.unit=1", "population.num_batches=2", "resume=true")
    [summary] = mnist.train(_small(root, "setup=bn", *again), tmp_path)
    assert summary["resumed_with"] == {
        "population.num_batches": [3, 2],
        "probe.unit": [0, 1],
        "train.steps": [20, 40],
    }
    assert summary["config"]["train.steps"] == 40
    assert not any(k.startswith(("probe.", "population.")) for k in summary["config"])


@pytest.mark.slow
def test_diverged_run_stops_cleanly(root, tmp_path):
    [summary] = mnist.train(_small(root, "setup=baseline", "model.init_std=1e37"), tmp_path)
    assert summary["diverged"] and summary["diverged_at_step"] <= 40
    assert summary["steps_done"] == summary["diverged_at_step"]
    assert json.loads((tmp_path / "summary.json").read_text())["diverged"]
    assert any(r["metric"] == "test/acc" for r in metric_rows(tmp_path))  # step-0 row kept


def _closemetric_rows(a: list[dict], b: list[dict]) -> None:
    assert [(r["step"], r["metric"]) for r in a] == [(r["step"], r["metric"]) for r in b]
    np.testing.assert_allclose(
        [float(r["value"]) for r in a], [float(r["value"]) for r in b], rtol=1e-4, atol=1e-5
    )


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["baseline", "bn", "bn_after"])
def test_stacked_seeds_equal_separate_runs(root, tmp_path, setup):
    stacked = mnist.train(_small(root, f"setup={setup}", "seed=[3,4]"), tmp_path / "stacked")
    for seed, together in zip((3, 4), stacked):
        [alone] = mnist.train(_small(root, f"setup={setup}", f"seed={seed}"), tmp_path / f"s{seed}")
        assert together["seed"] == seed and together["copies"] == 2
        for key in ("test_acc", "train_acc", "final_train_loss"):
            assert together[key] == pytest.approx(alone[key], abs=1e-3), key
        _closemetric_rows(
            metric_rows(tmp_path / "stacked" / f"seed{seed}"), metric_rows(tmp_path / f"s{seed}")
        )
    assert (tmp_path / "stacked" / "checkpoint.pt").exists()


@pytest.mark.slow
def test_a_diverging_seed_leaves_the_others_untouched(root, tmp_path, monkeypatch):
    [alone] = mnist.train(_small(root, "setup=bn", "seed=3"), tmp_path / "alone")

    class SecondCopyIsNaN(SigmoidMLP):
        def reset_parameters(self, seeds=None):
            super().reset_parameters(seeds)
            if self.copies > 1:
                with torch.no_grad():
                    self.output.weight[1].fill_(float("nan"))

    monkeypatch.setattr(mnist, "SigmoidMLP", SecondCopyIsNaN)
    ok, bad = mnist.train(_small(root, "setup=bn", "seed=[3,4]"), tmp_path / "stacked")
    assert bad["diverged"] and bad["diverged_at_step"] == bad["steps_done"] == 1
    assert "test_acc" not in bad and ok["steps_done"] == 40
    assert not ok["diverged"]
    assert ok["test_acc"] == pytest.approx(alone["test_acc"], abs=1e-3)
    _closemetric_rows(metric_rows(tmp_path / "stacked" / "seed3"), metric_rows(tmp_path / "alone"))
    bad_rows = metric_rows(tmp_path / "stacked" / "seed4")
    assert max(int(r["step"]) for r in bad_rows) == 1  # nothing logged after it diverged


@pytest.mark.slow
@pytest.mark.parametrize(
    "override,setting",
    [
        ("train.lr=-0.1", "train.lr=-0.1"),
        ("train.batch_size=1", "train.batch_size=1"),
        ("train.steps=0", "train.steps=0"),
        ("seed=[1,1]", "repeated seeds"),
        ("seed=abc", "seed=abc must be an integer"),
        ("seed=-1", "seed=-1 must be an integer >= 0"),
        ("seed=true", "seed=True must be an integer >= 0"),
        ("norm=layernorm", "norm=layernorm"),
        ("probe.percentiles=[50,50,50]", "probe.percentiles"),
        ("probe.percentiles=[50,60,85]", "probe.percentiles"),
        ("probe.percentiles=[15,85]", "probe.percentiles"),
        ("probe.percentiles=[-5,50,85]", "probe.percentiles"),
        ("model.hidden=[]", "model.hidden"),
        ("train.subset=70000", "train.subset=70000 is more than the 200 training images"),
        ("train.batch_size=500", "train.batch_size=500 must be between 1 and the dataset size 200"),
    ],
)
def test_invalid_settings_fail_before_training(root, tmp_path, override, setting):
    with pytest.raises(ConfigError, match=re.escape(setting)):
        mnist.train(_small(root, "setup=bn", override), tmp_path)
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize(
    "override,why",
    [
        ("logger.mode=cloud", "Invalid value 'cloud'"),
        ("train.steps=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
        ("data.binarize=maybe", "Value 'maybe' is not a valid bool"),
        ("norm.kind=batchnrom", "Invalid value 'batchnrom', expected one of"),
        ("model.init_std=small", "Value 'small' of type 'str' could not be converted to Float"),
    ],
)
def test_wrong_types_are_rejected_when_composing(override, why):
    with pytest.raises(ConfigCompositionException, match=f"Error merging override {override}") as e:
        _cfg([override])
    assert why in str(e.value.__cause__)


def test_batch_size_one_is_fine_without_bn(root, tmp_path):
    mnist.check(_small(root, "setup=baseline", "train.batch_size=1"))


def test_unknown_key_is_rejected():
    with pytest.raises(ConfigCompositionException, match="train.stepz"):
        _cfg(["train.stepz=10"])


@pytest.mark.slow
def test_cli_missing_data_exits_with_message(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.mnist",
            f"data.root={tmp_path}",
            "data.download=false",
            "logger.mode=disabled",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        cwd=CONFIGS.parent,
        timeout=120,
    )
    assert out.returncode == 1
    assert "error: Could not get MNIST" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("n", [1, 2, 7, 500])
def test_percentiles_match_numpy(n):
    values = np.random.default_rng(0).normal(size=(2, 5, n)).astype(np.float32)
    qs = [0, 15, 50, 85, 100]
    want = np.moveaxis(np.percentile(values, qs, axis=-1), 0, -1)
    np.testing.assert_allclose(percentiles(values, qs), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ranks", [[0], [6], [0, 6], [2, 3], [1, 2, 3, 4], [5, 0, 3, 3]])
def test_order_statistics_match_sorting(ranks):
    values = np.random.default_rng(1).integers(0, 4, size=(3, 2, 7)).astype(np.float32)  # ties
    got = order_statistics(values, ranks)
    assert sorted(got) == sorted(set(ranks))
    for k, v in got.items():
        np.testing.assert_array_equal(v, np.sort(values, axis=-1)[..., k])


def test_percentile_probe_records_every_sigmoid_input():
    net = SigmoidMLP(copies=2, seeds=[0, 1]).eval()
    x = torch.rand(500, 784)
    with torch.no_grad(), SigmoidInputs(net.activations) as rec:
        net(x)
    got = rec.percentiles([15, 50, 85])
    assert got.shape == (2, 3, 3, 100)
    with torch.no_grad():  # the baseline's sigmoid inputs by hand: Wu + b, layer by layer
        for k in range(2):
            u = x
            for layer, linear in enumerate(net.hidden):
                z = u @ linear.weight[k].t() + linear.bias[k].t()
                want = np.percentile(z.numpy(), [15, 50, 85], axis=0)
                np.testing.assert_allclose(got[k, layer].numpy(), want, rtol=1e-4, atol=1e-5)
                u = torch.sigmoid(z)


def test_one_recorder_serves_many_chunked_recordings():
    """Each recording replaces the last; a forward pass in chunks is recorded as one batch; the
    percentiles (computed in place in a kept buffer) leave the recorded values as they were; a
    recording no longer than the last is written into the same memory."""
    net = SigmoidMLP(copies=2, seeds=[0, 1]).eval()
    rec = SigmoidInputs(net.activations)
    where = []
    with torch.no_grad():
        for x in (torch.rand(300, 784), torch.rand(500, 784), torch.rand(500, 784)):
            with rec:
                for chunk in x.split(128):
                    net(chunk)
            whole = rec.layer(2).clone()
            assert whole.shape == (2, 100, len(x))
            got = rec.percentiles([15, 50, 85])
            torch.testing.assert_close(rec.layer(2), whole, rtol=0, atol=0)
            torch.testing.assert_close(rec.layer(2, unit=7), whole[:, 7], rtol=0, atol=0)
            want = np.percentile(whole.numpy(), [15, 50, 85], axis=-1)  # (3, copies, units)
            np.testing.assert_allclose(got[:, 2].numpy(), np.moveaxis(want, 0, 1), rtol=1e-6)
            where.append(rec.layer(2).data_ptr())
    assert where[2] == where[1]


@pytest.mark.parametrize("norm", ["none", "batchnorm"])
def test_each_copy_is_the_network_of_its_seed(norm):
    """A stacked copy computes, trains and infers exactly as a network built alone."""
    torch.manual_seed(0)
    both = SigmoidMLP(bn.get_norm_layer(norm, dims=1), copies=2, seeds=[5, 6])
    alone = SigmoidMLP(bn.get_norm_layer(norm, dims=1), copies=1, seeds=[6])
    x = torch.rand(2, 32, 784)
    y = torch.randint(0, 10, (2, 32))
    for net, xs, ys in ((both, x, y), (alone, x[1:], y[1:])):
        loss = torch.nn.functional.cross_entropy(net(xs).transpose(1, 2), ys, reduction="none")
        loss.mean(1).sum().backward()
    torch.testing.assert_close(both(x)[1], alone(x[1:])[0])
    for (name, p), q in zip(both.named_parameters(), alone.parameters()):
        k = slice(100, 200) if p.dim() == 1 else 1  # a norm's channels are copy-major
        torch.testing.assert_close(p[k], q.squeeze(0) if p.dim() > 1 else q, msg=name)
        torch.testing.assert_close(p.grad[k], q.grad.squeeze(0) if p.dim() > 1 else q.grad)
    both.eval(), alone.eval()
    shared = torch.rand(50, 784)  # one batch for every copy: the inference path
    torch.testing.assert_close(both(shared)[1], alone(shared)[0])
    torch.testing.assert_close(both(shared)[1], alone(shared[None])[0])


@pytest.mark.slow
def test_figures_of_one_dataset_from_the_committed_csvs(tmp_path, monkeypatch):
    from scripts import plot_mnist, plotting

    monkeypatch.setattr(plotting, "FIGURES", tmp_path)
    plot_mnist.main(["mnist"])  # what `make reproduce-mnist` redraws
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "mnist_covariate_shift.png",
        "mnist_covariate_shift.svg",
        "mnist_fig1.png",
        "mnist_fig1.svg",
    ]
    with pytest.raises(SystemExit, match="unknown dataset"):
        plot_mnist.main(["cifar10"])
