"""How BN works, as the follow-up literature measures it: internal covariate shift three ways,
the loss landscape, Jacobians and weight norms on the Figure 1 networks (measured every 1,000
steps), and gradients across depth at initialization."""

from __future__ import annotations

import math
import statistics

from scripts.analysis import results
from scripts.analysis.stats import Estimate, NonFinite, log_ratios, paired
from scripts.analysis.windows import (
    EARLY_ALTERNATIVES,
    LATE_ALTERNATIVES,
    Plan,
)
from scripts.claims.bn_paper import FIG1_EARLY_END
from scripts.claims.claim import Claim, Measured
from scripts.claims.measure import accuracy_gain, early_ratio, late, late_ratio, matched
from scripts.claims.rules import All, Compare, Equivalent, NotLower, log_margin

MECH = "mechanism/mlp"
DEPTH = "mechanism/depth"
# A ratio "about 1": within [0.8, 1.25], the conventional equivalence margin for ratios.
RATIO_MARGIN = log_margin(1.25)


def _ics_population(plan: Plan) -> Measured:
    metric = "shift/population/layer3/median_mean"
    e = early_ratio(plan, MECH, "mech_bn", "mech_baseline", metric, FIG1_EARLY_END, change=True)
    at_loss = matched(MECH, "mech_bn", "mech_baseline", metric, change=True)
    by_step = late_ratio(plan, MECH, "mech_bn", "mech_baseline", metric)
    moving = late_ratio(plan, MECH, "mech_bn", "mech_baseline", "shift/moving/layer3/median_mean")
    return Measured(
        {"early": e, "at equal loss": at_loss},
        f"last hidden layer, mean over units of the median's change per 1,000 steps, BN / no BN, "
        f"population statistics: steps 2,000–{FIG1_EARLY_END:,} {e.text()}; at equal training loss "
        f"{at_loss.text()} (not decided on: second half by step {by_step.text()}, where the baseline's "
        f"training loss is far lower; with the moving averages {moving.text()})",
    )


def _gradient_ics(plan: Plan) -> Measured:
    metric = "grad_ics/layer4/ics_relative"

    def ratio(a: str, b: str) -> Estimate:
        return early_ratio(plan, MECH, a, b, metric, FIG1_EARLY_END, change=False)

    e = ratio("mech_bn", "mech_baseline")
    lt = late_ratio(plan, MECH, "mech_bn", "mech_baseline", metric)
    noisy, relu = (
        ratio("mech_noisy_bn", "mech_baseline"),
        ratio("mech_relu_bn", "mech_relu_baseline"),
    )
    return Measured(
        {"early": e, "late": lt},
        f"output layer's ‖G − G′‖/‖G‖, BN / no BN: steps 1,000–{FIG1_EARLY_END:,} {e.text()}, "
        f"second half {lt.text()}; noisy BN / no BN (early) {noisy.text()}; ReLU MLP (early) {relu.text()}",
    )


LANDSCAPE = {
    "landscape/loss_max": "worst loss along the gradient",
    "landscape/grad_predictiveness": "gradient predictiveness",
    "landscape/beta_smoothness": "effective β-smoothness",
}


def _landscape(plan: Plan) -> Measured:
    values, parts = {}, []
    for metric, name in LANDSCAPE.items():
        e = early_ratio(
            plan, MECH, "mech_bn", "mech_baseline", metric, FIG1_EARLY_END, change=False
        )
        lt = late_ratio(plan, MECH, "mech_bn", "mech_baseline", metric)
        values[name] = e
        parts.append(f"{name} {e.text()} (second half {lt.text()})")
    return Measured(values, f"BN / no BN, steps 1,000–{FIG1_EARLY_END:,}: " + "; ".join(parts))


def _noisy_bn(plan: Plan) -> Measured:
    vs_bn = accuracy_gain(plan, MECH, "mech_noisy_bn", "mech_bn")
    vs_base = accuracy_gain(plan, MECH, "mech_noisy_bn", "mech_baseline")
    shift = late_ratio(
        plan, MECH, "mech_noisy_bn", "mech_bn", "shift/train_mode/layer3/median_mean"
    )
    return Measured(
        {"noisy BN − no BN": vs_base, "noisy BN − BN": vs_bn},
        f"final test accuracy: noisy BN − BN {vs_bn.text()}; noisy BN − no BN {vs_base.text()}; "
        f"its training-mode drift / BN's, second half, {shift.text()}",
    )


