"""The α and ramp rows of scripts/claims/brn_paper.py: their window is the ramp's, as the
setups' config sets it, and their setups are the reproduction's."""

import math

from experiments.kit.norm import renorm_bounds
from experiments.studies import ALPHA_SETUPS, REPRODUCTIONS
from scripts.claims import brn_paper as b
from tests.configs import compose_config


def test_the_early_window_ends_at_the_first_evaluation_after_the_ramp():
    cfg = compose_config("renorm", ["setup=brn_micro4"])
    steps, every = cfg.train.steps, cfg.eval.every
    r_max, d_max = renorm_bounds(cfg.norm.schedule, steps)
    end = next(t for t in range(steps + 1) if r_max(t) == cfg.norm.schedule.r_max and d_max(t) == cfg.norm.schedule.d_max)  # fmt: skip
    assert math.ceil(end / every) * every == b.RAMP_WINDOW_END
    assert b.RAMP_WINDOW_END - every < end  # the window's last interval holds the ramp's end


def test_the_rows_read_the_setups_the_reproductions_run():
    assert set(b.ALPHAS) | {b.JUMP} == set(ALPHA_SETUPS)
    for setup, alpha in b.ALPHAS.items():
        assert compose_config("renorm", [f"setup={setup}"]).norm.momentum == alpha
    assert compose_config("renorm", [f"setup={b.JUMP}"]).norm.schedule.kind == "fixed"
    confirm = REPRODUCTIONS[b.ALPHA_CONFIRM[0]]
    assert {j.args[0] for j in confirm.stages[0]} == {f"setup={b.RAMPED}", f"setup={b.JUMP}"}
