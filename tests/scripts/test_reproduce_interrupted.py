"""scripts/reproduce.py interrupted and resumed: a stop signal ends every job at once (no process
left, no traceback, one line, exit status 128 + the signal), and ``--resume`` keeps the jobs that
finished, continues the others from their checkpoints and collects what an uninterrupted run
collects (slow: real processes; the rest with the jobs stood in for)."""

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from experiments.studies import REPRODUCTIONS, Job, Reproduction
from scripts import reproduce
from tests.idx_files import make_dataset

REPO = Path(__file__).resolve().parents[2]


def _three_jobs(name: str = "three") -> Reproduction:
    jobs = tuple(Job(f"j{s}", ("setup=bn",), estimate_s=s) for s in (600, 120, 60))
    return Reproduction(name, "three jobs", module="mnist", stages=(jobs,))


def _run_dir(cmd: list[str]) -> Path:
    """The run folder of a job's command, as Hydra reads its (quoted) override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    [where] = [a for a in cmd if a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
    return Path(OverridesParser.create().parse_override(where).value())


def _jobs_run(ran: list[list[str]]) -> list[list[str]]:
    return [cmd for cmd in ran if "-m" in cmd and cmd[cmd.index("-m") + 1] == "experiments.mnist"]


def _fake_job(fails: set[str], ran: list[list[str]]):
    """A stand-in for ``reproduce._run``: a job writes a run (its ``metrics.csv``, and its
    ``summary.json`` unless it fails: exit status 1)."""

    def run(cmd, log=None, cwd=REPO):
        ran.append(cmd)
        if cmd not in _jobs_run([cmd]):
            return 0
        folder = _run_dir(cmd)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.csv").write_text("step,metric,value\n")
        if folder.name in fails:
            return 1
        (folder / "summary.json").write_text("{}\n")
        return 0

    return run


def test_a_resume_runs_only_what_did_not_finish_and_goes_on_from_the_checkpoints(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setitem(reproduce.REPRODUCTIONS, "three", _three_jobs())
    ran: list[list[str]] = []
    monkeypatch.setattr(reproduce, "_run", _fake_job({"j120"}, ran))
    runs = tmp_path / "runs"
    assert reproduce.main(["three", "--out", str(runs), "seed=[4]"]) == 1
    record = json.loads((runs / "reproduce.json").read_text())
    assert record["names"] == ["three"] and record["extra"] == ["seed=[4]"]
    assert sorted(record["done"]["three"]) == ["j60", "j600"] and record["collected"] == []
    assert record["wall_s"]["three"] >= 0
    (runs / "three/logs").mkdir(parents=True, exist_ok=True)
    (runs / "three/logs/j120.log").write_text("the first part\n")
    capsys.readouterr()

    ran.clear()
    monkeypatch.setattr(reproduce, "_run", _fake_job(set(), ran))
    assert reproduce.main(["--resume", str(runs)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 jobs left (2 finished before, kept), 2 at a time")
    [job] = _jobs_run(ran)
    assert _run_dir(job).name == "j120" and job[-2:] == ["seed=[4]", "resume=true"]
    record = json.loads((runs / "reproduce.json").read_text())
    assert sorted(record["done"]["three"]) == ["j120", "j60", "j600"]
    assert record["collected"] == ["three"]
    assert (runs / "three/logs/j120.1.log").read_text() == "the first part\n"  # kept


def test_a_job_recorded_done_whose_runs_did_not_all_finish_runs_again(monkeypatch, tmp_path, capsys):  # fmt: skip
    monkeypatch.setitem(reproduce.REPRODUCTIONS, "three", _three_jobs())
    runs = tmp_path / "runs"
    runs.mkdir()
    reproduce.Record(["three"], [], 1, False, str(tmp_path), done={"three": ["j600", "j120"]}).save(runs)  # fmt: skip
    for seed in ("seed0", "seed1"):  # j600: both runs finished; j120: seed1 has no summary
        for job in ("j600", "j120"):
            (runs / "three" / job / seed).mkdir(parents=True)
            (runs / "three" / job / seed / "metrics.csv").write_text("")
            if (job, seed) != ("j120", "seed1"):
                (runs / "three" / job / seed / "summary.json").write_text("{}")
    jobs = _jobs_run([shlex.split(line) for line in _dry_resume(capsys, runs)])
    trained = {_run_dir(cmd).name: cmd for cmd in jobs}
    assert sorted(trained) == ["j120", "j60"]
    assert trained["j120"][-1] == "resume=true"  # it had started
    assert "resume=true" not in trained["j60"]  # it had not: as an uninterrupted run runs it


def _dry_resume(capsys, runs: Path, *argv: str) -> list[str]:
    assert reproduce.main(["--resume", str(runs), "--dry-run", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_finished_runs_are_those_with_a_summary_and_none_left_without(tmp_path):
    assert not reproduce.holds_finished_runs(tmp_path / "nothing")
    (tmp_path / "a/0_x").mkdir(parents=True)
    (tmp_path / "a/0_x/summary.json").write_text("{}")
    (tmp_path / "a/0_x/metrics.csv").write_text("")
    assert reproduce.holds_finished_runs(tmp_path / "a")
    (tmp_path / "a/1_x").mkdir()
    (tmp_path / "a/1_x/metrics.csv").write_text("")  # a sweep's second run, cut short
    assert not reproduce.holds_finished_runs(tmp_path / "a")
    (tmp_path / "a/1_x").rename(tmp_path / "a/.replaced")  # hidden: collection skips it
    assert reproduce.holds_finished_runs(tmp_path / "a")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["reproduce-fashion-mnist"], "ran reproduce-mnist train.steps=10: give those"),
        (["train.steps=20"], "ran reproduce-mnist train.steps=10: give those"),
        (["--out", "elsewhere"], "give no --out"),
        (["--nproc", "2"], "ran with --nproc 1"),
        (["--no-reuse"], "ran without --no-reuse"),
    ],
)
def test_a_resume_that_would_change_the_runs_is_refused(tmp_path, capsys, argv, message):
    reproduce.Record(["reproduce-mnist"], ["train.steps=10"], 1, False, str(tmp_path)).save(tmp_path)  # fmt: skip
    with pytest.raises(SystemExit):
        reproduce.main(["--resume", str(tmp_path), "--dry-run", *argv])
    assert message in capsys.readouterr().err
    lines = _dry_resume(capsys, tmp_path, "reproduce-mnist", "train.steps=10", "--nproc", "1")
    assert sum("-m experiments.mnist" in line for line in lines) == 2  # the same request: resumed


def test_a_folder_without_a_record_is_not_resumed(tmp_path, capsys):
    with pytest.raises(SystemExit):
        reproduce.main(["--resume", str(tmp_path)])
    assert "no run of this runner to continue there (reproduce.json" in capsys.readouterr().err


def test_a_collected_reproduction_is_left_as_it_is(monkeypatch, tmp_path, capsys):
    for name in ("first", "second"):
        r = dataclasses.replace(_three_jobs(name), collect=REPRODUCTIONS["reproduce-mnist"].collect)
        monkeypatch.setitem(reproduce.REPRODUCTIONS, name, r)
    ran: list[list[str]] = []
    monkeypatch.setattr(reproduce, "_run", _fake_job(set(), ran))
    record = reproduce.Record(["first", "second"], [], 1, False, str(tmp_path), collected=["first"])
    record.save(tmp_path)
    assert reproduce.main(["--resume", str(tmp_path)]) == 0
    assert {_run_dir(cmd).parent.name for cmd in _jobs_run(ran)} == {"second"}
    collected = [cmd[4] for cmd in ran if cmd[2] == "scripts.collect"]
    assert collected == [str(tmp_path / "second")]
    assert "first collected before" in capsys.readouterr().out


def test_a_stop_signal_stops_the_jobs_and_says_how_to_resume(monkeypatch, tmp_path, capsys):
    """In this process, with the jobs stood in for: the runner's own part of a stop."""
    monkeypatch.setitem(reproduce.REPRODUCTIONS, "three", _three_jobs())
    stopped, waiting = threading.Event(), threading.Event()
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log=None, cwd=REPO: stopped.wait(60) and -15)
    monkeypatch.setattr(reproduce, "_stop_processes", stopped.set)
    real_wait = reproduce.wait

    def wait(futures, **kwargs):  # the runner waits on its two jobs: time for the signal
        waiting.set()
        return real_wait(futures, **kwargs)

    monkeypatch.setattr(reproduce, "wait", wait)
    # the signal may come just before the wait blocks: it is seen when the wait times out
    monkeypatch.setattr(reproduce, "SIGNAL_LATENCY_S", 0.02)
    threading.Thread(
        target=lambda: waiting.wait(60) and os.kill(os.getpid(), signal.SIGTERM), daemon=True
    ).start()
    before = signal.getsignal(signal.SIGTERM)
    runs = tmp_path / "runs"
    assert reproduce.main(["three", "--out", str(runs), "--jobs", "2"]) == 128 + signal.SIGTERM
    assert stopped.is_set() and signal.getsignal(signal.SIGTERM) == before
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == (
        f"interrupted: 2 jobs stopped; resume with: python -m scripts.reproduce three --resume {runs}"
    )
    record = json.loads((runs / "reproduce.json").read_text())
    assert record["done"] == {} and record["wall_s"]["three"] >= 0


