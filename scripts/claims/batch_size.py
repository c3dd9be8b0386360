"""The batch-size study: what the normalization batch does to BN, as the follow-up literature
checks it.

The conv net of the Batch Renorm study (gradient over a minibatch of 32, 3,000 steps) with BN or
Batch Renorm normalizing over groups of ``g`` examples inside the minibatch (``g`` = 2, 4, 8, 16,
32), beside GroupNorm and LayerNorm (per example: the same at every ``g``). Every arm shares each
seed's data order, so every comparison is paired by seed. Every BN run is evaluated at the end
with its moving averages (``test/acc``), Precise BN from 100 training batches of ``g`` with and
without Bessel's correction (``test/acc_precise``, ``test/acc_precise_nobessel``), Precise BN
from 10², 10³ and 10⁴ training examples (``test/acc_precise_n<n>``), test-example weighting
(``test/acc_weighted``) and in training mode on i.i.d. test batches of ``g``
(``test/acc_train_mode``): ``experiments/renorm.py``, ``InferenceModes``.

The hidden fully connected layer of this net is normalized too: at ``g = 2`` its BN sees two
values per unit, so in training each unit's output is ``±d/√(d² + 4ε)`` (``d`` the difference of
the two values; ``±1`` but for tiny ``d``), the sign of the pair's difference. It is kept
(that is what BN over 2 does to such a layer, and the rows below read it as such); its
convolutions normalize over ``2·H·W`` values and are not degenerate.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from experiments.kit.config import CONFIGS
from experiments.studies import SIZE_BN, SIZE_BRN, SMALL_DATA
from scripts.analysis.stats import Estimate, paired
from scripts.analysis.windows import Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.measure import series
from scripts.claims.rules import All, Compare, Equivalent, Margin, NotLower

PATH = "batch_size/fashion_mnist"
# The same arms trained on the first 10,000 training images (3,000 steps of 32: about ten
# epochs), where the network overfits and a regularizer has something to remove
SMALL = "batch_size_small/fashion_mnist"
GN = "groupnorm"
# The smallest accuracy difference of interest: half a point, about the standard error of one
# evaluation on 10,000 test images near 89% (the study's accuracy level), doubled.
EFFECT = 0.005
# "Not worse than the whole batch": a loss of at most 0.5 pp (the same half point); 0.25 and 1 pp
# as robustness alternatives.
GHOST = Margin(0.005, (0.0025, 0.01))
GHOSTS = (8, 16)  # the ghost batches compared with the whole batch of 32
# "Saturated": ten times the examples changes Precise BN's accuracy by less than 0.3 pp (under a
# third of the smallest effect above); 0.2 and 0.5 pp as robustness alternatives.
SATURATED = Margin(0.003, (0.002, 0.005))
COUNTS = (100, 1000, 10000)  # Precise BN's sample counts, training examples (eval.precise_counts)
DESIGN = (
    "Smallest effects: half a point of test accuracy (twice the standard error of one evaluation "
    "on the 10,000 test images near 89%), for differences between arms and between evaluations; "
    "ghost BN no worse than the whole batch within 0.5 pp; Precise BN saturated when ten times "
    "its examples move it by under 0.3 pp."
)
METHOD = (
    "the renorm study's conv net, gradient over 32, 3,000 steps; BN or Batch Renorm normalizing "
    "over groups of g inside each minibatch; final test accuracy (10,000 images); paired by seed "
    "(every arm shares each seed's data order)"
)


def final(plan: Plan, setup: str, metric: str = "test/acc", path: str = PATH) -> dict[int, float]:
    """``{seed: value}`` of ``metric`` at each run's last evaluation."""
    return {s: v[max(v)] for s, v in series(plan, path, setup, metric).items()}


def _diff(plan: Plan, a: tuple[str, str], b: tuple[str, str], path: str = PATH) -> Estimate:
    """``a − b``, each ``(setup, metric)``, paired by seed."""
    return paired(final(plan, *a, path=path), final(plan, *b, path=path))


def _rises(plan: Plan) -> Measured:
    d = _diff(plan, (SIZE_BN[32], "test/acc"), (SIZE_BN[2], "test/acc"))
    return Measured({"BN g=32 − g=2": d}, f"BN with g = 32 − with g = 2: {d.text()}")


def _gn_at_2(plan: Plan) -> Measured:
    d = _diff(plan, (GN, "test/acc"), (SIZE_BN[2], "test/acc"))
    return Measured({"GroupNorm − BN g=2": d}, f"GroupNorm − BN with g = 2: {d.text()}")


def _drop(plan: Plan, arms: dict[int, str]) -> dict[int, float]:
    top, bottom = final(plan, arms[32]), final(plan, arms[2])
    return {s: top[s] - bottom[s] for s in top}


