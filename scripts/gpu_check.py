"""The GPU checks, in one command: bn's tests on CUDA, the layer benchmark (and a profile of Batch
Renorm's kernels beside torch's layer's) and BN-Inception's, the paper-scale training paths end to
end (torchrun, a kill and a resume), and a CPU-scale study timed on the GPU.

    python -m scripts.gpu_check OUT [--budget 560] [--stages tests,layers,inception,e2e,study]

For a machine with one CUDA GPU, its own torch (2.11 or later) and the research packages this
repo needs beside torch (Hydra, omegaconf, and expecttest, which torch's own test helpers import
for the ``ModuleInfo`` tests; W&B is not needed: every run here has ``logger.mode=disabled``). The study stage reads Fashion-MNIST from ``data/`` (``python -m
experiments.kit.data fashion_mnist`` fetches it). Each stage runs under its own time limit, a
share of ``--budget`` seconds, so a hang costs only that stage, and a failed stage does not stop
the next. OUT receives eight files: ``checks.txt`` (the machine, then one line per stage: exit
status and seconds), ``tests.log``, ``bench.log``, ``layers_cuda.csv``, ``inception_cuda.csv``,
``e2e.log``, ``study.log`` and ``study.csv`` (the study's steps/s and accuracy on the GPU beside
the committed CPU run's). Scratch (images, run folders) goes to ``--work``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from experiments.studies import INCEPTION_VARIANTS, RENORM_SETUPS, SEEDS5

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
# Shares of the budget, from two runs on an H200: tests/bn needed over 150 s on 16 workers
# (tests/bn/test_cuda.py and the ModuleInfo tests alone 30 s); compiling two networks over 170 s;
# the layers 78 s with Batch Renorm's compiled rows (six compiles), before its profile; the paper-scale
# paths over 97 s; the study's Fashion-MNIST half 102 s.
STAGES = {"tests": 0.25, "layers": 0.2, "inception": 0.25, "e2e": 0.15, "study": 0.15}
FIRST = "bn_baseline"  # the variant killed and resumed; the others run side by side
STUDY_DATA = "fashion_mnist"
QUIET = ["logger.mode=disabled"]
# The runs' lengths; --quick: a few tiny steps of everything, to try this script without a GPU.
SIZES = {
    "full": {"first": ["train.steps=300", "eval.every=100"], "others": ["train.steps=60", "eval.every=60"],
             "study": [], "device": "cuda"},
    "quick": {"first": ["train.steps=6", "eval.every=2", "train.batch_size=4", "data.image_size=96"],
              "others": ["train.steps=2", "eval.every=2", "train.batch_size=8", "data.image_size=96"],
              "study": ["train.steps=20", "eval.every=20"], "device": "auto"},
}  # fmt: skip
SIZE = SIZES["full"]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": f"{REPO}:{path}" if path else str(REPO),
        "WANDB_MODE": "disabled",
    }


def _start(cmd: list[str], log) -> subprocess.Popen:
    """``cmd`` in a session of its own (so it can be killed whole), its output to ``log``."""
    return subprocess.Popen(
        cmd, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def run(cmd: list[str], log, limit: float) -> int:
    """Run ``cmd`` (its output appended to the open file ``log``); kill its whole process group
    after ``limit`` seconds (exit status 124, as timeout(1))."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    p = _start(cmd, log)
    try:
        return p.wait(timeout=max(limit, 1))
    except subprocess.TimeoutExpired:
        _kill(p, cmd)
        log.write(f"[killed after {limit:.0f} s]\n")
        return 124


def _kill(p: subprocess.Popen, cmd: list[str]) -> None:
    """SIGKILL ``p``'s process group and, for a training run, every process of its run folder
    (torchrun starts its workers in sessions of their own, out of the group's reach)."""
    os.killpg(p.pid, signal.SIGKILL)
    for arg in cmd:
        if arg.startswith("hydra.run.dir="):
            kill_run(arg)
    p.wait()


