"""scripts/claims/batch_size.py: the small-data rows, on synthetic curves."""

from scripts.analysis.windows import PLAN
from scripts.claims import batch_size as b
from scripts.claims.rules import Verdict

SEEDS = range(5)


def _curves(test: dict[int, float], train: dict[int, float]):
    """``series`` over ``{g: final test accuracy}`` and ``{g: final training accuracy}`` of the
    small-data runs, each seed a little off the mean (and the whole-set runs refused)."""
    by_setup = {b.SIZE_BN[g]: g for g in test}

    def series(plan, path, setup, metric):
        assert path == b.SMALL
        level = (train if metric == "train/acc" else test)[by_setup[setup]]
        return {
            s: {0: 0.1, 3000: level + (s - 2) * 1e-3 * (1 + by_setup[setup] % 3)} for s in SEEDS
        }

    return series


def test_ghost_bn_rows_read_the_small_data_runs(monkeypatch):
    test = {8: 0.85, 16: 0.852, 32: 0.848}
    train = {8: 0.90, 16: 0.91, 32: 0.95}  # BN over 32 overfits the most
    monkeypatch.setattr(b, "series", _curves(test, train))
    ghost, overfit = (c for c in b.CLAIMS if "10,000 training images" in c.claim)
    measured = ghost.measure(PLAN)
    assert abs(measured.values["BN g=16 − g=32, 10k"].mean - 0.004) < 1e-9
    assert "10.2 pp above" in measured.text  # 0.95 − 0.848
    assert ghost.rule.decide(measured.values).verdict == Verdict.REPRODUCED
    gaps = overfit.measure(PLAN).values
    assert abs(gaps["gap g=32 − g=8, 10k"].mean - (0.102 - 0.05)) < 1e-9
    assert overfit.rule.decide(gaps).verdict == Verdict.REPRODUCED
    # ghost BN overfitting more than the whole batch: the second row is refuted
    monkeypatch.setattr(b, "series", _curves(test, {8: 0.96, 16: 0.97, 32: 0.95}))
    assert overfit.rule.decide(overfit.measure(PLAN).values).verdict == Verdict.NOT_REPRODUCED
