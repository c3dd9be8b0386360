"""scripts.gpu_check's plumbing, without a GPU: stage choice, time limits, and the kill that stands
in for a machine's loss in the kill-and-resume check."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import gpu_check


def test_an_unknown_stage_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gpu_check", str(tmp_path / "out"), "--stages", "tests,typo"])
    with pytest.raises(SystemExit, match=r"unknown stage\(s\) \['typo'\]"):
        gpu_check.main()
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_run_kills_the_whole_process_group_at_its_limit(tmp_path):
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    with (tmp_path / "log").open("w") as log:
        t0 = time.monotonic()
        rc = gpu_check.run([sys.executable, "-c", child], log, limit=1)
    assert rc == 124 and time.monotonic() - t0 < 30
    assert "[killed after 1 s]" in (tmp_path / "log").read_text()


@pytest.mark.slow
def test_kill_run_kills_every_process_with_the_token_and_no_other(tmp_path):
    token = f"hydra.run.dir={tmp_path}"
    sleep = "import time; print('up', flush=True); time.sleep(60)"
    mine = subprocess.Popen([sys.executable, "-c", sleep, token], stdout=subprocess.PIPE)
    other = subprocess.Popen([sys.executable, "-c", sleep, token + "x"], stdout=subprocess.PIPE)
    try:
        # Popen returns once exec has begun, but the kernel fills /proc/<pid>/cmdline a moment
        # later: under load a scan at once can read it empty. Wait until both run Python code.
        assert mine.stdout.readline() == b"up\n" and other.stdout.readline() == b"up\n"
        gpu_check.kill_run(token)
        assert mine.wait(timeout=10) == -9
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()
            proc.stdout.close()


def test_the_stage_shares_cover_the_budget():
    assert set(gpu_check.STAGES) == set(gpu_check.STAGE_FUNCTIONS)
    assert sum(gpu_check.STAGES.values()) == pytest.approx(1.0)


@pytest.mark.slow
def test_a_timed_out_training_run_loses_its_workers_in_other_sessions(tmp_path):
    """torchrun starts its workers in sessions of their own: killing its group is not enough."""
    pid_file = tmp_path / "worker.pid"
    parent = (
        "import subprocess, sys, time; "
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]],"
        " start_new_session=True); "
        f"open({str(pid_file)!r}, 'w').write(str(w.pid)); time.sleep(60)"
    )
    token = f"hydra.run.dir={tmp_path}"
    with (tmp_path / "log").open("w") as log:
        assert gpu_check.run([sys.executable, "-c", parent, token], log, limit=2) == 124
    worker = int(pid_file.read_text())
    for _ in range(50):  # reaped by init once killed
        if (
            not Path(f"/proc/{worker}").exists()
            or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]
        ):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"worker {worker} outlived its run")
