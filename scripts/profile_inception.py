"""Where BN-Inception's CPU training spends its time, by kind of operation: the study's network
alone, its seeds side by side (the stacked route) and the plain-PyTorch peer, in one run.

    python -m scripts.profile_inception [--steps 20] [--rounds 3] [--out results/bench]

The routes are those of ``python -m scripts.bench_studies``'s ``inception`` case, their settings
read from it (BN-Baseline at the study's CPU scale: width 1/8, 32x32 RGB, batch 32,
channels-last, one thread, Figure 3's evaluations; the stacked route's seeds with their 1x1
reductions fused), on random images of that shape. What is timed is each step's computation:
the study's photometric distortion, forward, loss, backward and SGD update
(``experiments.inception``'s network and optimizer; the stack's loss copy by copy) or the peer's
(``scripts/peers/_train.py``'s ``train_step``), and the evaluations' share of each step (each route's own
evaluation: the study's scores every copy in passes of the stack). Not timed: what the bench's
whole loops also hold (batches gathered, the schedule, per-step metrics, checkpoints, garbage
collection).

In each of alternated rounds every route's steps and one evaluation are timed unprofiled
(``ms_per_run_step``, wall; ``cpu_ms_per_run_step`` beside it: a wall time 5% over it says a
core was shared, and the script warns), then run again under torch's profiler, whose ATen
operations' own CPU time is charged to a kind (``profiled_ms_per_run_step``): the convolutions
(forward and backward), batch norm (forward and backward), the rest (element-wise maths,
pooling, concatenation, copies, the update). ``outside ATen operations`` is the unprofiled time
less the profiled kinds: Python and the autograd engine, less the profiler's own cost, which
swells every profiled operation a little (so it can be negative). Medians of the rounds, each
time per run-step (one step of one network); a round times one evaluation, so the evaluations'
share is the noisier.

What it shows: stacking shares between the copies what a step spends in calls (dispatch,
Python); it leaves each copy's arithmetic and memory traffic. ``ceiling_peer_over_stacked`` is
the peer's time over the stacked route's profiled convolutions (its grouped convolutions'): about
the most the stacked route could reach against the peer were every other operation free.
``ceiling_peer_over_own_convolutions`` is the same over one network's own convolutions (the
study's): the most a stacking whose convolutions ran at a lone network's rate could reach.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from torch.profiler import profile

from experiments import inception
from experiments.kit.config import CONFIGS, seed_list
from experiments.kit.data import in_memory_classes
from experiments.kit.evaluation import copy_accuracies
from experiments.nets.stacked import copy_losses, copy_views, stack_copies
from scripts import bench_studies
from scripts.bench_layers import write_report
from scripts.peers import _train as peer_train
from scripts.peers import inception as peer

KINDS = {"convolution": ("conv",), "batch norm": ("batch_norm",)}  # an ATen name's part -> kind
REST, OUTSIDE = "rest", "outside ATen operations"
PHASES = ("train", "eval")
BUSY = 1.05  # a wall time this much over the CPU time: a core was shared
ROUTE_OVERRIDES = ("setup=", "model.", "eval.", "seed=")  # what the bench's routes set of the study


def kind(op: str) -> str:
    """The kind an ATen operation's own time is charged to (:data:`KINDS`, else the rest)."""
    return next((k for k, parts in KINDS.items() if any(p in op for p in parts)), REST)


def bench_case() -> bench_studies.Case:
    return next(c for c in bench_studies.cases() if c.key == "inception")


def study_config(overrides: list[str]) -> DictConfig:
    """The inception study's config for ``overrides``, as its command line would compose it."""
    with initialize_config_dir(config_dir=str(CONFIGS / "inception"), version_base="1.3"):
        return compose("inception", overrides=overrides)


def route_overrides(stacked: bool) -> list[str]:
    """The bench's study (or stacked) route's settings of the study: its setup, model and
    evaluation (and seeds), not its process's (threads, logger, data)."""
    case = bench_case()
    args = [*case.study[1:], *(case.stacked[0] if stacked else ())]
    return [a for a in args if a.startswith(ROUTE_OVERRIDES)]


