"""scripts/analysis/time_to_accuracy.py: steps to fixed targets with runs that never reach them
censored (a speed-up under every placement of them at their last evaluation or the cap), diverged
runs entering as far as they go, the registered confirmatory seeds, speed-ups unpaired (Welch for confirmatory seeds, the
pilot's pooled SD for the pilot), smoothed maxima after initialization, and the share of a
speed-up with Fieller's set."""

import dataclasses
import itertools
import math
import statistics

import pytest
from scipy import stats

from experiments.kit.errors import BadResults, MissingResult
from scripts.analysis import time_to_accuracy as tta
from scripts.analysis.stats import pooled_sd, welch
from scripts.analysis.windows import PLAN, smoothed
from tests.scripts.analysis.fig3_collection import write_fig3

CAP = 1000


def _write(root, arms: dict[str, dict[int, dict[int, float]]], folder: str = tta.FOLDER) -> None:
    """A collection under ``root``: per arm, per seed, its test-subset curve."""
    write_fig3(root, arms, CAP, folder=folder)


def _ramp(reach_at: int, top: float = 0.9, stop: int = CAP) -> dict[int, float]:
    """A curve rising linearly from 0.5 to ``top`` at ``reach_at`` steps, then flat, to ``stop``
    (its last evaluation: the cap, or a plateau's stop)."""
    return {s: 0.5 + (top - 0.5) * min(1.0, s / reach_at) for s in range(0, stop + 1, 100)}


@pytest.fixture(autouse=True)
def _registered(monkeypatch):
    """The confirmatory seeds of these collections: 1000 and 1001 (1000-1002 in ``confirmed``),
    with a cap of CAP steps."""
    monkeypatch.setattr(tta, "SEEDS", (1000, 1001))
    monkeypatch.setitem(tta.PROTOCOL, "steps", CAP)


def _plan(tmp_path, confirmatory: bool):
    root = tmp_path / ("confirmatory" if confirmatory else "results")
    return dataclasses.replace(PLAN, root=str(root)), root


ARMS = {  # steps at which each seed reaches 0.9 (and every lower target proportionally)
    "inception": (800, 1000, 900),
    "bn_baseline": (600, 700, 800),
    "bn_x5": (200, 300, 250),
    "bn_x30": (100, 200, 200),
    "bn_x5_sigmoid": (300, 400, 300),
}


@pytest.fixture
def confirmed(tmp_path, monkeypatch):
    monkeypatch.setattr(tta, "SEEDS", (1000, 1001, 1002))
    plan, root = _plan(tmp_path, True)
    _write(root, {k: {1000 + i: _ramp(r) for i, r in enumerate(v)} for k, v in ARMS.items()})
    return plan


def _steps(curve: dict[int, float], target: float) -> int:
    return next(s for s in sorted(curve) if curve[s] >= target)


def test_a_run_that_never_reaches_a_target_is_censored_at_its_last_evaluation(tmp_path):
    plan, root = _plan(tmp_path, True)
    _write(root, {"inception": {1000: _ramp(500), 1001: _ramp(500, top=0.7, stop=600)}})
    r = tta.reaches(plan, "inception", 0.8)
    assert r[1000] == tta.Reach(_steps(_ramp(500), 0.8), True)
    assert r[1001] == tta.Reach(600, False)  # plateaued below at step 600: more than 600 steps


def test_a_confirmatory_collection_evaluated_otherwise_is_refused(tmp_path):
    import json

    plan, root = _plan(tmp_path, True)
    _write(root, {"inception": {1000: _ramp(500), 1001: _ramp(600)}})
    assert tta.PROTOCOL == {"test_subset": 5000, "eval_every": 100, "steps": CAP}
    path = root / tta.FOLDER / "summary.json"
    summary = json.loads(path.read_text())
    summary["converged"]["test_subset"] = 2000  # the pilot's protocol
    path.write_text(json.dumps(summary))
    with pytest.raises(BadResults, match=r"ran with \{'test_subset': 2000\}, not the"):
        tta.reaches(plan, "inception", 0.8)
    summary["converged"]["test_subset"] = 5000
    summary["steps"] = 8000  # the pilot's cap: censored runs would be placed there
    path.write_text(json.dumps(summary))
    with pytest.raises(BadResults, match=r"ran with \{'steps': 8000\}"):
        tta.reaches(plan, "inception", 0.8)
    del summary["converged"]
    path.write_text(json.dumps(summary))
    with pytest.raises(BadResults, match="'eval_every': None"):
        tta.maxima(plan, "inception")