def _jacobian(plan: Plan) -> Measured:
    band = {
        k: late(plan, MECH, k, "jacobian/layer3/sv_in_band", geometric=False)
        for k in ("mech_bn", "mech_baseline")
    }
    median = late(plan, MECH, "mech_bn", "jacobian/layer3/sv_median")
    d = paired(band["mech_bn"], band["mech_baseline"])
    near = log_ratios(median, dict.fromkeys(median, 1.0))
    return Measured(
        {"BN's median singular value": near, "in band, BN − no BN": d},
        f"∂h3/∂h2 per example (inference mode), second half of training: BN's median singular value "
        f"{near.text(unit='')} (geometric mean); fraction of singular values in [0.5, 2], BN − no BN {d.text()}",
    )


def _weight_decay(plan: Plan) -> Measured:
    e = late_ratio(plan, MECH, "mech_bn_wd1e-3", "mech_bn", "weights/layer2/relative_update")
    norms = late_ratio(plan, MECH, "mech_bn_wd1e-3", "mech_bn", "weights/layer2/norm")
    return Measured(
        {"relative update": e},
        f"hidden layer 2, second half of training, L2 1e-3 / no L2: ‖W‖ {norms.text()}, ‖ΔW‖/‖W‖ per step {e.text()}",
    )


# -- Gradients across depth at initialization (the depth study) --------------------------------
def _depth_ratios(setup_base: str, step: int) -> dict[int, dict[int, float]]:
    """``{seed: {depth: gradient ratio at step}}`` of ``setup_base`` from the depth sweep."""
    out: dict[int, dict[int, float]] = {}
    for (setup, metric), by_seed in results.curves(DEPTH).items():
        if metric == "grad_ratio" and setup.startswith(f"{setup_base}_d"):
            depth = int(setup.rsplit("_d", 1)[1])
            for seed, curve in by_seed.items():
                if step in curve:
                    out.setdefault(seed, {})[depth] = curve[step]
    return out


