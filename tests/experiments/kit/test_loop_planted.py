"""experiments.kit.loop.TrainLoop: the last evaluation, the summary's final train loss, a diverged
copy's step count and the resume guard on data settings, with test_loop's tiny linear
regressions."""

import pytest

from experiments.kit.errors import ConfigError
from tests.experiments.kit.test_loop import _cfg, _train
from tests.runs import metric_rows


def test_the_last_step_is_evaluated_when_steps_is_not_a_multiple_of_eval_every(tmp_path):
    [summary], _, _ = _train(_cfg("train.steps=10", "eval.every=4"), tmp_path)
    rows = metric_rows(tmp_path / "seed0")
    assert [int(r["step"]) for r in rows if r["metric"] == "test/loss"] == [0, 4, 8, 10]
    [last] = [r for r in rows if r["metric"] == "test/loss" and r["step"] == "10"]
    assert summary["test_loss"] == pytest.approx(float(last["value"]))


def test_final_train_loss_is_the_last_logged_train_loss(tmp_path):
    [summary], _, _ = _train(_cfg("train.steps=12"), tmp_path)
    losses = [
        float(r["value"]) for r in metric_rows(tmp_path / "seed0") if r["metric"] == "train/loss"
    ]
    assert len(losses) == 3 and losses[0] != losses[-1]
    assert summary["final_train_loss"] == pytest.approx(losses[-1])


def test_resume_with_another_dataset_is_refused(tmp_path):
    _train(_cfg("train.steps=4", "data.name=mnist"), tmp_path)
    with pytest.raises(
        ConfigError, match=r"holds the run of data\.name=mnist, not data\.name=cifar10;"
    ):
        _train(_cfg("train.steps=8", "data.name=cifar10", "resume=true"), tmp_path)


def test_a_diverged_copy_counts_the_steps_it_did_not_the_loops(tmp_path):
    # copy 1's weights turn NaN before step 5: the loss of that step (the 6th) is not finite,
    # while copy 0 trains on to the end
    ok, bad = _train(_cfg("seed=[0,1]", "train.steps=12"), tmp_path, nan_at=(1, 5))[0]
    assert bad["diverged"] and bad["diverged_at_step"] == 6
    assert bad["steps_done"] == 6  # not the 12 the loop ran for the other copy
    assert not ok["diverged"] and ok["steps_done"] == 12