# --- real processes ------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether process ``pid`` is alive (a zombie is not: it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _in_group(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def _runner(args: list[str], **popen) -> subprocess.Popen:
    """``python -m scripts.reproduce`` with the tests' reproductions, in a session of its own
    (as a shell runs a command: a Ctrl-C goes to its whole process group)."""
    cmd = [sys.executable, "-m", "tests.scripts.reproduce_under_test", *args]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, **popen)  # fmt: skip


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def _end(runner: subprocess.Popen, jobs: list[tuple[int, int]] = ()) -> None:
    """What a failed test would leave running: the runner (asked first, so that it stops its
    jobs), its process group, each job's group and each job's child."""
    if runner.poll() is None:
        runner.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            runner.communicate(timeout=10)
    for group in (runner.pid, *(job for job, _ in jobs)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for _, child in jobs:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
    runner.wait()


def _hanging(logs: Path) -> list[tuple[int, int]]:
    """(job's process, its child) of each hanging job that has said so in its log."""
    found = []
    for log in sorted(logs.glob("*.log")):
        words = log.read_text().split()
        if "child" in words:
            found.append((int(words[words.index("pid") + 1]), int(words[words.index("child") + 1])))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    "how, processes",
    [
        ("ctrl-c", "workers"),  # SIGINT to the process group, as a terminal's Ctrl-C
        ("ctrl-c twice", "workers"),
        ("sigterm", "workers"),  # SIGTERM to the runner alone, as kill(1)
        ("ctrl-c", "fresh"),
        ("sigterm", "fresh"),
    ],
)
def test_a_stop_signal_ends_every_job_and_its_children_at_once(tmp_path, how, processes):
    runs = tmp_path / "runs"
    fresh = ["--fresh-processes"] if processes == "fresh" else []
    runner = _runner(["hang", "--out", str(runs), "--home", str(tmp_path), *fresh])
    jobs: list[tuple[int, int]] = []
    try:
        _wait_for(lambda: len(_hanging(runs / "hang/logs")) == 2, "both jobs to start")
        jobs = _hanging(runs / "hang/logs")
        if how == "sigterm":
            runner.send_signal(signal.SIGTERM)
        else:
            os.killpg(runner.pid, signal.SIGINT)
            if how == "ctrl-c twice":
                time.sleep(0.05)
                os.killpg(runner.pid, signal.SIGINT)
        out, _ = runner.communicate(timeout=20)  # at once: no job is waited for
        assert runner.returncode == 128 + (signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        assert out.splitlines()[-1] == (
            "interrupted: 2 jobs stopped; resume with: python -m scripts.reproduce hang --resume "
            f"{runs}"
        )
        assert "Traceback" not in out and sum(line.startswith("interrupted") for line in out.splitlines()) == 1  # fmt: skip
        _wait_for(lambda: not any(_alive(pid) for job in jobs for pid in job), "the jobs to end", 10)  # fmt: skip
        assert not [pid for job, _ in jobs for pid in _in_group(job)]  # each job led its group
    finally:
        _end(runner, jobs)
    for log in (runs / "hang/logs").glob("*.log"):
        text = log.read_text()
        assert "Traceback" not in text and "KeyboardInterrupt" not in text
        assert "the job's process was stopped (the runner was interrupted)" in text


@pytest.mark.slow
def test_an_interrupted_reproduction_resumes_to_the_results_of_an_uninterrupted_one(tmp_path):
    """Three jobs, one at a time: bn finishes; the sweep's first run finishes and its second
    hangs after its second checkpoint, when the runner gets a Ctrl-C; baseline never starts.
    Resumed, the runs collected are those of an uninterrupted run, byte for byte, and the
    sweep's finished run is passed over (its summary is not rewritten)."""
    make_dataset(tmp_path / "data", folder="MNIST")
    quick = ["debug=quick", f"data.root={tmp_path / 'data'}", "data.download=false", "data.verify=false"]  # fmt: skip
    both = ["tiny", "tiny-sweep", "--jobs", "1"]
    whole = _runner([*both, "--out", str(tmp_path / "whole"), "--home", str(tmp_path / "a"), *quick])  # fmt: skip
    assert whole.wait(300) == 0, whole.stdout.read()

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if 'scripts.job_worker' in sys.orig_argv:\n"
        "    from tests.interrupt import hang_after_checkpoint\n"
        "    hang_after_checkpoint('/tiny-sweep/sweep/1_', 2)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(hook)])}
    runs = tmp_path / "runs"
    cut = _runner([*both, "--out", str(runs), "--home", str(tmp_path / "b"), *quick], env=env)
    try:
        _wait_for(lambda: any(runs.glob("tiny-sweep/sweep/1_*/hanging")), "the sweep to hang")
        os.killpg(cut.pid, signal.SIGINT)
        out, _ = cut.communicate(timeout=20)
    finally:
        _end(cut)
    assert cut.returncode == 130, out
    assert "interrupted: 1 job stopped" in out and "Traceback" not in out
    record = json.loads((runs / "reproduce.json").read_text())
    assert record["done"] == {"tiny": ["bn"]} and record["collected"] == []
    [first] = runs.glob("tiny-sweep/sweep/0_*/summary.json")
    finished = first.read_bytes()
    assert not any(runs.glob("tiny-sweep/sweep/1_*/summary.json"))
    assert not (runs / "tiny/baseline").exists()

    resumed = _runner(["--resume", str(runs)])
    assert resumed.wait(300) == 0, resumed.stdout.read()
    assert first.read_bytes() == finished
    for result in ("tiny/runs.csv", "tiny_sweep.csv", "tiny_sweep_curves.csv"):
        a, b = (tmp_path / home / "results/mnist" / result for home in "ab")
        assert b.read_bytes() == a.read_bytes(), result
    summaries = [json.loads((tmp_path / h / "results/mnist/tiny/summary.json").read_text()) for h in "ab"]  # fmt: skip
    for setup in ("bn", "baseline"):
        a, b = (s["setups"][setup] for s in summaries)
        assert a["test_acc"] == b["test_acc"] and a["seeds"] == b["seeds"]
    assert summaries[0]["command"] == summaries[1]["command"]
    assert summaries[1]["wall_time_s"] >= record["wall_s"]["tiny"] - 1  # both parts counted
