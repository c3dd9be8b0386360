"""What each study's training costs against the script a user would write instead, in one run.

    python -m scripts.bench_studies [--rounds 3] [--out results/bench] [--only mlp,conv]
    python -m scripts.bench_studies --rejudge --out results/bench   # intervals from the rounds

For every network the studies train (the BN paper's Figure 1 MLP, the Batch Renorm conv net,
BN-Inception at CPU scale, the depth study's deep MLPs, every step's measures and the
learning-rate grid's cadence) it runs the study's own entry point and a
plain-PyTorch peer of the same network (:mod:`scripts.peers`: ``torch.nn`` layers,
``torch.optim.SGD``, one run per process) as subprocesses, one thread each, on MNIST, at two run
lengths with the same evaluation cadence. The difference of their CPU seconds (user + system),
divided by the extra run-steps, is the cost of one run-step with everything the run does per
step and per evaluation, and without start-up (imports, data, compilation, the last evaluation).
A run-step is one step of one network: the MNIST study trains three seeds side by side in one
process (three run-steps a step), as ``make reproduce-mnist`` does. BN-Inception's routes are
timed instead by their own training loops, in one run of the longer length each: the loop's wall
seconds, from after the initial evaluation to the last evaluation (the machine must run nothing
else: where the peer's loop takes 5% more wall than CPU time, the bench warns), which the study's
``summary.json`` records as steps per second and the peer prints; a
process's start-up then adds no noise to a ratio that its targets need to within a few percent
(two whole runs' difference varied by seconds from start-up alone). The loop holds what each
route does in it: the study's a garbage collection at its start, a checkpoint written and
synced to disk after every evaluation and each step's photometric distortion, which the peer
does not do (charged to the study); on both sides the first steps' one-off costs (oneDNN building
its kernels for each shape), which draw both ratios slightly toward 1. Cases alternate within each
round (drift on a busy machine hits all alike); the table gives medians over rounds, and the
ratio peer / study as the median of each round's ratio (a round's study and peer run back to
back; above 1: the study is cheaper). A target is judged on the rounds' geometric-mean ratio and
its 95% interval (exact t on the log ratios: a round where the machine stalled widens the
interval rather than hiding in a median): met when the interval's lower end reaches it, missed
when its upper end falls short, undecided otherwise (more rounds may decide it; three rarely do,
with the t quantile of two degrees of freedom at 4.3). Targets (:data:`TARGET`,
:data:`STACKED_TARGET`): the Figure 1 MLP at >= 4x; BN-Inception at >= 1x, and >= 1.5x with five
seeds side by side. For the conv net, BN-Inception and the depth study it also times the study
with five seeds side by side in one process (``seed=[0,1,2,3,4]``, the way
``make reproduce-renorm`` runs the conv net), per run-step, BN-Inception's with each module's 1x1
reductions fused (``model.fuse_reductions=true``: the same network, one wide product instead of
two or three narrow ones). BN-Inception is
evaluated as Figure 3's confirmatory runs are (``FIG3_SCHEDULE``'s ``eval.*``: 5,000 test images
every 100 steps), the peer on as many images as often. Batch Renorm per microbatch has no peer
(``torch.nn`` has no such layer), so its row compares the study's two routes.

For the Figure 1 MLP it also states the compute floor of a run-step: its arithmetic (forward,
backward and update; the binary first layer's additions counted as they are done, one per set
pixel and unit; the evaluation's forward passes spread over the steps) at the rate this core's
matrix product attains (the faster of ATen's and the fused step's own kernel), measured in the same
run, at the network's own shapes and at a large one.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from experiments.kit.data import compact_inputs, ensure_dataset, load_split
from experiments.nets import kernels
from experiments.studies import DEPTH_LR_EVERY, DEPTH_LR_RUN, DEPTH_LR_TEST, FIG3_SCHEDULE
from scripts.analysis.stats import Estimate
from scripts.bench_layers import write_report
from scripts.peers._train import LOOP_LINE


def gemm_column(route: str, shape: str) -> str:
    """The CSV column of a matrix-product rate behind the floor, by route and shape."""
    return f"gemm_gflops_{route}_{shape}"


GEMM_COLUMNS = [gemm_column(r, s) for s in ("own_shapes", "512") for r in ("aten", "kernel")]
# peer / study: the Figure 1 MLP's run-step at least 4x cheaper than the peer's; BN-Inception's
# at least as cheap
TARGET = {"mlp": 4.0, "inception": 1.0}
# peer / stacked: BN-Inception's seeds side by side at least 1.5x cheaper a run-step than the peer
STACKED_TARGET = {"inception": 1.5}


def ratio_interval(ratios: list[float]) -> tuple[float, float, float] | None:
    """The geometric mean of each round's ratio and its 95% interval (exact t on the log
    ratios): ``(mean, low, high)``; None with one round, or where a round's ratio is not a
    positive number (a stall longer than the short run's whole cost)."""
    if not all(math.isfinite(r) and r > 0 for r in ratios):
        return None
    est = Estimate.of([math.log10(r) for r in ratios], log=True)
    ci = est.interval()
    return None if ci is None else (10**est.mean, 10 ** ci[0], 10 ** ci[1])


def decide(interval: tuple[float, float, float] | None, target: float) -> str:
    """``met`` when the interval's lower end reaches ``target``, ``missed`` when its upper end
    falls short, ``undecided`` otherwise (or with no interval): each a one-sided test at 2.5%,
    as the claims table's comparisons are."""
    if interval is None:
        return "undecided"
    return "met" if interval[1] >= target else "missed" if interval[2] < target else "undecided"


def interval_text(interval: tuple[float, float, float] | None) -> str:
    """``1.05 [0.98, 1.12]``; empty without an interval."""
    return "" if interval is None else "{:.2f} [{:.2f}, {:.2f}]".format(*interval)


# a route's columns: its rounds and target (what the timing records), then what
# :func:`judged` derives from them, its interval and verdict
ROUTE_COLUMNS = {
    "": ("ratios_by_round", "target", "ratio_gm_ci95", "target_verdict"),
    "stacked_": ("ratios_stacked_by_round", "stacked_target", "ratio_stacked_gm_ci95", "stacked_target_verdict"),
}  # fmt: skip


def judged(row: dict) -> dict:
    """``row`` with each route's interval and verdict derived from the rounds it records and
    its target, placed after the recorded columns (a route a row does not record, none)."""
    derived = {}
    for rounds_key, target_key, interval_key, verdict_key in ROUTE_COLUMNS.values():
        if rounds_key not in row:
            continue
        rounds = [float(r) for r in (row[rounds_key] or "").split()]
        interval = ratio_interval(rounds) if len(rounds) > 1 else None
        target = row.get(target_key) or ""
        derived[interval_key] = interval_text(interval)
        derived[verdict_key] = decide(interval, float(target)) if target != "" else ""
    derivable = {k for c in ROUTE_COLUMNS.values() for k in c[2:]}
    recorded = [k for k in row if k not in derivable]
    inputs = [i for i, k in enumerate(recorded) if any(k in c[:2] for c in ROUTE_COLUMNS.values())]
    at = inputs[-1] + 1 if inputs else len(recorded)
    order = [*recorded[:at], *derived, *recorded[at:]]
    return {k: derived[k] if k in derived else row[k] for k in order}


def verdicts(rows: list[dict]) -> tuple[list[str], list[str]]:
    """The targets judged rows miss and those they cannot decide, one line each."""
    failed, undecided = [], []
    for r in rows:
        for route, (_, target_key, interval_key, verdict_key) in ROUTE_COLUMNS.items():
            name = f"{r['key']}, stacked" if route else r["key"]
            line = f"{name}: {r.get(interval_key) or 'no interval'} against {r.get(target_key)}x"
            verdict = r.get(verdict_key)
            if verdict == "missed":
                failed.append(line)
            elif verdict == "undecided":
                undecided.append(line)
    return failed, undecided


@dataclass(frozen=True)
class Case:
    key: str
    what: str
    study: list[str]  # the study's entry point and overrides (steps appended)
    runs: int  # networks the study trains side by side in its process
    peer: list[str] | None  # the peer's module and arguments (steps and data appended)
    data: str  # which of the prepared tensors files the peer reads
    lengths: tuple[int, int]  # run lengths in steps; their difference is what is timed (a
    # loop-timed case runs the longer alone)
    # the study's seeds-side-by-side route: (its overrides, runs a process)
    stacked: tuple[tuple[str, ...], int] | None = None
    # timed by each run's own training loop (one run of the longer length) rather than by the
    # difference of two whole processes' CPU seconds
    loop_timed: bool = False

    def routes(self) -> list[str]:
        return ["study", *(["stacked"] if self.stacked else []), *(["peer"] if self.peer else [])]

    def run_lengths(self) -> tuple[int, ...]:
        """The lengths each route runs: both, or the longer alone where each loop is timed."""
        return self.lengths[1:] if self.loop_timed else self.lengths

    def steps_timed(self) -> int:
        """The run-steps the measure spans: the longer run's loop, or the lengths' difference."""
        return self.lengths[1] if self.loop_timed else self.lengths[1] - self.lengths[0]

    def seconds_timed(self, seconds: list[float]) -> float:
        """The seconds the measure spans, from a route's seconds at each of :meth:`run_lengths`."""
        return seconds[-1] - (0 if self.loop_timed else seconds[0])


def cases() -> list[Case]:
    off = ["threads=1", "logger.mode=disabled", "data=mnist"]
    return [
        Case(
            "mlp", "Figure 1 MLP, BN (MNIST study, 3 seeds a process)",
            ["experiments.mnist", "setup=bn", "seed=[0,1,2]", "eval.every=500", *off], 3,
            ["scripts.peers.mlp", "--eval-every", "500"], "binary", (500, 5500),
        ),
        Case(
            "mlp_baseline", "Figure 1 MLP, no BN (MNIST study, 3 seeds a process)",
            ["experiments.mnist", "setup=baseline", "seed=[0,1,2]", "eval.every=500", *off], 3,
            ["scripts.peers.mlp", "--eval-every", "500", "--norm", "none"], "binary", (500, 5500),
        ),
        Case(
            "conv", "Batch Renorm study's conv net, BN, batch 32",
            ["experiments.renorm", "setup=bn32", "eval.every=300", *off], 1,
            ["scripts.peers.convnet", "--eval-every", "300", "--train-eval", "5000"], "images",
            (300, 1200), (FIVE_SEEDS, 5),
        ),
        Case(
            "conv_brn_micro4", "the same conv net, Batch Renorm per microbatch of 4",
            ["experiments.renorm", "setup=brn_micro4", "eval.every=300", *off], 1,
            None, "images", (300, 1200), (FIVE_SEEDS, 5),
        ),
        Case(
            "inception", "BN-Inception at CPU scale, BN-Baseline, Figure 3's evaluations",
            ["experiments.inception", "setup=bn_baseline", *FIG3_EVAL, *off], 1,
            ["scripts.peers.inception", *fig3_eval_peer()], "rgb32",
            (100, 300), ((*FIVE_SEEDS, "model.fuse_reductions=true"), 5), loop_timed=True,
        ),
        # the gradient ratio and the fixed batch's loss every step (reproduce-depth), the peer
        # measuring the same; 20 and 120 steps: the study checkpoints every 100
        Case(
            "depth", "depth study, six deep MLPs with BN (one run)",
            ["experiments.depth", "setup=deep_mlp_bn", *off], 1,
            ["scripts.peers.deep_mlp", "--ratio"], "gray", (20, 120), (FIVE_SEEDS, 5),
        ),
        Case(
            "depth_lr", "depth study at the learning-rate grid's cadence, BN, lr 0.1",
            ["experiments.depth", "setup=deep_mlp_bn", *depth_lr_study(), *off], 1,
            ["scripts.peers.deep_mlp", *depth_lr_peer()], "gray", (DEPTH_LR_EVERY, 4 * DEPTH_LR_EVERY),
            (FIVE_SEEDS, 5),
        ),
    ]  # fmt: skip


FIVE_SEEDS = ("seed=[0,1,2,3,4]",)
# BN-Inception evaluated as Figure 3's confirmatory runs are (make confirm-inception)
FIG3_EVAL = tuple(a for a in FIG3_SCHEDULE if a.startswith("eval."))


def fig3_eval_peer() -> list[str]:
    """The peer's evaluations at Figure 3's cadence: as many test images, as many training ones."""
    e = dict(a.split("=", 1) for a in FIG3_EVAL)
    return [
        "--eval-every", e["eval.every"], "--test-subset", e["eval.test_subset"],
        "--train-eval", e["eval.train_subset"],
    ]  # fmt: skip


DEPTH_LR_BENCH_RATE = 0.1  # a rate of the grid at which the shallow networks train


def depth_lr_study() -> list[str]:
    """The depth-lr reproduction's run settings (its length aside), at one rate of its grid."""
    run = [a for a in DEPTH_LR_RUN if not a.startswith("train.steps=")]
    return [*run, f"train.lr={DEPTH_LR_BENCH_RATE}"]


def depth_lr_peer() -> list[str]:
    """The peer measuring what the study does at that cadence: the ratio and the fixed batch's
    loss, and the test accuracy on as many images, every ``DEPTH_LR_EVERY`` steps."""
    return [
        "--ratio", "--eval-every", str(DEPTH_LR_EVERY), "--test-examples", str(DEPTH_LR_TEST),
        "--lr", str(DEPTH_LR_BENCH_RATE),
    ]  # fmt: skip


def prepare_data(root: Path, out: Path) -> dict[str, Path]:
    """MNIST as each peer reads it: binary pixels (the MLP), standardized grayscale images (the
    conv net), 32x32 RGB (Inception), grayscale vectors (the deep MLPs)."""
    raw = ensure_dataset("mnist", root, download=False, verify=False)
    train, test = load_split(raw, "train"), load_split(raw, "test")
    mean, std = train.images.float().mean() / 255, train.images.float().std() / 255

    def views(images: torch.Tensor) -> dict[str, torch.Tensor]:
        gray = images.float().div(255).view(-1, 1, 28, 28)
        standard = (gray - mean) / std
        return {
            "binary": compact_inputs(images, True).float(),
            "gray": gray.flatten(1),
            "images": standard,
            "rgb32": F.pad(standard, (2, 2, 2, 2)).expand(-1, 3, -1, -1).contiguous(),
        }

    tr, te = views(train.images), views(test.images)
    files = {}
    for name in tr:
        files[name] = out / f"{name}.pt"
        torch.save(
            {
                "x_train": tr[name],
                "y_train": train.labels,
                "x_test": te[name],
                "y_test": test.labels,
            },
            files[name],
        )
    return files


def gemm_gflops(copies: int, m: int, k: int, n: int, repeats: int, product=None) -> float:
    """The rate of ``copies`` ``(m, k) @ (k, n)`` float32 products, one thread: batched through
    ``torch.bmm``, or one copy at a time through ``product(a, b)``."""
    a, b = torch.randn(copies, m, k), torch.randn(copies, k, n)
    out = torch.empty(copies, m, n)

    def once() -> None:
        if product is None:
            torch.bmm(a, b, out=out)
        else:
            for c in range(copies):
                product(a[c], b[c])

    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            once()
        times.append((time.perf_counter() - t0) / repeats)
    return 2 * copies * m * k * n / min(times) / 1e9


def product_rates(copies: int, m: int, k: int, n: int, repeats: int) -> dict[str, float]:
    """GFLOP/s of ``torch.bmm`` (``"aten"``) and of the fused step's own product kernel
    (``"kernel"``, where the step uses it: built, and compiled kernels not turned off). The
    kernel's rate includes a call and an output's allocation per product, so it is understated at
    small shapes."""
    rates = {"aten": gemm_gflops(copies, m, k, n, repeats)}
    if (kernel := kernels.small_matmul_op()) is not None:
        rates["kernel"] = gemm_gflops(copies, m, k, n, repeats, kernel)
    return rates


def mlp_floor(pixels: torch.Tensor, eval_every: int = 500, test_images: int = 10_000) -> dict:
    """The Figure 1 MLP's arithmetic per run-step (BN setup, batch 60) and its time at the
    attained matrix-product rates (the faster of ATen's and the step's own kernel): ``{"mflop",
    "gflops_own_shapes", "gflops_large", "ms_own", "ms_large", "rates_own", "rates_large"}``, the
    last two each route's rate (:func:`product_rates`)."""
    ones = pixels.float().sum(1).mean().item()  # set pixels per binarized image
    batch, hidden, classes = 60, 100, 10
    binary = 2 * batch * ones * hidden  # forward sums and the update's, one add per pixel and unit
    dense = 2 * 3 * (2 * batch * hidden * hidden)  # layers 2, 3: forward, input grad, update
    output = 3 * 2 * batch * hidden * classes
    elementwise = 3 * batch * hidden * 20  # norm, sigmoid, their backward, the γ/β step
    forward = ones * hidden + 2 * 2 * hidden * hidden + 2 * hidden * classes
    evaluation = test_images * forward / eval_every
    flop = binary + dense + output + elementwise + evaluation
    rates_own = product_rates(3, hidden, hidden, batch, 2000)
    rates_large = product_rates(1, 512, 512, 512, 20)
    own, large = max(rates_own.values()), max(rates_large.values())
    return {
        "mflop": flop / 1e6, "gflops_own_shapes": own, "gflops_large": large,
        "ms_own": flop / own / 1e6, "ms_large": flop / large / 1e6,
        "rates_own": rates_own, "rates_large": rates_large,
    }  # fmt: skip


def cpu_seconds(cmd: list[str]) -> tuple[float, str]:
    """CPU seconds (user + system) of a child process running ``cmd`` to completion, and what
    it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"error: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def loop_seconds(route: str, run_dir: Path, printed: str, steps: int) -> float:
    """Wall seconds of a run's training loop of ``steps`` steps (its evaluations and
    checkpoints in, the initial evaluation and everything before or after the loop out): the
    study's from the steps per second its ``summary.json`` records (a stack's runs record the
    stack's; to 0.01 step/s), the peer's from the line its loop prints. A run that did not train
    all ``steps`` (diverged or stopped) times something else: an error."""
    if route == "peer":
        found = re.search(rf"{re.escape(LOOP_LINE)} ([0-9.]+) s wall, ([0-9.]+) s cpu", printed)
        if not found:
            raise SystemExit(f"error: the peer printed no '{LOOP_LINE}' line:\n{printed[-2000:]}")
        wall, cpu = float(found.group(1)), float(found.group(2))
        if wall > BUSY * cpu:  # its one thread waited for a core: wall times are not costs
            print(
                f"warning: the peer's loop took {wall:.1f} s wall for {cpu:.1f} s of CPU: the "
                "machine is running something else, and the loop-timed rows are not to be trusted",
                file=sys.stderr,
            )
        return wall
    summary = next(iter(sorted(run_dir.rglob("summary.json"))), None)
    if summary is None:
        raise SystemExit(f"error: {run_dir} holds no summary.json to read the loop's speed from")
    s = json.loads(summary.read_text())
    if s.get("steps_done") != steps or not s.get("steps_per_s"):
        raise SystemExit(
            f"error: {summary} records {s.get('steps_done')} steps done of {steps} at "
            f"{s.get('steps_per_s')} steps/s: no loop of {steps} steps to time"
        )
    return steps / s["steps_per_s"]


# a peer's loop taking this much more wall than CPU time means the machine was busy
BUSY = 1.05
# how a row was timed (the ``timed`` column; a row written before it was timed the first way)
TIMED = {
    False: "CPU s of whole runs, the difference of two lengths",
    True: "wall s of each run's training loop",
}


def timing_of(row: dict) -> str:
    """How ``row`` was timed (:data:`TIMED`): its ``timed`` column, or, in a row written before
    that column, whole runs' CPU seconds."""
    return row.get("timed") or TIMED[False]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds (default 3; a target within a few percent of the ratio needs many "
        "more to be decided)",
    )
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument("--data", type=Path, default=Path("data"), help="where MNIST's files are")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated case keys (default: all); the other cases' rows of an existing "
        "studies_cpu.csv are kept",
    )
    ap.add_argument(
        "--rejudge",
        action="store_true",
        help="time nothing: rewrite OUT/studies_cpu.csv's intervals and verdicts from its rounds",
    )
    args = ap.parse_args()
    if args.rejudge:
        rejudge(args.out / "studies_cpu.csv")
        return
    chosen = [c for c in cases() if not args.only or c.key in args.only.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="bench_studies-"))
    files = prepare_data(args.data, scratch)
    py = [sys.executable, "-m"]
    cost: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for case in chosen:
            seconds: dict[str, list[float]] = {route: [] for route in case.routes()}
            for steps in case.run_lengths():
                run_dir = scratch / f"{case.key}-r{r}-{steps}"
                dirs = {"study": run_dir, "stacked": Path(f"{run_dir}-stacked"), "peer": run_dir}
                commands = {
                    "study": [*py, *case.study, f"train.steps={steps}", f"hydra.run.dir={dirs['study']}"],
                    "stacked": [*py, *case.study, *(case.stacked[0] if case.stacked else ()), f"train.steps={steps}", f"hydra.run.dir={dirs['stacked']}"],
                    "peer": [*py, *(case.peer or []), "--steps", str(steps), "--data", str(files[case.data])],
                }  # fmt: skip
                for route in case.routes():
                    took, printed = cpu_seconds(commands[route])
                    if case.loop_timed:  # the loop's own wall seconds, not the process's CPU
                        took = loop_seconds(route, dirs[route], printed, steps)
                    seconds[route].append(took)
            runs = {
                "study": case.runs,
                "stacked": case.stacked[1] if case.stacked else 0,
                "peer": 1,
            }
            for route in case.routes():
                per_step = case.seconds_timed(seconds[route]) / (runs[route] * case.steps_timed())
                cost.setdefault((case.key, route), []).append(per_step * 1e3)
            print(f"round {r + 1}/{args.rounds}: {case.key} done", file=sys.stderr)
    print(f"torch {torch.__version__}, one thread per process, {cpu_name()}")
    print(
        f"ms per run-step, CPU or its loop's wall time as the row's 'timed' says (medians of "
        f"{args.rounds} rounds); ratio = peer / route, the median "
        "of the rounds' ratios (each round's in brackets); stacked: the study with five seeds "
        "side by side in one process"
    )
    print(f"{'network':56} {'study':>8} {'stacked':>8} {'peer':>8} {'ratio':>7}")
    rows = []
    for case in chosen:
        median = {route: statistics.median(cost[(case.key, route)]) for route in case.routes()}
        ratios = {
            route: [p / q for p, q in zip(cost[(case.key, "peer")], cost[(case.key, route)])]
            for route in ("study", "stacked")
            if case.peer and route in case.routes()
        }
        ratio = statistics.median(ratios["study"]) if "study" in ratios else None
        shown = {route: f"{median[route]:8.3f}" if route in median else f"{'-':>8}" for route in ("study", "stacked", "peer")}  # fmt: skip
        each = ", ".join(f"{r:.2f}" for r in ratios.get("study", []))
        print(
            f"{case.what:56} {shown['study']} {shown['stacked']} {shown['peer']} "
            f"{f'{ratio:7.2f}' if ratio else f'{chr(45):>7}'}  [{each}]"
        )
        if "stacked" in ratios:
            r_st = statistics.median(ratios["stacked"])
            print(f"{'':56} stacked: peer / stacked = {r_st:.2f} [{', '.join(f'{r:.2f}' for r in ratios['stacked'])}]")  # fmt: skip
        if "stacked" in median:
            print(f"{'':56} stacked / study = {median['stacked'] / median['study']:.2f}")
        target = TARGET.get(case.key)
        rows.append(
            {
                "network": case.what, "key": case.key, "study_runs_per_process": case.runs,
                "study_ms_per_run_step": round(median["study"], 4),
                "stacked_ms_per_run_step": round(median["stacked"], 4) if "stacked" in median else "",
                "peer_ms_per_run_step": round(median["peer"], 4) if "peer" in median else "",
                "ratio_peer_to_study": round(ratio, 3) if ratio else "",
                "ratio_peer_to_stacked": round(statistics.median(ratios["stacked"]), 3) if "stacked" in ratios else "",
                "ratios_by_round": " ".join(f"{r:.3f}" for r in ratios.get("study", [])),
                "target": target or "",
                "stacked_target": STACKED_TARGET.get(case.key, ""),
                "ratios_stacked_by_round": " ".join(f"{r:.3f}" for r in ratios.get("stacked", [])),
                "steps_timed": case.steps_timed(), "timed": TIMED[case.loop_timed], "rounds": args.rounds,
                "cpu": cpu_name(), "torch": torch.__version__,
                "floor_mflop": "", "floor_ms_own_shapes": "", "floor_ms_large_gemm": "",
                **dict.fromkeys(GEMM_COLUMNS, ""),
            }
        )  # fmt: skip
    if any(c.key == "mlp" for c in chosen):
        torch.set_num_threads(1)
        pixels = torch.load(files["binary"], weights_only=True)["x_train"]
        floor = mlp_floor(pixels)
        study = statistics.median(cost[("mlp", "study")])
        print(
            f"Figure 1 MLP compute floor: {floor['mflop']:.1f} MFLOP a run-step = "
            f"{floor['ms_own']:.3f} ms at {floor['gflops_own_shapes']:.0f} GFLOP/s (its own "
            f"100x100x60 products; study / floor = {study / floor['ms_own']:.1f}x), "
            f"{floor['ms_large']:.3f} ms at {floor['gflops_large']:.0f} GFLOP/s (512^3; "
            f"{study / floor['ms_large']:.1f}x)"
        )
        gemm = {
            gemm_column(route, shape): round(rate, 1)
            for shape, rates in (("own_shapes", floor["rates_own"]), ("512", floor["rates_large"]))
            for route, rate in rates.items()
        }
        print("matrix products, GFLOP/s: " + ", ".join(f"{k} {v}" for k, v in gemm.items()))
        for row in rows:
            if row["key"] == "mlp":
                row |= {
                    "floor_mflop": round(floor["mflop"], 2),
                    "floor_ms_own_shapes": round(floor["ms_own"], 4),
                    "floor_ms_large_gemm": round(floor["ms_large"], 4),
                    **gemm,
                }
    path = args.out / "studies_cpu.csv"
    rows = [judged(r) for r in (_merged(path, rows) if args.only else rows)]
    for r in rows:
        for route, (_, _, interval_key, _) in ROUTE_COLUMNS.items():
            if r.get(interval_key):
                print(f"{r['key']}: peer / {'stacked' if route else 'study'}, geometric mean and 95% interval {r[interval_key]}")  # fmt: skip
    write_report(path, rows, *verdicts(rows))


