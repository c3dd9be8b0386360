"""The batch's composition: does BN regularize through the randomness of which examples share a
batch (BN paper Sec. 3.4), so that reshuffling the batches every epoch helps it (Sec. 4.2.1,
"shuffle training examples more thoroughly": about 1% validation accuracy for BN-Inception)?

The Figure 1 MLP (50,000 steps of 60, about 50 epochs: it overfits Fashion-MNIST) with and
without BN, its batches reshuffled every epoch (the paper's protocol) or cut once and kept, only
their order reshuffled. The network without BN sees the same two streams, so the interaction
(BN's gain from reshuffling less the baseline's) separates the noise BN's statistics carry from
what any SGD gains from a new batch order.
"""

from __future__ import annotations

from scripts.analysis.stats import Estimate, same_seeds
from scripts.analysis.windows import Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.measure import accuracy_gain, final_accuracy
from scripts.claims.rules import Compare

FINAL = ("late-window mean instead of the final accuracy",)
DATASETS = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
# A quarter of a point: the smallest gain from reshuffling a reader would act on at these
# accuracies (a quarter of the paper's 1% on ImageNet; about two test-set standard errors).
EFFECT = 0.0025
DESIGN = (
    "Smallest effect: 0.25 pp of final test accuracy, a quarter of the paper's 1% (BN-Inception on "
    "ImageNet), about two standard errors of one evaluation on 10,000 test images."
)
METHOD = (
    "the Figure 1 MLP (sigmoid, 50,000 steps of 60, learning rate 1), final test accuracy; "
    "reshuffled: a fresh permutation every epoch; fixed: one permutation cut into batches once, "
    "only the batches' order reshuffled each epoch; paired by seed (the seed draws the weights "
    "of both arms)"
)


def _path(data: str) -> str:
    return f"batch_composition/{data}"


def _bn_gain(data: str):
    def measure(plan: Plan) -> Measured:
        d = accuracy_gain(plan, _path(data), "bn", "bn_fixed")
        return Measured({"BN reshuffled − fixed": d}, f"BN, reshuffled − fixed: {d.text()}")

    return measure


def _interaction(data: str):
    def measure(plan: Plan) -> Measured:
        acc = {k: final_accuracy(plan, _path(data), k) for k in ("bn", "bn_fixed", "baseline", "baseline_fixed")}  # fmt: skip
        seeds = same_seeds(acc["bn"], acc["baseline"])
        gains = {
            k: {s: acc[k][s] - acc[f"{k}_fixed"][s] for s in seeds} for k in ("bn", "baseline")
        }
        d = Estimate.of([gains["bn"][s] - gains["baseline"][s] for s in seeds])
        base = Estimate.of(list(gains["baseline"].values()))
        return Measured(
            {"BN's gain − no BN's gain": d},
            f"gain from reshuffling, BN − no BN: {d.text()} (no BN's own gain {base.text()})",
        )

    return measure


def _claims(data: str) -> list[Claim]:
    name, section = (
        DATASETS[data],
        {"section": "composition" if data == "mnist" else "composition-fashion-mnist"},
    )
    confirm = (f"confirm-batch-composition-{data.replace('_', '-')}",)
    return [
        Claim(
            "BN paper, Sec. 4.2.1 (6)", f"BN gains from reshuffling its batches every epoch ({name})",
            "shuffling training examples more thoroughly (no fixed batch members) gave about 1% validation accuracy (BN-Inception, ImageNet)",
            Compare("BN reshuffled − fixed", "BN reshuffled − fixed", effect=EFFECT),
            _bn_gain(data), alternatives=FINAL, method=METHOD, confirm=confirm, design=DESIGN, **section,
        ),
        Claim(
            "BN paper, Sec. 3.4 and 4.2.1", f"BN gains more from reshuffling than the network without it ({name})",
            "BN regularizes: a training example is seen with others of a random batch, so the network no longer gives deterministic values for it",
            Compare("BN's gain − no BN's gain", "BN's gain from reshuffling − no BN's", effect=EFFECT),
            _interaction(data), alternatives=FINAL, method=METHOD, confirm=confirm, design=DESIGN, **section,
        ),
    ]  # fmt: skip


CLAIMS = [c for data in DATASETS for c in _claims(data)]
