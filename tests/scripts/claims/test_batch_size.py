"""scripts/claims/batch_size.py: the small-data rows, on synthetic curves."""

from scripts.analysis.windows import PLAN
from scripts.claims import batch_size as b
from scripts.claims.rules import Verdict

SEEDS = range(5)


def _curves(test: dict[int, float], train: dict[int, float], noise: float = 1e-3):
    """``series`` over ``{g: final test accuracy}`` and ``{g: final training accuracy}`` of the
    small-data runs (their means over seeds), each seed off the mean by an amount of its own
    for every arm and metric, so that no paired difference is the same in every seed."""
    by_setup = {b.SIZE_BN[g]: g for g in test}

    def series(plan, path, setup, metric):
        assert path == b.SMALL
        g = by_setup[setup]
        if metric == "train/acc":
            off = [((s * 7) % 5 - 2) * (1 + g % 5) for s in SEEDS]
            level = train[g]
        else:
            off = [(s - 2) * (1 + g % 3) for s in SEEDS]
            level = test[g]
        return {s: {0: 0.1, 3000: level + off[s] * noise} for s in SEEDS}

    return series


def _rows():
    ghost, overfit = (c for c in b.CLAIMS if "10,000 training images" in c.claim)
    return ghost, overfit


def _verdict(claim):
    return claim.rule.decide(claim.measure(PLAN).values).verdict


def test_ghost_bn_rows_read_the_small_data_runs(monkeypatch):
    test = {8: 0.85, 16: 0.852, 32: 0.848}
    train = {8: 0.90, 16: 0.91, 32: 0.95}  # BN over 32 overfits the most
    monkeypatch.setattr(b, "series", _curves(test, train))
    ghost, overfit = _rows()
    measured = ghost.measure(PLAN)
    assert abs(measured.values["BN g=16 − g=32, 10k"].mean - 0.004) < 1e-9
    assert measured.values["BN g=16 − g=32, 10k"].se > 0
    assert "is 10.2 pp above its test accuracy" in measured.text  # 0.95 − 0.848
    assert ghost.rule.decide(measured.values).verdict == Verdict.REPRODUCED
    gaps = overfit.measure(PLAN).values
    assert abs(gaps["gap g=32 − g=8, 10k"].mean - (0.102 - 0.05)) < 1e-9
    assert overfit.rule.decide(gaps).verdict == Verdict.REPRODUCED


def test_ghost_bn_overfitting_more_refutes_and_noise_leaves_it_open(monkeypatch):
    _, overfit = _rows()
    test = {8: 0.85, 16: 0.85, 32: 0.85}
    monkeypatch.setattr(b, "series", _curves(test, {8: 0.96, 16: 0.97, 32: 0.95}))
    assert _verdict(overfit) == Verdict.NOT_REPRODUCED
    # gaps a tenth of a point apart in seeds ten points apart: the interval holds 0
    monkeypatch.setattr(b, "series", _curves(test, {8: 0.951, 16: 0.951, 32: 0.95}, noise=0.02))
    assert _verdict(overfit) == Verdict.INCONCLUSIVE
    # ghost BN a point below the whole batch: the not-lower row is refuted
    ghost, _ = _rows()
    monkeypatch.setattr(b, "series", _curves({8: 0.835, 16: 0.835, 32: 0.85}, {8: 0.9, 16: 0.9, 32: 0.9}))  # fmt: skip
    assert _verdict(ghost) == Verdict.NOT_REPRODUCED
