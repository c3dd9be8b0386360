"""Where BN-Inception's CPU training spends its time, by kind of operation: the study's network
alone, five seeds side by side (the stacked route) and the plain-PyTorch peer, in one run.

    python -m scripts.profile_inception [--steps 20] [--rounds 3] [--out results/bench]

The three routes of ``python -m scripts.bench_studies --only inception`` (BN-Baseline at the
study's CPU scale: width 1/8, 32x32 RGB, batch 32, channels-last, one thread, Figure 3's
evaluations of 5,000 test images every 100 steps), on random images of that shape: the study's
network (``experiments.inception.build_model``, its optimizer and photometric distortion), five
of them stacked with their 1x1 reductions fused (as the bench's stacked route trains them) and
scored by the study's own evaluation, and ``scripts/peers/inception.py``'s network and loop.
Each route's training step and its evaluations (50 test images a step) are timed unprofiled
(``ms_per_run_step``), then run again under torch's profiler, in every one of alternated rounds;
the profiled ATen operations' own CPU time is charged to one kind: the convolutions (forward and
backward), batch norm (forward and backward), the rest (element-wise maths, pooling,
concatenation, copies, the update); what the unprofiled time holds beyond them is the time
outside ATen's operations (Python, the autograd engine; negative where the profiler's own cost
outweighs it). Medians of the rounds; every time is per run-step, one step of one network.

What it shows: stacking shares between the copies what a step spends in calls (dispatch,
Python); it leaves each copy's arithmetic and memory traffic, and a grouped convolution
computes each copy's at no better rate than a network's own. So the peer's time over the stacked
route's convolutions alone (``bound_peer_over_stacked``) bounds what stacking can reach against
the peer even if every other operation cost nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from torch.profiler import profile

from experiments import inception
from experiments.kit.config import CONFIGS
from experiments.kit.evaluation import copy_accuracies
from experiments.nets.stacked import copy_losses, copy_views, stack_copies
from experiments.studies import FIG3_SCHEDULE
from scripts.bench_layers import write_report
from scripts.bench_studies import cpu_name
from scripts.peers import _train as peer_train
from scripts.peers import inception as peer

COPIES = 5
IMAGE = (3, 32, 32)
KINDS = {"convolution": ("convolution",), "batch norm": ("batch_norm",)}
OUTSIDE = "outside ATen operations"  # the unprofiled time less the profiled operations' own
FIG3 = dict(a.split("=", 1) for a in FIG3_SCHEDULE)
EVAL_IMAGES_PER_STEP = int(FIG3["eval.test_subset"]) // int(FIG3["eval.every"])


def study_config(overrides: list[str]):
    """The inception study's config for ``overrides``, as its command line would compose it."""
    with initialize_config_dir(config_dir=str(CONFIGS / "inception"), version_base="1.3"):
        return compose("inception", overrides=["setup=bn_baseline", *overrides])


def kind(op: str) -> str:
    return next((k for k, names in KINDS.items() if any(n in op for n in names)), "rest")


class Route:
    """One route's training step and its evaluation of ``images`` test images a network."""

    def __init__(self, name: str, copies: int, step: Callable[[], None], evaluate: Callable[[], None], images: int):  # fmt: skip
        self.name, self.copies, self.step, self.evaluate, self.images = name, copies, step, evaluate, images  # fmt: skip

    def per_run_step(self, steps: int) -> dict[str, float]:
        """Unprofiled ms per run-step: ``train`` (``steps`` steps' mean) and ``eval`` (the
        evaluations' share, from one)."""
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        train = (time.perf_counter() - t0) / steps
        t0 = time.perf_counter()
        self.evaluate()
        evaluation = (time.perf_counter() - t0) * EVAL_IMAGES_PER_STEP / self.images
        return {"train": train * 1e3 / self.copies, "eval": evaluation * 1e3 / self.copies}

    def profiled(self, steps: int) -> dict[tuple[str, str], float]:
        """``{(phase, kind): ms per run-step}`` of the profiled ATen operations' own CPU time."""
        out: dict[tuple[str, str], float] = {}
        for phase, run, scale in (
            ("train", self.step, 1 / steps),
            ("eval", self.evaluate, EVAL_IMAGES_PER_STEP / self.images),
        ):
            with profile() as p:
                for _ in range(steps if phase == "train" else 1):
                    run()
            for e in p.key_averages():
                if e.key.startswith("aten::"):
                    key = (phase, kind(e.key))
                    out[key] = out.get(key, 0.0) + e.self_cpu_time_total / 1e3 * scale / self.copies  # fmt: skip
        return out


