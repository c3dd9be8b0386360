"""A collection is written as one (experiments.kit.results.collect, experiments.kit.files): a
failure or a kill at any point of it leaves ``--out`` holding the earlier results whole or the new
ones whole, never a runs.csv of one beside the summary.json of the other; a read-only or full
disk is one line; a run's summary cannot lead a write outside ``--out``; a second collection
into an ``--out`` another is writing is refused."""

import json
import sys
from pathlib import Path

import pytest

from experiments.kit import files, results
from experiments.kit.errors import CollectError
from experiments.kit.results import collect, collect_sweep
from experiments.studies import Study
from tests.experiments.kit.test_results import _write_run
from tests.faults import fault_at, files_under, in_child, killed

SPEC = Study("fake", "", (), order=("zeta", "alpha"), split_by="data", extend=f"{__name__}:_extend")


def _extend(summary, runs, out):
    """A study's own file, different in every collection."""
    (out / "extra.md").write_text(f"{sum(s['test_acc'] for _, s in runs):.3f}\n")


def _sweep(folder: Path, acc: float) -> Path:
    for i, (data, setup, seed) in enumerate(
        [("mnist", "alpha", 0), ("mnist", "zeta", 0), ("fashion_mnist", "alpha", 0)]
    ):
        _write_run(folder / str(i), setup, seed, acc + i / 10, acc, data=data)
    return folder


@pytest.fixture
def setting(tmp_path, monkeypatch):
    """(the new sweep, --out holding an earlier collection and a file of the user's, what --out
    holds before, what it holds after a whole collection of the new sweep)."""
    # the folder swap is one foreign call, which Python's audit events do not see: made visible
    exchange = files._exchange

    def seen_exchange(a, b):
        sys.audit("os.rename", a, b, None, None)
        return exchange(a, b)

    monkeypatch.setattr(files, "_exchange", seen_exchange)
    out = tmp_path / "results" / "fake"
    collect(SPEC, _sweep(tmp_path / "old", 0.5), out)
    (out / "notes.txt").write_text("the user's own file, kept\n")
    new = _sweep(tmp_path / "new", 0.7)
    old_files = files_under(out)
    reference = tmp_path / "reference" / "fake"
    reference.parent.mkdir()
    _copy(out, reference)
    collect(SPEC, new, reference)
    new_files = files_under(reference)
    assert old_files != new_files
    assert {"mnist/runs.csv", "mnist/summary.json", "mnist/extra.md", "notes.txt"} <= set(new_files)
    return new, out, old_files, new_files


def _copy(src: Path, dst: Path) -> None:
    import shutil

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def _restore(out: Path, old_files: dict[str, bytes]) -> None:
    import shutil

    if out.exists():
        shutil.rmtree(out)
    for name, data in old_files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)


def test_a_failure_at_any_point_leaves_the_old_results_or_the_new_whole(setting, capsys):
    new, out, old_files, new_files = setting
    outcomes = set()
    for k in range(1, 300):
        _restore(out, old_files)
        with fault_at(k) as fault:
            try:
                collect(SPEC, new, out)
            except CollectError as e:
                assert "No space left on device" in str(e) and "\n" not in str(e)
        now = files_under(out)
        assert now in (old_files, new_files), f"a mix after a failure at change {k}"
        if now == old_files:
            assert not list(out.parent.glob(".fake.new-*")), "a staged folder left after an error"
        outcomes.add("old" if now == old_files else "new")
        if fault["seen"] < k:  # the fault never came: the collection ran to its end
            break
    else:
        pytest.fail("the collection never ran to its end")
    assert outcomes == {"old", "new"} and k > 5


@pytest.mark.slow
@pytest.mark.parametrize("swap", [True, False], ids=["one-rename", "two-renames"])
def test_a_kill_at_any_point_leaves_the_old_results_or_the_new_whole(setting, swap, monkeypatch):
    new, out, old_files, new_files = setting
    if not swap:  # a system that cannot swap two folders in one rename
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    for k in range(1, 300):
        _restore(out, old_files)
        with fault_at(k, killed):
            status = in_child(lambda: collect(SPEC, new, out))
        assert status in (0, 137)
        files._clear_stale(out)  # what the next collection does first
        now = files_under(out)
        assert now in (old_files, new_files), f"a mix after a kill at change {k}"
        if status == 0:
            assert now == new_files
            break
    else:
        pytest.fail("the collection never ran to its end")
    collect(SPEC, new, out)  # and the next collection clears what a kill left
    assert files_under(out) == new_files and not list(out.parent.glob(".fake.new-*"))


def test_a_full_disk_while_writing_runs_csv_keeps_the_old_collection(setting, monkeypatch):
    new, out, old_files, _ = setting
    write = results.write_runs_csv

    def half_then_full(path, *args, **kwargs):
        write(path, *args, **kwargs)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])  # what reached the disk before it filled
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results, "write_runs_csv", half_then_full)
    with pytest.raises(CollectError, match=r"fake could not be written \(No space left on device"):
        collect(SPEC, new, out)
    assert files_under(out) == old_files


def test_a_read_only_results_folder_is_one_line_before_anything_is_written(setting, monkeypatch):
    import os

    new, out, old_files, _ = setting
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(CollectError, match=r"cannot be written \(read-only\?\)"):
        collect(SPEC, new, out)
    with pytest.raises(CollectError, match=r"cannot be written \(read-only\?\)"):
        collect_sweep(SPEC, new, out.parent / "sweep.csv")
    assert files_under(out) == old_files and not (out.parent / "sweep.csv").exists()


