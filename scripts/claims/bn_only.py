"""Training BatchNorm and only BatchNorm (Frankle, Schwab & Morcos 2021, arXiv:2003.00152):
with every other parameter frozen at its random initialization (the output layer included),
training only BN's γ and β reaches an accuracy far above chance and far above training as many
randomly chosen other parameters; and the trained γ switch off a sizable fraction of the features
(in their deepest ResNets about a third of the channels end with |γ| near zero).

Two networks (``experiments/kit/trainable.py``): the renorm study's conv net with γ learnable
(Fashion-MNIST, batch 32, 3,000 steps) and the BN paper's Figure 1 MLP with BN (MNIST, 10,000
steps), each at its own study's learning rate (no arm is tuned: BN-only training may want a
larger one, which can only understate it). The random control trains 2 weights per output
channel (unit) of each layer before a norm, as many as γ and β there, drawn once per seed with a
generator of their own; everything else, γ and β included, frozen.
"""

from __future__ import annotations

from experiments.kit.errors import MissingResult
from experiments.kit.trainable import SMALL_GAMMA
from experiments.studies import BN_ONLY_CONV, BN_ONLY_MLP, BN_ONLY_READ
from scripts.analysis import committed
from scripts.analysis.stats import Estimate
from scripts.analysis.windows import Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.measure import CHANCE, accuracy_gain, final_accuracy
from scripts.claims.rules import Compare, Equivalent, Margin

NETS = {"conv": "the conv net (Fashion-MNIST)", "mlp": "the Figure 1 MLP (MNIST)"}
# the renorm study collects its runs by data set
PATHS = {"conv": "bn_only/conv/fashion_mnist", "mlp": "bn_only/mlp"}
ARMS = {"conv": tuple(BN_ONLY_CONV), "mlp": tuple(BN_ONLY_MLP)}  # all, norm, random, output
NORM = {net: arms[0] for net, arms in BN_ONLY_READ.items()}
RANDOM = {net: arms[1] for net, arms in BN_ONLY_READ.items()}
# "Far above chance": five times chance (50% on ten classes); three and seven times as alternatives.
FAR_ABOVE = Margin(5 * CHANCE, (3 * CHANCE, 7 * CHANCE))
# "About a third": the fraction of switched-off γ within 10 pp of 1/3 (5 and 15 pp as alternatives).
THIRD = 1 / 3
ABOUT = Margin(0.10, (0.05, 0.15))
SMALL = "gamma/small_fraction"
DESIGN = (
    "Smallest effects: γ and β alone ahead of the random control by 5 pp (Frankle et al.'s gaps are "
    "tens of points; 5 pp is a gap no reader would call equal); 10 pp past five times chance; 5% of "
    "the channels switched off; 'about a third' within ±10 pp of 1/3. Every arm runs at its "
    "study's own learning rate, fixed before the pilot."
)
METHOD = (
    "every parameter frozen at its random initialization but those the arm trains (the frozen "
    "entries restored after each optimizer step); at the study's own learning rate for every arm; "
    "final test accuracy at the last step; paired by seed (the seed draws the initialization and "
    "the batches of every arm)"
)
GAMMA_METHOD = (
    f"the γ-and-β-only arm at its last evaluation: over every channel (unit) of every norm, the "
    f"fraction whose |γ| is below {SMALL_GAMMA:g} of its layer's largest |γ|, one value per seed"
)


def small_fraction(plan: Plan, net: str) -> dict[int, float]:
    """Per seed, the γ-and-β-only arm's fraction of switched-off γ at its last evaluation."""
    by_seed = committed.series(PATHS[net], NORM[net], SMALL, plan.results)
    if not by_seed:
        raise MissingResult(f"{NORM[net]} has no {SMALL} under {PATHS[net]}")
    return {s: curve[max(curve)] for s, curve in by_seed.items()}


def _beats_random(net: str):
    def measure(plan: Plan) -> Measured:
        d = accuracy_gain(plan, PATHS[net], NORM[net], RANDOM[net])
        return Measured(
            {"γ, β − random": d}, f"{NETS[net]}: γ and β alone − random weights {d.text()}"
        )

    return measure


def _above_chance(net: str):
    def measure(plan: Plan) -> Measured:
        e = Estimate.of(list(final_accuracy(plan, PATHS[net], NORM[net]).values()))
        return Measured({"γ, β only": e}, f"{NETS[net]}: γ and β alone {e.text()}")

    return measure


def _switched_off(net: str):
    def measure(plan: Plan) -> Measured:
        e = Estimate.of(list(small_fraction(plan, net).values()))
        return Measured(
            {"switched off": e, "switched off − 1/3": e.shifted(-THIRD)},
            f"{NETS[net]}: switched-off γ {e.text(unit='%')}",
        )

    return measure


CONFIRM = {net: (f"confirm-bn-only-{net}",) for net in NETS}
SOURCE = "Frankle et al. 2021, Sec. 4-5"
CLAIMS = [
    row
    for net in NETS
    for row in (
        Claim(
            SOURCE, f"Training only γ and β beats training as many random weights: {NETS[net]}",
            "BN-only far above the same number of randomly chosen parameters (2 a channel)",
            Compare("γ, β − random", "γ and β alone − random weights", effect=0.05),
            _beats_random(net), method=METHOD, section=f"bn-only-{net}", figure="bn_only.png" if net == "conv" else "",
            confirm=CONFIRM[net], design=DESIGN,
        ),
        Claim(
            SOURCE, f"Training only γ and β is far above chance: {NETS[net]}",
            "BN-only reaches accuracy far above chance with every other parameter random",
            Compare("γ, β only", "the final test accuracy of γ and β alone", bound=FAR_ABOVE, effect=0.10),
            _above_chance(net), method=METHOD, section=f"bn-only-{net}", figure="bn_only.png" if net == "conv" else "",
            confirm=CONFIRM[net], design=DESIGN,
        ),
        Claim(
            SOURCE, f"The trained γ switch off some features: {NETS[net]}",
            "a sizable fraction of γ end near zero: BN-only training disables features",
            Compare("switched off", "the fraction of switched-off γ", unit="%", effect=0.05),
            _switched_off(net), method=GAMMA_METHOD, section=f"bn-only-{net}", figure="bn_only.png" if net == "conv" else "",
            confirm=CONFIRM[net], design=DESIGN,
        ),
        Claim(
            SOURCE, f"About a third of the γ are switched off: {NETS[net]}",
            "about a third of the channels with |γ| near zero (their deepest ResNets)",
            Equivalent("switched off − 1/3", "the fraction of switched-off γ − 1/3", ABOUT, unit="%"),
            _switched_off(net), method=GAMMA_METHOD, section=f"bn-only-{net}", figure="bn_only.png" if net == "conv" else "",
            confirm=CONFIRM[net], design=DESIGN,
        ),
    )
]  # fmt: skip
