"""scripts/claims/normalizers.py: the one initial learning rate every normalizer runs at."""

from pathlib import Path

from experiments.studies import NORMS_LR, study
from scripts.claims import what_bn_buys as w

REPO = Path(__file__).resolve().parents[3]


def test_every_normalizer_runs_at_bns_best_rate_of_the_learning_rate_control(monkeypatch):
    """The rate is BN's best in the committed learning-rate control's pilot: that pilot run
    again with another best rate fails here."""
    monkeypatch.chdir(REPO)
    assert float(NORMS_LR) == w.best_rate(w.BN)
    for r in study("normalizers").reproductions:
        assert all(f"train.lr={NORMS_LR}" in job.args for stage in r.stages for job in stage)
