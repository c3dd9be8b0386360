"""Nothing lost, nothing silent: user files, run directories, config values, checkpoints and
errors (each probe a test that failed before its fix)."""

import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException

import bn
from experiments import mnist
from experiments.kit import fetch
from experiments.kit.data import ensure_dataset, read_idx
from experiments.kit.errors import BadDataFile, ConfigError, DataUnavailable
from experiments.kit.runlog import RunDirLock, _wandb_run, write_json
from tests.configs import compose_config
from tests.idx_files import make_dataset, write_idx

REPO = Path(__file__).resolve().parents[3]


def _mnist_cfg(root: Path, *extra):
    return compose_config(
        "mnist",
        [
            "data=fashion_mnist",
            f"data.root={root}",
            "data.download=false",
            "data.verify=false",
            "logger.mode=disabled",
            "train.steps=20",
            "eval.every=10",
            "train.batch_size=20",
            "population.num_batches=2",
            *extra,
        ],
    )


# -- data: never delete a user's file; name the file in every error -------------------------
def test_a_file_failing_its_md5_is_moved_aside_not_deleted(tmp_path, monkeypatch):
    raw = make_dataset(tmp_path)  # tiny files: every md5 fails
    original = (raw / "train-images-idx3-ubyte").read_bytes()

    def no_source(name, root, raw):
        return [("a source that fails", lambda: (_ for _ in ()).throw(OSError("offline")))]

    monkeypatch.setattr(fetch, "_sources", no_source)
    with pytest.raises(DataUnavailable) as e:
        ensure_dataset("fashion_mnist", tmp_path, download=True)
    moved = raw / "train-images-idx3-ubyte.bad-md5"
    assert moved.read_bytes() == original  # kept, under a name that says why
    message = str(e.value)
    assert (
        "train-images-idx3-ubyte" in message
        and fetch.FASHION_MD5["train-images-idx3-ubyte"] in message
    )


def test_without_download_a_failing_file_is_left_alone_and_named(tmp_path):
    raw = make_dataset(tmp_path)
    with pytest.raises(
        DataUnavailable, match=r"t10k-labels-idx1-ubyte fails its md5 check \(expected 15d4"
    ):
        ensure_dataset("fashion_mnist", tmp_path, download=False)
    assert (raw / "t10k-labels-idx1-ubyte").exists()


def test_fashion_mnist_files_are_checked_too(tmp_path):
    make_dataset(tmp_path)
    with pytest.raises(DataUnavailable):
        ensure_dataset("fashion_mnist", tmp_path, download=False)
    assert ensure_dataset("fashion_mnist", tmp_path, download=False, verify=False).is_dir()


def test_truncated_gz_names_the_file(tmp_path):
    path = write_idx(tmp_path / "x-idx1-ubyte", torch.arange(100).numpy(), compress=True)
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(BadDataFile, match=r"x-idx1-ubyte.gz cannot be read"):
        read_idx(path)


def test_truncated_idx_prints_plain_integers(tmp_path):
    path = write_idx(tmp_path / "x-idx3-ubyte", torch.zeros(4, 3, 3).numpy())
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(BadDataFile, match=r"header says \(4, 3, 3\) but holds 31 values"):
        read_idx(path)


# -- run directories ---------------------------------------------------------------------------
@pytest.mark.slow
def test_an_earlier_run_is_not_overwritten(tiny_data, tmp_path):
    mnist.train(_mnist_cfg(tiny_data, "setup=baseline"), tmp_path)
    before = (tmp_path / "metrics.csv").read_bytes()
    with pytest.raises(
        ConfigError,
        match=r"already holds a run \(.*\); continue it with resume=true, replace it with overwrite=true",
    ):
        mnist.train(_mnist_cfg(tiny_data, "setup=baseline", "train.lr=0.3"), tmp_path)
    assert (tmp_path / "metrics.csv").read_bytes() == before
    mnist.train(_mnist_cfg(tiny_data, "setup=baseline", "train.lr=0.3", "overwrite=true"), tmp_path)
    assert (tmp_path / "metrics.csv").read_bytes() != before


