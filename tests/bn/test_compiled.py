"""bn.compiled: the compiled Batch Renorm kernel equals the PyTorch path, and falls back cleanly."""

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import bn
from bn import compiled
from bn.functional import SMALL, batch_stats
from tests.compiled_ops import built_or_skip, without_compiler


@pytest.fixture
def kernel():
    """The compiled operator (a machine with a C++ compiler must be able to build it)."""
    return built_or_skip(compiled.renorm_op(), compiled.status())


def _uses_kernel(y: torch.Tensor) -> bool:
    return "RenormTrain" in y.grad_fn.name()


def _pair(dtype=torch.float64, **kwargs):
    """Two equal Batch Renorm layers with perturbed moving statistics and affine parameters."""
    a = bn.BatchRenorm1d(12, **kwargs).to(dtype)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        a.running_mean.copy_(torch.randn(12, generator=g) * 0.5)
        a.running_var.copy_(torch.rand(12, generator=g) + 0.5)
        for p in a.parameters():
            p.copy_(torch.randn(12, generator=g) * 0.5 + 1)
    return a, copy.deepcopy(a)


def _steps(a, b, dtype, steps=4, n=24):
    """Train ``a`` with the kernel and ``b`` with the PyTorch path; yield what must agree."""
    for _ in range(steps):
        x = (torch.randn(n, 12, dtype=dtype) * 2 + 1).requires_grad_(True)
        x2 = x.detach().clone().requires_grad_(True)
        gy = torch.randn(n, 12, dtype=dtype)
        ya = a(x)
        assert _uses_kernel(ya)
        ya.backward(gy)
        previous = compiled.set_enabled(False)
        try:
            yb = b(x2)
        finally:
            compiled.set_enabled(previous)
        assert not _uses_kernel(yb)
        yb.backward(gy)
        pairs = [(ya, yb), (x.grad, x2.grad), (a.running_mean, b.running_mean)]
        pairs += [(a.running_var, b.running_var)]
        pairs += [(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters())]
        yield pairs


@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"affine": False},
        {"bias": False},
        {"momentum": None},
        {"r_max": bn.LinearRamp(1.0, 3.0, 1, 3), "d_max": bn.LinearRamp(0.0, 2.0, 1, 3)},
    ],
)
def test_kernel_equals_pytorch_path_float64(kernel, microbatch, options):
    options = {"r_max": 1.3, "d_max": 0.4, **options}
    a, b = _pair(microbatch=microbatch, **options)
    for pairs in _steps(a, b, torch.float64):
        for u, v in pairs:
            torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
        assert torch.equal(a.r_clip_fraction, b.r_clip_fraction)
        assert torch.equal(a.d_clip_fraction, b.d_clip_fraction)
    assert 0 < float(a.r_clip_fraction) < 1 or 0 < float(a.d_clip_fraction) < 1  # clipping ran
    assert int(a.num_batches_tracked) == int(b.num_batches_tracked) == 4


def test_kernel_equals_pytorch_path_float32(kernel):
    a, b = _pair(torch.float32, r_max=1.3, d_max=0.4, microbatch=6)
    for pairs in _steps(a, b, torch.float32):
        for u, v in pairs:
            torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-5)


def test_kernel_backward_gradcheck(kernel):
    """The hand-written backward in float64 against finite differences. Finite differences see r
    and d move with x unless they are clipped, so the moving statistics are set far enough away
    that every r is clipped to 1/r_max and every d to ±d_max: constants, as stop_gradient says."""
    c = 5
    running_mean = torch.tensor([50.0, -50.0, 50.0, -50.0, 50.0], dtype=torch.float64)
    running_var = torch.full((c,), 100.0, dtype=torch.float64)  # σ = 10 >> σ_B, so r << 1/r_max
    x = torch.randn(6, c, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(c, dtype=torch.float64) + 0.5).requires_grad_(True)
    b = torch.randn(c, dtype=torch.float64, requires_grad=True)

    def f(x, w, b):  # fresh moving statistics per call: the operator updates them in place
        return kernel(x, w, b, running_mean.clone(), running_var.clone(), 2, 1e-5, 1.5, 0.3, 0.01)

    _, r, d = f(x, w, b)
    assert ((r < 1 / 1.5) & (d.abs() > 0.3)).all()  # every r and d clipped
    assert torch.autograd.gradcheck(lambda *t: f(*t)[0], (x, w, b))


