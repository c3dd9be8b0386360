"""The Batch Renorm study: samplers, schedule scaling, microbatch wiring, and every setup end to end
on tiny generated data with W&B disabled."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import open_dict

import bn
from experiments import renorm
from experiments.kit.config import setups
from experiments.kit.errors import ConfigError, DataUnavailable
from experiments.kit.identity import comparable_config
from experiments.kit.norm import renorm_bounds
from experiments.nets.norms import norm_layers
from scripts.make_synthetic_images import make_image_folder
from tests.configs import CONFIGS, compose_config
from tests.idx_files import make_dataset
from tests.interrupt import killed_after_checkpoint
from tests.processes import free_port
from tests.runs import metric_rows

ROOT = CONFIGS.parent
SETUPS = setups("renorm")


def _cfg(overrides=()):
    return compose_config("renorm", overrides)


def _small(root: Path, *extra):
    return _cfg(
        [
            f"data.root={root}",
            "data.download=false",
            "data.verify=false",
            "logger.mode=disabled",
            "train.steps=6",
            "train.lr_decay_every=2",
            "eval.every=3",
            "eval.batch_size=25",
            "eval.train_subset=60",
            "eval.clip_every=1",
            *extra,
        ]
    )


# --- schedule and model wiring (the samplers: kit/test_sampling.py) ----------------------------


def test_schedule_scales_with_the_run_length():
    cfg = _cfg(["setup=brn32"])
    r_max, d_max = renorm_bounds(cfg.norm.schedule, total_steps=16_000)
    # The paper's breakpoints (5k, 25k, 40k of 160k) at a tenth.
    assert (r_max(500), d_max(500)) == (1.0, 0.0)
    assert r_max(4000) == 3.0 and d_max(2500) == 5.0
    assert r_max(2250) == pytest.approx(2.0) and d_max(1500) == pytest.approx(2.5)
    with open_dict(cfg):
        cfg.norm.schedule.paper_steps = None
    r_max, _ = renorm_bounds(cfg.norm.schedule, total_steps=16_000)
    assert r_max(4000) < 1.1 and r_max(40_000) == 3.0  # as given
    jump = _cfg(["setup=brn_micro4_jump"])
    assert renorm_bounds(jump.norm.schedule, 16_000) == (3.0, 5.0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "setup", ["bn_micro4", "brn_micro4", "bn_micro4_rgrad", "brn_micro4_bngrad"]
)
def test_microbatch_setups_normalize_each_group_of_four(setup):
    cfg = _cfg([f"setup={setup}"])
    model = renorm.build_model(cfg, 1, 10).train()
    layers = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._NormBase)]
    assert len(layers) == 4 and all(m.microbatch == 4 for m in layers)
    x = torch.randn(8, 1, 28, 28)
    whole = copy.deepcopy(model)(x)
    parts = torch.cat([copy.deepcopy(model)(x[:4]), copy.deepcopy(model)(x[4:])])
    torch.testing.assert_close(whole, parts)  # statistics never mix the two microbatches
    full_batch = renorm.build_model(_cfg(["setup=bn32"]), 1, 10).train()
    full_batch.load_state_dict(model.state_dict())
    assert not torch.allclose(full_batch(x), whole)


@pytest.mark.parametrize(
    "setup,ablation",
    [("bn_micro4_rgrad", "bn_forward_r_grad"), ("brn_micro4_bngrad", "renorm_forward_bn_grad")],
)
def test_gradient_ablation_setups_reach_every_layer(setup, ablation):
    layers = norm_layers(renorm.build_model(_cfg([f"setup={setup}"]), 1, 10))
    assert layers and all(bn.is_batch_renorm(m) and m.ablation == ablation for m in layers)
    plain = norm_layers(renorm.build_model(_cfg(["setup=brn_micro4"]), 1, 10))
    assert all(m.ablation is None for m in plain)


def test_halves_setup_normalizes_one_example_of_each_pair_per_half():
    cfg = _cfg(["setup=noniid_bn_halves"])
    assert cfg.norm.microbatch == cfg.train.batch_size // cfg.sampler.per_label == 16
    assert cfg.sampler.kind == "pairs"


def test_gamma_is_fixed_at_one_and_not_trained():
    model = renorm.build_model(_cfg(["setup=brn32"]), 1, 10)
    norms = norm_layers(model)
    assert norms and all(not m.weight.requires_grad and (m.weight == 1).all() for m in norms)
    assert all(m.bias.requires_grad for m in norms)


@pytest.mark.slow
def test_every_setup_composes_and_builds():
    assert len(SETUPS) >= 12
    for setup in SETUPS:
        cfg = _cfg([f"setup={setup}"])
        renorm.check(cfg)
        assert renorm.build_model(cfg, 1, 10)(torch.randn(32, 1, 28, 28)).shape == (32, 10)


# --- end to end --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root_1000(tmp_path_factory) -> Path:
    """Like ``root`` with 1,000 training and 500 test images: the 2 labels x 16 setups draw
    groups of 16 examples of a label from both splits, which 50 test images over 10 labels do
    not have."""
    path = tmp_path_factory.mktemp("data_1000")
    make_dataset(path, n_train=1000, n_test=500)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("setup", SETUPS)
def test_each_setup_runs_end_to_end(root, root_1000, tmp_path, setup):
    data = root_1000 if _cfg([f"setup={setup}"]).sampler.per_label > 8 else root
    summary = renorm.train(_small(data, f"setup={setup}"), tmp_path)
    rows = metric_rows(tmp_path)
    metrics = {r["metric"] for r in rows}
    assert {"test/acc", "train/acc", "train/loss", "train/acc_minibatch", "lr"} <= metrics
    assert sorted({int(r["step"]) for r in rows if r["metric"] == "test/acc"}) == [0, 3, 6]
    cfg = _cfg([f"setup={setup}"])
    assert ("test/acc_train_mode" in metrics) == cfg.eval.train_mode
    if cfg.norm.kind == "batchrenorm":
        assert {"renorm/r_max", "renorm/d_max", "renorm/layer4/r_clipped"} <= metrics
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == summary and saved["setup"] == setup and not saved["diverged"]
    assert 0.0 <= saved["test_acc"] <= 1.0 and saved["steps_done"] == 6
    assert (tmp_path / "checkpoint.pt").exists()


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted(root, tmp_path, monkeypatch):
    overrides = ("setup=brn_micro4", "seed=2", "train.steps=9")
    full = renorm.train(_small(root, *overrides), tmp_path / "full")

    with killed_after_checkpoint(monkeypatch), pytest.raises(KeyboardInterrupt):
        renorm.train(_small(root, *overrides), tmp_path / "killed")
    resumed = renorm.train(_small(root, *overrides, "resume=true"), tmp_path / "killed")

    for key in ("test_acc", "train_acc", "max_test_acc"):
        assert resumed[key] == full[key], key
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=False)
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=0, atol=0)
    assert a["step"] == b["step"] == 9


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["brn_micro4", "noniid_brn"])
def test_seeds_side_by_side_are_the_separate_runs_one_folder_each(root, tmp_path, setup):
    """A list of seeds trains them stacked in one process: a folder per seed with its own
    metrics and summary; at step 0 (the same networks, before float rounding can differ) every
    evaluation equals that of the seed's own run, and every probe is logged per seed."""
    overrides = (f"setup={setup}", "eval.train_mode=true")
    summaries = renorm.train(_small(root, *overrides, "seed=[3,5]"), tmp_path / "stack")
    assert [s["seed"] for s in summaries] == [3, 5]
    assert all(s["copies"] == 2 and s["steps_done"] == 6 for s in summaries)
    for seed in (3, 5):
        alone = renorm.train(_small(root, *overrides, f"seed={seed}"), tmp_path / f"s{seed}")
        rows = metric_rows(tmp_path / "stack" / f"seed{seed}")
        saved = json.loads((tmp_path / "stack" / f"seed{seed}" / "summary.json").read_text())
        assert saved["seed"] == seed and saved["name"] == f"{setup}-s{seed}"
        assert {r["metric"] for r in rows} == {r["metric"] for r in metric_rows(tmp_path / f"s{seed}")}  # fmt: skip
        at0 = {r["metric"]: r["value"] for r in rows if int(r["step"]) == 0}
        want = {r["metric"]: r["value"] for r in metric_rows(tmp_path / f"s{seed}") if int(r["step"]) == 0}  # fmt: skip
        assert at0 == want and "test/acc_train_mode" in at0
        assert abs(saved["test_acc"] - alone["test_acc"]) < 0.2  # float rounding apart, same net


