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

from experiments.studies import LR_GRID
from scripts.analysis import committed
from scripts.analysis.stats import paired
from scripts.analysis.windows import PLAN, Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.measure import CHANCE
from scripts.claims.rules import Compare, Equivalent, EverySeed, Margin

PATH, FILE = "what_bn_buys/lr_control", "fashion_mnist.csv"
RATES = tuple(float(r) for r in LR_GRID.split(","))
BN, PLAIN = "bn32", "nonorm"
# A run trains: no divergence, and a final test accuracy of at least this (five times chance; the
# conv net reaches about 89% at its own rate). Below it a run has not learnt the task.
TRAINS = 0.5
# Bjorck et al.'s "comparable accuracy": within 1 pp (twice the standard error of one evaluation on
# 10,000 test images near 89%); 0.5 and 2 pp as robustness alternatives.
COMPARABLE = Margin(0.01, (0.005, 0.02))
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


def runs(plan: Plan) -> dict[str, dict[int, dict[float, float | None]]]:
    """``{setup: {seed: {rate: final test accuracy}}}``; None: the run diverged."""
    out: dict = {}
    for r in committed.rows(PATH, FILE, plan.results):
        diverged = r["diverged"] == "True"
        acc = None if diverged or r["test_acc"] in ("", "None") else float(r["test_acc"])
        out.setdefault(r["setup"], {}).setdefault(int(r["seed"]), {})[float(r["train.lr"])] = acc
    return out


def trains(acc: float | None) -> bool:
    return acc is not None and acc >= TRAINS


def largest_trainable(by_rate: dict[float, float | None]) -> float:
    """The largest rate of the grid at which the run trains (0: none)."""
    return max((r for r, a in by_rate.items() if trains(a)), default=0.0)


def shared_rate() -> float:
    """The largest rate at which every pilot seed of both networks trains."""
    pilot = runs(PLAN)
    return max(
        r
        for r in RATES
        if all(trains(v[r]) for setup in (BN, PLAIN) for v in pilot[setup].values())
    )


def best_rate(setup: str) -> float:
    """The rate with the highest pilot mean final test accuracy (a diverged run at chance)."""
    pilot = runs(PLAN)[setup]
    mean = {
        r: statistics.fmean(CHANCE if v[r] is None else v[r] for v in pilot.values()) for r in RATES
    }
    return max(RATES, key=lambda r: mean[r])


def _at(plan: Plan, setup: str, rate: float) -> dict[int, float]:
    return {s: CHANCE if v[rate] is None else v[rate] for s, v in runs(plan)[setup].items()}


def _stops_earlier(plan: Plan) -> Measured:
    data = runs(plan)
    top = {k: {s: largest_trainable(v) for s, v in data[k].items()} for k in (BN, PLAIN)}
    per_seed = [top[PLAIN][s] < top[BN][s] for s in sorted(top[BN])]
    shown = "; ".join(
        f"{name} {', '.join(f'{top[k][s]:g}' for s in sorted(top[k]))}"
        for k, name in ((BN, "BN"), (PLAIN, "no BN"))
    )
    return Measured(
        {"no BN stops earlier": per_seed},
        f"the largest initial learning rate at which each seed trains: {shown}",
    )


def _comparable(plan: Plan) -> Measured:
    rate = shared_rate()
    d = paired(_at(plan, BN, rate), _at(plan, PLAIN, rate))
    return Measured(
        {"BN − no BN at the shared rate": d},
        f"at initial rate {rate:g} (the largest every pilot seed of both trains at): BN − no BN {d.text()}",
    )


def _best_against_best(plan: Plan) -> Measured:
    rates = {k: best_rate(k) for k in (BN, PLAIN)}
    d = paired(_at(plan, BN, rates[BN]), _at(plan, PLAIN, rates[PLAIN]))
    return Measured(
        {"BN at its best − no BN at its best": d},
        f"BN at {rates[BN]:g} − no BN at {rates[PLAIN]:g} (each one's best pilot rate): {d.text()}",
    )


SECTION = {"section": "lr-control"}
CONFIRM = ("confirm-lr-control",)
CLAIMS = [
    Claim(
        "Bjorck et al. 2018, Sec. 2", "Without BN the network stops training at a lower learning rate than with BN",
        "BN enables training with larger learning rates; without it, large rates diverge",
        EverySeed("no BN stops earlier", "a largest trainable rate without BN below the one with BN"),
        _stops_earlier, method=METHOD + "; decided on the pilot's grid alone (exploratory): its confirmatory seeds run only the rates the other rows read", **SECTION,
    ),
    Claim(
        "Bjorck et al. 2018, Sec. 2", "At a learning rate both train at, BN and no BN reach comparable accuracy",
        "at a learning rate small enough for the network without BN, both reach comparable accuracy",
        Equivalent("BN − no BN at the shared rate", "BN − no BN at the shared rate", COMPARABLE),
        _comparable, method=METHOD, confirm=CONFIRM, design=DESIGN, **SECTION,
    ),
    Claim(
        "Bjorck et al. 2018, Sec. 2", "BN at its best learning rate beats no BN at its best",
        "BN is clearly better only at the rates the network without it cannot use",
        Compare("BN at its best − no BN at its best", "BN at its best − no BN at its best", effect=0.005),
        _best_against_best, method=METHOD, confirm=CONFIRM, design=DESIGN, **SECTION,
    ),
]  # fmt: skip
