"""The study registry: one light record per study (no torch import), read by the report and the
claims table. A study's record names its result sections (a results folder, the make target
that writes it, its figures with captions) and the human names of its setups.

Adding a study: a module in ``experiments/``, its configs, and one :class:`Study` entry below;
the report gives it a section and its claims can link to it by the section's anchor.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Figure:
    file: str  # in results/figures/ (PNG, with an SVG beside it)
    caption: str


@dataclass(frozen=True)
class Section:
    """One results folder (or file) of a study: what the report shows under one heading."""

    anchor: str  # the report's anchor, and what a claim links to
    title: str
    path: str  # under results/: a folder with summary.json and runs.csv, or a CSV file
    target: str  # the make target that writes it
    figures: tuple[Figure, ...] = ()


@dataclass(frozen=True)
class Study:
    name: str  # its module, python -m experiments.<name>, where it has one of its own
    title: str
    sections: tuple[Section, ...]
    labels: dict[str, str] = field(default_factory=dict)  # setup → its name in tables


FIG1 = {"baseline": "no BN", "bn": "BN", "bn_after": "BN after the sigmoid"}

STUDIES: tuple[Study, ...] = (
    Study(
        "mnist",
        "BN paper Figure 1: activations over time (MNIST)",
        (
            Section(
                "mnist", "MNIST, 3 seeds, 50,000 steps", "mnist/mnist", "reproduce-mnist",
                (
                    Figure("mnist_fig1.png", "Figure 1: (a) test accuracy over training; (b, c) the 15th, 50th and 85th percentiles of a typical unit's sigmoid input, without and with BN"),
                    Figure("mnist_covariate_shift.png", "How far each hidden layer's sigmoid inputs move between evaluations (median and 15–85 spread, mean over units)"),
                ),
            ),
            Section(
                "fashion-mnist", "The same study on Fashion-MNIST", "mnist/fashion_mnist", "reproduce-fashion-mnist",
                (
                    Figure("fashion_mnist_fig1.png", "Figure 1 on Fashion-MNIST"),
                    Figure("fashion_mnist_covariate_shift.png", "Drift of the sigmoid inputs on Fashion-MNIST"),
                ),
            ),
            Section(
                "lr-sweep", "The learning rate", "mnist/lr_sweep.csv", "sweep-lr",
                (Figure("mnist_lr_sweep.png", "Final test accuracy against the learning rate, without and with BN"),),
            ),
            Section(
                "init-scale", "The weight-initialisation scale", "mnist/init_scale_sweep.csv", "sweep-init-scale",
                (Figure("mnist_init_scale.png", "Final test accuracy against the initial weights' standard deviation"),),
            ),
        ),
        FIG1,
    ),
    Study(
        "renorm",
        "Batch Renorm paper: small and non-i.i.d. minibatches",
        (
            Section(
                "renorm", "Fashion-MNIST, 5 seeds", "renorm/fashion_mnist", "reproduce-renorm",
                (
                    Figure("renorm_fig1_fashion_mnist.png", "Batch Renorm paper Figure 1: test accuracy with minibatches of 32 and microbatches of 4"),
                    Figure("renorm_fig2_fashion_mnist.png", "Batch Renorm paper Figure 2: non-i.i.d. minibatches, inference against training-mode accuracy"),
                    Figure("renorm_clipping_fashion_mnist.png", "How often r and d are clipped, per layer, as r_max and d_max ramp up"),
                    Figure("renorm_final.png", "Final test accuracy of every setup on both datasets, beside the paper's ImageNet numbers"),
                ),
            ),
            Section(
                "renorm-mnist", "MNIST", "renorm/mnist", "reproduce-renorm",
                (
                    Figure("renorm_fig1_mnist.png", "Figure 1's setups on MNIST"),
                    Figure("renorm_fig2_mnist.png", "Non-i.i.d. minibatches on MNIST"),
                    Figure("renorm_clipping_mnist.png", "Clipping of r and d on MNIST"),
                ),
            ),
        ),
        {
            "bn32": "BN, minibatch 32", "brn32": "Batch Renorm, minibatch 32",
            "bn_micro4": "BN, microbatch 4", "brn_micro4": "Batch Renorm, microbatch 4",
            "brn_micro4_jump": "Batch Renorm, microbatch 4, no ramp",
            "groupnorm": "GroupNorm", "layernorm": "LayerNorm",
            "noniid_bn": "BN, non-i.i.d. (16 labels × 2)", "noniid_bn_halves": "BN on two halves, non-i.i.d.",
            "noniid_brn": "Batch Renorm, non-i.i.d. (16 labels × 2)",
            "noniid8_bn": "BN, non-i.i.d. (4 labels × 8)", "noniid8_brn": "Batch Renorm, non-i.i.d. (4 labels × 8)",
        },
    ),
    Study(
        "inception",
        "BN paper Figures 2–3: BN-Inception variants (reduced setting)",
        (
            Section(
                "inception-converged", "The paper's converged protocol (Fashion-MNIST, 32 px)",
                "inception/fashion_mnist_converged", "reproduce-inception-converged",
                (Figure("inception_fig2_fashion_mnist_converged.png", "Figure 2: test-subset accuracy of every variant until it plateaus, reaches Inception's maximum or the cap"),),
            ),
            Section(
                "inception-cpu", "A fixed budget of 3,000 steps", "inception/fashion_mnist_cpu", "reproduce-inception-cpu",
                (Figure("inception_fig2_fashion_mnist_cpu.png", "Figure 2 at a fixed budget"),),
            ),
        ),
        {
            "inception": "Inception", "bn_baseline": "BN-Baseline", "bn_x5": "BN-x5", "bn_x30": "BN-x30",
            "bn_x5_sigmoid": "BN-x5-Sigmoid", "inception_sigmoid": "Inception with sigmoid (no BN)",
        },
    ),
    Study(
        "mechanism",
        "How BN works: internal covariate shift three ways, the loss landscape, Jacobians, weights (the Figure 1 networks)",
        (
            Section(
                "mechanism", "The Figure 1 networks measured every 1,000 steps", "mechanism/mlp", "reproduce-mechanism",
                (
                    Figure("mechanism_ics_three_ways.png", "Drift of the sigmoid inputs measured three ways: moving averages, population statistics, training mode"),
                    Figure("mechanism_typical_unit.png", "Figure 1 (b, c) redrawn with population statistics: a typical unit's percentiles"),
                    Figure("mechanism_santurkar.png", "Santurkar et al.'s measures: gradient ICS, the loss along the gradient, gradient predictiveness, β-smoothness"),
                    Figure("mechanism_santurkar_relu.png", "The same measures on the ReLU MLP"),
                    Figure("mechanism_jacobian.png", "Singular values of the layer Jacobians"),
                    Figure("mechanism_weights.png", "Weight norms and relative updates, with and without weight decay"),
                ),
            ),
        ),
        {
            "mech_baseline": "no BN", "mech_bn": "BN", "mech_noisy_bn": "noisy BN",
            "mech_bn_wd1e-4": "BN, L2 1e-4", "mech_bn_wd1e-3": "BN, L2 1e-3",
            "mech_relu_baseline": "ReLU, no BN", "mech_relu_bn": "ReLU, BN",
        },
    ),
    Study(
        "depth",
        "Gradients across depth at initialization (Yang et al. 2019)",
        (
            Section(
                "depth", "Fully connected networks of 2 to 64 layers, with and without BN", "mechanism/depth", "reproduce-depth",
                (Figure("depth_gradient_ratio.png", "The first layer's gradient norm over the last's, against depth, with and without BN"),),
            ),
        ),
    ),
    Study(
        "questions",
        "Open questions: where BN sits, Batch Renorm's gradient, dropout, non-Gaussianity, small data",
        (
            Section(
                "norm-position", "BN before or after the nonlinearity (conv net)", "questions/norm_position/fashion_mnist", "question-norm-position",
                (Figure("question_norm_position.png", "BN before or after the nonlinearity: the conv net and the Figure 1 MLP"),),
            ),
            Section(
                "mlp-questions", "The Figure 1 MLP: placement and non-Gaussianity", "questions/mlp", "question-mlp",
                (Figure("question_nongaussianity.png", "Excess kurtosis and negentropy of each layer's sigmoid inputs, without and with BN"),),
            ),
            Section(
                "brn-gradient", "Is Batch Renorm's gain its gradient scaling?", "questions/brn_gradient/fashion_mnist", "question-brn-gradient",
                (Figure("question_brn_gradient.png", "Microbatch 4: BN, Batch Renorm and the two ablations that separate its forward correction from its gradient"),),
            ),
            Section(
                "dropout", "Dropout with BN", "questions/dropout", "question-dropout",
                (Figure("question_dropout.png", "BN-x5 and BN-Baseline with and without dropout"),),
            ),
            Section(
                "init-scale-small", "1,000 images: sensitivity to the initial scale", "questions/init_scale_small/mnist.csv", "question-init-scale-small",
                (Figure("question_init_scale_small.png", "Accuracy against the initial weights' scale on 1,000 training images"),),
            ),
        ),
        {
            **FIG1, "bn32": "BN before the ReLU", "bn32_after": "BN after the ReLU", "nonorm": "no BN",
            "bn_micro4": "BN, microbatch 4", "brn_micro4": "Batch Renorm, microbatch 4",
            "bn_micro4_rgrad": "BN forward, r-scaled gradient", "brn_micro4_bngrad": "Batch Renorm forward, BN's gradient",
            "bn_x5": "BN-x5 (no dropout)", "bn_x5_dropout": "BN-x5 with dropout",
            "bn_baseline": "BN-Baseline (dropout)", "bn_baseline_nodropout": "BN-Baseline without dropout",
        },
    ),
)  # fmt: skip

SECTIONS: dict[str, Section] = {s.anchor: s for study in STUDIES for s in study.sections}


def study(name: str) -> Study:
    """The registry's record of the study ``name``."""
    return next(s for s in STUDIES if s.name == name)


def study_of(anchor: str) -> Study:
    """The study a section belongs to."""
    return next(study for study in STUDIES if any(s.anchor == anchor for s in study.sections))
