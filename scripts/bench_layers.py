"""Benchmark bn's layers against torch.nn.BatchNorm (forward + backward), in one run.

    python -m scripts.bench_layers [--device cpu|cuda] [--rounds 30] [--out results/bench]
        [--compile-mode default|reduce-overhead|max-autotune] [--profile]

Ratios are against torch.nn.BatchNorm1d/2d measured in the same run, every layer timed in each
of interleaved rounds (so drift on a busy machine hits all of them alike). On the CPU: the best
round, at a ResNet's and an MLP's shapes; memory is the bytes of tensors autograd saves for the
backward pass (the activation memory a layer adds to training, deduplicated by storage). On CUDA:
the median round timed with CUDA events after a warm-up, at BN-Inception's shapes (batch 32,
224 px), in float32 and with bfloat16 inputs under autocast (as a conv feeds BN in mixed
precision), and in float32 Batch Renorm under ``torch.compile`` too (its per-channel
arithmetic fused); memory is the peak allocated during a forward+backward.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import bn
from bn import compiled

SHAPES = [(32, 64, 56, 56), (32, 256, 28, 28), (60, 100)]
# BN-Inception at 224 px, batch 32: after the stem's first conv, an early and a late inception block
CUDA_SHAPES = [(32, 64, 112, 112), (32, 256, 28, 28), (32, 1024, 7, 7)]
# Time against torch.nn.BatchNorm: on the conv shapes BRN as fast as BN, microbatches
# within 1.3x; on the fully connected (60, 100) no slower than before (1.25x and 1.52x then).
TARGETS = {
    "conv": {"bn fast": 1.05, "brn": 1.05, "brn microbatch=4": 1.3},
    "fc": {"bn fast": 1.05, "brn": 1.25, "brn microbatch=4": 1.52},
}
# On CUDA, Batch Renorm's per-channel arithmetic (r, d, their clipping, the moving averages) is
# about 90 small kernel launches a step; torch.compile fuses them. Timed in float32 only, beside
# the eager layers, to the eager layers' targets (each shape compiles anew: about 20 s apiece).
COMPILED = ("brn", "brn microbatch=4")


def target(layer: str, shape: tuple[int, ...]) -> float | str:
    """The time target of a row, a multiple of torch's layer (``""``: none): a compiled layer's
    is its eager layer's."""
    return TARGETS["conv" if len(shape) > 2 else "fc"].get(layer.split(" compiled")[0], "")


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
    if isinstance(layer, CUDAGraphed):
        # A CUDA graph's replay overwrites its last outputs, the parameters' gradients among them:
        # each step starts anew (as an optimizer's zero_grad(set_to_none=True) would).
        torch.compiler.cudagraph_mark_step_begin()
        layer.zero_grad(set_to_none=True)
    layer(x).backward(gy)


def steps(layer: nn.Module, x: torch.Tensor, gy: torch.Tensor, n: int) -> None:
    """``n`` forward+backward steps of ``layer`` (:func:`step`)."""
    for _ in range(n):
        step(layer, x, gy)


# torch.compile's modes that capture CUDA graphs
GRAPHED_MODES = ("reduce-overhead", "max-autotune")


