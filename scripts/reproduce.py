"""Run a reproduction of the registry (``experiments/studies.py``) end to end: the data, the
training jobs (``--jobs`` at a time, the longest first, a line when each starts and one when it
ends, with the time left), the collection into ``results/``, the figures and the wall time.

    python -m scripts.reproduce reproduce-mnist                  # what `make reproduce-mnist` runs
    python -m scripts.reproduce reproduce-renorm --jobs 2 logger.mode=online   # Hydra overrides
    python -m scripts.reproduce question-brn-gradient --no-reuse  # run the arms it would reuse
    python -m scripts.reproduce reproduce-all --dry-run          # print the commands, run nothing
    python -m scripts.reproduce --list                           # every reproduction, one line each
    python -m scripts.reproduce reproduce-mnist --resume multirun/reproduce/<time>  # continue it
    python -m scripts.reproduce reproduce-renorm hydra/launcher=submitit_slurm \
        hydra.launcher.timeout_min=60 hydra.launcher.partition=cpu  # each job a Slurm job

Jobs write under ``multirun/reproduce/<time>/<name>/``; each job's output goes to
``logs/<job>.log`` there. ``--jobs`` worker processes run the jobs one after another, so
Python, torch and the study start once per worker rather than once per job
(``scripts/job_worker.py``; a job's runs come out the same either way); ``--fresh-processes``
starts a process for every job. A failed job is named at the end (its log's last lines)
while the others run on; a reproduction with a failed job is not collected, so ``results/``
keeps its earlier numbers. Hydra overrides given here reach every job (replacing the job's
own value of the same key), and a reproduction that would reuse another's runs
(``collect --reuse``) runs them instead, since the overrides may change what they were run
with. Imports only the standard library and the registry, so ``make help`` can list the
reproductions before the environment exists.

Interrupted, a reproduction continues where it stopped. SIGINT (Ctrl-C), SIGTERM or SIGHUP
stops every job at once, each with the processes it started (every job runs in a process group
of its own, which the runner ends), prints one line that says how to resume, and exits with
128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM). ``--resume FOLDER`` continues the
run folder FOLDER (``multirun/reproduce/<time>``) with the reproductions, overrides, ``--nproc``,
``--no-reuse`` and ``--home`` it was started with (``FOLDER/reproduce.json`` records them;
names or overrides given with ``--resume`` must be those): a job that ended with exit status 0
and left its runs finished (each with its ``summary.json``) is kept, every other job runs again
with ``resume=true`` where it had started, so each of its runs continues from its last
checkpoint (a sweep's finished runs are passed over) and comes out as in an uninterrupted
reproduction; a reproduction already collected is left as it is. A reproduction that ended
with a failed job resumes the same way. Each job's earlier log is kept as ``<job>.<k>.log``,
and the wall time collected counts every part of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.kit.overrides import hydra_quoted
from experiments.studies import REPRODUCTIONS, Job, Reproduction, study_of_reproduction
from scripts.job_worker import ProcessGroups, WorkerPool

REPO = Path(__file__).resolve().parents[1]
RECORD = "reproduce.json"  # in the run folder: what --resume continues
# The documents written from the committed results, in order: a group whose figures rewrite one
# of them rewrites them all (scripts.claims, scripts.report, scripts.results_readme).
DOCUMENTS = (("claims",), ("report",), ("results_readme",))
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def expand(names: list[str]) -> list[Reproduction]:
    """The reproductions that train, in the order given, members in place of a group (each once)."""
    out: list[Reproduction] = []
    for name in names:
        r = REPRODUCTIONS[name]
        for leaf in expand(list(r.members)) if r.members else [r]:
            if leaf not in out:
                out.append(leaf)
    return out


def group_plots(names: list[str], failed: Collection[str] = ()) -> list[tuple[str, ...]]:
    """The figures of the groups among ``names`` (and groups inside them), inner groups first;
    not those of a group one of whose reproductions is in ``failed``."""
    out: list[tuple[str, ...]] = []
    for name in names:
        r = REPRODUCTIONS[name]
        if r.members:
            out += [p for p in group_plots(list(r.members), failed) if p not in out]
            if not any(leaf.name in failed for leaf in expand([name])):
                out += [p for p in with_documents(r.plots) if p not in out]
    return out


def with_documents(plots: tuple[tuple[str, ...], ...]) -> list[tuple[str, ...]]:
    """``plots``, with every document after the figures where they rewrite one of them."""
    if not any(p in DOCUMENTS for p in plots):
        return list(plots)
    return [p for p in plots if p not in DOCUMENTS] + list(DOCUMENTS)


def module_of(r: Reproduction) -> str:
    return f"experiments.{r.module or study_of_reproduction(r.name).name}"


def with_overrides(args: tuple[str, ...], extra: list[str]) -> list[str]:
    """``args`` with every key that ``extra`` sets replaced by ``extra``'s value."""
    keys = {e.split("=", 1)[0].lstrip("+~") for e in extra}
    return [a for a in args if a.split("=", 1)[0].lstrip("+~") not in keys] + extra


