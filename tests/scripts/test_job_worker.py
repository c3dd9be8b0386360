"""scripts/job_worker.py: jobs run one after another in a worker keep their output, exit status
and results as in a process of their own; a worker that dies fails only its job."""

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scripts.job_worker import Stopped, WorkerPool
from scripts.reproduce import _env
from tests.idx_files import make_dataset

REPO = Path(__file__).resolve().parents[2]


def _job(how: str) -> list[str]:
    return [sys.executable, "-m", "tests.scripts.worker_job", how]


def _pid(log: Path) -> int:
    return int(re.search(r"pid (\d+)", log.read_text()).group(1))


@pytest.mark.slow
def test_jobs_share_a_worker_keep_their_output_and_exit_status(tmp_path):
    hows = ("ok", "exit3", "exit256", "message", "raise")
    pool = WorkerPool(_env(), REPO)
    try:
        logs = {how: tmp_path / f"{how}.log" for how in hows}
        codes = {how: pool.run(_job(how), log) for how, log in logs.items()}
    finally:
        pool.close()
    own = {how: subprocess.run(_job(how), cwd=REPO, env=_env(), capture_output=True).returncode for how in hows}  # fmt: skip
    assert codes == own == {"ok": 0, "exit3": 3, "exit256": 0, "message": 1, "raise": 1}
    assert len({_pid(log) for log in logs.values()}) == 1  # one process ran them all
    for log in logs.values():
        text = log.read_text()
        assert "argv0 worker_job.py" in text  # as python -m sets it
        assert "written to file descriptor 2" in text
    assert "error: a one-line reason" in logs["message"].read_text()
    assert "RuntimeError: a bug in the job" in logs["raise"].read_text()
    assert "error: a one-line reason" not in logs["raise"].read_text()


@pytest.mark.slow
def test_a_worker_that_dies_fails_its_job_only(tmp_path):
    pool = WorkerPool(_env(), REPO)
    try:
        assert pool.run(_job("ok"), tmp_path / "before.log") == 0
        assert pool.run(_job("kill"), tmp_path / "killed.log") != 0
        assert pool.run(_job("ok"), tmp_path / "after.log") == 0
    finally:
        pool.close()
    assert "ended with exit status" in (tmp_path / "killed.log").read_text()
    assert _pid(tmp_path / "after.log") != _pid(tmp_path / "before.log")


@pytest.mark.slow
def test_a_worker_that_ends_with_status_0_mid_job_fails_the_job(tmp_path):
    """A worker that ends before it answers failed its job even where its exit status reads 0:
    the job did not finish (a status of 0 would count it done and collect its missing runs)."""
    pool = WorkerPool(_env(), REPO)
    try:
        assert pool.run(_job("vanish"), tmp_path / "vanished.log") == 1
        assert pool.run(_job("ok"), tmp_path / "after.log") == 0
    finally:
        pool.close()
    assert "ended with exit status 1" in (tmp_path / "vanished.log").read_text()


