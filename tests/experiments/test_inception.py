"""The BN-Inception study: the variants (``setup=``) as config diffs, the recipe and its scaling
rule, every variant end to end on a synthetic image folder, resume, DDP and the Figure 3 collector
on real runs (the shard sampler: kit/test_sampling.py; the subset builder:
scripts/test_make_imagenet_subset.py). All offline on generated data, W&B disabled."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from torch import nn

from experiments import inception, inception_fig3
from experiments.kit.config import setups
from experiments.kit.errors import ConfigError
from experiments.kit.results import collect
from experiments.kit.runlog import read_curve
from experiments.kit.seeds import derive_seed
from experiments.nets.bn_inception import count_parameters
from experiments.studies import INCEPTION_ABLATIONS, INCEPTION_CONTROLS, study
from scripts.analysis import steps_to_target
from scripts.make_synthetic_images import make_image_folder
from tests.configs import CONFIGS, compose_config
from tests.interrupt import killed_after_checkpoint
from tests.processes import as_torchrun_would, free_port, spawn
from tests.runs import metric_rows

ROOT = CONFIGS.parent
VARIANTS = ["inception", "bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid", "inception_sigmoid"]


def _cfg(overrides=()):
    return compose_config("inception", overrides)


def _small(*extra):
    return _cfg(
        [
            "logger.mode=disabled",
            "train.steps=4",
            "train.batch_size=8",
            "train.lr_decay_every=2",
            "sampler.shard_size=16",
            "eval.every=2",
            "eval.batch_size=16",
            "eval.train_subset=16",
            *extra,
        ]
    )


@pytest.fixture
def idx_root(tiny_data):
    return tiny_data


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("images"), 3, 8, 4, size=40)


def _idx(root: Path) -> tuple[str, ...]:
    """The tiny generated Fashion-MNIST at ``root`` (no md5 to match)."""
    return (f"data.root={root}", "data.download=false", "data.verify=false")


def _on_folder(folder: Path, *extra):
    return _small("data=image_folder", f"data.root={folder}", "data.num_workers=0", *extra)


def _flat(cfg) -> dict:
    def walk(node, prefix=""):
        for k, v in node.items():
            if isinstance(v, dict):
                yield from walk(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    return dict(walk(OmegaConf.to_container(cfg, resolve=False)))


def _diff(a: str, b: str) -> set[str]:
    fa, fb = _flat(_cfg([f"setup={a}"])), _flat(_cfg([f"setup={b}"]))
    return {k for k in fa | fb if fa.get(k) != fb.get(k)}


# --- the variants -------------------------------------------------------------------------------


QUESTION_SETUPS = ["bn_x5_dropout", "bn_baseline_nodropout"]  # open question 4, dropout with BN


def test_variant_files_are_the_six_of_the_paper_figure_3s_controls_and_the_dropout_question():
    expected = VARIANTS + QUESTION_SETUPS + list(INCEPTION_CONTROLS + INCEPTION_ABLATIONS)
    assert sorted(setups("inception")) == sorted(expected)


@pytest.mark.slow
@pytest.mark.parametrize(
    "a,b,changed",
    [
        ("inception", "bn_baseline", {"norm.kind"}),
        ("bn_x5", "bn_x30", {"train.lr_mult"}),
        ("bn_x5", "bn_x5_sigmoid", {"model.activation"}),
        ("inception", "inception_sigmoid", {"model.activation"}),
        ("inception", "inception_x2", {"train.lr_mult"}),
        ("inception", "inception_x5", {"train.lr_mult"}),
        ("inception", "inception_x30", {"train.lr_mult"}),
        ("bn_baseline", "bn_baseline_x5", {"train.lr_mult"}),
        ("bn_x5", "bn_x5_decay1", {"train.decay_speedup"}),
        ("bn_x5", "bn_x5_decay2", {"train.decay_speedup"}),
        ("bn_x5", "bn_x5_dropout", {"model.dropout"}),
        ("bn_baseline", "bn_baseline_nodropout", {"model.dropout"}),
        (
            "bn_baseline",
            "bn_x5",
            {
                "train.lr_mult",
                "model.dropout",
                "train.wd_mult",
                "train.decay_speedup",
                "model.lrn",
                "sampler.within_shard",
                "augment.photometric_mult",
            },
        ),
    ],
)
def test_variants_read_as_diffs_of_each_other(a, b, changed):
    assert _diff(a, b) == changed


@pytest.mark.slow
def test_recipe_follows_the_paper_multipliers():
    base = inception.recipe(_cfg(["setup=inception"]), world=1)
    x5 = inception.recipe(_cfg(["setup=bn_x5"]), world=1)
    x30 = inception.recipe(_cfg(["setup=bn_x30"]), world=1)
    assert base["lr"] == pytest.approx(0.0015)
    assert x5["lr"] == pytest.approx(0.0075) and x30["lr"] == pytest.approx(0.045)
    assert x5["weight_decay"] == pytest.approx(base["weight_decay"] / 5)
    assert x5["lr_decay_every"] == round(base["lr_decay_every"] / 6)
    assert x5["photometric"] == pytest.approx(base["photometric"] / 2)


def test_scaling_rule_for_a_larger_global_batch():
    one = inception.recipe(_cfg(["setup=bn_x5"]), world=1)
    big = inception.recipe(_cfg(["setup=bn_x5", "train.batch_size=64"]), world=2)
    assert big["global_batch"] == 128
    assert big["lr"] == pytest.approx(one["lr"] * 4)
    assert big["lr_decay_every"] == round(160 / 6 / 4)


@pytest.mark.slow
def test_gpu_scale_builds_the_full_width_network():
    cfg = _cfg(["scale=gpu", "setup=bn_x30", "data.root=/nowhere"])
    assert cfg.data.name == "image_folder" and cfg.data.image_size == 224
    model = inception.build_model(cfg, 3, 1000)
    assert count_parameters(model) == pytest.approx(11.28e6, rel=0.01)
    assert model(torch.randn(2, 3, 224, 224)).shape == (2, 1000)


def test_fuse_reductions_builds_the_same_weights_fused():
    torch.manual_seed(0)
    plain = inception.build_model(_cfg(["setup=bn_x30"]), 3, 10)
    torch.manual_seed(0)
    fused = inception.build_model(_cfg(["setup=bn_x30", "model.fuse_reductions=true"]), 3, 10)
    assert all(m.reduce is None for m in plain.inception.values())
    assert all(m.reduce is not None for m in fused.inception.values())
    m, f = plain.inception["4a"], fused.inception["4a"]
    want = torch.cat([m.branch1x1[0].weight, m.branch3x3[0][0].weight, m.branch_double[0][0].weight])  # fmt: skip
    assert torch.equal(f.reduce[0].weight, want)


# --- the recipe's augmentation ------------------------------------------------------------------


def test_photometric_distortion_is_reproducible_and_off_at_zero():
    x = torch.randn(5, 3, 8, 8)
    assert inception.photometric(x, 0.0, torch.Generator()) is x
    a = inception.photometric(x, 0.4, torch.Generator().manual_seed(3))
    b = inception.photometric(x, 0.4, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and not torch.allclose(a, x)
    shift = (a.mean((1, 2, 3)) - x.mean((1, 2, 3))).abs()
    assert (shift <= 0.4 + 1e-6).all()


# --- runs ---------------------------------------------------------------------------------------


def _masks_drawn(monkeypatch) -> list[torch.Tensor]:
    """Torch's generator state at each dropout mask drawn in training, from now on."""
    states, forward = [], nn.Dropout.forward

    def recording(self, x):
        if self.training:
            states.append(torch.get_rng_state())
        return forward(self, x)

    monkeypatch.setattr(nn.Dropout, "forward", recording)
    return states


