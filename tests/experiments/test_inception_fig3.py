"""experiments/inception_fig3.py: the BN paper's Figure 3 from the BN-Inception study's runs (steps to
Inception's maximum, the converged protocol's speedups)."""

from experiments import inception_fig3


def test_steps_to_the_baselines_maximum():
    curves = {
        "inception": [(0, 0.1), (200, 0.5), (400, 0.7), (600, 0.68)],
        "bn_x5": [(0, 0.1), (200, 0.72), (400, 0.8), (600, 0.81)],
        "inception_sigmoid": [(0, 0.1), (200, 0.1), (400, 0.1), (600, 0.1)],
    }
    t = inception_fig3.summarize(curves, images_per_step=32)
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
        inception_fig3.threshold_of([[(0, 0.1), (100, 0.8)], [(0, 0.1), (100, 0.75), (200, 0.7)]])
        == 0.75
    )
