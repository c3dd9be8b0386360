"""scripts/make_imagenet_subset.py: k images of the first n classes (or a class list), one-line
errors, and it copies only what the source tree holds and survives bad images."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from scripts.make_imagenet_subset import SubsetError, build_subset
from scripts.make_synthetic_images import make_image_folder

ROOT = Path(__file__).resolve().parents[2]


def _tree(root, classes=("n01", "n02"), per_class=3):
    for split in ("train", "val"):
        for c in classes:
            folder = root / split / c
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (40, 30), (i * 40, 0, 0)).save(folder / f"{c}_{i}.JPEG")
    return root


def _classes(tmp_path, *wnids):
    path = tmp_path / "classes.txt"
    path.write_text("\n".join(wnids) + "\n")
    return path


@pytest.mark.parametrize("link", [False, True])
def test_links_leading_outside_the_source_are_skipped(tmp_path, capsys, link):
    src = _tree(tmp_path / "src")
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(b"not yours")
    os.symlink(secret, src / "train" / "n01" / "evil.JPEG")
    m = build_subset(src, tmp_path / "dst", link=link, workers=1)
    assert not (tmp_path / "dst" / "train" / "n01" / "evil.JPEG").exists()
    assert m["train_images"] == 6
    assert "skipping" in capsys.readouterr().err


def test_a_linked_class_folder_leading_outside_the_source_is_skipped(tmp_path, capsys):
    src = _tree(tmp_path / "src")
    elsewhere = _tree(tmp_path / "elsewhere", classes=("n03",))
    os.symlink(elsewhere / "train" / "n03", src / "train" / "n03", target_is_directory=True)
    os.symlink(elsewhere / "val" / "n03", src / "val" / "n03", target_is_directory=True)
    with pytest.raises(SubsetError, match="n03 has no images"):  # none of its own
        build_subset(src, tmp_path / "dst", workers=1)
    assert not list((tmp_path / "dst").rglob("n03_*.JPEG"))
    assert "outside" in capsys.readouterr().err
    m = build_subset(src, tmp_path / "dst", class_list=_classes(tmp_path, "n01", "n02"), workers=1)
    assert m["train_images"] == 6


def test_an_unreadable_image_is_skipped_and_reported(tmp_path, capsys):
    src = _tree(tmp_path / "src")
    (src / "train" / "n02" / "broken.JPEG").write_bytes(b"\xff\xd8 truncated")
    (src / "val" / "n01" / "folder.JPEG").mkdir()  # a directory with an image's name
    m = build_subset(src, tmp_path / "dst", resize=16, workers=1)
    dst = tmp_path / "dst"
    assert len(m["unreadable_skipped"]) == 1 and "broken.JPEG" in m["unreadable_skipped"][0]
    assert not (dst / "train" / "n02" / "broken.JPEG").exists()
    assert not list(dst.rglob("*.tmp"))  # nothing half-written
    assert len(list((dst / "train").rglob("*.JPEG"))) == 6
    assert m["train_images"] == 6  # what the subset holds, not what was picked
    assert "broken.JPEG" in capsys.readouterr().err


def test_an_image_too_large_to_trust_is_skipped_and_reported(tmp_path, monkeypatch):
    from PIL import Image

    src = _tree(tmp_path / "src")
    Image.new("RGB", (400, 300)).save(src / "train" / "n01" / "huge.JPEG")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 50_000)  # 400 x 300 is over twice the limit
    m = build_subset(src, tmp_path / "dst", resize=16, workers=1)
    assert (
        len(m["unreadable_skipped"]) == 1 and "DecompressionBombError" in m["unreadable_skipped"][0]
    )
    assert m["train_images"] == 6


@pytest.fixture
def fake_imagenet(tmp_path):
    return make_image_folder(
        tmp_path / "imagenet", classes=5, train_per_class=6, val_per_class=3, size=60
    )


def test_subset_builder_takes_k_images_of_the_first_n_classes(fake_imagenet, tmp_path):
    dst = tmp_path / "subset"
    m = build_subset(fake_imagenet, dst, classes=3, train_per_class=4, resize=30, workers=2)
    assert m["classes"] == 3 and m["train_images"] == 12 and m["val_images"] == 9
    assert (dst / "classes.txt").read_text().split() == ["class_000", "class_001", "class_002"]
    train = sorted((dst / "train").rglob("*.JPEG"))
    assert len(train) == 12 and {p.parent.name for p in train} == {
        "class_000",
        "class_001",
        "class_002",
    }
    with Image.open(train[0]) as img:
        assert min(img.size) == 30
    again = build_subset(fake_imagenet, dst, classes=3, train_per_class=4, resize=30, workers=2)
    assert again["written_now"] == 0  # an interrupted build resumes; the sample is seeded
    from experiments.kit.data import image_folder_splits

    tr, val, n = image_folder_splits(dst, 24, num_workers=0)
    assert n == 3 and len(tr) == 12 and len(val) == 9


def test_subset_builder_reads_a_class_list(fake_imagenet, tmp_path):
    listing = tmp_path / "classes.txt"
    listing.write_text("# two of them\nclass_004\nclass_001\n")
    m = build_subset(fake_imagenet, tmp_path / "s", class_list=listing, link=True, workers=1)
    assert m["classes"] == 2 and m["train_images"] == 12
    assert sorted(p.name for p in (tmp_path / "s" / "train").iterdir()) == [
        "class_001",
        "class_004",
    ]
    assert next((tmp_path / "s" / "train" / "class_004").iterdir()).is_symlink()


def test_subset_builder_rejects_malformed_trees(fake_imagenet, tmp_path):
    with pytest.raises(SubsetError, match="does not exist"):
        build_subset(tmp_path / "missing", tmp_path / "s")
    listing = tmp_path / "classes.txt"
    listing.write_text("n01440764\n")
    with pytest.raises(SubsetError, match="not in the source"):
        build_subset(fake_imagenet, tmp_path / "s", class_list=listing)
    flat = tmp_path / "flat"
    (flat / "train" / "a").mkdir(parents=True)
    (flat / "val").mkdir()
    Image.new("RGB", (8, 8)).save(flat / "val" / "ILSVRC2012_val_00000001.JPEG")
    with pytest.raises(SubsetError, match="holds images directly"):
        build_subset(flat, tmp_path / "s")


def test_subset_builder_command_line_error_is_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scripts.make_imagenet_subset",
            str(tmp_path / "nope"),
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert (
        out.returncode == 1
        and out.stderr.strip().startswith("error:")
        and "Traceback" not in out.stderr
    )


def test_a_named_pipe_named_like_an_image_is_refused(tmp_path):
    src = _tree(tmp_path / "src")
    fifo = src / "train" / "n02" / "stuck.JPEG"
    os.mkfifo(fifo)
    with pytest.raises(SubsetError, match=f"^{fifo} is not a plain file"):
        build_subset(src, tmp_path / "dst", workers=1)
