"""experiments/inception_fig3.py: the BN paper's Figure 3 from the BN-Inception study's runs (steps to
Inception's maximum, the converged protocol's speedups)."""

import json
import shutil
from pathlib import Path

import pytest

from experiments import inception_fig3
from experiments.kit import data
from scripts.analysis import steps_to_target

RESULTS = Path(__file__).resolve().parents[2] / "results" / "inception"
CONVERGED = RESULTS / "fashion_mnist_converged"


def test_steps_to_the_baselines_maximum():
    curves = {
        "inception": [(0, 0.1), (200, 0.5), (400, 0.7), (600, 0.68)],
        "bn_x5": [(0, 0.1), (200, 0.72), (400, 0.8), (600, 0.81)],
        "inception_sigmoid": [(0, 0.1), (200, 0.1), (400, 0.1), (600, 0.1)],
    }
    t = inception_fig3.summarize(curves, images_per_step=32, target=0.7)
    assert t["inception"]["steps_to_baseline_max"] == 400 and t["inception"]["max_acc"] == 0.7
    assert t["bn_x5"]["steps_to_baseline_max"] == 200 and t["bn_x5"]["speedup_vs_baseline"] == 2.0
    assert t["bn_x5"]["images_to_baseline_max"] == 6400 and t["bn_x5"]["step_of_max"] == 600
    assert t["inception_sigmoid"]["steps_to_baseline_max"] is None


def test_converged_speedups_and_their_range_over_seed_pairs():
    rows = [{"steps_to_target": s, "max_acc_subset": 0.8, "test_acc": 0.8} for s in (400, 600)]
    entry = inception_fig3.converged_entry(rows, base_steps=[3000, 2000])
    assert entry["steps_to_target"]["mean"] == 500 and entry["reached"] == "2/2"
    assert entry["speedup"] == 5.0 and entry["speedup_range"] == [3.33, 7.5]
    never = inception_fig3.converged_entry([rows[0], {**rows[1], "steps_to_target": None}], [3000])
    assert (
        never["steps_to_target"] is None and never["speedup"] is None and never["reached"] == "1/2"
    )
    assert (
        inception_fig3.stop_level([[(0, 0.1), (100, 0.8)], [(0, 0.1), (100, 0.75), (200, 0.7)]])
        == 0.75
    )


def test_the_target_is_the_claims_inception_maximum_below_the_stopping_level():
    inception = [[(0, 0.1), (100, 0.8), (200, 0.9), (300, 0.8)], [(0, 0.9), (100, 0.9), (200, 0.9)]]
    bn = [[(0, 0.1), (100, 0.6), (200, 0.9), (300, 0.9)]]
    curves = {"inception": inception, "bn_x5": bn}
    done = {"steps_done": 300, "diverged": False}
    rows = {k: [inception_fig3.seed_row(c, {"seed": i, **done}) for i, c in enumerate(cs)] for k, cs in curves.items()}  # fmt: skip
    settings = {"test_subset": 10, "eval_every": 100, "cap": 300, "classes": 10}
    c = inception_fig3.converged_figure(curves, rows, settings)
    # a centred moving average of 5 evaluations (fewer at the ends): seed 0 peaks at the last one
    assert c["target"] == steps_to_target.inception_max([dict(k) for k in inception])
    assert c["target"] == pytest.approx(2.5 / 3) and c["stop_target"] == 0.9
    assert [r["steps_to_target"] for r in c["setups"]["inception"]["seeds"]] == [200, 0]
    assert [r["steps_to_target"] for r in c["setups"]["bn_x5"]["seeds"]] == [200]


