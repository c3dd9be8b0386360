"""Training throughput of BN-Inception against torchvision's GoogLeNet (with BN), in one run.

    python -m scripts.bench_inception [--rounds 5] [--out results/bench]

A training step is forward, backward and an SGD-with-momentum update on random data. On CPU,
at the study's CPU input (32x32 RGB, batch 32, ``channels_last``):

* ``googlenet``: torchvision's GoogLeNet (BN after every conv, no auxiliary heads): the baseline.
* ``bn_inception matched``: BN-Inception with our BN at the width whose parameter count matches
  GoogLeNet's (BN-Inception at width 1 has 1.8x GoogLeNet's weights, so images/s at equal width
  would compare different amounts of work), and GoogLeNet's stem stride (8). Target: >= 0.9x.
* ``bn_inception matched, torch BN``: the same network with ``torch.nn.BatchNorm2d``.
* ``bn_inception cpu config``: the network ``scale=cpu`` trains (width 1/8, stem 2).

With a GPU: both full-size networks at 224 px, batch 128, with and without bfloat16 autocast and
``channels_last``. Times are the best of interleaved rounds; ratios are against GoogLeNet in the
same run and setting.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from experiments.nets.bn_inception import BNInception, count_parameters
from scripts.bench_layers import write_report

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
    """Best-of-``rounds`` training throughput of every model, timed in interleaved rounds."""
    cuda = x.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    autocast = (lambda: torch.autocast("cuda", torch.bfloat16)) if amp else contextlib.nullcontext
    opts = {n: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9) for n, m in models.items()}

    def step(name: str) -> None:
        with autocast():
            loss = F.cross_entropy(models[name](x).float(), y)
        opts[name].zero_grad(set_to_none=True)
        loss.backward()
        opts[name].step()

    iters = 20 if cuda else 5
    for name in models:
        for _ in range(3):
            step(name)
    best = dict.fromkeys(models, float("inf"))
    for _ in range(rounds):
        for name in models:
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                step(name)
            sync()
            best[name] = min(best[name], (time.perf_counter() - t0) / iters)
    return {n: len(x) / t for n, t in best.items()}


def cpu_rows(rounds: int) -> list[dict]:
    fmt = torch.channels_last
    ref = googlenet(10)
    width = matched_width(count_parameters(ref), 10)
    models = {
        "googlenet": ref,
        "bn_inception matched": BNInception(10, width=width),
        "bn_inception matched, torch BN": BNInception(10, norm="torch_batchnorm", width=width),
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


def cuda_rows(rounds: int) -> list[dict]:
    rows = []
    for amp, cl in ((False, False), (True, False), (False, True), (True, True)):
        fmt = torch.channels_last if cl else torch.contiguous_format
        models = {"googlenet": googlenet(1000), "bn_inception": BNInception(1000)}
        models = {n: m.cuda().to(memory_format=fmt) for n, m in models.items()}
        x = torch.randn(128, 3, 224, 224, device="cuda").to(memory_format=fmt)
        y = torch.randint(0, 1000, (128,), device="cuda")
        ips = images_per_s(models, x, y, rounds, amp=amp)
        setting = f"224px batch128 {'channels_last' if cl else 'contiguous'} {'bf16 autocast' if amp else 'fp32'}"
        for name, m in models.items():
            rows.append(
                {
                    "device": "cuda",
                    "setting": setting,
                    "model": name,
                    "width": 1.0 if name == "bn_inception" else "",
                    "parameters": count_parameters(m),
                    "images_per_s": round(ips[name], 1),
                    "ratio_vs_googlenet": round(ips[name] / ips["googlenet"], 3),
                    "target": "",
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args()
    rows = cpu_rows(args.rounds) + (cuda_rows(args.rounds) if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(
        "training images/s (forward, backward, SGD step); ratio against GoogLeNet in the same run"
    )
    print(
        f"{'device':6} {'setting':44} {'model':32} {'params':>10} {'img/s':>8} {'x googlenet':>11}  target"
    )
    failed = []
    for r in rows:
        verdict = ""
        if r["target"]:
            ok = r["ratio_vs_googlenet"] >= r["target"]
            verdict = f">= {r['target']}x {'ok' if ok else 'MISSED'}"
            if not ok:
                failed.append(f"{r['model']}: {r['ratio_vs_googlenet']}x")
        print(
            f"{r['device']:6} {r['setting']:44} {r['model']:32} {r['parameters']:>10,} "
            f"{r['images_per_s']:8.1f} {r['ratio_vs_googlenet']:11.2f}  {verdict}"
        )
    print(
        "matched: BN-Inception's width chosen so its parameter count equals GoogLeNet's; both use "
        "an ImageNet stem (total stride 8), so they see the same input at the same resolution"
    )
    name = "inception_cuda.csv" if torch.cuda.is_available() else "inception_cpu.csv"
    write_report(args.out / name, rows, failed)


if __name__ == "__main__":
    main()
