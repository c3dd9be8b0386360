"""``make smoke``: every study trained for a few steps, collected and plotted, end to end, into a
scratch folder; nothing under ``results/`` is touched.

    python -m scripts.smoke                         # into multirun/smoke/<time>/
    python -m scripts.smoke --out /tmp/smoke        # a folder of your choice (must not exist)
    python -m scripts.smoke --data-root DIR         # datasets already in DIR, nothing downloaded
    python -m scripts.smoke --data-root DIR --no-verify   # ... not the official files (tests)
    python -m scripts.smoke --study renorm --study depth  # some studies only
    python -m scripts.smoke --datasets              # the datasets it needs, one a line

Every study of the registry that trains (``experiments/studies.py``) runs with its ``debug`` config
(``configs/<study>/debug/quick.yaml``: a few steps, W&B off) and its record's ``smoke`` overrides,
two at a time, each followed by ``scripts.collect`` as its first everyday reproduction collects,
which writes ``<out>/results/...`` as the real targets write ``results/...``, and by that
reproduction's figure scripts (none where it has none), which draw into ``<out>/results/figures/``
(they read and write ``results/`` relative to the folder they run in). A line says when each study
starts and at what clock time (training takes minutes), and another its time once it is done.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from experiments.studies import STUDIES, Study

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Job:
    study: str
    overrides: tuple[str, ...]  # beyond debug=quick, a data= among them
    out: str  # collect's --out, under <out>/results/
    plots: tuple[tuple[str, ...], ...]  # the figure scripts (python -m scripts.<plot> <args>)

    @property
    def data(self) -> str:
        return next(o.removeprefix("data=") for o in self.overrides if o.startswith("data="))


def job(study: Study) -> Job:
    """``study``'s smoke run, from its registry record: collected and plotted as its first
    reproduction that trains and collects into a folder (not a confirmatory one) is."""
    first = next(
        (
            r
            for r in study.reproductions
            if r.stages and r.collect and not r.collect.sweep and not r.seeds
        ),
        None,
    )
    if first is None:
        raise SystemExit(f"error: study {study.name} has no reproduction that collects its runs")
    return Job(study.name, study.smoke_overrides(), first.collect.out, first.plots)


JOBS = tuple(job(s) for s in STUDIES if s.trains)


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    with log.open("w") as f:
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(
            f"{tail}\nerror: `{' '.join(cmd)}` failed (exit {done.returncode}); log: {log}"
        )


def run(job: Job, out: Path, data_root: Path | None, verify: bool) -> float:
    """Train ``job`` with its debug config, collect it and draw its figures: seconds taken."""
    start = time.monotonic()
    data = []
    if data_root is not None:
        data += [f"data.root={data_root}", "data.download=false"]
    if not verify:
        data.append("data.verify=false")
    py = [sys.executable, "-m"]
    runs = out / "runs" / job.study
    train = [
        *py, f"experiments.{job.study}", "-m", "debug=quick", "threads=1",
        *data, *job.overrides, f"hydra.sweep.dir={runs}",
    ]  # fmt: skip
    collect = [*py, "scripts.collect", job.study, str(runs), "--out", f"results/{job.out}"]
    _run(train, REPO, out / "logs" / f"{job.study}.log")
    _run([*collect, "--command", "make smoke"], out, out / "logs" / f"collect_{job.study}.log")
    for plot in job.plots:
        _run([*py, f"scripts.{plot[0]}", *plot[1:]], out, out / "logs" / f"{'_'.join(plot)}.log")
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="a new folder (default: multirun/smoke/<time>)")
    p.add_argument("--data-root", type=Path, help="where the datasets are (no download)")
    p.add_argument("--no-verify", action="store_true", help="skip the datasets' checksums")
    p.add_argument("--jobs", type=int, default=2, help="studies trained at a time")
    p.add_argument(
        "--study",
        action="append",
        choices=[j.study for j in JOBS],
        help="this study only (repeatable)",
    )
    p.add_argument("--datasets", action="store_true", help="list the datasets it needs, and stop")
    args = p.parse_args(argv)
    jobs = tuple(j for j in JOBS if args.study is None or j.study in args.study)
    if args.datasets:
        print("\n".join(dict.fromkeys(j.data for j in jobs)))
        return
    out = (args.out or REPO / "multirun" / "smoke" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    if out.exists():
        raise SystemExit(f"error: {out} exists; smoke writes only into a new folder")
    if out == (REPO / "results").resolve() or (REPO / "results").resolve() in out.parents:
        raise SystemExit(f"error: {out} is inside results/; smoke never writes there")
    (out / "logs").mkdir(parents=True)
    start = time.monotonic()

    def announced(k: int, job: Job) -> float:
        print(f"[{k}/{len(jobs)}] started {job.study} at {time.strftime('%H:%M:%S')}", flush=True)
        return run(job, out, args.data_root, not args.no_verify)

    with ThreadPoolExecutor(args.jobs) as pool:
        done = pool.map(announced, range(1, len(jobs) + 1), jobs)
        for job, seconds in zip(jobs, done):
            print(f"{job.study:10} trained, collected and plotted in {seconds:5.1f} s", flush=True)
    figures = sorted((out / "results" / "figures").glob("*.png"))
    print(
        f"smoke: {len(jobs)} studies trained, collected and plotted ({len(figures)} figures) in "
        f"{time.monotonic() - start:.0f} s; everything is in {out}"
    )


if __name__ == "__main__":
    main()
