"""What BN buys, in the two MLPs on MNIST: the conv net's question (Bjorck et al. 2018,
arXiv:1806.02375: does BN "primarily enable training with larger learning rates", with comparable
accuracy at a rate the network without it can use?) asked of the BN paper's Figure 1 MLP
(sigmoid, ``experiments/mnist.py``) and of the mechanism study's ReLU MLP
(``experiments/mechanism.py``), with the conv net's definitions and rules
(:mod:`scripts.claims.what_bn_buys`). The rates the confirmatory rows read are fixed by each
pilot (``results/what_bn_buys/<mlp>/``) before any confirmatory seed runs.

The Figure 1 MLP has one row more: the one-seed learning-rate sweep (``make sweep-lr``) has it
without BN far behind BN at the grid's smallest rate, 0.01; its pilot decides that rate on 5 seeds.
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.studies import LR_GRID_MLP, LR_GRID_RELU, LR_MLP_RUN, LR_RELU_RUN
from scripts.analysis.stats import paired
from scripts.analysis.windows import Plan
from scripts.claims import what_bn_buys as w
from scripts.claims.claim import Claim, Measured
from scripts.claims.rules import EVERY_SEED_DESIGN, Equivalent

MLP = w.Net("what_bn_buys/mlp", "mnist.csv", tuple(float(r) for r in LR_GRID_MLP.split(",")), "bn", "baseline", "what_bn_buys/mlp_grid", "lr")  # fmt: skip
RELU = w.Net("what_bn_buys/relu", "mnist.csv", tuple(float(r) for r in LR_GRID_RELU.split(",")), "mech_relu_bn", "mech_relu_baseline", "what_bn_buys/relu_grid")  # fmt: skip


def steps(run: tuple[str, ...]) -> int:
    return next(int(a.split("=")[1]) for a in run if a.startswith("train.steps="))


def method(net: w.Net, name: str, steps: int) -> str:
    return (
        f"{name} with BN ({net.bn}) and without ({net.plain}), MNIST, batch 60, plain SGD at a "
        f"constant rate, {steps:,} steps, initial learning rates {', '.join(f'{r:g}' for r in net.rates)}; "
        f"a run trains if it does not diverge and ends at {w.TRAINS:.0%} test accuracy or more; a "
        "diverged run's accuracy is chance; the shared rate (the largest at which every pilot "
        "seed of both networks trains) and each network's best rate (the highest pilot mean) are "
        "read off the pilot, so the confirmatory seeds are decided at rates they did not choose; "
        "paired by seed (the two networks share each seed's data order)"
    )


def smallest_rate_comparable(net: w.Net) -> Callable[[Plan], Measured]:
    """BN − no BN, paired by seed, at the smallest rate of ``net``'s grid."""

    def measure(plan: Plan) -> Measured:
        rate = min(net.rates)
        d = paired(
            w.accuracy_at(plan, net.bn, rate, net, whole_grid=True),
            w.accuracy_at(plan, net.plain, rate, net, whole_grid=True),
        )
        return Measured(
            {"BN − no BN at the smallest rate": d},
            f"at initial rate {rate:g} (the grid's smallest): BN − no BN {d.text()}",
        )

    return measure


def rows(
    net: w.Net, name: str, steps: int, section: str, confirm: str, grid: str, **kw: str
) -> list[Claim]:
    """The conv net's three rows (:mod:`scripts.claims.what_bn_buys`) for the network ``net``;
    ``grid``: the confirmatory reproduction of its whole grid."""
    how = method(net, name, steps)
    return [
        Claim(
            w.SOURCE, f"{name}: {w.CLAIMED[0][0][0].lower()}{w.CLAIMED[0][0][1:]}", w.CLAIMED[0][1],
            w.STOPS_EARLIER, w.stops_earlier(net), method=f"{how}; {w.WHOLE_GRID}", confirm=(grid,),
            design=EVERY_SEED_DESIGN, section=section, **kw,
        ),
        Claim(
            w.SOURCE, f"{name}: {w.CLAIMED[1][0][0].lower()}{w.CLAIMED[1][0][1:]}", w.CLAIMED[1][1],
            w.COMPARABLE_RULE, w.comparable(net), method=how, confirm=(confirm,), design=w.DESIGN,
            section=section, **kw,
        ),
        Claim(
            w.SOURCE, f"{name}: {w.CLAIMED[2][0]}", w.CLAIMED[2][1],
            w.BEST_RULE, w.best_against_best(net), method=how, confirm=(confirm,), design=w.DESIGN,
            section=section, **kw,
        ),
    ]  # fmt: skip


SMALLEST_DESIGN = (
    "No difference within ±1 pp at the grid's smallest rate, the margin of the conv net's row at "
    "its shared rate; the rate is the grid's, fixed before any seed ran."
)
FIG1_MLP = "The Figure 1 MLP (sigmoid)"
RELU_MLP = "The ReLU MLP"
SMALLEST = Claim(
    w.SOURCE, f"{FIG1_MLP}: at the grid's smallest learning rate, BN and no BN reach comparable accuracy",
    "at a learning rate small enough for the network without BN, both reach comparable accuracy "
    "(the one-seed sweep of make sweep-lr: 53.2% without BN, 91.2% with, at 0.01 after 10k steps)",
    Equivalent("BN − no BN at the smallest rate", "BN − no BN at the smallest rate", w.COMPARABLE),
    smallest_rate_comparable(MLP),
    method=f"{method(MLP, FIG1_MLP, steps(LR_MLP_RUN))}; {w.WHOLE_GRID}",
    confirm=("confirm-lr-grid-mlp",), design=SMALLEST_DESIGN,
    section="lr-control-mlp", figure="what_bn_buys_mlps.png",
)  # fmt: skip
CLAIMS = [
    *rows(MLP, FIG1_MLP, steps(LR_MLP_RUN), "lr-control-mlp", "confirm-lr-control-mlp", "confirm-lr-grid-mlp", figure="what_bn_buys_mlps.png"),
    SMALLEST,
    *rows(RELU, RELU_MLP, steps(LR_RELU_RUN), "lr-control-relu", "confirm-lr-control-relu", "confirm-lr-grid-relu"),
]  # fmt: skip