def rejudge(path: Path) -> None:
    """Rewrite ``path``'s interval and verdict columns from the rounds it records, timing
    nothing (a file written before those columns, or timed on another machine)."""
    try:
        with path.open(newline="") as f:
            rows = [judged(r) for r in csv.DictReader(f)]
    except (OSError, csv.Error) as e:
        raise SystemExit(f"error: cannot rejudge {path}: {e}") from None
    if not rows:
        raise SystemExit(f"error: {path} holds no rows to rejudge")
    write_report(path, rows, *verdicts(rows))


def _merged(path: Path, rows: list[dict]) -> list[dict]:
    """``rows``, and the rows of the other cases from an earlier ``path`` (timed in that run),
    in the order of :func:`cases`."""
    try:
        with path.open(newline="") as f:
            earlier = {r["key"]: r for r in csv.DictReader(f)}
    except (OSError, KeyError, csv.Error):
        earlier = {}
    fresh = {r["key"]: r for r in rows}
    kept = [k for k in earlier if k not in fresh]
    if kept:
        print(f"kept from the earlier {path}: {', '.join(kept)}")
    by_key = {**earlier, **fresh}
    merged = [by_key[c.key] for c in cases() if c.key in by_key]
    columns = list(dict.fromkeys(k for r in [*rows, *merged] for k in r))
    return [{k: timing_of(r) if k == "timed" else r.get(k, "") for k in columns} for r in merged]


if __name__ == "__main__":
    main()
