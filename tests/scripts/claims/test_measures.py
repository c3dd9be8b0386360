"""What individual claims measure, on synthetic results: each row's stated handling of runs that
diverged, of missing accuracies and of its thresholds."""

import dataclasses

import pytest

from scripts.analysis.windows import PLAN
from scripts.claims import bn_paper, questions
from scripts.claims.claim import Claim
from scripts.claims.measure import CHANCE


def test_a_small_data_run_without_an_accuracy_counts_at_chance(tmp_path):
    folder = tmp_path / "questions" / "init_scale_small"
    folder.mkdir(parents=True)
    (folder / "mnist.csv").write_text(
        "setup,seed,init_std,test_acc\nbn,0,0.1,0.9\nbn,0,10,\nbaseline,0,0.1,0.8\nbaseline,0,10,None\n"
    )
    runs = questions._small_data_ranges(dataclasses.replace(PLAN, root=str(tmp_path)), "mnist")
    assert runs == {"bn": {0: {0.1: 0.9, 10.0: CHANCE}}, "baseline": {0: {0.1: 0.8, 10.0: CHANCE}}}


@pytest.mark.parametrize(("above_chance", "trains"), [(0.04, False), (0.06, True)])
def test_a_sigmoid_arm_trains_only_5_pp_above_chance(monkeypatch, above_chance, trains):
    best = CHANCE + above_chance
    monkeypatch.setattr(bn_paper.tta, "maxima", lambda plan, setup: {0: best})
    values = bn_paper._sigmoid(PLAN).values
    assert values["BN-x5-Sigmoid trains"] == [trains]
    assert values["Inception-Sigmoid at chance"] == [not trains]


def test_a_claim_must_link_a_figure_of_its_own_section():
    c = next(c for c in bn_paper.CLAIMS if c.figure)
    with pytest.raises(ValueError, match="is not a figure of"):
        dataclasses.replace(c, figure="renorm_final.png")
    with pytest.raises(ValueError, match="not in experiments.studies"):
        dataclasses.replace(c, section="nowhere")
    with pytest.raises(ValueError, match="not registered"):
        dataclasses.replace(c, confirm=("confirm-nothing",))
    assert isinstance(dataclasses.replace(c, figure=""), Claim)