def study_route(name: str, copies: int, images: int) -> Route:
    overrides = [f"model.fuse_reductions={str(copies > 1).lower()}"]
    cfg = study_config(overrides)
    hp = inception.recipe(cfg, 1)
    fmt = torch.channels_last
    models = []
    for s in range(copies):
        torch.manual_seed(s)
        models.append(inception.build_model(cfg, IMAGE[0], 10))
    net = (stack_copies(models) if copies > 1 else models[0]).to(memory_format=fmt)
    views = copy_views(net, models) if copies > 1 else [net]
    opt = inception.build_optimizer(net, hp["lr"], cfg.train.momentum, hp["weight_decay"])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(cfg.train.batch_size, copies * IMAGE[0], *IMAGE[1:])
    y = torch.randint(0, 10, (cfg.train.batch_size, copies))
    test = torch.randn(images, *IMAGE)
    labels = torch.randint(0, 10, (len(test),))
    batch = cfg.eval.batch_size

    def step() -> None:
        xs = torch.cat([inception.photometric(xk, hp["photometric"], g) for xk in x.chunk(copies, 1)], 1)  # fmt: skip
        logits = net(xs.contiguous(memory_format=fmt))
        loss = copy_losses(logits, y) if copies > 1 else F.cross_entropy(logits, y[:, 0])
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()

    def evaluate() -> None:
        batches = zip(test.split(batch), labels.split(batch))
        copy_accuracies(views, batches, torch.device("cpu"), fmt, stack=net if copies > 1 else None)  # fmt: skip

    return Route(name, copies, step, evaluate, len(test))


def peer_route(images: int) -> Route:
    torch.manual_seed(0)
    fmt = torch.channels_last
    net = peer.network().to(memory_format=fmt)
    d = peer.DEFAULTS
    opt = torch.optim.SGD(net.parameters(), lr=d["lr"], momentum=d["momentum"], weight_decay=d["weight_decay"])  # fmt: skip
    x, y = torch.randn(d["batch_size"], *IMAGE), torch.randint(0, 10, (d["batch_size"],))
    test, labels = torch.randn(images, *IMAGE), torch.randint(0, 10, (images,))

    def step() -> None:
        loss = F.cross_entropy(net(x.contiguous(memory_format=fmt)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return Route("peer", 1, step, lambda: peer_train.evaluate(net, test, labels, fmt), len(test))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="training steps a round and a profile")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--test-images", type=int, default=1000, help="images an evaluation scores")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = args.test_images
    routes = [study_route("study", 1, n), study_route("stacked", COPIES, n), peer_route(n)]
    for r in routes:  # warm-up: the allocator, the kernels' first calls
        for _ in range(3):
            r.step()
        r.evaluate()
    times: dict[str, list[dict[str, float]]] = {r.name: [] for r in routes}
    kinds: dict[str, list[dict[tuple[str, str], float]]] = {r.name: [] for r in routes}
    for i in range(args.rounds):  # each round times every route, then profiles it
        for r in routes:
            times[r.name].append(r.per_run_step(args.steps))
            kinds[r.name].append(r.profiled(args.steps))
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    rows, ms, conv = [], {}, {}
    for r in routes:
        for phase in ("train", "eval"):
            wall = statistics.median(t[phase] for t in times[r.name])
            profiled = {
                k: statistics.median(p.get((phase, k), 0.0) for p in kinds[r.name])
                for k in (*KINDS, "rest")
            }
            ms[r.name] = ms.get(r.name, 0.0) + wall
            conv[r.name] = conv.get(r.name, 0.0) + profiled["convolution"]
            profiled[OUTSIDE] = wall - sum(profiled.values())
            for k, t in profiled.items():
                rows.append({
                    "route": r.name, "seeds_side_by_side": r.copies, "phase": phase, "kind": k,
                    "profiled_ms_per_run_step": round(t, 3), "ms_per_run_step": round(wall, 3),
                })  # fmt: skip
    bound = ms["peer"] / conv["stacked"]
    for row in rows:
        row |= {
            "bound_peer_over_stacked": round(bound, 3), "steps": args.steps, "rounds": args.rounds,
            "cpu": cpu_name(), "torch": torch.__version__,
        }  # fmt: skip
    print(f"torch {torch.__version__}, one thread, {cpu_name()}; ms per run-step (train + eval)")
    for r in routes:
        share = conv[r.name] / ms[r.name]
        print(f"{r.name:8} {ms[r.name]:7.1f} ms, of which convolutions {conv[r.name]:6.1f} ({share:.0%})")  # fmt: skip
    print(f"peer / stacked: {ms['peer'] / ms['stacked']:.2f}; at most {bound:.2f} were every other operation free")  # fmt: skip
    write_report(args.out / "inception_profile_cpu.csv", rows, None)


if __name__ == "__main__":
    main()