class CUDAGraphed(nn.Module):
    """A layer compiled in one of :data:`GRAPHED_MODES`: its steps replay CUDA graphs."""

    def __init__(self, layer: nn.Module, mode: str = "reduce-overhead") -> None:
        super().__init__()
        self.layer = torch.compile(layer, mode=mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


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


def cuda_peak(run: Callable[[], None]) -> int:
    """The bytes of CUDA memory ``run()`` allocates at its peak, above what was allocated before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def step_timer(device: str) -> Callable[[Callable[[], None]], float]:
    """Seconds one call of a function takes: CUDA events on the GPU, the wall clock on the CPU."""
    if device != "cuda":

        def wall(run: Callable[[], None]) -> float:
            t0 = time.perf_counter()
            run()
            return time.perf_counter() - t0

        return wall

    def events(run: Callable[[], None]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return events


def bench_shape(
    shape: tuple[int, ...],
    device: str,
    rounds: int,
    dtype: torch.dtype = torch.float32,
    mode: str = "default",
) -> list[dict]:
    """Every layer at one input ``shape``; ``dtype``: the input's (parameters stay float32; a
    half type runs under autocast); ``mode``: ``torch.compile``'s, for the compiled rows. The
    eager layers' memory is measured before any CUDA-graphed layer runs (a graph's private pool
    would count in theirs); a graphed layer's own is not measured (the allocator's peak cannot
    see that pool)."""
    x = torch.randn(shape, device=device).to(dtype).requires_grad_(True)
    gy = torch.randn(shape, device=device).to(dtype)
    makers = layers(shape[1], len(shape))
    made = {name: make().to(device) for name, make in makers.items()}
    cuda = device == "cuda"
    if cuda and dtype == torch.float32:
        made |= {
            f"{n} compiled" + ("" if mode == "default" else f" ({mode})"): (
                CUDAGraphed(makers[n]().to(device), mode)
                if mode in GRAPHED_MODES
                else torch.compile(makers[n]().to(device), mode=mode)
            )
            for n in COMPILED
        }
    iters = (20 if cuda else 5) if x.numel() > 1e6 else (100 if cuda else 300)
    half = dtype != torch.float32
    autocast = (lambda: torch.autocast(device, dtype)) if half else contextlib.nullcontext
    timer = step_timer(device)
    times: dict[str, list[float]] = {name: [] for name in made}

    def run(layer: nn.Module) -> Callable[[], None]:
        def timed() -> None:
            with autocast():
                steps(layer, x, gy, iters)

        return timed

    graphed = {n for n, layer in made.items() if isinstance(layer, CUDAGraphed)}
    eager = [n for n in made if n not in graphed]
    for name in eager:
        run(
            made[name]
        )()  # warm-up: allocator, cuDNN's choice of kernel, the compiled kernel's build
    with autocast():
        mem = {
            name: cuda_peak(lambda layer=made[name]: step(layer, x, gy))
            if cuda
            else saved_bytes(made[name], x)
            for name in eager
        }
    for name in graphed:
        run(made[name])()  # warm-up: the graphs' capture
    for _ in range(rounds):
        for name, layer in made.items():
            times[name].append(timer(run(layer)) / iters)
    pick = statistics.median if cuda else min
    t_ref, m_ref = pick(times["torch"]), mem["torch"]
    rows = []
    for name in made:
        t = pick(times[name])
        rows.append(
            {
                "device": device,
                "shape": "x".join(map(str, shape)),
                "dtype": str(dtype).removeprefix("torch."),
                "layer": name,
                "ms": round(t * 1e3, 4),
                "time_ratio": round(t / t_ref, 3),
                "mem_MiB": round(mem[name] / 2**20, 3) if name in mem else "",
                "mem_ratio": round(mem[name] / m_ref, 3) if name in mem else "",
                "target": target(name, shape),
            }
        )
    return rows


# --profile: where a Batch Renorm step's time goes, beside torch's layer, at one shape (on CUDA
# the compiled layer too: its kernels apart from the compiled call's host time)
PROFILED = ("torch", "brn")
PROFILE_SHAPE = {"cuda": CUDA_SHAPES[1], "cpu": SHAPES[1]}


def profile_layers(device: str, profiled: int = 10, row_limit: int = 15) -> str:
    """The operators (on CUDA: the kernels) of ``profiled`` forward+backward steps of each layer of
    :data:`PROFILED` at the device's :data:`PROFILE_SHAPE`, after a warm-up: one table per
    layer, by the device's own time, and the number of kernel launches (on the CPU: profiled
    events, nested operators counted too)."""
    from torch.profiler import ProfilerActivity, profile

    shape = PROFILE_SHAPE[device]
    x = torch.randn(shape, device=device, requires_grad=True)
    gy = torch.randn(shape, device=device)
    makers = layers(shape[1], len(shape))
    cuda = device == "cuda"
    if cuda:
        makers["brn compiled"] = lambda: torch.compile(makers["brn"]())
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    out = []
    for name in [*PROFILED, *(["brn compiled"] if cuda else [])]:
        layer = makers[name]().to(device)
        steps(layer, x, gy, 3)
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=activities) as prof:
            steps(layer, x, gy, profiled)
            if cuda:
                torch.cuda.synchronize()
        events = prof.key_averages()
        calls = sum(e.count for e in events if (e.device_type.name == "CUDA") == cuda)
        out.append(
            f"== {name}, {'x'.join(map(str, shape))}, {profiled} steps: {calls} "
            f"{'kernel launches' if cuda else 'profiled CPU events (operators, nested ones too)'}\n"
            + events.table(sort_by=key, row_limit=row_limit)
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument(
        "--compile-mode",
        default="default",
        choices=("default", "reduce-overhead", "max-autotune"),
        help="torch.compile's mode for the compiled rows (CUDA only; reduce-overhead: CUDA graphs)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="print where a step's time goes for torch's layer and Batch Renorm, then stop",
    )
    args = ap.parse_args()
    if args.profile:
        if args.device == "cuda" and not torch.cuda.is_available():
            raise SystemExit("bench_layers: --device cuda, but torch sees no CUDA GPU")
        print(profile_layers(args.device))
        return
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("bench_layers: --device cuda, but torch sees no CUDA GPU")
        runs = [(s, d) for s in CUDA_SHAPES for d in (torch.float32, torch.bfloat16)]
        where = f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
    else:
        runs = [(s, torch.float32) for s in SHAPES]
        where = (
            f"{torch.get_num_threads()} CPU threads, {platform.processor() or platform.machine()}"
        )
    rows = [
        r for s, d in runs for r in bench_shape(s, args.device, args.rounds, d, args.compile_mode)
    ]

    print(f"torch {torch.__version__}, {where}")
    print(compiled.status())
    print("forward+backward; ratios against torch.nn.BatchNorm in the same run")
    header = f"{'device':6} {'shape':>16} {'dtype':8} {'layer':44} {'ms':>9} {'time x':>7} {'mem MiB':>8} {'mem x':>6}  target"
    print(header)
    failed = []
    for r in rows:
        verdict = ""
        if r["target"]:
            ok = r["time_ratio"] <= r["target"]
            verdict = f"<= {r['target']}x {'ok' if ok else 'MISSED'}"
            if not ok:
                failed.append(
                    f"{r['device']} {r['shape']} {r['dtype']} {r['layer']}: {r['time_ratio']}x"
                )
        print(
            f"{r['device']:6} {r['shape']:>16} {r['dtype']:8} {r['layer']:44} {r['ms']:9.3f} "
            f"{r['time_ratio']:7.2f} {_num(r['mem_MiB'], 8)} {_num(r['mem_ratio'], 6)}  {verdict}"
        )
    write_report(args.out / f"layers_{args.device}.csv", rows, failed)


def _num(v: float | str, width: int) -> str:
    """A number to two decimals, or "–" where it was not measured."""
    return f"{v:{width}.2f}" if v != "" else f"{'–':>{width}}"


def write_report(
    path: Path, rows: list[dict], failed: list[str] | None, undecided: list[str] | None = None
) -> None:
    """Write a benchmark's ``rows`` to the CSV ``path`` and say whether every target was met
    (``failed`` lists the misses, ``undecided`` those the measurement's interval cannot decide;
    ``failed=None``: the benchmark has no targets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")
    if failed is not None:
        if failed:
            print("targets MISSED: " + "; ".join(failed))
        if undecided:
            print("targets UNDECIDED (the interval holds the target): " + "; ".join(undecided))
        if not failed and not undecided:
            print("targets met")


if __name__ == "__main__":
    main()