def test_a_run_directory_in_use_is_refused(tmp_path):
    lock = RunDirLock(tmp_path)
    with pytest.raises(ConfigError, match=f"{tmp_path} is in use by process {os.getpid()}"):
        RunDirLock(tmp_path)
    lock.release()
    RunDirLock(tmp_path).release()  # free again once released (or once its process ends)


@pytest.mark.slow
def test_a_second_process_in_the_same_run_directory_fails_at_once(tmp_path):
    lock = RunDirLock(tmp_path)
    code = "from pathlib import Path; from experiments.kit.runlog import RunDirLock; RunDirLock(Path(r'%s'))"
    out = subprocess.run(
        [sys.executable, "-c", code % tmp_path],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,  # starting Python and torch under load
    )
    lock.release()
    assert out.returncode != 0 and "is in use by process" in out.stderr


@pytest.mark.slow
def test_resuming_a_finished_run_logs_nothing_twice(tiny_data, tmp_path):
    mnist.train(_mnist_cfg(tiny_data, "setup=bn"), tmp_path)
    before = (tmp_path / "metrics.csv").read_text()
    assert "test/acc_population" in before
    mnist.train(_mnist_cfg(tiny_data, "setup=bn", "resume=true"), tmp_path)
    assert (tmp_path / "metrics.csv").read_text() == before


# -- typed config values -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        "population.num_batches=2.5",
        "train.steps=abc",
        "data.binarize=maybe",
        "resume=perhaps",
        "norm.kind=batchnrom",
        "logger.mode=onlin",
    ],
)
def test_a_value_of_the_wrong_type_is_rejected_before_anything_runs(bad):
    with pytest.raises(ConfigCompositionException):
        compose_config("mnist", [bad])


def test_boolean_words_mean_what_they_say():
    cfg = compose_config("mnist", ["data.binarize=no", "resume=no"])
    assert cfg.data.binarize is False and cfg.resume is False


def test_negative_threads_are_rejected():
    with pytest.raises(ConfigError, match="threads=-1 must be at least 1"):
        mnist.check(compose_config("mnist", ["threads=-1"]))