def test_kernel_only_where_it_applies(kernel):
    x2d = torch.randn(8, 12, requires_grad=True)
    assert _uses_kernel(bn.BatchRenorm1d(12, r_max=2.0, d_max=1.0)(x2d))
    assert not _uses_kernel(bn.BatchRenorm1d(12, impl="reference")(x2d))
    assert not _uses_kernel(bn.BatchRenorm1d(12)(torch.randn(8, 12, 3, requires_grad=True)))
    big = torch.randn(SMALL // 12 + 8, 12, requires_grad=True)
    assert big.numel() > compiled.MAX_NUMEL
    assert not _uses_kernel(bn.BatchRenorm1d(12)(big))
    # a float64 input to a float32 layer: the kernel wants one dtype, torch's path promotes
    mixed = bn.BatchRenorm1d(12)(torch.randn(8, 12, dtype=torch.float64, requires_grad=True))
    assert not _uses_kernel(mixed)


def test_non_contiguous_input_and_no_grad(kernel):
    a, b = _pair(r_max=2.0, d_max=1.0)
    x = torch.randn(12, 16, dtype=torch.float64).t()  # (16, 12), not contiguous
    with torch.no_grad():
        ya = a(x)
    previous = compiled.set_enabled(False)
    try:
        yb = b(x)
    finally:
        compiled.set_enabled(previous)
    torch.testing.assert_close(ya, yb)
    torch.testing.assert_close(a.running_var, b.running_var)


@pytest.mark.parametrize("microbatch", [None, 4])
def test_second_derivatives_equal_the_pytorch_path(kernel, microbatch):
    """A differentiated backward pass (``create_graph=True``) through the kernel gives the
    PyTorch path's second derivatives, with r and d clipped (the kernel's graph is recorded)."""
    a, b = _pair(r_max=1.2, d_max=0.1, microbatch=microbatch)
    x = torch.randn(8, 12, dtype=torch.float64) * 2 + 1

    def penalty_grads(layer):
        xr = x.clone().requires_grad_(True)
        y = layer(xr)
        (gx,) = torch.autograd.grad((y**3).sum(), xr, create_graph=True)
        return y, torch.autograd.grad(gx.square().sum(), [xr, layer.weight, layer.bias])

    ya, ga = penalty_grads(a)
    previous = compiled.set_enabled(False)
    try:
        yb, gb = penalty_grads(b)
    finally:
        compiled.set_enabled(previous)
    assert _uses_kernel(ya) and not _uses_kernel(yb)
    assert a.r_clip_fraction > 0 and a.d_clip_fraction > 0
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v)


def test_gradgradcheck_through_the_kernel(kernel):
    # Every r and d clipped, so locally constant: then Algorithm 1's stop_gradient is the true
    # derivative and finite differences can check it (an unclipped r moves with x).
    layer, _ = _pair(r_max=1.2, d_max=0.1, microbatch=4)
    x = (torch.randn(8, 12, dtype=torch.float64) * 10 + 5).requires_grad_(True)
    assert _uses_kernel(_call(layer, x, layer.weight, layer.bias))
    assert layer.r_clip_fraction == 1 and layer.d_clip_fraction == 1
    torch.autograd.gradgradcheck(
        lambda t, w, b: _call(layer, t, w, b), (x, layer.weight, layer.bias)
    )


def _call(layer, x, weight, bias):
    """``layer`` as a pure function: every call starts from the same moving statistics (gradcheck
    calls it many times; r and d depend on them)."""
    buffers = {k: b.clone() for k, b in layer.named_buffers()}
    return torch.func.functional_call(layer, ({"weight": weight, "bias": bias}, buffers), (x,))


