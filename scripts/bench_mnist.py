"""Benchmark the MNIST study's training step: the binary-input first layer against the dense one.

    python -m scripts.bench_mnist [--rounds 15] [--out results/bench]

Times one training step of three networks side by side (as ``make reproduce-mnist`` runs them:
forward, loss, backward, SGD update, one thread), for the baseline and the BN network, with the
first layer as :class:`~experiments.nets.binary_linear.BinaryInputLinear` (compiled kernel) or as the
dense :class:`~experiments.nets.mlp.StackedLinear`; the whole step as the study takes it, one
compiled call (:class:`~experiments.nets.mlp_step.SGDStep`); and the first layer alone. Inputs are MNIST's
binarized training images when ``data/MNIST/raw`` holds them (``make reproduce-mnist`` puts them
there), else synthetic digits (13% of the pixels set, inside a 20x20 box, as in MNIST; the
compiled layer is somewhat slower on them, their strokes being less clustered). Times are medians
of interleaved rounds; ratios are against the dense layer in the same run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import bn
from experiments.kit.data import compact_inputs, ensure_dataset, load_split
from experiments.kit.errors import DataUnavailable
from experiments.nets import binary_linear
from experiments.nets.mlp import SigmoidMLP
from experiments.nets.mlp_step import SGDStep
from scripts.bench_layers import write_report

COPIES, BATCH, PIXELS = 3, 60, 784


def digits(n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` binarized 28x28 "digits": 0/1 bytes, ~13% set, all inside the central 20x20 box."""
    x = torch.zeros(n, 28, 28, dtype=torch.uint8)
    x[:, 4:24, 4:24] = (torch.rand(n, 20, 20, generator=generator) < 0.26).to(torch.uint8)
    return x.view(n, PIXELS)


def mnist_or_digits(root: Path) -> tuple[torch.Tensor, str]:
    """MNIST's binarized training images if ``root`` holds them (no download), else :func:`digits`."""
    try:
        images = load_split(ensure_dataset("mnist", root, download=False), "train").images
    except DataUnavailable:
        return digits(60_000, torch.Generator().manual_seed(0)), "synthetic digits"
    return compact_inputs(images, binarize=True), f"MNIST ({root})"


def _norm(name: str) -> Callable[[int], torch.nn.Module] | None:
    """The network's norm layer for ``name`` (``none``: no norm), at torch's defaults."""
    return None if name == "none" else bn.get_norm_layer(name, dims=1, momentum=0.1, eps=1e-5)


def training_step(norm: str, binary: bool, pixels: torch.Tensor) -> Callable[[], None]:
    """One SGD step of ``COPIES`` networks on random mini-batches, as the study's loop does it."""
    model = SigmoidMLP(_norm(norm), copies=COPIES, seeds=range(COPIES), binary_input=binary)
    params = list(model.parameters())
    labels = torch.randint(0, 10, (len(pixels),))
    g = torch.Generator().manual_seed(0)

    def step() -> None:
        idx = torch.randint(0, len(pixels), (COPIES * BATCH,), generator=g)
        x = torch.index_select(pixels, 0, idx)
        x = x if binary else x.float()
        logits = model(x.view(COPIES, BATCH, PIXELS))
        y = torch.index_select(labels, 0, idx).view(COPIES, BATCH)
        losses = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(1)
        grads = torch.autograd.grad(losses.sum(), params)
        with torch.no_grad():
            torch._foreach_add_(params, grads, alpha=-0.1)

    return step


def compiled_step(norm: str, pixels: torch.Tensor) -> Callable[[], None]:
    """The same step as the study takes it: :class:`~experiments.nets.mlp_step.SGDStep`, one
    compiled call (binary first layer)."""
    model = SigmoidMLP(_norm(norm), copies=COPIES, seeds=range(COPIES), binary_input=True)
    sgd = SGDStep(model, 0.1)
    labels = torch.randint(0, 10, (len(pixels),))
    g = torch.Generator().manual_seed(0)

    def step() -> None:
        idx = torch.randint(0, len(pixels), (COPIES * BATCH,), generator=g)
        x = torch.index_select(pixels, 0, idx).view(COPIES, BATCH, PIXELS)
        sgd(x, torch.index_select(labels, 0, idx).view(COPIES, BATCH))

    return step


def first_layer(binary: bool, backward: bool, pixels: torch.Tensor) -> Callable[[], None]:
    """The first layer alone: forward, or forward and weight gradient."""
    model = SigmoidMLP(_norm("batchnorm"), copies=COPIES, seeds=range(COPIES), binary_input=binary)
    layer = model.hidden[0]
    x = pixels[: COPIES * BATCH].view(COPIES, BATCH, PIXELS)
    x = x if binary else x.float().transpose(1, 2)  # StackedLinear reads feature-major
    gy = torch.randn(COPIES, 100, BATCH)

    def run() -> None:
        if backward:
            torch.autograd.grad(layer(x), layer.weight, gy)
        else:
            with torch.no_grad():
                layer(x)

    return run


def ms_per_call(fn: Callable[[], None], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument("--data", type=Path, default=Path("data"), help="where MNIST's files may be")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if binary_linear.binary_linear_op() is None:
        raise SystemExit("error: the binary-input layer is not built (no C++ compiler?)")
    pixels, source = mnist_or_digits(args.data)
    cases = {}
    for norm in ("none", "batchnorm"):
        for binary in (False, True):
            cases[("training step", norm, binary)] = (training_step(norm, binary, pixels), 100)
        cases[("compiled step", norm, True)] = (compiled_step(norm, pixels), 100)
    for backward in (False, True):
        what = "first layer fwd+bwd" if backward else "first layer forward"
        for binary in (False, True):
            cases[(what, "-", binary)] = (first_layer(binary, backward, pixels), 200)
    times: dict[tuple, list[float]] = {key: [] for key in cases}
    for _ in range(args.rounds):  # interleaved: drift on a busy machine hits every case alike
        for key, (fn, calls) in cases.items():
            fn()
            times[key].append(ms_per_call(fn, calls))

    print(f"torch {torch.__version__}, 1 thread, {platform.processor() or platform.machine()}")
    print(f"{COPIES} networks x {BATCH} images of {source}; medians of {args.rounds} rounds")
    print(f"{'what':22} {'network':10} {'first layer':12} {'ms':>8} {'x dense':>8}")
    rows = []
    for (what, norm, binary), values in times.items():
        ms = statistics.median(values)
        dense = statistics.median(
            times[("training step" if what == "compiled step" else what, norm, False)]
        )
        layer = "binary" if binary else "dense"
        network = {"none": "baseline", "batchnorm": "BN"}.get(norm, "-")
        print(f"{what:22} {network:10} {layer:12} {ms:8.3f} {ms / dense:8.2f}")
        row = {"what": what, "network": network, "first_layer": layer, "inputs": source}
        rows.append(row | {"ms": round(ms, 4), "ratio_to_dense": round(ms / dense, 3)})
    write_report(args.out / "mnist_cpu.csv", rows, failed=None)


if __name__ == "__main__":
    main()
