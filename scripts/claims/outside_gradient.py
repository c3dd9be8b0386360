"""Normalizing outside the gradient (BN paper Sec. 2): if the gradient treats the
normalization's statistics as constants, it ignores that the normalization undoes part of every
update; the parameters then grow without bound while the loss does not improve ("the model
blows up"). The Batch Renorm paper (Sec. 2) says the same of normalizing by the moving averages
during training.

The Figure 1 MLP on MNIST (10,000 steps; the norms of the hidden layers' weights and biases at
every one of 100 evaluations), every arm with the hidden layers' bias kept before the norm: BN,
whose gradient leaves that bias at zero; BN with μ_B and σ_B detached; normalization by the
moving averages; and the paper's example, x − E[x] with E[x] detached (no scale, no γ, β).
"""

from __future__ import annotations

import math

from experiments.kit.errors import MissingResult
from experiments.studies import OUTSIDE_GRADIENT_LABELS
from scripts.analysis import committed
from scripts.analysis.committed import Diverged
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.rules import All, Compare, Margin, NotLower, log_margin

PATH = "outside_gradient/mnist"
BN = "bn_bias"
ARMS = tuple(s for s in OUTSIDE_GRADIENT_LABELS if s != BN)
LAYERS = (1, 2, 3)
# "Grows without bound" against BN, as the issue of rates: the parameters' growth over the same
# steps at least ten times BN's (a log10 ratio above 1), the smallest effect of interest twice that.
FASTER = 1.0
FASTER_EFFECT = math.log10(2)
# "The loss does not improve": its training loss not below BN's by more than a factor of 1.25
# (1.1 and 1.5 as alternatives), at the same step.
NO_BETTER = Margin(log_margin(1.25), (log_margin(1.1), log_margin(1.5)))
DESIGN = (
    "Smallest effect: growth twenty times BN's (twice the bound of ten); the loss margin a factor "
    "of 1.25 either way. Growth rates are the issue, so the bound is a ratio of increments over "
    "the same steps, not of the final norms."
)
METHOD = (
    "the Figure 1 MLP on MNIST, 10,000 steps, each hidden layer's bias kept before its norm; θ: "
    "the hidden layers' weights and biases (one vector); growth: ‖θ‖ at the arm's last finite "
    "evaluation − ‖θ‖ at the first evaluation (step 100, not initialization), and BN's over the "
    "same steps; the loss: the mean training loss of the last interval logged at that step "
    "(a run that went non-finite is read at its last finite evaluation: growth and loss up to "
    "there, which can only understate its growth); paired by seed (the seed draws the weights and "
    "the batches of every arm)"
)


def _curves(plan: Plan, setup: str, metric: str) -> dict[int, dict[int, float]]:
    """``{seed: {step: value}}`` of ``metric``, finite values only (a diverged run's stop)."""
    seeds = committed.diverged(PATH, setup, plan.results)
    by_seed = committed.curves(PATH, plan.results).get((setup, metric))
    if by_seed is None or sorted(by_seed) != sorted(seeds):
        raise MissingResult(f"{setup} has no {metric} for its seeds {sorted(seeds)} under {PATH}")
    return {
        s: {step: v for step, v in curve.items() if math.isfinite(v)}
        for s, curve in by_seed.items()
    }


def parameter_norms(plan: Plan, setup: str) -> dict[int, dict[int, float]]:
    """``{seed: {step: ‖θ‖}}``, θ every hidden layer's weights and bias."""
    parts = [
        _curves(plan, setup, f"params/layer{layer}/{kind}_norm")
        for layer in LAYERS
        for kind in ("weight", "bias")
    ]
    return {
        s: {
            step: math.sqrt(sum(p[s][step] ** 2 for p in parts))
            for step in parts[0][s]
            if all(step in p[s] for p in parts)
        }
        for s in parts[0]
    }


def _compare(plan: Plan, arm: str) -> tuple[Estimate, Estimate, dict[int, int]]:
    """Per seed, log10 of the arm's growth over BN's over the same steps and log10 of its
    training loss over BN's at the arm's last finite evaluation; and that step per seed."""
    theta = {k: parameter_norms(plan, k) for k in (arm, BN)}
    loss = {k: _curves(plan, k, "train/loss") for k in (arm, BN)}
    growth, ratio, ends = [], [], {}
    for s in sorted(theta[BN]):
        steps = sorted(set(theta[arm][s]) & set(loss[arm][s]))
        if len(steps) < 2:
            raise Diverged(f"{arm} seed {s} went non-finite before its second evaluation")
        start, end = steps[0], steps[-1]
        grew = {k: theta[k][s][end] - theta[k][s][start] for k in (arm, BN)}
        if grew[BN] <= 0 or grew[arm] <= 0:
            raise Diverged(f"seed {s}: a parameter norm that did not grow ({grew}): no ratio")
        growth.append(math.log10(grew[arm] / grew[BN]))
        ratio.append(math.log10(loss[arm][s][end] / loss[BN][s][end]))
        ends[s] = end
    return Estimate.of(growth, log=True), Estimate.of(ratio, log=True), ends


def _measure(arm: str):
    def measure(plan: Plan) -> Measured:
        growth, loss, ends = _compare(plan, arm)
        cut = sorted(s for s, e in ends.items() if e < max(ends.values()))
        note = f"; read at its last finite evaluation: seeds {cut}" if cut else ""
        return Measured(
            {"growth, arm / BN": growth, "training loss, arm / BN": loss},
            f"parameter growth / BN's {growth.text()}; training loss / BN's {loss.text()}{note}",
        )

    return measure


CLAIMS = [
    Claim(
        "BN paper, Sec. 2" + ("; Batch Renorm paper, Sec. 2" if arm == "bn_moving" else ""),
        f"Normalizing outside the gradient blows up: {OUTSIDE_GRADIENT_LABELS[arm]}",
        "the parameters grow indefinitely while the loss stays fixed (\"the model blows up\")",
        All((
            Compare("growth, arm / BN", "the parameters' growth / BN's", bound=FASTER, unit="×", effect=FASTER_EFFECT),
            NotLower("training loss, arm / BN", "the training loss / BN's", NO_BETTER),
        )),
        _measure(arm), method=METHOD, section="outside-gradient", figure="outside_gradient.png",
        confirm=("confirm-outside-gradient",), design=DESIGN,
    )
    for arm in ARMS
]  # fmt: skip