@pytest.mark.slow
def test_seeds_side_by_side_resume_after_a_kill_as_uninterrupted(root, tmp_path, monkeypatch):
    overrides = ("setup=bn_micro4", "seed=[0,2]", "train.steps=9")
    renorm.train(_small(root, *overrides), tmp_path / "full")
    with killed_after_checkpoint(monkeypatch), pytest.raises(KeyboardInterrupt):
        renorm.train(_small(root, *overrides), tmp_path / "killed")
    renorm.train(_small(root, *overrides, "resume=true"), tmp_path / "killed")
    for seed in (0, 2):
        rows = metric_rows(tmp_path / "killed" / f"seed{seed}")
        assert rows == metric_rows(tmp_path / "full" / f"seed{seed}")


# --- the α study's measurements: population statistics, every step's loss ----------------------

MEASURES = ("eval.population_batches=3", "eval.step_losses=true")


def _measured(root: Path, *extra):
    return _small(root, *MEASURES, *extra)


@pytest.mark.slow
def test_the_measurements_add_metrics_and_change_none_of_the_others(root, tmp_path):
    """With population statistics and every step's loss measured, every other metric is the run's
    without them, value for value (they are read from copies); the new ones are there, and
    step_losses.pt holds every step's loss, whose largest per interval is train/loss_max."""
    renorm.train(_small(root, "setup=brn_micro4"), tmp_path / "a")
    plain = metric_rows(tmp_path / "a")
    renorm.train(_measured(root, "setup=brn_micro4"), tmp_path / "b")
    measured = metric_rows(tmp_path / "b")
    new = {"test/acc_population_no_bessel", "train/loss_max"}
    assert [r for r in measured if r["metric"] not in new] == plain
    by = {(int(r["step"]), r["metric"]): float(r["value"]) for r in measured}
    assert {s for s, m in by if m == "test/acc_population_no_bessel"} == {0, 3, 6}
    losses = torch.load(tmp_path / "b" / "step_losses.pt", weights_only=True)
    assert losses.dtype == torch.float32 and losses.shape == (6,)
    assert by[(6, "train/loss_max")] == pytest.approx(losses[3:].max().item(), rel=1e-5)
    assert by[(3, "train/loss")] == pytest.approx(losses[:3].mean().item(), rel=1e-5)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert 0 <= summary["test_acc_population_no_bessel"] <= 1