def _brn_slope(plan: Plan) -> Measured:
    d = paired(_drop(plan, SIZE_BN), _drop(plan, SIZE_BRN))
    return Measured(
        {"BN's drop − BRN's drop": d},
        f"(BN g=32 − g=2) − (Batch Renorm g=32 − g=2): {d.text()}",
    )


def _train_mode(plan: Plan) -> Measured:
    out, shown = {}, []
    for g in (2, 4, 32):
        arm = SIZE_BN[g]
        d = _diff(plan, (arm, "test/acc_train_mode"), (arm, "test/acc_precise"))
        out[f"train mode − Precise BN g={g}"] = d
        shown.append(f"g = {g}: {d.text()}")
    return Measured(out, "BN, training mode on test batches of g − Precise BN: " + "; ".join(shown))


def _ghost(plan: Plan) -> Measured:
    out = {
        f"BN g={g} − g=32": _diff(plan, (SIZE_BN[g], "test/acc"), (SIZE_BN[32], "test/acc"))
        for g in GHOSTS
    }
    return Measured(out, "; ".join(f"{k}: {v.text()}" for k, v in out.items()))


def gap(plan: Plan, setup: str, path: str = PATH) -> dict[int, float]:
    """``{seed: training − test accuracy}`` at the end: how far a run overfits."""
    train, test = final(plan, setup, "train/acc", path), final(plan, setup, path=path)
    return {s: train[s] - test[s] for s in test}


def _ghost_small(plan: Plan) -> Measured:
    out = {
        f"BN g={g} − g=32, 10k": _diff(
            plan, (SIZE_BN[g], "test/acc"), (SIZE_BN[32], "test/acc"), SMALL
        )
        for g in GHOSTS
    }
    over = gap(plan, SIZE_BN[32], SMALL)
    return Measured(
        out,
        "; ".join(f"{k}: {v.text()}" for k, v in out.items())
        + f" (BN over 32's accuracy on its first {TRAIN_ACC_IMAGES:,} training images is {sum(over.values()) / len(over) * 100:.1f} pp above its test accuracy)",
    )


def _gap_small(plan: Plan) -> Measured:
    whole = gap(plan, SIZE_BN[32], SMALL)
    by_g = {g: paired(whole, gap(plan, SIZE_BN[g], SMALL)) for g in GHOSTS}
    return Measured(
        {f"gap g=32 − g={g}, 10k": d for g, d in by_g.items()},
        "training − test accuracy, BN over 32 − ghost BN: "
        + "; ".join(f"g={g}: {d.text()}" for g, d in by_g.items()),
    )


def _bessel(plan: Plan) -> Measured:
    arm = SIZE_BN[2]
    d = _diff(plan, (arm, "test/acc_precise"), (arm, "test/acc_precise_nobessel"))
    return Measured(
        {"Bessel − no Bessel g=2": d},
        f"BN with g = 2, Precise BN with Bessel's correction − without: {d.text()}",
    )


def _saturates(plan: Plan) -> Measured:
    out = {
        f"n=10⁴ − n=10³ g={g}": _diff(
            plan, (SIZE_BN[g], "test/acc_precise_n10000"), (SIZE_BN[g], "test/acc_precise_n1000")
        )
        for g in (2, 32)
    }
    return Measured(
        out, "Precise BN from 10⁴ − from 10³ training examples: " + "; ".join(f"{k}: {v.text()}" for k, v in out.items())
    )  # fmt: skip


# the training images train/acc is measured on (the first N; the CPU scale's eval.train_subset)
TRAIN_ACC_IMAGES = int(OmegaConf.load(CONFIGS / "renorm" / "scale" / "cpu.yaml").eval.train_subset)
SMALL_METHOD = (
    "the renorm study's conv net, gradient over 32, 3,000 steps; BN normalizing over groups of g "
    f"inside each minibatch, trained on the first {SMALL_DATA:,} training images (about ten "
    "epochs); final test accuracy (10,000 images) and training accuracy on the first "
    f"{TRAIN_ACC_IMAGES:,} training images, both in inference mode; paired by seed"
)


def _not_worse(key: str = "", label: str = "") -> All:
    """Ghost BN over 8 and over 16 each no worse than BN over 32 (``key``, ``label``: of which
    runs)."""
    return All(tuple(
        NotLower(f"BN g={g} − g=32{key}", f"BN with g = {g} − with g = 32{label}", GHOST, unit="pp")
        for g in GHOSTS
    ))  # fmt: skip


