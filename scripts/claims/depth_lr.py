"""Trainable depth against the learning rate (Yang et al. 2019, arXiv:1902.08129): "vanilla
batch-normalized networks without skip connections are not trainable at large depths", and the
larger the learning rate, the shallower the depth at which they stop training; without BN, with
He initialization, the deep networks train.

The depth study's ReLU networks of width 100 and depth 2 to 64, with BN and without, six depths
side by side in one run per seed and rate (``make depth-lr``). A run (one depth, one rate, one
seed) *trains* if its loss stayed finite and it classifies at least :data:`TRAINS` of the first
2,000 test images right after its 1,000 steps. Every row is decided seed by seed, on the pilot's
grid and then on fresh confirmatory seeds fixed before they ran: a trainable depth is a yes or
no per run, not an interval. The test accuracy
of a BN network uses its running statistics, so a deep BN network whose training loss fell but
whose running averages lag would count as untrainable; the robustness alternative decides by the
training loss instead (:data:`TRAINS_LOSS`).
"""

from __future__ import annotations

import math

from experiments.studies import DEPTH_LR_EVERY, DEPTH_LR_GRID, DEPTH_LR_STEPS, DEPTH_LR_TEST
from scripts.analysis import committed
from scripts.analysis.windows import Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.rules import EVERY_SEED_DESIGN, EverySeed

PATH, FILE = "mechanism/depth_lr", "mnist.csv"
RATES = tuple(float(r) for r in DEPTH_LR_GRID.split(","))
DEPTHS = (2, 4, 8, 16, 32, 64)
BN, PLAIN = "batchnorm", "none"  # norm.kind
# A run trains: its loss stayed finite and its test accuracy at the end is at least this, five
# times chance (a network that has learnt nothing sits at 10%; the depth study's networks at
# rate 0.01 lower their loss within 100 steps at every depth, and an epoch takes a trainable one
# far past 50%).
TRAINS = 0.5
# The alternative criterion: a final training loss (the mean over the last evaluation interval's
# steps, 750-1000) below half the loss of a uniform guess over ten classes, ln 10 / 2.
TRAINS_LOSS = math.log(10) / 2
SHALLOW, DEEP = 8, 64  # the depth Yang et al.'s BN networks train at, and the one they fail at

Grid = dict[str, dict[int, dict[float, dict[int, bool]]]]  # norm -> seed -> rate -> depth -> trains


def trains(diverged: bool, test_acc: float | None) -> bool:
    """The criterion: no divergence, and a final test accuracy of :data:`TRAINS` or more."""
    return not diverged and test_acc is not None and test_acc >= TRAINS


def trains_by_loss(diverged: bool, train_loss: float | None) -> bool:
    """The alternative: no divergence, and a final training loss below :data:`TRAINS_LOSS`."""
    return not diverged and train_loss is not None and train_loss < TRAINS_LOSS


def _number(text: str) -> float | None:
    return None if text in ("", "None") else float(text)


def grid_of(rows: list[dict[str, str]], by_loss: bool = False) -> Grid:
    """``{norm: {seed: {rate: {depth: trains}}}}`` from the sweep's rows (one a run), by the
    test accuracy or (``by_loss``) by the training loss."""
    out: Grid = {}
    for r in rows:
        diverged = r["diverged"] == "True"
        if by_loss:
            ok = trains_by_loss(diverged, _number(r["final_train_loss"]))
        else:
            ok = trains(diverged, _number(r["test_acc_subset"]))
        by_rate = out.setdefault(r["norm.kind"], {}).setdefault(int(r["seed"]), {})
        by_rate.setdefault(float(r["train.lr"]), {})[int(r["depth"])] = ok
    return out


def runs(plan: Plan) -> Grid:
    return grid_of(committed.rows(PATH, FILE, plan.results), plan.trains_by_loss)


def largest_trainable(by_depth: dict[int, bool]) -> int:
    """The largest depth that trains (0: none)."""
    return max((d for d, ok in by_depth.items() if ok), default=0)


def falls_with_rate(by_rate: dict[float, dict[int, bool]]) -> bool:
    """One seed's BN grid: the largest trainable depth at the largest rate at which depth 2
    trains is below the one at the smallest rate of the grid (False where depth 2 trains at no
    rate above the smallest)."""
    lowest = min(by_rate)
    top = max((r for r, d in by_rate.items() if d.get(2)), default=lowest)
    return top > lowest and largest_trainable(by_rate[top]) < largest_trainable(by_rate[lowest])


def deep_fails_where_shallow_trains(by_rate: dict[float, dict[int, bool]]) -> bool:
    """One seed's BN grid: depth 64 trains at fewer rates of the grid than depth 8."""
    count = lambda depth: sum(d.get(depth, False) for d in by_rate.values())  # noqa: E731
    return count(DEEP) < count(SHALLOW)


