"""scripts/claims/bn_paper.py: every Figure 3 row decided end to end, pilot and confirmatory
seeds, on a generated confirmatory collection laid out as `make confirm-inception` writes it."""

import dataclasses
import math
import statistics

import pytest

from experiments.studies import CONFIRM_INCEPTION, INCEPTION_CONTROLS, INCEPTION_VARIANTS
from scripts.analysis import time_to_accuracy as tta
from scripts.analysis.windows import PLAN
from scripts.claims import bn_paper, claim
from scripts.claims.rules import Verdict
from tests.scripts.analysis.fig3_collection import write_fig3

CAP = 32000
# Per arm: (the step at which its curve levels off, where it levels off); None: flat at chance.
ARMS = {
    "inception": (8000, 0.86),
    "bn_baseline": (4000, 0.875),
    "bn_x5": (1500, 0.875),
    "bn_x30": (1200, 0.89),
    "bn_x5_sigmoid": (2000, 0.85),
    "inception_sigmoid": None,
    "inception_x5": (3000, 0.88),
    "bn_baseline_x5": (2500, 0.88),
}


def _curve(arm: str, seed: int) -> dict[int, float]:
    """A run's test-subset curve: linear from 0.5 at step 0 to its level, then flat, with a
    seed's own offsets in its speed (±10%) and level (±0.2 pp), to its plateau's stop."""
    k = seed - CONFIRM_INCEPTION[0]
    if ARMS[arm] is None:
        return {s: 0.1 + 0.001 * ((k + s // 100) % 3) for s in range(0, 1501, 100)}
    at, level = ARMS[arm]
    at, level = int(at * (0.9 + 0.02 * k)), level + 0.0005 * (k - 4.5)
    end = int(1.5 * at) // 100 * 100 + 100
    return {s: 0.5 + (level - 0.5) * min(1.0, s / at) for s in range(0, end + 1, 100)}


def _collect(
    tmp_path,
    monkeypatch,
    diverged: dict[str, set[int]] | None = None,
    curves: dict[str, dict[int, dict[int, float]]] | None = None,
):
    """The generated collection under a confirmatory root the claims read, with ``curves[arm]``
    replacing some seeds' curves; a ``diverged`` seed's curve stops halfway, and its summary
    records no final accuracy (as a collection does)."""
    root = tmp_path / "confirmatory"
    arms = (*INCEPTION_VARIANTS, *INCEPTION_CONTROLS)
    assert set(arms) == set(ARMS)
    bad = diverged or {}
    given = curves or {}
    curves = {a: {s: _curve(a, s) for s in CONFIRM_INCEPTION} | given.get(a, {}) for a in arms}
    for a, seeds in bad.items():
        for s in seeds:
            c = curves[a][s]
            curves[a][s] = {k: v for k, v in c.items() if k <= max(c) // 2}
    # as the collector writes it: no entry at all for an arm whose every seed diverged
    ends = {a: [c[max(c)] for s, c in curves[a].items() if s not in bad.get(a, ())] for a in arms}
    final = {a: {"test_acc": {"per_seed": v}} if v else {} for a, v in ends.items()}
    write_fig3(root, curves, CAP, final, diverged=bad)
    monkeypatch.setattr(claim, "CONFIRMED", dataclasses.replace(PLAN, root=str(root)))
    return root


@pytest.fixture
def confirmed(tmp_path, monkeypatch):
    return _collect(tmp_path, monkeypatch)


def _rows():
    return [c for c in bn_paper.CLAIMS if c.confirm == bn_paper.FIG3]


def _outcome(text: str):
    [c] = [c for c in _rows() if c.claim.startswith(text)]
    return claim.decide(c)


def test_every_figure_3_row_decides_on_the_confirmatory_seeds(confirmed):
    for c in _rows():
        outcome = claim.decide(c)
        assert outcome.decision.verdict != Verdict.NO_RESULT, c.claim
        assert outcome.measured is not None and outcome.measured.text, c.claim


def test_figure_3_rows_read_what_the_runs_show(confirmed):
    # BN-x5 levels off at 1,500 steps (±10%), Inception at 8,000: both from 0.5 on a line, so
    # at 82% the ratio of their steps is 8,000 / 1,500 up to the evaluation interval
    speedup = _outcome("BN-x5 reaches").measured.values["faster"]
    assert 10**speedup.mean == pytest.approx(8000 / 1500, rel=0.1)
    assert _outcome("BN-x5 reaches").decision.verdict != Verdict.NOT_REPRODUCED
    assert _outcome("Every BN variant reaches a higher").decision.verdict == Verdict.REPRODUCED
    assert _outcome("BN-x30 reaches a higher").decision.verdict == Verdict.REPRODUCED
    # Inception at x5 trains to 88%: the paper's control does not blow up here
    assert _outcome("x5 the learning rate without BN").decision.verdict == Verdict.NOT_REPRODUCED
    assert _outcome("BN makes sigmoid").decision.verdict == Verdict.REPRODUCED
    assert _outcome("Under BN, sigmoid").decision.verdict == Verdict.REPRODUCED


def test_a_diverged_seed_enters_its_rows_and_does_not_turn_them(tmp_path, monkeypatch):
    """One diverged seed enters its rows (censored, with the maximum it reached), not as an
    undecidable row: the rows that read its arm are decided on their numbers; it is no gate."""
    seed = CONFIRM_INCEPTION[3]
    _collect(tmp_path, monkeypatch, {"inception_sigmoid": {seed}, "bn_x30": {seed}})
    assert _outcome("BN makes sigmoid").decision.verdict == Verdict.REPRODUCED
    for row in ("BN-x30 reaches a higher", "Every BN variant", "BN-x30 reaches Inception"):
        outcome = _outcome(row)
        assert not outcome.missing and not outcome.decision.undecidable, row
    assert "1 variant run never reached it" in _outcome("BN-x30 reaches Inception").measured.text
    # the maxima rows say which runs' maxima are not a plateau's
    text = _outcome("BN-x30 reaches a higher").measured.text
    assert text.endswith(
        "(not at a plateau: BN-x30 1 run diverged; a diverged run's maximum is the one it "
        "reached before diverging)"
    )
    assert "not at a plateau" not in _outcome("Under BN, sigmoid").measured.text


def test_the_blow_up_row_tells_diverged_seeds_from_those_at_chance(tmp_path, monkeypatch):
    seeds = CONFIRM_INCEPTION[:2]
    _collect(tmp_path, monkeypatch, {"inception_x5": set(seeds)})
    text = _outcome("x5 the learning rate without BN").measured.text
    assert "2 of 10 seeds diverged, 0 ended at chance" in text
    assert text.count("diverged after step") == 2 and "at step" in text


def test_an_arm_whose_every_seed_diverged_is_decided_not_a_crash(tmp_path, monkeypatch):
    """The paper's own outcome for Inception at x5 (every seed to machine infinity), and every
    BN-x30 seed diverged: the collection then has no final accuracy of the arm at all."""
    every = set(CONFIRM_INCEPTION)
    _collect(tmp_path, monkeypatch, {"inception_x5": every, "bn_x30": every})
    blow_up = _outcome("x5 the learning rate without BN")
    assert blow_up.decision.verdict == Verdict.REPRODUCED
    assert "10 of 10 seeds diverged" in blow_up.measured.text
    for c in _rows():
        assert claim.decide(c).decision.verdict != Verdict.NO_RESULT, c.claim


@pytest.mark.parametrize(("setup", "low"), [("bn_baseline", 1.0), ("bn_x5", 14.8 / 3)])
def test_the_paper_factor_margin_never_drops_below_1x(setup, low):
    """BN-Baseline's paper factor (2.3×) has a third below 1×: the lower alternative is 1×."""
    row = bn_paper._speedup_claim(setup)
    margin = dict((c.key, c) for c in row.rule.parts)["by the paper's factor"].bound
    assert 10 ** margin.alternatives[0] == pytest.approx(low, rel=0.01)
    assert 10 ** margin.alternatives[1] > 10**margin.value > 1


def test_a_speedup_row_holds_its_verdict_to_every_placement_of_censored_runs(tmp_path, monkeypatch):
    """Three Inception seeds level off below 82% and stop at step 9,000: the row's values are
    its speed-up under every placement of the censored runs, the smallest under its own key, and
    its p-value is the largest of theirs (a placement that does not show it keeps it unshown)."""
    low = {s: _curve("inception", s) for s in CONFIRM_INCEPTION[:3]}
    low = {s: {k: min(v, 0.81) for k, v in c.items() if k <= 9000} for s, c in low.items()}
    _collect(tmp_path, monkeypatch, curves={"inception": low})
    outcome = _outcome("BN-x5 reaches")
    values = outcome.measured.values
    rule = dict((c.key, c) for c in bn_paper._speedup_claim("bn_x5").rule.parts)["faster"]
    keys = ("faster", *rule.also)
    assert len(keys) == 6  # four placements, and the least favourable mixes at 1x
    assert "3 Inception runs never reached it" in outcome.measured.text
    assert values["faster"].mean == min(values[k].mean for k in keys)
    assert values["faster"].mean < max(values[k].mean for k in keys)  # the placement matters
    faster = dict(outcome.decision.parts)["faster"]
    assert faster.p == pytest.approx(max(values[k].p_greater(0.0) for k in keys))


def test_a_row_whose_censored_runs_straddle_its_bound_asks_for_no_seeds(tmp_path, monkeypatch):
    """Every BN-x5 seed levels off at 81%, below the 82% headline: at their last evaluation
    the runs are faster than Inception, at the cap slower. No number of seeds moves them, so the
    row asks for none, and its text shows the mixes its verdict reads."""
    flat = {s: {k: min(v, 0.81) for k, v in _curve("bn_x5", s).items()} for s in CONFIRM_INCEPTION}
    _collect(tmp_path, monkeypatch, curves={"bn_x5": flat})
    outcome = _outcome("BN-x5 reaches")
    faster = dict(outcome.decision.parts)["faster"]
    assert faster.verdict == Verdict.INCONCLUSIVE and faster.undecidable and faster.need is None
    assert faster.why == "one placement of the censored runs shows it and another refutes it"
    assert (
        "10 variant runs never reached it; the least favourable mixes, to " in outcome.measured.text
    )
    from scripts.claims.table import verdict_text

    assert (
        "; one placement of the censored runs shows it and another refutes it: more seeds, censored"
        in verdict_text(outcome)
    )
    # the share the learning rate gives, under both ends for the censored runs (not decided on)
    share = _outcome("BN-x5's other changes").measured.text
    assert "not decided on: " in share and "; at its last evaluation: " in share
    plan = claim.CONFIRMED
    arms = ("bn_baseline_x5", "bn_x5", "bn_baseline")
    at_cap, at_last = (tta.share(plan, *arms, 0.82, at_last=a) for a in (False, True))
    logs = {k: [math.log10(r.steps) for r in tta.reaches(plan, k, 0.82).values()] for k in arms}
    mean = {
        k: statistics.fmean(v) for k, v in logs.items()
    }  # every BN-x5 run at its last evaluation
    by_hand = (mean["bn_baseline"] - mean["bn_baseline_x5"]) / (mean["bn_baseline"] - mean["bn_x5"])
    assert at_last.value == pytest.approx(by_hand) and at_cap.value != pytest.approx(by_hand)
    assert "1×:" not in outcome.measured.text  # the mixes at 1× are placements: not repeated
    (tmp_path / "all").mkdir()
    _collect(tmp_path / "all", monkeypatch)
    assert "at its last evaluation" not in _outcome("BN-x5's other").measured.text


@pytest.mark.slow
def test_the_figure_draws_both_seed_sets_with_censored_and_diverged_runs(tmp_path, monkeypatch):
    """The converged figure as the confirmatory seeds will feed it: a diverged BN-x30 seed and
    three Inception seeds that never reach 82%, beside a pilot."""
    import shutil

    from scripts import plot_inception, plotting

    low = {s: _curve("inception", s) for s in CONFIRM_INCEPTION[:3]}
    low = {s: {k: min(v, 0.81) for k, v in c.items() if k <= 9000} for s, c in low.items()}
    root = _collect(tmp_path, monkeypatch, {"bn_x30": {CONFIRM_INCEPTION[3]}}, {"inception": low})
    pilot = tmp_path / "results"
    shutil.copytree(root, pilot)
    monkeypatch.setattr(plotting, "FIGURES", tmp_path / "figures")
    monkeypatch.setattr(
        plot_inception,
        "SEED_SETS",
        (
            ("pilot", dataclasses.replace(PLAN, root=str(pilot)), "o"),
            ("confirmatory", dataclasses.replace(PLAN, root=str(root)), "s"),
        ),
    )
    path = plot_inception.figure3_curve()
    assert path.exists() and path.with_suffix(".svg").exists()
