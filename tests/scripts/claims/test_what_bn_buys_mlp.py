"""scripts/claims/what_bn_buys_mlp.py and the conv net's definitions it shares: the rates read
off a pilot, on synthetic rows, and the registry's MLP reproductions against the rows' grids."""

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from experiments import studies
from scripts.analysis.windows import PLAN
from scripts.claims import what_bn_buys as w
from scripts.claims import what_bn_buys_mlp as m

REPO = Path(__file__).resolve().parents[3]
NET = w.Net("synthetic", "sweep.csv", (0.01, 0.1, 1.0), "withbn", "plain", "synthetic_grid", "lr")
# seed -> rate -> final accuracy (None: diverged)
WITH_BN = {0: {0.01: 0.95, 0.1: 0.97, 1.0: 0.96}, 1: {0.01: 0.94, 0.1: 0.97, 1.0: 0.95}}
PLAIN = {0: {0.01: 0.60, 0.1: 0.96, 1.0: None}, 1: {0.01: 0.40, 0.1: 0.95, 1.0: 0.3}}


def _write(root, net: w.Net, data: dict, folder: str | None = None) -> None:
    folder = root / (folder or net.path)
    folder.mkdir(parents=True)
    with (folder / net.file).open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["setup", "seed", net.rate_key, "diverged", "test_acc"])
        for setup, seeds in data.items():
            for seed, by_rate in seeds.items():
                for rate, acc in by_rate.items():
                    out.writerow([setup, seed, rate, acc is None, "nan" if acc is None else acc])


@pytest.fixture
def plan(tmp_path):
    _write(tmp_path, NET, {"withbn": WITH_BN, "plain": PLAIN})
    return replace(PLAN, root=str(tmp_path))


def test_runs_reads_the_networks_rate_column_and_divergence(plan):
    data = w.runs(plan, NET)
    assert data["plain"][0] == {0.01: 0.60, 0.1: 0.96, 1.0: None}
    assert data["withbn"][1][1.0] == pytest.approx(0.95)


def test_the_shared_rate_is_the_largest_every_seed_of_both_trains_at(plan):
    data = w.runs(plan, NET)
    # plain seed 1 at 0.01 ends below TRAINS: 0.1 is the one rate every seed of both trains at
    assert w.shared_rate_of(data, NET) == 0.1
    data["plain"][1][0.1] = None
    with pytest.raises(ValueError, match="no rate of the grid"):
        w.shared_rate_of(data, NET)


def test_the_best_rate_counts_a_diverged_run_at_chance(plan):
    data = w.runs(plan, NET)
    assert w.best_rate_of(data, NET, "withbn") == 0.1
    assert w.best_rate_of(data, NET, "plain") == 0.1
    # one diverged seed at chance pulls a rate's mean below a rate where both train
    data["withbn"] = {0: {0.01: 0.9, 0.1: 0.5, 1.0: 0.99}, 1: {0.01: 0.9, 0.1: 0.5, 1.0: None}}
    assert w.best_rate_of(data, NET, "withbn") == 0.01


def test_the_rows_measures_on_synthetic_rows(plan, monkeypatch):
    monkeypatch.setattr(w, "PLAN", plan)  # the pilot the rates are read off
    stops = w.stops_earlier(NET)(plan)
    assert stops.values["no BN stops earlier"] == [True, True]
    d = w.comparable(NET)(plan).values["BN − no BN at the shared rate"]
    assert d.mean == pytest.approx(((0.97 - 0.96) + (0.97 - 0.95)) / 2)
    best = w.best_against_best(NET)(plan).values["BN at its best − no BN at its best"]
    assert best.mean == pytest.approx(d.mean)  # both at their best at 0.1 here
    small = m.smallest_rate_comparable(NET)(plan).values["BN − no BN at the smallest rate"]
    assert small.mean == pytest.approx(((0.95 - 0.60) + (0.94 - 0.40)) / 2)


def test_the_rows_read_the_registrys_grids_and_setups():
    assert m.MLP.rates == tuple(float(r) for r in studies.LR_GRID_MLP.split(","))
    assert m.RELU.rates == tuple(float(r) for r in studies.LR_GRID_RELU.split(","))
    for net, name in ((m.MLP, "lr-control-mlp"), (m.RELU, "lr-control-relu")):
        [stage] = studies.REPRODUCTIONS[name].stages
        ran = {a.split("=", 1)[1] for j in stage for a in j.args if a.startswith("setup=")}
        assert ran == {net.bn, net.plain}
        assert all(f"train.lr={','.join(f'{r:g}' for r in net.rates)}" in j.args for j in stage)
        for j in stage:
            seeds = next(a for a in j.args if a.startswith("seed=")).split("=")[1].strip("[]")
            assert {int(s) for s in seeds.split(",")} == set(studies.SEEDS5)
    assert m.steps(studies.LR_MLP_RUN) == 10000 and m.steps(studies.LR_RELU_RUN) == 5000


