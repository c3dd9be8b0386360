"""scripts/plotting.py reads the committed CSVs: a missing or truncated one is one line."""

import pytest

from scripts.plotting import read_curves


def test_a_whole_runs_csv_is_read_by_setup_seed_and_metric(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("setup,seed,step,metric,value\nbn,0,0,test/acc,0.1\nbn,0,10,test/acc,0.5\n")
    assert read_curves(path)[("bn", 0)]["test/acc"] == ([0, 10], [0.1, 0.5])


def test_a_truncated_or_missing_runs_csv_is_one_line(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("setup,seed,step,metric,value\nbn,0,0,test/acc,0.1\nbn,0,10,te")
    with pytest.raises(SystemExit, match=r"runs.csv, line 3: not a whole row"):
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
