"""Benchmark bn's layers against torch.nn.BatchNorm (forward + backward), in one run.

    python -m scripts.bench_layers [--rounds 30] [--out results/bench]

Times are the best of interleaved rounds (every layer is timed in each round, so drift on a
busy machine hits all of them alike); ratios are against torch.nn.BatchNorm1d/2d measured in the
same run. Memory: on CPU, the bytes of tensors autograd saves for the backward pass (the
activation memory a layer adds to training, deduplicated by storage); on CUDA, the peak
allocated memory of a forward+backward.
"""

from __future__ import annotations

import argparse
import csv
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import bn
from bn import compiled

SHAPES = [(32, 64, 56, 56), (32, 256, 28, 28), (60, 100)]
# Time against torch.nn.BatchNorm: on the conv shapes BRN as fast as BN, microbatches
# within 1.3x; on the fully connected (60, 100) no slower than before (1.25x and 1.52x then).
TARGETS = {
    "conv": {"bn fast": 1.05, "brn": 1.05, "brn microbatch=4": 1.3},
    "fc": {"bn fast": 1.05, "brn": 1.25, "brn microbatch=4": 1.52},
}


def layers(c: int, dims: int) -> dict[str, Callable[[], nn.Module]]:
    torch_cls, bn_cls, brn_cls = (
        (nn.BatchNorm2d, bn.BatchNorm2d, bn.BatchRenorm2d)
        if dims == 4
        else (nn.BatchNorm1d, bn.BatchNorm1d, bn.BatchRenorm1d)
    )
    return {
        "torch": lambda: torch_cls(c),
        "bn fast": lambda: bn_cls(c),
        "bn reference": lambda: bn_cls(c, impl="reference"),
        "brn": lambda: brn_cls(c, r_max=3.0, d_max=5.0),
        "brn microbatch=4": lambda: brn_cls(c, r_max=3.0, d_max=5.0, microbatch=4),
    }


def step(layer: nn.Module, x: torch.Tensor, gy: torch.Tensor) -> None:
    x.grad = None
    layer(x).backward(gy)


def saved_bytes(layer: nn.Module, x: torch.Tensor) -> int:
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    storages.pop(x.untyped_storage().data_ptr(), None)  # the input exists anyway
    return sum(storages.values()) + y.untyped_storage().nbytes()


def cuda_peak(layer: nn.Module, x: torch.Tensor, gy: torch.Tensor) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step(layer, x, gy)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def bench_shape(shape, device: str, rounds: int) -> list[dict]:
    x = torch.randn(shape, device=device).requires_grad_(True)
    gy = torch.randn(shape, device=device)
    made = {name: make().to(device) for name, make in layers(shape[1], len(shape)).items()}
    iters = 5 if x.numel() > 1e6 else 300
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in made}
    for layer in made.values():
        for _ in range(3):
            step(layer, x, gy)
    for _ in range(rounds):
        for name, layer in made.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                step(layer, x, gy)
            sync()
            times[name].append((time.perf_counter() - t0) / iters)
    mem = {
        name: cuda_peak(layer, x, gy) if device == "cuda" else saved_bytes(layer, x)
        for name, layer in made.items()
    }
    t_ref, m_ref = min(times["torch"]), mem["torch"]
    rows = []
    for name in made:
        t = min(times[name])
        rows.append(
            {
                "device": device,
                "shape": "x".join(map(str, shape)),
                "layer": name,
                "ms": round(t * 1e3, 4),
                "time_ratio": round(t / t_ref, 3),
                "mem_MiB": round(mem[name] / 2**20, 3),
                "mem_ratio": round(mem[name] / m_ref, 3),
                "target": TARGETS["conv" if len(shape) > 2 else "fc"].get(name, ""),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = [r for d in devices for s in SHAPES for r in bench_shape(s, d, args.rounds)]

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {platform.processor() or platform.machine()}"
    )
    print(compiled.status())
    print("forward+backward; ratios against torch.nn.BatchNorm in the same run")
    header = f"{'device':6} {'shape':>14} {'layer':18} {'ms':>9} {'time x':>7} {'mem MiB':>8} {'mem x':>6}  target"
    print(header)
    failed = []
    for r in rows:
        verdict = ""
        if r["target"]:
            ok = r["time_ratio"] <= r["target"]
            verdict = f"<= {r['target']}x {'ok' if ok else 'MISSED'}"
            if not ok:
                failed.append(f"{r['device']} {r['shape']} {r['layer']}: {r['time_ratio']}x")
        print(
            f"{r['device']:6} {r['shape']:>14} {r['layer']:18} {r['ms']:9.3f} {r['time_ratio']:7.2f} "
            f"{r['mem_MiB']:8.2f} {r['mem_ratio']:6.2f}  {verdict}"
        )
    write_report(
        args.out / ("layers_cuda.csv" if "cuda" in devices else "layers_cpu.csv"), rows, failed
    )


def write_report(path: Path, rows: list[dict], failed: list[str] | None) -> None:
    """Write a benchmark's ``rows`` to the CSV ``path`` and say whether every target was met
    (``failed`` lists the misses; ``None``: the benchmark has no targets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")
    if failed is not None:
        print("targets met" if not failed else "targets MISSED: " + "; ".join(failed))


if __name__ == "__main__":
    main()
