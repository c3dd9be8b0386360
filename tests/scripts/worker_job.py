"""A stand-in job for tests/scripts/test_job_worker.py: ``python -m tests.scripts.worker_job
<how>`` (``key=value`` arguments, a runner's, are ignored) prints its process id (through Python and through the C library's file descriptor),
its working folder, an environment variable and torch's thread count, then ends as ``how``
says: ``ok``, ``exit3``, ``exit256`` (a status a process cannot have), ``message``
(``sys.exit`` with a text), ``raise``, ``kill`` (the process dies), ``vanish`` (the process
ends at once with exit status 0), ``dirty`` (it changes those three first), ``cprint`` (a line
through the C library's buffered ``printf``, not flushed), ``warn`` (a warning from a library
module, which Python shows once per process) or ``hang`` (it starts a process of its own, prints
``child <its pid>``, and never ends: tests/scripts/test_reproduce_interrupted.py)."""

import ctypes
import os
import signal
import subprocess
import sys
import time
import warnings

import torch

if __name__ == "__main__":
    [how] = [a for a in sys.argv[1:] if "=" not in a]
    print(f"pid {os.getpid()} argv0 {os.path.basename(sys.argv[0])}")
    variable, threads = os.environ.get("BN_WORKER_TEST"), torch.get_num_threads()
    print(f"cwd {os.getcwd()} variable {variable} threads {threads}")
    sys.stdout.flush()
    os.write(2, b"written to file descriptor 2\n")
    if how == "exit3":
        sys.exit(3)
    if how == "exit256":
        sys.exit(256)
    if how == "warn":
        import json  # a module that stays imported: the warning is recorded in its registry

        registry = vars(json).setdefault("__warningregistry__", {})
        warnings.warn_explicit("a library's warning", UserWarning, json.__file__, 1, registry=registry)  # fmt: skip
    if how == "cprint":
        ctypes.CDLL(None).printf(b"through printf\n")
    if how == "message":
        sys.exit("error: a one-line reason")
    if how == "raise":
        raise RuntimeError("a bug in the job")
    if how == "dirty":
        os.chdir("/")
        os.environ["BN_WORKER_TEST"] = "set"
        torch.set_num_threads(torch.get_num_threads() + 1)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "vanish":
        os._exit(0)
    if how == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child {child.pid}", flush=True)
        while True:
            time.sleep(1)