def test_a_file_system_refusing_writes_is_one_line_not_a_traceback(setting):
    new, out, old_files, _ = setting

    def read_only(event):
        raise OSError(30, "Read-only file system")

    with fault_at(1, read_only, every=True), pytest.raises(CollectError, match="Read-only file"):
        collect(SPEC, new, out)
    assert files_under(out) == old_files


@pytest.mark.parametrize("name", ["../../x", "..", ".", "", "a/b", "/abs"])
def test_a_split_value_that_is_not_a_plain_folder_name_is_refused(tmp_path, name):
    _write_run(tmp_path / "sweep" / "0", "alpha", 0, 0.5, 0.5, data=name)
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(CollectError, match=r"not a plain folder name"):
        collect(Study("fake", "", (), split_by="data"), tmp_path / "sweep", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # nothing written anywhere


def test_the_sweep_table_and_curves_are_each_replaced_whole(setting, tmp_path):
    new, out, _, _ = setting
    table, curves = out.parent / "sweep.csv", out.parent / "curves.csv"
    collect_sweep(SPEC, new, table, ["setup", "seed"], curves)
    before = {table: table.read_bytes(), curves: curves.read_bytes()}
    more = _sweep(tmp_path / "more", 0.1)
    collect_sweep(SPEC, more, tmp_path / "t.csv", ["seed"], tmp_path / "c.csv")
    after = {table: (tmp_path / "t.csv").read_bytes(), curves: (tmp_path / "c.csv").read_bytes()}
    for k in range(1, 30):
        for path, data in before.items():
            path.write_bytes(data)
        with fault_at(k) as fault:
            try:
                collect_sweep(SPEC, more, table, ["seed"], curves)
            except CollectError as e:
                assert "No space left" in str(e)
        for path in (table, curves):
            assert path.read_bytes() in (before[path], after[path]), (k, path.name)
        assert not list(out.parent.glob(".*.tmp"))
        if fault["seen"] < k:
            break
    assert table.read_bytes() == after[table] and curves.read_bytes() == after[curves]


def test_a_collection_replaced_keeps_what_it_does_not_write(setting):
    new, out, _, new_files = setting
    (out / "cifar").mkdir()
    (out / "cifar" / "runs.csv").write_text("another data set's, collected apart\n")
    collect(SPEC, new, out)
    assert (out / "cifar" / "runs.csv").read_text() == "another data set's, collected apart\n"
    assert json.loads((out / "mnist" / "summary.json").read_bytes()) == json.loads(
        new_files["mnist/summary.json"]
    )


def _holding(out: Path, write_name: str, collection) -> tuple[int, int]:
    """A second process that runs ``collection`` and stops inside its write (``results``'s
    ``write_name``), holding ``out``; returns its process id and the pipe that lets it go on."""
    import os

    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            write = getattr(results, write_name)

            def held(*args, **kwargs):
                if not held.waited:  # once: a collection's later writes go on
                    held.waited = True
                    os.write(ready_w, b"1")
                    os.read(go_r, 1)
                return write(*args, **kwargs)

            held.waited = False

            setattr(results, write_name, held)
            collection()
            code = 0
        finally:
            os.write(ready_w, b"1")  # the test goes on (and fails) if it never got there
            os._exit(code)
    os.read(ready_r, 1)
    return pid, go_w


def _ended(pid: int, go: int) -> int:
    """The held process let go on; its exit status (it is ended if it has not within 60 s)."""
    import os
    import signal
    import time

    os.write(go, b"1")
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the first collection did not end")


def test_a_second_collection_into_one_out_is_refused_while_the_first_writes(setting, tmp_path):
    """Two processes collecting into one --out: the second is refused in one line, and the
    first's results are whole; without the lock the second would replace them unseen."""
    new, out, _, new_files = setting
    other = _sweep(tmp_path / "other", 0.2)
    pid, go = _holding(out, "write_collection", lambda: collect(SPEC, new, out))
    try:
        refused = rf"^{out} is being written by process {pid} \(it holds [^\n]*\.fake\.lock\): "
        with pytest.raises(
            CollectError, match=refused + r"another collection[^\n]*nothing written$"
        ):
            collect(SPEC, other, out)
    finally:
        assert _ended(pid, go) == 0
    assert files_under(out) == new_files  # the first collection's, whole
    collect(SPEC, other, out)  # the lock ended with it
    assert files_under(out) != new_files


def test_a_second_sweep_table_into_one_file_is_refused_while_the_first_writes(setting, tmp_path):
    new = setting[0]
    table = tmp_path / "sweep.csv"
    pid, go = _holding(table, "write_whole", lambda: collect_sweep(SPEC, new, table))
    try:
        with pytest.raises(CollectError, match=rf"^{table} is being written by process {pid} "):
            collect_sweep(SPEC, _sweep(tmp_path / "other", 0.2), table, ["seed"])
    finally:
        assert _ended(pid, go) == 0
    assert table.read_text().splitlines()[0].startswith("setup,seed")  # the first's, whole
    collect_sweep(SPEC, new, table, ["seed"])
    assert table.read_text().splitlines()[0] == "seed"
