"""The layer and BN-Inception benchmarks' options, without a GPU: which rows are timed, the targets
compiled rows are held to, a CUDA-graphed layer's steps, and a CUDA setting's name checked before
anything runs."""

from __future__ import annotations

import sys

import pytest
import torch

import bn
from scripts import bench_inception, bench_layers

CONV, FC = (32, 256, 28, 28), (60, 100)


@pytest.mark.parametrize(
    ("layer", "shape", "expected"),
    [
        ("brn compiled", CONV, 1.05),
        ("brn microbatch=4 compiled", CONV, 1.3),
        ("brn microbatch=4 compiled (reduce-overhead)", CONV, 1.3),
        ("brn compiled", FC, 1.25),
        ("brn", FC, 1.25),
        ("torch", CONV, ""),
        ("bn reference", CONV, ""),
    ],
)
def test_a_compiled_layer_is_held_to_its_eager_layers_target(layer, shape, expected):
    assert bench_layers.target(layer, shape) == expected


@pytest.mark.slow
def test_the_cpu_bench_times_the_eager_layers_alone():
    """Compiled rows are CUDA's: the CPU's fast Batch Renorm is the compiled C++ kernel."""
    rows = bench_layers.bench_shape((4, 3, 2, 2), "cpu", rounds=1)
    assert [r["layer"] for r in rows] == list(bench_layers.layers(3, 4))
    assert rows[0]["time_ratio"] == 1.0 and all(r["ms"] > 0 for r in rows)


@pytest.mark.slow
def test_a_cuda_graphed_layer_starts_each_step_anew():
    """A CUDA graph's replay overwrites its last outputs, the gradients among them, so each step
    drops the last one's: after two steps the weight's gradient is one step's, not their sum."""
    torch.manual_seed(0)
    x = torch.randn(8, 3, 4, 4, requires_grad=True)
    gy = torch.randn_like(x)
    graphed, fresh, summed = (bn.BatchRenorm2d(3, r_max=3.0, d_max=5.0) for _ in range(3))
    graphed = bench_layers.CUDAGraphed(graphed)
    for k in range(2):  # two steps each: r and d depend on the moving averages the first moved
        bench_layers.step(graphed, x, gy)
        bench_layers.step(summed, x, gy)  # an eager row's steps: gradients accumulate
        if k:
            fresh.zero_grad(set_to_none=True)
        bench_layers.step(fresh, x, gy)
    inner = graphed.layer
    torch.testing.assert_close(inner.weight.grad, fresh.weight.grad)
    torch.testing.assert_close(inner.bias.grad, fresh.bias.grad)
    assert not torch.allclose(summed.weight.grad, fresh.weight.grad)


def test_an_unknown_cuda_setting_is_refused_in_one_line(tmp_path, monkeypatch):
    argv = ["bench_inception", "--settings", "fp32 contiguous eager,typo", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match=r"unknown setting\(s\) \['typo'\]"):
        bench_inception.main()
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_the_profile_names_each_layers_operators(monkeypatch):
    monkeypatch.setitem(bench_layers.PROFILE_SHAPE, "cpu", (4, 3, 2, 2))
    text = bench_layers.profile_layers("cpu", profiled=2)
    tables = text.split("== ")[1:]
    assert [t.split(",")[0] for t in tables] == list(bench_layers.PROFILED)
    assert all("profiled CPU events" in t and "aten::" in t for t in tables)


def test_a_memory_not_measured_prints_as_a_dash():
    """A CUDA-graphed row's memory is not measured (its graphs' pool is invisible to the peak)."""
    assert bench_layers._num("", 6) == "     –" and bench_layers._num(1.234, 6) == "  1.23"