def _stand_in(pool: WorkerPool, script: str) -> None:
    """An idle worker for ``pool``: a shell running ``script`` (it reads the job's request
    first), in place of Python: the pool's handling of a worker, quickly."""
    worker = pool._workers.start(["sh", "-c", f"read request; {script}"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
    pool._idle.append(worker)


def test_a_worker_that_exits_0_without_answering_fails_its_job(tmp_path):
    pool = WorkerPool(_env(), REPO)
    try:
        _stand_in(pool, "exit 0")
        assert pool.run(_job("ok"), tmp_path / "job.log") == 1
    finally:
        pool.close()
    assert "ended with exit status 1" in (tmp_path / "job.log").read_text()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_stop_ends_the_workers_and_what_their_jobs_started(tmp_path):
    pool = WorkerPool(_env(), REPO)
    child = tmp_path / "child"
    _stand_in(pool, f"sleep 600 & echo $! > {child}; wait")  # a job with a process of its own
    with ThreadPoolExecutor(1) as threads:
        job = threads.submit(pool.run, _job("ok"), tmp_path / "job.log")
        deadline = time.monotonic() + 30
        while not child.exists() or not child.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        [worker] = pool._workers.running()
        assert pool.stop() == 1
        assert job.result(timeout=10) == -15  # SIGTERM
    assert not _alive(worker.pid) and not _alive(int(child.read_text()))
    assert "stopped (the runner was interrupted)" in (tmp_path / "job.log").read_text()
    with pytest.raises(Stopped):  # nothing starts after a stop
        pool.run(_job("ok"), tmp_path / "after.log")
    pool.close()


@pytest.mark.slow
def test_a_job_s_folder_environment_and_threads_do_not_reach_the_next(tmp_path):
    pool = WorkerPool(_env(), REPO)
    try:
        for how in ("ok", "dirty", "ok"):
            assert pool.run(_job(how), tmp_path / f"{how}.log") == 0
    finally:
        pool.close()
    first, after = (tmp_path / "dirty.log").read_text(), (tmp_path / "ok.log").read_text()
    state = re.search(r"cwd .*", first).group(0)
    assert state.startswith(f"cwd {REPO} variable None threads ")
    assert re.search(r"cwd .*", after).group(0) == state
    assert _pid(tmp_path / "dirty.log") == _pid(tmp_path / "ok.log")


@pytest.mark.slow
def test_each_job_s_log_shows_its_own_warnings(tmp_path):
    pool = WorkerPool(_env(), REPO)
    try:
        for k in range(2):
            assert pool.run(_job("warn"), tmp_path / f"warn{k}.log") == 0
    finally:
        pool.close()
    assert _pid(tmp_path / "warn0.log") == _pid(tmp_path / "warn1.log")
    for k in range(2):
        assert "a library's warning" in (tmp_path / f"warn{k}.log").read_text()


@pytest.mark.slow
def test_c_library_output_stays_in_its_own_job_s_log(tmp_path):
    pool = WorkerPool(_env(), REPO)
    try:
        assert pool.run(_job("cprint"), tmp_path / "cprint.log") == 0
        assert pool.run(_job("ok"), tmp_path / "ok.log") == 0
    finally:
        pool.close()
    assert "through printf" in (tmp_path / "cprint.log").read_text()
    assert "through printf" not in (tmp_path / "ok.log").read_text()


@pytest.mark.slow
def test_a_worker_that_died_idle_is_replaced_and_the_job_runs(tmp_path):
    pool = WorkerPool(_env(), REPO)
    try:
        assert pool.run(_job("ok"), tmp_path / "first.log") == 0
        idle = pool._idle[0]
        idle.kill()
        idle.wait()
        assert pool.run(_job("ok"), tmp_path / "second.log") == 0
        assert "pid" in (tmp_path / "second.log").read_text()
        # a job whose worker dies before its log folder exists is failed, not the runner
        assert pool.run(_job("kill"), tmp_path / "new" / "folder" / "killed.log") != 0
    finally:
        pool.close()
    assert "ended with exit status" in (tmp_path / "new/folder/killed.log").read_text()


@pytest.mark.slow
def test_jobs_from_several_threads_get_a_worker_each(tmp_path):
    pool = WorkerPool(_env(), REPO)
    try:
        with ThreadPoolExecutor(2) as threads:
            logs = [tmp_path / f"{k}.log" for k in range(4)]
            codes = list(threads.map(lambda log: pool.run(_job("ok"), log), logs))
    finally:
        pool.close()
    assert codes == [0, 0, 0, 0]
    assert 1 <= len({_pid(log) for log in logs}) <= 2


def test_only_single_process_python_jobs_go_to_a_worker():
    assert WorkerPool.takes(_job("ok"))
    assert not WorkerPool.takes([sys.executable, "-m", "torch.distributed.run", "-m", "x"])
    assert not WorkerPool.takes(["bash", "-c", "true"])


@pytest.mark.slow
def test_a_study_s_runs_in_a_worker_equal_those_of_a_process_of_their_own(tmp_path):
    make_dataset(tmp_path / "data", folder="MNIST")
    args = [
        "debug=quick", "data=mnist", f"data.root={tmp_path / 'data'}", "data.download=false",
        "data.verify=false", "threads=1", "seed=[0,1]",
    ]  # fmt: skip
    jobs = [("brn_micro4", "a"), ("bn32", "b"), ("brn_micro4", "c")]
    pool = WorkerPool(_env(), REPO)
    try:
        for setup, name in jobs:
            cmd = [sys.executable, "-m", "experiments.renorm", f"setup={setup}", *args]
            cmd.append(f"hydra.run.dir={tmp_path / name}")
            log = tmp_path / f"{name}.log"
            assert pool.run(cmd, log) == 0, log.read_text()
    finally:
        pool.close()
    own = [sys.executable, "-m", "experiments.renorm", "setup=brn_micro4", *args]
    subprocess.run([*own, f"hydra.run.dir={tmp_path / 'own'}"], cwd=REPO, env=_env(), check=True,
                   capture_output=True)  # fmt: skip
    for seed in ("seed0", "seed1"):
        own_metrics = (tmp_path / "own" / seed / "metrics.csv").read_bytes()
        # the first job of a worker, and one after another study's job
        assert (tmp_path / "a" / seed / "metrics.csv").read_bytes() == own_metrics
        assert (tmp_path / "c" / seed / "metrics.csv").read_bytes() == own_metrics


_RUNNER = """
import sys
from pathlib import Path
from scripts.job_worker import WorkerPool
from scripts.reproduce import _env
WorkerPool(_env(), Path.cwd()).run([sys.executable, "-m", "tests.scripts.worker_job", "hang"], Path(sys.argv[1]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_runner_killed_outright_takes_its_workers_and_their_jobs_with_it(tmp_path):
    """SIGKILL to the runner (it cannot stop anything): the worker in the middle of a job, and
    the process the job started, end within seconds instead of training on, orphaned."""
    log = tmp_path / "job.log"
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(log)], cwd=REPO, env=_env())
    deadline = time.monotonic() + 60
    while not (log.exists() and "child " in log.read_text()):
        assert time.monotonic() < deadline and runner.poll() is None
        time.sleep(0.05)
    worker, child = _pid(log), int(re.search(r"child (\d+)", log.read_text()).group(1))
    assert _alive(worker) and _alive(child)
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 10
    while (_alive(worker) or _alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker) and not _alive(child)