@pytest.mark.slow
def test_population_statistics_of_seeds_side_by_side_are_each_seeds_own(root, tmp_path):
    """At step 0 (the same networks, before float rounding can differ) the stack's population
    accuracy of each seed is that seed's own run's; and it replaces the moving averages: a
    network whose moving averages are still at 0 and 1 scores differently."""
    renorm.train(_measured(root, "setup=brn_micro4", "seed=[3,5]"), tmp_path / "stack")
    for seed in (3, 5):
        renorm.train(_measured(root, "setup=brn_micro4", f"seed={seed}"), tmp_path / f"s{seed}")
        key = "test/acc_population_no_bessel"
        at0 = [r["value"] for r in metric_rows(tmp_path / "stack" / f"seed{seed}") if r["metric"] == key]  # fmt: skip
        alone = [r["value"] for r in metric_rows(tmp_path / f"s{seed}") if r["metric"] == key]
        assert at0[0] == alone[0]


@pytest.mark.slow
def test_step_losses_resume_after_a_kill_as_uninterrupted(root, tmp_path, monkeypatch):
    overrides = ("setup=brn_micro4_jump", "seed=[0,2]", "train.steps=9")
    renorm.train(_measured(root, *overrides), tmp_path / "full")
    with killed_after_checkpoint(monkeypatch), pytest.raises(KeyboardInterrupt):
        renorm.train(_measured(root, *overrides), tmp_path / "killed")
    renorm.train(_measured(root, *overrides, "resume=true"), tmp_path / "killed")
    for seed in (0, 2):
        a, b = (tmp_path / k / f"seed{seed}" for k in ("full", "killed"))
        assert metric_rows(a) == metric_rows(b)
        full, resumed = (torch.load(d / "step_losses.pt", weights_only=True) for d in (a, b))
        assert torch.equal(full, resumed) and full.shape == (9,)


