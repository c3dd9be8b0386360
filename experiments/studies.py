"""The study registry: one light record per study (no torch import), read by the report, the
claims table, the figures, ``scripts.reproduce`` (and so the Makefile) and the tests. A study's
record names its result sections (a results folder, the reproduction that writes it, its figures
with captions), the human names of its setups, and its reproductions: the canonical sweeps (the
training processes, their setups, seeds and data), how they are collected and plotted.

Adding a study: a module in ``experiments/``, its config folder ``configs/<name>/`` and one
:class:`Study` entry below; the report gives it a section, ``make help`` and ``scripts.reproduce``
list its reproductions, and its claims can link to it by the section's anchor.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from experiments.papers import BN_FIG1, BN_FIG3, BRN_RESULTS


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
    reproduction: str  # the reproduction that writes it (make <reproduction>)
    figures: tuple[Figure, ...] = ()


@dataclass(frozen=True)
class Job:
    """One training process, ``python -m experiments.<module> <args>``: one run (seeds side by
    side where ``seed`` is a list) or, with ``sweep``, Hydra's ``-m`` over the comma lists in
    ``args``, run one after another in the process."""

    name: str  # its folder under the reproduction's run folder; a reused setup's name
    args: tuple[str, ...]
    sweep: bool = False
    estimate_s: float = 60.0  # wall seconds on one core of the 2-core AMD EPYC: the longest first


@dataclass(frozen=True)
class Reuse:
    """Setups taken from an earlier collection (``scripts.collect --reuse``) rather than run."""

    folder: str  # under results/
    setups: tuple[str, ...]  # their jobs are named after them and are left out


@dataclass(frozen=True)
class Collect:
    """``python -m scripts.collect <module> RUNS --out results/<out> ...``."""

    out: str
    sweep: bool = False  # one row per run (a hyperparameter sweep)
    curves: str | None = None  # with sweep: every run's curves, under results/
    curve_metrics: tuple[str, ...] = ()
    reuse: Reuse | None = None
    metrics: tuple[str, ...] = ()  # without sweep: the metric prefixes runs.csv keeps (all: ())


@dataclass(frozen=True)
class Reproduction:
    """``make <name>`` = ``python -m scripts.reproduce <name>``: the data, the jobs (JOBS at a
    time, the longest first), the collection, the figures, the wall time. ``stages`` run one
    after another; ``between`` (``module:function``) turns a finished stage's folder into
    overrides for the next. A reproduction without jobs runs its ``members``."""

    name: str
    help: str
    module: str = ""  # experiments.<module>; the study's own by default
    data: tuple[str, ...] = ()
    stages: tuple[tuple[Job, ...], ...] = ()
    between: str | None = None
    collect: Collect | None = None
    plots: tuple[tuple[str, ...], ...] = ()  # python -m scripts.<plot> <args>
    members: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # reproductions collected first when run together
    requires: tuple[str, ...] = ()  # settings the command line must give (e.g. data.root)
    distributed: bool = False  # each job under torchrun, one at a time (--nproc GPUs)
    seeds: tuple[int, ...] = ()  # a confirmatory reproduction's seeds, fixed before it ran
    # the most seeds a setup this CPU affords for it, where fewer than the claims' default (a
    # row whose power calculation asks for more runs underpowered, and says so); None: the default
    most_seeds: int | None = None


@dataclass(frozen=True)
class Style:
    """How a setup is drawn in its study's figures: colour, matplotlib line style, and its name in
    a legend where that is not its table label (shorter, where the panel's title says the rest)."""

    color: str
    line: str
    legend: str = ""


@dataclass(frozen=True)
class Study:
    """A study's one record: its results, its setups, its reproductions, how its runs are
    collected, and how it is smoke-tested.

    Args:
        name: its module, ``python -m experiments.<name>``, where it has one of its own.
        title: its heading in the report, the claims table and ``results/README.md``.
        sections: its results folders (or files), each a heading of the report.
        labels: setup → its name in tables, in the order tables and figures list them.
        trains: it has a training module, ``experiments/<name>.py``, and ``configs/<name>/``.
        reproductions: its ``make`` targets.
        claims: the modules of ``scripts/claims/`` with claims on its results.
        styles: setup → how its figures draw it.
        order: the setups in the order its collections list them, where that is not ``labels``'
            (setups of other studies' labels among them; others follow, sorted).
        split_by: a summary key whose values get one output folder each (``data``), or None.
        setup_keys: summary keys that describe a setup (copied from its first run).
        stat_keys: summary keys averaged over seeds (mean, spread, per seed).
        summary_keys: summary keys of the whole collection (copied from the first run).
        sweep_keys: the columns of a ``--sweep`` collection (default: the settings that differ).
        sweep_accuracy: the column of a ``--sweep`` collection holding a run's final test accuracy.
        paper: the paper's numbers (:mod:`experiments.papers`), stored beside ours.
        extend: the collection's hook, ``"module:function"``, called as
            ``function(summary, runs, out)`` to add the study's own numbers and files; named, not
            imported, so the analysis stays out of the training module.
        smoke: the overrides of its ``make smoke`` run beyond ``debug=quick`` (a ``data=`` among
            them; default: its first reproduction's first dataset and its default setup).
    """

    name: str
    title: str
    sections: tuple[Section, ...]
    labels: dict[str, str] = field(default_factory=dict)
    trains: bool = True
    reproductions: tuple[Reproduction, ...] = ()
    claims: tuple[str, ...] = ()
    styles: dict[str, Style] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    split_by: str | None = None
    setup_keys: tuple[str, ...] = ()
    stat_keys: tuple[str, ...] = ("test_acc", "max_test_acc", "train_acc")
    summary_keys: tuple[str, ...] = ("data", "steps", "git_commit")
    sweep_keys: tuple[str, ...] = ()
    sweep_accuracy: str = "test_acc"
    paper: dict[str, Any] = field(default_factory=dict)
    extend: str | None = None
    smoke: tuple[str, ...] = ()

    @property
    def setups(self) -> tuple[str, ...]:
        """The setups in the order its collections list them."""
        return self.order or tuple(self.labels)

    def rank(self, setup: str) -> tuple[int, str]:
        """A sort key: the setups in :attr:`setups` order, the others after them, sorted."""
        order = self.setups
        return (order.index(setup) if setup in order else len(order), setup)

    def legend(self, setup: str) -> str:
        """The setup's name in a figure's legend."""
        return self.styles[setup].legend or self.labels[setup]

    def extend_hook(self) -> Callable[[dict, list, Path], None] | None:
        if self.extend is None:
            return None
        module, _, function = self.extend.partition(":")
        return getattr(importlib.import_module(module), function)

    def smoke_overrides(self) -> tuple[str, ...]:
        """What ``make smoke`` adds to ``debug=quick``: :attr:`smoke`, with a ``data=`` taken from
        its first reproduction where :attr:`smoke` names none."""
        if any(o.startswith("data=") for o in self.smoke):
            return self.smoke
        data = next((r.data[0] for r in self.reproductions if r.data), "mnist")
        return (f"data={data}", *self.smoke)


def _seeds(seeds: tuple[int, ...]) -> str:
    return f"seed=[{','.join(map(str, seeds))}]"


# The most seeds of a confirmatory batch that one job (one process) trains
SEEDS_PER_JOB = 10


def in_jobs(seeds: tuple[int, ...]) -> int:
    """How many jobs ``seeds`` run as, each of at most :data:`SEEDS_PER_JOB`."""
    return -(-len(seeds) // SEEDS_PER_JOB)


def _parts(seeds: tuple[int, ...], parts: int) -> list[tuple[int, ...]]:
    """``seeds`` cut into ``parts`` runs of consecutive seeds, as even as they divide."""
    size, extra = divmod(len(seeds), parts)
    cuts = [i * size + min(i, extra) for i in range(parts + 1)]
    return [seeds[a:b] for a, b in pairwise(cuts) if b > a]


def _named(prefix: str, setup: str, i: int, parts: int) -> str:
    return f"{prefix}{setup}" if parts == 1 else f"{prefix}{setup}/part{i}"


def seeds_side_by_side(
    setups: tuple[str, ...],
    seeds: tuple[int, ...],
    per_seed_s: float,
    *args: str,
    prefix: str = "",
    parts: int = 1,
) -> tuple[Job, ...]:
    """A job per setup (``parts`` per setup, each a run of its seeds), its seeds side by side in
    one process."""
    return tuple(
        Job(
            _named(prefix, s, i, parts),
            (f"setup={s}", _seeds(chunk), *args),
            estimate_s=per_seed_s * len(chunk),
        )
        for s in setups
        for i, chunk in enumerate(_parts(seeds, parts))
    )


def seeds_one_by_one(
    setups: tuple[str, ...], seeds: tuple[int, ...], per_run_s: float, *args: str, parts: int = 1
) -> tuple[Job, ...]:
    """A job per setup (``parts`` per setup), its seeds one after another (a Hydra sweep in one
    process)."""
    return tuple(
        Job(
            _named("", s, i, parts),
            (f"setup={s}", f"seed={','.join(map(str, chunk))}", *args),
            sweep=True,
            estimate_s=per_run_s * len(chunk),
        )
        for s in setups
        for i, chunk in enumerate(_parts(seeds, parts))
    )


def _mnist_fig1(name: str, data: str, out: str) -> Reproduction:
    return Reproduction(
        name,
        f"BN paper Fig. 1 on {data}: baseline and BN, 3 seeds side by side, 50k steps; results/{out}/",
        data=(data,),
        stages=(seeds_side_by_side(("baseline", "bn"), (0, 1, 2), 32, f"data={data}"),),
        collect=Collect(out),
        plots=(("plot_mnist", data),),
    )


def _mnist_sweep(
    name: str, help: str, out: str, key: str, values: str, steps: int, per_run_s: float
) -> Reproduction:
    return Reproduction(
        name,
        help,
        data=("mnist",),
        stages=(
            tuple(
                Job(
                    s,
                    (f"setup={s}", f"{key}={values}", f"train.steps={steps}"),
                    sweep=True,
                    estimate_s=per_run_s * len(values.split(",")),
                )
                for s in ("baseline", "bn")
            ),
        ),
        collect=Collect(out, sweep=True),
        plots=(("plot_mnist",),),
    )


SEEDS5 = (0, 1, 2, 3, 4)  # the renorm study's Fashion-MNIST seeds, whose runs the questions reuse
RENORM_LABELS = {
    "bn32": "BN, minibatch 32",
    "brn32": "Batch Renorm, minibatch 32",
    "bn_micro4": "BN, microbatch 4",
    "brn_micro4": "Batch Renorm, microbatch 4",
    "noniid_bn": "BN, non-i.i.d. (16 labels × 2)",
    "noniid_bn_halves": "BN on two halves, non-i.i.d.",
    "noniid_brn": "Batch Renorm, non-i.i.d. (16 labels × 2)",
    "noniid8_bn": "BN, non-i.i.d. (4 labels × 8)",
    "noniid8_brn": "Batch Renorm, non-i.i.d. (4 labels × 8)",
    "noniid4_bn": "BN, non-i.i.d. (8 labels × 4)",
    "noniid4_brn": "Batch Renorm, non-i.i.d. (8 labels × 4)",
    "noniid16_bn": "BN, non-i.i.d. (2 labels × 16)",
    "noniid16_brn": "Batch Renorm, non-i.i.d. (2 labels × 16)",
    "groupnorm": "GroupNorm",
    "layernorm": "LayerNorm",
    "brn_micro4_jump": "Batch Renorm, microbatch 4, no ramp",
}
RENORM_SETUPS = tuple(RENORM_LABELS)
# Batch Renorm's moving-average rate α at microbatch 4 (brn_micro4 is the paper's 0.01), and the
# arm without the r_max/d_max ramp, each evaluated with its moving averages and with population
# statistics, and its every step's loss kept (scripts/claims/brn_paper.py, the α block).
ALPHA_LABELS = {
    "brn_micro4_alpha_slow": "Batch Renorm, microbatch 4, α = 0.001",
    "brn_micro4_alpha_fast": "Batch Renorm, microbatch 4, α = 0.1",
}
ALPHA_SETUPS = ("brn_micro4_alpha_slow", "brn_micro4", "brn_micro4_alpha_fast", "brn_micro4_jump")
# Algorithm 2 over 100 training batches of 32 (800 microbatches of 4) at every evaluation
ALPHA_MEASURES = ("eval.population_batches=100", "eval.step_losses=true")
# The non-i.i.d. sampler's doses: examples per drawn label → the setups of BN and of Batch Renorm
# (minibatches of 32: 16 labels x 2 as in the paper, 8 x 4, 4 x 8, 2 x 16).
NONIID_DOSES = {
    2: ("noniid_bn", "noniid_brn"),
    4: ("noniid4_bn", "noniid4_brn"),
    8: ("noniid8_bn", "noniid8_brn"),
    16: ("noniid16_bn", "noniid16_brn"),
}
INCEPTION_VARIANTS = (
    "inception",
    "bn_baseline",
    "bn_x5",
    "bn_x30",
    "bn_x5_sigmoid",
    "inception_sigmoid",
)
# Figure 3's controls, which its claims read: the paper's (Inception at BN-x5's learning rate) and
# BN-Baseline with only BN-x5's learning rate (how much of BN-x5's speed-up the rate alone gives).
# Inception at x30 is no control of a claim (the paper reports only the x5 run without BN): it is
# an exploratory arm of the learning-rate sweep below.
INCEPTION_CONTROLS = ("inception_x5", "bn_baseline_x5")
# Exploratory arms beside them: Inception's learning rate swept (x1, x2, x5; and BN-x30's x30)
# and BN-x5's decay speed-up ablated (6, the recipe's; 2; 1).
INCEPTION_ABLATIONS = ("inception_x2", "inception_x30", "bn_x5_decay1", "bn_x5_decay2")
# The ablations' references, run beside them on the same pilot seeds and protocol, so the sweep
# (does 0.0015 use Inception's best rate, the paper's premise?) and the decay ablation are read
# against arms of their own data orders. Exploratory context beside Figure 3's rows, never their
# rules, protocol or seed counts, all committed before any of these arms ran.
INCEPTION_ABLATION_REFERENCES = ("inception", "inception_x5", "bn_x5")
# Inception's 20k-step protocol at CPU scale: a test subset every 100 steps, stop at a plateau of
# 0.3 pp over the last third (from step 3,000), cap 8,000 steps.
CONVERGED = (
    "train.steps=8000",
    "eval.every=100",
    "eval.test_subset=2000",
    "eval.train_subset=0",
    "train.stop.plateau=0.003",
    "train.stop.min_steps=3000",
)
# Figure 3 measured so it can decide (the confirmatory protocol): every arm until its own plateau
# under one rule (the last third of the run gained less than 0.3 pp, checked from step 1,000) or
# the cap; evaluated on 5,000 fixed test images every 100 steps. The decay interval keeps both of
# the paper's schedule facts: Inception's learning rate is about 0.02x its start at its plateau
# (the paper's at 31M steps; here 0.96^100 = 0.017x at 16,000 steps), and BN-x5's, decaying 6x as
# often (every 27 steps), is about 0.2x when it reaches Inception's level (the paper's at 2.1M;
# here 0.22x at 1,000 steps, where the pilot's BN-x5 passed 82%). A decay every 80 steps broke the
# second: on the pilot seeds BN-x5 froze at 80.0% and 79.9% (0.045x its rate by step 1,000),
# below Inception's 82.2% and 84.3% at that schedule's cap of 8,000, where Inception was still
# climbing (exploratory runs at d38c09a). The cap lets Inception plateau: by the rule a curve that
# stops rising at step P ends at about 1.5P, and its rate is 0.0006x by 32,000 steps.
FIG3_PLATEAU = 0.003  # the plateau rule of every arm: the last third gains less than this
FIG3_SCHEDULE = (
    "train.steps=32000",
    "train.lr_decay_every=160",
    "eval.every=100",
    "eval.test_subset=5000",
    "eval.train_subset=0",
)
# The arms that stop early, about step 4,000: the recipe's 6x faster decay, and the sigmoid network
# without BN, flat at chance (the pilot's plateaus). The others train to about 24,000 steps. The
# estimates order the jobs, longest first (seconds on a 2-core Xeon, 0.13 s a step).
FIG3_SHORT_ARMS = ("bn_x5", "bn_x30", "bn_x5_sigmoid", "inception_sigmoid")


def fig3_estimate_s(arm: str) -> int:
    """A Figure 3 protocol job's estimated seconds: short arms stop early (FIG3_SHORT_ARMS)."""
    return 600 if arm in FIG3_SHORT_ARMS else 3100


FIG3_MIN_STEPS = 1000  # the plateau rule's first check (a run flat at chance stops at a check)
FIG3 = (
    *FIG3_SCHEDULE,
    f"train.stop.plateau={FIG3_PLATEAU}",
    f"train.stop.min_steps={FIG3_MIN_STEPS}",
)
# The batch-size study: the examples g each BN (or Batch Renorm) layer normalizes over inside the
# gradient's minibatch of 32 -> the setup (microbatch g; g = 32 is the whole minibatch), and the
# per-example norms, the same at every g. Every BN run also evaluated with Precise BN, example
# weighting and in training mode on test batches of g (eval.inference_modes).
SIZE_GROUPS = (2, 4, 8, 16, 32)
SIZE_BN = {g: "bn32" if g == 32 else f"bn_micro{g}" for g in SIZE_GROUPS}
# Batch Renorm at g = 2, 4, 32 only (its setups brn_micro8 and brn_micro16 exist): the grid of all
# twelve arms costs about 40 core-minutes, over the pilot's 30, and Batch Renorm's row reads g = 2
# and 32 alone.
SIZE_BRN = {g: "brn32" if g == 32 else f"brn_micro{g}" for g in (2, 4, 32)}
SIZE_PER_EXAMPLE = ("groupnorm", "layernorm")
SIZE_SETUPS = (*SIZE_BN.values(), *SIZE_BRN.values(), *SIZE_PER_EXAMPLE)
SIZE_ARGS = ("data=fashion_mnist", "eval.inference_modes=true")
SMALL_DATA = 10_000  # the batch-size study's small-data repeat: the first N training images
# Initial learning rates a half-decade apart, from where both conv nets train to where the one
# without BN cannot (the Batch Renorm study's own rate is 0.05).
LR_GRID = "0.01,0.03,0.1,0.3,1"
# The same question for the two MLPs on MNIST, rates a half-decade apart. The Figure 1 MLP
# (sigmoid): from 0.01, where the one-seed sweep of `make sweep-lr` has the network without BN at
# 53% after 10k steps and BN at 91%, past 3, where that sweep's network without BN still trains,
# to 10; its 10k steps are that sweep's. The mechanism study's ReLU MLP: from 0.01 past its own
# rate, 0.1, and 1.0, where its network without BN diverges in 50k steps, to 3; 5,000 steps, its
# probes cut to one batch and one example (measurements only, read by no row here). Both pilots are
# cut to what about 25 core-minutes afford, beside the other jobs of this 2-core machine.
LR_GRID_MLP = "0.01,0.03,0.1,0.3,1,3,10"
LR_MLP_RUN = ("train.steps=10000", "eval.every=1000")
LR_GRID_RELU = "0.01,0.03,0.1,0.3,1,3"
LR_RELU_RUN = (
    "train.steps=5000", "eval.every=5000", "probe.batches=1", "probe.jacobian_examples=1",
    "probe.etas=[1.0]",
)  # fmt: skip
# The batch's composition (BN paper Sec. 4.2.1, "shuffle training examples more thoroughly"): the
# Figure 1 MLP with and without BN, its batches reshuffled every epoch or cut once and kept.
COMPOSITION_LABELS = {
    "baseline": "no BN, reshuffled batches",
    "baseline_fixed": "no BN, fixed batches",
    "bn": "BN, reshuffled batches",
    "bn_fixed": "BN, fixed batches",
}
# Normalizing outside the gradient (BN paper Sec. 2): the Figure 1 MLP, each hidden layer's bias
# kept before its norm, 10,000 steps (the parameters' growth shows within them), the norms of the
# weights and biases at every one of 100 evaluations.
OUTSIDE_GRADIENT_LABELS = {
    "bn_bias": "BN",
    "bn_detached": "BN, μ_B and σ_B outside the gradient",
    "bn_moving": "normalized by the moving averages",
    "center_detached": "x − E[x], E[x] outside the gradient",
}
OUTSIDE_GRADIENT = ("train.steps=10000", "eval.every=100", "probe.param_norms=true")
# Training BatchNorm and only BatchNorm (Frankle, Schwab & Morcos 2021, arXiv:2003.00152): each
# network with every parameter trained, only BN's γ and β, as many random weights per unit of the
# layers before the norms (2 a unit), or only the output layer (experiments/kit/trainable.py).
# The conv net of the renorm study with γ learnable (batch 32, 3,000 steps, its rate and decay);
# the Figure 1 MLP with BN on MNIST (its rate, 10,000 steps).
BN_ONLY_CONV = {
    "bn32_gamma": "conv net: all parameters",
    "bn32_trained_norm": "conv net: only γ and β",
    "bn32_trained_random": "conv net: 2 random weights a channel",
    "bn32_trained_output": "conv net: only the output layer",
}
BN_ONLY_MLP = {
    "bn": "MLP: all parameters",
    "bn_trained_norm": "MLP: only γ and β",
    "bn_trained_random": "MLP: 2 random weights a unit",
    "bn_trained_output": "MLP: only the output layer",
}
BN_ONLY_MLP_RUN = ("data=mnist", "train.steps=10000")
BN_ONLY_METRICS = ("test/acc", "train/loss", "gamma/")
# the arms the confirmatory rows read: γ and β alone, and the random control
BN_ONLY_READ = {"conv": ("bn32_trained_norm", "bn32_trained_random"), "mlp": ("bn_trained_norm", "bn_trained_random")}  # fmt: skip
# The depth x learning-rate grid (Yang et al. 2019, arXiv:1902.08129): the depth study's ReLU
# networks of 2 to 64 layers, with BN and without, at initial rates a half-decade apart from 0.01,
# the rate of reproduce-depth, at which every depth with and without BN lowered its loss within
# 100 steps, to 10, past plain SGD's equivalent of the rates at which the conv net stopped
# training with momentum 0.9 (what_bn_buys: 0.3 to 1, x10). 1,000 steps (an epoch of MNIST's
# batches of 60), evaluated every 250 steps on the first 2,000 test images.
DEPTH_LR_GRID = "0.01,0.03,0.1,0.3,1,3,10"
DEPTH_LR_STEPS, DEPTH_LR_EVERY, DEPTH_LR_TEST = 1000, 250, 2000
DEPTH_LR_RUN = (
    "model.activation=relu", f"train.steps={DEPTH_LR_STEPS}", f"eval.every={DEPTH_LR_EVERY}",
    f"eval.test_examples={DEPTH_LR_TEST}",
)  # fmt: skip
DEPTH_LR_SETUPS = ("deep_mlp", "deep_mlp_bn")
SMALL_SCALES = (
    "0.001,0.00162,0.00264,0.00428,0.00695,0.0113,0.0183,0.0298,0.0483,0.0785,0.127,"
    "0.207,0.336,0.546,0.886,1.44,2.34,3.79,6.16,10"
)


# Confirmatory seeds. Their numbers come from the power calculation over each study's pilot
# (python -m scripts.claims --design; scripts/claims/claim.py: design, seeds_to_run), and were
# committed here, in a commit of their own, before any of them ran; ids from 1000, disjoint from
# every pilot's. Reproductions that share runs (collect --reuse) share one count. The claims
# decided on them read results/confirmatory/, laid out as results/.
CONFIRMATORY = "confirmatory"
FIRST_CONFIRMATORY_SEED = 1000


def confirmatory_seeds(n: int) -> tuple[int, ...]:
    return tuple(range(FIRST_CONFIRMATORY_SEED, FIRST_CONFIRMATORY_SEED + n))


CONFIRM_MNIST = confirmatory_seeds(15)  # the Figure 1 networks on MNIST
CONFIRM_FASHION = confirmatory_seeds(60)  # BN in the Figure 1 network on Fashion-MNIST
CONFIRM_CONV = confirmatory_seeds(50)  # the renorm study's conv net, and its questions' arms
CONFIRM_MLP = confirmatory_seeds(49)  # the Figure 1 MLP's placement and non-Gaussianity arms
CONFIRM_MECHANISM = confirmatory_seeds(28)  # the mechanism study's sigmoid MLPs
# BN-Inception runs to its plateau cost minutes to an hour each: ten seeds of every confirmatory
# arm is what this 2-core CPU affords (about 41 core-hours by fig3_estimate_s, 21 h at two jobs);
# rows needing more are underpowered.
INCEPTION_AFFORDABLE = 10
CONFIRM_INCEPTION = confirmatory_seeds(10)  # every arm of BN-Inception's Figure 3 protocol
CONFIRM_SIZE = confirmatory_seeds(60)  # the batch-size study: every arm over g
# the batch-size study on 10,000 training images: BN over 8, 16 and 32, the arms its rows read
CONFIRM_SMALL = confirmatory_seeds(60)
SMALL_READ = ("bn_micro8", "bn_micro16", "bn32")
CONFIRM_LR = confirmatory_seeds(60)  # the conv net with and without BN across learning rates
CONFIRM_NORMS = confirmatory_seeds(60)  # the normalizers study: WN, ℓ1 and ℓ∞ BN against BN
# the Figure 1 MLP, batches reshuffled or fixed, on MNIST and on Fashion-MNIST
CONFIRM_COMPOSITION = {"mnist": confirmatory_seeds(27), "fashion_mnist": confirmatory_seeds(60)}
CONFIRM_OUTSIDE = confirmatory_seeds(26)  # the Figure 1 MLP normalized outside the gradient
# depth x learning rate: its rows are yes/no per seed (every seed must show the property)
CONFIRM_DEPTH_LR = confirmatory_seeds(5)
CONFIRM_ALPHA = confirmatory_seeds(37)  # Batch Renorm's α and ramp rows (brn_micro4, no ramp)
CONFIRM_BN_ONLY = {
    "conv": confirmatory_seeds(7),
    "mlp": confirmatory_seeds(60),
}  # the BN-only rows (the MLP capped: one needs 90)
# The initial rates the learning-rate control's confirmatory rows read, fixed by its pilot
# (scripts/claims/what_bn_buys.py: the shared rate, 0.1, and each network's best, 0.01 and 0.1;
# a test holds them to what the pilot gives).
LR_READ = {"bn32": "0.01,0.1", "nonorm": "0.1"}
CONFIRM_LR_MLP = confirmatory_seeds(7)  # the Figure 1 MLP with and without BN across learning rates
CONFIRM_LR_RELU = confirmatory_seeds(17)  # the mechanism study's ReLU MLP, the same
# The learning-rate control's rows that read the whole grid (the largest rate at which each seed
# trains, and the Figure 1 MLP's smallest rate): the pilot's grid again, on fresh seeds (the
# confirmatory seeds above run only the rates their rows read).
CONFIRM_LR_GRID = confirmatory_seeds(5)  # the conv net's and the ReLU MLP's every-seed rows
CONFIRM_LR_GRID_MLP = confirmatory_seeds(60)  # the Figure 1 MLP's: also its smallest rate's test
# The rates the MLPs' confirmatory rows read, fixed by their pilots (scripts/claims/
# what_bn_buys_mlp.py; a test holds them to what the pilots give). The Figure 1 MLP: the shared
# rate, 3, BN's best, 3, and no BN's best, 1. The ReLU MLP: the shared rate, 1, BN's best, 1, and
# no BN's best, 0.3.
LR_READ_MLP = {"bn": "3", "baseline": "1,3"}
LR_READ_RELU = {"mech_relu_bn": "1", "mech_relu_baseline": "0.3,1"}


@dataclass(frozen=True)
class LRControl:
    """One network's learning-rate control: its setups with BN and without, the grid its pilot
    sweeps, the run's other arguments, how a job names its seeds (side by side, or one after
    another) and the wall seconds of one seed at one rate."""

    setups: tuple[str, str]
    grid: str
    run: tuple[str, ...]
    seeds_arg: Callable[[tuple[int, ...]], str]
    seed_rate_s: float

    def jobs(self, seeds: tuple[int, ...], rates: dict[str, str] | None = None, chunked: bool = False) -> tuple[Job, ...]:  # fmt: skip
        """Each setup at its ``rates`` (comma lists; the whole grid by default) over ``seeds``: a
        job a setup, or with ``chunked`` a job a setup and part of at most SEEDS_PER_JOB seeds."""
        parts = _parts(seeds, in_jobs(seeds)) if chunked else [seeds]
        return tuple(
            Job(f"{s}_{i}" if chunked else s, (f"setup={s}", self.seeds_arg(part), f"train.lr={r}", *self.run), sweep=True,
                estimate_s=self.seed_rate_s * len(part) * len(r.split(",")))
            for s, r in (rates or dict.fromkeys(self.setups, self.grid)).items() for i, part in enumerate(parts)
        )  # fmt: skip


LR_CONV = LRControl(("bn32", "nonorm"), LR_GRID, ("data=fashion_mnist",), _seeds, 40)
LR_MLP = LRControl(("bn", "baseline"), LR_GRID_MLP, LR_MLP_RUN, _seeds, 12)
LR_RELU = LRControl(
    ("mech_relu_bn", "mech_relu_baseline"), LR_GRID_RELU, LR_RELU_RUN, lambda seeds: f"seed={','.join(map(str, seeds))}", 15
)  # fmt: skip
# The metrics the confirmatory claims read from the MLPs' curves (their runs.csv would otherwise
# hold every probe of every evaluation of every seed: tens of MB); the summaries keep everything.
MECHANISM_CLAIMED = (
    "test/acc", "train/loss", "shift/population/layer3/", "shift/moving/layer3/",
    "shift/train_mode/layer3/", "grad_ics/layer4/", "landscape/", "jacobian_normalized/",
)  # fmt: skip
MLP_CLAIMED = ("test/acc", "train/loss", "nongauss/")
# The Batch Renorm paper's non-i.i.d. protocol on 1,000 classes (experiments/kit/triples.py):
# the renorm study's setups and conv net on MNIST triples (grayscale, as the study's scale reads
# MNIST), its last average pooling one column per item (global pooling cannot tell which item is
# where: a triple's class is ordered). Twice the study's run (6,000 steps, 3.2 epochs of the
# triples, its decay to the same final rate), evaluated every 1,500: the paper compares trained
# networks, and a 1,500-step pilot (commit 9a5e22b) stopped while every arm was still learning, so
# it measured how fast each learns, not where it ends. The doses stop at 8 examples per label:
# the test triples hold 10 per class, and the training-mode evaluation draws its minibatches from
# them like the training ones.
TRIPLES_DATA = "mnist_triples"
TRIPLES_DOSES = {k: v for k, v in NONIID_DOSES.items() if k <= 8}
TRIPLES_SETUPS = ("bn32", "brn32", "noniid_bn", "noniid_bn_halves", "noniid_brn", "noniid4_bn", "noniid8_bn")  # fmt: skip
TRIPLES_STEPS = 6000
TRIPLES_SEED_S = 72  # a seed's run, side by side, two jobs at a time on 2 cores (the pilot's)
TRIPLES_RUN = (
    f"data={TRIPLES_DATA}", "model.pool_columns=3", f"train.steps={TRIPLES_STEPS}",
    f"train.lr_decay_every={TRIPLES_STEPS // 6}", f"eval.every={TRIPLES_STEPS // 4}",
)  # fmt: skip
CONFIRM_TRIPLES = confirmatory_seeds(10)  # the rows on 1,000 classes: the dose-response needs 10
# the setups the confirmatory rows read
CONFIRM_TRIPLES_SETUPS = ("bn32", "noniid_bn", "noniid_brn", "noniid4_bn", "noniid8_bn")
# The BN-Inception family on the same triples (its head one pooled column per item), Figure 2's
# four arms: does Inception plateau later and lower than the BN variants there? Not on Figure 3's
# schedule as it then was (decay every 80 steps, 8,000): the recipe's 6x faster decay puts
# BN-x5's rate at 0.96^76 = 0.045x its start by step 1,000, where an exploratory run of it (at
# 89a5587) was still at chance (0.56% against 0.1%), like Inception and BN-Baseline at their
# 0.0015; the paper's BN-x5 reached Inception's maximum in 1/15 of Inception's run, at about 0.2x
# its rate. Here the decay is stretched to the task: BN-x5 and BN-x30 decay every 60 steps, so
# they end at 0.96^100 = 0.017x, the fraction Figure 3's Inception ends at, while Inception and
# BN-Baseline (every 360) end at 0.96^16 = 0.52x, still unannealed. Both halves of the paper's
# schedule cannot fit a 6,000-step run on a 1,000-class task; this keeps the BN variants' and
# reports Inception's as unfinished.
INCEPTION_TRIPLES_ARMS = ("inception", "bn_baseline", "bn_x5", "bn_x30")
INCEPTION_TRIPLES_DECAY = 360  # steps between decays of Inception's schedule (the x6 arms: 60)
INCEPTION_TRIPLES = (
    f"data={TRIPLES_DATA}", "model.pool_columns=3", f"train.steps={TRIPLES_STEPS}",
    f"train.lr_decay_every={INCEPTION_TRIPLES_DECAY}", "eval.every=200", "eval.test_subset=5000",
    "eval.train_subset=0",
)  # fmt: skip
# The normalizers study: the renorm study's conv net with each normalizer in BN's place, every
# normalizer at one initial learning rate: BN's best of the learning-rate control's pilot
# (scripts/claims/what_bn_buys.py: best_rate; a test holds it to that pilot). At the renorm
# study's 0.05, weight norm with the data-dependent initialization dies in every seed: its g,
# set to 1/σ of each unit's output (up to about 10 in the hidden layer), multiplies SGD's step on
# the direction v by (g/‖v‖)², so the ReLUs after it are all off within a few dozen steps.
NORMS_LR = "0.01"
NORMALIZER_LABELS = {
    "bn32": "BN", "weightnorm": "weight norm", "wn_meanonly": "weight norm + mean-only BN",
    "l1bn32": "ℓ1 BN", "linfbn32": "ℓ∞ BN",
}  # fmt: skip
# the setups its confirmatory rows read (weight norm + mean-only BN is a reported comparison)
CONFIRM_NORMS_SETUPS = ("bn32", "weightnorm", "l1bn32", "linfbn32")
NORMALIZERS_CLAIMED = ("test/acc", "train/acc", "train/loss")
# the conv-net setups the confirmatory claims read (the questions' arms have their own reproductions)
CONFIRM_CONV_SETUPS = (
    "bn32", "brn32", "bn_micro4", "brn_micro4", "brn_micro4_jump", "noniid_bn", "noniid4_bn",
    "noniid8_bn", "noniid16_bn", "noniid8_brn", "groupnorm", "layernorm",
)  # fmt: skip


def _composition(data: str, seeds: tuple[int, ...], confirm: bool = False) -> Reproduction:
    out = f"{CONFIRMATORY + '/' if confirm else ''}batch_composition/{data}"
    name = f"{'confirm-' if confirm else ''}batch-composition-{data.replace('_', '-')}"
    return Reproduction(
        name,
        f"{'confirmatory seeds of ' if confirm else ''}the Figure 1 MLP on {data}, with and without BN, batches reshuffled every epoch or fixed, {len(seeds)} seeds side by side, 50k steps; results/{out}/",
        module="mnist",
        data=(data,),
        stages=(seeds_side_by_side(tuple(COMPOSITION_LABELS), seeds, 32, f"data={data}", parts=in_jobs(seeds)),),
        collect=Collect(out, metrics=("test/acc", "train/loss") if confirm else ()),
        plots=(("plot_batch",),),
        seeds=seeds if confirm else (),
    )  # fmt: skip


def _bn_only(net: str, seeds: tuple[int, ...], confirm: bool = False) -> Reproduction:
    out = f"{CONFIRMATORY + '/' if confirm else ''}bn_only/{net}"
    conv = net == "conv"
    setups = BN_ONLY_READ[net] if confirm else tuple(BN_ONLY_CONV if conv else BN_ONLY_MLP)
    args = ("data=fashion_mnist",) if conv else BN_ONLY_MLP_RUN
    what = "the renorm study's conv net (γ learnable), Fashion-MNIST, 3,000 steps" if conv else "the Figure 1 MLP with BN, MNIST, 10k steps"  # fmt: skip
    return Reproduction(
        f"{'confirm-' if confirm else ''}bn-only-{net}",
        f"{'confirmatory seeds of ' if confirm else ''}{what}: {', '.join(setups)}, {len(seeds)} seeds side by side; results/{out}/",
        module="renorm" if conv else "mnist",
        data=("fashion_mnist" if conv else "mnist",),
        stages=(seeds_side_by_side(setups, seeds, 40 if conv else 25, *args, parts=in_jobs(seeds)),),
        collect=Collect(out, metrics=BN_ONLY_METRICS),
        plots=(("plot_bn_only",),),
        seeds=seeds if confirm else (),
    )  # fmt: skip


def _init_scale_small(data: str) -> Reproduction:
    out = "questions/init_scale_small"
    return Reproduction(
        f"question-init-scale-small-{data}",
        f"open question 5 on {data}",
        module="mnist",
        data=(data,),
        stages=(
            tuple(
                Job(
                    s,
                    (
                        f"data={data}",
                        f"setup={s}",
                        "seed=[0,1,2]",
                        "train.subset=1000",
                        "train.steps=340",
                        "eval.every=17",
                        "population.num_batches=16",
                        f"model.init_std={SMALL_SCALES}",
                    ),
                    sweep=True,
                    estimate_s=60,
                )
                for s in ("baseline", "bn")
            ),
        ),
        collect=Collect(
            f"{out}/{data}.csv",
            sweep=True,
            curves=f"{out}/{data}_curves.csv",
            curve_metrics=("test/acc", "train/acc_subset", "train/loss"),
        ),
    )


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
            Section("mnist-confirmatory", f"Confirmatory seeds: MNIST ({len(CONFIRM_MNIST)} seeds)", f"{CONFIRMATORY}/mnist/mnist", "confirm-mnist"),
            Section("fashion-mnist-confirmatory", f"Confirmatory seeds: BN on Fashion-MNIST ({len(CONFIRM_FASHION)} seeds)", f"{CONFIRMATORY}/mnist/fashion_mnist", "confirm-fashion-mnist"),
        ),
        FIG1,
        claims=("bn_paper",),
        styles={"baseline": Style("#4c72b0", "-", "Without BN"), "bn": Style("#dd8452", "-", "With BN")},
        stat_keys=("test_acc", "train_acc", "test_acc_population", "test_acc_population_no_bessel", "final_train_loss", "steps_per_s"),
        summary_keys=("data", "steps", "lr", "init_std", "git_commit"),
        sweep_keys=("setup", "seed", "lr", "init_std", "steps", "diverged", "test_acc", "train_acc", "final_train_loss"),
        paper=BN_FIG1,
        smoke=("setup=baseline,bn", "seed=[0,1]"),
        reproductions=(
            _mnist_fig1("reproduce-mnist", "mnist", "mnist/mnist"),
            _mnist_fig1("reproduce-fashion-mnist", "fashion_mnist", "mnist/fashion_mnist"),
            Reproduction(
                "confirm-mnist", f"confirmatory seeds of BN paper Fig. 1 on MNIST: {len(CONFIRM_MNIST)} seeds; results/confirmatory/mnist/mnist/",
                data=("mnist",),
                stages=(seeds_side_by_side(("baseline", "bn"), CONFIRM_MNIST, 16, "data=mnist", parts=2),),
                collect=Collect(f"{CONFIRMATORY}/mnist/mnist"), seeds=CONFIRM_MNIST,
            ),
            Reproduction(
                "confirm-fashion-mnist", f"confirmatory seeds of BN on Fashion-MNIST (Fig. 1's network): {len(CONFIRM_FASHION)} seeds; results/confirmatory/mnist/fashion_mnist/",
                data=("fashion_mnist",),
                stages=(seeds_side_by_side(("bn",), CONFIRM_FASHION, 16, "data=fashion_mnist", parts=2),),
                collect=Collect(f"{CONFIRMATORY}/mnist/fashion_mnist"), seeds=CONFIRM_FASHION,
            ),
            _mnist_sweep("sweep-lr", "learning-rate sweep, both networks, 10k steps; results/mnist/lr_sweep.csv",
                         "mnist/lr_sweep.csv", "train.lr", "0.01,0.03,0.1,0.3,1,3", 10000, 12),
            _mnist_sweep("sweep-init-scale", "weight-init-scale sweep, 1e-3..10, both networks, 5k steps; results/mnist/init_scale_sweep.csv",
                         "mnist/init_scale_sweep.csv", "model.init_std",
                         "0.001,0.00316,0.01,0.0316,0.1,0.316,1,3.16,10", 5000, 8),
        ),
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
            Section("renorm-confirmatory", f"Confirmatory seeds: Fashion-MNIST ({len(CONFIRM_CONV)} seeds)", f"{CONFIRMATORY}/renorm/fashion_mnist", "confirm-renorm"),
            Section(
                "renorm-alpha", "Batch Renorm's α and the ramp's loss spikes (microbatch 4, Fashion-MNIST, 5 seeds)",
                "renorm_alpha/fashion_mnist", "renorm-alpha",
                (Figure("renorm_alpha.png", "Batch Renorm at microbatch 4: (a) test accuracy with the moving averages against population statistics for α = 0.001, 0.01, 0.1; (b) per-interval mean and largest per-step loss, and (c) largest jump over the recent median, with and without the r_max/d_max ramp"),),
            ),
            Section("renorm-alpha-confirmatory", f"Confirmatory seeds: Batch Renorm's α and ramp ({len(CONFIRM_ALPHA)} seeds)", f"{CONFIRMATORY}/renorm_alpha/fashion_mnist", "confirm-renorm-alpha"),
            Section(
                "renorm-mnist", "MNIST", "renorm/mnist", "reproduce-renorm",
                (
                    Figure("renorm_fig1_mnist.png", "Figure 1's setups on MNIST"),
                    Figure("renorm_fig2_mnist.png", "Non-i.i.d. minibatches on MNIST"),
                    Figure("renorm_clipping_mnist.png", "Clipping of r and d on MNIST"),
                ),
            ),
        ),
        {**RENORM_LABELS, **ALPHA_LABELS},
        claims=("brn_paper",),
        styles={
            "bn32": Style("#4c72b0", "-"),
            "brn32": Style("#dd8452", "-"),
            "bn_micro4": Style("#4c72b0", "--"),
            "brn_micro4": Style("#dd8452", "--"),
            "brn_micro4_jump": Style("#c44e52", ":"),
            "brn_micro4_alpha_slow": Style("#8c564b", "--", "α = 0.001"),
            "brn_micro4_alpha_fast": Style("#e377c2", "--", "α = 0.1"),
            "groupnorm": Style("#55a868", "-.", "GroupNorm (per example)"),
            "layernorm": Style("#8172b3", "-.", "LayerNorm (per example)"),
            "noniid_bn": Style("#4c72b0", "-", "BN"),
            "noniid_bn_halves": Style("#55a868", "-", "BN on two halves"),
            "noniid_brn": Style("#dd8452", "-", "Batch Renorm"),
            "noniid8_bn": Style("#4c72b0", "-", "BN"),
            "noniid8_brn": Style("#dd8452", "-", "Batch Renorm"),
            "noniid4_bn": Style("#4c72b0", "-", "BN"),
            "noniid4_brn": Style("#dd8452", "-", "Batch Renorm"),
            "noniid16_bn": Style("#4c72b0", "-", "BN"),
            "noniid16_brn": Style("#dd8452", "-", "Batch Renorm"),
        },
        # the questions' arms on this network beside those they vary
        order=(*RENORM_SETUPS[:4], "bn_micro4_rgrad", "brn_micro4_bngrad", *RENORM_SETUPS[4:], "bn32_after", "nonorm"),
        split_by="data",
        setup_keys=("norm", "microbatch", "sampler"),
        stat_keys=("test_acc", "max_test_acc", "train_acc", "test_acc_train_mode", "steps_per_s", "test_acc_population_no_bessel"),
        summary_keys=("data", "model", "steps", "git_commit"),
        paper=BRN_RESULTS,
        smoke=("data=fashion_mnist", "setup=bn32,brn_micro4", "seed=[0,1]"),
        reproductions=(
            # Fashion-MNIST is the informative set (5 seeds, for intervals); MNIST, where every
            # setup is within a point of the others, keeps 2. A job per setup and dataset, its
            # seeds side by side (experiments/nets/stacked.py).
            Reproduction(
                "reproduce-renorm", "Batch Renorm Figs. 1-2, CPU scale: 16 setups x (5 seeds Fashion-MNIST, 2 MNIST); results/renorm/",
                data=("mnist", "fashion_mnist"),
                stages=(
                    seeds_side_by_side(RENORM_SETUPS, SEEDS5, 30, "data=fashion_mnist", prefix="fashion_mnist/")
                    + seeds_side_by_side(RENORM_SETUPS, (0, 1), 30, "data=mnist", prefix="mnist/"),
                ),
                collect=Collect("renorm"), plots=(("plot_renorm",),),
            ),
            Reproduction(
                "confirm-renorm", f"confirmatory seeds of the Batch Renorm claims: {len(CONFIRM_CONV_SETUPS)} setups x {len(CONFIRM_CONV)} seeds, Fashion-MNIST; results/confirmatory/renorm/",
                data=("fashion_mnist",),
                stages=(seeds_side_by_side(CONFIRM_CONV_SETUPS, CONFIRM_CONV, 20, "data=fashion_mnist", prefix="fashion_mnist/"),),
                collect=Collect(f"{CONFIRMATORY}/renorm"), seeds=CONFIRM_CONV,
            ),
            Reproduction(
                "renorm-alpha", "Batch Renorm's α (0.001, 0.01, 0.1) and the ramp's loss spikes at microbatch 4: 4 setups x 5 seeds side by side, population statistics and every step's loss; results/renorm_alpha/",
                data=("fashion_mnist",),
                stages=(seeds_side_by_side(ALPHA_SETUPS, SEEDS5, 40, "data=fashion_mnist", *ALPHA_MEASURES),),
                collect=Collect("renorm_alpha"), plots=(("plot_renorm_alpha",),),
            ),
            Reproduction(
                "confirm-renorm-alpha", f"confirmatory seeds of Batch Renorm's α and ramp rows: brn_micro4 and its no-ramp arm x {len(CONFIRM_ALPHA)} seeds; results/confirmatory/renorm_alpha/",
                data=("fashion_mnist",),
                stages=(seeds_side_by_side(("brn_micro4", "brn_micro4_jump"), CONFIRM_ALPHA, 40, "data=fashion_mnist", *ALPHA_MEASURES),),
                collect=Collect(f"{CONFIRMATORY}/renorm_alpha"), plots=(("plot_renorm_alpha",),), seeds=CONFIRM_ALPHA,
            ),
        ),
    ),
    Study(
        "inception",
        "BN paper Figures 2–3: BN-Inception variants (reduced setting)",
        (
            Section(
                "inception-converged", "The paper's converged protocol (Fashion-MNIST, 32 px)",
                "inception/fashion_mnist_converged", "reproduce-inception-converged",
                (
                    Figure("inception_fig2_fashion_mnist_converged.png", "Figure 2: test-subset accuracy of every variant until it plateaus, reaches Inception's maximum or the cap"),
                    Figure("inception_fig3_curve.png", "Figure 3 as the claims decide it: each variant's speed-up over Inception at every target with its 95% interval, and every arm's maximum, the pilot beside the confirmatory seeds"),
                ),
            ),
            Section(
                "inception-confirmatory", f"Confirmatory seeds: Figure 3 to every arm's plateau ({len(CONFIRM_INCEPTION)} seeds)",
                f"{CONFIRMATORY}/inception/fashion_mnist_converged", "confirm-inception",
            ),
            Section(
                "inception-ablations", "Figure 3's exploratory arms: Inception's learning rate, BN-x5's decay (2 seeds)",
                "inception/fashion_mnist_ablations", "reproduce-inception-ablations",
            ),
            Section(
                "inception-cpu", "A fixed budget of 3,000 steps", "inception/fashion_mnist_cpu", "reproduce-inception-cpu",
                (Figure("inception_fig2_fashion_mnist_cpu.png", "Figure 2 at a fixed budget"),),
            ),
            Section(
                "inception-triples", f"On 1,000 classes: MNIST triples, {TRIPLES_STEPS:,} steps (2 seeds)",
                "inception/mnist_triples", "reproduce-inception-triples",
                (Figure("inception_fig2_mnist_triples.png", f"Figure 2 on 1,000 classes: each arm's test-subset accuracy over {TRIPLES_STEPS:,} steps"),),
            ),
        ),
        {
            "inception": "Inception", "bn_baseline": "BN-Baseline", "bn_x5": "BN-x5", "bn_x30": "BN-x30",
            "bn_x5_sigmoid": "BN-x5-Sigmoid", "inception_sigmoid": "Inception with sigmoid (no BN)",
            "inception_x2": "Inception, learning rate x2", "inception_x5": "Inception, learning rate x5",
            "inception_x30": "Inception, learning rate x30", "bn_baseline_x5": "BN-Baseline, learning rate x5",
            "bn_x5_decay1": "BN-x5, decay at Inception's speed", "bn_x5_decay2": "BN-x5, decay 2x faster",
        },
        claims=("bn_paper",),
        styles={
            "inception": Style("#4c4c4c", "-"),
            "bn_baseline": Style("#4c72b0", "-"),
            "bn_x5": Style("#dd8452", "-"),
            "bn_x30": Style("#c44e52", "-"),
            "bn_x5_sigmoid": Style("#55a868", "--"),
            "inception_sigmoid": Style("#8172b3", ":", "Inception-Sigmoid (no BN)"),
            "inception_x2": Style("#4c4c4c", "--"),
            "inception_x5": Style("#4c4c4c", ":"),
            "inception_x30": Style("#4c4c4c", "-."),
            "bn_baseline_x5": Style("#4c72b0", "--"),
            "bn_x5_decay1": Style("#dd8452", ":"),
            "bn_x5_decay2": Style("#dd8452", "--"),
        },
        order=(*BN_FIG3["setups"], *INCEPTION_CONTROLS, *INCEPTION_ABLATIONS),
        setup_keys=("norm", "activation", "weight_decay", "lr_decay_every", "photometric"),
        stat_keys=("max_test_acc", "test_acc", "examples_per_s"),
        summary_keys=("data", "width", "steps", "global_batch", "git_commit"),
        paper=BN_FIG3,
        extend="experiments.inception_fig3:extend",
        smoke=("data=fashion_mnist", "setup=bn_x5"),
        reproductions=(
            Reproduction(
                "reproduce-inception-cpu", "BN paper Figs. 2-3, CPU scale: 6 variants on Fashion-MNIST 32 px, 3,000 steps; results/inception/fashion_mnist_cpu/",
                data=("fashion_mnist",),
                stages=(tuple(Job(v, (f"setup={v}",), estimate_s=480) for v in INCEPTION_VARIANTS),),
                collect=Collect("inception/fashion_mnist_cpu"), plots=(("plot_inception",),),
            ),
            # The paper's protocol (Sec. 4.2.2) at CPU scale: Inception trains until it plateaus;
            # every other variant trains until it reaches the lowest of Inception's seeds' best
            # evaluations, plateaus by the same rule, or hits the cap (its target:
            # scripts/analysis/steps_to_target.py). Figure 3's claims read it as their pilot.
            Reproduction(
                "reproduce-inception-converged", "BN paper Figs. 2-3, the paper's converged protocol at CPU scale; results/inception/fashion_mnist_converged/",
                data=("fashion_mnist",),
                stages=(
                    tuple(Job(f"inception/seed{s}", ("setup=inception", f"seed={s}", *CONVERGED), estimate_s=2400)
                          for s in (0, 1)),
                    tuple(Job(f"variants/{v}_seed{s}", (f"setup={v}", f"seed={s}", *CONVERGED), estimate_s=1200)
                          for v, s in (("bn_baseline", 0), ("bn_baseline", 1), ("bn_x5_sigmoid", 0),
                                       ("inception_sigmoid", 0), ("bn_x5", 0), ("bn_x5", 1), ("bn_x30", 0), ("bn_x30", 1))),
                ),
                between="experiments.inception_fig3:stop_at_target",
                collect=Collect("inception/fashion_mnist_converged"), plots=(("plot_inception",),),
            ),
            # Figure 3 decided (scripts/claims/bn_paper.py): every arm and control to its own
            # plateau under one rule, the seeds fixed by the power calculation before they ran.
            Reproduction(
                "confirm-inception", f"confirmatory seeds of BN paper Fig. 3 at CPU scale: {len(INCEPTION_VARIANTS) + len(INCEPTION_CONTROLS)} arms x {len(CONFIRM_INCEPTION)} seeds to their plateaus; results/confirmatory/inception/fashion_mnist_converged/",
                data=("fashion_mnist",),
                stages=(tuple(Job(f"{v}/seed{s}", (f"setup={v}", f"seed={s}", *FIG3), estimate_s=fig3_estimate_s(v))
                              for v in (*INCEPTION_VARIANTS, *INCEPTION_CONTROLS) for s in CONFIRM_INCEPTION),),
                collect=Collect(f"{CONFIRMATORY}/inception/fashion_mnist_converged"), plots=(("plot_inception",),),
                seeds=CONFIRM_INCEPTION, most_seeds=INCEPTION_AFFORDABLE,
            ),
            # The BN-Inception family on 1,000 classes, its decay stretched to the task (no claim reads it).
            Reproduction(
                "reproduce-inception-triples", f"BN-Inception on 1,000 classes: {len(INCEPTION_TRIPLES_ARMS)} arms x 2 seeds on MNIST triples, {TRIPLES_STEPS:,} steps each; results/inception/mnist_triples/",
                data=("mnist",),
                stages=(tuple(Job(f"{v}/seed{s}", (f"setup={v}", f"seed={s}", *INCEPTION_TRIPLES), estimate_s=1600)
                              for v in INCEPTION_TRIPLES_ARMS for s in (0, 1)),),
                collect=Collect("inception/mnist_triples"), plots=(("plot_inception",),),
            ),
            # The same protocol's exploratory arms (no claim reads them): two seeds each.
            Reproduction(
                "reproduce-inception-ablations", "Figure 3's exploratory arms at CPU scale: Inception's learning rate x1, x2, x5 and x30, BN-x5's decay 1x, 2x and 6x (the recipe's) as fast, 2 seeds each; results/inception/fashion_mnist_ablations/",
                data=("fashion_mnist",),
                stages=(tuple(Job(f"{v}/seed{s}", (f"setup={v}", f"seed={s}", *FIG3), estimate_s=fig3_estimate_s(v))
                              for v in (*INCEPTION_ABLATION_REFERENCES, *INCEPTION_ABLATIONS) for s in (0, 1)),),
                collect=Collect("inception/fashion_mnist_ablations"), plots=(("plot_inception",),),
            ),
            Reproduction(
                "reproduce-inception", "BN paper Figs. 2-3, GPU scale: 6 variants on an image folder (data.root=DIR with train/ and val/; --nproc GPUs); results/inception/imagenet_subset_gpu/",
                stages=(tuple(Job(v, (f"setup={v}", "scale=gpu"), estimate_s=86400) for v in INCEPTION_VARIANTS),),
                collect=Collect("inception/imagenet_subset_gpu"), plots=(("plot_inception",),),
                requires=("data.root",), distributed=True,
            ),
        ),
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
                    Figure("mechanism_jacobian.png", "The Jacobian between consecutive normalized pre-activations (BN with population statistics, the baseline standardized): its median singular value, distance from an isometry and the correlation between the normalized units, over training"),
                    Figure("mechanism_weights.png", "Weight norms and relative updates, with and without weight decay"),
                ),
            ),
            Section("mechanism-confirmatory", f"Confirmatory seeds: no BN, BN, noisy BN ({len(CONFIRM_MECHANISM)} seeds)", f"{CONFIRMATORY}/mechanism/mlp", "confirm-mechanism"),
        ),
        {
            "mech_baseline": "no BN", "mech_bn": "BN", "mech_noisy_bn": "noisy BN",
            "mech_bn_wd1e-4": "BN, L2 1e-4", "mech_bn_wd1e-3": "BN, L2 1e-3",
            "mech_relu_baseline": "ReLU, no BN", "mech_relu_bn": "ReLU, BN",
        },
        claims=("mechanism",),
        setup_keys=("activation", "norm", "noise", "weight_decay"),
        stat_keys=("test_acc", "max_test_acc", "final_train_loss"),
        summary_keys=("data", "steps", "lr", "git_commit"),
        extend="experiments.mechanism_results:extend_results",
        smoke=("setup=mech_baseline,mech_bn",),
        reproductions=(
            # Baseline, BN and noisy BN with 5 seeds; BN with L2 and the ReLU MLP with 3 (lr 0.1:
            # the ReLU baseline diverges at 1.0); measured every 1,000 steps.
            Reproduction(
                "reproduce-mechanism", "ICS three ways, gradient ICS, landscape, Jacobians, weight norms (the Fig. 1 networks, 27 runs); results/mechanism/mlp/",
                data=("mnist",),
                stages=(
                    seeds_one_by_one(("mech_baseline", "mech_bn", "mech_noisy_bn"), SEEDS5, 72, "eval.every=1000")
                    + seeds_one_by_one(("mech_bn_wd1e-4", "mech_bn_wd1e-3", "mech_relu_baseline", "mech_relu_bn"),
                                  (0, 1, 2), 72, "eval.every=1000"),
                ),
                collect=Collect("mechanism/mlp"), plots=(("plot_mechanism",),),
            ),
            Reproduction(
                "confirm-mechanism", f"confirmatory seeds of the mechanism claims: no BN, BN, noisy BN x {len(CONFIRM_MECHANISM)} seeds; results/confirmatory/mechanism/mlp/",
                data=("mnist",),
                stages=(seeds_one_by_one(("mech_baseline", "mech_bn", "mech_noisy_bn"), CONFIRM_MECHANISM, 30, "eval.every=1000", parts=2),),
                collect=Collect(f"{CONFIRMATORY}/mechanism/mlp", metrics=MECHANISM_CLAIMED), seeds=CONFIRM_MECHANISM,
            ),
        ),
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
        claims=("mechanism",),
        setup_keys=("norm", "activation", "depth"),
        stat_keys=("grad_ratio_init", "grad_ratio", "fixed_batch_loss"),
        summary_keys=("data", "steps", "lr", "batch_size", "git_commit"),
        # a sweep's row per run (depth-lr): one depth, one rate, one seed
        sweep_keys=(
            "setup", "seed", "norm.kind", "train.lr", "depth", "steps_done", "diverged", "diverged_at_step",
            "test_acc_subset", "final_train_loss", "grad_ratio_init", "grad_ratio",
        ),
        smoke=("setup=deep_mlp,deep_mlp_bn",),
        reproductions=(
            # Yang et al. 2019: the first/last gradient-norm ratio of width-100 MLPs of depth 2..64
            # at initialization and after 1, 10, 100 SGD steps, 3 seeds.
            Reproduction(
                "reproduce-depth", "gradients across depth at init, with and without BN; results/mechanism/depth/",
                data=("mnist",),
                stages=(tuple(
                    Job(f"{s}_{a}", (f"setup={s}", f"model.activation={a}", "seed=0,1,2"), sweep=True, estimate_s=260)
                    for s in ("deep_mlp", "deep_mlp_bn") for a in ("sigmoid", "relu", "linear")
                ),),
                collect=Collect("mechanism/depth"), plots=(("plot_depth",),),
            ),
        ),
    ),
    Study(
        "what_bn_buys",
        "What BN buys: BN and no BN across learning rates (Bjorck et al. 2018)",
        (
            Section(
                "lr-control", "The conv net with and without BN across learning rates (pilot, 5 seeds)",
                "what_bn_buys/lr_control/fashion_mnist.csv", "lr-control",
                (Figure("what_bn_buys_lr.png", "Final test accuracy against the initial learning rate, with and without BN; crosses: diverged runs"),),
            ),
            Section(
                "lr-control-confirmatory", f"Confirmatory seeds: the learning-rate control ({len(CONFIRM_LR)} seeds)",
                f"{CONFIRMATORY}/what_bn_buys/lr_control/fashion_mnist.csv", "confirm-lr-control",
            ),
            Section(
                "lr-control-mlp", "The Figure 1 MLP (sigmoid, MNIST) with and without BN across learning rates (pilot, 5 seeds)",
                "what_bn_buys/mlp/mnist.csv", "lr-control-mlp",
                (Figure("what_bn_buys_mlps.png", "Final test accuracy of the two MLPs against the initial learning rate, with and without BN: the Figure 1 sigmoid MLP and the mechanism study's ReLU MLP; crosses: diverged runs"),),
            ),
            Section("lr-control-relu", "The mechanism study's ReLU MLP (MNIST) with and without BN across learning rates (pilot, 5 seeds)", "what_bn_buys/relu/mnist.csv", "lr-control-relu"),
            Section(
                "lr-control-mlp-confirmatory", f"Confirmatory seeds: the Figure 1 MLP across learning rates ({len(CONFIRM_LR_MLP)} seeds)",
                f"{CONFIRMATORY}/what_bn_buys/mlp/mnist.csv", "confirm-lr-control-mlp",
            ),
            Section(
                "lr-control-relu-confirmatory", f"Confirmatory seeds: the ReLU MLP across learning rates ({len(CONFIRM_LR_RELU)} seeds)",
                f"{CONFIRMATORY}/what_bn_buys/relu/mnist.csv", "confirm-lr-control-relu",
            ),
            Section(
                "lr-grid-confirmatory", f"Confirmatory seeds over the whole grid: the conv net ({len(CONFIRM_LR_GRID)} seeds)",
                f"{CONFIRMATORY}/what_bn_buys/lr_control_grid/fashion_mnist.csv", "confirm-lr-grid",
            ),
            Section(
                "lr-grid-mlp-confirmatory", f"Confirmatory seeds over the whole grid: the Figure 1 MLP ({len(CONFIRM_LR_GRID_MLP)} seeds)",
                f"{CONFIRMATORY}/what_bn_buys/mlp_grid/mnist.csv", "confirm-lr-grid-mlp",
            ),
            Section(
                "lr-grid-relu-confirmatory", f"Confirmatory seeds over the whole grid: the ReLU MLP ({len(CONFIRM_LR_GRID)} seeds)",
                f"{CONFIRMATORY}/what_bn_buys/relu_grid/mnist.csv", "confirm-lr-grid-relu",
            ),
        ),
        {
            "bn32": "BN", "nonorm": "no BN", "bn": "BN (sigmoid MLP)", "baseline": "no BN (sigmoid MLP)",
            "mech_relu_bn": "BN (ReLU MLP)", "mech_relu_baseline": "no BN (ReLU MLP)",
        },
        trains=False,  # the renorm study's conv net, the mnist and mechanism studies' MLPs
        claims=("what_bn_buys", "what_bn_buys_mlp"),
        styles={
            "bn32": Style("#dd8452", "-", "With BN"), "nonorm": Style("#4c72b0", "-", "Without BN"),
            "bn": Style("#dd8452", "-", "With BN"), "baseline": Style("#4c72b0", "-", "Without BN"),
            "mech_relu_bn": Style("#dd8452", "-", "With BN"), "mech_relu_baseline": Style("#4c72b0", "-", "Without BN"),
        },
        reproductions=(
            # Bjorck et al. (2018): is BN better at a learning rate both networks can use, or does
            # it "primarily enable training with larger learning rates"? The conv net of the
            # Batch Renorm study (batch 32, 3,000 steps, its decay), BN against no BN, over a grid
            # of initial rates a half-decade apart that spans where the network without BN fails.
            Reproduction(
                "lr-control", f"BN and no BN in the conv net across initial learning rates {', '.join(LR_GRID.split(','))}, 5 seeds side by side (pilot); results/what_bn_buys/lr_control/",
                module="renorm", data=("fashion_mnist",),
                stages=(LR_CONV.jobs(SEEDS5),),
                collect=Collect(
                    "what_bn_buys/lr_control/fashion_mnist.csv", sweep=True,
                    curves="what_bn_buys/lr_control/fashion_mnist_curves.csv", curve_metrics=("test/acc", "train/loss"),
                ),
                plots=(("plot_what_bn_buys",),),
            ),
            Reproduction(
                "confirm-lr-control", f"confirmatory seeds of the learning-rate control: BN and no BN x {len(CONFIRM_LR)} seeds at the rates the rows read; results/confirmatory/what_bn_buys/lr_control/",
                module="renorm", data=("fashion_mnist",),
                stages=(LR_CONV.jobs(CONFIRM_LR, LR_READ, chunked=True),),
                collect=Collect(
                    f"{CONFIRMATORY}/what_bn_buys/lr_control/fashion_mnist.csv", sweep=True,
                    curves=f"{CONFIRMATORY}/what_bn_buys/lr_control/fashion_mnist_curves.csv", curve_metrics=("test/acc", "train/loss"),
                ),
                plots=(("plot_what_bn_buys",),), seeds=CONFIRM_LR,
            ),
            # The same question for the two MLPs on MNIST (grids and budgets: LR_GRID_MLP, LR_GRID_RELU).
            Reproduction(
                "lr-control-mlp", f"BN and no BN in the Figure 1 MLP across initial learning rates {', '.join(LR_GRID_MLP.split(','))}, 5 seeds side by side, 10k steps (pilot); results/what_bn_buys/mlp/",
                module="mnist", data=("mnist",),
                stages=(LR_MLP.jobs(SEEDS5),),
                collect=Collect("what_bn_buys/mlp/mnist.csv", sweep=True), plots=(("plot_what_bn_buys",),),
            ),
            Reproduction(
                "lr-control-relu", f"BN and no BN in the mechanism study's ReLU MLP across initial learning rates {', '.join(LR_GRID_RELU.split(','))}, 5 seeds, 5,000 steps (pilot); results/what_bn_buys/relu/",
                module="mechanism", data=("mnist",),
                stages=(LR_RELU.jobs(SEEDS5),),
                collect=Collect("what_bn_buys/relu/mnist.csv", sweep=True), plots=(("plot_what_bn_buys",),),
            ),
            Reproduction(
                "confirm-lr-control-mlp", f"confirmatory seeds of the Figure 1 MLP across learning rates: BN and no BN x {len(CONFIRM_LR_MLP)} seeds at the rates the rows read; results/confirmatory/what_bn_buys/mlp/",
                module="mnist", data=("mnist",),
                stages=(LR_MLP.jobs(CONFIRM_LR_MLP, LR_READ_MLP, chunked=True),),
                collect=Collect(f"{CONFIRMATORY}/what_bn_buys/mlp/mnist.csv", sweep=True),
                plots=(("plot_what_bn_buys",),), seeds=CONFIRM_LR_MLP,
            ),
            Reproduction(
                "confirm-lr-control-relu", f"confirmatory seeds of the ReLU MLP across learning rates: BN and no BN x {len(CONFIRM_LR_RELU)} seeds at the rates the rows read; results/confirmatory/what_bn_buys/relu/",
                module="mechanism", data=("mnist",),
                stages=(LR_RELU.jobs(CONFIRM_LR_RELU, LR_READ_RELU, chunked=True),),
                collect=Collect(f"{CONFIRMATORY}/what_bn_buys/relu/mnist.csv", sweep=True),
                plots=(("plot_what_bn_buys",),), seeds=CONFIRM_LR_RELU,
            ),
            # The rows that read every rate of a grid, on fresh seeds: each pilot's jobs again.
            Reproduction(
                "confirm-lr-grid", f"confirmatory seeds of the conv net's every-seed row: BN and no BN x {len(CONFIRM_LR_GRID)} seeds over the whole grid; results/confirmatory/what_bn_buys/lr_control_grid/",
                module="renorm", data=("fashion_mnist",),
                stages=(LR_CONV.jobs(CONFIRM_LR_GRID),),
                collect=Collect(f"{CONFIRMATORY}/what_bn_buys/lr_control_grid/fashion_mnist.csv", sweep=True),
                seeds=CONFIRM_LR_GRID,
            ),
            Reproduction(
                "confirm-lr-grid-mlp", f"confirmatory seeds of the Figure 1 MLP's rows over the whole grid: BN and no BN x {len(CONFIRM_LR_GRID_MLP)} seeds; results/confirmatory/what_bn_buys/mlp_grid/",
                module="mnist", data=("mnist",),
                stages=(LR_MLP.jobs(CONFIRM_LR_GRID_MLP, chunked=True),),
                collect=Collect(f"{CONFIRMATORY}/what_bn_buys/mlp_grid/mnist.csv", sweep=True),
                seeds=CONFIRM_LR_GRID_MLP,
            ),
            Reproduction(
                "confirm-lr-grid-relu", f"confirmatory seeds of the ReLU MLP's every-seed row: BN and no BN x {len(CONFIRM_LR_GRID)} seeds over the whole grid; results/confirmatory/what_bn_buys/relu_grid/",
                module="mechanism", data=("mnist",),
                stages=(LR_RELU.jobs(CONFIRM_LR_GRID),),
                collect=Collect(f"{CONFIRMATORY}/what_bn_buys/relu_grid/mnist.csv", sweep=True),
                seeds=CONFIRM_LR_GRID,
            ),
        ),
    ),
    Study(
        "normalizers",
        "Other normalizers against BN: weight normalization, mean-only BN, ℓ1 and ℓ∞ BN",
        (
            Section(
                "normalizers", "The conv net with each normalizer (pilot, 5 seeds)", "normalizers/fashion_mnist", "normalizers",
                (Figure("normalizers.png", "Test accuracy over training, the early training loss and the final test accuracy of the conv net with each normalizer"),),
            ),
            Section("normalizers-confirmatory", f"Confirmatory seeds ({len(CONFIRM_NORMS)} seeds)", f"{CONFIRMATORY}/normalizers/fashion_mnist", "confirm-normalizers"),
        ),
        NORMALIZER_LABELS,
        trains=False,  # the renorm study's conv net and setups
        claims=("normalizers",),
        styles={
            "bn32": Style("#4c72b0", "-", "BN"), "weightnorm": Style("#dd8452", "--", "weight norm"),
            "wn_meanonly": Style("#c44e52", "-.", "weight norm + mean-only BN"),
            "l1bn32": Style("#55a868", ":", "ℓ1 BN"), "linfbn32": Style("#8172b3", ":", "ℓ∞ BN"),
        },
        stat_keys=("test_acc", "train_acc", "final_train_loss"),
        reproductions=(
            # Salimans & Kingma (2016), Gitman & Ginsburg (2017), Santurkar et al. (2018), Hoffer
            # et al. (2018): the renorm study's conv net (batch 32, 3,000 steps, its decay) with each
            # normalizer in BN's place, at initial rate NORMS_LR, seeds side by side in one process
            # per normalizer.
            Reproduction(
                "normalizers", f"the conv net with BN, weight norm, weight norm + mean-only BN, ℓ1 and ℓ∞ BN at initial rate {NORMS_LR}, 5 seeds side by side (pilot); results/normalizers/fashion_mnist/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(tuple(NORMALIZER_LABELS), SEEDS5, 40, "data=fashion_mnist", f"train.lr={NORMS_LR}"),),
                collect=Collect("normalizers", metrics=NORMALIZERS_CLAIMED),  # results/normalizers/<data>/: the renorm study splits by data
                plots=(("plot_normalizers",),),
            ),
            Reproduction(
                "confirm-normalizers", f"confirmatory seeds of the normalizers study: {len(CONFIRM_NORMS_SETUPS)} normalizers x {len(CONFIRM_NORMS)} seeds; results/confirmatory/normalizers/fashion_mnist/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(CONFIRM_NORMS_SETUPS, CONFIRM_NORMS, 40, "data=fashion_mnist", f"train.lr={NORMS_LR}", parts=in_jobs(CONFIRM_NORMS)),),
                collect=Collect(f"{CONFIRMATORY}/normalizers", metrics=NORMALIZERS_CLAIMED),
                plots=(("plot_normalizers",),), seeds=CONFIRM_NORMS,
            ),
        ),
    ),
    Study(
        "batch_composition",
        "The batch's composition: BN's regularization by its batch (BN paper Sec. 3.4, 4.2.1)",
        (
            Section(
                "composition", "MNIST: batches reshuffled every epoch or fixed (pilot, 5 seeds)", "batch_composition/mnist", "batch-composition-mnist",
                (Figure("batch_composition.png", "Final test accuracy with batches reshuffled every epoch and with each batch's composition fixed, without and with BN, on MNIST and Fashion-MNIST"),),
            ),
            Section("composition-fashion-mnist", "Fashion-MNIST: batches reshuffled every epoch or fixed (pilot, 5 seeds)", "batch_composition/fashion_mnist", "batch-composition-fashion-mnist"),
            Section("composition-confirmatory", f"Confirmatory seeds: MNIST ({len(CONFIRM_COMPOSITION['mnist'])} seeds)", f"{CONFIRMATORY}/batch_composition/mnist", "confirm-batch-composition-mnist"),
            Section("composition-fashion-mnist-confirmatory", f"Confirmatory seeds: Fashion-MNIST ({len(CONFIRM_COMPOSITION['fashion_mnist'])} seeds)", f"{CONFIRMATORY}/batch_composition/fashion_mnist", "confirm-batch-composition-fashion-mnist"),
        ),
        COMPOSITION_LABELS,
        trains=False,  # the Figure 1 MLP of experiments.mnist
        claims=("batch_composition",),
        styles={
            "baseline": Style("#4c72b0", "-", "No BN, reshuffled"), "baseline_fixed": Style("#4c72b0", "--", "No BN, fixed"),
            "bn": Style("#dd8452", "-", "BN, reshuffled"), "bn_fixed": Style("#dd8452", "--", "BN, fixed"),
        },
        stat_keys=("test_acc", "train_acc", "final_train_loss"),
        reproductions=(
            _composition("mnist", SEEDS5),
            _composition("fashion_mnist", SEEDS5),
            Reproduction(
                "batch-composition", "the batch's composition on MNIST and Fashion-MNIST (pilot); results/batch_composition/",
                members=("batch-composition-mnist", "batch-composition-fashion-mnist"),
            ),
            _composition("mnist", CONFIRM_COMPOSITION["mnist"], confirm=True),
            _composition("fashion_mnist", CONFIRM_COMPOSITION["fashion_mnist"], confirm=True),
        ),
    ),
    Study(
        "outside_gradient",
        "Normalizing outside the gradient (BN paper Sec. 2)",
        (
            Section(
                "outside-gradient", "The Figure 1 MLP normalized outside the gradient (pilot, 5 seeds)", "outside_gradient/mnist", "outside-gradient",
                (Figure("outside_gradient.png", "The norm of the hidden layers' weights and biases, the training loss and the test accuracy over training, BN against BN with its statistics outside the gradient"),),
            ),
            Section("outside-gradient-confirmatory", f"Confirmatory seeds ({len(CONFIRM_OUTSIDE)} seeds)", f"{CONFIRMATORY}/outside_gradient/mnist", "confirm-outside-gradient"),
        ),
        OUTSIDE_GRADIENT_LABELS,
        trains=False,  # the Figure 1 MLP of experiments.mnist
        claims=("outside_gradient",),
        styles={
            "bn_bias": Style("#dd8452", "-"), "bn_detached": Style("#c44e52", "--", "μ_B, σ_B detached"),
            "bn_moving": Style("#8172b3", "-.", "moving averages"), "center_detached": Style("#55a868", ":", "x − E[x] detached"),
        },
        stat_keys=("test_acc", "train_acc", "final_train_loss"),
        reproductions=(
            Reproduction(
                "outside-gradient", "the Figure 1 MLP with BN's statistics outside the gradient (detached, moving averages, the paper's centring), 5 seeds side by side, 10k steps; results/outside_gradient/mnist/",
                module="mnist", data=("mnist",),
                stages=(seeds_side_by_side(tuple(OUTSIDE_GRADIENT_LABELS), SEEDS5, 25, "data=mnist", *OUTSIDE_GRADIENT),),
                collect=Collect("outside_gradient/mnist", metrics=("test/acc", "train/loss", "params/")),
                plots=(("plot_batch",),),
            ),
            Reproduction(
                "confirm-outside-gradient", f"confirmatory seeds of normalizing outside the gradient: {len(CONFIRM_OUTSIDE)} seeds; results/confirmatory/outside_gradient/mnist/",
                module="mnist", data=("mnist",),
                stages=(seeds_side_by_side(tuple(OUTSIDE_GRADIENT_LABELS), CONFIRM_OUTSIDE, 25, "data=mnist", *OUTSIDE_GRADIENT),),
                collect=Collect(f"{CONFIRMATORY}/outside_gradient/mnist", metrics=("test/acc", "train/loss", "params/")),
                plots=(("plot_batch",),), seeds=CONFIRM_OUTSIDE,
            ),
        ),
    ),
    Study(
        "bn_only",
        "Training BatchNorm and only BatchNorm (Frankle, Schwab & Morcos 2021)",
        (
            Section(
                "bn-only-conv", "The conv net: all parameters, only γ and β, random weights, the output layer (pilot, 5 seeds)", "bn_only/conv/fashion_mnist", "bn-only-conv",
                (Figure("bn_only.png", "Final test accuracy of each arm of both networks, and |γ| / max |γ| of the trained γ and β alone"),),
            ),
            Section("bn-only-mlp", "The Figure 1 MLP: all parameters, only γ and β, random weights, the output layer (pilot, 5 seeds)", "bn_only/mlp", "bn-only-mlp"),
            Section("bn-only-conv-confirmatory", f"Confirmatory seeds: the conv net ({len(CONFIRM_BN_ONLY['conv'])} seeds)", f"{CONFIRMATORY}/bn_only/conv/fashion_mnist", "confirm-bn-only-conv"),
            Section("bn-only-mlp-confirmatory", f"Confirmatory seeds: the MLP ({len(CONFIRM_BN_ONLY['mlp'])} seeds)", f"{CONFIRMATORY}/bn_only/mlp", "confirm-bn-only-mlp"),
        ),
        {**BN_ONLY_CONV, **BN_ONLY_MLP},
        trains=False,  # the renorm study's conv net and the Figure 1 MLP of experiments.mnist
        claims=("bn_only",),
        styles={
            s: Style(c, "-", label.split(": ")[1])
            for arms in (BN_ONLY_CONV, BN_ONLY_MLP)
            for (s, label), c in zip(arms.items(), ("#4c72b0", "#dd8452", "#8c8c8c", "#55a868"))
        },
        reproductions=(
            _bn_only("conv", SEEDS5),
            _bn_only("mlp", SEEDS5),
            Reproduction(
                "bn-only", "training only BN's γ and β, both networks (pilot); results/bn_only/",
                members=("bn-only-conv", "bn-only-mlp"),
            ),
            _bn_only("conv", CONFIRM_BN_ONLY["conv"], confirm=True),
            _bn_only("mlp", CONFIRM_BN_ONLY["mlp"], confirm=True),
        ),
    ),
    Study(
        "triples",
        "Batch Renorm paper Sec. 4.3 on 1,000 classes: non-i.i.d. minibatches of MNIST triples",
        (
            Section(
                "triples", "16 labels × 2 over 1,000 classes (pilot, 5 seeds)", f"triples/{TRIPLES_DATA}", "reproduce-triples",
                (Figure("triples_noniid.png", "Non-i.i.d. minibatches over 1,000 classes: each arm's inference and training-mode accuracy, and the dose-response"),),
            ),
            Section(
                "triples-confirmatory", f"Confirmatory seeds: non-i.i.d. minibatches over 1,000 classes ({len(CONFIRM_TRIPLES)} seeds)",
                f"{CONFIRMATORY}/triples/{TRIPLES_DATA}", "confirm-triples",
            ),
        ),
        {s: RENORM_LABELS[s] for s in TRIPLES_SETUPS},
        trains=False,  # the renorm study's conv net and setups, on experiments.kit.triples' data
        claims=("triples",),
        styles={
            "bn32": Style("#4c72b0", ":", "BN, i.i.d."), "brn32": Style("#dd8452", ":", "Batch Renorm, i.i.d."),
            "noniid_bn": Style("#4c72b0", "-", "BN"), "noniid_bn_halves": Style("#55a868", "-", "BN on two halves"),
            "noniid_brn": Style("#dd8452", "-", "Batch Renorm"),
            "noniid4_bn": Style("#4c72b0", "-", "BN"), "noniid8_bn": Style("#4c72b0", "-", "BN"),
        },
        reproductions=(
            Reproduction(
                "reproduce-triples", f"Batch Renorm Sec. 4.3 on 1,000 classes: {len(TRIPLES_SETUPS)} setups x 5 seeds side by side on MNIST triples, {TRIPLES_STEPS:,} steps (pilot); results/triples/",
                module="renorm", data=("mnist",),
                stages=(seeds_side_by_side(TRIPLES_SETUPS, SEEDS5, TRIPLES_SEED_S, *TRIPLES_RUN),),
                collect=Collect("triples"), plots=(("plot_triples",),),
            ),
            Reproduction(
                "confirm-triples", f"confirmatory seeds of the non-i.i.d. claims on 1,000 classes: {len(CONFIRM_TRIPLES_SETUPS)} setups x {len(CONFIRM_TRIPLES)} seeds; results/confirmatory/triples/",
                module="renorm", data=("mnist",),
                stages=(seeds_side_by_side(CONFIRM_TRIPLES_SETUPS, CONFIRM_TRIPLES, TRIPLES_SEED_S, *TRIPLES_RUN, parts=in_jobs(CONFIRM_TRIPLES)),),
                collect=Collect(f"{CONFIRMATORY}/triples"), plots=(("plot_triples",),), seeds=CONFIRM_TRIPLES,
            ),
        ),
    ),
    Study(
        "batch_size",
        "The batch-size study: BN and Batch Renorm over normalization groups of 2 to 32, and how they are evaluated",
        (
            Section(
                "batch-size", "Normalization groups of 2 to 32 inside a gradient of 32 (pilot, 5 seeds)",
                "batch_size/fashion_mnist", "batch-size",
                (
                    Figure("batch_size_groups.png", "Final test accuracy against the normalization group g: BN and Batch Renorm under every evaluation (moving averages, Precise BN with and without Bessel's correction, example weighting, training mode on test batches of g), GroupNorm and LayerNorm; 95% t-intervals over seeds"),
                    Figure("batch_size_precise.png", "Precise BN against the moving averages over training, and Precise BN's accuracy against its sample count"),
                ),
            ),
            Section(
                "batch-size-confirmatory", f"Confirmatory seeds: normalization groups ({len(CONFIRM_SIZE)} seeds)",
                f"{CONFIRMATORY}/batch_size/fashion_mnist", "confirm-batch-size",
            ),
            Section(
                "batch-size-small-data", f"BN over groups of 2 to 32 on {SMALL_DATA:,} training images (pilot, 5 seeds)",
                "batch_size_small/fashion_mnist", "batch-size-small-data",
                (Figure("batch_size_small_data.png", f"BN over groups of g on the whole training set and on its first {SMALL_DATA:,} images: final test accuracy, and training minus test accuracy; 95% t-intervals over seeds"),),
            ),
            Section(
                "batch-size-small-data-confirmatory", f"Confirmatory seeds: {SMALL_DATA:,} training images ({len(CONFIRM_SMALL)} seeds)",
                f"{CONFIRMATORY}/batch_size_small/fashion_mnist", "confirm-batch-size-small-data",
            ),
        ),
        {
            **{v: f"BN, g = {g}" for g, v in SIZE_BN.items()},
            **{v: f"Batch Renorm, g = {g}" for g, v in SIZE_BRN.items()},
            "groupnorm": "GroupNorm", "layernorm": "LayerNorm",
        },
        trains=False,  # the renorm study's conv net
        claims=("batch_size",),
        styles={
            **{v: Style("#4c72b0", "-", "BN") for v in SIZE_BN.values()},
            **{v: Style("#dd8452", "-", "Batch Renorm") for v in SIZE_BRN.values()},
            "groupnorm": Style("#55a868", "-.", "GroupNorm"), "layernorm": Style("#8172b3", "-.", "LayerNorm"),
        },
        reproductions=(
            # Wu & He 2018, Ioffe 2017, Summers & Dinneen 2020, Wu & Johnson 2021: what the batch
            # does to BN. The renorm study's conv net (gradient over 32, 3,000 steps), BN and
            # Batch Renorm normalizing over groups of g inside it, each seed's data order shared.
            Reproduction(
                "batch-size", f"BN and Batch Renorm over normalization groups {', '.join(map(str, SIZE_GROUPS))}, GroupNorm, LayerNorm, every BN evaluated four ways, 5 seeds side by side (pilot); results/batch_size/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(SIZE_SETUPS, SEEDS5, 45, *SIZE_ARGS, prefix="fashion_mnist/"),),
                collect=Collect("batch_size"), plots=(("plot_batch_size",),),
            ),
            Reproduction(
                "batch-size-small-data", f"BN over normalization groups {', '.join(map(str, SIZE_GROUPS))} trained on the first {SMALL_DATA:,} training images (about ten epochs), 5 seeds side by side (pilot); results/batch_size_small/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(tuple(SIZE_BN.values()), SEEDS5, 30, "data=fashion_mnist", f"train.first_images={SMALL_DATA}", prefix="fashion_mnist/"),),
                collect=Collect("batch_size_small"), plots=(("plot_batch_size",),),
            ),
            Reproduction(
                "confirm-batch-size-small-data", f"confirmatory seeds of the batch-size rows on {SMALL_DATA:,} training images: BN over {', '.join(SMALL_READ)} x {len(CONFIRM_SMALL)} seeds; results/confirmatory/batch_size_small/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(SMALL_READ, CONFIRM_SMALL, 20, "data=fashion_mnist", f"train.first_images={SMALL_DATA}", prefix="fashion_mnist/", parts=in_jobs(CONFIRM_SMALL)),),
                collect=Collect(f"{CONFIRMATORY}/batch_size_small"), seeds=CONFIRM_SMALL,
            ),
            Reproduction(
                "confirm-batch-size", f"confirmatory seeds of the batch-size claims: {len(SIZE_SETUPS)} setups x {len(CONFIRM_SIZE)} seeds; results/confirmatory/batch_size/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(SIZE_SETUPS, CONFIRM_SIZE, 45, *SIZE_ARGS, prefix="fashion_mnist/", parts=in_jobs(CONFIRM_SIZE)),),
                collect=Collect(f"{CONFIRMATORY}/batch_size"), plots=(("plot_batch_size",),), seeds=CONFIRM_SIZE,
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
            Section("norm-position-confirmatory", f"Confirmatory seeds: BN before or after the ReLU ({len(CONFIRM_CONV)} seeds)", f"{CONFIRMATORY}/questions/norm_position/fashion_mnist", "confirm-norm-position-conv"),
            Section("mlp-questions-confirmatory", f"Confirmatory seeds: the Figure 1 MLP's placement and non-Gaussianity ({len(CONFIRM_MLP)} seeds)", f"{CONFIRMATORY}/questions/mlp", "confirm-mlp"),
            Section("brn-gradient-confirmatory", f"Confirmatory seeds: Batch Renorm's gradient ({len(CONFIRM_CONV)} seeds)", f"{CONFIRMATORY}/questions/brn_gradient/fashion_mnist", "confirm-brn-gradient"),
        ),
        {
            **FIG1, "bn32": "BN before the ReLU", "bn32_after": "BN after the ReLU", "nonorm": "no BN",
            "bn_micro4": "BN, microbatch 4", "brn_micro4": "Batch Renorm, microbatch 4",
            "bn_micro4_rgrad": "BN forward, r-scaled gradient", "brn_micro4_bngrad": "Batch Renorm forward, BN's gradient",
            "bn_x5": "BN-x5 (no dropout)", "bn_x5_dropout": "BN-x5 with dropout",
            "bn_baseline": "BN-Baseline (dropout)", "bn_baseline_nodropout": "BN-Baseline without dropout",
        },
        trains=False,  # the questions run the other studies' modules
        claims=("questions",),
        reproductions=(
            Reproduction(
                "question-mlp", "the Fig. 1 MLP: no BN, BN before, BN after the sigmoid, 5 seeds, non-Gaussianity probe; results/questions/mlp/",
                module="mnist", data=("mnist",),
                stages=(seeds_side_by_side(("baseline", "bn", "bn_after"), SEEDS5, 60, "probe.nongaussian=true"),),
                collect=Collect("questions/mlp"),
            ),
            Reproduction(
                "confirm-mlp", f"confirmatory seeds of the Fig. 1 MLP's questions (placement, non-Gaussianity): {len(CONFIRM_MLP)} seeds; results/confirmatory/questions/mlp/",
                module="mnist", data=("mnist",),
                stages=(seeds_side_by_side(("baseline", "bn", "bn_after"), CONFIRM_MLP, 30, "probe.nongaussian=true", parts=2),),
                collect=Collect(f"{CONFIRMATORY}/questions/mlp", metrics=MLP_CLAIMED), seeds=CONFIRM_MLP,
            ),
            Reproduction(
                "confirm-brn-gradient", f"confirmatory seeds of Batch Renorm's gradient question: 2 arms x {len(CONFIRM_CONV)} seeds, BN and BRN from confirm-renorm; results/confirmatory/questions/brn_gradient/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(("bn_micro4", "brn_micro4", "bn_micro4_rgrad", "brn_micro4_bngrad"), CONFIRM_CONV, 25, "data=fashion_mnist"),),
                collect=Collect(f"{CONFIRMATORY}/questions/brn_gradient", reuse=Reuse(f"{CONFIRMATORY}/renorm", ("bn_micro4", "brn_micro4"))),
                needs=("confirm-renorm",), seeds=CONFIRM_CONV,
            ),
            Reproduction(
                "confirm-norm-position-conv", f"confirmatory seeds of BN before or after the ReLU: BN after x {len(CONFIRM_CONV)} seeds, BN before from confirm-renorm; results/confirmatory/questions/norm_position/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(("bn32", "bn32_after"), CONFIRM_CONV, 20, "data=fashion_mnist"),),
                collect=Collect(f"{CONFIRMATORY}/questions/norm_position", reuse=Reuse(f"{CONFIRMATORY}/renorm", ("bn32",))),
                needs=("confirm-renorm",), seeds=CONFIRM_CONV,
            ),
            # The renorm study's conv net on Fashion-MNIST: the arms that are runs of the renorm
            # study (the same config and seeds, bit for bit) are taken from results/renorm.
            Reproduction(
                "question-brn-gradient", "is Batch Renorm's gain its gradient scaling? 2 new arms x 5 seeds, BN and BRN from results/renorm; results/questions/brn_gradient/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(("bn_micro4", "brn_micro4", "bn_micro4_rgrad", "brn_micro4_bngrad"),
                                      SEEDS5, 27, "data=fashion_mnist"),),
                collect=Collect("questions/brn_gradient", reuse=Reuse("renorm", ("bn_micro4", "brn_micro4"))),
                needs=("reproduce-renorm",),
            ),
            Reproduction(
                "question-norm-position-conv", "BN before or after the nonlinearity: the conv net, 2 new arms x 5 seeds, bn32 from results/renorm; results/questions/norm_position/",
                module="renorm", data=("fashion_mnist",),
                stages=(seeds_side_by_side(("bn32", "bn32_after", "nonorm"), SEEDS5, 23, "data=fashion_mnist"),),
                collect=Collect("questions/norm_position", reuse=Reuse("renorm", ("bn32",))),
                needs=("reproduce-renorm",),
            ),
            # the conv net's arms, and the Figure 1 MLP's (question-mlp's runs, shared with question 2)
            Reproduction(
                "question-norm-position", "BN before or after the nonlinearity: the conv net and the Figure 1 MLP (question-mlp)",
                members=("question-norm-position-conv", "question-mlp"),
            ),
            # BN-x5 and BN-Baseline with and without Inception's 40% dropout, BN-Inception at CPU
            # scale, 3,000 steps (BN-x5's learning rate has decayed to 1% by then), a test-set
            # evaluation every 500 steps (one costs as much as 70 training steps).
            Reproduction(
                "question-dropout", "dropout with BN: BN-x5 and BN-Baseline with/without, 5 seeds, 3,000 steps; results/questions/dropout/",
                module="inception", data=("fashion_mnist",),
                stages=(tuple(
                    Job(f"{v}_seed{s}", (f"setup={v}", f"seed={s}", "train.steps=3000", "eval.every=500"), estimate_s=480)
                    for v in ("bn_x5", "bn_x5_dropout", "bn_baseline", "bn_baseline_nodropout") for s in SEEDS5
                ),),
                collect=Collect("questions/dropout"),
            ),
            _init_scale_small("mnist"),
            _init_scale_small("fashion_mnist"),
            Reproduction(
                "question-init-scale-small", "open question 5: 1,000 images, 20 init scales, with/without BN, 3 seeds, MNIST and Fashion-MNIST; results/questions/init_scale_small/",
                members=("question-init-scale-small-mnist", "question-init-scale-small-fashion_mnist"),
            ),
            Reproduction(
                "question-nongaussianity", "non-Gaussianity of the sigmoid inputs: the runs of question-mlp",
                members=("question-mlp",),
            ),
            Reproduction(
                "reproduce-questions", "every open question and their figures; results/questions/",
                members=("question-mlp", "question-dropout", "question-brn-gradient", "question-norm-position",
                         "question-init-scale-small"),
                plots=(("plot_questions",),),
            ),
        ),
    ),
    Study(
        "depth_lr",
        "Trainable depth against the learning rate, with and without BN (Yang et al. 2019)",
        (
            Section(
                "depth-lr", "ReLU networks of 2 to 64 layers across learning rates (pilot, 5 seeds)",
                "mechanism/depth_lr/mnist.csv", "depth-lr",
                (Figure("depth_lr.png", "The fraction of seeds that train, by depth and learning rate, with and without BN"),),
            ),
            Section(
                "depth-lr-confirmatory", f"Confirmatory seeds: depth against learning rate ({len(CONFIRM_DEPTH_LR)} seeds)",
                f"{CONFIRMATORY}/mechanism/depth_lr/mnist.csv", "confirm-depth-lr",
            ),
        ),
        {
            f"{setup}_relu_d{d}": f"{name}, depth {d}"
            for setup, name in (("deep_mlp_bn", "BN"), ("deep_mlp", "no BN")) for d in (2, 4, 8, 16, 32, 64)
        },
        trains=False,  # the depth study's networks
        claims=("depth_lr",),
        # the accuracy on the first DEPTH_LR_TEST test images; the gradient ratios are outcomes too
        sweep_accuracy="test_acc_subset",
        stat_keys=("test_acc_subset", "diverged_at_step", "grad_ratio_init", "grad_ratio"),
        reproductions=(
            # Yang et al. 2019: "vanilla batch-normalized networks without skip connections are
            # not trainable at large depths", the sooner the larger the rate; without BN (He
            # initialization) the deep networks train. Six depths side by side in each run.
            Reproduction(
                "depth-lr", f"ReLU MLPs of depth 2 to 64 with and without BN at learning rates {', '.join(DEPTH_LR_GRID.split(','))}, {DEPTH_LR_STEPS:,} steps, 5 seeds (pilot); results/mechanism/depth_lr/",
                module="depth", data=("mnist",),
                stages=(tuple(
                    Job(s, (f"setup={s}", f"seed={','.join(map(str, SEEDS5))}", f"train.lr={DEPTH_LR_GRID}", *DEPTH_LR_RUN), sweep=True, estimate_s=2000)
                    for s in DEPTH_LR_SETUPS
                ),),
                collect=Collect(
                    "mechanism/depth_lr/mnist.csv", sweep=True,
                    curves="mechanism/depth_lr/mnist_curves.csv", curve_metrics=("test/acc_subset", "train/loss"),
                ),
                plots=(("plot_depth_lr",),),
            ),
            Reproduction(
                "confirm-depth-lr", f"confirmatory seeds of the depth x learning-rate rows: the pilot's grid, {len(CONFIRM_DEPTH_LR)} seeds; results/confirmatory/mechanism/depth_lr/",
                module="depth", data=("mnist",),
                stages=(tuple(
                    Job(f"{s}_{i}", (f"setup={s}", f"seed={','.join(map(str, chunk))}", f"train.lr={DEPTH_LR_GRID}", *DEPTH_LR_RUN), sweep=True, estimate_s=400 * len(chunk))
                    for s in DEPTH_LR_SETUPS for i, chunk in enumerate(_parts(CONFIRM_DEPTH_LR, 2))
                ),),
                collect=Collect(
                    f"{CONFIRMATORY}/mechanism/depth_lr/mnist.csv", sweep=True,
                    curves=f"{CONFIRMATORY}/mechanism/depth_lr/mnist_curves.csv", curve_metrics=("test/acc_subset", "train/loss"),
                ),
                seeds=CONFIRM_DEPTH_LR,
            ),
        ),
    ),
)  # fmt: skip


