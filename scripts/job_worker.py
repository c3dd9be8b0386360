"""Training jobs run one after another in a process that stays up: what ``scripts.reproduce``
runs its jobs in.

A job is a command line ``python -m <module> <args>``. Starting Python for each one costs
several CPU-seconds before its first step (importing torch and the study, ``torch.optim``'s
first call, the W&B service, Hydra), which is a large share of a short job: the conv-net
reproductions run dozens of jobs of about a minute. A worker pays it once. It runs each job as
``python -m`` would (:func:`runpy.run_module` as ``__main__``, with the job's ``sys.argv``), its
output (file descriptors 1 and 2, so C++ libraries' too) in the job's log, and answers with the
exit status the job's own process would have had. A job's runs depend only on its own settings
and seeds (the studies seed what they draw), so they come out the same as in a process of their
own; ``tests/scripts/test_job_worker.py`` checks that bit for bit. What a job leaves in its
process is undone before the next, as its process's end would: a W&B run it left open (a failed
job's) is finished with its exit status, and Hydra's global state, the log handlers, the
record of warnings shown (so each job's log shows its own), the working folder, the environment
and torch's thread count are reset. Jobs read ``/dev/null`` as input.

A worker that dies in a job (a crash, the kernel's OOM killer) fails that job only: the pool
starts a new worker for the next one. ``python -m scripts.reproduce --fresh-processes`` runs
every job in a process of its own instead.

Each worker (and each process :class:`ProcessGroups` starts) runs in a session, so a process
group, of its own: a Ctrl-C at the terminal reaches the runner alone, not its jobs (which would
each print a KeyboardInterrupt traceback), and the runner's :meth:`WorkerPool.stop` ends every
worker's group, the processes a job started with it, at once. A job stopped so loses nothing it
has checkpointed: the training kit writes its checkpoints atomically and resumes from them.

Protocol (the pool and its workers): one JSON object per line on the worker's standard input,
``{"argv": ["-m", module, *args], "log": path}``; one line back on its standard output,
``{"rc": status}``, once the job is over. The module imports only the standard library; a
worker imports torch when it starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _status(code: object) -> int:
    """The exit status of ``sys.exit(code)``, as the process's would be; a message is printed,
    as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code) & 0xFF
    print(code, file=sys.stderr)
    return 1


class _ProcessState:
    """What a process starts with that a job may change for the rest of its process."""

    def __init__(self) -> None:
        import torch  # every job trains with it; imported once, here

        self.cwd, self.environ = os.getcwd(), dict(os.environ)
        self.torch, self.threads = torch, torch.get_num_threads()


def _flush_all() -> None:
    """Python's and the C library's buffered output, written where it belongs before the file
    descriptors move on."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)


def _run_module(argv: list[str], log: Path, start: _ProcessState) -> int:
    """Run ``python <argv>`` (``-m module args``) in this process, its output in ``log``."""
    import runpy

    _flush_all()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    module, args = argv[1], argv[2:]
    sys.argv = [module, *args]  # runpy puts the module's file first, as -m does
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as e:
        rc = _status(e.code)
    except KeyboardInterrupt:
        raise
    except BaseException:
        traceback.print_exc()
        rc = 1
    _forget_job(start, rc)
    _flush_all()
    return rc


def _forget_job(start: _ProcessState, rc: int) -> None:
    """Leave nothing of a job to the next, as the end of its own process would (see the
    module)."""
    if "wandb" in sys.modules and sys.modules["wandb"].run is not None:
        try:
            sys.modules["wandb"].finish(exit_code=rc)
        except Exception:  # said in the job's log; the next job starts its own run
            traceback.print_exc()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    if "hydra" in sys.modules:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
    for module in list(sys.modules.values()):
        registry = getattr(module, "__warningregistry__", None)
        if isinstance(registry, dict):
            registry.clear()
    os.chdir(start.cwd)
    for key in set(os.environ) - set(start.environ):
        del os.environ[key]
    for key, value in start.environ.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    start.torch.set_num_threads(start.threads)


def _end_with_the_pool(pool: int, every: float = 0.5) -> None:
    """End this worker, with what its job started, once the process that started it (the pool:
    the runner) is gone. A runner killed outright (SIGKILL, the OOM killer) cannot stop its
    workers, and a worker in the middle of a job would otherwise train on, orphaned, holding its
    run folder's lock against the ``--resume`` that continues the reproduction. The job loses
    nothing it has checkpointed, as under the runner's own stop (SIGTERM to the worker's group)."""
    while os.getppid() == pool:
        time.sleep(every)
    if os.getpgrp() == os.getpid():  # the leader of its own group, as the pool starts it
        os.killpg(os.getpid(), signal.SIGTERM)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


def serve() -> None:
    """The worker: jobs from the pool until it closes their pipe, or until the pool is gone
    (:func:`_end_with_the_pool`). Jobs get ``/dev/null`` as standard input; the pipes to the
    pool are kept on descriptors of their own."""
    threading.Thread(target=_end_with_the_pool, args=(os.getppid(),), daemon=True).start()
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")  # standard output becomes each job's log
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # between jobs, nothing writes into the last one's log
        os.dup2(null, fd)
    start = _ProcessState()
    for line in requests:
        request = json.loads(line)
        rc = _run_module(request["argv"], Path(request["log"]), start)
        os.dup2(null, 1)
        os.dup2(null, 2)
        replies.write(json.dumps({"rc": rc}) + "\n")
        replies.flush()


class Stopped(RuntimeError):
    """A process asked of a :class:`ProcessGroups` (or a job of a pool) that has been stopped."""


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    """``sig`` to every process of ``process``'s group (it leads one: see ProcessGroups)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


