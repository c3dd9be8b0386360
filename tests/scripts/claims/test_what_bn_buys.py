"""scripts/claims/what_bn_buys.py: which runs train, and the rates the confirmatory seeds run,
held to what the pilot gives."""

from pathlib import Path

import pytest

from experiments.studies import LR_READ
from scripts.claims import what_bn_buys as w

REPO = Path(__file__).resolve().parents[3]


def test_a_run_trains_only_when_finite_and_at_half_accuracy_or_more():
    assert w.trains(w.TRAINS) and not w.trains(w.TRAINS - 1e-6) and not w.trains(None)
    assert w.largest_trainable({0.01: 0.88, 0.1: 0.87, 0.3: 0.1, 1.0: None}) == 0.1
    assert w.largest_trainable({0.01: 0.3, 0.1: None}) == 0.0


def test_the_confirmatory_rates_are_the_pilots(monkeypatch):
    """The registry's rates (what confirm-lr-control runs) are the shared rate and each
    network's best rate of the committed pilot: a pilot run again with other numbers fails here."""
    monkeypatch.chdir(REPO)
    shared = w.shared_rate()
    wanted = {w.BN: {shared, w.best_rate(w.BN)}, w.PLAIN: {shared, w.best_rate(w.PLAIN)}}
    assert {k: {float(r) for r in v.split(",")} for k, v in LR_READ.items()} == wanted


@pytest.mark.parametrize("rate", w.RATES)
def test_the_grid_is_the_pilots(monkeypatch, rate):
    monkeypatch.chdir(REPO)
    data = w.runs(w.PLAN)
    assert all(rate in by_rate for seeds in data.values() for by_rate in seeds.values())
