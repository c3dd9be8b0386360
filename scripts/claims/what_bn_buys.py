"""What BN buys: is BN better at a learning rate the network without it can use, or does it
"primarily enable training with larger learning rates" (Bjorck et al. 2018, arXiv:1806.02375)?

The conv net of the Batch Renorm study (batch 32, 3,000 steps, its decay) with BN and without,
over a grid of initial learning rates. Which rates the comparisons read is fixed by the pilot
(``results/``), before any confirmatory seed ran: the largest rate at which every pilot seed of
both networks trains, and each network's best rate by its pilot mean. The confirmatory seeds are
then decided at those rates.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from experiments.studies import LR_GRID
from scripts.analysis import committed
from scripts.analysis.stats import paired
from scripts.analysis.windows import PLAN, Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.measure import CHANCE
from scripts.claims.rules import EVERY_SEED_DESIGN, Compare, Equivalent, EverySeed, Margin


@dataclass(frozen=True)
class Net:
    """One network of the study: where its sweep is committed (``results/<path>/<file>``, one row
    per run), the column holding a run's initial learning rate, the grid, and its two setups."""

    path: str
    file: str
    rates: tuple[float, ...]
    bn: str
    plain: str
    grid: str  # where its confirmatory seeds' whole grid is, under results/confirmatory/
    rate_key: str = "train.lr"

    def folder(self, plan: Plan, whole_grid: bool) -> str:
        """The folder ``plan`` reads: the pilot's, or the confirmatory seeds' (those of the rows
        that read only a few rates, or, with ``whole_grid``, those of the whole grid)."""
        return self.grid if whole_grid and plan.results != PLAN.results else self.path


CONV = Net("what_bn_buys/lr_control", "fashion_mnist.csv", tuple(float(r) for r in LR_GRID.split(",")), "bn32", "nonorm", "what_bn_buys/lr_control_grid")  # fmt: skip
PATH, FILE, RATES, BN, PLAIN = CONV.path, CONV.file, CONV.rates, CONV.bn, CONV.plain
# A run trains: no divergence, and a final test accuracy of at least this (five times chance; the
# conv net reaches about 89% at its own rate). Below it a run has not learnt the task.
TRAINS = 0.5
# Bjorck et al.'s "comparable accuracy": within 1 pp (twice the standard error of one evaluation on
# 10,000 test images near 89%); 0.5 and 2 pp as robustness alternatives.
COMPARABLE = Margin(0.01, (0.005, 0.02))
# BN ahead at the two networks' best rates by this much or more: the smallest effect of interest
EFFECT = 0.005
DESIGN = (
    "Smallest effects: BN ahead by 0.5 pp at the two networks' best rates (a gap a reader of the "
    "sweep would not call a win below it); no difference within ±1 pp at the shared rate. The "
    "rates are fixed from the pilot's seeds, so the confirmatory seeds cannot choose them."
)
METHOD = (
    f"the conv net with BN (bn32) and without (nonorm), initial learning rates {', '.join(f'{r:g}' for r in RATES)} "
    f"(the study's decay after them); a run trains if it does not diverge and ends at {TRAINS:.0%} "
    "test accuracy or more; a diverged run's accuracy is chance; the shared rate (the largest at "
    "which every pilot seed of both networks trains) and each network's best rate (the highest "
    "pilot mean) are read off the pilot, so the confirmatory seeds are decided at rates they did "
    "not choose; paired by seed (the two networks share each seed's data order)"
)


def runs(
    plan: Plan, net: Net = CONV, whole_grid: bool = False
) -> dict[str, dict[int, dict[float, float | None]]]:
    """``{setup: {seed: {rate: final test accuracy}}}``; None: the run diverged. With
    ``whole_grid`` a confirmatory plan reads the seeds that ran every rate."""
    out: dict = {}
    for r in committed.rows(net.folder(plan, whole_grid), net.file, plan.results):
        diverged = r["diverged"] == "True"
        acc = None if diverged or r["test_acc"] in ("", "None") else float(r["test_acc"])
        out.setdefault(r["setup"], {}).setdefault(int(r["seed"]), {})[float(r[net.rate_key])] = acc
    return out


def trains(acc: float | None) -> bool:
    return acc is not None and acc >= TRAINS


def largest_trainable(by_rate: dict[float, float | None]) -> float:
    """The largest rate of the grid at which the run trains (0: none)."""
    return max((r for r, a in by_rate.items() if trains(a)), default=0.0)


def shared_rate_of(data: dict[str, dict[int, dict[float, float | None]]], net: Net) -> float:
    """The largest rate of ``net``'s grid at which every seed of both its setups in ``data``
    (:func:`runs`) trains."""
    shared = [
        r
        for r in net.rates
        if all(trains(v[r]) for setup in (net.bn, net.plain) for v in data[setup].values())
    ]
    if not shared:
        raise ValueError(f"{net.path}: no rate of the grid at which every seed of both trains")
    return max(shared)


def best_rate_of(
    data: dict[str, dict[int, dict[float, float | None]]], net: Net, setup: str
) -> float:
    """The rate of ``net``'s grid with the highest mean final test accuracy of ``setup``'s seeds
    in ``data`` (a diverged run at chance)."""
    seeds = data[setup]
    mean = {
        r: statistics.fmean(CHANCE if v[r] is None else v[r] for v in seeds.values())
        for r in net.rates
    }
    return max(net.rates, key=lambda r: mean[r])