class ProcessGroups:
    """Processes each started in a session (so a process group) of its own and kept until
    :meth:`forget`; :meth:`stop` ends them with every process they started. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[subprocess.Popen] = []
        self.stopped = False

    def start(self, cmd: list[str], **popen: Any) -> subprocess.Popen:
        """``subprocess.Popen(cmd, **popen)`` in a new session; :class:`Stopped` once stopped."""
        with self._lock:
            if self.stopped:
                raise Stopped(f"not started (stopping): {' '.join(cmd)}")
            process = subprocess.Popen(cmd, start_new_session=True, **popen)
            self._running.append(process)
        return process

    def running(self) -> list[subprocess.Popen]:
        """The processes started and not forgotten."""
        with self._lock:
            return list(self._running)

    def forget(self, process: subprocess.Popen) -> None:
        """``process`` has ended (and was waited for): nothing of it to stop."""
        with self._lock:
            if process in self._running:
                self._running.remove(process)

    def stop(self, grace: float = 5.0) -> int:
        """SIGTERM to each process's group; ``grace`` seconds later SIGKILL to whatever is left
        of each (children of a job that outlived it, a process that ignored SIGTERM). Nothing
        starts afterwards. Returns how many processes were running."""
        with self._lock:
            self.stopped = True
            processes, self._running = self._running, []
        for process in processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
        for process in processes:
            _signal_group(process, signal.SIGKILL)
            process.wait()
        return len(processes)


class WorkerPool:
    """Workers for ``python -m`` jobs, started when first needed and reused; thread-safe: each
    of the caller's threads takes an idle worker (or starts one) for a job."""

    def __init__(self, env: Mapping[str, str], cwd: Path) -> None:
        self.env, self.cwd = dict(env), cwd
        self._idle: list[subprocess.Popen] = []
        self._workers = ProcessGroups()
        self._lock = threading.Lock()

    @staticmethod
    def takes(cmd: list[str]) -> bool:
        """Whether ``cmd`` is a job a worker can run: ``<this python> -m <module> ...`` other
        than a launcher of several processes."""
        return (
            len(cmd) >= 3
            and cmd[0] == sys.executable
            and cmd[1] == "-m"
            and cmd[2] != "torch.distributed.run"
        )

    def _take(self) -> subprocess.Popen:
        """An idle worker that is still alive, or a new one."""
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.poll() is None:
                    return worker
            return self._workers.start(
                [sys.executable, "-m", "scripts.job_worker"], cwd=self.cwd, env=self.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip

    def run(self, cmd: list[str], log: Path) -> int:
        """Run ``cmd`` in a worker, its output in ``log``; its exit status."""
        request = json.dumps({"argv": cmd[1:], "log": str(log)}) + "\n"
        for attempt in range(2):
            worker = self._take()
            try:
                worker.stdin.write(request)
                worker.stdin.flush()
                break
            except BrokenPipeError:  # it died idle: the job has not started; another worker
                if attempt:
                    raise
        try:
            rc = json.loads(worker.stdout.readline())["rc"]
        except ValueError:  # no reply: the worker died in the job; fail the job, not the pool
            return self._died(worker, log)
        with self._lock:
            self._idle.append(worker)
        return rc

    def _died(self, worker: subprocess.Popen, log: Path) -> int:
        """The exit status of a job whose worker ended without answering: never 0 (a worker
        that exits 0 mid-job did not finish it), said at the end of its log."""
        rc = worker.wait() or 1
        self._workers.forget(worker)
        why = "was stopped (the runner was interrupted)" if self._workers.stopped else "ended"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"\nthe job's process {why} with exit status {rc}\n")
        return rc

    def stop(self, grace: float = 5.0) -> int:
        """End every worker now, and the job in it with every process it started (SIGTERM,
        then SIGKILL after ``grace`` seconds); a job asked of the pool afterwards raises
        :class:`Stopped`. Returns how many workers there were."""
        with self._lock:
            self._idle = []
        return self._workers.stop(grace)

    def close(self, timeout: float = 30.0) -> None:
        """End every worker: an idle one finishes when its input closes; one still in a job
        is given ``timeout`` seconds, then stopped."""
        with self._lock:
            self._idle = []
        workers = self._workers.running()
        for worker in workers:
            with contextlib.suppress(BrokenPipeError):
                worker.stdin.close()
        deadline = time.monotonic() + timeout
        for worker in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(max(0.0, deadline - time.monotonic()))
            if worker.poll() is not None:  # ended: what it leaves behind is left alone
                self._workers.forget(worker)
        self._workers.stop(grace=0.0)  # those still in a job


if __name__ == "__main__":
    serve()
