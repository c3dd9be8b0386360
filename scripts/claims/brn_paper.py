"""The Batch Renormalization paper's claims (Ioffe, 2017): Figure 1 (microbatches) and Sec. 4.3
(non-i.i.d. minibatches), at the renorm study's Fashion-MNIST CPU scale."""

from __future__ import annotations

from experiments.papers import BRN_RESULTS
from scripts.analysis.stats import Estimate, fieller, paired
from scripts.analysis.windows import Plan
from scripts.claims.claim import Claim, Measured
from scripts.claims.measure import accuracy_gain, final_accuracy
from scripts.claims.rules import All, Compare, Equivalent, ShareAbove

RENORM = "renorm/fashion_mnist"
PAPER = BRN_RESULTS["setups"]
FINAL = ("late-window mean instead of the final accuracy",)
SHARE = 0.5  # "most of the accuracy lost"


def _matches(plan: Plan) -> Measured:
    d = accuracy_gain(plan, RENORM, "brn32", "bn32")
    return Measured({"BRN-32 − BN-32": d}, f"BRN-32 − BN-32 (Fashion-MNIST): {d.text()}")


def _recovers(plan: Plan) -> Measured:
    acc = {k: final_accuracy(plan, RENORM, k) for k in ("bn32", "bn_micro4", "brn_micro4")}
    seeds = sorted(acc["bn32"].keys() & acc["bn_micro4"].keys() & acc["brn_micro4"].keys())
    gap = [acc["bn32"][s] - acc["bn_micro4"][s] for s in seeds]
    gain = [acc["brn_micro4"][s] - acc["bn_micro4"][s] for s in seeds]
    share = fieller(gain, gap)
    bounds = "unbounded" if share.low is None else f"{share.low:.0%}, {share.high:.0%}"
    return Measured(
        {
            "gain": Estimate.of(gain),
            "share": share,
            "share − 50%": Estimate.of([g - SHARE * d for g, d in zip(gain, gap)]),
        },
        f"gap BN-32 − BN-micro4 {Estimate.of(gap).text()}; BRN gain {Estimate.of(gain).text()}; "
        f"recovered {share.value:.0%} [{bounds}] (mean gain / mean gap, Fieller's interval)",
    )


def _collapse(plan: Plan) -> Measured:
    d = paired(
        final_accuracy(plan, RENORM, "noniid8_bn", "test_acc_train_mode"),
        final_accuracy(plan, RENORM, "noniid8_bn"),
    )
    return Measured(
        {"training mode − inference": d},
        f"training-mode − inference accuracy, 4 labels × 8 (Fashion-MNIST): {d.text()}",
    )


def _fixes(plan: Plan) -> Measured:
    d = accuracy_gain(plan, RENORM, "noniid8_brn", "noniid8_bn")
    return Measured({"BRN − BN": d}, f"BRN − BN, 4 labels × 8 (Fashion-MNIST): {d.text()}")


def _pct(setup: str, key: str = "test_acc") -> str:
    return f"{PAPER[setup][key]:.1%}"


CLAIMS = [
    Claim(
        "BRN paper, Fig. 1", "With minibatches of 32, Batch Renorm matches BN",
        f"{_pct('brn32')} vs {_pct('bn32')}",
        Equivalent("BRN-32 − BN-32", "the difference", 0.01), _matches, FINAL,
        section="renorm", figure="renorm_fig1_fashion_mnist.png",
    ),
    Claim(
        "BRN paper, Fig. 1", "Batch Renorm recovers most of the accuracy lost to microbatches of 4",
        f"BN-micro4 {_pct('bn_micro4')}, BRN-micro4 {_pct('brn_micro4')}, BN-32 {_pct('bn32')} "
        f"({(PAPER['brn_micro4']['test_acc'] - PAPER['bn_micro4']['test_acc']) / (PAPER['bn32']['test_acc'] - PAPER['bn_micro4']['test_acc']):.0%} of the gap)",
        All((
            Compare("gain", "BRN-micro4 − BN-micro4"),
            ShareAbove("share", "the recovered share", SHARE, "share − 50%"),
        )),
        _recovers, FINAL,
        section="renorm", figure="renorm_fig1_fashion_mnist.png",
    ),
    Claim(
        "BRN paper, Sec. 4.3", "With non-i.i.d. minibatches, BN's inference (moving averages) falls below its training-mode accuracy",
        f"{_pct('noniid_bn')} at inference vs {_pct('noniid_bn', 'test_acc_train_mode')} in training mode",
        Compare("training mode − inference", "the difference"), _collapse, FINAL,
        section="renorm", figure="renorm_fig2_fashion_mnist.png",
    ),
    Claim(
        "BRN paper, Sec. 4.3", "Batch Renorm fixes non-i.i.d. minibatches",
        f"{_pct('noniid_brn')} vs {_pct('noniid_bn')}",
        Compare("BRN − BN", "the difference"), _fixes, FINAL,
        section="renorm", figure="renorm_fig2_fashion_mnist.png",
    ),
]  # fmt: skip
