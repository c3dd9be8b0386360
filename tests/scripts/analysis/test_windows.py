"""scripts/analysis/windows.py: the windows never hold step 0 (nor, for a change between
evaluations, the change away from it), and the alternatives move them as they say."""

import pytest

from scripts.analysis.stats import NonFinite
from scripts.analysis.windows import (
    ALTERNATIVES,
    PLAN,
    EmptyWindow,
    first_step,
    matched_by_progress,
    smoothed,
)

STEPS = list(range(0, 50_001, 500))


def test_early_window_starts_after_initialization():
    assert PLAN.early(STEPS, 5000) == list(range(500, 5001, 500))
    assert PLAN.early(STEPS, 5000, change=True) == list(range(1000, 5001, 500))


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("early window one evaluation shorter", list(range(1000, 4501, 500))),
        ("early window one evaluation longer", list(range(1000, 5501, 500))),
        ("early window starting one evaluation later", list(range(1500, 5001, 500))),
    ],
)
def test_early_alternatives(name, window):
    assert ALTERNATIVES[name].early(STEPS, 5000, change=True) == window


def test_a_one_evaluation_window_shifted_later_is_the_next_evaluation():
    plan = ALTERNATIVES["early window starting one evaluation later"]
    assert plan.early(STEPS, 500) == [1000]


def test_late_window_is_the_second_half():
    assert PLAN.late(STEPS) == list(range(25_500, 50_001, 500))
    assert ALTERNATIVES["late window = last quarter"].late(STEPS)[0] == 38_000
    assert ALTERNATIVES["late window without its first evaluation"].late(STEPS)[0] == 26_000


def test_window_summaries():
    by_seed = {0: {0: 1e6, 10: 1.0, 20: 100.0}, 1: {0: 5.0, 10: 2.0, 20: 8.0}}
    window = lambda steps: [s for s in steps if s > 0]  # noqa: E731
    assert PLAN.per_seed(by_seed, window, geometric=True) == {
        0: pytest.approx(10.0),
        1: pytest.approx(4.0),
    }
    assert PLAN.per_seed(by_seed, window, geometric=False)[0] == pytest.approx(50.5)
    with pytest.raises(NonFinite, match="diverged"):  # never averaged over what is left
        PLAN.per_seed({0: {10: 1.0, 20: float("nan")}}, window, geometric=False)
    with pytest.raises(NonFinite, match="positive"):
        PLAN.per_seed({0: {10: 1.0, 20: 0.0}}, window, geometric=True)
    median = ALTERNATIVES["median over a window's evaluations"]
    # a seed with nothing in the window, or a curve shorter than the others: never skipped
    with pytest.raises(EmptyWindow, match="seed 1: no evaluation in the window"):
        PLAN.per_seed(
            {0: {0: 1.0, 10: 2.0}, 1: {0: 1.0, 5: 2.0, 10: 3.0}},
            lambda s: [10] if 10 in s and 5 not in s else [],
            False,
        )
    with pytest.raises(EmptyWindow, match="end at different steps"):
        PLAN.per_seed({0: {0: 1.0, 10: 2.0}, 1: {0: 1.0, 5: 2.0}}, window, False)
    assert median.per_seed({0: {1: 1.0, 2: 2.0, 3: 30.0}}, window, True) == {0: 2.0}


def test_smoothing_and_first_step():
    curve = {0: 0.0, 100: 0.9, 200: 0.3, 300: 0.6, 400: 0.6}
    s = smoothed(curve, 3)
    assert s[0] == pytest.approx(0.45) and s[200] == pytest.approx(0.6)
    assert first_step(curve, 0.8) == 100
    assert first_step(curve, 0.9) == 100  # at the target counts, not only above it
    assert first_step(s, 0.8) is None  # the one noisy evaluation is averaged away


def test_progress_matching_compares_at_equal_loss():
    # a reaches each loss in half the steps b needs; values are the step itself
    a_loss = {0: 10.0, 1: 1.0, 2: 0.1, 3: 0.01}
    b_loss = {0: 10.0, 2: 1.0, 4: 0.1, 6: 0.01, 8: 0.001}
    a_val = {s: float(s) for s in a_loss}
    b_val = {s: float(s) for s in b_loss}
    pairs = matched_by_progress(a_loss, a_val, b_loss, b_val, levels=3)
    assert [lvl for lvl, _, _ in pairs] == pytest.approx([1.0, 0.1, 0.01])
    assert [(a, b) for _, a, b in pairs] == [(1, 2), (2, 4), (3, 6)]
    # for a change between evaluations the first evaluation after 0 is not used
    pairs = matched_by_progress(a_loss, a_val, b_loss, b_val, levels=2, change=True)
    assert [(a, b) for _, a, b in pairs] == [(2, 4), (3, 6)]