def kill_run(token: str) -> None:
    """SIGKILL every process whose command line holds ``token``, as a machine's loss would."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and token.encode() in (proc / "cmdline").read_bytes().split(
                b"\0"
            ):
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:  # gone meanwhile, or not ours to read
            pass


def stage_tests(out: Path, work: Path, limit: float) -> int:
    """tests/bn/test_cuda.py first (every test there needs the GPU), then the rest of the fast tier."""
    deadline = time.monotonic() + limit
    xdist = subprocess.run([PY, "-c", "import xdist"], capture_output=True).returncode == 0
    pytest = [PY, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider", "-rs"]
    pytest += ["-n", str(min(os.cpu_count() or 1, 16))] if xdist else []
    with (out / "tests.log").open("a", buffering=1) as log:
        rc = run([*pytest, "tests/bn/test_cuda.py"], log, limit / 2)  # the rest gets what is left
        rest = run(
            [*pytest, "tests/bn", "--ignore=tests/bn/test_cuda.py"],
            log,
            deadline - time.monotonic(),
        )
        return rc or rest


def _bench(script: str, rounds: int, out: Path, limit: float) -> int:
    """``scripts.<script> --device cuda``, its printout appended to ``bench.log``."""
    cmd = [PY, "-m", f"scripts.{script}", "--device", "cuda", "--rounds", str(rounds), "--out", str(out)]  # fmt: skip
    with (out / "bench.log").open("a", buffering=1) as log:
        return run(cmd, log, limit)


def stage_layers(out: Path, work: Path, limit: float) -> int:
    """The layer benchmark, then where a Batch Renorm step's time goes on the GPU (its kernels
    beside torch's layer's), both into ``bench.log``."""
    deadline = time.monotonic() + limit
    rc = _bench("bench_layers", 15, out, limit * 0.8)
    profile = [PY, "-m", "scripts.bench_layers", "--device", "cuda", "--profile"]
    with (out / "bench.log").open("a", buffering=1) as log:  # even if the benchmark failed
        profiled = run(profile, log, max(deadline - time.monotonic(), 1))
    return rc or profiled


def stage_inception(out: Path, work: Path, limit: float) -> int:
    return _bench("bench_inception", 5, out, limit)


def _torchrun(study: str) -> list[str]:
    return [
        PY,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        "-m",
        f"experiments.{study}",
    ]


def _summary(folder: Path) -> dict:
    path = folder / "summary.json"
    return json.loads(path.read_text()) if path.exists() else {}


def stage_e2e(out: Path, work: Path, limit: float) -> int:
    """The paper-scale paths on a synthetic ImageNet-layout folder: BN-Baseline under torchrun,
    killed once its first checkpoint is written and resumed; the other five variants and Batch
    Renorm's Inception-v3 (``scale=paper``, microbatches of 4) side by side, a few steps each."""
    deadline = time.monotonic() + limit
    images, runs = work / "images", work / "runs"
    with (out / "e2e.log").open("a", buffering=1) as log:
        rc = run([PY, "-m", "scripts.make_synthetic_images", str(images), "--classes", "100",
                  "--train", "24", "--val", "6", "--size", "128"], log, min(60, limit / 4))  # fmt: skip
        if rc:
            return rc
        left = lambda: deadline - time.monotonic()  # noqa: E731
        common = [f"data.root={images}", "eval.batch_size=250", "eval.train_subset=256", *QUIET]
        first = runs / FIRST
        cmd = [*_torchrun("inception"), "scale=gpu", f"setup={FIRST}", *common, *SIZE["first"],
               "data.num_workers=12", f"hydra.run.dir={first}"]  # fmt: skip
        log.write(f"$ {' '.join(cmd)}   [killed at its first checkpoint]\n")
        log.flush()
        t0 = time.monotonic()
        p = _start(cmd, log)
        while p.poll() is None and not (first / "checkpoint.pt").exists() and left() > 0:
            time.sleep(0.5)
        killed_after = time.monotonic() - t0
        kill_run(f"hydra.run.dir={first}")  # torchrun and its worker (in a session of its own)
        p.wait()
        log.write(
            f"[killed after {killed_after:.0f} s; checkpoint: {(first / 'checkpoint.pt').exists()}]\n"
        )
        t0 = time.monotonic()
        rc = run([*cmd, "resume=true"], log, left() * 0.5)
        resumed = sorted(p.name for p in (first / ".hydra").glob("resumed_at_step_*"))
        s = _summary(first)
        log.write(
            f"\nRESULT {FIRST} kill+resume: exit {rc}, {resumed}, {time.monotonic() - t0:.0f} s for the "
            f"resumed part, steps/s {s.get('steps_per_s')}, images/s {s.get('examples_per_s')}, "
            f"final test/acc {s.get('test_acc', s.get('final_test_acc'))}\n"
        )
        others = {
            v: [*_torchrun("inception"), "scale=gpu", f"setup={v}", *common, *SIZE["others"],
                "data.num_workers=2", f"hydra.run.dir={runs / v}"]
            for v in INCEPTION_VARIANTS
            if v != FIRST
        }  # fmt: skip
        others["renorm paper brn_micro4"] = [
            *_torchrun("renorm"), "scale=paper", "setup=brn_micro4", f"data.root={images}",
            *SIZE["others"], "eval.batch_size=100", "eval.train_subset=256",
            "data.num_workers=3", *QUIET, f"hydra.run.dir={runs / 'renorm_paper'}",
        ]  # fmt: skip
        logs = {name: (runs / f"{name.replace(' ', '_')}.log").open("w") for name in others}
        t0 = time.monotonic()
        procs = {name: _start(cmd, logs[name]) for name, cmd in others.items()}
        codes = {}
        for name, q in procs.items():
            try:
                codes[name] = q.wait(timeout=max(left(), 1))
            except subprocess.TimeoutExpired:
                _kill(q, others[name])
                codes[name] = 124
        for name, cmd in others.items():
            logs[name].close()
            text = (runs / f"{name.replace(' ', '_')}.log").read_text()
            s = _summary(Path(cmd[-1].split("=", 1)[1]))
            log.write(f"\n$ {' '.join(cmd)}\n" + "".join(text.splitlines(keepends=True)[-12:]))
            log.write(
                f"RESULT {name}: exit {codes[name]}, steps/s {s.get('steps_per_s')} (6 runs side by side)\n"
            )
        log.write(f"side by side: {time.monotonic() - t0:.0f} s\n")
        return rc or max(codes.values())


