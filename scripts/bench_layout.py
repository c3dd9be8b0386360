"""Which memory layout each conv-net setup of the renorm study trains fastest in, on this machine.

    python -m scripts.bench_layout [--setups bn32,brn_micro4] [--seeds 1,5] [--rounds 2]

For every setup, one seed alone and five side by side (the way ``make reproduce-renorm`` runs
them), it times the study's own training step (the stacked network, its sampler, the loss and the
SGD update) in channels-last and in NCHW (torch's default), one thread, on the study's data, and
the evaluation the study runs every ``eval.every`` steps (the test set and ``eval.train_subset``
training images, each copy as a plain network) spread over those steps. CPU ms per run-step (one
step of one network), medians of alternated rounds; ``faster`` names the layout with the smaller
total. ``configs/renorm/setup/*.yaml`` state the result for the setups whose norm runs faster in NCHW
(``train.channels_last: false``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from experiments import renorm
from experiments.kit.classify import stack_batch
from experiments.kit.config import CONFIGS
from experiments.kit.data import fixed_batches, load_splits
from experiments.kit.evaluation import copy_accuracies
from experiments.nets.stacked import copy_losses
from scripts.bench_layers import write_report
from scripts.bench_studies import cpu_name

SETUPS = "bn32,brn32,bn_micro4,brn_micro4,brn_micro4_bngrad,noniid_bn_halves,groupnorm,layernorm,nonorm,bn32_after"  # fmt: skip
LAYOUTS = {"channels_last": torch.channels_last, "nchw": torch.contiguous_format}


def study_config(overrides: list[str]):
    """The renorm study's config for ``overrides``, as its command line would compose it."""
    with initialize_config_dir(config_dir=str(CONFIGS / "renorm"), version_base="1.3"):
        return compose("renorm", overrides=overrides)


def time_setup(
    setup: str, copies: int, layout: str, data: str, steps: int, root: str = "data"
) -> tuple[float, float]:
    """``(train, eval)`` CPU ms per run-step of ``setup`` with ``copies`` seeds in ``layout``,
    on ``data`` (read from ``root``)."""
    overrides = [
        f"setup={setup}",
        f"data={data}",
        f"data.root={root}",
        "data.download=false",
        "data.verify=false",
    ]
    cfg = study_config(overrides)
    train_split, test_split, channels, classes = load_splits(cfg.data)
    fmt = LAYOUTS[layout]
    with open_dict(cfg):
        cfg.seed = list(range(copies)) if copies > 1 else 0
    model, views = renorm.build_copies(cfg, channels, classes, torch.device("cpu"), fmt)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = renorm.build_optimizer(cfg.train, params)
    b = cfg.train.batch_size
    samplers = [renorm.make_sampler(cfg.sampler, train_split, b, s) for s in range(copies)]

    def step(i: int) -> None:
        idx = torch.cat([s.indices(i) for s in samplers])
        x, y = train_split.x[idx], train_split.labels[idx]
        if copies > 1:
            x, y = stack_batch(x, y, copies)
        logits = model(x.contiguous(memory_format=fmt))
        loss = copy_losses(logits, y) if copies > 1 else F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        optimizer.step()

    for i in range(10):  # warm-up: allocator, kernels' first calls
        step(i)
    t0 = time.process_time()
    for i in range(steps):
        step(10 + i)
    train = (time.process_time() - t0) / (steps * copies) * 1e3
    e = cfg.eval
    t0 = time.process_time()
    for split, limit in ((test_split, None), (train_split, e.train_subset)):
        batches = split.batches(fixed_batches(split, e.batch_size, limit))
        copy_accuracies(views, batches, torch.device("cpu"), fmt)
    evaluation = (time.process_time() - t0) / (e.every * copies) * 1e3
    return train, evaluation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setups", default=SETUPS)
    ap.add_argument("--seeds", default="1,5", help="seeds side by side to time, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60, help="training steps timed per case")
    ap.add_argument("--data", default="fashion_mnist")
    ap.add_argument("--root", default="data", help="where the data's files are")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    setups, ks = args.setups.split(","), [int(k) for k in args.seeds.split(",")]
    times: dict[tuple, list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for setup in setups:
            for k in ks:
                for layout in LAYOUTS:
                    key = (setup, k, layout)
                    times.setdefault(key, []).append(time_setup(setup, k, layout, args.data, args.steps, args.root))  # fmt: skip
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"torch {torch.__version__}, one thread, {cpu_name()}; {args.data}")
    print("CPU ms per run-step (medians of rounds): training step + evaluation share = total")
    rows = []
    for setup in setups:
        for k in ks:
            total = {}
            for layout in LAYOUTS:
                runs = times[(setup, k, layout)]
                train = statistics.median(t for t, _ in runs)
                evaluation = statistics.median(e for _, e in runs)
                total[layout] = train + evaluation
                rows.append({
                    "setup": setup, "seeds_side_by_side": k, "layout": layout,
                    "train_ms_per_run_step": round(train, 3), "eval_ms_per_run_step": round(evaluation, 3),
                    "total_ms_per_run_step": round(train + evaluation, 3),
                    "rounds": args.rounds, "steps_timed": args.steps, "data": args.data,
                    "cpu": cpu_name(), "torch": torch.__version__,
                })  # fmt: skip
            faster = min(total, key=total.get)
            for row in rows[-len(LAYOUTS) :]:
                row["faster"] = faster
            cells = "  ".join(f"{layout} {total[layout]:6.2f}" for layout in LAYOUTS)
            print(f"{setup:20} {k} seed(s): {cells}  -> {faster}")
    write_report(args.out / "conv_layout_cpu.csv", rows, None)


if __name__ == "__main__":
    main()