def _log10_slope(by_depth: dict[int, float]) -> float:
    """Least-squares slope of log10(ratio) against depth: decades per hidden layer."""
    xs = sorted(by_depth)
    if not all(by_depth[d] > 0 and math.isfinite(by_depth[d]) for d in xs):
        raise NonFinite(f"gradient ratios {by_depth}: every one must be positive and finite")
    ys = [math.log10(by_depth[d]) for d in xs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _explode(plan: Plan) -> Measured:
    bn, plain = _depth_ratios("deep_mlp_bn_relu", 0), _depth_ratios("deep_mlp_relu", 0)
    slope_bn = {s: _log10_slope(v) for s, v in bn.items()}
    slope_plain = {s: _log10_slope(v) for s, v in plain.items()}
    e_bn, diff = Estimate.of(list(slope_bn.values())), paired(slope_bn, slope_plain)
    deepest = max(next(iter(bn.values())))
    at_deepest = statistics.geometric_mean([v[deepest] for v in bn.values()])
    return Measured(
        {"BN's slope": e_bn, "BN − no BN": diff},
        f"log10 of ‖∂L/∂W_first‖/‖∂L/∂W_last‖ per hidden layer, ReLU: with BN {e_bn.text(1, '', 3)}, "
        f"BN − no BN {diff.text(1, '', 3)}; with BN {at_deepest:.3g}× at depth {deepest} (geometric mean)",
    )


def _shrinks(plan: Plan) -> Measured:
    at0, at1 = _depth_ratios("deep_mlp_bn_relu", 0), _depth_ratios("deep_mlp_bn_relu", 1)
    at100 = _depth_ratios("deep_mlp_bn_relu", 100)
    deepest = max(next(iter(at0.values())))
    seeds = [s for s in sorted(at0) if deepest in at1.get(s, {})]
    e = log_ratios({s: at1[s][deepest] for s in seeds}, {s: at0[s][deepest] for s in seeds})
    r100 = [at100[s][deepest] for s in sorted(at0) if deepest in at100.get(s, {})]
    return Measured(
        {"after one step / at init": e},
        f"depth {deepest}, ReLU, with BN: ratio after 1 step / at init {e.text()}; the ratio after 100 steps "
        f"{', '.join(f'{r:.3g}' for r in r100)} per seed",
    )


CLAIMS = [
    Claim(
        "Yang et al. 2019", "At initialization BN makes gradients explode exponentially with depth",
        "exponential growth of the gradient norm towards the input (fully connected, BN, ReLU)",
        All((Compare("BN's slope", "BN's slope", unit=""), Compare("BN − no BN", "BN's slope − no BN's (paired by seed)", unit=""))),
        _explode,
        section="depth", figure="depth_gradient_ratio.png",
    ),
    Claim(
        "Yang et al. 2019", "After one optimization step the gradient explosion of a deep BN network shrinks",
        "the dynamic range shrinks after one step",
        Compare("after one step / at init", "the ratio after one step / at init", above=False, unit="×"),
        _shrinks,
        section="depth", figure="depth_gradient_ratio.png",
    ),
    Claim(
        "BN paper, Sec. 2 and Fig. 1(b, c)", "BN reduces internal covariate shift (distributional; moving-average jitter removed)",
        "BN's sigmoid inputs stay stable; the baseline's drift",
        All((
            Compare("early", "BN / no BN early", above=False, unit="×"),
            Compare("at equal loss", "BN / no BN at equal training loss", above=False, unit="×"),
        )),
        _ics_population, EARLY_ALTERNATIVES,
        method="at equal loss: 8 log-spaced training-loss levels both networks pass (from the higher of their losses at the second evaluation to the higher of their lowest), each network's change at its first evaluation at or below the level; geometric mean over levels",
        section="mechanism", figure="mechanism_ics_three_ways.png",
    ),
    Claim(
        "Santurkar et al. 2018", "BN does not reduce gradient-based ICS (Def. 2.1)",
        "BN's ‖G − G′‖ not lower, often higher (VGG, DLN)",
        All((
            NotLower("early", "BN / no BN early", RATIO_MARGIN),
            NotLower("late", "BN / no BN in the second half", RATIO_MARGIN),
        )),
        _gradient_ics, EARLY_ALTERNATIVES + LATE_ALTERNATIVES[:2],
        section="mechanism", figure="mechanism_santurkar.png",
    ),
    Claim(
        "Santurkar et al. 2018", "BN makes the loss landscape smoother along the gradient",
        "smaller loss band, gradient change and β-smoothness with BN",
        All(tuple(Compare(name, f"BN / no BN's {name}", above=False, unit="×") for name in LANDSCAPE.values())),
        _landscape, EARLY_ALTERNATIVES,
        section="mechanism", figure="mechanism_santurkar.png",
    ),
    Claim(
        "Santurkar et al. 2018", "BN with injected covariate shift (noisy BN) still trains about as well as BN",
        "noisy BN ≈ BN ≫ baseline",
        All((
            Compare("noisy BN − no BN", "noisy BN − no BN"),
            NotLower("noisy BN − BN", "noisy BN − BN", 0.005, unit="pp"),
        )),
        _noisy_bn, ("late-window mean instead of the final accuracy",),
        section="mechanism", figure="mechanism_santurkar.png",
    ),
    Claim(
        "BN paper, Sec. 3.3 (conjecture)", "BN keeps the layer Jacobians' singular values near 1",
        "conjecture, no number",
        All((
            Equivalent("BN's median singular value", "BN's median singular value", log_margin(2), unit="×"),
            Compare("in band, BN − no BN", "the in-band fraction, BN − no BN"),
        )),
        _jacobian, LATE_ALTERNATIVES,
        section="mechanism", figure="mechanism_jacobian.png",
    ),
    Claim(
        "BN paper, Sec. 3.3; van Laarhoven 2017", "With BN, larger weights get smaller gradients, so weight decay raises the effective step",
        "∂BN((aW)u)/∂(aW) = (1/a) ∂BN(Wu)/∂W",
        Compare("relative update", "the relative update's ratio, L2 / no L2", unit="×"),
        _weight_decay, LATE_ALTERNATIVES,
        section="mechanism", figure="mechanism_weights.png",
    ),
]  # fmt: skip