@pytest.mark.slow
def test_diverged_run_stops_cleanly(root, tmp_path):
    summary = renorm.train(_small(root, "setup=bn32", "norm.kind=none", "train.lr=1e9"), tmp_path)
    assert summary["diverged"] and summary["diverged_at_step"] <= 6
    assert json.loads((tmp_path / "summary.json").read_text())["diverged"]
    assert any(r["metric"] == "test/acc" for r in metric_rows(tmp_path))  # step-0 row kept


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides,setting",
    [
        (["setup=bn_micro4", "norm.microbatch=5"], "norm.microbatch=5"),
        (["setup=groupnorm", "norm.microbatch=4"], "norm.microbatch=4"),
        (["setup=noniid_bn", "sampler.per_label=3"], "sampler.per_label=3"),
        (["setup=brn32", "norm.schedule.r_max=0.5"], "norm.schedule.r_max=0.5"),
        (["setup=brn32", "norm.schedule.paper_steps=0"], "norm.schedule.paper_steps=0"),
        (["setup=brn32", "norm.schedule.warmup=-1"], "norm.schedule.warmup=-1"),
        (["setup=brn32", "norm.schedule.r_max_step=100"], "norm.schedule.r_max_step=100"),
        (["setup=brn32", "norm.schedule.d_max_step=-5"], "norm.schedule.d_max_step=-5"),
        (
            ["setup=bn32", "norm.ablation=bn_forward_r_grad"],
            "norm.ablation=bn_forward_r_grad is an ablation of batchrenorm",
        ),
        (["train.lr=-1"], "train.lr=-1"),
        (["eval.clip_every=0"], "eval.clip_every=0"),
        (["eval.population_batches=-1"], "eval.population_batches=-1"),
        (["setup=groupnorm", "eval.population_batches=2"], "norm=groupnorm has none"),
        (["eval.pair_batch_size=0"], "eval.pair_batch_size=0"),
        (["eval.batch_size=0"], "eval.batch_size=0"),
        (["data.num_workers=-1"], "data.num_workers=-1"),
        (["sampler.kind=balanced"], "sampler.kind='balanced'"),
        (["seed=[0,1]", "train.grad_clip=1.0"], "train.grad_clip=1.0 clips each network's own"),
        (["seed=[0,1]", "train.stop.target=0.5"], "train.stop ends each run at its own step"),
        (["seed=[0,1]", "model.name=inception_v3"], r"seed=\[0, 1\]: seeds side by side"),
        (["train.first_images=10"], r"train.first_images=10 must hold at least one batch"),
        (["train.first_images=-1"], "train.first_images=-1"),
        (["train.first_images=100000"], "train.first_images=100000 is more than the"),
    ],
)
def test_invalid_settings_fail_before_training(root, tmp_path, overrides, setting):
    with pytest.raises(ConfigError, match=setting):
        renorm.train(_small(root, *overrides), tmp_path)
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize(
    ("extra", "drawn_from"),
    [
        # the training batches, Algorithm 2's; the training batches, Precise BN's and the test
        # batches of training-mode evaluation (the 50 test images); the weight-norm
        # initialization's minibatch, the training batches
        (("eval.population_batches=2",), [64, 64]),
        (
            ("eval.inference_modes=true", "eval.precise_batches=2", "eval.precise_counts=[64]"),
            [64, 64, 50],
        ),
        (("setup=weightnorm",), [64, 64]),
    ],
    ids=["population", "inference-modes", "weight-norm-init"],
)
def test_a_training_subset_is_all_the_training_samplers_draw_from(
    root, tmp_path, monkeypatch, extra, drawn_from
):
    sizes = []  # of what each i.i.d. sampler draws from
    real = renorm.IIDBatches
    monkeypatch.setattr(renorm, "IIDBatches", lambda n, *a: sizes.append(n) or real(n, *a))
    renorm.train(_small(root, "train.first_images=64", *extra), tmp_path)
    assert sizes == drawn_from  # every training sampler's is the first 64 of the 200 images
    assert comparable_config({"train.first_images": 0}) == {}  # earlier runs' records unchanged


def test_unknown_key_is_rejected():
    with pytest.raises(ConfigCompositionException, match="norm.kinds"):
        _cfg(["norm.kinds=batchnorm"])


# --- paper scale and distributed ---------------------------------------------------------------


@pytest.mark.slow
def test_paper_scale_runs_on_a_synthetic_image_folder(tmp_path):
    folder = make_image_folder(tmp_path / "images", classes=3, train_per_class=6, val_per_class=2)
    cfg = _cfg(
        [
            "scale=paper",
            "setup=brn_micro4",
            f"data.root={folder}",
            "data.image_size=75",
            "data.num_workers=0",
            "logger.mode=disabled",
            "train.batch_size=8",
            "train.steps=2",
            "eval.every=2",
            "eval.batch_size=6",
            "eval.train_subset=6",
        ]
    )
    summary = renorm.train(cfg, tmp_path / "run")
    assert summary["model"] == "inception_v3" and summary["steps_done"] == 2
    assert not summary["diverged"] and 0.0 <= summary["test_acc"] <= 1.0
    model = renorm.build_model(cfg, 3, 3)
    assert any(isinstance(m, bn.BatchRenorm2d) and m.microbatch == 4 for m in model.modules())
    assert not any(type(m) is torch.nn.BatchNorm2d for m in model.modules())


