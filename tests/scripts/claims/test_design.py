"""The confirmatory design: each confirmatory reproduction of the registry runs the seeds the
power calculation over the committed pilots asks for, new seed ids disjoint from the pilots',
and a claim decided on them reads them alone."""

import dataclasses
from pathlib import Path

import pytest

from experiments.studies import FIRST_CONFIRMATORY_SEED, REPRODUCTIONS
from scripts.analysis.power import Need
from scripts.analysis.stats import Estimate
from scripts.claims import claim as claims
from scripts.claims import table
from scripts.claims.claim import Measured
from scripts.claims.rules import Compare, leaves

REPO = Path(__file__).resolve().parents[3]
CONFIRMATORY = {name: r for name, r in REPRODUCTIONS.items() if r.seeds}


def _pilot_seeds() -> set[int]:
    """Every seed id a pilot reproduction's jobs name (``seed=[0,1]``, ``seed=0,1,2``, ``seed=3``)."""
    seeds = set()
    for r in REPRODUCTIONS.values():
        if r.seeds:
            continue
        for stage in r.stages:
            for job in stage:
                for arg in job.args:
                    if arg.startswith("seed="):
                        seeds |= {int(s) for s in arg[5:].strip("[]").split(",")}
    return seeds


def test_a_claims_seed_count_is_the_most_any_of_its_tests_needs():
    need = lambda n: Need(n, 1.0, 4, 1.5)  # noqa: E731
    assert claims.seeds_to_run((("a", need(7)), ("b", need(30)))) == 30
    assert claims.seeds_to_run((("a", need(2)),)) == claims.FEWEST
    assert claims.seeds_to_run((("a", need(500)),)) == claims.MOST
    assert claims.seeds_to_run((("a", need(None)), ("b", need(3)))) == claims.MOST
    assert claims.seeds_to_run((("a", None),)) == claims.MOST  # a one-seed pilot: no spread


def test_a_reproduction_runs_the_most_seeds_any_claim_reading_it_needs():
    """Two claims on one reproduction whose pilots differ only in their spread (SD 0.5 pp and
    1.5 pp): the reproduction runs the seeds of the one that needs more, not the fewer."""
    base = next(c for c in table.CLAIMS if c.confirm and isinstance(c.rule, Compare))

    def with_pilot_sd(sd: float) -> claims.Claim:
        pilot = Estimate(0.0, sd / 5**0.5, 5)
        return dataclasses.replace(base, measure=lambda plan: Measured({base.rule.key: pilot}, ""))

    few, many = with_pilot_sd(0.005), with_pilot_sd(0.015)
    [(name, (n, mine))] = claims.planned([few, many]).items()
    assert name == base.confirm[0]
    assert [c for c, _ in mine] == [few, many]
    [(_, n_few), (_, n_many)] = mine
    assert claims.FEWEST <= n_few < n_many < claims.MOST
    assert n == n_many


def test_confirmatory_seeds_are_new_ids_disjoint_from_every_pilots():
    assert CONFIRMATORY, "no confirmatory reproduction registered"
    pilots = _pilot_seeds()
    assert pilots and max(pilots) < FIRST_CONFIRMATORY_SEED
    for name, r in CONFIRMATORY.items():
        assert r.seeds == tuple(
            range(FIRST_CONFIRMATORY_SEED, FIRST_CONFIRMATORY_SEED + len(r.seeds))
        ), name
        for stage in r.stages:  # every job runs exactly the registered seeds, each once
            named = []
            for job in stage:
                arg = next(a for a in job.args if a.startswith("seed="))
                named += [int(s) for s in arg[5:].strip("[]").split(",")]
            setups = {next(a for a in job.args if a.startswith("setup=")) for job in stage}
            assert sorted(named) == sorted(r.seeds * len(setups)), name


def test_reproductions_that_share_runs_share_their_seeds():
    for name, r in CONFIRMATORY.items():
        for other in claims.sharing(name):
            assert REPRODUCTIONS[other].seeds == r.seeds, (name, other)


@pytest.mark.slow
def test_every_confirmatory_count_is_the_power_calculation_over_the_committed_pilots(monkeypatch):
    monkeypatch.chdir(REPO)  # the pilots' results are read from results/
    planned = claims.planned(table.CLAIMS)
    assert set(planned) == set(CONFIRMATORY)
    for name, (n, mine) in planned.items():
        assert mine, name
        assert len(CONFIRMATORY[name].seeds) == n, (name, n, [(c.claim, k) for c, k in mine])


def test_a_claim_with_confirmatory_seeds_names_its_smallest_effects_and_design():
    for c in table.CLAIMS:
        if c.confirm:
            assert c.design and all(r in CONFIRMATORY for r in c.confirm), c.claim


@pytest.mark.slow
def test_every_confirmatory_design_reports_what_its_seeds_could_show_at_the_pilots_estimate(
    monkeypatch,
):
    monkeypatch.chdir(REPO)
    for c in table.CLAIMS:
        if c.confirm:
            o = claims.decide(c)
            if o.pilot is None:  # a control the pilot did not run: designed on its other arms
                assert not o.at_pilot and (c.pilot_design or not leaves(c.rule)), c.claim
                assert len(o.needs) == len(leaves(c.rule)), c.claim
                continue
            assert [k for k, _, _ in o.at_pilot] == [k for k, need in o.needs if need], c.claim
            assert all(0 <= show <= 1 and 0 <= refute <= 1 for _, show, refute in o.at_pilot)
            if o.at_pilot:
                assert "If the truth were the pilot's estimate" in table.design_text(o), c.claim
