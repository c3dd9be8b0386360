"""Training throughput of BN-Inception against torchvision's GoogLeNet (with BN), in one run.

    python -m scripts.bench_inception [--device cpu|cuda] [--rounds 5] [--out results/bench]
        [--settings SETTING,...]

A training step is forward, backward and an SGD-with-momentum update on random data. On CPU,
at the study's CPU input (32x32 RGB, batch 32, ``channels_last``):

* ``googlenet``: torchvision's GoogLeNet (BN after every conv, no auxiliary heads): the baseline.
* ``bn_inception matched``: BN-Inception with our BN at the width whose parameter count matches
  GoogLeNet's (BN-Inception at width 1 has 1.8x GoogLeNet's weights, so images/s at equal width
  would compare different amounts of work), and GoogLeNet's stem stride (8). Target: >= 0.9x.
* ``bn_inception matched, torch BN``: the same network with ``torch.nn.BatchNorm2d``.
* ``bn_inception cpu config``: the network ``scale=cpu`` trains (width 1/8, stem 2).

With ``--device cuda``: at the paper's 224 px and batch 32, GoogLeNet, the parameter-matched
BN-Inception and the full-width one (what ``scale=gpu`` trains), eager in float32 (contiguous and
``channels_last``) and in bfloat16 autocast, and ``torch.compile``d in bfloat16; images/s and the
peak memory a training step allocates. On the CPU, times are the best of interleaved rounds; on
CUDA, the median round, timed with CUDA events after a warm-up. Ratios are against GoogLeNet in
the same run and setting.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from experiments.nets.bn_inception import BNInception, count_parameters
from scripts.bench_layers import cuda_peak, step_timer, write_report

TARGET = 0.9


def googlenet(num_classes: int) -> nn.Module:
    from torchvision.models import googlenet as tv_googlenet

    return tv_googlenet(weights=None, aux_logits=False, init_weights=True, num_classes=num_classes)


def matched_width(target: int, num_classes: int) -> float:
    """The BN-Inception width whose parameter count is closest to ``target`` (bisection)."""
    lo, hi = 0.1, 1.0
    for _ in range(20):
        mid = (lo + hi) / 2
        if count_parameters(BNInception(num_classes, width=mid)) < target:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def images_per_s(models: dict[str, nn.Module], x, y, rounds: int, amp: bool) -> dict[str, float]:
    """Training throughput of every model, timed in interleaved rounds: the best round on the
    CPU, the median on CUDA (timed with CUDA events)."""
    cuda = x.device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", torch.bfloat16)) if amp else contextlib.nullcontext
    opts = {n: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9) for n, m in models.items()}
    timer = step_timer(x.device.type)

    def steps(name: str, iters: int) -> None:
        for _ in range(iters):
            with autocast():
                loss = F.cross_entropy(models[name](x).float(), y)
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()

    iters = 20 if cuda else 5
    for name in models:
        steps(name, 3)  # warm-up (and, for a compiled model, its compilation)
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name in models:
            times[name].append(timer(lambda name=name: steps(name, iters)) / iters)
    pick = statistics.median if cuda else min
    return {n: len(x) / pick(t) for n, t in times.items()}


def peak_MiB(model: nn.Module, x, y, amp: bool) -> float:
    """The peak CUDA memory a forward and backward pass allocates above what is allocated before."""

    def forward_backward() -> None:
        with torch.autocast("cuda", torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()

    peak = cuda_peak(forward_backward)
    model.zero_grad(set_to_none=True)
    return round(peak / 2**20, 1)


def cpu_rows(rounds: int) -> list[dict]:
    fmt = torch.channels_last
    ref = googlenet(10)
    width = matched_width(count_parameters(ref), 10)
    models = {
        "googlenet": ref,
        "bn_inception matched": BNInception(10, width=width),
        "bn_inception matched, torch BN": BNInception(10, norm_layer=nn.BatchNorm2d, width=width),
        "bn_inception cpu config": BNInception(10, width=0.125, stem_stride=2),
    }
    models = {n: m.to(memory_format=fmt) for n, m in models.items()}
    x = torch.randn(32, 3, 32, 32).to(memory_format=fmt)
    y = torch.randint(0, 10, (32,))
    ips = images_per_s(models, x, y, rounds, amp=False)
    return [
        {
            "device": "cpu",
            "setting": "32px batch32 channels_last fp32",
            "model": name,
            "width": {"googlenet": ""}.get(name, 0.125 if "cpu config" in name else width),
            "parameters": count_parameters(m),
            "images_per_s": round(ips[name], 1),
            "ratio_vs_googlenet": round(ips[name] / ips["googlenet"], 3),
            "target": TARGET if name == "bn_inception matched" else "",
        }
        for name, m in models.items()
    ]


CUDA_SETTINGS = {  # name: (channels_last, bfloat16 autocast, torch.compile)
    "fp32 contiguous eager": (False, False, False),
    "fp32 channels_last eager": (True, False, False),
    "bf16 channels_last eager": (True, True, False),
    "bf16 channels_last compiled": (True, True, True),
}


def cuda_rows(rounds: int, settings: list[str]) -> Iterator[list[dict]]:
    """The rows of each of ``settings`` (names in ``CUDA_SETTINGS``) in the order given (by
    default the eager ones first: compiling takes a while)."""
    batch, classes = 32, 1000
    ref = googlenet(classes)
    width = matched_width(count_parameters(ref), classes)
    for setting in settings:
        cl, amp, compiled_ = CUDA_SETTINGS[setting]
        rows = []
        torch.manual_seed(0)
        fmt = torch.channels_last if cl else torch.contiguous_format
        built = {
            "googlenet": googlenet(classes),
            "bn_inception matched": BNInception(classes, width=width),
        }
        if not compiled_:  # the network scale=gpu trains; compiling it too would double the wait
            built["bn_inception width 1"] = BNInception(classes, separable_stem=True)
        built = {n: m.cuda().to(memory_format=fmt) for n, m in built.items()}
        models = {n: torch.compile(m) if compiled_ else m for n, m in built.items()}
        x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=fmt)
        y = torch.randint(0, classes, (batch,), device="cuda")
        ips = images_per_s(models, x, y, rounds, amp=amp)
        for name, m in models.items():
            rows.append(
                {
                    "device": "cuda",
                    "setting": f"224px batch{batch} {setting}",
                    "model": name,
                    "width": {"googlenet": ""}.get(name, 1.0 if "width 1" in name else width),
                    "parameters": count_parameters(built[name]),
                    "images_per_s": round(ips[name], 1),
                    "ratio_vs_googlenet": round(ips[name] / ips["googlenet"], 3),
                    "peak_MiB": peak_MiB(m, x, y, amp),
                    "target": TARGET if name == "bn_inception matched" else "",
                }
            )
        print(f"{setting}: done", flush=True)
        yield rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument(
        "--settings",
        default=",".join(CUDA_SETTINGS),
        help=f"with --device cuda: a comma-separated subset of {','.join(CUDA_SETTINGS)}",
    )
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_inception: --device cuda, but torch sees no CUDA GPU")
    settings = args.settings.split(",")
    if unknown := [s for s in settings if s not in CUDA_SETTINGS]:
        raise SystemExit(
            f"bench_inception: unknown setting(s) {unknown}; choose from {list(CUDA_SETTINGS)}"
        )
    if args.device == "cuda":
        rows = []
        for more in cuda_rows(args.rounds, settings):
            rows += more  # each setting's rows saved as soon as they exist
            write_report(args.out / "inception_cuda.csv", rows, None)
    else:
        rows = cpu_rows(args.rounds)
    where = (
        f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
        if args.device == "cuda"
        else f"{torch.get_num_threads()} CPU threads"
    )
    print(f"torch {torch.__version__}, {where}")
    print(
        "training images/s (forward, backward, SGD step); ratio against GoogLeNet in the same run"
    )
    print(
        f"{'device':6} {'setting':44} {'model':32} {'params':>10} {'img/s':>8} {'x googlenet':>11} "
        f"{'peak MiB':>8}  target"
    )
    failed = []
    for r in rows:
        verdict = ""
        if r["target"]:
            ok = r["ratio_vs_googlenet"] >= r["target"]
            verdict = f">= {r['target']}x {'ok' if ok else 'MISSED'}"
            if not ok:
                failed.append(f"{r['model']} {r['setting']}: {r['ratio_vs_googlenet']}x")
        print(
            f"{r['device']:6} {r['setting']:44} {r['model']:32} {r['parameters']:>10,} "
            f"{r['images_per_s']:8.1f} {r['ratio_vs_googlenet']:11.2f} {r.get('peak_MiB', ''):>8}  {verdict}"
        )
    print(
        "matched: BN-Inception's width chosen so its parameter count equals GoogLeNet's; both use "
        "an ImageNet stem (total stride 8), so they see the same input at the same resolution"
    )
    write_report(args.out / f"inception_{args.device}.csv", rows, failed)


if __name__ == "__main__":
    main()