def test_a_row_names_the_runs_whose_maximum_is_not_a_plateaus(tmp_path):
    """Diverged, stopped by the cap, or stopped on reaching a target (the collection's record
    of how each run ended): their maxima are not plateaus, and the row says so."""
    import json

    plan, root = _plan(tmp_path, True)
    arms = {"inception": {1000: _ramp(500), 1001: _ramp(500, stop=600)}, "bn_x5": {1000: _ramp(200, stop=400), 1001: _ramp(300, stop=500)}}  # fmt: skip
    write_fig3(root, arms, CAP, diverged={"bn_x5": {1001}})
    label = str.upper
    assert tta.unfinished(plan, ["inception", "bn_x5"], label) == (
        " (not at a plateau: INCEPTION 1 run stopped at the cap, BN_X5 1 run diverged; a diverged "
        "run's maximum is the one it reached before diverging; a run stopped at the cap: its "
        "maximum is a lower bound of its plateau)"
    )
    path = root / tta.FOLDER / "summary.json"
    summary = json.loads(path.read_text())
    summary["converged"]["setups"] = {"bn_x5": {"seeds": [{"ended_by": "target"}, {"ended_by": "diverged"}]}}  # fmt: skip
    path.write_text(json.dumps(summary))
    assert "BN_X5 1 run diverged, BN_X5 1 run stopped at the target;" in tta.unfinished(
        plan, ["bn_x5"], label
    )
    assert tta.unfinished(plan, ["inception"], label).startswith(
        " (not at a plateau: INCEPTION 1 run"
    )
    assert tta.unfinished(plan, [], label) == ""


def test_the_smoothed_alternative_reads_steps_on_a_moving_average(tmp_path):
    """One lucky evaluation above the target sets a run's steps on its raw curve, not on its
    curve smoothed over 3 evaluations (the robustness alternative), which reaches it later."""
    plan, root = _plan(tmp_path, True)
    lucky = {s: 0.6 + 0.2 * min(1.0, s / 800) for s in range(0, CAP + 1, 100)} | {300: 0.81}
    _write(root, {"inception": {1000: lucky, 1001: _ramp(500)}})
    assert tta.reaches(plan, "inception", 0.8)[1000] == tta.Reach(300, True)
    smooth = dataclasses.replace(plan, steps_smoothing=3)
    assert tta.reaches(smooth, "inception", 0.8)[1000] == tta.Reach(
        _steps(smoothed(lucky, 3), 0.8), True
    )
    assert _steps(smoothed(lucky, 3), 0.8) == 900  # at 800 the mean of 0.775, 0.8 and 0.8


def test_confirmatory_speedup_is_welch_on_log_steps(confirmed):
    target = 0.8
    s = tta.speedup(confirmed, "bn_x5", target)
    base = [math.log10(_steps(_ramp(r), target)) for r in ARMS["inception"]]
    var = [math.log10(_steps(_ramp(r), target)) for r in ARMS["bn_x5"]]
    ref = stats.ttest_ind(base, var, equal_var=False)
    assert s.estimate.log and s.estimate.mean == pytest.approx(
        statistics.fmean(base) - statistics.fmean(var)
    )
    assert 2 * s.estimate.p_greater(0) == pytest.approx(ref.pvalue, rel=1e-9)
    assert (s.base_censored, s.variant_censored, s.seeds) == (0, 0, (3, 3))


def _gmean_log(*steps: int) -> float:
    return statistics.fmean(math.log10(x) for x in steps)