def test_missing_image_folder_is_a_clear_error(tmp_path):
    cfg = _cfg(["scale=paper", f"data.root={tmp_path}", "logger.mode=disabled"])
    with pytest.raises(DataUnavailable, match="train"):
        renorm.train(cfg, tmp_path / "run")


@pytest.mark.slow
def test_two_process_torchrun_run(root, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={free_port()}",
            "-m",
            "experiments.renorm",
            "setup=brn_micro4",
            f"data.root={root}",
            "data.download=false",
            "data.verify=false",
            "logger.mode=disabled",
            "train.steps=4",
            "eval.every=2",
            "eval.train_subset=60",
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
    assert summary["world_size"] == 2 and summary["steps_done"] == 4


def test_training_subset_of_an_image_folder_spans_the_classes(tmp_path):
    from experiments.kit.data import TensorSplit, fixed_batches, image_folder_splits

    folder = make_image_folder(tmp_path / "images", classes=4, train_per_class=5, val_per_class=1)
    train, _, _ = image_folder_splits(folder, 32, num_workers=0)
    picked = torch.cat(fixed_batches(train, 3, limit=8))
    assert len(picked) == 8 and len(set(train.labels[picked].tolist())) > 2  # not class 0, 1 only
    assert torch.equal(picked, torch.cat(fixed_batches(train, 3, limit=8)))  # the same every run
    tensors = TensorSplit(torch.zeros(20, 1), torch.zeros(20, dtype=torch.long))
    assert torch.cat(fixed_batches(tensors, 3, limit=8)).tolist() == list(range(8))


def test_an_image_size_too_small_for_inception_v3_is_one_line(tmp_path):
    folder = make_image_folder(tmp_path / "images", classes=2, train_per_class=2, val_per_class=1)
    cfg = _cfg(["scale=paper", f"data.root={folder}", "data.image_size=74", "data.num_workers=0"])
    with pytest.raises(
        ConfigError, match=r"^data.image_size gives 74x74 images; Inception-v3 needs"
    ):
        renorm.train(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.csv").exists()


# --- 1,000 classes of triples (experiments/kit/triples.py) -------------------------------------


@pytest.mark.parametrize("columns", [1, 3])
def test_the_conv_net_takes_triples_and_1000_classes(columns):
    """28x84 inputs and 1,000 classes; with one pooled column per item, moving an item to
    another place changes the hidden layer's input (global pooling is blind to it, away from the
    edges)."""
    cfg = _cfg(["data=fashion_mnist_triples", f"model.pool_columns={columns}"])
    renorm.check_input_side(cfg, 84)
    torch.manual_seed(0)
    model = renorm.build_model(cfg, 1, 1000).eval()
    assert model(torch.randn(2, 1, 28, 84)).shape == (2, 1000)
    assert model[-4].in_features == 64 * columns  # the hidden linear layer
    pooled = torch.nn.Sequential(*list(model)[:-4])  # up to the flattened pooling
    x = torch.zeros(2, 1, 28, 84)
    x[0, :, 4:24, 16:36] = 1.0  # an item, then the same item 24 px (3 cells of stride 8) right
    x[1] = torch.roll(x[0], 24, dims=-1)
    features = pooled(x)
    assert features.shape == (2, 64 * columns)
    assert torch.allclose(features[0], features[1], atol=1e-6) == (columns == 1)


def test_a_pooling_of_no_columns_is_refused():
    with pytest.raises(ValueError, match=r"^pool_columns=0 must be at least 1"):
        renorm.build_model(_cfg(["model.pool_columns=0"]), 1, 10)


@pytest.mark.slow
def test_non_iid_seeds_side_by_side_train_on_triples(root, tmp_path):
    """The paper's protocol on 1,000 classes: 16 labels x 2 of the triples, two seeds stacked,
    evaluated at inference and in training mode on test minibatches built the same way."""
    summaries = renorm.train(
        _small(root, "data=fashion_mnist_triples", "setup=noniid_brn", "model.pool_columns=3", "seed=[0,1]", "eval.every=6"),
        tmp_path,
    )  # fmt: skip
    assert [s["data"] for s in summaries] == ["fashion_mnist_triples"] * 2
    assert all(0 <= s["test_acc_train_mode"] <= 1 and not s["diverged"] for s in summaries)
    rows = metric_rows(tmp_path / "seed1")
    assert {"test/acc", "test/acc_train_mode", "renorm/layer4/r_clipped"} <= {r["metric"] for r in rows}  # fmt: skip