@pytest.mark.slow
def test_dropout_has_a_stream_of_its_own(idx_root, tmp_path, monkeypatch):
    """The first training step's dropout mask starts from ``derive_seed(seed, "dropout", rank)``;
    no mask draws the numbers that initialized the network (torch's generator seeded with the
    run's seed)."""
    states = _masks_drawn(monkeypatch)
    inception.train(_small(*_idx(idx_root), "setup=bn_x5_dropout", "seed=3"), tmp_path)
    assert len(states) == 4  # one mask a step
    torch.manual_seed(derive_seed(3, "dropout", 0))
    assert torch.equal(states[0], torch.get_rng_state())
    torch.manual_seed(3)
    assert not any(torch.equal(state, torch.get_rng_state()) for state in states)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS + QUESTION_SETUPS)
def test_each_variant_runs_two_steps_on_an_image_folder(folder, tmp_path, variant):
    cfg = _on_folder(folder, f"setup={variant}", "train.steps=2")
    summary = inception.train(cfg, tmp_path)
    assert summary["setup"] == variant and summary["steps_done"] == 2 and not summary["diverged"]
    assert 0.0 <= summary["test_acc"] <= 1.0
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    metrics = {r["metric"] for r in metric_rows(tmp_path)}
    assert {"test/acc", "train/acc", "train/loss", "lr"} <= metrics
    assert (tmp_path / "checkpoint.pt").exists()