def eval_images_per_step(cfg: DictConfig) -> float:
    """Images each network scores per training step at ``cfg.eval``'s cadence."""
    return (cfg.eval.test_subset + cfg.eval.train_subset) / cfg.eval.every


@dataclass
class Route:
    """One route's training step (of ``copies`` networks) and an evaluation of ``images`` images
    a network, of which each step's share is ``per_step`` images."""

    name: str
    copies: int
    step: Callable[[], None]
    evaluate: Callable[[], None]
    images: int
    per_step: float

    def timed(self, steps: int) -> dict[str, float]:
        """Unprofiled ms per run-step, wall and CPU: ``train`` (the mean of ``steps`` steps) and
        ``eval`` (one evaluation's share), and the same as ``cpu_train``, ``cpu_eval``."""
        out = {}
        for phase, run, scale in (("train", self.step, 1 / steps), ("eval", self.evaluate, self.per_step / self.images)):  # fmt: skip
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps if phase == "train" else 1):
                run()
            out[phase] = (time.perf_counter() - wall) * scale * 1e3 / self.copies
            out[f"cpu_{phase}"] = (time.process_time() - cpu) * scale * 1e3 / self.copies
        return out

    def profiled(self, steps: int) -> dict[tuple[str, str], float]:
        """``{(phase, kind): ms per run-step}`` of the profiled ATen operations' own CPU time."""
        out: dict[tuple[str, str], float] = {}
        for phase, run, scale in (("train", self.step, 1 / steps), ("eval", self.evaluate, self.per_step / self.images)):  # fmt: skip
            with profile() as p:
                for _ in range(steps if phase == "train" else 1):
                    run()
            for e in p.key_averages():
                if e.key.startswith("aten::"):
                    key = (phase, kind(e.key))
                    out[key] = out.get(key, 0.0) + e.self_cpu_time_total / 1e3 * scale / self.copies  # fmt: skip
        return out


def study_route(name: str, stacked: bool, images: int) -> Route:
    """The study's network (``stacked``: its seeds side by side), as the bench's route builds it."""
    cfg = study_config(route_overrides(stacked))
    seeds = seed_list(cfg.seed) if stacked else [cfg.seed]
    hp = inception.recipe(cfg, 1)
    fmt = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
    channels, size, classes = cfg.data.channels, cfg.data.image_size, in_memory_classes(cfg.data.name)  # fmt: skip
    models = []
    for s in seeds:
        torch.manual_seed(s)
        models.append(inception.build_model(cfg, channels, classes))
    k = len(models)
    net = (stack_copies(models) if k > 1 else models[0]).to(memory_format=fmt)
    views = copy_views(net, models) if k > 1 else [net]
    opt = inception.build_optimizer(net, hp["lr"], cfg.train.momentum, hp["weight_decay"])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(cfg.train.batch_size, k * channels, size, size)
    y = torch.randint(0, classes, (cfg.train.batch_size, k))
    test, labels = torch.randn(images, channels, size, size), torch.randint(0, classes, (images,))

    def step() -> None:
        xs = torch.cat([inception.photometric(xk, hp["photometric"], g) for xk in x.chunk(k, 1)], 1)  # fmt: skip
        logits = net(xs.contiguous(memory_format=fmt))
        loss = copy_losses(logits, y) if k > 1 else F.cross_entropy(logits, y[:, 0])
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()

    def evaluate() -> None:
        batches = zip(test.split(cfg.eval.batch_size), labels.split(cfg.eval.batch_size))
        copy_accuracies(views, batches, torch.device("cpu"), fmt, stack=net if k > 1 else None)

    return Route(name, k, step, evaluate, images, eval_images_per_step(cfg))


def peer_route(images: int) -> Route:
    """``scripts/peers/inception.py``'s network, optimizer, step and evaluation at its recipe,
    on the study's input and at the study's evaluation cadence."""
    cfg = study_config(route_overrides(False))
    args = SimpleNamespace(**peer.DEFAULTS)
    size, classes = cfg.data.image_size, in_memory_classes(cfg.data.name)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    torch.manual_seed(0)
    net = peer.network().to(memory_format=fmt)
    opt = peer_train.sgd(net, args)
    x = torch.randn(args.batch_size, cfg.data.channels, size, size).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (args.batch_size,))
    test = torch.randn(images, cfg.data.channels, size, size)
    labels = torch.randint(0, classes, (images,))
    return Route(
        "peer", 1, lambda: peer_train.train_step(net, opt, x, y, F.cross_entropy),
        lambda: peer_train.evaluate(net, test, labels, fmt), images, eval_images_per_step(cfg),
    )  # fmt: skip