def test_build_failure_warns_and_falls_back(monkeypatch):
    without_compiler(monkeypatch, compiled.renorm_op)
    monkeypatch.setattr(compiled, "_enabled", True)
    a, b = _pair(r_max=2.0, d_max=1.0)
    x = torch.randn(8, 12, dtype=torch.float64, requires_grad=True)
    with pytest.warns(RuntimeWarning, match="could not build the compiled Batch Renorm kernel"):
        y = a(x)
    assert not _uses_kernel(y)
    assert "unavailable" in compiled.status() and "Ninja is required" in compiled.status()
    monkeypatch.setattr(compiled, "_enabled", False)
    torch.testing.assert_close(y, b(x))


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("1", True), ("0", False)])
def test_environment_switch(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("BN_COMPILED", raising=False)
    else:
        monkeypatch.setenv("BN_COMPILED", value)
    assert compiled._enabled_by_environment() is expected


@pytest.mark.parametrize("offset", [0.0, 2.0, 1e3])
def test_large_input_statistics_are_accurate(offset):
    """The sums-based statistics of large inputs stay exact when |mean| >> std (two-pass route)."""
    x = torch.randn(4, 8, 48, 48) + offset * torch.rand(8).view(1, -1, 1, 1)
    assert x.numel() >= SMALL
    for groups in (1, 2):
        mean, var = batch_stats(x, groups)
        xd = x.double().view(groups, -1, 8, 48 * 48)
        torch.testing.assert_close(mean.double(), xd.mean((1, 3)), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(var.double(), xd.var((1, 3), correction=0), rtol=1e-5, atol=0)


def test_build_error_reason_names_the_cause():
    log = (
        "Error building extension 'bn_repro_ops': [1/2] c++ -c renorm_cpu.cpp\n"
        "FAILED: renorm_cpu.o\n/bin/sh: 1: c++: not found\nninja: build stopped: subcommand failed.\n"
    )
    assert compiled.reason(RuntimeError(log)) == "RuntimeError: /bin/sh: 1: c++: not found"
    assert compiled.reason(OSError("")) == "OSError: OSError('')"


def _finished_build(library, content: bytes = b"a built library"):
    """A library as a finished build leaves it: the file and the record of its size and hash."""
    library.parent.mkdir(parents=True, exist_ok=True)
    library.write_bytes(content)
    library.with_name(library.name + ".sha256").write_text(compiled._fingerprint(library))


class _Builder:
    """Stands for torch.utils.cpp_extension: 'builds' a library into the folder it is given."""

    def __init__(self, content: bytes = b"a rebuilt library", fail: bool = False):
        self.content, self.fail, self.folders = content, fail, []

    def load(self, name, build_directory, **kwargs):
        self.folders.append(build_directory)
        (Path(build_directory) / f"{name}.so").write_bytes(self.content[:5])
        if self.fail:
            raise RuntimeError("killed mid-link")
        (Path(build_directory) / f"{name}.so").write_bytes(self.content)


def test_a_finished_build_is_loaded_without_the_build_tool(monkeypatch, tmp_path):
    """Its folder is named after the source's text: a newer file date alone rebuilds nothing."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    library = compiled.build_directory() / f"{compiled.NAME}.so"
    _finished_build(library)  # older than any checkout
    loaded = []
    monkeypatch.setattr(torch.ops, "load_library", loaded.append)
    monkeypatch.setattr(compiled, "_cpp_extension", lambda: pytest.fail("rebuilt"))
    compiled.load_extension(compiled.NAME, compiled.SOURCE, "the kernel")
    assert loaded == [str(library)]


@pytest.mark.parametrize("record", [True, False], ids=["recorded-then-cut", "no-record"])
def test_a_build_cut_short_is_built_again(monkeypatch, tmp_path, record):
    """A library cut mid-file (a killed link, a full disk) is never loaded: loading one kills
    the process with SIGBUS. It no longer matches its record (or has none): it is rebuilt."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    library = compiled.build_directory() / f"{compiled.NAME}.so"
    _finished_build(library, b"a complete library")
    if record:
        library.write_bytes(b"a compl")  # cut short after it was recorded
    else:
        library.with_name(library.name + ".sha256").unlink()
        library.write_bytes(b"truncated")
    loaded, builder = [], _Builder()
    monkeypatch.setattr(torch.ops, "load_library", loaded.append)
    monkeypatch.setattr(compiled, "_cpp_extension", lambda: builder)
    compiled.load_extension(compiled.NAME, compiled.SOURCE, "the kernel")
    assert loaded == []  # the cut library was not loaded (the builder loads what it builds)
    assert len(builder.folders) == 1
    assert library.read_bytes() == b"a rebuilt library" and compiled._intact(library)


def test_the_library_is_written_atomically(monkeypatch, tmp_path):
    """A build writes elsewhere and renames the whole library into place: a build killed midway
    leaves the library before it (here: none) and no partial file where it is loaded from."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    library = compiled.build_directory() / f"{compiled.NAME}.so"
    monkeypatch.setattr(torch.ops, "load_library", lambda path: pytest.fail(f"loaded {path}"))
    killed = _Builder(fail=True)
    monkeypatch.setattr(compiled, "_cpp_extension", lambda: killed)
    with pytest.raises(RuntimeError, match="killed mid-link"):
        compiled.load_extension(compiled.NAME, compiled.SOURCE, "the kernel")
    assert Path(killed.folders[0]) != library.parent
    assert not library.exists() and not compiled._intact(library)
    assert not Path(killed.folders[0]).exists()  # the staging folder is cleaned up
    good = _Builder()
    monkeypatch.setattr(compiled, "_cpp_extension", lambda: good)
    compiled.load_extension(compiled.NAME, compiled.SOURCE, "the kernel")
    assert library.read_bytes() == b"a rebuilt library" and compiled._intact(library)


def test_a_build_killed_midway_leaves_no_staging_folder_behind(monkeypatch, tmp_path):
    source = tmp_path / "op.cpp"
    source.write_text("// an operator")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    folder = compiled.build_directory("fake_op", source)
    stale = folder.parent / f"{folder.name}.build-killed"
    stale.mkdir(parents=True)
    (stale / "half.o").write_bytes(b"\0")

    class FakeBuilder:
        @staticmethod
        def load(name, build_directory, **_kw):
            (Path(build_directory) / f"{name}.so").write_bytes(b"a library")

    monkeypatch.setattr(compiled, "_cpp_extension", lambda: FakeBuilder)
    monkeypatch.setattr(compiled, "_put_ninja_on_path", lambda: None)
    compiled.load_extension("fake_op", source, "a test operator")
    assert (folder / "fake_op.so").read_bytes() == b"a library"
    assert not list(folder.parent.glob(f"{folder.name}.build-*"))


def test_a_build_is_announced_before_it_starts_and_a_cached_load_is_not(
    monkeypatch, tmp_path, caplog
):
    """A first use that compiles (30 s to minutes) says so before it starts, and how to skip it;
    a first use that loads the finished build of an earlier one says nothing."""
    import logging

    source = tmp_path / "op.cpp"
    source.write_text("// an operator")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setattr(compiled, "OPERATORS", [])
    monkeypatch.setattr(compiled, "_enabled", True)
    said_before_the_build: list[list[str]] = []

    class FakeBuilder:
        @staticmethod
        def load(name, build_directory, **_kw):
            said_before_the_build.append([r.getMessage() for r in caplog.records])
            (Path(build_directory) / f"{name}.so").write_bytes(b"a library")

    monkeypatch.setattr(compiled, "_cpp_extension", lambda: FakeBuilder)
    monkeypatch.setattr(compiled, "_put_ninja_on_path", lambda: None)
    monkeypatch.setattr(torch.ops, "load_library", lambda path: None)

    def fake_build() -> Callable:
        compiled.load_extension("fake_op", source, "a test operator")
        return lambda x: x

    caplog.set_level(logging.INFO, logger="bn.compiled")
    assert compiled.LazyOp(fake_build, "a test operator", "the slow path")() is not None
    [said] = said_before_the_build
    assert said == [
        "building a test operator (once per machine, 30 s to 2 min; BN_COMPILED=0 skips it)"
    ]
    caplog.clear()
    assert compiled.LazyOp(fake_build, "a test operator", "the slow path")() is not None
    assert len(said_before_the_build) == 1 and not caplog.records  # loaded, not built: no word