@pytest.mark.slow
def test_tensor_data_becomes_32px_rgb(idx_root, tmp_path):
    cfg = _small(*_idx(idx_root), "setup=bn_x5_sigmoid")
    summary = inception.train(cfg, tmp_path)
    assert summary["steps_done"] == 4
    from experiments.kit.data import load_splits

    train, _, channels, classes = load_splits(cfg.data, size=32, channels=3)
    assert train.x[:2].shape == (2, 3, 32, 32) and channels == 3 and classes == 10
    assert train.x[:, :, :2].unique().numel() == 1  # the padding is one background value


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted(idx_root, tmp_path, monkeypatch):
    overrides = (*_idx(idx_root), "setup=inception", "seed=1")
    full = inception.train(_small(*overrides, "train.steps=6"), tmp_path / "full")
    with killed_after_checkpoint(monkeypatch), pytest.raises(KeyboardInterrupt):
        inception.train(_small(*overrides, "train.steps=6"), tmp_path / "killed")
    resumed = inception.train(
        _small(*overrides, "train.steps=6", "resume=true"), tmp_path / "killed"
    )
    assert (
        resumed["test_acc"] == full["test_acc"] and resumed["max_test_acc"] == full["max_test_acc"]
    )
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=0, atol=0)


@pytest.mark.slow
def test_diverged_run_stops_cleanly(idx_root, tmp_path):
    cfg = _small(*_idx(idx_root), "setup=inception", "train.lr=1e6")
    summary = inception.train(cfg, tmp_path)
    assert summary["diverged"] and json.loads((tmp_path / "summary.json").read_text())["diverged"]


@pytest.mark.parametrize(
    "override,setting",
    [
        ("train.lr=-1", "train.lr=-1"),
        ("model.activation=tanh", "model.activation='tanh'"),
        ("sampler.shard_size=12", "sampler.shard_size=12"),
        ("model.stem_stride=3", "model.stem_stride=3"),
        ("model.pool_columns=0", "model.pool_columns=0"),
        ("train.batch_size=1", "train.batch_size=1"),
        ("train.reference_batch=0", "train.reference_batch=0"),
        ("data.image_size=0", "data.image_size=0"),
        ("data.image_size=100000", "data.image_size=100000"),
        ("data.image_size=16", "data.image_size=16 is smaller than fashion_mnist's images"),
    ],
)
def test_invalid_settings_fail_before_training(idx_root, tmp_path, override, setting):
    with pytest.raises(ConfigError, match=setting):
        inception.train(_small(f"data.root={idx_root}", override), tmp_path)
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "override,why",
    [
        ("norm.kind=instancenorm", "Invalid value 'instancenorm', expected one of"),
        ("model.dropout=lots", "Value 'lots' of type 'str' could not be converted to Float"),
        ("variant=bn_x5", "Could not override 'variant'"),
    ],
)
def test_invalid_types_fail_when_composing(override, why):
    with pytest.raises(ConfigCompositionException) as e:
        _small(override)
    assert why in f"{e.value} {e.value.__cause__}"


