"""scripts/plotting.py reads the committed CSVs (a missing or truncated one is one line) and
writes each figure whole, a script's figures as one set, which every reader of the figures sees
whole (scripts/figure_sets.py)."""

import os
from pathlib import Path

import pytest

from scripts.plotting import read_curves
from tests.faults import files_under, in_child


def test_a_whole_runs_csv_is_read_by_setup_seed_and_metric(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("setup,seed,step,metric,value\nbn,0,0,test/acc,0.1\nbn,0,10,test/acc,0.5\n")
    assert read_curves(path)[("bn", 0)]["test/acc"] == ([0, 10], [0.1, 0.5])


def test_a_truncated_or_missing_runs_csv_is_one_line(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("setup,seed,step,metric,value\nbn,0,0,test/acc,0.1\nbn,0,10,te\n")
    with pytest.raises(SystemExit, match=r"runs.csv, line 3: not a whole row"):
        read_curves(path)
    path.write_text("setup,seed,step,metric,value\nbn,0,0,test/acc,0.1\nbn,0,10,test/acc,0.")
    with pytest.raises(SystemExit, match=r"runs.csv ends in the middle of a row"):
        read_curves(path)
    with pytest.raises(SystemExit, match="does not exist"):
        read_curves(tmp_path / "none.csv")


def test_a_curve_that_is_all_nan_is_not_drawn_and_said(tmp_path, capsys):
    import matplotlib.pyplot as plt

    from scripts.plotting import mean_band

    path = tmp_path / "runs.csv"
    path.write_text("setup,seed,step,metric,value\nbn,0,0,test/acc,nan\nbn,0,10,test/acc,nan\n")
    fig, ax = plt.subplots()
    mean_band(ax, read_curves(path), "bn", "test/acc", "k", "bn")
    assert not ax.lines and "every test/acc value of bn is NaN" in capsys.readouterr().err
    plt.close(fig)


# -- figures replaced whole, and as a set ------------------------------------------------------
def _figure(value: float, fails: bool = False):
    """A small figure; with ``fails``, its PNG's write stops half-way on a full disk."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, value])
    if fails:
        draw = fig.savefig

        def half_then_full(target, **kwargs):
            if kwargs.get("format", str(target).rsplit(".", 1)[-1]) == "png":
                with open(target, "wb") if isinstance(target, (str, Path)) else target as f:
                    f.write(b"\x89PNG half")
                raise OSError(28, "No space left on device")
            draw(target, **kwargs)

        fig.savefig = half_then_full
    return fig


@pytest.fixture
def figures(tmp_path, monkeypatch):
    """results/figures holding an earlier a.png/.svg and b.png/.svg; returns it and its files."""
    from scripts import plotting

    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    plotting.save(_figure(1.0), "a.png")
    plotting.save(_figure(1.0), "b.png")
    return tmp_path / "figures", files_under(tmp_path / "figures")


def test_a_full_disk_leaves_the_old_figure_not_a_part_of_a_new_one(figures):
    from scripts import plotting

    folder, before = figures
    with pytest.raises(OSError, match="No space left"):
        plotting.save(_figure(2.0, fails=True), "a.png")
    assert files_under(folder) == before  # no 0-byte or half PNG, no file left beside it


def test_a_figure_set_replaces_every_figure_or_none(figures):
    from scripts import plotting

    folder, before = figures

    @plotting.figure_set()
    def draw(fail: bool):
        plotting.save(_figure(2.0), "a.png")
        plotting.save(_figure(2.0, fails=fail), "b.png")

    with pytest.raises(SystemExit, match=r"^error: a figure could not be written \(No space left"):
        draw(fail=True)
    assert files_under(folder) == before  # a.png was drawn, and is not put in place either
    draw(fail=False)
    after = files_under(folder)
    assert set(after) == set(before) and all(after[k] != before[k] for k in before)


def test_results_that_are_not_whole_replace_no_figure(figures, tmp_path):
    from scripts import plotting

    folder, before = figures
    torn = tmp_path / "runs.csv"
    torn.write_text("setup,seed,step,metric,value\nbn,0,0,test/acc,0.1\nbn,0,10,test/acc,0.")

    @plotting.figure_set()
    def draw():
        plotting.save(_figure(2.0), "a.png")
        plotting.read_curves(torn)

    with pytest.raises(SystemExit, match="ends in the middle of a row"):
        draw()
    assert files_under(folder) == before


def test_a_killed_figure_set_leaves_the_old_figures_and_its_leftovers_are_cleared(figures):
    from scripts import plotting

    folder, before = figures

    def draw_then_die():
        with plotting.figure_set():
            plotting.save(_figure(2.0), "a.png")
            os._exit(137)  # a kill between two figures of the set

    assert in_child(draw_then_die) == 137
    assert {k: v for k, v in files_under(folder).items() if not k.startswith(".")} == before
    with plotting.figure_set():  # the next set clears what the killed one staged
        pass
    assert files_under(folder) == before


def test_a_set_killed_while_put_in_place_is_completed_by_the_next(figures):
    """A kill between two of the set's renames: the next figure set puts the rest in place, so
    the figures are the new set whole, not the new a.png beside the old b.png."""
    from scripts import plotting

    folder, before = figures

    def draw_then_die_in_the_renames():
        replace = os.replace

        def once_then_die(src, dst):
            replace(src, dst)
            os._exit(137)

        with plotting.figure_set():
            plotting.save(_figure(2.0), "a.png")
            plotting.save(_figure(2.0), "b.png")
            plotting.os.replace = once_then_die

    assert in_child(draw_then_die_in_the_renames) == 137
    mixed = {k: v for k, v in files_under(folder).items() if not k.startswith(".")}
    assert sum(mixed[k] != before[k] for k in before) == 1  # one figure moved before the kill
    with plotting.figure_set():  # the next set finishes the killed one's
        pass
    after = files_under(folder)
    assert set(after) == set(before) and all(after[k] != before[k] for k in before)


def test_a_read_only_figures_folder_is_one_line(figures, monkeypatch):
    from scripts import plotting

    folder, before = figures
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(SystemExit, match=r"figures cannot be written \(read-only\?\)"):
        plotting.save(_figure(2.0), "a.png")
    assert files_under(folder) == before


# -- figures read as a set -------------------------------------------------------------------
def _visible(folder: Path) -> dict[str, bytes]:
    """The figures a reader sees (not the hidden staged files and journals)."""
    return {k: v for k, v in files_under(folder).items() if not k.startswith(".")}


@pytest.mark.slow
def test_a_kill_at_any_point_of_a_set_leaves_a_reader_the_old_set_or_the_new(figures):
    """Killed anywhere in drawing or putting in place a set, then read: the reader settles the
    folder first and sees the old set or the new one, never a new a.png beside an old b.png."""
    import shutil

    from scripts import figure_sets, plotting
    from tests.faults import fault_at, killed

    folder, before = figures

    def draw():
        with plotting.figure_set():
            plotting.save(_figure(2.0), "a.png")
            plotting.save(_figure(2.0), "b.png")

    def restore():
        shutil.rmtree(folder)
        folder.mkdir()
        for name, data in before.items():
            (folder / name).write_bytes(data)

    draw()
    after = files_under(folder)
    assert set(after) == set(before) and all(after[k] != before[k] for k in before)
    mixed = set()
    for k in range(1, 60):
        restore()
        with fault_at(k, killed):
            status = in_child(draw)
        assert status in (0, 137)
        if _visible(folder) not in (before, after):
            mixed.add(k)  # what a reader would see without settling first
        figure_sets.settle(folder)  # what every reader does first
        assert _visible(folder) in (before, after), f"a mix after a kill at change {k}"
        assert not list(folder.glob(".figure-set-*")), f"a journal left after a kill at {k}"
        if status == 0:
            assert _visible(folder) == after
            break
    else:
        pytest.fail("the figure set never ran to its end")
    assert mixed, "no kill fell between two renames: the test does not test the reader"


@pytest.mark.parametrize("reader", ["report", "results_readme"])
def test_every_reader_of_the_figures_settles_them_before_reading(tmp_path, monkeypatch, reader):
    import scripts.report
    import scripts.results_readme.document

    class Settled(Exception):
        pass

    def settle(folder):
        raise Settled(folder)

    if reader == "report":
        monkeypatch.setattr(scripts.report, "settle", settle)
        monkeypatch.setattr(scripts.report, "FIGURES", tmp_path / "figures")
        render = scripts.report.render
    else:
        monkeypatch.setattr(scripts.results_readme.document, "settle", settle)
        render = lambda: scripts.results_readme.document.render(tmp_path)  # noqa: E731
    with pytest.raises(Settled) as e:
        render()
    assert e.value.args == (tmp_path / "figures",)


def test_a_set_that_cannot_be_completed_or_is_still_renaming_is_one_line(figures, monkeypatch):
    import subprocess

    from experiments.kit.errors import BadResults, Busy
    from scripts import figure_sets

    folder, before = figures
    live = subprocess.Popen(["sleep", "30"])
    try:
        for token in (str(live.pid), "999999999"):  # a live set's, a killed one's
            (folder / f".a.png{figure_sets.STAGED}{token}").write_bytes(b"new")
            (folder / f".figure-set-{token}.commit").write_text(f".a.png.new-{token}\n")
        with pytest.raises(Busy, match=rf"process {live.pid} is putting a figure set in place"):
            figure_sets.settle(folder, wait=0.2)
        assert (folder / "a.png").read_bytes() == b"new"  # the killed set's: completed
    finally:
        live.kill()
        live.wait()
    (folder / "b.png").write_bytes(before["b.png"])
    (folder / f".b.png{figure_sets.STAGED}999999999").write_bytes(b"new")
    (folder / ".figure-set-999999999.commit").write_text(".b.png.new-999999999\n")

    def read_only(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", read_only)
    with pytest.raises(BadResults, match=r"left half in place, and it cannot be completed \(Perm"):
        figure_sets.settle(folder)
    assert (folder / "b.png").read_bytes() == before["b.png"]