@pytest.mark.parametrize(
    ("name", "read", "seeds"),
    [
        ("confirm-lr-control-mlp", studies.LR_READ_MLP, studies.CONFIRM_LR_MLP),
        ("confirm-lr-control-relu", studies.LR_READ_RELU, studies.CONFIRM_LR_RELU),
    ],
)
def test_the_confirmatory_reproductions_run_the_read_cells_on_their_seeds(name, read, seeds):
    """Every (setup, rate) cell the rows read, on every confirmatory seed, and nothing else."""
    r = studies.REPRODUCTIONS[name]
    assert r.seeds == seeds
    cells = set()
    for job in r.stages[0]:
        args = dict(a.split("=", 1) for a in job.args)
        ids = args["seed"].strip("[]").split(",")
        cells |= {
            (args["setup"], float(rate), int(s))
            for rate in args["train.lr"].split(",")
            for s in ids
        }
    wanted = {(k, float(rate), s) for k, v in read.items() for rate in v.split(",") for s in seeds}
    assert cells == wanted


@pytest.mark.parametrize(
    ("net", "read"),
    [(m.MLP, studies.LR_READ_MLP), (m.RELU, studies.LR_READ_RELU)],
    ids=["mlp", "relu"],
)
def test_the_confirmatory_rates_are_the_pilots(monkeypatch, net, read):
    """The registry's rates (what the confirmatory reproductions run) are the shared rate and
    each network's best rate of the committed pilot: a pilot run again with other numbers fails."""
    monkeypatch.chdir(REPO)
    shared = w.shared_rate(net)
    wanted = {k: {shared, w.best_rate(k, net)} for k in (net.bn, net.plain)}
    assert {k: {float(r) for r in v.split(",")} for k, v in read.items()} == wanted


@pytest.mark.parametrize("net", [m.MLP, m.RELU], ids=["mlp", "relu"])
def test_the_pilot_ran_every_rate_of_the_grid_on_every_seed(monkeypatch, net):
    monkeypatch.chdir(REPO)
    data = w.runs(PLAN, net)
    assert set(data) == {net.bn, net.plain}
    for seeds in data.values():
        assert sorted(seeds) == list(studies.SEEDS5)
        assert all(set(by_rate) == set(net.rates) for by_rate in seeds.values())


@pytest.mark.parametrize(
    ("name", "net", "seeds"),
    [
        ("confirm-lr-grid", w.CONV, studies.CONFIRM_LR_GRID),
        ("confirm-lr-grid-mlp", m.MLP, studies.CONFIRM_LR_GRID_MLP),
        ("confirm-lr-grid-relu", m.RELU, studies.CONFIRM_LR_GRID),
    ],
)
def test_the_whole_grid_confirmatory_reproductions_run_every_cell_on_their_seeds(name, net, seeds):
    """Every rate of the pilot's grid, both networks, every confirmatory seed, collected where
    the rows that read the whole grid look."""
    r = studies.REPRODUCTIONS[name]
    assert r.seeds == seeds
    assert r.collect.out == f"{studies.CONFIRMATORY}/{net.grid}/{net.file}"
    cells = set()
    for job in r.stages[0]:
        args = dict(a.split("=", 1) for a in job.args)
        ids = args["seed"].strip("[]").split(",")
        cells |= {
            (args["setup"], float(x), int(i)) for x in args["train.lr"].split(",") for i in ids
        }
    assert cells == {(k, x, i) for k in (net.bn, net.plain) for x in net.rates for i in seeds}


def test_a_confirmatory_plan_reads_the_whole_grid_only_where_asked(tmp_path):
    """The pilot's folder for the pilot; for the confirmatory seeds, the whole grid's folder
    where a row reads every rate, the read rates' folder otherwise."""
    pilot, confirm = tmp_path / "pilot", tmp_path / "confirm"
    _write(pilot, NET, {"withbn": WITH_BN, "plain": PLAIN})
    _write(confirm, NET, {"withbn": {7: WITH_BN[0]}, "plain": {7: PLAIN[0]}})
    _write(confirm, NET, {"withbn": {9: WITH_BN[1]}, "plain": {9: PLAIN[1]}}, NET.grid)
    at = {"pilot": replace(PLAN, root=str(pilot)), "confirm": replace(PLAN, root=str(confirm))}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(w, "PLAN", at["pilot"])
        assert sorted(w.runs(at["pilot"], NET, whole_grid=True)["plain"]) == [0, 1]
        assert sorted(w.runs(at["confirm"], NET)["plain"]) == [7]
        assert sorted(w.runs(at["confirm"], NET, whole_grid=True)["plain"]) == [9]
        assert w.stops_earlier(NET)(at["confirm"]).values["no BN stops earlier"] == [True]


@pytest.mark.parametrize(
    ("bn", "plain", "earlier"),
    [(1.0, 0.1, True), (0.1, 0.1, False), (0.1, 1.0, False), (1.0, 1.0, None), (0.0, 0.0, None)],
)
def test_a_seed_the_grid_cannot_decide_is_censored(bn, plain, earlier):
    """Both networks training at the grid's largest rate, or at none: the grid cannot tell
    which stops first (None); equal below the top, no BN does not stop earlier."""
    assert w.stops_earlier_at(bn, plain, NET.rates) is earlier