def stage_study(out: Path, work: Path, limit: float) -> int:
    """The CPU-scale Batch Renorm study (Fashion-MNIST, every setup x 5 seeds side by side) on the
    GPU, six jobs at a time, against the committed CPU run's steps/s and accuracy."""
    deadline = time.monotonic() + limit
    committed = json.loads((REPO / "results/renorm" / STUDY_DATA / "summary.json").read_text())
    folders = {s: work / "study" / s for s in RENORM_SETUPS}
    rows, rc = [], 0
    with (out / "study.log").open("a", buffering=1) as log:
        log.write(
            f"committed CPU run: {committed['command']} at {committed['git_commit'][:7]}, {committed['wall_time_s']} s\n"
        )
        pending, active, t0 = list(RENORM_SETUPS), {}, time.monotonic()
        while pending or active:
            while pending and len(active) < 6:
                setup = pending.pop(0)
                cmd = [PY, "-m", "experiments.renorm", f"setup={setup}", f"seed=[{','.join(map(str, SEEDS5))}]",
                       f"data={STUDY_DATA}", f"device={SIZE['device']}", "threads=1", *QUIET, *SIZE["study"],
                       f"hydra.run.dir={folders[setup]}"]  # fmt: skip
                log.write(f"$ {' '.join(cmd)}\n")
                f = (work / f"study_{setup}.log").open("w")
                active[setup] = (_start(cmd, f), f, time.monotonic())
            time.sleep(0.5)
            for setup, (p, f, started) in list(active.items()):
                over = time.monotonic() > deadline
                if p.poll() is None and not over:
                    continue
                if p.poll() is None:
                    _kill(p, p.args)
                f.close()
                del active[setup]
                rc = rc or p.returncode
                wall = time.monotonic() - started
                text = (work / f"study_{setup}.log").read_text().splitlines()
                log.write(
                    f"{setup}: exit {p.returncode} after {wall:.0f} s: {text[-1] if text else ''}\n"
                )
                seeds = [
                    json.loads(s.read_text())
                    for s in sorted(folders[setup].glob("seed*/summary.json"))
                ]
                cpu = committed["setups"][setup]
                rows.append({
                    "setup": setup,
                    "gpu_wall_s": round(wall, 1),
                    "gpu_steps_per_s": seeds[0].get("steps_per_s") if seeds else "",
                    "cpu_steps_per_s": cpu["steps_per_s"]["mean"],
                    "gpu_test_acc": round(sum(s["test_acc"] for s in seeds) / len(seeds), 4) if seeds else "",
                    "cpu_test_acc": cpu["test_acc"]["mean"],
                    "seeds_done": len(seeds),
                })  # fmt: skip
                with (out / "study.csv").open("w", newline="") as f:  # after each job
                    w = csv.DictWriter(f, fieldnames=list(rows[0]))
                    w.writeheader()
                    w.writerows(rows)
            if time.monotonic() > deadline:
                pending.clear()
        log.write(f"{len(rows)} jobs in {time.monotonic() - t0:.0f} s, 6 at a time\n")
    return rc


