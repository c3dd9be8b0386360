"""scripts/make_imagenet_subset.py copies only what the source tree holds and survives bad images."""

import os

import pytest
from PIL import Image

from scripts.make_imagenet_subset import SubsetError, build_subset


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