def test_a_speedup_is_estimated_under_every_placement_of_censored_runs(tmp_path):
    """Each arm's censored runs at their last evaluation (Inception's at 600, the variant's at
    400) or at the cap: the smallest speed-up with Inception's at 600 and the variant's at the
    cap, the largest the other way round."""
    plan, root = _plan(tmp_path, True)
    arms = {
        "inception": {1000: _ramp(900), 1001: _ramp(900, top=0.75, stop=600)},
        "bn_x5": {1000: _ramp(200), 1001: _ramp(300, top=0.75, stop=400)},
    }
    _write(root, arms)
    s = tta.speedup(plan, "bn_x5", 0.8)
    inc, x5 = _steps(_ramp(900), 0.8), _steps(_ramp(200), 0.8)
    at = {tta.AT_LAST: (600, 400), tta.AT_CAP: (CAP, CAP)}
    assert (s.base_censored, s.variant_censored) == (1, 1)
    assert set(s.placements) == set(tta.PLACEMENTS)
    for (pb, pv), e in s.placements.items():
        expected = _gmean_log(inc, at[pb][0]) - _gmean_log(x5, at[pv][1])
        assert e.mean == pytest.approx(expected), (pb, pv)
    means = [e.mean for e in s.placements.values()]
    assert s.estimate.mean == min(means) and s.largest.mean == max(means)
    assert "last evaluation or the cap" in s.text()


# Eight runs of a base arm reach a target, two never do (last evaluated at 7,320 and 1,660
# steps of a 10,000-step cap); no variant run is censored. The first at the cap and the second
# at its last evaluation leave the speed-up less sure than either arm-wide placement does.
MIX_CAP = 10_000
MIX_BASE = {i: tta.Reach(s, True) for i, s in enumerate((2370, 2410, 3050, 5120, 6300, 6310, 6540, 8950))}  # fmt: skip
MIX_BASE |= {8: tta.Reach(7320, False), 9: tta.Reach(1660, False)}
MIX_VARIANT = {i: tta.Reach(s, True) for i, s in enumerate((2560, 1460, 3560, 1430, 3480, 2910, 2230, 1760, 2300, 2570))}  # fmt: skip


def _mix_p(at_cap: tuple[bool, bool], bound: float, show: bool) -> float:
    """The p-value with the base's two censored runs each at the cap or its last evaluation."""
    place = dict(zip((8, 9), at_cap))
    base = [math.log10(MIX_CAP if place.get(k) else r.steps) for k, r in MIX_BASE.items()]
    variant = [math.log10(r.steps) for r in MIX_VARIANT.values()]
    e = welch(base, variant, log=True)
    return e.p_greater(bound) if show else e.p_less(bound)


@pytest.mark.parametrize("bound", [0.0, math.log10(1.5)])
@pytest.mark.parametrize("show", [True, False])
def test_the_least_favourable_mix_is_the_worst_of_every_mix(bound, show):
    got = tta.least_favourable(MIX_BASE, MIX_VARIANT, MIX_CAP, bound, show)
    p = got.p_greater(bound) if show else got.p_less(bound)
    every = {c: _mix_p(c, bound, show) for c in itertools.product((False, True), repeat=2)}
    assert p == pytest.approx(max(every.values()), rel=1e-9)
    if show and bound == 0.0:  # a mix, not an arm-wide placement, is the worst here
        assert p > max(every[False, False], every[True, True])


