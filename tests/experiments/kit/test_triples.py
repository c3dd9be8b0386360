"""The 1,000-class triples (experiments/kit/triples.py) on generated IDX files: balanced classes,
the right labels, the same triples every time, no test triple built from a training item."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from experiments.kit import data, triples
from experiments.kit.errors import ConfigError
from tests.idx_files import make_dataset, write_idx


def _cfg(root, name="fashion_mnist_triples"):
    return OmegaConf.create(
        {"name": name, "root": str(root), "download": False, "verify": False, "binarize": False}
    )


@pytest.fixture
def splits(tmp_path):
    raw = make_dataset(tmp_path, folder="FashionMNIST", n_train=120, n_test=40)
    train, test, channels, classes = data.load_splits(_cfg(tmp_path))
    return raw, train, test, channels, classes


def test_every_class_has_its_share_of_examples(splits):
    _, train, test, channels, classes = splits
    assert (channels, classes) == (1, 1000)
    for split, per_class in ((train, 60), (test, 10)):
        assert len(split) == 1000 * per_class
        counts = torch.bincount(split.labels, minlength=1000)
        assert counts.tolist() == [per_class] * 1000


def test_a_triple_is_its_three_items_side_by_side_and_labelled_by_them(splits):
    raw, train, test, _, _ = splits
    base = {s: data.load_split(raw, s).labels for s in ("train", "test")}
    for name, split in (("train", train), ("test", test)):
        a, b, c = base[name][split.items].unbind(1)
        assert torch.equal(split.labels, 100 * a + 10 * b + c)
        assert torch.equal(triples.digits(split.labels), base[name][split.items])
        idx = torch.tensor([0, 7, len(split) - 1])
        x, y = next(split.batches([idx]))
        assert x.shape == (3, 1, 28, 84) and split.side == 84
        for p in range(3):
            items = split.base[split.items[idx, p]]
            assert torch.equal(x[..., 28 * p : 28 * (p + 1)], items)
        assert torch.equal(y, split.labels[idx])


def test_the_triples_are_the_same_on_every_load(tmp_path, splits):
    _, train, test, _, _ = splits
    again_train, again_test, _, _ = data.load_splits(_cfg(tmp_path))
    assert torch.equal(train.items, again_train.items)
    assert torch.equal(test.items, again_test.items)
    assert torch.equal(train.labels, again_train.labels)


def _keys(split) -> set[tuple[bytes, ...]]:
    """Each triple as the pixels of its three items (a triple's image is their concatenation)."""
    pixels = [item.numpy().tobytes() for item in split.base]
    return {tuple(pixels[i] for i in row) for row in split.items.tolist()}


def test_no_test_triple_is_a_training_triple(splits):
    _, train, test, _, _ = splits
    assert not _keys(train) & _keys(test)
    assert len(_keys(test)) > 1000  # distinct triples, not one repeated


def test_items_are_used_as_evenly_as_the_counts_allow(splits):
    """Label d's items at position p are fresh random orders read one after another: no item is
    used twice at a position before every item of its label has been used once there."""
    raw, train, _, _, _ = splits
    labels = data.load_split(raw, "train").labels
    for p in range(3):
        uses = torch.bincount(train.items[:, p], minlength=len(labels))
        for d in range(10):
            mine = uses[labels == d]
            assert int(mine.max()) - int(mine.min()) <= 1


def test_mnist_triples_read_the_mnist_files_binarized(tmp_path):
    make_dataset(tmp_path, folder="MNIST", n_train=100, n_test=100)
    cfg = _cfg(tmp_path, "mnist_triples")
    cfg.binarize = True
    train, test, _, classes = data.load_splits(cfg)
    assert classes == 1000 and len(test) == 10_000
    assert train.images(torch.arange(5)).unique().numel() == 2


def test_a_label_missing_from_a_split_is_one_line(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    images = np.zeros((20, 28, 28))
    for prefix, labels in (("train", np.arange(20) % 10), ("t10k", np.arange(20) % 9)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    with pytest.raises(ConfigError, match=r"^the base test split holds no example of label 9") as e:
        data.load_splits(_cfg(tmp_path))
    assert "\n" not in str(e.value)


def test_bad_arguments_are_one_line():
    labels = torch.arange(30) % 10
    with pytest.raises(ConfigError, match=r"^per_class=0: a triple class needs"):
        triples.triple_items(labels, 0, "train")
    with pytest.raises(ConfigError, match=r"^split='val' must be one of"):
        triples.triple_items(labels, 1, "val")


def test_padding_pads_each_item(tmp_path):
    make_dataset(tmp_path, folder="FashionMNIST", n_train=100, n_test=100)
    train, *_ = data.load_splits(_cfg(tmp_path), size=32, channels=3)
    x, _ = next(train.batches([torch.arange(2)]))
    assert x.shape == (2, 3, 32, 96) and train.side == 96