# -- checkpoints -------------------------------------------------------------------------------
class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_crafted_checkpoint_cannot_run_code(tiny_data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    with (run / "checkpoint.pt").open("wb") as f:
        pickle.dump({"step": 1, "model": _Exploit()}, f)
    with pytest.raises(
        ConfigError, match=r"checkpoint.pt is not a checkpoint this code can resume from"
    ):
        mnist.train(_mnist_cfg(tiny_data, "setup=bn", "resume=true"), run)
    assert not (tmp_path / "pwned").exists()


# -- summaries and loggers ---------------------------------------------------------------------
def test_summary_json_holds_no_nan(tmp_path):
    write_json(tmp_path / "s.json", {"loss": math.nan, "acc": 0.5, "top": math.inf})
    text = (tmp_path / "s.json").read_text()
    assert json.loads(text) == {
        "loss": None,
        "acc": 0.5,
        "top": None,
        "non_finite": ["loss", "top"],
    }


def test_online_logging_without_an_api_key_fails_fast(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="logger.mode=online needs a W&B API key"):
        _wandb_run(tmp_path, "online", {})


# -- one-line errors from the command line -----------------------------------------------------
def _cli(*args, cwd=REPO):
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


@pytest.mark.slow
def test_a_run_directory_that_is_a_file_is_one_line(tiny_data, tmp_path):
    target = tmp_path / "a_file"
    target.write_text("mine")
    out = _cli(
        "experiments.mnist",
        "data=fashion_mnist",
        f"data.root={tiny_data}",
        "data.verify=false",
        "logger.mode=disabled",
        "train.steps=2",
        f"hydra.run.dir={target}",
    )
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert target.read_text() == "mine"


# -- the Figure 1 probe reads what it says ------------------------------------------------------
def test_the_typical_sigmoid_is_in_the_last_hidden_layer(tiny_data):
    cfg = _mnist_cfg(tiny_data, "setup=bn", "probe.unit=3")
    pct = torch.arange(3 * 3 * 100, dtype=torch.float32).view(3, 3, 100)  # (layers, qs, units)
    probe = mnist.Figure1Probe.__new__(mnist.Figure1Probe)
    probe.unit, probe.qs = cfg.probe.unit, list(cfg.probe.percentiles)
    typical = probe._typical(pct)
    assert typical == {f"sigmoid_input/p{q:g}": pct[2, i, 3].item() for i, q in enumerate(probe.qs)}


def test_population_statistics_come_from_training_images(tiny_data, monkeypatch):
    cfg = _mnist_cfg(tiny_data, "setup=bn")
    data = mnist.load_data(cfg.data)
    model = mnist.SigmoidMLP(bn.BatchNorm1d, cfg.model.hidden, 0.1, copies=1, seeds=[0])
    seen = []

    def record(m, batches, num_batches, bessel=True, **kw):
        seen.extend(next(iter(batches)) for _ in range(num_batches))

    monkeypatch.setattr(mnist.bn, "set_population_statistics", record)
    mnist.population_accuracies(model, cfg, data, [0])
    train_rows = {tuple(r.tolist()) for r in data.x_train}
    test_rows = {tuple(r.tolist()) for r in data.x_test}
    batch_rows = [tuple(r.tolist()) for b in seen for r in b.reshape(-1, b.shape[-1])]
    assert batch_rows and all(r in train_rows for r in batch_rows)
    assert not test_rows.issuperset(batch_rows)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_corrupt_image_met_in_training_names_the_file(tmp_path, workers):
    from experiments.kit.data import image_folder_splits
    from scripts.make_synthetic_images import make_image_folder

    make_image_folder(tmp_path, classes=2, train_per_class=2, val_per_class=1, size=12)
    bad = sorted((tmp_path / "train").rglob("*.*"))[0]
    bad.write_bytes(b"not an image")
    train, _, _ = image_folder_splits(tmp_path, 8, num_workers=workers)
    with pytest.raises(
        BadDataFile, match=rf"^image {bad} cannot be read \(UnidentifiedImageError\)"
    ):
        list(train.batches([torch.arange(len(train))]))


# -- faults from deep inside a run: one line each --------------------------------------------------
def _run_study_raising(tmp_path, error: Exception):
    def train(_cfg, _out):
        raise error

    return _run_study_training(tmp_path, train)


def _run_study_training(tmp_path, train):
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    from experiments.kit.config import run_study
    from tests.configs import compose_config

    cfg = compose_config("mnist", ["logger.mode=disabled"])
    hc = HydraConfig.get()
    with read_write(hc), open_dict(hc):
        hc.runtime.output_dir = str(tmp_path)
    return run_study(train, cfg)


@pytest.mark.slow
def test_a_full_disk_inside_torch_save_is_one_line(tmp_path):
    full = RuntimeError(
        "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/3: file write failed"
    )
    with pytest.raises(SystemExit, match="could not write a file of the run .* is the disk full"):
        _run_study_raising(tmp_path, full)
    with pytest.raises(RuntimeError, match="a bug"):  # any other RuntimeError stays a traceback
        _run_study_raising(tmp_path, RuntimeError("a bug"))


def test_torch_saves_unexpected_pos_on_a_full_disk_is_one_line(tmp_path, monkeypatch):
    """The zip writer's other full-disk message, raised from inside a checkpoint's write."""
    import torch

    from experiments.kit.runlog import save_checkpoint

    def full(*_args, **_kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 123 vs 456")

    monkeypatch.setattr(torch, "save", full)

    def train(_cfg, out):
        save_checkpoint(out / "checkpoint.pt", {"step": 1})

    with pytest.raises(SystemExit, match=r"could not write a file .*unexpected pos 123 vs 456"):
        _run_study_training(tmp_path, train)
    assert not (tmp_path / "checkpoint.pt").exists()


@pytest.mark.slow
def test_an_image_too_large_to_trust_is_one_line(tmp_path):
    from PIL import Image

    bomb = Image.DecompressionBombError("Image size (200000000 pixels) exceeds limit")
    with pytest.raises(SystemExit, match="exceeds limit .*an image of the data set"):
        _run_study_raising(tmp_path, bomb)


def test_a_run_folder_that_cannot_be_written_is_refused_before_hydra(tmp_path, monkeypatch):
    import os

    from experiments.kit.config import preflight

    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    with pytest.raises(SystemExit, match="cannot be written"):
        preflight("mnist", [f"hydra.run.dir={tmp_path / 'run'}"])
    preflight("mnist", [f"hydra.run.dir={tmp_path.parent / 'elsewhere'}"])
