"""scripts/profile_inception.py: each ATen operation charged to its kind, the bench's routes'
settings, the medians and ceilings it reports, and a profile of the three routes."""

import csv
import sys

import pytest

from scripts import bench_studies, profile_inception
from scripts.profile_inception import OUTSIDE, REST


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("aten::conv2d", "convolution"),
        ("aten::_convolution", "convolution"),
        ("aten::mkldnn_convolution", "convolution"),
        ("aten::convolution_backward", "convolution"),
        ("aten::batch_norm", "batch norm"),
        ("aten::native_batch_norm_backward", "batch norm"),
        ("aten::add", REST),
        ("aten::pow", REST),
    ],
)
def test_each_operation_is_charged_to_its_kind(op, expected):
    assert profile_inception.kind(op) == expected


def test_the_routes_take_the_bench_cases_settings_of_the_study():
    case = next(c for c in bench_studies.cases() if c.key == "inception")
    study, stacked = profile_inception.route_overrides(False), profile_inception.route_overrides(True)  # fmt: skip
    assert "setup=bn_baseline" in study and all(a in case.study for a in study)
    assert set(stacked) - set(study) == set(case.stacked[0])
    cfg = profile_inception.study_config(stacked)
    assert len(cfg.seed) == case.stacked[1] and cfg.model.fuse_reductions
    # Figure 3's evaluations: 5,000 test images every 100 steps, no training images
    assert profile_inception.eval_images_per_step(cfg) == 50


def _route(name, copies=1):
    return profile_inception.Route(name, copies, lambda: None, lambda: None, 1000, 50.0)


def test_the_medians_the_outside_time_and_the_ceilings():
    routes = [_route("study"), _route("stacked", 5), _route("peer")]

    def timed(train, evaluation):
        return {"train": train, "eval": evaluation, "cpu_train": train, "cpu_eval": evaluation}

    times = {
        "study": [timed(100, 40), timed(110, 50), timed(90, 45)],
        "stacked": [timed(80, 40)],
        "peer": [timed(120, 60)],
    }
    kinds = {
        "study": [{("train", "convolution"): c, ("train", REST): 20.0} for c in (50.0, 60.0, 40.0)],
        "stacked": [{("train", "convolution"): 45.0, ("eval", "convolution"): 15.0}],
        "peer": [{("train", "convolution"): 40.0}],
    }
    rows, ms, conv = profile_inception.summarize(routes, times, kinds)
    cell = {(r["route"], r["phase"], r["kind"]): r for r in rows}
    assert cell[("study", "train", "convolution")]["profiled_ms_per_run_step"] == 50.0
    assert cell[("study", "train", OUTSIDE)]["profiled_ms_per_run_step"] == 100 - 50 - 20
    assert cell[("study", "eval", OUTSIDE)]["profiled_ms_per_run_step"] == 45
    assert ms == {"study": 145, "stacked": 120, "peer": 180} and conv["stacked"] == 60
    ceiling = profile_inception.ceilings(ms, conv)
    assert ceiling["ceiling_peer_over_stacked"] == 3.0
    assert ceiling["ceiling_peer_over_own_convolutions"] == 180 / 50


@pytest.mark.slow
def test_the_profile_covers_every_route_and_every_kind(tmp_path, monkeypatch):
    argv = ["profile_inception", "--steps", "1", "--rounds", "1", "--test-images", "40", "--out", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    profile_inception.main()
    rows = list(csv.DictReader((tmp_path / "inception_profile_cpu.csv").open()))
    kinds = (*profile_inception.KINDS, REST, OUTSIDE)
    cells = {(r["route"], r["phase"], r["kind"]) for r in rows}
    assert cells == {(route, phase, k) for route in ("study", "stacked", "peer") for phase in ("train", "eval") for k in kinds}  # fmt: skip
    assert {r["seeds_side_by_side"] for r in rows if r["route"] == "stacked"} == {"5"}
    for r in rows:
        if r["kind"] in ("convolution", "batch norm"):
            assert float(r["profiled_ms_per_run_step"]) > 0, r