SMALL_DESIGN = (
    "Smallest effects as on the whole training set: ghost BN no worse than the whole batch within "
    "0.5 pp; a training − test gap smaller by half a point (twice the standard error of one "
    "evaluation on the 10,000 test images)."
)
SMALL_SECTION = {
    "method": SMALL_METHOD, "section": "batch-size-small-data", "figure": "batch_size_small_data.png",
    "confirm": ("confirm-batch-size-small-data",), "design": SMALL_DESIGN,
}  # fmt: skip
SECTION = {"section": "batch-size", "figure": "batch_size_groups.png"}
CONFIRM = ("confirm-batch-size",)
COMMON = {"method": METHOD, "confirm": CONFIRM, "design": DESIGN, **SECTION}
CLAIMS = [
    Claim(
        "Wu & He 2018 (arXiv:1803.08494), Fig. 1", "BN's accuracy rises with its normalization batch",
        "BN's error rises rapidly as the batch shrinks",
        Compare("BN g=32 − g=2", "BN with g = 32 − with g = 2", effect=EFFECT), _rises, **COMMON,
    ),
    Claim(
        "Wu & He 2018 (arXiv:1803.08494), Fig. 1", "GroupNorm beats BN normalizing over 2 examples",
        "GN's error is lower than BN's at 2 images per GPU",
        Compare("GroupNorm − BN g=2", "GroupNorm − BN with g = 2", effect=EFFECT), _gn_at_2, **COMMON,
    ),
    Claim(
        "Ioffe 2017 (arXiv:1702.03275), Sec. 4.2", "Batch Renorm loses less than BN from g = 32 to g = 2",
        "Batch Renorm degrades more slowly than BN as the microbatch shrinks",
        Compare("BN's drop − BRN's drop", "BN's drop from g = 32 to 2 − Batch Renorm's", effect=EFFECT),
        _brn_slope, **COMMON,
    ),
    Claim(
        "Wu & Johnson 2021 (arXiv:2105.07576), Sec. 4", "Training-mode evaluation beats Precise BN at small g; the sign reverses at g = 32",
        "with small batches, normalizing test batches of the same size beats population statistics; with large ones, population statistics win",
        All((
            Compare("train mode − Precise BN g=2", "training mode − Precise BN at g = 2", effect=EFFECT),
            Compare("train mode − Precise BN g=4", "training mode − Precise BN at g = 4", effect=EFFECT),
            Compare("train mode − Precise BN g=32", "training mode − Precise BN at g = 32", above=False, effect=EFFECT),
        )),
        _train_mode, **COMMON,
    ),
    Claim(
        "Hoffer et al. 2017 (arXiv:1705.08741); Wu & Johnson 2021, Sec. 4", "Ghost BN over 8 or 16 examples is not worse than BN over 32",
        "normalizing over smaller ghost batches inside a large gradient batch costs no accuracy",
        _not_worse(), _ghost, **COMMON,
    ),
    Claim(
        "Hoffer et al. 2017; Summers & Dinneen 2020 (arXiv:1906.03548)", "On 10,000 training images, ghost BN over 8 or 16 examples is not worse than BN over 32",
        "normalizing over smaller ghost batches costs no accuracy, where the network overfits as well",
        _not_worse(", 10k", ", 10,000 images"), _ghost_small, **SMALL_SECTION,
    ),
    Claim(
        "Summers & Dinneen 2020 (arXiv:1906.03548), Sec. 3", "On 10,000 training images, ghost BN over 8 or 16 examples overfits less than BN over 32",
        "ghost batch normalization regularizes at small and medium ghost batch sizes",
        All((
            Compare("gap g=32 − g=8, 10k", "BN over 32's training − test accuracy gap − ghost BN over 8's, 10,000 images", effect=EFFECT),
            Compare("gap g=32 − g=16, 10k", "BN over 32's training − test accuracy gap − ghost BN over 16's, 10,000 images", effect=EFFECT),
        )),
        _gap_small, **SMALL_SECTION,
    ),
    Claim(
        "Wu & Johnson 2021 (arXiv:2105.07576), Sec. 3", "Bessel's correction helps Precise BN at g = 2",
        "population variance estimated from small batches needs the m/(m−1) correction; here at g = 2 the hidden layer's m is 2, so the correction doubles its variance: predicted higher accuracy with it",
        Compare("Bessel − no Bessel g=2", "Precise BN with − without Bessel's correction at g = 2", effect=EFFECT),
        _bessel, **COMMON,
    ),
    Claim(
        "Wu & Johnson 2021 (arXiv:2105.07576), Sec. 3", "Precise BN saturates by 10³ training examples",
        "Precise BN needs only a few thousand samples to estimate population statistics",
        All((
            Equivalent("n=10⁴ − n=10³ g=2", "Precise BN from 10⁴ − from 10³ examples at g = 2", SATURATED),
            Equivalent("n=10⁴ − n=10³ g=32", "Precise BN from 10⁴ − from 10³ examples at g = 32", SATURATED),
        )),
        _saturates, method=METHOD + "; Precise BN from the first ⌊n/g⌋ of one stream of training batches of g, Bessel's correction",
        confirm=CONFIRM, design=DESIGN, section="batch-size", figure="batch_size_precise.png",
    ),
]  # fmt: skip
