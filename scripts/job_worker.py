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
own; ``tests/scripts/test_job_worker.py`` checks that bit for bit.

A worker that dies in a job (a crash, the kernel's OOM killer) fails that job only: the pool
starts a new worker for the next one. ``python -m scripts.reproduce --fresh-processes`` runs
every job in a process of its own instead.

Protocol (the pool and its workers): one JSON object per line on the worker's standard input,
``{"argv": ["-m", module, *args], "log": path}``; one line back on its standard output,
``{"rc": status}``, once the job is over. The module imports only the standard library; a
worker imports torch when it starts.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path


def _status(code: object) -> int:
    """The exit status of ``sys.exit(code)``; a message is printed, as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _ProcessState:
    """What a process starts with that a job may change for the rest of its process."""

    def __init__(self) -> None:
        import torch  # every job trains with it; imported once, here

        self.cwd, self.environ = os.getcwd(), dict(os.environ)
        self.torch, self.threads = torch, torch.get_num_threads()


def _run_module(argv: list[str], log: Path, start: _ProcessState) -> int:
    """Run ``python <argv>`` (``-m module args``) in this process, its output in ``log``."""
    import runpy
    import traceback

    sys.stdout.flush()
    sys.stderr.flush()
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
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _forget_job(start)
    return rc


def _forget_job(start: _ProcessState) -> None:
    """Leave nothing of a job to the next: Hydra's global state, the job's log handlers, and
    the working folder, environment and torch thread count the worker started with."""
    os.chdir(start.cwd)
    os.environ.clear()
    os.environ.update(start.environ)
    start.torch.set_num_threads(start.threads)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    if "hydra" in sys.modules:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()


def serve() -> None:
    """The worker: jobs from standard input until it closes."""
    replies = os.fdopen(os.dup(1), "w")  # standard output becomes each job's log
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    start = _ProcessState()
    for line in sys.stdin:
        request = json.loads(line)
        rc = _run_module(request["argv"], Path(request["log"]), start)
        os.dup2(null, 1)  # between jobs, nothing writes into the last one's log
        os.dup2(null, 2)
        replies.write(json.dumps({"rc": rc}) + "\n")
        replies.flush()


class WorkerPool:
    """Workers for ``python -m`` jobs, started when first needed and reused; thread-safe: each
    of the caller's threads takes an idle worker (or starts one) for a job."""

    def __init__(self, env: Mapping[str, str], cwd: Path) -> None:
        self.env, self.cwd = dict(env), cwd
        self._idle: list[subprocess.Popen] = []
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

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "scripts.job_worker"], cwd=self.cwd, env=self.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def run(self, cmd: list[str], log: Path) -> int:
        """Run ``cmd`` in a worker, its output in ``log``; its exit status."""
        with self._lock:
            worker = self._idle.pop() if self._idle else self._start()
        try:
            worker.stdin.write(json.dumps({"argv": cmd[1:], "log": str(log)}) + "\n")
            worker.stdin.flush()
            reply = worker.stdout.readline()
        except BrokenPipeError:
            reply = ""
        if not reply:  # the worker died in the job: fail the job, not the pool
            rc = worker.wait()
            with log.open("a") as f:
                f.write(f"\nthe job's process ended with exit status {rc}\n")
            return rc or 1
        with self._lock:
            self._idle.append(worker)
        return json.loads(reply)["rc"]

    def close(self) -> None:
        """End every idle worker (each finishes when its input closes)."""
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.stdin.close()
            worker.wait()


if __name__ == "__main__":
    serve()
