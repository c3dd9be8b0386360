"""scripts/claims.py: the committed results/CLAIMS.md is what the committed results give, and
its intervals and verdict rules compute what they say."""

import math
import statistics
from pathlib import Path

import pytest

from scripts import claims
from scripts.claims import Estimate


def test_the_committed_claims_table_is_regenerated_byte_for_byte(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the paths are relative to the repo
    assert claims.OUT.read_text() == claims.render()


def test_t_interval_of_three_values():
    e = Estimate.of([1.0, 2.0, 3.0])
    half = 4.303 * statistics.stdev([1.0, 2.0, 3.0]) / math.sqrt(3)
    assert (e.mean, e.low, e.high, e.n) == (
        2.0,
        pytest.approx(2.0 - half),
        pytest.approx(2.0 + half),
        3,
    )
    assert Estimate.of([0.5]).low is None


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        ([0.01, 0.02, 0.015], "reproduced"),
        ([-0.01, 0.02, 0.005], "within noise"),
        ([-0.02, -0.021, -0.019], "not reproduced"),
    ],
)
def test_positive_rule(values, verdict):
    assert claims._positive(Estimate.of(values)) == verdict


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        ([0.001, -0.001, 0.0], "reproduced"),
        ([0.02, 0.021, 0.019], "not reproduced"),
        ([0.0, 0.01, -0.01], "within noise"),
    ],
)
def test_within_rule(values, verdict):
    assert claims._within(Estimate.of(values), 0.003) == verdict


def test_ratio_bootstrap_is_the_ratio_of_means_with_a_fixed_interval():
    gain, gap = [0.5, 0.7, 0.9, 0.4, 0.6], [1.0, 1.2, 0.8, 1.1, 0.9]
    share, low, high = claims.ratio_bootstrap(gain, gap)
    assert share == pytest.approx(statistics.fmean(gain) / statistics.fmean(gap))
    assert low < share < high
    assert (share, low, high) == claims.ratio_bootstrap(gain, gap)  # seeded: the same every run


def test_late_means_and_paired_log_ratios(tmp_path, monkeypatch):
    folder = tmp_path / "study"
    folder.mkdir()
    rows = ["setup,seed,step,metric,value"]
    for seed, scale in ((0, 1.0), (1, 2.0)):
        for step, v in ((0, 100.0), (10, 1.0), (20, 3.0), (30, float("nan"))):
            rows += [f"a,{seed},{step},m,{v * scale}", f"b,{seed},{step},m,{v * scale * 10}"]
    (folder / "runs.csv").write_text("\n".join(rows) + "\n")
    monkeypatch.setattr(claims, "RESULTS", tmp_path)
    claims._read_runs_csv.cache_clear()
    late = claims._late("study", "a", "m")  # steps after 15: 20 (30 is NaN and skipped)
    assert late == {0: 3.0, 1: 6.0}
    assert claims._late("study", "a", "m", 0.0) == {0: 2.0, 1: 4.0}  # steps 10 and 20
    e = claims._log_ratio(late, claims._late("study", "b", "m"))
    assert (e.mean, e.low, e.high) == (
        pytest.approx(-1.0),
        pytest.approx(-1.0),
        pytest.approx(-1.0),
    )
    assert claims._lower(e) == "reproduced" and claims._times(e).startswith("0.1×")
    with pytest.raises(KeyError):
        claims._late("study", "c", "m")
    claims._read_runs_csv.cache_clear()


def test_a_non_finite_number_is_one_line_and_no_verdict(monkeypatch, tmp_path):
    import math

    from scripts import claims

    with pytest.raises(claims.NonFinite):
        claims.Estimate.of([0.1, math.nan, 0.2])
    monkeypatch.setattr(claims, "render", lambda: claims.Estimate.of([math.inf]))
    monkeypatch.setattr(claims, "OUT", tmp_path / "CLAIMS.md")
    with pytest.raises(SystemExit, match="NaN/infinite .*CLAIMS.md left as it was"):
        claims.main([])
    assert not (tmp_path / "CLAIMS.md").exists()