def reused(r: Reproduction, extra: list[str], no_reuse: bool) -> tuple[str, ...]:
    """The setups ``r`` takes from an earlier collection instead of running them."""
    if r.collect is None or r.collect.reuse is None or no_reuse or extra:
        return ()
    return r.collect.reuse.setups


LAUNCHER = "hydra/launcher="  # an override choosing Hydra's launcher (submitit_slurm, ...)


def launched(extra: list[str]) -> bool:
    """Whether the overrides run every job through a Hydra launcher (``hydra/launcher=...``)."""
    return any(e.lstrip("+").startswith(LAUNCHER) for e in extra)


def command(r: Reproduction, job: Job, folder: Path, extra: list[str], nproc: int) -> list[str]:
    """The training command of ``job``, writing into ``folder``. With a launcher among the
    overrides every job is a Hydra multirun (a job of one run too), so the launcher runs it
    (``hydra/launcher=submitit_slurm``: on the cluster, the runner waiting for it)."""
    launch = [sys.executable, "-m"]
    if r.distributed:
        launch += ["torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m"]
    sweep = job.sweep or launched(extra)
    where = [f"hydra.{'sweep' if sweep else 'run'}.dir={hydra_quoted(str(folder))}"]
    where = ["-m", *where] if sweep else where
    threads = [] if r.distributed else ["threads=1"]
    return [*launch, module_of(r), *where, *with_overrides((*threads, *job.args), extra)]


def recorded_command(r: Reproduction, extra: list[str], nproc: int) -> str:
    """What ``summary.json`` records as the command: the make target, or the runner's command
    line when overrides or GPUs were given."""
    if not extra and not r.distributed:
        return f"make {r.name}"
    gpus = [f"--nproc {nproc}"] if r.distributed else []
    return " ".join(["python -m scripts.reproduce", r.name, *gpus, *extra])


def collect_command(
    r: Reproduction, runs: Path, wall_s: float | None, reuse: bool, recorded: str
) -> list[str]:
    c = r.collect
    assert c is not None
    cmd = [sys.executable, "-m", "scripts.collect", module_of(r).split(".")[1], str(runs)]
    cmd += ["--out", f"results/{c.out}"]
    if c.sweep:
        cmd.append("--sweep")
        if c.curves:
            cmd += ["--curves", f"results/{c.curves}"]
        if c.curve_metrics:
            cmd += ["--curve-metrics", ",".join(c.curve_metrics)]
    else:
        cmd += ["--command", recorded]
        if wall_s is not None:
            cmd += ["--wall-time", f"{wall_s:.0f}"]
        if c.metrics:
            cmd += ["--metrics", ",".join(c.metrics)]
    if reuse and c.reuse is not None:
        cmd += ["--reuse", f"results/{c.reuse.folder}", "--reuse-setups", ",".join(c.reuse.setups)]
    return cmd


def plot_command(plot: tuple[str, ...]) -> list[str]:
    """``python -m scripts.<plot> <args>``: a figure script (or the claims table, the report)."""
    return [sys.executable, "-m", f"scripts.{plot[0]}", *plot[1:]]