@pytest.mark.slow
def test_two_process_torchrun_run(idx_root, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={free_port()}",
            "-m",
            "experiments.inception",
            "setup=bn_x5",
            f"data.root={idx_root}",
            "data.download=false",
            "data.verify=false",
            "logger.mode=disabled",
            "train.steps=4",
            "train.batch_size=8",
            "sampler.shard_size=16",
            "eval.every=2",
            "eval.train_subset=16",
            "threads=1",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_batch"] == 16
    assert summary["initial_lr"] == pytest.approx(0.0075 * 16 / 32)  # the scaling rule


def _two_process_worker(rank: int, cfg, out: str, port: int, die: bool) -> None:
    """One of two processes, as torchrun starts them; ``die``: both stop right after the first
    checkpoint, as a killed job would."""
    as_torchrun_would(rank, 2, port)
    with pytest.MonkeyPatch.context() as m:
        if not die:
            inception.train(cfg, Path(out))
            return
        with killed_after_checkpoint(m, n=1), contextlib.suppress(KeyboardInterrupt):
            inception.train(cfg, Path(out))


@pytest.mark.slow
def test_a_two_process_run_with_dropout_resumes_as_uninterrupted(idx_root, tmp_path, monkeypatch):
    """Each process draws its own dropout masks, so each must get its own generator back."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    overrides = (*_idx(idx_root), "setup=bn_x5_dropout", "threads=1", "device=cpu")
    full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
    spawn(_two_process_worker, (_small(*overrides), full, free_port(), False))
    spawn(_two_process_worker, (_small(*overrides), killed, free_port(), True))
    spawn(_two_process_worker, (_small(*overrides, "resume=true"), killed, free_port(), False))
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] == 4
    assert isinstance(b["rng"], list) and len(b["rng"]) == 2  # one state per process
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=0, atol=0)


def _recording_worker(rank: int, cfg, out: str, port: int) -> None:
    """One of two processes: saves torch's generator state at its first dropout mask and the
    seed of each step's photometric jitter."""
    as_torchrun_would(rank, 2, port)
    jitter, photometric = [], inception.photometric

    def jittered(x, strength, generator):
        jitter.append(generator.initial_seed())
        return photometric(x, strength, generator)

    with pytest.MonkeyPatch.context() as m:
        masks = _masks_drawn(m)
        m.setattr(inception, "photometric", jittered)
        inception.train(cfg, Path(out) / "run")
    torch.save({"mask": masks[0], "jitter": jitter}, Path(out) / f"rank{rank}.pt")


@pytest.mark.slow
def test_each_process_has_its_own_dropout_and_jitter_streams(idx_root, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    overrides = (*_idx(idx_root), "setup=bn_x5_dropout", "seed=3", "threads=1", "device=cpu")
    spawn(_recording_worker, (_small(*overrides), str(tmp_path), free_port()))
    for rank in (0, 1):
        seen = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        torch.manual_seed(derive_seed(3, "dropout", rank))
        assert torch.equal(seen["mask"], torch.get_rng_state())
        assert seen["jitter"] == [derive_seed(3, "photometric", rank, step) for step in range(4)]


# --- Figure 3 from real runs ---------------------------------------------------------------------


def _fixed_budget_summary(setups):
    entry = {"steps_to_baseline_max": None, "max_acc": 0.8, "step_of_max": 3000}
    return {
        "data": "fashion_mnist", "width": 0.125, "steps": 3000, "global_batch": 32,
        "parameters": dict.fromkeys(setups, 1), "setups": dict.fromkeys(setups, entry),
    }  # fmt: skip


def _converged_summary(setups):
    seed = {"steps_to_target": None, "ended_by": "cap", "steps_done": 8000}
    entry = {
        "seeds": [seed], "steps_to_target": None, "reached": "0/1", "speedup": None,
        "max_acc_subset": {"mean": 0.8}, "test_acc_end": None,
    }  # fmt: skip
    converged = {
        "target": 0.85, "target_rule": "the lowest", "stop_target": 0.86, "cap": 8000,
        "test_subset": 2000, "eval_every": 100, "setups": dict.fromkeys(setups, entry),
    }  # fmt: skip
    return {
        "data": "fashion_mnist", "width": 0.125, "global_batch": 32,
        "parameters": dict.fromkeys(setups, 1), "converged": converged,
    }  # fmt: skip


@pytest.mark.parametrize(
    "table, summary, times",
    [
        (inception_fig3.fig3_table, _fixed_budget_summary, "x"),
        (inception_fig3.converged_table, _converged_summary, "×"),
    ],
)
def test_figure3_tables_leave_the_paper_cells_empty_for_a_variant_it_did_not_train(
    table, summary, times
):
    text = table(summary(["bn_x5", "bn_x5_dropout", "inception_sigmoid"]))
    rows = {r.split(" | ")[0][2:]: r for r in text.splitlines() if r.startswith("| ")}
    assert rows["bn_x5"].endswith(f"| 2.1M (14.8{times} fewer) | 73.0% |")
    assert rows["inception_sigmoid"].endswith("| never | chance |")  # what Figure 3 says of it
    assert rows["bn_x5_dropout"].endswith("| – | – |")  # not "never" and "chance"


def _assert_refresh_gives_the_collection(folder: Path) -> None:
    """Figure 3 rebuilt from the collection alone (its summary.json and runs.csv) is what the
    collection wrote from the run folders."""
    written = {f: (folder / f).read_text() for f in ("summary.json", "fig3_table.md")}
    inception_fig3.refresh(folder)
    assert {f: (folder / f).read_text() for f in written} == written


@pytest.mark.slow
def test_collector_and_figure_from_real_runs(folder, tmp_path, monkeypatch):
    for i, variant in enumerate(("bn_x5", "inception")):  # the spec's order, not the sweep's
        inception.train(_on_folder(folder, f"setup={variant}"), tmp_path / "sweep" / str(i))
    out = tmp_path / "results" / "synthetic"
    [summary] = collect(study("inception"), tmp_path / "sweep", out, "test", None)
    assert list(summary["setups"]) == ["inception", "bn_x5"]
    assert summary["paper"]["setups"]["bn_x5"]["steps_to_baseline_max"] == 2.1e6
    assert "| bn_x5 |" in (out / "fig3_table.md").read_text()
    _assert_refresh_gives_the_collection(out)
    from scripts import plot_inception, plotting

    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    assert plot_inception.figure2(out).exists()


# --- the converged protocol -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_test_subset_every_evaluation_and_the_full_test_set_at_the_end(idx_root, tmp_path):
    summary = inception.train(_small(*_idx(idx_root), "eval.test_subset=16"), tmp_path)
    rows = metric_rows(tmp_path)
    steps = lambda metric: [int(r["step"]) for r in rows if r["metric"] == metric]  # noqa: E731
    assert steps("test/acc_subset") == [0, 2, 4] and steps("test/acc") == [4]
    assert summary["test_subset"] == 16 and summary["eval_every"] == 2
    full = [float(r["value"]) for r in rows if r["metric"] == "test/acc"]
    assert summary["test_acc"] == summary["max_test_acc"] == full[0]
    assert 0 <= summary["test_acc_subset"] <= 1
    subset = [float(r["value"]) for r in rows if r["metric"] == "test/acc_subset"]
    assert summary["max_test_acc_subset"] == max(subset)


@pytest.mark.slow
def test_a_plateau_stops_the_run_and_a_resume_stops_at_the_same_step(
    idx_root, tmp_path, monkeypatch
):
    overrides = (*_idx(idx_root), "setup=inception", "train.steps=12", "eval.test_subset=16")
    stop = ("train.stop.plateau=0.5", "train.stop.min_steps=6")  # no network gains 50 pp here
    full = inception.train(_small(*overrides, *stop), tmp_path / "full")
    assert full["steps_done"] == 6 and full["stopped"].startswith("plateau: test/acc_subset")
    assert max(int(r["step"]) for r in metric_rows(tmp_path / "full")) == 6
    with killed_after_checkpoint(monkeypatch), pytest.raises(KeyboardInterrupt):
        inception.train(_small(*overrides, *stop), tmp_path / "killed")  # killed at step 4
    resumed = inception.train(_small(*overrides, *stop, "resume=true"), tmp_path / "killed")
    assert resumed["stopped"] == full["stopped"] and resumed["steps_done"] == 6
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")


@pytest.mark.slow
def test_a_rule_added_on_resume_sees_the_whole_curve(idx_root, tmp_path, monkeypatch):
    overrides = (*_idx(idx_root), "setup=inception", "train.steps=12", "eval.test_subset=16")
    stop = ("train.stop.plateau=0.5", "train.stop.min_steps=6")
    full = inception.train(_small(*overrides, *stop), tmp_path / "full")
    with killed_after_checkpoint(monkeypatch), pytest.raises(KeyboardInterrupt):
        inception.train(_small(*overrides), tmp_path / "killed")  # no rule until the resume
    resumed = inception.train(_small(*overrides, *stop, "resume=true"), tmp_path / "killed")
    assert resumed["stopped"] == full["stopped"] and resumed["steps_done"] == full["steps_done"]
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")


@pytest.mark.slow
def test_a_reached_target_stops_the_run(idx_root, tmp_path):
    summary = inception.train(
        _small(*_idx(idx_root), "eval.test_subset=16", "train.steps=8", "train.stop.target=0.01"),
        tmp_path,
    )
    assert summary["steps_done"] == 2 and summary["stopped"].startswith("target: test/acc_subset")


@pytest.mark.slow
def test_converged_collector_from_real_runs(idx_root, tmp_path, capsys, monkeypatch):
    # Runs this short are at chance, whose reach on 16 test images (40%) would leave no target:
    # this test holds the path with one (test_inception_fig3 holds the one without).
    monkeypatch.setattr(inception_fig3, "chance_ceiling", lambda classes, images: 0.0)
    common = (*_idx(idx_root), "eval.test_subset=16", "train.steps=6", "train.stop.plateau=0.5")
    for seed in (0, 1):
        inception.train(
            _small(*common, "setup=inception", f"seed={seed}"), tmp_path / "sweep" / f"i{seed}"
        )
    inception_fig3.main(["target", str(tmp_path / "sweep")])
    target = float(capsys.readouterr().out)
    inception.train(
        _small(*common, "setup=bn_x5", f"train.stop.target={target}"), tmp_path / "sweep" / "b0"
    )
    out = tmp_path / "results"
    [summary] = collect(study("inception"), tmp_path / "sweep", out, "test", None)
    c = summary["converged"]
    assert c["stop_target"] == target and c["test_subset"] == 16 and c["eval_every"] == 2
    inception_curves = [dict(read_curve(tmp_path / "sweep" / f"i{s}" / "metrics.csv", "test/acc_subset")) for s in (0, 1)]  # fmt: skip
    assert c["target"] == steps_to_target.inception_max(inception_curves) <= target
    assert [r["seed"] for r in c["setups"]["inception"]["seeds"]] == [0, 1]
    assert all(r["steps_to_target"] is not None for r in c["setups"]["inception"]["seeds"])
    assert c["setups"]["bn_x5"]["seeds"][0]["ended_by"] in ("target", "plateau", "cap")
    table = (out / "fig3_table.md").read_text()
    assert "converged protocol" in table and "| bn_x5 |" in table and "2.1M (14.8× fewer)" in table
    _assert_refresh_gives_the_collection(out)
    from scripts import plot_inception, plotting

    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    assert plot_inception.figure2(out).with_suffix(".svg").exists()


def test_image_folder_augmentation_is_addressed_by_step(folder):
    from experiments.kit.data import image_folder_splits

    train, _, _ = image_folder_splits(folder, 24, num_workers=0)
    idx = [torch.arange(4), torch.arange(4, 8), torch.arange(4)]
    rng = torch.get_rng_state()
    a = [x for x, _ in train.batches(idx, seed=5)]
    assert torch.equal(torch.get_rng_state(), rng)  # the training process's RNG is untouched
    b = [x for x, _ in train.batches(idx[1:], seed=5, first_step=1)]  # a resume at step 1
    assert torch.equal(a[1], b[0]) and torch.equal(a[2], b[1])
    assert not torch.equal(a[0], a[2])  # the same images at another step: other crops


@pytest.mark.slow
def test_resume_on_an_image_folder_matches_uninterrupted(folder, tmp_path, monkeypatch):
    overrides = ("setup=inception", "train.steps=4", "eval.every=1")
    full = inception.train(_on_folder(folder, *overrides), tmp_path / "full")
    with killed_after_checkpoint(monkeypatch), pytest.raises(KeyboardInterrupt):
        inception.train(_on_folder(folder, *overrides), tmp_path / "killed")
    inception.train(_on_folder(folder, *overrides, "resume=true"), tmp_path / "killed")
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")
    assert full["steps_done"] == 4


def test_cuda_on_a_machine_without_one_is_a_config_error(idx_root, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="device='cuda'"):
        inception.train(_small(f"data.root={idx_root}", "device=cuda"), tmp_path)


# --- seeds side by side -------------------------------------------------------------------------


@pytest.mark.slow
def test_seeds_side_by_side_are_the_separate_runs_one_folder_each(idx_root, tmp_path):
    """A list of seeds trains them stacked in one process: a folder per seed with its own
    metrics and summary, which the collection reads as that many single runs; at step 0 (the
    same networks, before float rounding can differ) every evaluation equals the seed's own
    run's. BN-Baseline: LRN, dropout and the photometric distortion, each copy its own."""
    overrides = (*_idx(idx_root), "setup=bn_baseline")
    stack = tmp_path / "stacked" / "run"
    summaries = inception.train(_small(*overrides, "seed=[3,5]"), stack)
    assert [s["seed"] for s in summaries] == [3, 5]
    assert all(s["copies"] == 2 and s["steps_done"] == 4 for s in summaries)
    for seed in (3, 5):
        alone = inception.train(_small(*overrides, f"seed={seed}"), tmp_path / "alone" / f"s{seed}")  # fmt: skip
        rows, own = metric_rows(stack / f"seed{seed}"), metric_rows(tmp_path / "alone" / f"s{seed}")
        saved = json.loads((stack / f"seed{seed}" / "summary.json").read_text())
        assert saved["name"] == f"bn_baseline-s{seed}"
        assert saved["parameters"] == alone["parameters"]
        assert {(r["step"], r["metric"]) for r in rows} == {(r["step"], r["metric"]) for r in own}
        at0 = {r["metric"]: r["value"] for r in rows if int(r["step"]) == 0}
        assert at0 == {r["metric"]: r["value"] for r in own if int(r["step"]) == 0}
        assert abs(saved["test_acc"] - alone["test_acc"]) < 0.2  # float rounding apart, same net
    collected = {}
    for name in ("stacked", "alone"):
        [summary] = collect(study("inception"), tmp_path / name, tmp_path / f"out_{name}", "test")
        collected[name] = summary["setups"]["bn_baseline"]
    assert collected["stacked"].keys() == collected["alone"].keys()
    assert collected["stacked"]["seeds"] == collected["alone"]["seeds"] == [3, 5]


@pytest.mark.slow
def test_fused_reductions_start_where_the_plain_runs_start(idx_root, tmp_path):
    """model.fuse_reductions=true, seeds side by side: each seed's folder starts (step 0, the
    same weights as its plain run, fused) with the plain run's evaluations up to float rounding,
    and records the setting."""
    overrides = (*_idx(idx_root), "setup=bn_baseline")
    fused = tmp_path / "fused"
    inception.train(_small(*overrides, "seed=[3,5]", "model.fuse_reductions=true"), fused)
    for seed in (3, 5):
        inception.train(_small(*overrides, f"seed={seed}"), tmp_path / f"plain{seed}")
        at0 = [
            {r["metric"]: float(r["value"]) for r in metric_rows(run) if int(r["step"]) == 0}
            for run in (fused / f"seed{seed}", tmp_path / f"plain{seed}")
        ]
        assert at0[0].keys() == at0[1].keys() and at0[0]
        for metric, value in at0[1].items():
            assert at0[0][metric] == pytest.approx(value, rel=1e-4, abs=1e-6), metric
        saved = json.loads((fused / f"seed{seed}" / "summary.json").read_text())
        assert saved["config"]["model.fuse_reductions"] is True


@pytest.mark.slow
def test_seeds_side_by_side_refuse_what_each_run_would_do_alone(idx_root, tmp_path):
    with pytest.raises(ConfigError, match="train.stop ends each run at its own step"):
        inception.train(_small(*_idx(idx_root), "seed=[0,1]", "train.stop.plateau=0.1"), tmp_path)
    with pytest.raises(ConfigError, match="seeds side by side are built for the in-memory"):
        inception.train(_small("data=image_folder", "data.root=/nonexistent", "seed=[0,1]"), tmp_path)  # fmt: skip
    assert not (tmp_path / "metrics.csv").exists()


def test_figure_3_names_a_budget_where_every_run_ended_at_the_cap():
    """Figure 3's analysis (Inception's maximum the target) also reads runs that all went to
    the cap; the figure and the table must not call that the paper's converged protocol, nor name
    a target where there is none, nor call runs that each went to their own plateau the paper's."""

    def summary(*ended, target=0.8):
        seeds = [{"ended_by": e} for e in ended]
        return {"cap": 8000, "target": target, "setups": {"inception": {"seeds": seeds[:1]}, "bn_x5": {"seeds": seeds[1:]}}}  # fmt: skip

    assert inception_fig3.protocol_name(summary("cap", "cap", "cap")) == "every arm 8,000 steps, Inception's maximum the target"  # fmt: skip
    assert (
        inception_fig3.protocol_name(summary("cap", "cap", target=None)) == "every arm 8,000 steps"
    )
    assert inception_fig3.protocol_name(summary("plateau", "target", "cap")).startswith(
        "converged protocol"
    )
    # Figure 3's confirmatory protocol: no run stops at a target, every arm at its own plateau
    assert (
        inception_fig3.protocol_name(summary("plateau", "plateau", "cap"))
        == "every arm to its own plateau or the cap"
    )