def _everyday(reproductions: tuple[Reproduction, ...]) -> tuple[str, ...]:
    """The reproductions ``reproduce-all`` runs: those of this machine's CPUs (no settings the
    command line must give, no ``torchrun``), not confirmatory, not a member of another one, and
    running something of their own (jobs or figures; a list of others alone is an alias)."""
    members = {m for r in reproductions for m in r.members}
    return tuple(
        r.name
        for r in reproductions
        if not (r.seeds or r.requires or r.distributed or r.name in members)
        and (r.stages or r.plots)
    )


_ALL = tuple(r for s in STUDIES for r in s.reproductions)
REPRODUCTIONS: dict[str, Reproduction] = {r.name: r for r in _ALL} | {
    "reproduce-all": Reproduction(
        "reproduce-all",
        "every study on this machine's CPUs (not the GPU-scale Inception), then the claims and the report",
        members=_everyday(_ALL),
        plots=(("claims",), ("report",)),
    ),
    "confirm-all": Reproduction(
        "confirm-all",
        "every confirmatory reproduction (the seeds the power calculation fixed), then the claims and the report",
        members=tuple(r.name for r in _ALL if r.seeds),
        plots=(("claims",), ("report",)),
    ),
}
TRAINING: tuple[str, ...] = tuple(s.name for s in STUDIES if s.trains)  # experiments.<name>
SECTIONS: dict[str, Section] = {s.anchor: s for study in STUDIES for s in study.sections}


def study_of_reproduction(name: str) -> Study:
    """The study whose record holds the reproduction ``name``."""
    return next(s for s in STUDIES if any(r.name == name for r in s.reproductions))


def study(name: str) -> Study:
    """The registry's record of the study ``name``."""
    return next(s for s in STUDIES if s.name == name)


def study_of(anchor: str) -> Study:
    """The study a section belongs to."""
    return next(study for study in STUDIES if any(s.anchor == anchor for s in study.sections))
