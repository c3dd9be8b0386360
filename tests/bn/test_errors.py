"""Every misuse raises a ValueError that names the setting and what to change."""

import pytest
import torch

import bn


@pytest.mark.parametrize("cls", [bn.BatchNorm1d, bn.BatchRenorm1d])
@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_one_value_per_channel(cls, impl):
    with pytest.raises(ValueError, match="has 1 value per channel.*larger batch"):
        cls(3, impl=impl)(torch.randn(1, 3))


def test_one_value_per_channel_in_microbatch():
    with pytest.raises(ValueError, match="microbatch of 1.*larger microbatch"):
        bn.BatchNorm1d(3, microbatch=1)(torch.randn(4, 3))


def test_one_value_is_fine_in_eval():
    layer = bn.BatchNorm1d(3).eval()
    assert layer(torch.randn(1, 3)).shape == (1, 3)


@pytest.mark.parametrize(
    "cls,x",
    [
        (bn.BatchNorm2d, torch.randn(4, 3)),
        (bn.BatchNorm1d, torch.randn(4, 3, 2, 2)),
        (bn.BatchRenorm2d, torch.randn(4, 3, 2)),
    ],
)
def test_wrong_rank(cls, x):
    with pytest.raises(ValueError, match=r"expects input of shape .* got a \dD input"):
        cls(3)(x)


def test_wrong_channels():
    with pytest.raises(ValueError, match="num_features=5"):
        bn.BatchNorm2d(3)(torch.randn(4, 5, 2, 2))


@pytest.mark.parametrize("cls", [bn.BatchNorm2d, bn.BatchRenorm2d])
def test_microbatch_must_divide(cls):
    with pytest.raises(ValueError, match="microbatch=4 does not divide the batch size 10"):
        cls(3, microbatch=4)(torch.randn(10, 3, 2, 2))


@pytest.mark.parametrize("bad", [0, -2, 2.5])
def test_microbatch_must_be_positive_int(bad):
    with pytest.raises(ValueError, match="microbatch="):
        bn.BatchNorm2d(3, microbatch=bad)


@pytest.mark.parametrize("r_max", [0.5, bn.LinearRamp(0.9, 3.0, 0, 10), float("nan")])
def test_r_max_below_one(r_max):
    with pytest.raises(ValueError, match="r_max=.*set r_max >= 1"):
        bn.BatchRenorm2d(3, r_max=r_max)


@pytest.mark.parametrize("name", ["r_max", "d_max"])
@pytest.mark.parametrize("bound", [float("inf"), bn.LinearRamp(1.0, float("inf"), 0, 10)])
def test_an_infinite_bound_is_refused(name, bound):
    # r clipped to [0, inf] gives NaN on the PyTorch path and finite values on the compiled kernel
    with pytest.raises(ValueError, match=f"{name}=.*a bound must be finite"):
        bn.BatchRenorm2d(3, **{name: bound})


@pytest.mark.parametrize("d_max", [-0.1, bn.LinearRamp(0.0, -1.0, 0, 10)])
def test_d_max_negative(d_max):
    with pytest.raises(ValueError, match="d_max=.*set d_max >= 0"):
        bn.BatchRenorm2d(3, d_max=d_max)


def test_renorm_needs_running_stats():
    with pytest.raises(ValueError, match="track_running_stats=True"):
        bn.BatchRenorm2d(3, track_running_stats=False)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"impl": "cuda"}, "impl='cuda'"),
        ({"momentum": 1.5}, "momentum=1.5"),
        ({"eps": 0.0}, "eps=0.0"),
        ({"sync_stats": True, "microbatch": 4}, "sync_stats=True and microbatch=4"),
        ({"sync_stats": True, "impl": "reference"}, "impl='reference'"),
    ],
)
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bn.BatchNorm2d(3, **kwargs)


def test_ramp_must_end_after_start():
    with pytest.raises(ValueError, match="end_step=1 is before start_step=5"):
        bn.LinearRamp(1.0, 3.0, 5, 1)


def test_unknown_norm_name():
    with pytest.raises(ValueError, match="unknown norm 'bachnorm'"):
        bn.get_norm_layer("bachnorm")


@pytest.mark.parametrize(
    "name,value",
    [
        ("r_max", 0.5),
        ("r_max", float("nan")),
        ("r_max", bn.LinearRamp(0.5, 3.0, 0, 10)),
        ("d_max", -1.0),
        ("r_max", "3"),
    ],
    ids=str,
)
def test_bound_checked_on_assignment(name, value):
    layer = bn.BatchRenorm2d(3, r_max=2.0, d_max=1.0)
    with pytest.raises(ValueError, match=f"{name}=.*(set {name} >= |must be a number)"):
        setattr(layer, name, value)
    assert (layer.r_max, layer.d_max) == (2.0, 1.0)  # unchanged


@pytest.mark.parametrize(
    "cls,shape", [(bn.BatchRenorm2d, (4, 3, 2, 2)), (bn.BatchRenorm1d, (4, 3))]
)
@pytest.mark.parametrize(
    "name,schedule",
    [
        ("r_max", lambda step: 0.5),
        ("r_max", lambda step: torch.tensor(0.5)),
        ("d_max", lambda step: -0.5),
    ],
)
def test_schedule_checked_at_use(cls, shape, name, schedule):
    layer = cls(3, **{name: schedule})
    with pytest.raises(
        ValueError, match=f"{name}=.* at step 0 takes the value -?0.5.*set {name} >= "
    ):
        layer(torch.randn(shape))
    layer = cls(3)
    setattr(layer, name, schedule)  # a schedule can only be judged by its values
    with pytest.raises(ValueError, match=f"{name}=.* at step 0"):
        _ = layer.current_r_max, layer.current_d_max


def test_a_good_schedule_runs():
    layer = bn.BatchRenorm1d(3, r_max=lambda step: 1.0 + step, d_max=lambda step: torch.tensor(0.5))
    layer(torch.randn(4, 3))
    assert layer.current_r_max == 2.0 and layer.current_d_max == 0.5