@dataclass
class Task:
    """One job of one reproduction's stage, as the scheduler tracks it."""

    r: Reproduction
    stage: int
    job: Job
    runs: Path  # the reproduction's run folder
    args: list[str] = field(default_factory=list)  # set when its stage starts
    started: float = 0.0
    seconds: float = 0.0

    @property
    def folder(self) -> Path:
        return self.runs / self.job.name

    @property
    def log(self) -> Path:
        return self.runs / "logs" / f"{self.job.name.replace('/', '_')}.log"


@dataclass
class Record:
    """A run folder's ``reproduce.json``: the request (the reproductions, overrides,
    ``--nproc``, ``--no-reuse``, ``--home``), the jobs of each reproduction that ended with exit
    status 0, the reproductions collected, and the wall seconds each has run: what ``--resume``
    continues."""

    names: list[str]
    extra: list[str]
    nproc: int
    no_reuse: bool
    home: str
    done: dict[str, list[str]] = field(default_factory=dict)
    collected: list[str] = field(default_factory=list)
    wall_s: dict[str, float] = field(default_factory=dict)

    def save(self, folder: Path) -> None:
        """Written whole, then renamed over the last: an interruption leaves one or the other."""
        tmp = folder / f"{RECORD}.tmp"
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        os.replace(tmp, folder / RECORD)

    @classmethod
    def load(cls, folder: Path) -> Record:
        """The record in ``folder``; OSError, ValueError or TypeError where there is none."""
        return cls(**json.loads((folder / RECORD).read_text()))


def holds_finished_runs(folder: Path) -> bool:
    """Whether a job's ``folder`` holds runs, each finished: a ``summary.json``, and no
    ``metrics.csv`` without one beside it (as collection sees them: hidden folders aside)."""

    def visible(path: Path) -> bool:
        return not any(part.startswith(".") for part in path.relative_to(folder).parts)

    summaries = {p.parent for p in folder.rglob("summary.json") if visible(p)}
    started = {p.parent for p in folder.rglob("metrics.csv") if visible(p)}
    return bool(summaries) and started <= summaries