def test_the_pilot_mixes_are_its_ends_and_the_confirmatory_ones_searched(tmp_path):
    """One spread for every placement (the pilot's pooled SD): the smallest and largest
    speed-ups are the least favourable to showing and to refuting it."""
    arms = {k: {1000 + i: _ramp(r) for i, r in enumerate(v[:2])} for k, v in ARMS.items()}
    arms["inception"][1001] = _ramp(900, top=0.75, stop=600)
    arms["bn_x5"][1001] = _ramp(300, top=0.75, stop=400)
    for confirmatory in (False, True):
        plan, root = _plan(tmp_path / str(confirmatory), confirmatory)
        _write(root, arms)
        s = tta.speedup(plan, "bn_x5", 0.8, bounds=(0.0, 0.3))
        assert set(s.mixes) == {(0.0, True), (0.0, False), (0.3, True), (0.3, False)}
        if not confirmatory:
            assert s.mixes[0.3, True] == s.estimate and s.mixes[0.3, False] == s.largest
        else:
            b, v = (tta.reaches(plan, k, 0.8) for k in ("inception", "bn_x5"))
            assert s.mixes[0.3, False] == tta.least_favourable(b, v, CAP, 0.3, False)
    assert tta.speedup(plan, "bn_x5", 0.8).mixes == {}
    # along the grid, only the headline's mixes are searched: no rule reads the others'
    curve = {c.target: c for c in tta.curve(plan, "bn_x5", bounds=(0.0, 0.3))}
    assert list(curve) == list(tta.TARGETS)
    headline = tta.speedup(plan, "bn_x5", tta.HEADLINE, bounds=(0.0, 0.3))
    assert curve[tta.HEADLINE].mixes == headline.mixes and len(headline.mixes) == 4
    assert all(c.mixes == {} for t, c in curve.items() if t != tta.HEADLINE)


def test_uncensored_every_placement_is_one_estimate(confirmed):
    s = tta.speedup(confirmed, "bn_x5", 0.8)
    assert len(set(s.placements.values())) == 1 and "the cap" not in s.text()


def test_no_spread_at_all_gives_no_interval(tmp_path):
    """Every run of both arms censored at one step: a zero standard error is not certainty."""
    plan, root = _plan(tmp_path, True)
    flat = _ramp(100, top=0.7, stop=500)
    _write(root, {"inception": {1000: flat, 1001: flat}, "bn_x5": {1000: flat, 1001: flat}})
    s = tta.speedup(plan, "bn_x5", 0.8)
    assert all(e.se is None for e in s.placements.values())
    assert "no interval" in s.text()


def test_a_diverged_run_enters_as_far_as_its_curve_goes(tmp_path):
    """At the cap for a target it had not reached (it never will, under any placement); its
    maximum the one it reached before diverging (chance if it logged nothing after
    initialization)."""
    plan, root = _plan(tmp_path, True)
    arms = {"bn_x30": {1000: _ramp(200), 1001: _ramp(400, stop=300)}}
    arms["inception_sigmoid"] = {1000: {0: 0.1}, 1001: _ramp(200, top=0.5)}
    write_fig3(root, arms, CAP, diverged={"bn_x30": {1001}, "inception_sigmoid": {1000}})
    r = tta.reaches(plan, "bn_x30", 0.85)
    assert r[1001] == tta.Reach(CAP, False)
    s = tta.speedup(plan, "bn_x30", 0.85, base="bn_x30")
    assert len({e.mean for e in s.placements.values()}) == 1  # no run left to place
    assert tta.reaches(plan, "bn_x30", 0.6)[1001].reached  # reached before it diverged
    best = tta.maxima(plan, "bn_x30")
    assert best[1000] == pytest.approx(0.9)
    trained = {k: v for k, v in _ramp(400, stop=300).items() if k > 0}
    assert best[1001] == pytest.approx(max(smoothed(trained, plan.smoothing).values()))
    assert best[1001] < 0.8  # up to its divergence, short of its arm's 0.9
    assert tta.maxima(plan, "inception_sigmoid")[1000] == tta.CHANCE


def test_too_many_censored_runs_to_search_is_an_error():
    many = {i: tta.Reach(100, False) for i in range(tta.MOST_FREE + 1)}
    with pytest.raises(ValueError, match="censored runs in one arm"):
        tta.least_favourable(many, MIX_VARIANT, MIX_CAP, 0.0, True)