def shared_rate(net: Net = CONV) -> float:
    """The largest rate at which every pilot seed of both networks trains."""
    return shared_rate_of(runs(PLAN, net), net)


def best_rate(setup: str, net: Net = CONV) -> float:
    """The rate with the highest pilot mean final test accuracy (a diverged run at chance)."""
    return best_rate_of(runs(PLAN, net), net, setup)


def accuracy_at(
    plan: Plan, setup: str, rate: float, net: Net = CONV, whole_grid: bool = False
) -> dict[int, float]:
    data = runs(plan, net, whole_grid)[setup]
    return {s: CHANCE if v[rate] is None else v[rate] for s, v in data.items()}


def stops_earlier_at(bn: float, plain: float, rates: tuple[float, ...]) -> bool | None:
    """Whether the network without BN stops training at a lower rate than with it, given each
    one's largest trainable rate; None where the grid cannot tell: both train at its largest
    rate, or neither at any."""
    if bn == plain and bn in (max(rates), 0.0):
        return None
    return plain < bn


def stops_earlier(net: Net) -> Callable[[Plan], Measured]:
    """Row (i)'s measure: per seed, whether the largest rate at which it trains is lower without
    BN than with it (None: censored by the grid)."""

    def measure(plan: Plan) -> Measured:
        data = runs(plan, net, whole_grid=True)
        top = {
            k: {s: largest_trainable(v) for s, v in data[k].items()} for k in (net.bn, net.plain)
        }
        per_seed = [
            stops_earlier_at(top[net.bn][s], top[net.plain][s], net.rates)
            for s in sorted(top[net.bn])
        ]
        shown = "; ".join(
            f"{name} {', '.join(f'{top[k][s]:g}' for s in sorted(top[k]))}"
            for k, name in ((net.bn, "BN"), (net.plain, "no BN"))
        )
        return Measured(
            {"no BN stops earlier": per_seed},
            f"the largest initial learning rate at which each seed trains: {shown}",
        )

    return measure


def comparable(net: Net) -> Callable[[Plan], Measured]:
    """Row (ii)'s measure: BN − no BN, paired by seed, at the pilot's shared rate."""

    def measure(plan: Plan) -> Measured:
        rate = shared_rate(net)
        d = paired(accuracy_at(plan, net.bn, rate, net), accuracy_at(plan, net.plain, rate, net))
        return Measured(
            {"BN − no BN at the shared rate": d},
            f"at initial rate {rate:g} (the largest every pilot seed of both trains at): BN − no BN {d.text()}",
        )

    return measure


def best_against_best(net: Net) -> Callable[[Plan], Measured]:
    """Row (iii)'s measure: BN at its best pilot rate − no BN at its best, paired by seed."""

    def measure(plan: Plan) -> Measured:
        rates = {k: best_rate(k, net) for k in (net.bn, net.plain)}
        d = paired(
            accuracy_at(plan, net.bn, rates[net.bn], net),
            accuracy_at(plan, net.plain, rates[net.plain], net),
        )
        return Measured(
            {"BN at its best − no BN at its best": d},
            f"BN at {rates[net.bn]:g} − no BN at {rates[net.plain]:g} (each one's best pilot rate): {d.text()}",
        )

    return measure


STOPS_EARLIER = EverySeed(
    "no BN stops earlier", "a largest trainable rate without BN below the one with BN",
    censored="a seed's two networks both train at the grid's largest rate (or at none), where the grid cannot tell which stops first",
)  # fmt: skip
COMPARABLE_RULE = Equivalent(
    "BN − no BN at the shared rate", "BN − no BN at the shared rate", COMPARABLE
)
BEST_RULE = Compare(
    "BN at its best − no BN at its best", "BN at its best − no BN at its best", effect=EFFECT
)
WHOLE_GRID = "its confirmatory seeds run the pilot's whole grid"
CLAIMED = (
    ("Without BN the network stops training at a lower learning rate than with BN",
     "BN enables training with larger learning rates; without it, large rates diverge"),
    ("At a learning rate both train at, BN and no BN reach comparable accuracy",
     "at a learning rate small enough for the network without BN, both reach comparable accuracy"),
    ("BN at its best learning rate beats no BN at its best",
     "BN is clearly better only at the rates the network without it cannot use"),
)  # fmt: skip
SOURCE = "Bjorck et al. 2018, Sec. 2"


SECTION = {"section": "lr-control"}
CONFIRM = ("confirm-lr-control",)
CLAIMS = [
    Claim(
        SOURCE, *CLAIMED[0], STOPS_EARLIER, stops_earlier(CONV),
        method=f"{METHOD}; {WHOLE_GRID}", confirm=("confirm-lr-grid",), design=EVERY_SEED_DESIGN,
        **SECTION,
    ),
    Claim(
        SOURCE, *CLAIMED[1], COMPARABLE_RULE, comparable(CONV),
        method=METHOD, confirm=CONFIRM, design=DESIGN, **SECTION,
    ),
    Claim(
        SOURCE, *CLAIMED[2], BEST_RULE, best_against_best(CONV),
        method=METHOD, confirm=CONFIRM, design=DESIGN, **SECTION,
    ),
]  # fmt: skip