class Interrupted(BaseException):
    """A stop signal (SIGINT, SIGTERM, SIGHUP), raised once in the runner's main thread. Not an
    Exception, so the handlers that let the other reproductions run on let it through."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Signals:
    """While installed, the first stop signal raises :class:`Interrupted` in the main thread;
    later ones are ignored, so they do not cut the stop short. Within :meth:`held` the signal
    waits for the block's end: a process being started is recorded before the stop."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.received: int | None = None
        self.holding = self.pending = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # else Python refuses
            self.received, self.holding, self.pending = None, False, False
            self.previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}

    def restore(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is not None:
            return
        self.received = signum
        if self.holding:
            self.pending = True
        else:
            raise Interrupted(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread() or self.holding:
            yield  # signal handlers run in the main thread only
            return
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            if self.pending:
                self.pending = False
                raise Interrupted(self.received)


_signals = _Signals()


def _tail(log: Path, lines: int = 5) -> str:
    try:
        return "".join(log.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # the repository's code whatever the working folder holds (--home may be another copy)
    return {**os.environ, "PYTHONPATH": path, "PYTHONSAFEPATH": "1"}


_workers: WorkerPool | None = None  # main() sets it: the jobs' processes, kept between jobs
# every other process: the data's, --fresh-processes jobs, collection, figures
_children = ProcessGroups()


def _run(cmd: list[str], log: Path | None = None, cwd: Path = REPO) -> int:
    if log is not None and _workers is not None and cwd == REPO and _workers.takes(cmd):
        return _workers.run(cmd, log)  # the pool was given the environment once
    if log is None:
        return _call(cmd, cwd)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        rc = _call(cmd, cwd, stdout=f, stderr=subprocess.STDOUT)
        if _children.stopped:  # as a worker's job says it (scripts/job_worker.py)
            f.write(
                f"\nthe job's process was stopped (the runner was interrupted) with exit status {rc}\n"
            )
    return rc


def _call(cmd: list[str], cwd: Path, **popen: Any) -> int:
    """``cmd``'s exit status; it runs in a process group of its own, which a stop ends."""
    with _signals.held():
        process = _children.start(cmd, cwd=cwd, env=_env(), **popen)
    rc = _wait(process)
    _children.forget(process)  # not when interrupted: the stop ends it
    return rc


# A signal that comes after Python's last check and before a wait blocks is handled when the
# wait returns: the main thread's waits last at most this long.
SIGNAL_LATENCY_S = 1.0


def _wait(process: subprocess.Popen) -> int:
    """``process``'s exit status; the main thread (where signals are handled) waits in slices."""
    if threading.current_thread() is not threading.main_thread():
        return process.wait()
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return process.wait(SIGNAL_LATENCY_S)


def _stop_processes() -> None:
    """End every job and every other process the runner started, with their children."""
    if _workers is not None:
        _workers.stop()
    _children.stop()


def _keep_earlier_log(log: Path) -> None:
    """A resumed job's log of its earlier part, kept as ``<job>.<k>.log`` beside the new one."""
    k = 1
    while (earlier := log.with_suffix(f".{k}.log")).exists():
        k += 1
    log.rename(earlier)


def _timed(cmd: list[str], log: Path) -> tuple[int, float]:
    """A job's exit status and the moment it ended, taken in its own thread: a collection that
    holds the scheduler meanwhile does not count in the job's time."""
    rc = _run(cmd, log)
    return rc, time.monotonic()


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


class Runner:
    """Runs the jobs of several reproductions on ``jobs`` cores, each reproduction's stages in
    order, and collects and plots each one as soon as its jobs (and those it ``needs``) are done."""

    def __init__(self, rs: list[Reproduction], root: Path, extra: list[str], jobs: int,
                 nproc: int, no_reuse: bool, dry_run: bool, home: Path = REPO,
                 record: Record | None = None) -> None:  # fmt: skip
        self.rs, self.root, self.extra, self.nproc, self.home = rs, root, extra, nproc, home
        self.jobs = 1 if any(r.distributed for r in rs) else jobs
        self.no_reuse, self.dry_run = no_reuse, dry_run
        self.record = record  # saved as jobs end; --resume's, what ran before
        self.names = {r.name for r in rs}
        self.start = time.monotonic()
        earlier = record or Record([], [], 1, False, "")
        self.begun = {n: self.start - s for n, s in earlier.wall_s.items() if n in self.names}
        collected = self.names & set(earlier.collected)
        self.done_stages = {r.name: len(r.stages) if r.name in collected else 0 for r in rs}
        self.finished: set[str] = set(collected)  # collected (or nothing to collect)
        self.kept = {  # the jobs that finished before a --resume
            r.name: {
                j for j in earlier.done.get(r.name, ()) if holds_finished_runs(self.folder(r) / j)
            }
            for r in rs
        }
        self.stopped = 0  # the jobs an interruption stopped
        self.failed: dict[str, list[str]] = {}
        self.pending: list[Task] = []
        self.running: dict[Future, Task] = {}
        self.total = sum(len(self._jobs(r, s)) for r in rs for s in range(len(r.stages)))
        self.launched = 0  # jobs started
        self.count = 0  # jobs ended
        self.spent = 0.0  # wall seconds of the jobs done, and their estimates
        self.spent_estimate = 0.0

    def _jobs(self, r: Reproduction, stage: int) -> list[Job]:
        """The jobs of the stage that run: not those reused, nor those kept from before."""
        if r.name in self.finished:  # collected before a --resume
            return []
        skip = set(reused(r, self.extra, self.no_reuse)) | self.kept[r.name]
        return [j for j in r.stages[stage] if j.name not in skip]

    def folder(self, r: Reproduction) -> Path:
        return self.root / r.name

    def _queue_stage(self, r: Reproduction, stage: int) -> None:
        extra = list(self.extra)
        if stage > 0 and r.between:
            module, function = r.between.split(":")
            if self.dry_run:
                extra.append(f"<{r.between} of stage {stage}'s runs>")
            else:
                try:
                    extra += getattr(importlib.import_module(module), function)(self.folder(r))
                except Exception as e:  # its one-line error (OneLineError) too: the others run on
                    self.failed.setdefault(r.name, []).append(f"{r.between} ({e})")
                    self.finished.add(r.name)
                    print(f"failed: {r.name}: {r.between}: {e}", flush=True)
                    return
                print(
                    f"{r.name}: stage {stage + 1} with {' '.join(extra[len(self.extra) :])}",
                    flush=True,
                )
        jobs = self._jobs(r, stage)
        for job in jobs:
            task = Task(r, stage, job, self.folder(r))
            # started before (a --resume): each of its runs goes on from its checkpoint
            again = ["resume=true"] if task.folder.exists() else []
            task.args = command(r, job, task.folder, [*extra, *again], self.nproc)
            self.pending.append(task)
        self.pending.sort(key=lambda t: -t.job.estimate_s)
        if not jobs:  # every job of the stage reused
            self.done_stages[r.name] = stage + 1
            if stage + 1 < len(r.stages):
                self._queue_stage(r, stage + 1)

    def _time_left(self) -> str:
        remaining = sum(t.job.estimate_s for t in self.pending)
        remaining += sum(t.job.estimate_s for t in self.running.values())
        remaining += sum(
            j.estimate_s
            for r in self.rs
            for s in range(self.done_stages[r.name] + 1, len(r.stages))
            for j in self._jobs(r, s)
        )
        scale = self.spent / self.spent_estimate if self.spent_estimate else 1.0
        basis = "measured so far" if self.spent_estimate else "the registry's estimates"
        return f"about {_minutes(remaining * scale / self.jobs)} left ({basis})"

    def _launch(self, pool: ThreadPoolExecutor) -> None:
        while self.pending and len(self.running) < self.jobs:
            task = self.pending.pop(0)
            self.begun.setdefault(task.r.name, time.monotonic())
            if self.dry_run:
                print(shlex.join(task.args))
                self._finish(task, 0)
                continue
            self.launched += 1
            print(
                f"[{self.launched}/{self.total}] started {task.r.name} {task.job.name} "
                f"at {time.strftime('%H:%M:%S')}",
                flush=True,
            )
            if task.log.exists():
                _keep_earlier_log(task.log)
            task.started = time.monotonic()
            self.running[pool.submit(_timed, task.args, task.log)] = task

    def _finish(self, task: Task, rc: int, ended: float | None = None) -> None:
        r = task.r
        self.count += 1
        if not self.dry_run:
            task.seconds = (ended or time.monotonic()) - task.started
            if rc == 0:  # a failed job says nothing about how long the others take
                self.spent += task.seconds
                self.spent_estimate += task.job.estimate_s
                if self.record is not None:
                    done = self.record.done.setdefault(r.name, [])
                    done += [] if task.job.name in done else [task.job.name]
                    self.record.save(self.root)
            if rc:
                self.failed.setdefault(r.name, []).append(task.job.name)
                print(
                    f"{_tail(task.log)}failed: {r.name} {task.job.name} (exit {rc}; log: {task.log})",
                    flush=True,
                )
            print(
                f"[{self.count}/{self.total}] {r.name} {task.job.name}: "
                f"{'failed' if rc else 'done'} in {_minutes(task.seconds)}; {self._time_left()}",
                flush=True,
            )
        stage_jobs = [
            t for t in [*self.pending, *self.running.values()] if t.r is r and t.stage == task.stage
        ]
        if not stage_jobs:
            self.done_stages[r.name] = task.stage + 1
            if r.name in self.failed:
                self.finished.add(r.name)
            elif task.stage + 1 < len(r.stages):
                self._queue_stage(r, task.stage + 1)

    def _collect_ready(self) -> None:
        for r in self.rs:
            if r.name in self.finished or self.done_stages[r.name] < len(r.stages):
                continue
            if any(n in self.names and n not in self.finished for n in r.needs):
                continue
            if any(n in self.failed for n in r.needs if n in self.names) and reused(
                r, self.extra, self.no_reuse
            ):  # it would take runs of the one that failed
                self.failed.setdefault(r.name, []).append(f"(needs {', '.join(r.needs)})")
                self.finished.add(r.name)
                continue
            self.finished.add(r.name)
            self.collect(r)

    def collect(self, r: Reproduction) -> None:
        runs = self.folder(r)
        if not self.dry_run:  # every run reused: no job made it
            runs.mkdir(parents=True, exist_ok=True)
        wall = time.monotonic() - self.begun.get(r.name, self.start)
        steps = []
        if r.collect is not None:
            reuse = bool(reused(r, self.extra, self.no_reuse))
            recorded = recorded_command(r, self.extra, self.nproc)
            steps.append(collect_command(r, runs, wall, reuse, recorded))
        steps += [plot_command(p) for p in r.plots]
        for cmd in steps:
            if self.dry_run:
                print(shlex.join(cmd))
            elif _run(cmd, cwd=self.home):
                self.failed.setdefault(r.name, []).append(" ".join(cmd[2:4]))
                print(f"failed: {' '.join(cmd)}", flush=True)
                return
        if not self.dry_run:
            wall = time.monotonic() - self.begun.get(r.name, self.start)
            print(
                f"{r.name}: wall time (training, collection and figures): {wall:.0f} s", flush=True
            )
            if self.record is not None:
                self.record.collected.append(r.name)
                self.record.wall_s[r.name] = wall
                self.record.save(self.root)

    def _save_wall_times(self) -> None:
        """The wall time of each reproduction begun and not collected, for a --resume to go on
        counting from."""
        if self.record is None or self.dry_run:
            return
        now = time.monotonic()
        for name, begun in self.begun.items():
            if name not in self.record.collected:
                self.record.wall_s[name] = now - begun
        self.record.save(self.root)

    def _header(self) -> str:
        kept = sum(len(jobs) for jobs in self.kept.values())
        before = [f"{kept} finished before, kept"] if kept else []
        before += [f"{', '.join(sorted(self.finished))} collected before"] if self.finished else []
        resumed = f" left ({'; '.join(before)})" if before else ""
        return (
            f"{self.total} jobs{resumed}, {self.jobs} at a time; {self._time_left()}; "
            f"runs in {self.root}"
        )

    def run(self) -> int:
        """Every job, collection and figure; 0, or 1 if any failed. Interrupted (or failing
        itself), it stops every job first: their threads end with them."""
        for r in self.rs:
            if r.stages and r.name not in self.finished:
                self._queue_stage(r, 0)
        if not self.dry_run:
            print(self._header(), flush=True)
        pool = ThreadPoolExecutor(self.jobs)
        try:
            self._launch(pool)
            self._collect_ready()
            while self.running:
                futures = list(self.running)
                done, _ = wait(futures, timeout=SIGNAL_LATENCY_S, return_when=FIRST_COMPLETED)
                for future in done:
                    self._finish(self.running.pop(future), *future.result())
                self._launch(pool)
                self._collect_ready()
            self._collect_ready()
        except BaseException:
            self.stopped = len(self.running)
            _stop_processes()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self._save_wall_times()
        if self.failed:
            for name, what in self.failed.items():
                print(
                    f"error: {name} not collected: {', '.join(what)} failed (logs in {self.folder(REPRODUCTIONS[name])}/logs)"
                )
            return 1
        return 0


def _is_override(item: str) -> bool:
    """Whether a command-line item is a Hydra override: ``key=value``, or ``~key`` (delete)."""
    return "=" in item or item.startswith("~")


def _is_false_override(item: str, key: str) -> bool:
    """Whether ``item`` sets ``key`` to a false boolean, in any spelling OmegaConf reads as one."""
    name, _, value = item.partition("=")
    return name.lstrip("+") == key and value.strip().lower() in ("false", "no", "off", "n", "0")


def prepare_data(rs: list[Reproduction], extra: list[str], dry_run: bool) -> None:
    """Fetch and verify each dataset once, before any job (two jobs must not copy the same files
    at once); with ``data.download=false`` the jobs read ``data.root`` as it is."""
    if any(_is_false_override(e, "data.download") for e in extra):
        return
    root = next(
        (e.split("=", 1)[1] for e in extra if e.split("=", 1)[0].lstrip("+") == "data.root"),
        "data",
    )
    for name in dict.fromkeys(d for r in rs for d in r.data):
        cmd = [sys.executable, "-m", "experiments.kit.data", name, root]
        if dry_run:
            print(shlex.join(cmd))
        elif _run(cmd):
            raise SystemExit(f"error: the {name} data could not be prepared (above)")


def redraw(home: Path) -> int:
    """Every reproduction's figures from the committed results (offline), then the documents
    written from them (the claims table, the report, results/README.md): ``make figures``."""
    drawn = dict.fromkeys(p for r in REPRODUCTIONS.values() for p in r.plots)
    # a script run without arguments draws all it can (plot_mnist: every dataset and sweep)
    plots = [p for p in drawn if (len(p) == 1 or (p[0],) not in drawn) and p not in DOCUMENTS]
    for plot in [*plots, *DOCUMENTS]:
        if _run(plot_command(plot), cwd=home):
            print(f"error: scripts.{plot[0]} failed (above)")
            return 1
    return 0


def _new_folder(parent: Path) -> Path:
    """``parent/<time>``, or ``<time>-2``, ... if a runner started in the same second has it."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder, n = parent / stamp, 1
    while folder.exists():
        n += 1
        folder = parent / f"{stamp}-{n}"
    return folder


def listing() -> str:
    return "\n".join(f"  {name:20} {r.help}" for name, r in REPRODUCTIONS.items())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("items", nargs="*", help="reproductions, then Hydra overrides (key=value)")
    p.add_argument("--jobs", type=int, default=2, help="training processes at a time (default 2)")
    p.add_argument(
        "--nproc", type=int, help="GPUs per job of a distributed reproduction (default 1)"
    )
    p.add_argument(
        "--no-reuse", action="store_true", help="run the arms a reproduction would reuse"
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--list", action="store_true", help="list the reproductions")
    p.add_argument("--names", action="store_true", help="their names, on one line (the Makefile)")
    p.add_argument(
        "--figures",
        action="store_true",
        help="redraw every figure, then the claims, the report and results/README.md",
    )
    p.add_argument("--out", type=Path, help="the run folder (default multirun/reproduce/<time>)")
    p.add_argument(
        "--resume",
        type=Path,
        metavar="FOLDER",
        help="continue the interrupted (or failed) run in the run folder FOLDER as it was "
        f"started ({RECORD} there): its finished jobs are kept, the others go on from their "
        "checkpoints",
    )
    p.add_argument(
        "--fresh-processes",
        action="store_true",
        help="start a process for every job (default: --jobs processes run the jobs one after "
        "another, so Python, torch and the study start once; scripts/job_worker.py)",
    )
    p.add_argument(
        "--home", type=Path, help="the folder whose results/ is written (default: this checkout)"
    )
    return p


def _resumed(
    p: argparse.ArgumentParser, args: argparse.Namespace, names: list[str], extra: list[str]
) -> Record:
    """The record of the run folder that ``--resume`` names, checked against what else was
    given: what changes a job's runs must be as it was."""
    folder = args.resume.resolve()
    if args.out is not None:
        p.error("--resume continues its own run folder: give no --out")
    try:
        record = Record.load(folder)
    except (OSError, ValueError, TypeError) as e:
        p.error(f"--resume {folder}: no run of this runner to continue there ({RECORD}: {e})")
    if (names and names != record.names) or (extra and extra != record.extra):
        ran = shlex.join([*record.names, *record.extra])
        p.error(
            f"{folder} ran {ran}: give those reproductions and overrides with --resume, or none"
        )
    if args.nproc is not None and args.nproc != record.nproc:
        p.error(f"{folder} ran with --nproc {record.nproc}")
    if args.no_reuse and not record.no_reuse:
        p.error(f"{folder} ran without --no-reuse")
    if args.home is not None and str(args.home.resolve()) != record.home:
        p.error(f"{folder} writes its results into --home {record.home}")
    return record


def _close_workers() -> None:
    global _workers
    if _workers is not None:
        _workers.close()
        _workers = None


def _interrupted(runner: Runner | None, names: list[str], root: Path, dry_run: bool) -> str:
    """The one line an interrupted runner prints: the jobs it stopped, how to resume."""
    n = runner.stopped if runner is not None else 0
    line = f"interrupted: {n} job{'' if n == 1 else 's'} stopped"
    if dry_run:
        return line
    again = shlex.join(["python", "-m", "scripts.reproduce", *names, "--resume", str(root)])
    return f"{line}; resume with: {again}"


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_intermixed_args(argv)
    if args.list or args.names:
        print(listing() if args.list else " ".join(REPRODUCTIONS))
        return 0
    if args.figures:
        return redraw((args.home or REPO).resolve())
    names = [i for i in args.items if not _is_override(i)]
    extra = [i for i in args.items if _is_override(i)]
    record = _resumed(p, args, names, extra) if args.resume is not None else None
    if record is not None:
        names, extra = record.names, record.extra
    nproc = record.nproc if record else 1 if args.nproc is None else args.nproc
    no_reuse = record.no_reuse if record else args.no_reuse
    home = Path(record.home) if record else (args.home or REPO).resolve()
    if not names:
        p.error("name a reproduction (--list lists them)")
    if unknown := [n for n in names if n not in REPRODUCTIONS]:
        p.error(f"no reproduction {', '.join(unknown)}; --list lists them")
    if args.jobs < 1 or nproc < 1:
        p.error("--jobs and --nproc must be at least 1")
    if data := [e for e in extra if e.split("=", 1)[0].lstrip("+~") in ("data", "data.name")]:
        p.error(
            f"{data[0]}: a reproduction's data are part of it (its results folder names them); "
            "choose the reproduction for those data, or run python -m experiments.<study> data=..."
        )
    rs = expand(names)
    for r in rs:
        given = {e.split("=", 1)[0].lstrip("+") for e in extra}
        if missing := [k for k in r.requires if k not in given]:
            p.error(f"{r.name} needs {', '.join(f'{k}=...' for k in missing)}")
    if record is not None:
        root = args.resume.resolve()
    else:
        root = (args.out or _new_folder(REPO / "multirun" / "reproduce")).resolve()
        record = Record(names, extra, nproc, no_reuse, str(home))
        if not args.dry_run:
            try:  # made here, at once: two runners started in the same second get one each
                root.mkdir(parents=True)
            except FileExistsError:
                p.error(
                    f"{root} exists; give a new folder (nothing of an earlier run is overwritten)"
                )
            record.save(root)
    global _workers, _children
    _children = ProcessGroups()
    _signals.install()
    runner: Runner | None = None
    try:
        prepare_data(rs, extra, args.dry_run)
        if not args.dry_run:
            home.mkdir(parents=True, exist_ok=True)
        runner = Runner(rs, root, extra, args.jobs, nproc, no_reuse, args.dry_run, home, record)
        # a launcher's jobs run from their own process, as Hydra's command line starts them
        fresh = args.fresh_processes or args.dry_run or launched(extra)
        _workers = None if fresh else WorkerPool(_env(), REPO)
        code = runner.run()
        _close_workers()
        for plot in group_plots(names, runner.failed):
            cmd = plot_command(plot)
            if args.dry_run:
                print(shlex.join(cmd))
            elif _run(cmd, cwd=home):
                code = 1
        if not args.dry_run:
            print(f"{' '.join(names)}: {time.monotonic() - runner.start:.0f} s in all", flush=True)
        return code
    except Interrupted as e:
        _stop_processes()
        print(_interrupted(runner, names, root, args.dry_run), flush=True)
        return 128 + e.signum
    finally:
        _close_workers()
        _signals.restore()


def cli() -> None:
    """The console command ``bn-reproduce``: ``python -m scripts.reproduce``. A run stopped by a
    signal ends with ``128 + signal``; from when :func:`main` has restored the handlers to the
    process's exit, a further stop signal (a second Ctrl-C) is ignored rather than ending the
    process by the signal instead."""
    code = main()
    if code > 128:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    cli()