def test_the_final_full_test_reading_of_a_maximum(tmp_path):
    """The robustness reading: each run's accuracy on the whole test set at its end (chance for
    a diverged run), not its smoothed test-subset maximum."""
    plan, root = _plan(tmp_path, True)
    arms = {"bn_x30": {1000: _ramp(200), 1001: _ramp(400, stop=300)}}
    extra = {"bn_x30": {"test_acc": {"per_seed": [0.871]}}}  # the diverged seed records none
    write_fig3(root, arms, CAP, extra, diverged={"bn_x30": {1001}})
    final = tta.maxima(dataclasses.replace(plan, final_full_test=True), "bn_x30")
    assert final == {1000: 0.871, 1001: tta.CHANCE}
    assert tta.maxima(plan, "bn_x30")[1000] == pytest.approx(0.9)


def test_the_confirmatory_seeds_must_be_the_registered_ones(tmp_path, monkeypatch):
    plan, root = _plan(tmp_path, True)
    _write(root, {"inception": {1000: _ramp(500), 1001: _ramp(600)}})
    monkeypatch.setattr(tta, "SEEDS", (1000, 1001, 1002))
    with pytest.raises(BadResults, match=r"seeds \[1000, 1001\], not the registered"):
        tta.reaches(plan, "inception", 0.8)


def test_the_pilot_pools_the_spread_of_every_trained_arm(tmp_path):
    plan, root = _plan(tmp_path, False)
    pilot = {k: {i: _ramp(r) for i, r in enumerate(v[:2])} for k, v in ARMS.items()}
    pilot["bn_x5_sigmoid"] = {0: _ramp(300)}  # one seed: no spread of its own
    _write(root, pilot)
    target = 0.8
    logs = {
        k: [math.log10(_steps(_ramp(r), target)) for r in v[: len(pilot[k])]]
        for k, v in ARMS.items()
    }
    sd, df = pooled_sd(list(logs.values()))
    s = tta.speedup(plan, "bn_x5", target).estimate
    assert df == 4 and s.dof == 4
    assert s.se == pytest.approx(sd * math.sqrt(1 / 2 + 1 / 2))
    assert tta.pilot_spread(plan, target).sd == pytest.approx(sd * math.sqrt(2))


def test_maxima_are_of_the_smoothed_curve_after_initialization(tmp_path):
    plan, root = _plan(tmp_path, True)
    spiky = _ramp(300)
    spiky[500] = 0.99  # one lucky evaluation does not make the maximum
    flat = _ramp(300, top=0.5)
    flat[0] = 0.95  # nor does the evaluation at initialization
    _write(
        root,
        {
            "bn_x5": {1000: spiky, 1001: _ramp(300)},
            "inception": {1000: _ramp(300, 0.88), 1001: _ramp(300, 0.86)},
            "inception_sigmoid": {1000: flat, 1001: flat},
        },
    )
    assert tta.maxima(plan, "inception_sigmoid") == {1000: 0.5, 1001: 0.5}
    best = tta.maxima(plan, "bn_x5")
    assert best[1000] == pytest.approx(0.9 + (0.99 - 0.9) / plan.smoothing)
    assert best[1001] == pytest.approx(0.9)
    gap = tta.maximum_gap(plan, "bn_x5", "inception")
    assert gap.mean == pytest.approx(statistics.fmean(best.values()) - 0.87)


def test_the_share_of_a_speedup_is_a_ratio_of_log_step_gaps(confirmed):
    r = tta.share(confirmed, "bn_x30", "bn_x5", "bn_baseline", 0.8)
    m = {
        k: statistics.fmean(math.log10(_steps(_ramp(x), 0.8)) for x in ARMS[k])
        for k in ("bn_baseline", "bn_x30", "bn_x5")
    }
    assert r.value == pytest.approx(
        (m["bn_baseline"] - m["bn_x30"]) / (m["bn_baseline"] - m["bn_x5"])
    )
    assert r.kind == "interval" and r.low < r.value < r.high


def test_an_arm_the_folder_lacks_is_a_missing_result(confirmed):
    with pytest.raises(MissingResult, match="inception_x5"):
        tta.require_arms(confirmed, "inception_x5")
    with pytest.raises(MissingResult, match="inception_x5"):
        tta.maxima(confirmed, "inception_x5")
