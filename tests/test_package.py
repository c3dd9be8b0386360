"""The distribution `pip install` builds is the `bn` library alone: torch is its one dependency,
and it imports and runs the README's example in a fresh environment without the research stack."""

import email
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import bn

ROOT = Path(__file__).resolve().parents[1]
RESEARCH_ONLY = ("hydra", "omegaconf", "wandb", "matplotlib", "submitit", "timm", "lightning")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built offline from a copy of the files the build reads (the checkout stays clean)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "LICENSE"):  # and bn/README.md, the long description
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "bn", src / "bn", ignore=shutil.ignore_patterns("__pycache__"))
    code = "from setuptools import build_meta as b; print(b.build_wheel('dist'))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=src, capture_output=True, text=True, check=True
    )
    return src / "dist" / out.stdout.strip().splitlines()[-1]


def test_the_wheel_holds_bn_and_nothing_else(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = f"bn_repro-{bn.__version__}.dist-info"
        assert {n.split("/")[0] for n in names} == {"bn", info}
        assert {"bn/__init__.py", "bn/py.typed", "bn/csrc/renorm_cpu.cpp"} <= set(names)
        assert f"{info}/licenses/LICENSE" in names
        metadata = email.message_from_bytes(z.read(f"{info}/METADATA"))
    assert metadata["Version"] == bn.__version__
    assert sorted(metadata.get_all("Requires-Dist")) == [
        'ninja>=1.11; extra == "compiled"',
        "torch>=2.11",
    ]


def test_the_wheels_description_is_the_librarys_own_readme(wheel):
    """What an index shows of the wheel: bn's README (not the research code's, with its make
    targets and figures linked relative to the checkout), and no cap on Python's version."""
    with zipfile.ZipFile(wheel) as z:
        info = f"bn_repro-{bn.__version__}.dist-info"
        metadata = email.message_from_bytes(z.read(f"{info}/METADATA"))
        assert "bn/README.md" not in z.namelist()
    assert metadata["Requires-Python"] == ">=3.10"
    assert metadata["Description-Content-Type"] == "text/markdown"
    description = metadata.get_payload()
    assert description.splitlines()[0] == (
        "# bn: Batch Normalization and Batch Renormalization for PyTorch"
    )
    assert "make " not in description and "torchvision" not in description
    links = re.findall(r"\]\(([^)]*)\)", description)
    assert links and all(link.startswith("https://") for link in links)  # none relative


def test_the_wheel_links_the_papers_it_implements(wheel):
    """Its project URLs (an index's sidebar) are the papers CITATION.cff cites."""
    import yaml

    with zipfile.ZipFile(wheel) as z:
        info = f"bn_repro-{bn.__version__}.dist-info"
        metadata = email.message_from_bytes(z.read(f"{info}/METADATA"))
    urls = [line.split(", ", 1)[1] for line in metadata.get_all("Project-URL") or []]
    cited = yaml.safe_load((ROOT / "CITATION.cff").read_text())["references"]
    assert sorted(urls) == sorted(paper["url"] for paper in cited)


def test_the_librarys_readme_example_runs_and_prints_what_it_says(monkeypatch, capsys):
    """bn/README.md's example, with torch alone (the compiled kernel off: no build here)."""
    [example] = re.findall(r"```python\n(.*?)```", (ROOT / "bn" / "README.md").read_text(), re.S)
    monkeypatch.setattr(bn.compiled, "_enabled", False)
    exec(compile(example, "bn/README.md", "exec"), {})
    said = re.findall(r"^print\(.*\)  # (.*)$", example, flags=re.M)
    assert capsys.readouterr().out.splitlines() == said and len(said) == 3


def _uv() -> str:
    uv = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    if not Path(uv).exists():
        pytest.skip("uv is not installed (make installs it)")
    return uv


def _installed_closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need, found through their metadata."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # an optional or other-platform requirement
            continue
        found[name] = dist
        todo += [
            re.match(r"[A-Za-z0-9._-]+", r).group() for r in dist.requires or [] if "extra" not in r
        ]
    return list(found.values())


@pytest.mark.slow
def test_the_wheel_runs_in_a_fresh_environment(wheel, tmp_path):
    """A fresh venv holding only torch and torchvision (and what they need: linked from this
    environment, offline) and the wheel: nothing of the research stack is importable there, and
    the README's convert_norm example runs."""
    uv, venv = _uv(), tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for dist in _installed_closure(("torch", "torchvision")):
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    subprocess.run(
        [uv, "pip", "install", "-q", "--offline", "--no-deps", "--python", str(python), str(wheel)],
        check=True,
    )
    example = (
        "import importlib.util, sys, bn, torch, torchvision\n"
        "assert bn.__file__.startswith(sys.prefix), bn.__file__  # the wheel, not the checkout\n"
        f"assert not [m for m in {RESEARCH_ONLY!r} if importlib.util.find_spec(m)]\n"
        "model = bn.convert_norm(torchvision.models.resnet18(), 'batchrenorm', microbatch=4)\n"
        "y = model(torch.randn(8, 3, 32, 32))\n"
        "print(bn.__version__, sum(bn.is_batch_renorm(m) for m in model.modules()), tuple(y.shape))\n"
        "import bn.lightning\n"  # an optional part: without Lightning, asking for it says so
        "try:\n    bn.lightning.SyncBatchNormPlugin\nexcept ImportError as e:\n    print(e)"
    )
    out = subprocess.run(
        [str(python), "-c", example], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    printed, error = out.stdout.splitlines()
    assert printed.split() == [bn.__version__, "20", "(8,", "1000)"]
    assert error == "bn.lightning.SyncBatchNormPlugin needs Lightning: pip install lightning"
