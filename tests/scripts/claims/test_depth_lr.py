"""scripts/claims/depth_lr.py: which runs train, and each row's per-seed rule, on synthetic rows."""

import pytest

from experiments.kit.errors import MissingResult
from scripts.analysis.windows import ALTERNATIVES, PLAN
from scripts.claims import depth_lr as d
from scripts.claims.rules import Verdict


def _row(norm, seed, rate, depth, acc, diverged=False, loss=None):
    return {
        "norm.kind": norm, "seed": str(seed), "train.lr": str(rate), "depth": str(depth),
        "diverged": str(diverged), "test_acc_subset": "" if acc is None else str(acc),
        "final_train_loss": "" if loss is None else str(loss),
    }  # fmt: skip


def test_a_run_trains_only_when_finite_and_at_half_accuracy_or_more():
    assert d.trains(False, d.TRAINS) and not d.trains(False, d.TRAINS - 1e-6)
    assert not d.trains(True, 0.9) and not d.trains(False, None)
    grid = d.grid_of([_row("batchnorm", 0, 0.1, 8, "0.91"), _row("none", 0, 10, 64, None, True)])
    assert grid == {"batchnorm": {0: {0.1: {8: True}}}, "none": {0: {10.0: {64: False}}}}


def test_the_alternative_criterion_reads_the_training_loss_alone():
    assert d.trains_by_loss(False, d.TRAINS_LOSS - 1e-6) and not d.trains_by_loss(False, d.TRAINS_LOSS)  # fmt: skip
    assert not d.trains_by_loss(True, 0.1) and not d.trains_by_loss(False, None)
    # low training loss but running statistics that classify badly: untrainable by the test
    # accuracy, trainable by the loss
    rows = [_row("batchnorm", 0, 0.1, 64, "0.2", loss="0.3"), _row("none", 0, 0.1, 64, "0.9", loss="2.3")]  # fmt: skip
    assert d.grid_of(rows) == {"batchnorm": {0: {0.1: {64: False}}}, "none": {0: {0.1: {64: True}}}}  # fmt: skip
    assert d.grid_of(rows, by_loss=True) == {"batchnorm": {0: {0.1: {64: True}}}, "none": {0: {0.1: {64: False}}}}  # fmt: skip


def _bn(*rows):
    """A seed's grid from ``(rate, largest depth that trains, lowest depth that trains)``."""
    return {r: {k: lo <= k <= top for k in d.DEPTHS} for r, top, lo in rows}


def test_the_largest_trainable_depth_falls_only_below_the_smallest_rates():
    assert d.largest_trainable({2: True, 4: True, 8: False}) == 4
    assert d.largest_trainable({2: False}) == 0
    assert d.falls_with_rate(_bn((0.01, 64, 2), (0.1, 16, 2), (1, 0, 99)))  # 16 at 0.1 < 64
    assert not d.falls_with_rate(_bn((0.01, 64, 2), (0.1, 64, 2), (1, 0, 99)))
    # depth 2 trains at no rate above the smallest: nothing to compare, the seed lacks it
    assert not d.falls_with_rate(_bn((0.01, 64, 2), (0.1, 0, 99)))
    # the largest rate at which depth 2 trains is the one read, not the largest of the grid
    assert d.falls_with_rate(_bn((0.01, 32, 2), (0.1, 8, 2), (1, 64, 4)))


def test_depth_64_fails_where_depth_8_trains():
    assert d.deep_fails_where_shallow_trains(_bn((0.01, 64, 2), (0.1, 8, 2)))
    assert not d.deep_fails_where_shallow_trains(_bn((0.01, 64, 2), (0.1, 64, 2)))
    assert d.bn_limited_rates(_bn((0.01, 64, 2), (0.1, 8, 2), (1, 16, 2), (3, 4, 2))) == [0.1, 1]


def test_without_bn_depth_64_must_train_at_every_rate_where_bn_is_limited():
    bn = _bn((0.01, 64, 2), (0.1, 8, 2), (1, 8, 2))
    assert d.plain_deep_trains_there(bn, _bn((0.01, 64, 2), (0.1, 64, 2), (1, 64, 2)))
    assert not d.plain_deep_trains_there(bn, _bn((0.01, 64, 2), (0.1, 64, 2), (1, 8, 2)))
    assert not d.plain_deep_trains_there(_bn((0.01, 64, 2)), _bn((0.01, 64, 2)))  # none limited


def test_the_rows_decide_seed_by_seed(monkeypatch):
    good = [_row("batchnorm", s, r, k, 0.9 if ok else 0.1) for s in (0, 1) for r, v in _bn((0.01, 64, 2), (0.1, 8, 2)).items() for k, ok in v.items()]  # fmt: skip
    plain = [_row("none", s, r, k, 0.9) for s in (0, 1) for r in (0.01, 0.1) for k in d.DEPTHS]
    monkeypatch.setattr(d.committed, "rows", lambda *a: good + plain)
    verdicts = [c.rule.decide(c.measure(PLAN).values).verdict for c in d.CLAIMS]
    assert verdicts == [Verdict.REPRODUCED] * 3
    # one seed whose BN depth 64 trains at every rate: the first two rows fail on it
    bad = [r if not (r["seed"] == "1" and r["depth"] in ("16", "32", "64")) else {**r, "test_acc_subset": "0.9"} for r in good]  # fmt: skip
    monkeypatch.setattr(d.committed, "rows", lambda *a: bad + plain)
    verdicts = [c.rule.decide(c.measure(PLAN).values).verdict for c in d.CLAIMS]
    assert verdicts[:2] == [Verdict.NOT_REPRODUCED] * 2
    # the alternative plan reads the training loss: every run of ``bad`` left at loss 2.3 fails
    monkeypatch.setattr(d.committed, "rows", lambda *a: [{**r, "final_train_loss": "2.3"} for r in bad + plain])  # fmt: skip
    by_loss = ALTERNATIVES["training-loss criterion of trainability"]
    assert all(c.alternatives == ("training-loss criterion of trainability",) for c in d.CLAIMS)
    verdicts = [c.rule.decide(c.measure(by_loss).values).verdict for c in d.CLAIMS]
    assert verdicts == [Verdict.NOT_REPRODUCED] * 3


def test_the_figure_draws_nothing_without_results_and_the_heat_map_with_them(
    monkeypatch, tmp_path, capsys
):
    from scripts import plot_depth_lr, plotting

    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    (tmp_path / "figures").mkdir()

    def missing(plan):
        raise MissingResult("results/mechanism/depth_lr/mnist.csv is not committed")

    monkeypatch.setattr(d, "runs", missing)
    plot_depth_lr.main()
    assert "no result committed" in capsys.readouterr().out
    assert not list((tmp_path / "figures").iterdir())
    bn = {0: _bn((0.01, 64, 2), (0.1, 8, 2)), 1: _bn((0.01, 32, 2), (0.1, 8, 2))}
    share = plot_depth_lr.fractions(bn)
    assert share[d.DEPTHS.index(64), d.RATES.index(0.01)] == 0.5
    assert share[d.DEPTHS.index(8), d.RATES.index(0.1)] == 1.0
    assert share[:, d.RATES.index(10.0)].tolist() == [pytest.approx(float("nan"), nan_ok=True)] * 6
    monkeypatch.setattr(d, "runs", lambda plan: {d.BN: bn, d.PLAIN: bn})
    plot_depth_lr.main()
    assert (tmp_path / "figures" / "depth_lr.png").exists()
