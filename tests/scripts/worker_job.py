"""A stand-in job for tests/scripts/test_job_worker.py: ``python -m tests.scripts.worker_job
<how>`` prints its process id (through Python and through the C library's file descriptor),
then ends as ``how`` says: ``ok``, ``exit3``, ``message`` (``sys.exit`` with a text), ``raise``
or ``kill`` (the process dies)."""

import os
import signal
import sys

if __name__ == "__main__":
    how = sys.argv[1]
    print(f"pid {os.getpid()} argv0 {os.path.basename(sys.argv[0])}")
    sys.stdout.flush()
    os.write(2, b"written to file descriptor 2\n")
    if how == "exit3":
        sys.exit(3)
    if how == "message":
        sys.exit("error: a one-line reason")
    if how == "raise":
        raise RuntimeError("a bug in the job")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