def bn_limited_rates(by_rate: dict[float, dict[int, bool]]) -> list[float]:
    """The rates at which BN's depth 8 trains and its depth 64 does not."""
    return sorted(r for r, d in by_rate.items() if d.get(SHALLOW) and not d.get(DEEP))


def plain_deep_trains_there(
    bn: dict[float, dict[int, bool]], plain: dict[float, dict[int, bool]]
) -> bool:
    """One seed: there is a rate at which BN's depth 8 trains and its depth 64 does not, and at
    every such rate the network of depth 64 without BN trains."""
    rates = bn_limited_rates(bn)
    return bool(rates) and all(plain.get(r, {}).get(DEEP, False) for r in rates)


def _show(by_seed: dict[int, object]) -> str:
    return ", ".join(f"seed {s}: {v}" for s, v in sorted(by_seed.items()))


def _falls(plan: Plan) -> Measured:
    bn = runs(plan)[BN]
    shown = {
        s: " → ".join(f"{r:g}: {largest_trainable(d)}" for r, d in sorted(v.items()))
        for s, v in bn.items()
    }
    return Measured(
        {"BN's largest trainable depth falls": [falls_with_rate(bn[s]) for s in sorted(bn)]},
        f"with BN, the largest depth that trains at each rate: {_show(shown)}",
    )


def _deep_fails(plan: Plan) -> Measured:
    bn = runs(plan)[BN]
    count = {
        s: f"{sum(d.get(SHALLOW, False) for d in v.values())} rates at depth {SHALLOW}, "
        f"{sum(d.get(DEEP, False) for d in v.values())} at {DEEP}"
        for s, v in bn.items()
    }
    return Measured(
        {"BN depth 64 trains at fewer rates": [deep_fails_where_shallow_trains(bn[s]) for s in sorted(bn)]},
        f"with BN, the rates of the grid that train: {_show(count)}",
    )  # fmt: skip


def _plain_trains(plan: Plan) -> Measured:
    data = runs(plan)
    bn, plain = data[BN], data[PLAIN]
    shown = {
        s: f"BN limited at {', '.join(f'{r:g}' for r in bn_limited_rates(bn[s])) or 'none'}; "
        f"no BN depth {DEEP} trains at {', '.join(f'{r:g}' for r, d in sorted(plain.get(s, {}).items()) if d.get(DEEP)) or 'none'}"
        for s in bn
    }
    return Measured(
        {"no BN depth 64 trains there": [plain_deep_trains_there(bn[s], plain.get(s, {})) for s in sorted(bn)]},
        _show(shown),
    )  # fmt: skip


METHOD = (
    f"ReLU MLPs of width 100 and depth {', '.join(map(str, DEPTHS))} (He initialization), with BN "
    f"before every ReLU and without, plain SGD on MNIST batches of 60 at learning rates "
    f"{', '.join(f'{r:g}' for r in RATES)} for {DEPTH_LR_STEPS:,} steps; a run trains if its loss "
    f"stayed finite and it ends at {TRAINS:.0%} or more on the first {DEPTH_LR_TEST:,} test images "
    "(BN with its running statistics; the robustness alternative: a training loss over its last "
    f"{DEPTH_LR_EVERY} steps below ln 10 / 2 = {TRAINS_LOSS:.2f}); decided seed by seed on the grid"
)
CONFIRM = ("confirm-depth-lr",)
SECTION = {
    "section": "depth-lr",
    "figure": "depth_lr.png",
    "alternatives": ("training-loss criterion of trainability",),
    "confirm": CONFIRM,
    "design": EVERY_SEED_DESIGN,
}
SOURCE = "Yang et al. 2019, Sec. 1 and 6"
CLAIMS = [
    Claim(
        SOURCE, "With BN, the larger the learning rate, the shallower the deepest network that trains",
        "the maximal trainable depth of a BN network falls as the learning rate grows",
        EverySeed("BN's largest trainable depth falls", f"a largest trainable depth with BN at the largest rate at which depth 2 trains below the one at rate {min(RATES):g}"),
        _falls, method=METHOD, **SECTION,
    ),
    Claim(
        SOURCE, "With BN, depth 64 fails at learning rates at which depth 8 trains",
        "batch-normalized networks without skip connections are not trainable at large depths",
        EverySeed("BN depth 64 trains at fewer rates", f"BN's depth {DEEP} training at fewer rates of the grid than its depth {SHALLOW}"),
        _deep_fails, method=METHOD, **SECTION,
    ),
    Claim(
        SOURCE, "Without BN, depth 64 trains at the learning rates at which BN's depth 64 fails",
        "without BN (with He initialization) deep networks remain trainable",
        EverySeed("no BN depth 64 trains there", f"a rate at which BN's depth {SHALLOW} trains and its depth {DEEP} does not, and the network of depth {DEEP} without BN training at every such rate"),
        _plain_trains, method=METHOD, **SECTION,
    ),
]  # fmt: skip