def test_an_inception_maximum_within_chance_is_no_target():
    """1,000 classes on 5,000 images: chance is 0.1% and its reach 0.1% + 4 x 0.045% = 0.28%.
    An Inception whose best smoothed evaluation is 0.2% gives no target and no steps to it; one at
    0.5% gives both."""
    assert steps_to_target.chance_ceiling(1000, 5000) == pytest.approx(0.001 + 4 * (0.001 * 0.999 / 5000) ** 0.5)  # fmt: skip
    settings = {"test_subset": 5000, "eval_every": 100, "cap": 300, "classes": 1000}
    done = {"steps_done": 300, "diverged": False}
    bn = [[(0, 0.001), (100, 0.1), (200, 0.3), (300, 0.4)]]
    for level, target in ((0.002, None), (0.005, 0.005)):
        inception = [[(s, level) for s in (0, 100, 200, 300)]] * 2
        curves = {"inception": inception, "bn_x30": bn}
        rows = {k: [inception_fig3.seed_row(c, {"seed": i, **done}) for i, c in enumerate(cs)] for k, cs in curves.items()}  # fmt: skip
        c = inception_fig3.converged_figure(curves, rows, settings)
        assert c["target"] == (None if target is None else pytest.approx(target))
        steps = [r["steps_to_target"] for r in c["setups"]["bn_x30"]["seeds"]]
        assert steps == ([None] if target is None else [100])
        assert ("is within chance's reach, 0.28%" in c["target_rule"]) == (target is None)
        summary = {"data": "mnist_triples", "width": 0.125, "global_batch": 32, "parameters": {"inception": 1}, "converged": c}  # fmt: skip
        table = inception_fig3.converged_table(summary)
        assert ("Target: none" in table) == (target is None)
        assert ("every arm 300 steps, Inception's maximum the target" in table) == (
            target is not None
        )


def test_the_classes_of_each_in_memory_dataset():
    assert [data.in_memory_classes(n) for n in ("mnist", "fashion_mnist", "mnist_triples", "image_folder")] == [10, 10, 1000, None]  # fmt: skip


def test_the_committed_figure3_and_the_claims_read_one_target():
    summary = json.loads((CONVERGED / "summary.json").read_text())
    assert summary["converged"]["target"] == steps_to_target.threshold(folder=CONVERGED)
    steps = steps_to_target.steps("bn_x30", summary["converged"]["target"], CONVERGED)
    rows = summary["converged"]["setups"]["bn_x30"]["seeds"]
    assert [r["steps_to_target"] for r in rows] == [steps[r["seed"]] for r in rows]


@pytest.mark.parametrize("name", ["fashion_mnist_converged", "fashion_mnist_cpu", "mnist_triples"])
def test_the_committed_figure3_is_what_its_collection_gives(name, tmp_path):
    """``refresh`` rebuilds a collection's Figure 3 from its summary.json and runs.csv: the
    committed files are what the current code makes of them."""
    shutil.copytree(RESULTS / name, tmp_path / name)
    inception_fig3.refresh(tmp_path / name)
    for file in ("summary.json", "fig3_table.md"):
        assert (tmp_path / name / file).read_text() == (RESULTS / name / file).read_text(), file


@pytest.mark.parametrize("stopped", ["plateau: gained less", "target: reached", ""])
def test_a_table_of_runs_to_their_plateaus_says_no_claim_reads_its_target(stopped):
    """Figure 3's confirmatory runs stop at their own plateaus: the table's target, derived from
    them, is the protocol's record; the paper's protocol stops the variants at that target."""
    curves = {"inception": [[(0, 0.1), (100, 0.8), (200, 0.9)]], "bn_x5": [[(0, 0.1), (100, 0.9)]]}
    # "": a fixed budget, one run to the cap and one diverged
    ends = {"inception": "plateau: flat" if stopped else "", "bn_x5": stopped}
    rows = {
        k: [inception_fig3.seed_row(c[0], {"seed": 0, "steps_done": 200, "diverged": k == "bn_x5", "stopped": ends[k]})]
        for k, c in curves.items()
    }  # fmt: skip
    settings = {"test_subset": 10, "eval_every": 100, "cap": 300, "classes": 10}
    summary = {
        "converged": inception_fig3.converged_figure(curves, rows, settings),
        "data": "fashion_mnist", "width": 0.125, "global_batch": 32,
        "parameters": {"inception": 1, "bn_x5": 2},
    }  # fmt: skip
    table = inception_fig3.converged_table(summary)
    assert ("every arm 300 steps" in table) == (not stopped)
    plateaus = stopped.startswith("plateau")
    assert ("every arm to its own plateau" in table) == plateaus
    assert ("so this table is the protocol's record and no claim reads it" in table) == plateaus
