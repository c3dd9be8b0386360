"""experiments/loss_spikes.py: a step's jump over the median of the steps before it, spikes, and
the per-interval numbers the renorm study logs."""

import math

import pytest

from experiments.loss_spikes import RATIO, LossJumps, jumps


def test_a_jump_is_the_loss_over_the_median_of_the_window_before_it():
    losses = [1.0, 2.0, 3.0, 9.0, 1.0]
    assert jumps(losses, window=3) == [None, None, None, 9.0 / 2.0, 1.0 / 3.0]


def test_no_jump_reads_an_unknown_loss():
    assert jumps([1.0, math.nan, 1.0, 1.0, 1.0], window=2) == [None, None, None, None, 1.0]


def test_bad_windows_and_ratios_are_refused():
    with pytest.raises(ValueError, match="window"):
        jumps([1.0], window=0)
    with pytest.raises(ValueError, match="ratio"):
        LossJumps(1, window=2, ratio=0)


def test_each_interval_gives_its_largest_loss_jump_and_spikes_per_copy():
    j = LossJumps(2, window=2, ratio=RATIO)
    for a, b in [(1.0, 2.0), (1.0, 2.0), (4.0, 2.0)]:  # step 2: copy 0 jumps 4x, copy 1 1x
        j.add([a, b])
    first = j.interval()
    assert first == {
        "train/loss_max": [4.0, 2.0],
        "train/loss_jump": [4.0, 1.0],
        "train/loss_spikes": [1.0, 0.0],
    }
    j.add([1.0, 7.0])  # the window before it: 1, 4 → median 2.5; 2, 2 → 2
    assert j.interval() == {
        "train/loss_max": [1.0, 7.0],
        "train/loss_jump": [0.4, 3.5],
        "train/loss_spikes": [0.0, 1.0],
    }
    assert j.interval() == {}  # nothing since


def test_an_interval_before_the_first_full_window_has_only_its_largest_loss():
    j = LossJumps(1, window=5)
    j.add([3.0])
    j.add([2.0])
    assert j.interval() == {"train/loss_max": [3.0]}


def test_a_restored_history_continues_as_the_uninterrupted_one():
    losses = [1.0, 1.5, 1.2, 5.0, 1.1, 0.9, 4.0]
    whole = LossJumps(1, window=3)
    for v in losses[:4]:
        whole.add([v])
    whole.interval()
    for v in losses[4:]:
        whole.add([v])
    resumed = LossJumps(1, window=3)
    resumed.restore([[*losses[:4], 99.0]], step=4)  # the file may hold steps past the checkpoint
    for v in losses[4:]:
        resumed.add([v])
    assert resumed.interval() == whole.interval()
    short = LossJumps(1, window=3)
    short.restore([[]], step=4)  # no file: the steps before are unknown, so no jump reads them
    short.add([1.0])
    assert short.interval() == {"train/loss_max": [1.0]} and math.isnan(short.losses[0][0])
