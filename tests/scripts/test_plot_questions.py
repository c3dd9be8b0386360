"""scripts/plot_questions.py draws every question's figure from the committed results."""

from pathlib import Path

import pytest

from scripts import plot_questions, plotting

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_question_figure_draws_from_the_committed_results(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the results' paths are relative to the repo
    monkeypatch.setattr(plotting, "FIGURES", tmp_path)
    plot_questions.main()
    drawn = sorted(p.name for p in tmp_path.glob("*.png"))
    assert drawn == sorted(f"question_{f.__name__}.png" for f in plot_questions.FIGURES)


def test_best_scale_is_the_highest_mean_test_accuracy():
    rows = [
        {"setup": "bn", "init_std": s, "test_acc": a}
        for s, a in (("0.1", "0.9"), ("0.1", "0.7"), ("1.0", "0.85"), ("1.0", "0.83"), ("10", ""))
    ]
    assert plot_questions.best_scale(rows, "bn") == 1.0  # means 0.80, 0.84; a diverged run is NaN