STAGE_FUNCTIONS: dict[str, Callable[[Path, Path, float], int]] = {
    "tests": stage_tests,
    "layers": stage_layers,
    "inception": stage_inception,
    "e2e": stage_e2e,
    "study": stage_study,
}


def machine() -> str:
    import torch

    lines = [f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
             f"cuDNN {torch.backends.cudnn.version()}"]  # fmt: skip
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        lines.append(
            f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs; {os.cpu_count()} CPUs"
        )
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)  # fmt: skip
        lines.append(f"nvidia-smi: {smi.stdout.strip() or smi.stderr.strip()}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=float, default=560, help="seconds for every stage together")
    ap.add_argument(
        "--stages", default=",".join(STAGES), help=f"a comma-separated subset of {','.join(STAGES)}"
    )
    ap.add_argument("--work", type=Path, default=Path("/tmp/bn_gpu_check"), help="scratch folder")
    ap.add_argument("--quick", action="store_true", help="tiny runs: try the script without a GPU")
    args = ap.parse_args()
    global SIZE
    SIZE = SIZES["quick" if args.quick else "full"]
    stages = args.stages.split(",")
    if unknown := set(stages) - set(STAGES):
        raise SystemExit(
            f"gpu_check: unknown stage(s) {sorted(unknown)}; choose from {list(STAGES)}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + args.budget
    with (args.out / "checks.txt").open("a") as checks:
        checks.write(machine() + "\n")
        for i, name in enumerate(stages):
            rest = sum(STAGES[s] for s in stages[i:])
            limit = (end - time.monotonic()) * STAGES[name] / rest if rest else 0
            t0 = time.monotonic()
            rc = STAGE_FUNCTIONS[name](args.out, args.work, limit)
            checks.write(
                f"{name}: exit {rc}, {time.monotonic() - t0:.0f} s (limit {limit:.0f} s)\n"
            )
            checks.flush()
            print(f"{name}: exit {rc}, {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