def summarize(routes: list[Route], times: dict, kinds: dict) -> tuple[list[dict], dict, dict]:
    """The CSV's rows, a row per route, phase and kind (medians of the rounds' ``times`` and
    ``kinds``, each a list per route name), and each route's ms per run-step and its
    convolutions' profiled ms (``{name: ms}``, training and evaluation together)."""
    rows, ms, conv = [], {}, {}
    for r in routes:
        for phase in PHASES:
            wall = statistics.median(t[phase] for t in times[r.name])
            cpu = statistics.median(t[f"cpu_{phase}"] for t in times[r.name])
            parts = {k: statistics.median(p.get((phase, k), 0.0) for p in kinds[r.name]) for k in (*KINDS, REST)}  # fmt: skip
            parts[OUTSIDE] = wall - sum(parts.values())
            ms[r.name] = ms.get(r.name, 0.0) + wall
            conv[r.name] = conv.get(r.name, 0.0) + parts["convolution"]
            for k, t in parts.items():
                rows.append({
                    "route": r.name, "seeds_side_by_side": r.copies, "phase": phase, "kind": k,
                    "profiled_ms_per_run_step": round(t, 3), "ms_per_run_step": round(wall, 3),
                    "cpu_ms_per_run_step": round(cpu, 3),
                })  # fmt: skip
    return rows, ms, conv


def ceilings(ms: dict[str, float], conv: dict[str, float]) -> dict[str, float]:
    """The peer's time over the stacked route's convolutions and over one network's own (the
    study's): what each could reach against the peer were every other operation free."""
    return {
        "ceiling_peer_over_stacked": ms["peer"] / conv["stacked"],
        "ceiling_peer_over_own_convolutions": ms["peer"] / conv["study"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="training steps a round and a profile")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--test-images", type=int, default=1000, help="images an evaluation scores")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = args.test_images
    routes = [study_route("study", False, n), study_route("stacked", True, n), peer_route(n)]
    for r in routes:  # warm-up: the allocator, the kernels' first calls
        for _ in range(3):
            r.step()
        r.evaluate()
    times: dict[str, list[dict[str, float]]] = {r.name: [] for r in routes}
    kinds: dict[str, list[dict[tuple[str, str], float]]] = {r.name: [] for r in routes}
    for i in range(args.rounds):  # each round times every route, then profiles it
        for r in routes:
            times[r.name].append(r.timed(args.steps))
            kinds[r.name].append(r.profiled(args.steps))
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    rows, ms, conv = summarize(routes, times, kinds)
    ceiling = ceilings(ms, conv)
    for row in rows:
        row |= {k: round(v, 3) for k, v in ceiling.items()} | {
            "steps": args.steps, "rounds": args.rounds, "test_images": n,
            "cpu": bench_studies.cpu_name(), "torch": torch.__version__,
        }  # fmt: skip
    print(f"torch {torch.__version__}, one thread, {bench_studies.cpu_name()}; ms per run-step")
    for r in routes:
        print(f"{r.name:8} {ms[r.name]:7.1f}, of which convolutions {conv[r.name]:6.1f} ({conv[r.name] / ms[r.name]:.0%})")  # fmt: skip
    print(
        "were every operation but the convolutions free, against the peer: at most "
        f"{ceiling['ceiling_peer_over_stacked']:.2f}x (this stacked route), "
        f"{ceiling['ceiling_peer_over_own_convolutions']:.2f}x (convolutions at one network's rate)"
    )
    busy = {x["route"] for x in rows if x["ms_per_run_step"] > BUSY * x["cpu_ms_per_run_step"]}
    if busy:
        print(f"warning: {', '.join(sorted(busy))} took over {BUSY:.2f}x their CPU time in wall time: was the machine running something else?", file=sys.stderr)  # fmt: skip
    write_report(args.out / "inception_profile_cpu.csv", rows, None)


if __name__ == "__main__":
    main()
