"""experiments.kit.stopping: the plateau and target rules on hand-made curves."""

import pytest

from experiments.kit.stopping import StopRule, plateaued


def test_a_rising_curve_has_not_plateaued():
    curve = [(s, s / 1000) for s in range(0, 3001, 100)]  # +1 pp per 1,000 steps
    assert not plateaued(curve, 0.003)


def test_a_flat_curve_has_plateaued():
    curve = [(s, 0.5 if s < 2000 else 0.8) for s in range(0, 6001, 100)]
    assert plateaued(curve, 0.003)  # the last third (after 4,000) is no better than before


def test_the_last_third_is_measured_against_the_best_before_it():
    # best before step 2,000 (= 2/3 of 3,000) is 0.80; the last third reaches 0.802 (+0.2 pp)
    curve = [(0, 0.1), (1000, 0.80), (2000, 0.79), (2500, 0.801), (3000, 0.802)]
    assert plateaued(curve, 0.003) and not plateaued(curve, 0.002)
    assert not plateaued([], 0.003) and not plateaued([(0, 0.1)], 0.003)


def test_a_gain_in_the_middle_third_does_not_count():
    # from 0.5 to 0.8 by step 2,000 (= 2/3 of 3,000), then flat: the last third gained nothing
    curve = [(0, 0.1), (1000, 0.5), (2000, 0.8), (3000, 0.8)]
    assert plateaued(curve, 0.003)


def test_target_stops_at_the_first_evaluation_that_reaches_it():
    rule = StopRule("test/acc", target=0.7)
    assert rule.update(0, {"test/acc": 0.1}) is None
    assert rule.update(100, {"test/acc": 0.69}) is None
    assert rule.update(200, {"test/acc": 0.7}).startswith("target: test/acc=0.7000 reached 0.7000")


def test_plateau_waits_for_min_steps():
    rule = StopRule("test/acc", plateau=0.003, min_steps=300)
    reasons = [rule.update(s, {"test/acc": 0.5}) for s in range(0, 401, 100)]
    assert reasons[:3] == [None, None, None]  # flat, but before step 300
    assert reasons[3].startswith("plateau: test/acc gained less than 0.003")


def test_other_metrics_and_missing_values_are_ignored():
    rule = StopRule("test/acc_subset", target=0.5)
    assert rule.update(0, {"test/acc": 0.9}) is None and rule.curve == []
    assert not StopRule("test/acc").active and StopRule("test/acc", plateau=0.1).active


def test_the_curve_survives_a_checkpoint():
    rule = StopRule("test/acc", plateau=0.003, min_steps=200)
    for s in (0, 100, 200):
        rule.update(s, {"test/acc": 0.1 + s / 1000})
    resumed = StopRule("test/acc", plateau=0.003, min_steps=200)
    resumed.load_state_dict(rule.state_dict())
    assert resumed.curve == rule.curve
    assert resumed.update(300, {"test/acc": 0.3}) == rule.update(300, {"test/acc": 0.3})
    resumed.load_state_dict(None)  # a checkpoint written without a rule: rebuilt by the caller
    assert resumed.curve is None
    other = StopRule("test/acc_subset", plateau=0.003)
    other.load_state_dict(rule.state_dict())  # another metric's curve is not this rule's
    assert other.curve is None


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.stop.target=1.5", r"train.stop.target=1.5 must be in \(0, 1\] \(.*an accuracy"),
        ("train.stop.plateau=0", "train.stop.plateau=0.0 must be positive"),
        ("train.stop.min_steps=-1", "train.stop.min_steps=-1 must be at least 0"),
        ("eval.test_subset=-5", "eval.test_subset=-5 must be at least 0"),
    ],
)
def test_invalid_stop_settings_are_config_errors(override, message):
    from experiments import renorm
    from experiments.kit.errors import ConfigError
    from tests.configs import compose_config

    cfg = compose_config("renorm", ["logger.mode=disabled", override])
    with pytest.raises(ConfigError, match=message):
        renorm.check(cfg)


def test_a_curve_rebuilt_from_the_log_is_an_uninterrupted_runs(tmp_path):
    """A run resumed from a checkpoint without the rule's curve rebuilds it from metrics.csv as
    an uninterrupted run holds it: its evaluations after initialization, before this one (a
    flat run at chance must not plateau sooner or later for its step 0)."""
    from types import SimpleNamespace

    from experiments.kit.classify import ClassifierTraining

    rows = [(0, 0.0), (100, 0.1), (200, 0.1), (300, 0.11), (400, 0.1)]
    (tmp_path / "metrics.csv").write_text(
        "step,metric,value\n" + "".join(f"{s},test/acc,{v}\n" for s, v in rows)
    )
    rule = StopRule("test/acc", plateau=0.003, min_steps=100)
    rule.load_state_dict(None)
    training = SimpleNamespace(rule=rule, proc=SimpleNamespace(rank=0), out_dir=tmp_path)
    ClassifierTraining.stop(training, 400, [{"test/acc": 0.1}])
    uninterrupted = StopRule("test/acc", plateau=0.003, min_steps=100)
    for s, v in [*rows[1:4], (400, 0.1)]:
        uninterrupted.update(s, {"test/acc": v})
    assert rule.curve == uninterrupted.curve
